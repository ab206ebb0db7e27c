/*
 * fuzz_untar.c - libFuzzer target for the safe extractor.  Each input is fed
 * to untar_into_dir (in small, odd-sized chunks, to exercise libarchive's
 * refills) inside a fresh directory under one per-process temp dir, which
 * is removed after the run.  The limits are small so a single input stays
 * fast; any crash, leak, UB or a file appearing outside the per-run
 * directory is a bug.  Seeds: tests/fuzz/seeds/fuzz_untar/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/untar.h"

struct input {
	const uint8_t *p;
	size_t len, off, chunk;
};

static ssize_t input_read(void *ud, const void **buf, struct err *e)
{
	struct input *in = ud;
	size_t n = in->len - in->off;

	(void)e;
	if (n > in->chunk)
		n = in->chunk;
	*buf = in->p + in->off;
	in->off += n;
	return (ssize_t)n;
}

static char base_dir[64], run_dir[96];

static void remove_base(void)
{
	struct err e;
	fs_rm_rf(base_dir, &e);
}

/* `dir` must hold exactly one entry, named `only`: anything else was
 * written outside the extraction root. */
static void assert_only(const char *dir, const char *only)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (d == NULL)
		abort();
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (strcmp(de->d_name, only) != 0)
			abort();
		n++;
	}
	closedir(d);
	if (n != 1)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct untar_limits lim = { .max_total_bytes = 1 << 20, .max_entries = 256,
		.max_file_bytes = 256 << 10 };
	struct input in = { .p = data, .len = size, .chunk = 1000 + size % 3000 };
	char final[160], staging[192];
	struct err e;

	if (base_dir[0] == '\0') {
		/* tmpfs when there is one: a disk filesystem makes every run wait. */
		snprintf(base_dir, sizeof(base_dir), "%s/fuzz_untar.XXXXXX",
		    access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
		if (mkdtemp(base_dir) == NULL)
			abort();
		atexit(remove_base);
		snprintf(run_dir, sizeof(run_dir), "%s/run", base_dir);
	}
	snprintf(final, sizeof(final), "%s/out", run_dir);
	if (fs_staging_dir(final, staging, sizeof(staging), &e) < 0)
		abort();
	untar_into_dir(input_read, &in, staging, &lim, NULL, &e);
	assert_only(base_dir, "run");
	assert_only(run_dir, strrchr(staging, '/') + 1);
	if (fs_rm_rf(staging, &e) < 0)
		abort();
	return 0;
}
