/*
 * fluxsource.c - fetch, verify and unpack Flux artifacts in one streaming
 * pass, and the on-disk artifact store (see fluxsource.h).
 */
#include "fluxsource/fluxsource.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"

#define READ_CHUNK 65536

/* The pull side of one download: bytes go from the HTTP stream through the
 * digest into whoever reads (the extractor, then the drain). */
struct pull {
	struct http_stream *stream;
	struct digest_ctx *hash;
	int64_t bytes;
	int stream_failed;        /* the error came from the network, not the archive */
	struct err stream_err;
	unsigned char buf[READ_CHUNK];
};

static ssize_t pull_read(void *ud, const void **buf, struct err *e)
{
	struct pull *p = ud;
	ssize_t n = http_stream_read(p->stream, p->buf, sizeof(p->buf), &p->stream_err);

	if (n < 0) {
		p->stream_failed = 1;
		*e = p->stream_err;
		return -1;
	}
	if (n > 0) {
		digest_ctx_update(p->hash, p->buf, (size_t)n);
		p->bytes += n;
	}
	*buf = p->buf;
	return n;
}

/* Reads and hashes whatever the extractor left unread (tar padding, the
 * gzip trailer, or everything after a refused entry). */
static int pull_drain(struct pull *p, struct err *e)
{
	const void *buf;
	ssize_t n;

	while ((n = pull_read(p, &buf, e)) > 0)
		;
	return n < 0 ? -1 : 0;
}

void flux_fetch_opts_default(struct flux_fetch_opts *o)
{
	memset(o, 0, sizeof(*o));
	http_opts_default(&o->http);
	untar_limits_default(&o->limits);
	o->host_override = getenv("SOURCE_CONTROLLER_LOCALHOST");
}

char *flux_rewrite_url(const char *url, const char *host_override, struct err *e)
{
	CURLU *u = curl_url(), *ov = NULL;
	char *out = NULL, *tmp = NULL, *host = NULL, *port = NULL, *scheme = NULL;

	if (u == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
		err_set(e, ERR_INVALID, "artifact URL \"%.300s\" cannot be parsed", url);
		goto done;
	}
	if (host_override == NULL || *host_override == '\0') {
		if (curl_url_get(u, CURLUPART_URL, &tmp, 0) == CURLUE_OK)
			out = strdup(tmp);
		goto done;
	}
	/* Parse the override as a URL of its own so "host:port", "[::1]:80" and
	 * "https://host" are all understood the way curl understands them. */
	ov = curl_url();
	if (ov == NULL || curl_url_set(ov, CURLUPART_URL, host_override, CURLU_GUESS_SCHEME) != CURLUE_OK ||
	    curl_url_get(ov, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		err_set(e, ERR_INVALID, "source-controller host override \"%.200s\" cannot be parsed", host_override);
		goto done;
	}
	curl_url_get(ov, CURLUPART_PORT, &port, 0);
	curl_url_set(u, CURLUPART_HOST, host, 0);
	curl_url_set(u, CURLUPART_PORT, port, 0); /* NULL port clears it */
	if (strstr(host_override, "://") != NULL && curl_url_get(ov, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK)
		curl_url_set(u, CURLUPART_SCHEME, scheme, 0);
	if (curl_url_get(u, CURLUPART_URL, &tmp, 0) == CURLUE_OK)
		out = strdup(tmp);
done:
	if (out == NULL && e != NULL && e->code == ERR_OK)
		err_set(e, ERR_NOMEM, "out of memory");
	curl_free(tmp);
	curl_free(host);
	curl_free(port);
	curl_free(scheme);
	curl_url_cleanup(u);
	curl_url_cleanup(ov);
	return out;
}

/*
 * One try: stream url into staging while hashing.  *retry is set when the
 * failure was the connection breaking mid-body, which a fresh try may fix.
 */
static int fetch_once(const struct flux_fetch_opts *o, const char *url, const struct digest *want,
    const char *staging, int *retry, struct err *e)
{
	struct http_request req = { .method = "GET", .url = url };
	struct pull *p = calloc(1, sizeof(*p));
	struct untar_stats stats = { 0 };
	struct digest got;
	struct err untar_err = { 0 };
	int rc = -1, untar_failed;

	*retry = 0;
	if (p == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	p->hash = digest_ctx_new(want->algo);
	if (p->hash == NULL) {
		free(p);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	p->stream = http_stream_open(&o->http, &req, e);
	if (p->stream == NULL)
		goto out;  /* the HTTP layer already retried and named the URL */

	untar_failed = untar_into_dir(pull_read, p, staging, &o->limits, &stats, &untar_err) < 0;
	if (untar_failed && p->stream_failed) {
		*e = p->stream_err;
		*retry = e->code == ERR_NET || e->code == ERR_TIMEOUT;
		goto out;
	}
	/* Hash the rest even after a refused archive: a digest mismatch is the
	 * more fundamental report (corruption rather than hostility). */
	if (pull_drain(p, untar_failed ? &untar_err : e) < 0) {
		if (!untar_failed) {
			*retry = e->code == ERR_NET || e->code == ERR_TIMEOUT;
			goto out;
		}
		*e = untar_err;
		err_prefix(e, "artifact %s", url);
		goto out;
	}
	digest_ctx_final(p->hash, &got);
	if (!digest_equal(&got, want)) {
		char gs[DIGEST_STR_MAX], ws[DIGEST_STR_MAX];
		digest_format(&got, gs, sizeof(gs));
		digest_format(want, ws, sizeof(ws));
		err_set(e, ERR_DIGEST, "artifact %s: digest mismatch: expected %s, computed %s over %lld bytes",
		    url, ws, gs, (long long)p->bytes);
		goto out;
	}
	if (untar_failed) {
		*e = untar_err;
		err_prefix(e, "artifact %s", url);
		goto out;
	}
	if (log_enabled(LOG_DEBUG)) {
		char b[32], f[32];
		snprintf(b, sizeof(b), "%lld", (long long)p->bytes);
		snprintf(f, sizeof(f), "%lld", (long long)stats.files);
		log_debug("artifact downloaded", "url", url, "bytes", b, "files", f, NULL);
	}
	rc = 0;
out:
	http_stream_free(p->stream);
	digest_ctx_free(p->hash);
	free(p);
	return rc;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

int flux_fetch(const struct flux_fetch_opts *o, const char *url, const char *digest,
    const char *dest, struct err *e)
{
	char staging[PATH_MAX];
	struct digest want;
	struct err cleanup_err;
	int retry = 0;

	if (digest_parse(digest, &want, e) < 0) {
		err_prefix(e, "artifact %s", url);
		return -1;
	}
	if (fs_exists(dest))
		return err_set(e, ERR_INVALID, "output directory %s already exists", dest);
	for (int attempt = 1;; attempt++) {
		if (fs_staging_dir(dest, staging, sizeof(staging), e) < 0)
			return -1;
		if (fetch_once(o, url, &want, staging, &retry, e) == 0)
			break;
		fs_rm_rf(staging, &cleanup_err);
		if (!retry || attempt > o->http.retries)
			return -1;
		log_warn("artifact download interrupted; retrying", "url", url, "error", e->msg, NULL);
		sleep_ms(http_backoff_ms(&o->http, attempt, 0, 0.5));
	}
	if (rename(staging, dest) < 0) {
		int saved = errno;
		fs_rm_rf(staging, &cleanup_err);
		return err_set(e, ERR_IO, "move artifact into %s: %s", dest, strerror(saved));
	}
	return 0;
}

/* STORE/artifacts/<algo>/<hex> and its lock file. */
static int store_paths(const char *root, const struct digest *d, char *dir, size_t dirlen,
    char *lock, size_t locklen, char *algodir, size_t algolen, struct err *e)
{
	char hex[DIGEST_MAX_RAW * 2 + 1];
	int n1, n2, n3;

	digest_hex(d, hex, sizeof(hex));
	n1 = snprintf(algodir, algolen, "%s/artifacts/%s", root, digest_algo_name(d->algo));
	n2 = snprintf(dir, dirlen, "%s/%s", algodir, hex);
	n3 = snprintf(lock, locklen, "%s/.%s.lock", algodir, hex);
	if (n1 < 0 || n2 < 0 || n3 < 0 || (size_t)n1 >= algolen || (size_t)n2 >= dirlen || (size_t)n3 >= locklen)
		return err_set(e, ERR_INVALID, "artifact store path too long: %.200s", root);
	return 0;
}

int flux_store_get(const char *store_root, const struct flux_artifact *a,
    const struct flux_fetch_opts *o, char *path_out, size_t path_len, int *cached,
    struct err *e)
{
	char dir[PATH_MAX], lock[PATH_MAX], algodir[PATH_MAX];
	struct digest d;
	char *url = NULL;
	int fd, rc = -1;

	if (cached != NULL)
		*cached = 0;
	if (a->url == NULL || *a->url == '\0')
		return err_set(e, ERR_INVALID, "artifact has no URL");
	if (digest_parse(a->digest, &d, e) < 0) {
		err_prefix(e, "artifact %s", a->url);
		return -1;
	}
	if (store_paths(store_root, &d, dir, sizeof(dir), lock, sizeof(lock), algodir, sizeof(algodir), e) < 0)
		return -1;
	if ((size_t)snprintf(path_out, path_len, "%s", dir) >= path_len)
		return err_set(e, ERR_INVALID, "path buffer too small for %s", dir);
	if (fs_is_dir(dir)) {
		if (cached != NULL)
			*cached = 1;
		return 0;
	}
	if (fs_mkdir_p(algodir, 0755, e) < 0)
		return -1;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(e, ERR_IO, "open %s: %s", lock, strerror(errno));
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			err_set(e, ERR_IO, "lock %s: %s", lock, strerror(errno));
			goto out;
		}
	}
	/* Whoever held the lock before us may have just finished this digest. */
	if (fs_is_dir(dir)) {
		if (cached != NULL)
			*cached = 1;
		rc = 0;
		goto out;
	}
	url = flux_rewrite_url(a->url, o->host_override, e);
	if (url == NULL)
		goto out;
	if (flux_fetch(o, url, a->digest, dir, e) < 0)
		goto out;
	/* Safe while locked: every path re-checks the directory after locking,
	 * and the directory only ever goes from absent to present. */
	unlink(lock);
	rc = 0;
out:
	free(url);
	close(fd);
	return rc;
}
