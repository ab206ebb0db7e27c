/*
 * test_fs.c - base/fs.h's fs_read_file, which token files, kubeconfigs and
 * docker configs go through: a read error is an error (never a truncated
 * file returned as the whole), sizes are bounded whatever fstat reports,
 * and what is not a regular file (a directory, a FIFO) is refused without
 * blocking.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fs.h"

static char tmpdir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_fs.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	struct err e;
	(void)state;
	return fs_rm_rf(tmpdir, &e);
}

static void write_bytes(const char *path, const char *data, size_t n)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	fclose(f);
}

/* /proc/self/mem is a regular file whose read at offset 0 fails (EIO): the
 * old reader trusted st_size (0) or stopped at the failure and returned
 * what it had as the file. */
static void read_error_is_an_error(void **state)
{
	char *buf = NULL;
	size_t len = 99;
	struct err e;
	(void)state;

	assert_int_equal(fs_read_file("/proc/self/mem", 1 << 20, &buf, &len, &e), -1);
	assert_null(buf);
	assert_int_equal(e.code, ERR_IO);
	assert_non_null(strstr(e.msg, "/proc/self/mem"));
}

/* procfs reports size 0 for files with content: read them to the end. */
static void reads_past_a_zero_st_size(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	struct err e;
	(void)state;

	assert_int_equal(fs_read_file("/proc/self/status", 1 << 20, &buf, &len, &e), 0);
	assert_true(len > 0);
	assert_int_equal(strlen(buf), len);
	assert_non_null(strstr(buf, "Pid:"));
	free(buf);
	/* and the bound holds there too */
	assert_int_equal(fs_read_file("/proc/self/status", 8, &buf, &len, &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
}

/* Writes text to tmpdir/name and reads it back with the given bound. */
static int write_and_read(const char *name, const char *text, size_t max, char *path, size_t n,
    struct err *e)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	snprintf(path, n, "%s/%s", tmpdir, name);
	write_bytes(path, text, strlen(text));
	rc = fs_read_file(path, max, &buf, &len, e);
	if (rc == 0) {
		assert_int_equal(len, strlen(text));
		assert_string_equal(buf, text);
		free(buf);
	}
	return rc;
}

static void size_bound(void **state)
{
	char path[512];
	struct err e;
	(void)state;

	assert_int_equal(write_and_read("ten", "0123456789", 10, path, sizeof(path), &e), 0);
	assert_int_equal(write_and_read("ten", "0123456789", 9, path, sizeof(path), &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
	assert_non_null(strstr(e.msg, path));
	/* an empty file is an empty string, not an error */
	assert_int_equal(write_and_read("empty", "", 10, path, sizeof(path), &e), 0);
}

static void not_regular_files_are_refused(void **state)
{
	char path[512], *buf = NULL;
	struct err e;
	(void)state;

	assert_int_equal(fs_read_file(tmpdir, 1 << 20, &buf, NULL, &e), -1);
	assert_int_equal(e.code, ERR_IO);
	assert_non_null(strstr(e.msg, "not a regular file"));
	/* A FIFO with no writer: opening it for reading used to block forever. */
	snprintf(path, sizeof(path), "%s/fifo", tmpdir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(fs_read_file(path, 1 << 20, &buf, NULL, &e), -1);
	assert_non_null(strstr(e.msg, "not a regular file"));
	snprintf(path, sizeof(path), "%s/missing", tmpdir);
	assert_int_equal(fs_read_file(path, 1 << 20, &buf, NULL, &e), -1);
	assert_int_equal(e.code, ERR_NOTFOUND);
	assert_null(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(read_error_is_an_error),
		cmocka_unit_test(reads_past_a_zero_st_size),
		cmocka_unit_test(size_bound),
		cmocka_unit_test(not_regular_files_are_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
