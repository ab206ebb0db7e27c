/*
 * untar.h - the safe extractor.  Every archive the program unpacks (Flux
 * artifacts, OCI layers, the `unpack` command) goes through here.
 *
 * Accepted input: tar (ustar, pax, GNU) compressed with gzip, zstd or not at
 * all.  Everything else libarchive could read (zip, cpio, 7z, ...) is
 * refused.  The whole archive is extracted into a staging directory and only
 * renamed into place once every entry passed; on any violation nothing is
 * left behind and the error (ERR_REFUSED, ERR_LIMIT, ERR_UNSUPPORTED; a
 * damaged or truncated archive is ERR_INVALID) names the entry and the
 * rule, e.g.
 *     archive entry "a/../../x": refused: path contains a ".." component
 *
 * Rules.  Refused: absolute names, any ".." component, empty names, names
 * longer than PATH_MAX; device nodes, FIFOs and sockets; a symlink that is
 * absolute or resolves outside the root (following symlinks made earlier by
 * the same archive); a hardlink whose target is not an earlier regular file
 * of the archive; writing through a symlink; an entry that replaces a
 * directory with something else.  Kept: regular files, directories, relative
 * symlinks that stay inside the root, hardlinks to earlier files.  setuid,
 * setgid and sticky bits are dropped; ownership is never taken from the
 * archive; directories always get owner rwx.  Only types that match may
 * replace each other: a later regular file (or hardlink) replaces an earlier
 * regular file (unlinked first, so its other hardlinks keep their content),
 * a directory listed again only updates its mode; everything else is
 * refused.  A "." entry sets the mode of the root itself.
 *
 * Limits (-1 = unlimited) are counted from bytes actually written, not from
 * header sizes, so a lying header cannot get around them (sparse holes and
 * data skipped by non-file entries count as written).  The rules and their
 * messages are listed in docs/unpack.md.
 */
#ifndef PC_UNTAR_H
#define PC_UNTAR_H

#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

#define UNTAR_DEFAULT_MAX_TOTAL   (100LL << 20)   /* 100 MiB, as Flux */
#define UNTAR_DEFAULT_MAX_ENTRIES 100000LL

struct untar_limits {
	int64_t max_total_bytes;   /* sum of bytes written; default 100 MiB */
	int64_t max_entries;       /* entries of any type; default 100,000 */
	int64_t max_file_bytes;    /* one file; default -1 (only the total applies) */
	/* Not a limit but a stop: when set, a non-zero value (from another
	 * thread or a signal handler) ends the extraction at the next input
	 * chunk with ERR_CANCELED.  Default NULL. */
	const volatile int *cancel;
};

void untar_limits_default(struct untar_limits *l);

struct untar_stats {
	int64_t entries;
	int64_t files;
	int64_t bytes_written;
};

/*
 * Pull callback for compressed input: sets *buf to the next chunk (owned by
 * the callee, valid until the next call) and returns its length, 0 at end of
 * input, -1 on error with e set (the error is reported as is).
 */
typedef ssize_t (*untar_read_fn)(void *ud, const void **buf, struct err *e);

/*
 * Extracts an archive read through `read` into `dir`, which must exist and be
 * empty (normally a staging directory).  On failure the contents of `dir`
 * are in an undefined state: the caller removes it.  The extractor may stop
 * reading before the end of the input (after the end-of-archive marker); a
 * caller that hashes the input must drain the rest itself.
 * `stats` may be NULL.
 */
int untar_into_dir(untar_read_fn read, void *ud, const char *dir,
    const struct untar_limits *limits, struct untar_stats *stats, struct err *e);

/*
 * Extracts the archive file at `path` to `dest`, which must not exist:
 * staging beside dest, then an atomic rename.  On failure dest does not
 * exist and no staging is left.
 */
int untar_file(const char *path, const char *dest,
    const struct untar_limits *limits, struct untar_stats *stats, struct err *e);

/*
 * As untar_file, and the archive file's bytes must hash to `want` (digest.h;
 * NULL skips the check).  The file is read once: it is hashed while it is
 * extracted and what the extractor leaves unread is drained into the hash;
 * on a mismatch nothing is renamed into place and the error is ERR_DIGEST
 * (also when the content was refused too: the wrong file is the diagnosis).
 */
struct digest;
int untar_file_verified(const char *path, const char *dest, const struct digest *want,
    const struct untar_limits *limits, struct untar_stats *stats, struct err *e);

/*
 * Validates one entry name against the path rules (exposed for tests).
 * Returns 0 when acceptable, else -1 with e naming the rule.
 */
int untar_check_name(const char *name, struct err *e);

#endif
