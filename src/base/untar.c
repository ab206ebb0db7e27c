/*
 * untar.c - the safe extractor (see untar.h for the contract and the rules).
 *
 * libarchive only parses: its reader is restricted to the tar format and the
 * gzip/zstd filters, and every byte lands on disk through this file's own
 * *at() calls relative to a directory fd of the extraction root.  Nothing is
 * ever opened by a multi-component path: parent directories are walked one
 * component at a time with O_NOFOLLOW, so a symlink made by the archive can
 * never redirect a write (archive_write_disk is deliberately not used: its
 * safety flags are hard to prove complete).
 *
 * The filesystem under the root is the model of "what the archive made so
 * far": the root starts empty and only this code writes there, so lstat of
 * an in-root path answers "is this an earlier directory / file / symlink of
 * the archive".  Types are permanent once created, except that a regular
 * file may be replaced by a later regular file or hardlink (tar semantics);
 * that permanence is what makes the lexical symlink check below sound.
 */
#include "base/untar.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"

#define UNTAR_MAX_SYMLINK_HOPS 40      /* as the kernel's MAXSYMLINKS */
#define UNTAR_PRINT_MAX        160     /* bytes of an entry name in messages */
#define UNTAR_IMPLICIT_DIR_MODE 0750   /* parents the archive did not list, as Flux */
#define UNTAR_FILE_READ_CHUNK  (128 * 1024)

void untar_limits_default(struct untar_limits *l)
{
	l->max_total_bytes = UNTAR_DEFAULT_MAX_TOTAL;
	l->max_entries = UNTAR_DEFAULT_MAX_ENTRIES;
	l->max_file_bytes = -1;
	l->cancel = NULL;
}

/* ---- printing names ------------------------------------------------------ */

/*
 * Makes an archive-supplied string safe for a one-line message: control and
 * non-ASCII bytes become \xNN, quotes and backslashes are escaped, and the
 * result is cut at UNTAR_PRINT_MAX bytes with "..." appended (log_escape).
 */
static void printable(const char *s, char *out, size_t outlen)
{
	size_t n = outlen < UNTAR_PRINT_MAX + 4 ? outlen : UNTAR_PRINT_MAX + 4;

	log_escape(s, out, n, LOG_ESC_QUOTES | LOG_ESC_BYTES);
}

#define PRINTABLE_BUF (UNTAR_PRINT_MAX + 8)

static int entry_error(struct err *e, enum err_code code, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Formats `archive entry "<name>": <rest>`; always returns -1. */
static int entry_error(struct err *e, enum err_code code, const char *name, const char *fmt, ...)
{
	char shown[PRINTABLE_BUF], rest[ERR_MSG_MAX];
	va_list ap;

	printable(name, shown, sizeof(shown));
	va_start(ap, fmt);
	vsnprintf(rest, sizeof(rest), fmt, ap);
	va_end(ap);
	return err_set(e, code, "archive entry \"%s\": %s", shown, rest);
}

/* The longest entry name: PATH_MAX less 1 KiB for the directories the tree
 * is extracted under (the store, a workspace). */
#define UNTAR_MAX_NAME (PATH_MAX - 1024)

/* ---- names --------------------------------------------------------------- */

/*
 * Checks `name` against the path rules and writes its normal form to `out`
 * (PATH_MAX bytes): components joined by one '/', without "." or empty
 * components; "" is the root itself ("." and "./" in Flux tarballs).
 * `what` says which name is checked ("path", "hardlink target").
 */
static int normalize_name(const char *entry, const char *name, const char *what,
    char *out, struct err *e)
{
	size_t len, n = 0;
	const char *p;

	if (name == NULL)
		return entry_error(e, ERR_REFUSED, entry, "refused: %s cannot be decoded", what);
	len = strlen(name);
	if (len == 0)
		return entry_error(e, ERR_REFUSED, entry, "refused: empty %s", what);
	/* The tree lands under the store's own directories: a name near PATH_MAX
	 * would make paths no tool can open or remove (found by fuzz_untar). */
	if (len > UNTAR_MAX_NAME)
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: %s is longer than %d bytes (PATH_MAX less room for the store's "
		    "directories; %zu bytes)", what, UNTAR_MAX_NAME, len);
	if (name[0] == '/')
		return entry_error(e, ERR_REFUSED, entry, "refused: absolute %s", what);
	for (p = name; *p != '\0';) {
		const char *end = strchr(p, '/');
		size_t clen = end != NULL ? (size_t)(end - p) : strlen(p);

		if (clen == 2 && p[0] == '.' && p[1] == '.')
			return entry_error(e, ERR_REFUSED, entry,
			    "refused: %s contains a \"..\" component", what);
		if (clen > NAME_MAX)
			return entry_error(e, ERR_REFUSED, entry,
			    "refused: %s has a component longer than %d bytes", what, NAME_MAX);
		if (clen > 0 && !(clen == 1 && p[0] == '.')) {
			if (n > 0)
				out[n++] = '/';
			memcpy(out + n, p, clen);
			n += clen;
		}
		p += clen;
		if (*p == '/')
			p++;
	}
	out[n] = '\0';
	return 0;
}

int untar_check_name(const char *name, struct err *e)
{
	char norm[PATH_MAX];

	return normalize_name(name, name, "path", norm, e);
}

/* Splits a normal-form path in place into parent ("" for the root) and leaf. */
static void split_parent(char *rel, const char **parent, const char **leaf)
{
	char *slash = strrchr(rel, '/');

	if (slash == NULL) {
		*parent = "";
		*leaf = rel;
	} else {
		*slash = '\0';
		*parent = rel;
		*leaf = slash + 1;
	}
}

/* ---- extraction state ---------------------------------------------------- */

struct reader {
	untar_read_fn read;
	void *ud;
	struct err err;              /* set when the callback itself failed */
	int failed;
	unsigned char head[16];      /* the first input bytes, to name foreign formats */
	size_t head_len;
	int64_t total_in;
	const volatile int *cancel;  /* from the limits */
};

struct ctx {
	struct archive *a;
	int root_fd;                 /* the extraction root, owned */
	const struct untar_limits *lim;
	struct untar_stats st;
	/* One-slot cache of the last parent directory: tar entries come in tree
	 * order, so consecutive entries nearly always share a parent. */
	char cache_rel[PATH_MAX];
	int cache_fd;                /* owned; -1 when empty */
};

static const char *kind_name(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISREG(m))
		return "a regular file";
	if (S_ISLNK(m))
		return "a symlink";
	return "a special file";
}

/*
 * Opens the directory comp under fd (walked is the in-root path so far, for
 * messages), creating it when missing and `create` is set, refusing a
 * symlink or a non-directory.  A new fd the caller closes, or -1 + e; fd
 * stays open either way.
 */
static int open_component(int fd, const char *entry, const char *comp, const char *walked, int create,
    struct err *e)
{
	char shown[PRINTABLE_BUF];
	struct stat sb;
	int next;

	if (fstatat(fd, comp, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		int saved = errno;

		if (saved == ENOENT && !create)
			return entry_error(e, ERR_REFUSED, entry, "refused: \"%s\" does not exist", walked);
		if (saved != ENOENT)
			return entry_error(e, ERR_IO, entry, "stat %s: %s", walked, strerror(saved));
		if (mkdirat(fd, comp, 0700) < 0)
			return entry_error(e, ERR_IO, entry, "mkdir %s: %s", walked, strerror(errno));
		next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next >= 0 && fchmod(next, UNTAR_IMPLICIT_DIR_MODE) < 0) {
			saved = errno;
			close(next);
			return entry_error(e, ERR_IO, entry, "chmod %s: %s", walked, strerror(saved));
		}
	} else if (S_ISLNK(sb.st_mode)) {
		printable(walked, shown, sizeof(shown));
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: writing through a symlink (\"%s\" is a symlink)", shown);
	} else if (!S_ISDIR(sb.st_mode)) {
		printable(walked, shown, sizeof(shown));
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: parent \"%s\" is %s, not a directory", shown, kind_name(sb.st_mode));
	} else {
		next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (next < 0)
		return entry_error(e, ERR_IO, entry, "open %s: %s", walked, strerror(errno));
	return next;
}

/*
 * Returns a borrowed fd (owned by the cache) of the in-root directory `rel`,
 * walking one component at a time without following symlinks.  Missing
 * components are created when `create` is set (mode 0750 as Flux does).
 */
static int open_dir(struct ctx *c, const char *entry, const char *rel, int create, struct err *e)
{
	char walked[PATH_MAX];
	const char *p = rel;
	size_t wn = 0;
	int fd;

	if (rel[0] == '\0')
		return c->root_fd;
	if (c->cache_fd >= 0 && strcmp(c->cache_rel, rel) == 0)
		return c->cache_fd;
	fd = dup(c->root_fd);
	if (fd < 0)
		return entry_error(e, ERR_IO, entry, "dup: %s", strerror(errno));
	while (*p != '\0') {
		const char *end = strchr(p, '/');
		size_t clen = end != NULL ? (size_t)(end - p) : strlen(p);
		char comp[NAME_MAX + 1];
		int next;

		memcpy(comp, p, clen);
		comp[clen] = '\0';
		if (wn > 0)
			walked[wn++] = '/';
		memcpy(walked + wn, comp, clen);
		wn += clen;
		walked[wn] = '\0';
		p += clen + (end != NULL);

		next = open_component(fd, entry, comp, walked, create, e);
		close(fd);
		if (next < 0)
			return -1;
		fd = next;
	}
	if (c->cache_fd >= 0)
		close(c->cache_fd);
	c->cache_fd = fd;
	snprintf(c->cache_rel, sizeof(c->cache_rel), "%s", rel);
	return fd;
}

/* lstat of a leaf; returns 0 with *exists set, or -1 on an unexpected error. */
static int stat_leaf(int dirfd, const char *entry, const char *leaf, struct stat *sb, int *exists,
    struct err *e)
{
	if (fstatat(dirfd, leaf, sb, AT_SYMLINK_NOFOLLOW) == 0) {
		*exists = 1;
		return 0;
	}
	if (errno == ENOENT) {
		*exists = 0;
		return 0;
	}
	return entry_error(e, ERR_IO, entry, "stat: %s", strerror(errno));
}

/* Refuses replacing an earlier entry of another type (only regular files may
 * be replaced, by regular files; directories may be listed again). */
static int check_replace(const char *entry, const struct stat *old, mode_t want, struct err *e)
{
	if (S_ISDIR(old->st_mode) && S_ISDIR(want))
		return 0;
	if (S_ISREG(old->st_mode) && S_ISREG(want))
		return 0;
	if (S_ISDIR(old->st_mode))
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: replaces a directory with %s", kind_name(want));
	if (S_ISLNK(old->st_mode))
		return entry_error(e, ERR_REFUSED, entry, "refused: would overwrite a symlink");
	return entry_error(e, ERR_REFUSED, entry, "refused: replaces %s with %s",
	    kind_name(old->st_mode), kind_name(want));
}

/* ---- limits -------------------------------------------------------------- */

/* Accounts `more` bytes about to be written to the current file (which has
 * `file_bytes` already); refuses before anything past a limit is written. */
static int charge_bytes(struct ctx *c, const char *entry, int64_t file_bytes, int64_t more,
    struct err *e)
{
	const struct untar_limits *l = c->lim;

	if (l->max_file_bytes >= 0 && (more > l->max_file_bytes - file_bytes))
		return entry_error(e, ERR_LIMIT, entry,
		    "exceeds the limit of %lld bytes for one file", (long long)l->max_file_bytes);
	if (l->max_total_bytes >= 0 && (more > l->max_total_bytes - c->st.bytes_written))
		return entry_error(e, ERR_LIMIT, entry,
		    "exceeds the limit of %lld bytes in total", (long long)l->max_total_bytes);
	c->st.bytes_written += more;
	return 0;
}

/* ---- entry kinds --------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/*
 * Copies the entry's data into fd.  Sparse holes, including a trailing one
 * up to the entry's size (libarchive reports no block for it), count as
 * written bytes: what a header claims never escapes the limits.
 */
static int copy_data(struct ctx *c, const char *entry, int fd, int64_t size_hint, struct err *e)
{
	int64_t pos = 0;
	int holes = 0;

	for (;;) {
		const void *buf;
		size_t size;
		la_int64_t offset;
		int r = archive_read_data_block(c->a, &buf, &size, &offset);

		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
			return entry_error(e, ERR_INVALID, entry, "damaged archive: %s",
			    archive_error_string(c->a) ? archive_error_string(c->a) : "read error");
		if (offset < pos || (uint64_t)size > (uint64_t)INT64_MAX - (uint64_t)offset)
			return entry_error(e, ERR_INVALID, entry, "damaged archive: data blocks out of order");
		if (charge_bytes(c, entry, pos, (offset - pos) + (int64_t)size, e) < 0)
			return -1;
		holes |= offset > pos;
		if (size > 0 && write_all(fd, buf, size, (off_t)offset) < 0)
			return entry_error(e, ERR_IO, entry, "write: %s", strerror(errno));
		pos = offset + (int64_t)size;
	}
	if (size_hint > pos) {
		if (charge_bytes(c, entry, pos, size_hint - pos, e) < 0)
			return -1;
		pos = size_hint;
		holes = 1;
	}
	if (holes && ftruncate(fd, (off_t)pos) < 0)
		return entry_error(e, ERR_IO, entry, "truncate: %s", strerror(errno));
	return 0;
}

static int extract_dir(struct ctx *c, const char *entry, const char *parent, const char *leaf,
    mode_t perm, struct err *e)
{
	struct stat sb;
	int dfd, fd, exists;
	mode_t mode = (perm & 0777) | 0700;

	if (leaf[0] == '\0') {
		/* The root entry ("." in Flux tarballs) sets the root's mode. */
		if (fchmod(c->root_fd, mode) < 0)
			return entry_error(e, ERR_IO, entry, "chmod: %s", strerror(errno));
		return 0;
	}
	dfd = open_dir(c, entry, parent, 1, e);
	if (dfd < 0 || stat_leaf(dfd, entry, leaf, &sb, &exists, e) < 0)
		return -1;
	if (exists && check_replace(entry, &sb, S_IFDIR, e) < 0)
		return -1;
	if (!exists && mkdirat(dfd, leaf, 0700) < 0)
		return entry_error(e, ERR_IO, entry, "mkdir: %s", strerror(errno));
	fd = openat(dfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return entry_error(e, ERR_IO, entry, "open: %s", strerror(errno));
	if (fchmod(fd, mode) < 0) {
		int saved = errno;
		close(fd);
		return entry_error(e, ERR_IO, entry, "chmod: %s", strerror(saved));
	}
	close(fd);
	return 0;
}

/*
 * The mode a new file gets from openat(..., 0600): 0600 less the umask.  The
 * umask cannot be read without setting it, which would race with other
 * threads, so it comes from /proc; -1 (always fchmod) when unknown.
 */
static int created_file_mode(void)
{
	static int cached = -2;
	char line[128];
	FILE *f;

	if (__atomic_load_n(&cached, __ATOMIC_RELAXED) != -2)
		return cached;
	int mode = -1;
	if ((f = fopen("/proc/self/status", "re")) != NULL) {
		while (fgets(line, sizeof(line), f) != NULL) {
			unsigned int um;
			if (sscanf(line, "Umask: %o", &um) == 1) {
				mode = (int)(0600 & ~um);
				break;
			}
		}
		fclose(f);
	}
	__atomic_store_n(&cached, mode, __ATOMIC_RELAXED);
	return mode;
}

/* O_EXCL create; an existing name is checked and replaced only if it is an
 * earlier regular file. */
static int create_file(struct ctx *c, const char *entry, int dfd, const char *leaf, struct err *e)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	struct stat sb;
	int fd, exists;

	fd = openat(dfd, leaf, flags, 0600);
	if (fd >= 0 || errno != EEXIST) {
		if (fd < 0)
			return entry_error(e, ERR_IO, entry, "create: %s", strerror(errno));
		return fd;
	}
	if (stat_leaf(dfd, entry, leaf, &sb, &exists, e) < 0)
		return -1;
	if (exists) {
		if (check_replace(entry, &sb, S_IFREG, e) < 0)
			return -1;
		/* Unlink rather than truncate: the old name may be a hardlink
		 * whose other name must keep its content. */
		if (unlinkat(dfd, leaf, 0) < 0)
			return entry_error(e, ERR_IO, entry, "unlink: %s", strerror(errno));
	}
	fd = openat(dfd, leaf, flags, 0600);
	if (fd < 0)
		return entry_error(e, ERR_IO, entry, "create: %s", strerror(errno));
	return fd;
}

static int extract_file(struct ctx *c, struct archive_entry *ae, const char *entry,
    const char *parent, const char *leaf, struct err *e)
{
	mode_t perm = archive_entry_perm(ae) & 0777;
	int dfd, fd;

	dfd = open_dir(c, entry, parent, 1, e);
	if (dfd < 0)
		return -1;
	fd = create_file(c, entry, dfd, leaf, e);
	if (fd < 0)
		return -1;
	if (copy_data(c, entry, fd, archive_entry_size(ae), e) < 0) {
		close(fd);
		return -1;
	}
	/* setuid, setgid and sticky are dropped; umask does not apply.  Most
	 * artifact files are 0600 and already have their mode. */
	if ((int)perm != created_file_mode() && fchmod(fd, perm) < 0) {
		int saved = errno;
		close(fd);
		return entry_error(e, ERR_IO, entry, "chmod: %s", strerror(saved));
	}
	if (close(fd) < 0)
		return entry_error(e, ERR_IO, entry, "close: %s", strerror(errno));
	c->st.files++;
	return 0;
}

/* Cuts the last component off the in-root path cur; its new length. */
static size_t cut_last_component(char *cur)
{
	char *slash = strrchr(cur, '/');
	size_t cn = slash != NULL ? (size_t)(slash - cur) : 0;

	cur[cn] = '\0';
	return cn;
}

/* ".." in a symlink target: steps cur (of *cn bytes) up one directory,
 * which must be a directory already in the tree (see below). */
static int step_up(struct ctx *c, const char *entry, char *cur, size_t *cn, const char *shown,
    struct err *e)
{
	struct stat sb;

	if (*cn == 0)
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: symlink target \"%s\" resolves outside the root", shown);
	if (fstatat(c->root_fd, cur, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(sb.st_mode))
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: symlink target \"%s\" uses \"..\" after a component that is not "
		    "an earlier directory of the archive", shown);
	*cn = cut_last_component(cur);
	return 0;
}

/* cur names an earlier symlink of the archive: rest becomes its target
 * followed by what is left of ours (*p, which restarts at rest), and cur
 * the directory that holds it.  *hops counts the symlinks followed. */
static int follow_earlier_link(struct ctx *c, const char *entry, char *cur, size_t *cn, char *rest,
    size_t rest_size, char **p, int *hops, const char *shown, struct err *e)
{
	char link[PATH_MAX], joined[2 * PATH_MAX];
	ssize_t ln;

	if (++*hops > UNTAR_MAX_SYMLINK_HOPS)
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: symlink target \"%s\" follows more than %d symlinks", shown,
		    UNTAR_MAX_SYMLINK_HOPS);
	ln = readlinkat(c->root_fd, cur, link, sizeof(link) - 1);
	if (ln <= 0)
		return entry_error(e, ERR_IO, entry, "readlink: %s", strerror(errno));
	link[ln] = '\0';
	if (link[0] == '/')
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: symlink target \"%s\" passes through an absolute symlink", shown);
	if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", link, *p) >= sizeof(joined))
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: symlink target \"%s\" is too long once resolved", shown);
	memcpy(rest, joined, rest_size);
	*p = rest;
	*cn = cut_last_component(cur);
	return 0;
}

/*
 * Resolves the symlink target `target` placed in directory `parent`
 * lexically against the tree made so far, following the archive's earlier
 * symlinks; refuses when it leaves the root.  ".." may only step out of a
 * component that already is a directory: directories are permanent, so the
 * kernel will later resolve it the same way, whereas a component that does
 * not exist yet could still become a symlink and change what ".." means.
 * The multi-component lookups below only read (lstat, readlink), and every
 * intermediate component of `cur` is a real directory: a symlink met on the
 * way is replaced by its target before anything is appended after it.
 */
static int check_symlink_target(struct ctx *c, const char *entry, const char *parent,
    const char *target, struct err *e)
{
	char cur[PATH_MAX], rest[2 * PATH_MAX], shown[PRINTABLE_BUF];
	size_t cn = strlen(parent);
	int hops = 0;
	char *p;

	printable(target, shown, sizeof(shown));
	if (target[0] == '\0')
		return entry_error(e, ERR_REFUSED, entry, "refused: symlink with an empty target");
	if (strlen(target) >= PATH_MAX)
		return entry_error(e, ERR_REFUSED, entry, "refused: symlink target longer than PATH_MAX");
	if (target[0] == '/')
		return entry_error(e, ERR_REFUSED, entry, "refused: absolute symlink target \"%s\"", shown);
	memcpy(cur, parent, cn + 1);
	snprintf(rest, sizeof(rest), "%s", target);
	p = rest;
	while (*p != '\0') {
		char *end = strchr(p, '/');
		size_t clen = end != NULL ? (size_t)(end - p) : strlen(p);
		char comp[NAME_MAX + 1];
		struct stat sb;

		if (clen > NAME_MAX)
			return entry_error(e, ERR_REFUSED, entry,
			    "refused: symlink target \"%s\" has a component longer than %d bytes", shown, NAME_MAX);
		memcpy(comp, p, clen);
		comp[clen] = '\0';
		p += clen + (end != NULL);
		if (clen == 0 || strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) {
			if (step_up(c, entry, cur, &cn, shown, e) < 0)
				return -1;
			continue;
		}
		if (cn + 1 + clen >= sizeof(cur))
			return entry_error(e, ERR_REFUSED, entry, "refused: symlink target \"%s\" is too long", shown);
		if (cn > 0)
			cur[cn++] = '/';
		memcpy(cur + cn, comp, clen + 1);
		cn += clen;
		if (fstatat(c->root_fd, cur, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode) &&
		    follow_earlier_link(c, entry, cur, &cn, rest, sizeof(rest), &p, &hops, shown, e) < 0)
			return -1;
	}
	return 0;
}

static int extract_symlink(struct ctx *c, const char *entry, const char *parent, const char *leaf,
    const char *target, struct err *e)
{
	struct stat sb;
	int dfd, exists;

	if (target == NULL)
		return entry_error(e, ERR_REFUSED, entry, "refused: symlink target cannot be decoded");
	dfd = open_dir(c, entry, parent, 1, e);
	if (dfd < 0 || stat_leaf(dfd, entry, leaf, &sb, &exists, e) < 0)
		return -1;
	if (exists)
		return check_replace(entry, &sb, S_IFLNK, e);
	if (check_symlink_target(c, entry, parent, target, e) < 0)
		return -1;
	if (symlinkat(target, dfd, leaf) < 0)
		return entry_error(e, ERR_IO, entry, "symlink: %s", strerror(errno));
	return 0;
}

static int extract_hardlink(struct ctx *c, const char *entry, char *rel, const char *linkname,
    struct err *e)
{
	char target[PATH_MAX], shown[PRINTABLE_BUF];
	const char *tparent, *tleaf, *parent, *leaf;
	struct stat sb;
	int tfd, dfd, exists, rc;

	if (normalize_name(entry, linkname, "hardlink target", target, e) < 0)
		return -1;
	printable(linkname, shown, sizeof(shown));
	if (target[0] == '\0' || strcmp(target, rel) == 0)
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: hardlink target \"%s\" is not an earlier regular file", shown);
	split_parent(target, &tparent, &tleaf);
	tfd = open_dir(c, entry, tparent, 0, e);
	if (tfd < 0) {
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: hardlink target \"%s\" is not an earlier regular file", shown);
	}
	if (fstatat(tfd, tleaf, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode))
		return entry_error(e, ERR_REFUSED, entry,
		    "refused: hardlink target \"%s\" is not an earlier regular file", shown);
	tfd = dup(tfd);   /* the cache slot is about to be reused for our parent */
	if (tfd < 0)
		return entry_error(e, ERR_IO, entry, "dup: %s", strerror(errno));
	split_parent(rel, &parent, &leaf);
	rc = -1;
	dfd = open_dir(c, entry, parent, 1, e);
	if (dfd < 0 || stat_leaf(dfd, entry, leaf, &sb, &exists, e) < 0)
		goto out;
	if (exists) {
		if (check_replace(entry, &sb, S_IFREG, e) < 0)
			goto out;
		if (unlinkat(dfd, leaf, 0) < 0) {
			entry_error(e, ERR_IO, entry, "unlink: %s", strerror(errno));
			goto out;
		}
	}
	/* flags 0: linkat never follows a symlink in the last component. */
	if (linkat(tfd, tleaf, dfd, leaf, 0) < 0) {
		entry_error(e, ERR_IO, entry, "link: %s", strerror(errno));
		goto out;
	}
	c->st.files++;
	rc = 0;
out:
	close(tfd);
	return rc;
}

static int extract_entry(struct ctx *c, struct archive_entry *ae, struct err *e)
{
	const char *name = archive_entry_pathname(ae);
	const char *hardlink = archive_entry_hardlink(ae);
	mode_t type = archive_entry_filetype(ae);
	mode_t perm = archive_entry_perm(ae);
	char rel[PATH_MAX];
	const char *parent, *leaf;

	c->st.entries++;
	if (c->lim->max_entries >= 0 && c->st.entries > c->lim->max_entries)
		return entry_error(e, ERR_LIMIT, name, "exceeds the limit of %lld entries",
		    (long long)c->lim->max_entries);
	if (normalize_name(name, name, "path", rel, e) < 0)
		return -1;
	/* Data carried by an entry that is not a regular file (a hardlink, a
	 * directory, a symlink) is skipped, not written, but it still counts:
	 * otherwise it would be a way to make us decompress without limit. */
	if ((hardlink != NULL || type != AE_IFREG) && archive_entry_size_is_set(ae) &&
	    archive_entry_size(ae) > 0 && charge_bytes(c, name, 0, archive_entry_size(ae), e) < 0)
		return -1;
	if (hardlink != NULL) {
		if (rel[0] == '\0')
			return entry_error(e, ERR_REFUSED, name, "refused: replaces the root directory");
		return extract_hardlink(c, name, rel, hardlink, e);
	}
	if (rel[0] == '\0' && type != AE_IFDIR)
		return entry_error(e, ERR_REFUSED, name, "refused: replaces the root directory");
	split_parent(rel, &parent, &leaf);
	switch (type) {
	case AE_IFDIR:
		return extract_dir(c, name, parent, leaf, perm, e);
	case AE_IFREG:
		return extract_file(c, ae, name, parent, leaf, e);
	case AE_IFLNK:
		return extract_symlink(c, name, parent, leaf, archive_entry_symlink(ae), e);
	case AE_IFCHR:
	case AE_IFBLK:
		return entry_error(e, ERR_REFUSED, name, "refused: device node");
	case AE_IFIFO:
		return entry_error(e, ERR_REFUSED, name, "refused: FIFO");
	case AE_IFSOCK:
		return entry_error(e, ERR_REFUSED, name, "refused: socket");
	default:
		return entry_error(e, ERR_UNSUPPORTED, name, "refused: unsupported entry type 0%o",
		    (unsigned)type);
	}
}

/* ---- reading ------------------------------------------------------------- */

static la_ssize_t reader_cb(struct archive *a, void *ud, const void **buf)
{
	struct reader *r = ud;
	ssize_t n;

	if (r->cancel != NULL && *r->cancel != 0) {
		r->failed = 1;
		err_set(&r->err, ERR_CANCELED, "extraction canceled");
		archive_set_error(a, ECANCELED, "canceled");
		return -1;
	}
	n = r->read(r->ud, buf, &r->err);
	if (n < 0) {
		r->failed = 1;
		archive_set_error(a, EIO, "input read failed");
		return -1;
	}
	if (r->head_len < sizeof(r->head) && n > 0) {
		size_t k = sizeof(r->head) - r->head_len;
		if (k > (size_t)n)
			k = (size_t)n;
		memcpy(r->head + r->head_len, *buf, k);
		r->head_len += k;
	}
	r->total_in += n;
	return n;
}

/* Names well-known formats from their magic, for a clearer refusal. */
static const char *foreign_format(const struct reader *r)
{
	static const struct { const char *magic; size_t len; const char *name; } m[] = {
		{ "PK\x03\x04", 4, "zip" }, { "PK\x05\x06", 4, "zip" },
		{ "070701", 6, "cpio" }, { "070702", 6, "cpio" }, { "070707", 6, "cpio" },
		{ "\xc7\x71", 2, "cpio" }, { "\x71\xc7", 2, "cpio" },
		{ "7z\xbc\xaf\x27\x1c", 6, "7z" }, { "!<arch>\n", 8, "ar" },
		{ "Rar!", 4, "rar" }, { "BZh", 3, "bzip2" }, { "\xfd" "7zXZ", 5, "xz" },
		{ "\x5d\x00\x00", 3, "lzma" }, { "MSCF", 4, "cab" },
	};

	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
		if (r->head_len >= m[i].len && memcmp(r->head, m[i].magic, m[i].len) == 0)
			return m[i].name;
	return NULL;
}

static int format_error(struct ctx *c, struct reader *r, struct err *e)
{
	const char *foreign = foreign_format(r);
	const char *why = archive_error_string(c->a);

	if (r->failed) {
		*e = r->err;
		return -1;
	}
	if (r->total_in == 0)
		return err_set(e, ERR_UNSUPPORTED, "not a tar archive: empty input");
	if (foreign != NULL)
		return err_set(e, ERR_UNSUPPORTED,
		    "refused: %s input is not accepted (only tar, tar.gz and tar.zst)", foreign);
	return err_set(e, ERR_UNSUPPORTED,
	    "not a valid tar, tar.gz or tar.zst archive (%s)", why != NULL ? why : "unrecognised");
}

/* Accepts exactly: tar, optionally behind one gzip or zstd filter. */
static int check_format(struct ctx *c, struct err *e)
{
	int nf = archive_filter_count(c->a);

	if ((archive_format(c->a) & ARCHIVE_FORMAT_BASE_MASK) != ARCHIVE_FORMAT_TAR)
		return err_set(e, ERR_UNSUPPORTED, "refused: archive format %s is not accepted",
		    archive_format_name(c->a));
	if (nf > 2)
		return err_set(e, ERR_UNSUPPORTED, "refused: nested compression is not accepted");
	for (int i = 0; i < nf; i++) {
		int code = archive_filter_code(c->a, i);
		if (code != ARCHIVE_FILTER_NONE && code != ARCHIVE_FILTER_GZIP && code != ARCHIVE_FILTER_ZSTD)
			return err_set(e, ERR_UNSUPPORTED, "refused: %s compression is not accepted",
			    archive_filter_name(c->a, i));
	}
	return 0;
}

static int dir_is_empty(int fd)
{
	int dup_fd = dup(fd);
	DIR *d;
	struct dirent *de;
	int empty = 1;

	if (dup_fd < 0)
		return -1;
	d = fdopendir(dup_fd);
	if (d == NULL) {
		close(dup_fd);
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
			empty = 0;
			break;
		}
	}
	closedir(d);
	return empty;
}

static int run_archive(struct ctx *c, struct reader *r, struct err *e)
{
	struct archive_entry *ae;
	char last[PRINTABLE_BUF] = "";
	int first = 1;

	archive_read_support_format_tar(c->a);
	archive_read_support_filter_gzip(c->a);
	archive_read_support_filter_zstd(c->a);
	archive_read_support_filter_none(c->a);
	if (archive_read_open(c->a, r, NULL, reader_cb, NULL) != ARCHIVE_OK)
		return format_error(c, r, e);
	for (;;) {
		int rc = archive_read_next_header(c->a, &ae);

		if (rc == ARCHIVE_EOF)
			break;
		if (r->failed) {
			*e = r->err;
			return -1;
		}
		if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
			const char *why = archive_error_string(c->a);
			if (first)
				return format_error(c, r, e);
			return err_set(e, ERR_INVALID,
			    "archive entry \"%s\": damaged or truncated archive after this entry (%s)",
			    last, why != NULL ? why : "read error");
		}
		if (first && check_format(c, e) < 0)
			return -1;
		first = 0;
		printable(archive_entry_pathname(ae), last, sizeof(last));
		if (extract_entry(c, ae, e) < 0) {
			if (r->failed)
				*e = r->err;
			return -1;
		}
	}
	if (r->failed) {
		*e = r->err;
		return -1;
	}
	return 0;
}

int untar_into_dir(untar_read_fn read, void *ud, const char *dir,
    const struct untar_limits *limits, struct untar_stats *stats, struct err *e)
{
	struct untar_limits def;
	struct reader r = { .read = read, .ud = ud };
	struct ctx c = { .root_fd = -1, .cache_fd = -1 };
	int rc = -1, empty;

	if (limits == NULL) {
		untar_limits_default(&def);
		limits = &def;
	}
	c.lim = limits;
	r.cancel = limits->cancel;
	c.root_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (c.root_fd < 0)
		return err_set(e, ERR_IO, "open extraction directory %s: %s", dir, strerror(errno));
	empty = dir_is_empty(c.root_fd);
	if (empty != 1) {
		close(c.root_fd);
		return err_set(e, ERR_INVALID, "extraction directory %s is not empty", dir);
	}
	c.a = archive_read_new();
	if (c.a == NULL) {
		close(c.root_fd);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	rc = run_archive(&c, &r, e);
	archive_read_free(c.a);
	if (c.cache_fd >= 0)
		close(c.cache_fd);
	close(c.root_fd);
	if (stats != NULL)
		*stats = c.st;
	return rc;
}

/* ---- whole files ---------------------------------------------------------- */

struct file_src {
	int fd;
	const volatile int *cancel;
	const char *path;
	struct digest_ctx *hash;     /* NULL when no digest is checked */
	unsigned char *buf;
};

static ssize_t file_read(void *ud, const void **buf, struct err *e)
{
	struct file_src *s = ud;
	ssize_t n;

	do {
		if (s->cancel != NULL && *s->cancel != 0)
			return err_set(e, ERR_CANCELED, "read %s: canceled", s->path);
		n = read(s->fd, s->buf, UNTAR_FILE_READ_CHUNK);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return err_set(e, ERR_IO, "read %s: %s", s->path, strerror(errno));
	if (s->hash != NULL && n > 0)
		digest_ctx_update(s->hash, s->buf, (size_t)n);
	*buf = s->buf;
	return n;
}

/* Reads what the extractor left unread, so the digest covers the file. */
static int drain(struct file_src *s, struct err *e)
{
	const void *b;
	ssize_t n;

	while ((n = file_read(s, &b, e)) > 0)
		;
	return n < 0 ? -1 : 0;
}

static int check_digest(struct file_src *s, const struct digest *want, struct err *e)
{
	struct digest got;
	char ws[DIGEST_STR_MAX], gs[DIGEST_STR_MAX];

	if (drain(s, e) < 0)
		return -1;
	digest_ctx_final(s->hash, &got);
	if (digest_equal(&got, want))
		return 0;
	digest_format(want, ws, sizeof(ws));
	digest_format(&got, gs, sizeof(gs));
	return err_set(e, ERR_DIGEST, "digest mismatch: expected %s, got %s", ws, gs);
}

static int parent_exists(const char *dest, struct err *e)
{
	char buf[PATH_MAX];
	char *slash;

	if (snprintf(buf, sizeof(buf), "%s", dest) >= (int)sizeof(buf))
		return err_set(e, ERR_INVALID, "output path too long");
	while (strlen(buf) > 1 && buf[strlen(buf) - 1] == '/')
		buf[strlen(buf) - 1] = '\0';
	slash = strrchr(buf, '/');
	if (slash == NULL)
		return 0;
	if (slash == buf)
		slash[1] = '\0';
	else
		*slash = '\0';
	if (!fs_is_dir(buf)) {
		char shown[PRINTABLE_BUF];
		printable(buf, shown, sizeof(shown));
		return err_set(e, ERR_NOTFOUND, "output parent directory %s does not exist", shown);
	}
	return 0;
}

int untar_file_verified(const char *path, const char *dest, const struct digest *want,
    const struct untar_limits *limits, struct untar_stats *stats, struct err *e)
{
	struct file_src s = { .fd = -1, .path = path, .cancel = limits != NULL ? limits->cancel : NULL };
	char staging[PATH_MAX];
	struct err ignored;
	int rc = -1, staged = 0;

	if (fs_exists(dest))
		return err_set(e, ERR_INVALID, "output %s already exists", dest);
	if (parent_exists(dest, e) < 0)
		return -1;
	s.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s.fd < 0)
		return err_set(e, errno == ENOENT ? ERR_NOTFOUND : ERR_IO, "open %s: %s", path, strerror(errno));
	s.buf = malloc(UNTAR_FILE_READ_CHUNK);
	if (s.buf == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	if (want != NULL && (s.hash = digest_ctx_new(want->algo)) == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	if (fs_staging_dir(dest, staging, sizeof(staging), e) < 0)
		goto out;
	staged = 1;
	if (untar_into_dir(file_read, &s, staging, limits, stats, e) < 0) {
		/* The wrong file is the more useful diagnosis than what is in it. */
		struct err derr;
		if (want != NULL && check_digest(&s, want, &derr) < 0 && derr.code == ERR_DIGEST)
			*e = derr;
		goto out;
	}
	if (want != NULL && check_digest(&s, want, e) < 0)
		goto out;
	if (renameat2(AT_FDCWD, staging, AT_FDCWD, dest, RENAME_NOREPLACE) < 0) {
		err_set(e, errno == EEXIST ? ERR_CONFLICT : ERR_IO, "rename into %s: %s", dest, strerror(errno));
		goto out;
	}
	staged = 0;
	rc = 0;
out:
	if (staged)
		fs_rm_rf(staging, &ignored);
	digest_ctx_free(s.hash);
	free(s.buf);
	close(s.fd);
	return rc;
}

int untar_file(const char *path, const char *dest,
    const struct untar_limits *limits, struct untar_stats *stats, struct err *e)
{
	return untar_file_verified(path, dest, NULL, limits, stats, e);
}
