/*
 * test_fluxsource.c - the artifact store's defaults, lock and sweep
 * without a network: bounded by default, lock waits that end, and a
 * sweep that removes dead fillers' staging but never a live one.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/fs.h"
#include "fluxsource/fluxsource.h"

#define HEX_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static char root[256];

static int setup(void **state)
{
	char algodir[512];
	struct err e;
	(void)state;

	snprintf(root, sizeof(root), "/tmp/test_fluxsource.XXXXXX");
	if (mkdtemp(root) == NULL)
		return -1;
	snprintf(algodir, sizeof(algodir), "%s/artifacts/sha256", root);
	return fs_mkdir_p(algodir, 0755, &e);
}

static int teardown(void **state)
{
	struct err e;
	(void)state;
	return fs_rm_rf(root, &e);
}

static void defaults_are_bounded(void **state)
{
	struct flux_fetch_opts o;
	(void)state;

	flux_fetch_opts_default(&o);
	assert_int_equal(o.http.max_bytes, FLUX_DEFAULT_MAX_ARTIFACT_BYTES);
	assert_int_equal(FLUX_DEFAULT_MAX_ARTIFACT_BYTES, 512LL << 20);
	assert_int_equal(o.timeout_ms, FLUX_DEFAULT_TIMEOUT_MS);
	assert_null(o.cancel);
}

static void staging(const char *hex, char *out, size_t n)
{
	char f[600];

	snprintf(out, n, "%s/artifacts/sha256/.%s.tmp-abc123", root, hex);
	assert_int_equal(mkdir(out, 0700) == 0 || fs_is_dir(out), 1);
	snprintf(f, sizeof(f), "%s/partial", out);
	FILE *fp = fopen(f, "w");
	assert_non_null(fp);
	fclose(fp);
}

static int hold_lock(const char *hex)
{
	char lock[600];
	int fd;

	snprintf(lock, sizeof(lock), "%s/artifacts/sha256/.%s.lock", root, hex);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	return fd;
}

static void sweep_spares_a_held_entry(void **state)
{
	char dead[512], live[512];
	struct err e;
	int fd;
	(void)state;

	staging(HEX_A, dead, sizeof(dead));
	staging(HEX_B, live, sizeof(live));
	fd = hold_lock(HEX_B);
	assert_int_equal(flux_store_sweep(root, &e), 1);
	assert_false(fs_exists(dead));
	assert_true(fs_is_dir(live));
	close(fd);
	assert_int_equal(flux_store_sweep(root, &e), 1);
	assert_false(fs_exists(live));
	assert_int_equal(flux_store_sweep("/nonexistent/store", &e), 0);
}

static void lock_wait_ends_at_the_deadline_or_cancel(void **state)
{
	struct flux_store_entry en;
	volatile int cancel = 1;
	struct err e = { 0 };
	int fd;
	(void)state;

	assert_int_equal(flux_store_entry_init(root, "sha256:" HEX_A, &en, &e), 0);
	fd = hold_lock(HEX_A);
	assert_int_equal(flux_store_entry_lock(&en, clock_mono_ms() + 100, NULL, &e), -1);
	assert_int_equal(e.code, ERR_TIMEOUT);
	assert_non_null(strstr(e.msg, ".lock"));
	assert_int_equal(flux_store_entry_lock(&en, 0, &cancel, &e), -1);
	assert_int_equal(e.code, ERR_CANCELED);
	close(fd);
	assert_int_equal(flux_store_entry_lock(&en, 0, NULL, &e), 0);
	flux_store_entry_unlock(&en, 0);
}

static void locking_an_entry_sweeps_its_own_stale_staging(void **state)
{
	struct flux_store_entry en;
	char dead[512];
	struct err e;
	(void)state;

	staging(HEX_A, dead, sizeof(dead));
	assert_int_equal(flux_store_entry_init(root, "sha256:" HEX_A, &en, &e), 0);
	assert_int_equal(flux_store_entry_lock(&en, 0, NULL, &e), 0);
	assert_false(fs_exists(dead));
	flux_store_entry_unlock(&en, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_are_bounded),
		cmocka_unit_test_setup_teardown(sweep_spares_a_held_entry, setup, teardown),
		cmocka_unit_test_setup_teardown(lock_wait_ends_at_the_deadline_or_cancel, setup, teardown),
		cmocka_unit_test_setup_teardown(locking_an_entry_sweeps_its_own_stale_staging, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
