/*
 * store.c - the artifact store's entries, their locks and the sweep of
 * staging left by dead fillers (see fluxsource.h for the layout).
 *
 * A lock is flock(2) on STORE/artifacts/<algo>/.<hex>.lock, so it dies
 * with its holder: a staging directory whose entry's lock can be taken
 * belongs to nobody.  Lock waits poll (LOCK_NB every 50 ms) so they can
 * honour a deadline and a cancel flag, which a blocking flock cannot.
 */
#include "fluxsource/fluxsource.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/str.h"

#define LOCK_POLL_MS 50
#define STAGING_MARK ".tmp-"

int flux_store_entry_init(const char *store_root, const char *digest, struct flux_store_entry *en,
    struct err *e)
{
	char hex[DIGEST_MAX_RAW * 2 + 1];
	struct digest d;
	const char *algo;
	int n1, n2;

	en->fd = -1;
	if (digest_parse(digest, &d, e) < 0)
		return -1;
	digest_hex(&d, hex, sizeof(hex));
	algo = digest_algo_name(d.algo);
	n1 = snprintf(en->dir, sizeof(en->dir), "%s/artifacts/%s/%s", store_root, algo, hex);
	n2 = snprintf(en->lock, sizeof(en->lock), "%s/artifacts/%s/.%s.lock", store_root, algo, hex);
	if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof(en->dir) || (size_t)n2 >= sizeof(en->lock))
		return err_set(e, ERR_INVALID, "artifact store path too long: %.200s", store_root);
	return 0;
}

/* Removes "<dir>/.<hex>.tmp-*" for one entry; the caller holds its lock. */
static int sweep_entry_staging(const char *algodir, const char *hex)
{
	char prefix[300], path[4096];
	struct dirent *de;
	struct err ce;
	int removed = 0;
	DIR *d;

	snprintf(prefix, sizeof(prefix), ".%s" STAGING_MARK, hex);
	d = opendir(algodir);
	if (d == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		if (!str_has_prefix(de->d_name, prefix))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", algodir, de->d_name) >= sizeof(path))
			continue;
		if (fs_rm_rf(path, &ce) == 0) {
			removed++;
			log_info("removed staging a stopped download left behind", "path", path, NULL);
		} else {
			log_warn("could not remove stale staging", "path", path, "error", ce.msg, NULL);
		}
	}
	closedir(d);
	return removed;
}

/* "<dir>" and "<hex>" of an entry, from its lock path. */
static void entry_parts(const struct flux_store_entry *en, char *algodir, size_t an, char *hex, size_t hn)
{
	const char *slash = strrchr(en->lock, '/');
	size_t dl = (size_t)(slash - en->lock);
	const char *name = slash + 2;   /* past "/." */
	size_t nl = strlen(name) - strlen(".lock");

	snprintf(algodir, an, "%.*s", (int)dl, en->lock);
	snprintf(hex, hn, "%.*s", (int)nl, name);
}

int flux_store_entry_lock(struct flux_store_entry *en, int64_t deadline_ms,
    const volatile int *cancel, struct err *e)
{
	char algodir[4096], hex[DIGEST_MAX_RAW * 2 + 1];
	int64_t start = clock_mono_ms();

	entry_parts(en, algodir, sizeof(algodir), hex, sizeof(hex));
	if (fs_mkdir_p(algodir, 0755, e) < 0)
		return -1;
	en->fd = open(en->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (en->fd < 0)
		return err_set(e, ERR_IO, "open %s: %s", en->lock, strerror(errno));
	while (flock(en->fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK && errno != EINTR) {
			err_set(e, ERR_IO, "lock %s: %s", en->lock, strerror(errno));
			goto fail;
		}
		if (cancel != NULL && *cancel != 0) {
			err_set(e, ERR_CANCELED, "artifact store: canceled while waiting for %s", en->lock);
			goto fail;
		}
		if (deadline_ms != 0 && clock_mono_ms() >= deadline_ms) {
			err_set(e, ERR_TIMEOUT, "artifact store: another download of this artifact still holds "
			    "%s after %lld s; gave up", en->lock, (long long)(clock_mono_ms() - start) / 1000);
			goto fail;
		}
		clock_sleep_ms(LOCK_POLL_MS);
	}
	sweep_entry_staging(algodir, hex);
	return 0;
fail:
	close(en->fd);
	en->fd = -1;
	return -1;
}

void flux_store_entry_unlock(struct flux_store_entry *en, int filled)
{
	if (en->fd < 0)
		return;
	if (filled)
		unlink(en->lock);
	close(en->fd);
	en->fd = -1;
}

/* The sweep of one algorithm directory: staging whose entry lock is free. */
static int sweep_algodir(const char *algodir)
{
	char hex[300], lock[4096];
	struct dirent *de;
	int removed = 0;
	DIR *d = opendir(algodir);

	if (d == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		const char *mark = strstr(de->d_name, STAGING_MARK);
		if (de->d_name[0] != '.' || mark == NULL || (size_t)(mark - de->d_name) >= sizeof(hex))
			continue;
		snprintf(hex, sizeof(hex), "%.*s", (int)(mark - de->d_name - 1), de->d_name + 1);
		if ((size_t)snprintf(lock, sizeof(lock), "%s/.%s.lock", algodir, hex) >= sizeof(lock))
			continue;
		int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			removed += sweep_entry_staging(algodir, hex);
		close(fd);
	}
	closedir(d);
	return removed;
}

int flux_store_sweep(const char *store_root, struct err *e)
{
	char top[4096], algodir[4096];
	struct dirent *de;
	int removed = 0;
	DIR *d;

	if ((size_t)snprintf(top, sizeof(top), "%s/artifacts", store_root) >= sizeof(top))
		return err_set(e, ERR_INVALID, "artifact store path too long: %.200s", store_root);
	d = opendir(top);
	if (d == NULL)
		return errno == ENOENT ? 0 : err_set(e, ERR_IO, "open %s: %s", top, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(algodir, sizeof(algodir), "%s/%s", top, de->d_name) >= sizeof(algodir))
			continue;
		if (fs_is_dir(algodir))
			removed += sweep_algodir(algodir);
	}
	closedir(d);
	return removed;
}
