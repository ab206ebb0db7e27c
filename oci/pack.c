/*
 * pack.c - packing a directory into the tar+gzip layer `push` uploads, with
 * libarchive's writer, the way `flux push artifact` lays it out: entry
 * names relative to the root with no leading directory, owners and times
 * zeroed, permission bits kept, only directories and regular files.  The
 * entries are always sorted and the gzip header carries no timestamp, so
 * the same tree always packs to the same bytes (what --reproducible relies
 * on).
 *
 * The digest and size of the compressed output are computed while writing.
 * Ignore patterns (--ignore-paths) are a gitignore subset: "*.zip" matches
 * a name at any depth, "dir/" only directories, "/top" or "a/b" are anchored
 * at the root, "**" spans directories, "!" re-includes.
 */
#include "oci/oci.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/digest.h"

#define COPY_CHUNK (256 * 1024)
#define MAX_PATTERNS 1024
#define MAX_ENTRIES 1000000

/* ---------------- ignore patterns ---------------- */

struct pattern {
	char *glob;
	int negate, dir_only, anchored;
};

struct oci_ignore {
	struct pattern p[MAX_PATTERNS];
	size_t n;
};

void oci_ignore_free(struct oci_ignore *ig)
{
	if (ig == NULL)
		return;
	for (size_t i = 0; i < ig->n; i++)
		free(ig->p[i].glob);
	free(ig);
}

static int add_pattern(struct oci_ignore *ig, const char *s, size_t n, struct err *e)
{
	struct pattern *p;

	while (n > 0 && (*s == ' ' || *s == '\t')) {
		s++;
		n--;
	}
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (n == 0 || *s == '#')
		return 0;
	if (ig->n >= MAX_PATTERNS)
		return err_set(e, ERR_LIMIT, "more than %d ignore patterns", MAX_PATTERNS);
	p = &ig->p[ig->n];
	memset(p, 0, sizeof(*p));
	if (*s == '!') {
		p->negate = 1;
		s++;
		n--;
	}
	if (n > 0 && s[n - 1] == '/') {
		p->dir_only = 1;
		n--;
	}
	if (n > 0 && *s == '/') {
		p->anchored = 1;
		s++;
		n--;
	}
	if (n >= 3 && strncmp(s, "**/", 3) == 0) {
		s += 3;
		n -= 3;
	} else if (memchr(s, '/', n) != NULL) {
		p->anchored = 1;
	}
	if (n == 0)
		return err_set(e, ERR_INVALID, "ignore pattern matches nothing");
	p->glob = strndup(s, n);
	if (p->glob == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	ig->n++;
	return 0;
}

struct oci_ignore *oci_ignore_parse(const char *patterns, struct err *e)
{
	struct oci_ignore *ig = calloc(1, sizeof(*ig));
	const char *p = patterns;

	if (ig == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	while (p != NULL && *p != '\0') {
		size_t n = strcspn(p, ",\n");
		if (add_pattern(ig, p, n, e) < 0) {
			oci_ignore_free(ig);
			return NULL;
		}
		p += n;
		if (*p != '\0')
			p++;
	}
	return ig;
}

static int glob_match(const char *glob, const char *s)
{
	/* "**" may cross directories; a plain "*" may not. */
	int flags = strstr(glob, "**") ? 0 : FNM_PATHNAME;

	return fnmatch(glob, s, flags) == 0;
}

static int pattern_matches(const struct pattern *p, const char *rel)
{
	const char *base, *q;

	if (p->anchored)
		return glob_match(p->glob, rel);
	if (strchr(p->glob, '/') == NULL) {
		base = strrchr(rel, '/');
		return glob_match(p->glob, base ? base + 1 : rel);
	}
	/* From a "**\/" prefix: match at any depth. */
	if (glob_match(p->glob, rel))
		return 1;
	for (q = strchr(rel, '/'); q != NULL; q = strchr(q + 1, '/'))
		if (glob_match(p->glob, q + 1))
			return 1;
	return 0;
}

int oci_ignore_match(const struct oci_ignore *ig, const char *rel, int is_dir)
{
	int ignored = 0;

	for (size_t i = 0; ig != NULL && i < ig->n; i++) {
		const struct pattern *p = &ig->p[i];
		if (p->dir_only && !is_dir)
			continue;
		if (pattern_matches(p, rel))
			ignored = !p->negate;
	}
	return ignored;
}

/* ---------------- the walk ---------------- */

struct entry_list {
	char **names;    /* relative paths */
	size_t n, cap;
};

static void entries_free(struct entry_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->names[i]);
	free(l->names);
}

static int entries_add(struct entry_list *l, const char *rel, struct err *e)
{
	if (l->n >= MAX_ENTRIES)
		return err_set(e, ERR_LIMIT, "more than %d entries to pack", MAX_ENTRIES);
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 256;
		char **nn = realloc(l->names, nc * sizeof(*nn));
		if (nn == NULL)
			return err_set(e, ERR_NOMEM, "out of memory");
		l->names = nn;
		l->cap = nc;
	}
	l->names[l->n] = strdup(rel);
	if (l->names[l->n] == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	l->n++;
	return 0;
}

/* Collects directories and regular files under root/rel, minus ignored
 * ones.  Path buffers are on the heap: the recursion is as deep as the tree. */
static int walk(const char *root, const char *rel, const struct oci_ignore *ig,
    struct entry_list *out, struct err *e)
{
	char *dirpath = malloc(PATH_MAX), *path = malloc(PATH_MAX), *child = malloc(PATH_MAX);
	DIR *d = NULL;
	struct dirent *de;
	int rc = 0;

	if (dirpath == NULL || path == NULL || child == NULL) {
		rc = err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((size_t)snprintf(dirpath, PATH_MAX, "%s%s%s", root, *rel ? "/" : "", rel) >= PATH_MAX) {
		rc = err_set(e, ERR_LIMIT, "%.200s/%.200s: path too long", root, rel);
		goto out;
	}
	d = opendir(dirpath);
	if (d == NULL) {
		rc = err_set(e, ERR_IO, "%s: %s", dirpath, strerror(errno));
		goto out;
	}
	while (rc == 0 && (de = readdir(d)) != NULL) {
		struct stat st;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if ((size_t)snprintf(child, PATH_MAX, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >= PATH_MAX ||
		    (size_t)snprintf(path, PATH_MAX, "%s/%s", root, child) >= PATH_MAX) {
			rc = err_set(e, ERR_LIMIT, "%.200s/%.200s: path too long", dirpath, de->d_name);
			break;
		}
		if (lstat(path, &st) < 0) {
			rc = err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
			break;
		}
		/* Flux packs only regular files and directories. */
		if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
			continue;
		if (oci_ignore_match(ig, child, S_ISDIR(st.st_mode)))
			continue;
		rc = entries_add(out, child, e);
		if (rc == 0 && S_ISDIR(st.st_mode))
			rc = walk(root, child, ig, out, e);
	}
out:
	if (d != NULL)
		closedir(d);
	free(dirpath);
	free(path);
	free(child);
	return rc;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---------------- writing ---------------- */

struct sink {
	int fd;
	struct digest_ctx *hash;
	int64_t size;
	int err_no;
};

static la_ssize_t sink_write(struct archive *a, void *ud, const void *buf, size_t len)
{
	struct sink *s = ud;
	const char *p = buf;
	size_t left = len;

	(void)a;
	while (left > 0) {
		ssize_t w = write(s->fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			s->err_no = errno;
			return -1;
		}
		p += w;
		left -= (size_t)w;
	}
	digest_ctx_update(s->hash, buf, len);
	s->size += (int64_t)len;
	return (la_ssize_t)len;
}

static int copy_file(struct archive *a, const char *path, const struct stat *st, char *buf,
    struct err *e)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int64_t total = 0;
	ssize_t n;

	if (fd < 0)
		return err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
	while ((n = read(fd, buf, COPY_CHUNK)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int en = errno;
			close(fd);
			return err_set(e, ERR_IO, "%s: %s", path, strerror(en));
		}
		if (total + n > st->st_size)
			break;
		if (archive_write_data(a, buf, (size_t)n) != n) {
			close(fd);
			return err_set(e, ERR_IO, "packing %s: %s", path, archive_error_string(a));
		}
		total += n;
	}
	close(fd);
	if (total != st->st_size)
		return err_set(e, ERR_IO, "%s: changed size while it was being packed", path);
	return 0;
}

static int write_entry(struct archive *a, struct archive_entry *ae, const char *root, const char *rel,
    char *buf, struct err *e)
{
	char path[PATH_MAX + 256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if (lstat(path, &st) < 0)
		return err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return 0;
	archive_entry_clear(ae);
	archive_entry_set_pathname(ae, rel);
	archive_entry_set_filetype(ae, S_ISDIR(st.st_mode) ? AE_IFDIR : AE_IFREG);
	archive_entry_set_perm(ae, st.st_mode & 0777);
	archive_entry_set_size(ae, S_ISREG(st.st_mode) ? st.st_size : 0);
	archive_entry_set_uid(ae, 0);
	archive_entry_set_gid(ae, 0);
	archive_entry_set_mtime(ae, 0, 0);
	if (archive_write_header(a, ae) != ARCHIVE_OK)
		return err_set(e, ERR_IO, "packing %s: %s", rel, archive_error_string(a));
	if (S_ISREG(st.st_mode))
		return copy_file(a, path, &st, buf, e);
	return 0;
}

static struct archive *open_writer(struct sink *s, struct err *e)
{
	struct archive *a = archive_write_new();

	if (a == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
	    /* no time in the gzip header: same tree, same bytes */
	    archive_write_set_filter_option(a, "gzip", "timestamp", NULL) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open2(a, s, NULL, sink_write, NULL, NULL) != ARCHIVE_OK) {
		err_set(e, ERR_IO, "tar+gzip writer: %s", archive_error_string(a));
		archive_write_free(a);
		return NULL;
	}
	return a;
}

int oci_pack_dir(const char *dir, const struct oci_pack_opts *o, const char *out_path,
    char *digest_out, size_t digest_len, int64_t *size_out, struct err *e)
{
	struct entry_list list = { 0 };
	struct oci_ignore *ig;
	struct sink s = { .fd = -1 };
	struct archive *a = NULL;
	struct archive_entry *ae = NULL;
	struct stat st;
	char *buf = NULL;
	struct digest d;
	int rc = -1;

	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return err_set(e, ERR_INVALID, "%s: not a directory", dir);
	ig = oci_ignore_parse(o && o->ignore ? o->ignore : OCI_DEFAULT_IGNORE, e);
	if (ig == NULL) {
		err_prefix(e, "--ignore-paths");
		return -1;
	}
	if (walk(dir, "", ig, &list, e) < 0)
		goto out;
	qsort(list.names, list.n, sizeof(*list.names), name_cmp);
	s.hash = digest_ctx_new(DIGEST_SHA256);
	buf = malloc(COPY_CHUNK);
	ae = archive_entry_new();
	if (s.hash == NULL || buf == NULL || ae == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	s.fd = open(out_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (s.fd < 0) {
		err_set(e, ERR_IO, "%s: %s", out_path, strerror(errno));
		goto out;
	}
	a = open_writer(&s, e);
	if (a == NULL)
		goto out;
	for (size_t i = 0; i < list.n; i++)
		if (write_entry(a, ae, dir, list.names[i], buf, e) < 0)
			goto out;
	if (archive_write_close(a) != ARCHIVE_OK) {
		err_set(e, ERR_IO, "%s: %s", out_path, s.err_no ? strerror(s.err_no) : archive_error_string(a));
		goto out;
	}
	if (fsync(s.fd) < 0 && errno != EINVAL) {
		err_set(e, ERR_IO, "%s: %s", out_path, strerror(errno));
		goto out;
	}
	digest_ctx_final(s.hash, &d);
	digest_format(&d, digest_out, digest_len);
	*size_out = s.size;
	rc = 0;
out:
	if (a != NULL)
		archive_write_free(a);
	archive_entry_free(ae);
	if (s.fd >= 0)
		close(s.fd);
	if (rc < 0 && s.fd >= 0)
		unlink(out_path);
	digest_ctx_free(s.hash);
	free(buf);
	entries_free(&list);
	oci_ignore_free(ig);
	return rc;
}
