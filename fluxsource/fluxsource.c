/*
 * fluxsource.c - fetch, verify and unpack Flux artifacts in one streaming
 * pass (see fluxsource.h); the on-disk store is in store.c.
 */
#include "fluxsource/fluxsource.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/url.h"

#define READ_CHUNK 65536

/* The pull side of one download: bytes go from the HTTP stream through the
 * digest into whoever reads (the extractor, then the drain). */
struct pull {
	struct http_stream *stream;
	struct digest_ctx *hash;
	int64_t bytes;
	int64_t archive_end;      /* bytes read when the extractor finished, or -1 */
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
	if (p->archive_end >= 0 && p->bytes - p->archive_end > FLUX_MAX_TRAILING_BYTES) {
		p->stream_failed = 1;
		return err_set(e, ERR_LIMIT, "more than %lld bytes after the end of the archive",
		    (long long)FLUX_MAX_TRAILING_BYTES);
	}
	*buf = p->buf;
	return n;
}

/* Reads and hashes whatever the extractor left unread (tar padding, the
 * gzip trailer, or everything after a refused entry), but not without end:
 * FLUX_MAX_TRAILING_BYTES at most. */
static int pull_drain(struct pull *p, struct err *e)
{
	const void *buf;
	ssize_t n;

	p->archive_end = p->bytes;
	while ((n = pull_read(p, &buf, e)) > 0)
		;
	return n < 0 ? -1 : 0;
}

void flux_fetch_opts_default(struct flux_fetch_opts *o)
{
	memset(o, 0, sizeof(*o));
	http_opts_default(&o->http);
	o->http.max_bytes = FLUX_DEFAULT_MAX_ARTIFACT_BYTES;
	untar_limits_default(&o->limits);
	o->host_override = getenv("SOURCE_CONTROLLER_LOCALHOST");
	o->timeout_ms = FLUX_DEFAULT_TIMEOUT_MS;
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
		char safe[URL_LOG_MAX];
		err_set(e, ERR_INVALID, "artifact URL \"%.300s\" cannot be parsed", url_for_log(url, safe, sizeof(safe)));
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
		char safe[URL_LOG_MAX];
		err_set(e, ERR_INVALID, "source-controller host override \"%.200s\" cannot be parsed",
		    url_for_log(host_override, safe, sizeof(safe)));
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

/* The time left of a budget ending at the monotonic deadline (0 = none):
 * > 0 ms, or 0 when there is no deadline; -1 when it has passed. */
static long remaining_ms(int64_t deadline)
{
	int64_t left;

	if (deadline == 0)
		return 0;
	left = deadline - clock_mono_ms();
	return left > 0 ? (long)left : -1;
}

/* A pull hashing with algo, its stream not open yet; NULL + e.  The caller
 * frees it with pull_free. */
static struct pull *pull_new(enum digest_algo algo, struct err *e)
{
	struct pull *p = calloc(1, sizeof(*p));

	if (p == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	p->archive_end = -1;
	p->hash = digest_ctx_new(algo);
	if (p->hash == NULL) {
		free(p);
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	return p;
}

static void pull_free(struct pull *p)
{
	http_stream_free(p->stream);
	digest_ctx_free(p->hash);
	free(p);
}

static int digest_mismatch(struct err *e, const char *safe_url, const struct digest *got,
    const struct digest *want, int64_t bytes)
{
	char gs[DIGEST_STR_MAX], ws[DIGEST_STR_MAX];

	digest_format(got, gs, sizeof(gs));
	digest_format(want, ws, sizeof(ws));
	return err_set(e, ERR_DIGEST, "artifact %s: digest mismatch: expected %s, computed %s over %lld bytes",
	    safe_url, ws, gs, (long long)bytes);
}

static void log_downloaded(const char *safe_url, int64_t bytes, int64_t files)
{
	char b[32], f[32];

	if (!log_enabled(LOG_DEBUG))
		return;
	snprintf(b, sizeof(b), "%lld", (long long)bytes);
	snprintf(f, sizeof(f), "%lld", (long long)files);
	log_debug("artifact downloaded", "url", safe_url, "bytes", b, "files", f, NULL);
}

/*
 * One try: stream url into staging while hashing.  *retry is set when the
 * failure was the connection breaking mid-body, which a fresh try may fix.
 * `http` is the caller's options with this attempt's timeout and cancel.
 */
static int fetch_once(const struct flux_fetch_opts *o, const struct http_opts *http, const char *url,
    const struct digest *want, const char *staging, int *retry, struct err *e)
{
	struct http_request req = { .method = "GET", .url = url };
	struct pull *p;
	struct untar_stats stats = { 0 };
	struct digest got;
	struct err untar_err = { 0 };
	char safe[URL_LOG_MAX];
	int rc = -1, untar_failed;

	*retry = 0;
	url_for_log(url, safe, sizeof(safe));
	if ((p = pull_new(want->algo, e)) == NULL)
		return -1;
	p->stream = http_stream_open(http, &req, e);
	if (p->stream == NULL)
		goto out;  /* the HTTP layer already retried and named the URL */

	struct untar_limits lim = o->limits;
	if (lim.cancel == NULL)
		lim.cancel = o->cancel;   /* one flag stops the transfer and the extraction */
	untar_failed = untar_into_dir(pull_read, p, staging, &lim, &stats, &untar_err) < 0;
	if (untar_failed && p->stream_failed) {
		*e = p->stream_err;
		*retry = e->code == ERR_NET || e->code == ERR_TIMEOUT;
		goto out;
	}
	/* Hash the rest even after a refused archive: a digest mismatch is the
	 * more fundamental report (corruption rather than hostility).  When the
	 * rest cannot be had (broken, or too long to be padding), the refusal
	 * is the report, as it was. */
	struct err drain_err = { 0 };
	if (pull_drain(p, &drain_err) < 0) {
		if (!untar_failed) {
			*e = drain_err;
			*retry = e->code == ERR_NET || e->code == ERR_TIMEOUT;
			if (e->code == ERR_LIMIT)
				err_prefix(e, "artifact %s", safe);
			goto out;
		}
		*e = untar_err;
		err_prefix(e, "artifact %s", safe);
		goto out;
	}
	digest_ctx_final(p->hash, &got);
	if (!digest_equal(&got, want)) {
		digest_mismatch(e, safe, &got, want, p->bytes);
		goto out;
	}
	if (untar_failed) {
		*e = untar_err;
		err_prefix(e, "artifact %s", safe);
		goto out;
	}
	log_downloaded(safe, p->bytes, stats.files);
	rc = 0;
out:
	if (o->received != NULL)
		*o->received += p->bytes;
	pull_free(p);
	return rc;
}

/* The options of one attempt: the caller's, with the cancel flag and the
 * budget's deadline.  -1 when nothing is left of it. */
static int attempt_opts(const struct flux_fetch_opts *o, int64_t deadline, struct http_opts *out)
{
	long left = remaining_ms(deadline);

	*out = o->http;
	out->cancel = o->cancel;
	out->deadline_ms = deadline;   /* the HTTP layer's retries stay inside it too */
	return left < 0 ? -1 : 0;
}

static int budget_spent(struct err *e, const struct flux_fetch_opts *o, const char *url)
{
	char safe[URL_LOG_MAX];

	return err_set(e, ERR_TIMEOUT, "artifact %s: not done within the timeout of %ld s",
	    url_for_log(url, safe, sizeof(safe)), o->timeout_ms / 1000);
}

/* flux_fetch within a deadline already running (flux_store_get's). */
static int fetch_until(const struct flux_fetch_opts *o, const char *url, const char *digest,
    const char *dest, int64_t deadline, struct err *e)
{
	char staging[PATH_MAX], safe[URL_LOG_MAX];
	struct digest want;
	struct http_opts http;
	struct err cleanup_err;
	int retry = 0;

	url_for_log(url, safe, sizeof(safe));
	if (digest_parse(digest, &want, e) < 0) {
		err_prefix(e, "artifact %s", safe);
		return -1;
	}
	if (fs_exists(dest))
		return err_set(e, ERR_INVALID, "output directory %s already exists", dest);
	for (int attempt = 1;; attempt++) {
		if (attempt_opts(o, deadline, &http) < 0)
			return budget_spent(e, o, url);
		if (fs_staging_dir(dest, staging, sizeof(staging), e) < 0)
			return -1;
		if (fetch_once(o, &http, url, &want, staging, &retry, e) == 0)
			break;
		fs_rm_rf(staging, &cleanup_err);
		if (!retry || attempt > o->http.retries || remaining_ms(deadline) < 0)
			return -1;
		long pause = http_backoff_ms(&o->http, attempt, 0, 0.5), left = remaining_ms(deadline);
		if (left > 0 && pause >= left)
			return -1;   /* no time for another attempt: e says why the last one failed */
		log_warn("artifact download interrupted; retrying", "url", safe, "error", e->msg, NULL);
		if (clock_sleep_cancelable_ms(pause, o->cancel) < 0)
			return err_set(e, ERR_CANCELED, "artifact %s: canceled", safe);
	}
	if (rename(staging, dest) < 0) {
		int saved = errno;
		fs_rm_rf(staging, &cleanup_err);
		return err_set(e, ERR_IO, "move artifact into %s: %s", dest, strerror(saved));
	}
	return 0;
}

static int64_t flux_deadline(const struct flux_fetch_opts *o)
{
	return o->timeout_ms > 0 ? clock_mono_ms() + o->timeout_ms : 0;
}

int flux_fetch(const struct flux_fetch_opts *o, const char *url, const char *digest,
    const char *dest, struct err *e)
{
	return fetch_until(o, url, digest, dest, flux_deadline(o), e);
}

int flux_store_get(const char *store_root, const struct flux_artifact *a,
    const struct flux_fetch_opts *o, char *path_out, size_t path_len, int *cached,
    struct err *e)
{
	struct flux_store_entry en;
	int64_t deadline = flux_deadline(o);
	char *url = NULL, safe[URL_LOG_MAX];
	int rc = -1;

	if (cached != NULL)
		*cached = 0;
	if (a->url == NULL || *a->url == '\0')
		return err_set(e, ERR_INVALID, "artifact has no URL");
	if (flux_store_entry_init(store_root, a->digest, &en, e) < 0) {
		err_prefix(e, "artifact %s", url_for_log(a->url, safe, sizeof(safe)));
		return -1;
	}
	if ((size_t)snprintf(path_out, path_len, "%s", en.dir) >= path_len)
		return err_set(e, ERR_INVALID, "path buffer too small for %s", en.dir);
	if (fs_is_dir(en.dir)) {
		if (cached != NULL)
			*cached = 1;
		return 0;
	}
	if (flux_store_entry_lock(&en, deadline, o->cancel, e) < 0)
		return -1;
	/* Whoever held the lock before us may have just finished this digest. */
	if (fs_is_dir(en.dir)) {
		if (cached != NULL)
			*cached = 1;
		rc = 0;
		goto out;
	}
	url = flux_rewrite_url(a->url, o->host_override, e);
	if (url == NULL)
		goto out;
	if (fetch_until(o, url, a->digest, en.dir, deadline, e) < 0)
		goto out;
	rc = 0;
out:
	free(url);
	flux_store_entry_unlock(&en, rc == 0);
	return rc;
}
