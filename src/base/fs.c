/*
 * fs.c - filesystem helpers (see fs.h).
 */
#define _XOPEN_SOURCE 700
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_join(char *out, size_t outlen, const char *a, const char *b, struct err *e)
{
	size_t la = strlen(a);
	int n;

	while (la > 1 && a[la - 1] == '/')
		la--;
	while (*b == '/')
		b++;
	n = snprintf(out, outlen, "%.*s/%s", (int)la, a, b);
	if (n < 0 || (size_t)n >= outlen)
		return err_set(e, ERR_INVALID, "path too long: %.200s/%.200s", a, b);
	return 0;
}

int fs_mkdir_p(const char *path, mode_t mode, struct err *e)
{
	char buf[PATH_MAX];
	struct stat st;
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return err_set(e, ERR_INVALID, "bad directory path \"%.200s\"", path);
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return err_set(e, ERR_IO, "mkdir %s: %s", buf, strerror(errno));
		if (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode))
			return err_set(e, ERR_IO, "mkdir %s: exists and is not a directory", buf);
		*p = saved;
		if (saved == '\0')
			break;
	}
	return 0;
}

/* Pre-order pass: give the owner rwx on every directory so it can be emptied. */
static int make_writable(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D && (st->st_mode & 0700) != 0700)
		chmod(path, (st->st_mode & 07777) | 0700);
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int fs_rm_rf(const char *path, struct err *e)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : err_set(e, ERR_IO, "stat %s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(path) < 0)
			return err_set(e, ERR_IO, "remove %s: %s", path, strerror(errno));
		return 0;
	}
	nftw(path, make_writable, 32, FTW_PHYS);
	if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS) < 0)
		return err_set(e, ERR_IO, "remove %s: %s", path, strerror(errno));
	return 0;
}

int fs_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

int fs_is_dir(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int fs_staging_dir(const char *final, char *out, size_t outlen, struct err *e)
{
	char a[PATH_MAX], b[PATH_MAX];
	int n;

	if (strlen(final) >= sizeof(a))
		return err_set(e, ERR_INVALID, "path too long: %.200s", final);
	strcpy(a, final);
	strcpy(b, final);
	const char *dir = dirname(a), *base = basename(b);
	if (fs_mkdir_p(dir, 0755, e) < 0)
		return -1;
	n = snprintf(out, outlen, "%s/.%s.tmp-XXXXXX", dir, base);
	if (n < 0 || (size_t)n >= outlen)
		return err_set(e, ERR_INVALID, "path too long: %.200s", final);
	if (mkdtemp(out) == NULL)
		return err_set(e, ERR_IO, "create staging directory in %s: %s", dir, strerror(errno));
	return 0;
}

/* Reads to the end rather than trusting st_size: a file may grow or shrink
 * between fstat and read, and a read error must not pass for a short file
 * (a token cut in half is a wrong credential, not a shorter one). */
static int read_all(int fd, const char *path, size_t max, size_t hint, char **out, size_t *outlen,
    struct err *e)
{
	size_t cap = (hint < max ? hint : max) + 2, got = 0;
	char *buf = malloc(cap), *grown;

	if (buf == NULL)
		return err_set(e, ERR_NOMEM, "out of memory reading %s", path);
	for (;;) {
		ssize_t n;
		if (got == cap - 1) {
			/* Full: grow, but never past one byte more than max,
			 * which is enough to tell "too large". */
			if (got > max) {
				free(buf);
				return err_set(e, ERR_LIMIT, "%s: larger than %zu bytes", path, max);
			}
			cap = cap * 2 > max + 2 ? max + 2 : cap * 2;
			grown = realloc(buf, cap);
			if (grown == NULL) {
				free(buf);
				return err_set(e, ERR_NOMEM, "out of memory reading %s", path);
			}
			buf = grown;
		}
		n = read(fd, buf + got, cap - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int saved = errno;
			free(buf);
			return err_set(e, ERR_IO, "read %s: %s", path, strerror(saved));
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got > max) {
		free(buf);
		return err_set(e, ERR_LIMIT, "%s: larger than %zu bytes", path, max);
	}
	buf[got] = '\0';
	*out = buf;
	if (outlen != NULL)
		*outlen = got;
	return 0;
}

int fs_read_file(const char *path, size_t max, char **out, size_t *outlen, struct err *e)
{
	struct stat st;
	int rc;
	/* O_NONBLOCK: opening a FIFO put where a file should be must not hang;
	 * it is refused below like anything that is not a regular file. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return err_set(e, errno == ENOENT ? ERR_NOTFOUND : ERR_IO, "open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(e, ERR_IO, "%s: not a regular file", path);
	}
	if ((size_t)st.st_size > max) {
		close(fd);
		return err_set(e, ERR_LIMIT, "%s: larger than %zu bytes", path, max);
	}
	rc = read_all(fd, path, max, (size_t)st.st_size, out, outlen, e);
	close(fd);
	return rc;
}

int fs_write_file(const char *path, const void *data, size_t len, mode_t mode, struct err *e)
{
	const char *p = data;
	int fd;

	if (unlink(path) != 0 && errno != ENOENT)
		return err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)) < 0)
		return err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int saved = n < 0 ? errno : EIO;
			close(fd);
			unlink(path);
			return err_set(e, ERR_IO, "%s: %s", path, strerror(saved));
		}
		p += n;
		len -= (size_t)n;
	}
	if (close(fd) != 0) {
		int saved = errno;
		unlink(path);
		return err_set(e, ERR_IO, "%s: %s", path, strerror(saved));
	}
	return 0;
}
