/*
 * fs.h - small filesystem helpers used by the extractor, the artifact store
 * and the workspaces.  None of them follows a symlink it did not have to:
 * fs_rm_rf removes a link, never what it points to.
 */
#ifndef PC_FS_H
#define PC_FS_H

#include <stddef.h>
#include <sys/types.h>

#include "base/err.h"

/* mkdir -p; existing directories are fine, anything else in the way is not. */
int fs_mkdir_p(const char *path, mode_t mode, struct err *e);

/* rm -rf without following symlinks.  A missing path is success. */
int fs_rm_rf(const char *path, struct err *e);

/* 1 when path exists (lstat), 0 when not. */
int fs_exists(const char *path);
int fs_is_dir(const char *path);

/*
 * Creates a fresh, empty directory beside `final` (same filesystem, so a
 * rename(2) into place is atomic): "<dir of final>/.<base of final>.tmp-XXXXXX".
 * The parent is created if missing.  The path is written to out (size outlen).
 */
int fs_staging_dir(const char *final, char *out, size_t outlen, struct err *e);

/* Joins a and b with one '/'; ERR_INVALID when the result does not fit. */
int fs_join(char *out, size_t outlen, const char *a, const char *b, struct err *e);

/* Reads a whole small regular file into a NUL-terminated malloc'd buffer
 * (caller frees).  Reads to the end of file whatever fstat said (procfs
 * reports 0); ERR_LIMIT past max bytes, ERR_IO on a read error (never a
 * short buffer passed off as the file) and for anything but a regular file
 * (a FIFO is refused, not waited on). */
int fs_read_file(const char *path, size_t max, char **out, size_t *outlen, struct err *e);

/* Writes len bytes as a new file path (mode), replacing what was there
 * (never through a symlink); a failed write leaves no file. */
int fs_write_file(const char *path, const void *data, size_t len, mode_t mode, struct err *e);

#endif
