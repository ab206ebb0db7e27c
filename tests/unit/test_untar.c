/*
 * test_untar.c - the safe extractor: path rules, limits (including headers
 * that lie about sizes), symlink resolution, format restrictions, staging.
 *
 * Archives are written in memory with libarchive's writer; the few that no
 * honest writer produces (lying sizes, sparse liars) are crafted byte by
 * byte.  Each test extracts into its own temp directory and removes it.
 * tests/e2e/test_unpack.py covers the same rules through the command.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/fs.h"
#include "base/untar.h"

/* ---- building archives ----------------------------------------------------- */

struct mem {
	unsigned char *buf;
	size_t len, cap;
};

static la_ssize_t mem_write(struct archive *a, void *ud, const void *p, size_t n)
{
	struct mem *m = ud;
	(void)a;
	if (m->len + n > m->cap) {
		m->cap = (m->len + n) * 2;
		m->buf = realloc(m->buf, m->cap);
		assert_non_null(m->buf);
	}
	memcpy(m->buf + m->len, p, n);
	m->len += n;
	return (la_ssize_t)n;
}

/* Opens a writer into a fresh mem; format/filter are libarchive codes. */
static struct archive *writer(struct mem *m, int format, int filter)
{
	struct archive *a = archive_write_new();

	memset(m, 0, sizeof(*m));
	/* ar has no generic format code in libarchive's writer. */
	if (format == ARCHIVE_FORMAT_AR_GNU)
		assert_int_equal(archive_write_set_format_ar_svr4(a), ARCHIVE_OK);
	else
		assert_int_equal(archive_write_set_format(a, format), ARCHIVE_OK);
	if (filter != ARCHIVE_FILTER_NONE)
		assert_true(archive_write_add_filter(a, filter) >= ARCHIVE_WARN);
	archive_write_set_bytes_in_last_block(a, 1);
	assert_int_equal(archive_write_open(a, m, NULL, mem_write, NULL), ARCHIVE_OK);
	return a;
}

static void finish(struct archive *a)
{
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
}

static void add(struct archive *a, const char *name, mode_t type, mode_t perm, const char *data,
    const char *link)
{
	struct archive_entry *e = archive_entry_new();
	size_t len = data != NULL ? strlen(data) : 0;

	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_size(e, (la_int64_t)len);
	if (type == AE_IFLNK)
		archive_entry_set_symlink(e, link);
	if (type == 0) {   /* hardlink */
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_hardlink(e, link);
		archive_entry_set_size(e, 0);
	}
	if (type == AE_IFCHR || type == AE_IFBLK)
		archive_entry_set_rdev(e, 0x0103);
	assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
	if (len > 0)
		assert_int_equal(archive_write_data(a, data, len), (la_ssize_t)len);
	archive_entry_free(e);
}

#define FILE_(a, n, d)   add((a), (n), AE_IFREG, 0644, (d), NULL)
#define DIR_(a, n)       add((a), (n), AE_IFDIR, 0755, NULL, NULL)
#define LINK_(a, n, t)   add((a), (n), AE_IFLNK, 0777, NULL, (t))
#define HARD_(a, n, t)   add((a), (n), 0, 0644, NULL, (t))

/* ---- reading and extracting ------------------------------------------------ */

struct src {
	const unsigned char *p;
	size_t len, off, chunk;
	int fail_at;          /* fail the nth call (1-based); 0 never */
	int calls;
};

static ssize_t src_read(void *ud, const void **buf, struct err *e)
{
	struct src *s = ud;
	size_t n = s->len - s->off;

	if (++s->calls == s->fail_at)
		return err_set(e, ERR_NET, "connection reset by test");
	if (n > s->chunk)
		n = s->chunk;
	*buf = s->p + s->off;
	s->off += n;
	return (ssize_t)n;
}

struct run {
	char dir[64];
	struct err e;
	struct untar_stats st;
	int rc;
};

static void extract_ex(struct run *r, const struct mem *m, const struct untar_limits *lim, size_t chunk)
{
	struct src s = { .p = m->buf, .len = m->len, .chunk = chunk };

	snprintf(r->dir, sizeof(r->dir), "/tmp/test_untar.XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	err_clear(&r->e);
	r->rc = untar_into_dir(src_read, &s, r->dir, lim, &r->st, &r->e);
}

static void extract(struct run *r, const struct mem *m, const struct untar_limits *lim)
{
	extract_ex(r, m, lim, 65536);
}

static void cleanup(struct run *r, struct mem *m)
{
	struct err e;
	assert_int_equal(fs_rm_rf(r->dir, &e), 0);
	free(m->buf);
	m->buf = NULL;
}

static void assert_refused(const struct run *r, enum err_code code, const char *entry, const char *rule)
{
	char want[512];

	if (r->rc == 0)
		fail_msg("archive was accepted, expected refusal of \"%s\"", entry);
	assert_int_equal(r->e.code, code);
	if (entry != NULL) {
		snprintf(want, sizeof(want), "archive entry \"%s\": ", entry);
		if (strncmp(r->e.msg, want, strlen(want)) != 0)
			fail_msg("message \"%s\" does not start with %s", r->e.msg, want);
	}
	if (rule != NULL && strstr(r->e.msg, rule) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", r->e.msg, rule);
}

static void assert_ok(const struct run *r)
{
	if (r->rc != 0)
		fail_msg("extraction failed: %s", r->e.msg);
}

static char *read_rel(const struct run *r, const char *rel)
{
	char path[PATH_MAX], *buf = NULL;
	struct err e;

	snprintf(path, sizeof(path), "%s/%s", r->dir, rel);
	if (fs_read_file(path, 1 << 20, &buf, NULL, &e) < 0)
		fail_msg("%s", e.msg);
	return buf;
}

static mode_t lmode(const struct run *r, const char *rel)
{
	char path[PATH_MAX];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", r->dir, rel);
	if (lstat(path, &sb) < 0)
		return 0;
	return sb.st_mode;
}

/* ---- path rules ------------------------------------------------------------ */

static void name_rules(void **state)
{
	static const char *ok[] = { "a", "./a", "a/", ".", "./", "a/b/c", "a//b", "a/./b", "..a", "a..",
		".hidden", "a/.../b", "a\\b", "\xc3\xa9t\xc3\xa9" };
	static const struct { const char *name, *rule; } bad[] = {
		{ "", "empty path" }, { "/etc/passwd", "absolute" }, { "/", "absolute" },
		{ "..", "\"..\"" }, { "../a", "\"..\"" }, { "a/..", "\"..\"" }, { "a/../b", "\"..\"" },
		{ "./../a", "\"..\"" }, { "a/b/../../..", "\"..\"" }, { "a//../b", "\"..\"" },
	};
	struct err e;
	char longname[PATH_MAX + 10], comp[300];
	(void)state;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (untar_check_name(ok[i], &e) != 0)
			fail_msg("\"%s\" refused: %s", ok[i], e.msg);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err_clear(&e);
		if (untar_check_name(bad[i].name, &e) == 0)
			fail_msg("\"%s\" accepted", bad[i].name);
		assert_int_equal(e.code, ERR_REFUSED);
		assert_non_null(strstr(e.msg, "refused: "));
		if (strstr(e.msg, bad[i].rule) == NULL)
			fail_msg("\"%s\": message \"%s\" lacks \"%s\"", bad[i].name, e.msg, bad[i].rule);
	}
	/* 3072 bytes is the longest: PATH_MAX less 1 KiB for the store's directories above. */
	for (size_t i = 0; i < sizeof(longname) - 1; i++)
		longname[i] = (i % 100 == 99) ? '/' : 'x';
	longname[PATH_MAX - 1024] = '\0';
	assert_int_equal(untar_check_name(longname, &e), 0);
	longname[PATH_MAX - 1024] = 'x';
	longname[PATH_MAX - 1023] = '\0';
	assert_int_equal(untar_check_name(longname, &e), -1);
	assert_non_null(strstr(e.msg, "PATH_MAX"));
	assert_non_null(strstr(e.msg, "3072 bytes"));
	memset(comp, 'c', 256);
	comp[256] = '\0';
	assert_int_equal(untar_check_name(comp, &e), -1);
	comp[255] = '\0';
	assert_int_equal(untar_check_name(comp, &e), 0);
}

static void names_are_sanitised_in_messages(void **state)
{
	struct err e;
	char name[1000];
	(void)state;

	assert_int_equal(untar_check_name("\x1b[31m/../x\n\"q\"", &e), -1);
	assert_null(strchr(e.msg, '\x1b'));
	assert_null(strchr(e.msg, '\n'));
	assert_non_null(strstr(e.msg, "\\x1b[31m/../x\\x0a\\\"q\\\""));
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	name[500] = '/';
	name[501] = '.';
	name[502] = '.';
	name[503] = '/';
	assert_int_equal(untar_check_name(name, &e), -1);
	assert_non_null(strstr(e.msg, "...\": refused"));
	assert_true(strlen(e.msg) < 300);
}

static void kept_entries_and_modes(void **state)
{
	struct mem m;
	struct run r;
	struct archive *a = writer(&m, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP);
	mode_t old = umask(077);
	(void)state;

	add(a, ".", AE_IFDIR, 0750, NULL, NULL);
	add(a, "dir", AE_IFDIR, 0555, NULL, NULL);
	add(a, "dir/exe", AE_IFREG, 06755, "#!/bin/sh\n", NULL);
	add(a, "plain", AE_IFREG, 0644, "plain data", NULL);
	add(a, "sticky", AE_IFDIR, 01777, NULL, NULL);
	add(a, "implicit/sub/file", AE_IFREG, 0600, "deep", NULL);
	LINK_(a, "dir/link", "../plain");
	HARD_(a, "hard", "plain");
	finish(a);
	extract(&r, &m, NULL);
	umask(old);
	assert_ok(&r);
	assert_int_equal(lmode(&r, "") & 07777, 0750);
	assert_int_equal(lmode(&r, "dir") & 07777, 0755);          /* owner rwx added */
	assert_int_equal(lmode(&r, "dir/exe") & 07777, 0755);      /* setuid/setgid dropped */
	assert_int_equal(lmode(&r, "plain") & 07777, 0644);        /* umask does not apply */
	assert_int_equal(lmode(&r, "sticky") & 07777, 0777);
	assert_int_equal(lmode(&r, "implicit") & 07777, 0750);
	assert_int_equal(lmode(&r, "implicit/sub/file") & 07777, 0600);
	assert_true(S_ISLNK(lmode(&r, "dir/link")));
	char *p = read_rel(&r, "hard");
	assert_string_equal(p, "plain data");
	free(p);
	assert_int_equal(r.st.entries, 8);
	assert_int_equal(r.st.files, 4);
	assert_int_equal(r.st.bytes_written, 10 + 10 + 4);
	cleanup(&r, &m);
}

/* One hostile archive: entries built by `build`, refusal expected. */
static void expect_refusal(void (*build)(struct archive *), enum err_code code, const char *entry,
    const char *rule)
{
	struct mem m;
	struct run r;
	struct archive *a = writer(&m, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE);

	build(a);
	finish(a);
	extract(&r, &m, NULL);
	assert_refused(&r, code, entry, rule);
	cleanup(&r, &m);
}

static void b_abs(struct archive *a) { FILE_(a, "/abs", "x"); }
static void b_dotdot(struct archive *a) { FILE_(a, "ok", "x"); FILE_(a, "x/../../y", "x"); }
static void b_chr(struct archive *a) { add(a, "tty", AE_IFCHR, 0600, NULL, NULL); }
static void b_blk(struct archive *a) { add(a, "disk", AE_IFBLK, 0600, NULL, NULL); }
static void b_fifo(struct archive *a) { add(a, "p", AE_IFIFO, 0600, NULL, NULL); }
static void b_through(struct archive *a) { DIR_(a, "d"); LINK_(a, "l", "d"); FILE_(a, "l/f", "x"); }
static void b_deep_through(struct archive *a)
{
	DIR_(a, "d");
	DIR_(a, "d/e");
	LINK_(a, "d/l", "e");
	DIR_(a, "d/l/new");
}
static void b_over_link(struct archive *a) { LINK_(a, "l", "x"); FILE_(a, "l", "x"); }
static void b_link_over_link(struct archive *a) { LINK_(a, "l", "x"); LINK_(a, "l", "y"); }
static void b_dir_over_link(struct archive *a) { LINK_(a, "l", "x"); DIR_(a, "l"); }
static void b_dir_to_file(struct archive *a) { DIR_(a, "d"); FILE_(a, "d", "x"); }
static void b_file_to_dir(struct archive *a) { FILE_(a, "d", "x"); DIR_(a, "d"); }
static void b_hard_dir(struct archive *a) { DIR_(a, "d"); HARD_(a, "h", "d"); }
static void b_hard_later(struct archive *a) { HARD_(a, "h", "f"); FILE_(a, "f", "x"); }
static void b_hard_dotdot(struct archive *a) { HARD_(a, "h", "../x"); }
static void b_hard_through(struct archive *a)
{
	DIR_(a, "d");
	FILE_(a, "d/f", "x");
	LINK_(a, "l", "d");
	HARD_(a, "h", "l/f");
}
static void b_root_link(struct archive *a) { LINK_(a, ".", "x"); }

static void refusals(void **state)
{
	(void)state;
	expect_refusal(b_abs, ERR_REFUSED, "/abs", "absolute path");
	expect_refusal(b_dotdot, ERR_REFUSED, "x/../../y", "\"..\"");
	expect_refusal(b_chr, ERR_REFUSED, "tty", "device node");
	expect_refusal(b_blk, ERR_REFUSED, "disk", "device node");
	expect_refusal(b_fifo, ERR_REFUSED, "p", "FIFO");
	expect_refusal(b_through, ERR_REFUSED, "l/f", "writing through a symlink");
	expect_refusal(b_deep_through, ERR_REFUSED, "d/l/new/", "\"d/l\" is a symlink");
	expect_refusal(b_over_link, ERR_REFUSED, "l", "overwrite a symlink");
	expect_refusal(b_link_over_link, ERR_REFUSED, "l", "overwrite a symlink");
	expect_refusal(b_dir_over_link, ERR_REFUSED, "l/", "overwrite a symlink");
	expect_refusal(b_dir_to_file, ERR_REFUSED, "d", "replaces a directory");
	expect_refusal(b_file_to_dir, ERR_REFUSED, "d/", "replaces a regular file with a directory");
	expect_refusal(b_hard_dir, ERR_REFUSED, "h", "not an earlier regular file");
	expect_refusal(b_hard_later, ERR_REFUSED, "h", "not an earlier regular file");
	expect_refusal(b_hard_dotdot, ERR_REFUSED, "h", "\"..\"");
	expect_refusal(b_hard_through, ERR_REFUSED, "h", "not an earlier regular file");
	expect_refusal(b_root_link, ERR_REFUSED, ".", "root directory");
}

static void later_file_replaces_earlier_without_touching_its_hardlink(void **state)
{
	struct mem m;
	struct run r;
	struct archive *a = writer(&m, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE);
	char *p;
	(void)state;

	FILE_(a, "a", "original");
	HARD_(a, "b", "a");
	FILE_(a, "b", "new");
	FILE_(a, "a", "newer a");
	finish(a);
	extract(&r, &m, NULL);
	assert_ok(&r);
	p = read_rel(&r, "b");
	assert_string_equal(p, "new");
	free(p);
	p = read_rel(&r, "a");
	assert_string_equal(p, "newer a");
	free(p);
	cleanup(&r, &m);
}

/* ---- symlink resolution ---------------------------------------------------- */

struct link_case {
	const char *setup;     /* ';'-separated: "d:NAME", "f:NAME", "l:NAME>TARGET" */
	const char *name, *target;
	int ok;
};

static void build_links(struct archive *a, const struct link_case *c)
{
	char buf[512], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", c->setup);
	for (char *tok = strtok_r(buf, ";", &save); tok != NULL; tok = strtok_r(NULL, ";", &save)) {
		char *arg = tok + 2, *gt;
		if (tok[0] == 'd')
			DIR_(a, arg);
		else if (tok[0] == 'f')
			FILE_(a, arg, "x");
		else if ((gt = strchr(arg, '>')) != NULL) {
			*gt = '\0';
			LINK_(a, arg, gt + 1);
		}
	}
	LINK_(a, c->name, c->target);
}

static void symlink_resolution(void **state)
{
	static const struct link_case cases[] = {
		{ "", "l", "x", 1 },                                   /* dangling, in root */
		{ "", "l", ".", 1 },
		{ "", "l", "..", 0 },
		{ "", "l", "/etc", 0 },
		{ "", "l", "./x/", 1 },
		{ "d:d", "d/l", "..", 1 },                             /* the root itself */
		{ "d:d", "d/l", "../..", 0 },
		{ "d:d", "d/l", "./../x", 1 },
		{ "d:d", "d/l", "./../../x", 0 },
		{ "d:d;d:d/e", "d/e/l", "../../d/e/../x", 1 },
		{ "d:d;d:d/e", "d/e/l", "../../d/e/../../..", 0 },
		{ "d:d;l:d/up>..", "e", "d/up/..", 0 },                /* two-step escape */
		{ "d:d;l:d/up>..", "e", "d/up/d", 1 },
		{ "l:x>.", "y", "x/../z", 0 },
		{ "l:x>.", "y", "x/z", 1 },
		{ "d:a;d:a/b;l:a/b/c>..", "l", "a/b/c/../x", 1 },      /* a/b/c = a; a/.. = root */
		{ "d:a;d:a/b;l:a/b/c>..", "l", "a/b/c/../..", 0 },
		{ "", "l", "missing/../x", 0 },                        /* ".." after a non-directory */
		{ "f:f", "l", "f/../x", 0 },
		{ "d:d", "l", "d/missing/../x", 0 },
		{ "l:l1>l2;l:l2>l1", "l3", "l1/x", 0 },                /* loop: too many hops */
		{ "l:l1>l2;l:l2>l1", "l3", "l1", 0 },                  /* into a loop: refused too */
		{ "d:d;l:d/r>../d", "l", "d/r/r/r/r/../x", 1 },
		{ "d:d;l:d/r>../d", "l", "d/r/r/../../..", 0 },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mem m;
		struct run r;
		struct archive *a = writer(&m, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE);

		build_links(a, &cases[i]);
		finish(a);
		extract(&r, &m, NULL);
		if (cases[i].ok && r.rc != 0)
			fail_msg("case %zu (%s -> %s): refused: %s", i, cases[i].name, cases[i].target, r.e.msg);
		if (!cases[i].ok) {
			if (r.rc == 0)
				fail_msg("case %zu (%s -> %s): accepted", i, cases[i].name, cases[i].target);
			assert_refused(&r, ERR_REFUSED, cases[i].name, "symlink");
		}
		cleanup(&r, &m);
	}
}

/* ---- limits ---------------------------------------------------------------- */

static void files_of(struct mem *m, int n, size_t size)
{
	struct archive *a = writer(m, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP);
	char *data = malloc(size + 1), name[32];

	memset(data, 'q', size);
	data[size] = '\0';
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		FILE_(a, name, data);
	}
	free(data);
	finish(a);
}

static void total_limit(void **state)
{
	struct untar_limits lim;
	struct mem m;
	struct run r;
	(void)state;

	untar_limits_default(&lim);
	assert_int_equal(lim.max_total_bytes, 100LL << 20);
	assert_int_equal(lim.max_entries, 100000);
	assert_int_equal(lim.max_file_bytes, -1);
	lim.max_total_bytes = 4000;
	files_of(&m, 4, 1000);                      /* exactly at the limit */
	extract(&r, &m, &lim);
	assert_ok(&r);
	assert_int_equal(r.st.bytes_written, 4000);
	cleanup(&r, &m);
	files_of(&m, 5, 1000);
	extract(&r, &m, &lim);
	assert_refused(&r, ERR_LIMIT, "f4", "exceeds the limit of 4000 bytes in total");
	assert_true(r.st.bytes_written <= 4000);
	cleanup(&r, &m);
	lim.max_total_bytes = -1;
	files_of(&m, 5, 1000);
	extract(&r, &m, &lim);
	assert_ok(&r);
	cleanup(&r, &m);
}

static void entry_limit(void **state)
{
	struct untar_limits lim;
	struct mem m;
	struct run r;
	(void)state;

	untar_limits_default(&lim);
	lim.max_entries = 3;
	files_of(&m, 3, 1);
	extract(&r, &m, &lim);
	assert_ok(&r);
	cleanup(&r, &m);
	files_of(&m, 4, 1);
	extract(&r, &m, &lim);
	assert_refused(&r, ERR_LIMIT, "f3", "exceeds the limit of 3 entries");
	cleanup(&r, &m);
}

static void file_limit(void **state)
{
	struct untar_limits lim;
	struct mem m;
	struct run r;
	(void)state;

	untar_limits_default(&lim);
	lim.max_file_bytes = 100;
	files_of(&m, 3, 100);
	extract(&r, &m, &lim);
	assert_ok(&r);
	cleanup(&r, &m);
	files_of(&m, 1, 101);
	extract(&r, &m, &lim);
	assert_refused(&r, ERR_LIMIT, "f0", "exceeds the limit of 100 bytes for one file");
	cleanup(&r, &m);
}

/* Raw ustar header with a correct checksum; `gnu` selects the old-GNU magic. */
static void raw_header(unsigned char *h, const char *name, long long size, char type, int gnu)
{
	unsigned sum = 0;

	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	snprintf((char *)h + 100, 8, "%07o", 0644);
	snprintf((char *)h + 108, 8, "%07o", 0);
	snprintf((char *)h + 116, 8, "%07o", 0);
	snprintf((char *)h + 124, 12, "%011llo", size);
	snprintf((char *)h + 136, 12, "%011o", 0);
	h[156] = (unsigned char)type;
	memcpy(h + 257, gnu ? "ustar  " : "ustar\00000", 8);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

static void recompute_sum(unsigned char *h)
{
	unsigned sum = 0;
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

/* A pax "size" record that overrides a small ustar size: the limit must
 * follow the bytes, whatever a header says. */
static void lying_pax_size(void **state)
{
	struct untar_limits lim;
	struct mem m = { 0 };
	struct run r;
	const size_t real = 20000;
	char rec[64];
	(void)state;

	/* A pax record counts its own length digits: "14 size=20000\n". */
	snprintf(rec, sizeof(rec), "14 size=%zu\n", real);
	assert_int_equal(strlen(rec), 14);
	m.cap = 512 * 4 + real + 1024 + 512;
	m.buf = calloc(1, m.cap);
	raw_header(m.buf, "PaxHeader", (long long)strlen(rec), 'x', 0);
	memcpy(m.buf + 512, rec, strlen(rec));
	raw_header(m.buf + 1024, "liar", 10, '0', 0);          /* claims 10 bytes */
	memset(m.buf + 1536, 'L', real);
	m.len = 1536 + ((real + 511) / 512) * 512 + 1024;
	untar_limits_default(&lim);
	lim.max_total_bytes = 5000;
	extract(&r, &m, &lim);
	assert_refused(&r, ERR_LIMIT, "liar", "limit of 5000 bytes in total");
	assert_true(r.st.bytes_written <= 5000);
	cleanup(&r, &m);
}

/* Old-GNU sparse: 512 stored bytes claiming a 64 MiB file; the hole counts. */
static void lying_sparse_size(void **state)
{
	struct untar_limits lim;
	struct mem m = { 0 };
	struct run r;
	long long realsize = 64LL << 20;
	(void)state;

	m.cap = 512 * 4;
	m.buf = calloc(1, m.cap);
	raw_header(m.buf, "sparse", 512, 'S', 1);
	snprintf((char *)m.buf + 386, 12, "%011llo", realsize - 512);
	snprintf((char *)m.buf + 398, 12, "%011o", 512);
	snprintf((char *)m.buf + 483, 12, "%011llo", realsize);
	recompute_sum(m.buf);
	memset(m.buf + 512, 'S', 512);
	m.len = 512 * 4;
	untar_limits_default(&lim);
	lim.max_total_bytes = 1 << 20;
	extract(&r, &m, &lim);
	assert_refused(&r, ERR_LIMIT, "sparse", "limit of 1048576 bytes in total");
	cleanup(&r, &m);
	/* Within the limit the hole is reproduced as a hole of the right length. */
	m.buf = calloc(1, m.cap);
	raw_header(m.buf, "sparse", 512, 'S', 1);
	snprintf((char *)m.buf + 386, 12, "%011o", 4096);
	snprintf((char *)m.buf + 398, 12, "%011o", 512);
	snprintf((char *)m.buf + 483, 12, "%011o", 8192);
	recompute_sum(m.buf);
	memset(m.buf + 512, 'S', 512);
	m.len = 512 * 4;
	extract(&r, &m, &lim);
	assert_ok(&r);
	char path[PATH_MAX];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/sparse", r.dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 8192);
	assert_int_equal(r.st.bytes_written, 8192);
	cleanup(&r, &m);
}

static void header_smaller_than_data(void **state)
{
	struct mem m = { 0 };
	struct run r;
	(void)state;

	m.cap = 512 * 16;
	m.buf = calloc(1, m.cap);
	raw_header(m.buf, "small", 10, '0', 0);
	memset(m.buf + 512, 'z', 4096);
	m.len = m.cap;
	extract(&r, &m, NULL);
	assert_refused(&r, ERR_INVALID, "small", "damaged");
	cleanup(&r, &m);
}

/* ---- input handling -------------------------------------------------------- */

static void formats(void **state)
{
	static const struct { int format, filter; int ok; const char *why; } cases[] = {
		{ ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, 1, NULL },
		{ ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP, 1, NULL },
		{ ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FILTER_ZSTD, 1, NULL },
		{ ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE, ARCHIVE_FILTER_NONE, 1, NULL },
		{ ARCHIVE_FORMAT_ZIP, ARCHIVE_FILTER_NONE, 0, "zip" },
		{ ARCHIVE_FORMAT_CPIO_SVR4_NOCRC, ARCHIVE_FILTER_NONE, 0, "cpio" },
		{ ARCHIVE_FORMAT_CPIO_POSIX, ARCHIVE_FILTER_GZIP, 0, "not a valid tar" },
		{ ARCHIVE_FORMAT_7ZIP, ARCHIVE_FILTER_NONE, 0, "7z" },
		{ ARCHIVE_FORMAT_AR_GNU, ARCHIVE_FILTER_NONE, 0, "ar" },
		{ ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_BZIP2, 0, "bzip2" },
		{ ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_XZ, 0, "xz" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mem m;
		struct run r;
		struct archive *a = writer(&m, cases[i].format, cases[i].filter);
		FILE_(a, "hello.txt", "hello\n");
		finish(a);
		extract(&r, &m, NULL);
		if (cases[i].ok) {
			assert_ok(&r);
			char *p = read_rel(&r, "hello.txt");
			assert_string_equal(p, "hello\n");
			free(p);
		} else {
			if (r.rc == 0)
				fail_msg("format case %zu accepted", i);
			assert_refused(&r, ERR_UNSUPPORTED, NULL, cases[i].why);
			if (!fs_is_dir(r.dir))
				fail_msg("case %zu: extraction dir vanished", i);
			DIR *d = opendir(r.dir);
			int n = 0;
			for (struct dirent *de; (de = readdir(d)) != NULL;)
				n += de->d_name[0] != '.';
			closedir(d);
			assert_int_equal(n, 0);
		}
		cleanup(&r, &m);
	}
}

static void empty_and_garbage_input(void **state)
{
	struct mem m = { 0 };
	struct run r;
	(void)state;

	m.buf = calloc(1, 2048);
	m.len = 0;
	extract(&r, &m, NULL);
	assert_refused(&r, ERR_UNSUPPORTED, NULL, "empty input");
	cleanup(&r, &m);
	m.buf = calloc(1, 2048);
	m.len = 2048;                               /* only end-of-archive blocks */
	extract(&r, &m, NULL);
	assert_ok(&r);
	assert_int_equal(r.st.entries, 0);
	cleanup(&r, &m);
	m.buf = malloc(2048);
	memset(m.buf, 'g', 2048);
	m.len = 2048;
	extract(&r, &m, NULL);
	assert_refused(&r, ERR_UNSUPPORTED, NULL, "not a valid tar");
	cleanup(&r, &m);
}

static void tiny_chunks_give_the_same_tree(void **state)
{
	struct mem m;
	struct run r;
	struct archive *a = writer(&m, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP);
	char big[5000];
	(void)state;

	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	DIR_(a, "d");
	FILE_(a, "d/big", big);
	LINK_(a, "l", "d/big");
	finish(a);
	extract_ex(&r, &m, NULL, 1);
	assert_ok(&r);
	char *p = read_rel(&r, "l");
	assert_string_equal(p, big);
	free(p);
	cleanup(&r, &m);
}

static void read_errors_are_reported_as_is(void **state)
{
	struct mem m;
	struct run r;
	struct archive *a = writer(&m, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE);
	char big[3000];
	(void)state;

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (int i = 0; i < 20; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		FILE_(a, name, big);
	}
	finish(a);
	for (int fail_at = 1; fail_at <= 5; fail_at += 2) {
		struct src s = { .p = m.buf, .len = m.len, .chunk = 4096, .fail_at = fail_at };
		snprintf(r.dir, sizeof(r.dir), "/tmp/test_untar.XXXXXX");
		assert_non_null(mkdtemp(r.dir));
		r.rc = untar_into_dir(src_read, &s, r.dir, NULL, &r.st, &r.e);
		assert_int_equal(r.rc, -1);
		assert_int_equal(r.e.code, ERR_NET);
		assert_string_equal(r.e.msg, "connection reset by test");
		struct err e;
		fs_rm_rf(r.dir, &e);
	}
	free(m.buf);
}

static void refuses_a_non_empty_directory(void **state)
{
	struct mem m;
	struct run r;
	struct archive *a = writer(&m, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE);
	struct src s;
	char path[PATH_MAX];
	(void)state;

	FILE_(a, "x", "x");
	finish(a);
	snprintf(r.dir, sizeof(r.dir), "/tmp/test_untar.XXXXXX");
	assert_non_null(mkdtemp(r.dir));
	snprintf(path, sizeof(path), "%s/existing", r.dir);
	assert_int_equal(mkdir(path, 0700), 0);
	s = (struct src){ .p = m.buf, .len = m.len, .chunk = 512 };
	assert_int_equal(untar_into_dir(src_read, &s, r.dir, NULL, NULL, &r.e), -1);
	assert_non_null(strstr(r.e.msg, "not empty"));
	cleanup(&r, &m);
}

/* ---- untar_file: staging and rename ---------------------------------------- */

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;

	assert_non_null(d);
	for (struct dirent *de; (de = readdir(d)) != NULL;)
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void write_mem(const char *path, const struct mem *m)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(m->buf, 1, m->len, f), m->len);
	fclose(f);
}

static void untar_file_stages_and_renames(void **state)
{
	char parent[] = "/tmp/test_untar_file.XXXXXX", arch[PATH_MAX], dest[PATH_MAX], bad[PATH_MAX];
	struct mem m, evil;
	struct archive *a;
	struct err e;
	struct digest d;
	(void)state;

	assert_non_null(mkdtemp(parent));
	snprintf(arch, sizeof(arch), "%s/a.tar.gz", parent);
	snprintf(bad, sizeof(bad), "%s/evil.tar", parent);
	snprintf(dest, sizeof(dest), "%s/out", parent);
	a = writer(&m, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP);
	FILE_(a, "a", "aaa");
	finish(a);
	write_mem(arch, &m);
	a = writer(&evil, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE);
	FILE_(a, "fine", "ok");
	LINK_(a, "esc", "../../x");
	finish(a);
	write_mem(bad, &evil);

	/* refused: no dest, no staging */
	assert_int_equal(untar_file(bad, dest, NULL, NULL, &e), -1);
	assert_int_equal(e.code, ERR_REFUSED);
	assert_int_equal(count_entries(parent), 2);
	/* wrong digest: nothing */
	digest_bytes(DIGEST_SHA256, "other", 5, &d);
	assert_int_equal(untar_file_verified(arch, dest, &d, NULL, NULL, &e), -1);
	assert_int_equal(e.code, ERR_DIGEST);
	assert_int_equal(count_entries(parent), 2);
	/* right digest (sha384 to exercise another algorithm) */
	digest_bytes(DIGEST_SHA384, m.buf, m.len, &d);
	assert_int_equal(untar_file_verified(arch, dest, &d, NULL, NULL, &e), 0);
	assert_int_equal(count_entries(parent), 3);
	assert_int_equal(count_entries(dest), 1);
	/* dest exists now: refused and untouched */
	assert_int_equal(untar_file(arch, dest, NULL, NULL, &e), -1);
	assert_non_null(strstr(e.msg, "already exists"));
	assert_int_equal(count_entries(parent), 3);
	assert_int_equal(fs_rm_rf(parent, &e), 0);
	free(m.buf);
	free(evil.buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(name_rules),
		cmocka_unit_test(names_are_sanitised_in_messages),
		cmocka_unit_test(kept_entries_and_modes),
		cmocka_unit_test(refusals),
		cmocka_unit_test(later_file_replaces_earlier_without_touching_its_hardlink),
		cmocka_unit_test(symlink_resolution),
		cmocka_unit_test(total_limit),
		cmocka_unit_test(entry_limit),
		cmocka_unit_test(file_limit),
		cmocka_unit_test(lying_pax_size),
		cmocka_unit_test(lying_sparse_size),
		cmocka_unit_test(header_smaller_than_data),
		cmocka_unit_test(formats),
		cmocka_unit_test(empty_and_garbage_input),
		cmocka_unit_test(tiny_chunks_give_the_same_tree),
		cmocka_unit_test(read_errors_are_reported_as_is),
		cmocka_unit_test(refuses_a_non_empty_directory),
		cmocka_unit_test(untar_file_stages_and_renames),
	};
	return cmocka_run_group_tests_name("untar", tests, NULL, NULL);
}
