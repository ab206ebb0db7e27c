/*
 * http.c - libcurl requests with retries, limits and a pull-style body
 * stream (see http.h for the contract).
 *
 * Buffered requests (http_do) use curl_easy_perform.  Streams use a
 * one-handle curl multi so the caller can pull body bytes at its own pace:
 * http_stream_read() drives curl until its write callback has delivered
 * something.  curl hands the callback at most CURL_MAX_WRITE_SIZE bytes per
 * call, so the pending buffer stays small whatever the body size.  The pure
 * policy (retryable statuses, backoff, Retry-After, header lookup) is in
 * http_policy.c.
 */
#include "base/http.h"

#include <ctype.h>
#include <pthread.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/url.h"

/* State of one transfer attempt, shared by the callbacks. */
struct xfer {
	const struct http_opts *opts;
	CURL *easy;
	long status;               /* of the response whose headers are being read */
	int headers_done;          /* final (non-3xx-followed) header block complete */
	char *raw_headers;
	size_t raw_len;
	/* body: either collected in full (http_do) or pending for the reader */
	char *body;
	size_t body_len, body_cap, body_off;
	int64_t received;
	int limit_hit;
	int stream;                /* 1: pending buffer for a stream reader */
	char *errbody;             /* start of a non-2xx body, NUL-terminated; owned */
	size_t errbody_len;
	int errbody_full;          /* an error body reached HTTP_ERROR_BODY_MAX: the
	                            * transfer was stopped there on purpose */
};

struct http_stream {
	struct http_opts opts;
	CURLM *multi;
	struct curl_slist *hdrs;
	struct xfer x;
	struct http_response resp;
	int done;
	CURLcode result;
	char method[16];                    /* for messages about a broken body */
	char curl_msg[CURL_ERROR_SIZE];     /* curl's detailed error text */
};

static int is_2xx(long s) { return s >= 200 && s < 300; }

void http_opts_default(struct http_opts *o)
{
	*o = (struct http_opts){
		.connect_timeout_ms = 10000,
		.timeout_ms = 300000,
		.stall_timeout_ms = 30000,
		.retries = 3,
		.backoff_initial_ms = 500,
		.backoff_max_ms = 30000,
		.max_bytes = -1,
		.max_redirects = 10,
	};
}

/*
 * One curl handle per thread for http_do.  curl_easy_reset keeps a handle's
 * connection cache, so consecutive requests to one server reuse the TCP
 * connection and the TLS session instead of paying a handshake each.
 */
static pthread_key_t easy_key;
static pthread_once_t easy_once = PTHREAD_ONCE_INIT;

static void easy_destroy(void *p)
{
	curl_easy_cleanup(p);
}

static void easy_key_init(void)
{
	pthread_key_create(&easy_key, easy_destroy);
}

static CURL *thread_easy(void)
{
	CURL *c;

	pthread_once(&easy_once, easy_key_init);
	c = pthread_getspecific(easy_key);
	if (c == NULL) {
		c = curl_easy_init();
		if (c != NULL)
			pthread_setspecific(easy_key, c);
	}
	return c;
}

int http_global_init(struct err *e)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return err_set(e, ERR_IO, "libcurl initialisation failed");
	return 0;
}

void http_global_cleanup(void)
{
	pthread_once(&easy_once, easy_key_init);
	CURL *c = pthread_getspecific(easy_key);
	if (c != NULL) {
		pthread_setspecific(easy_key, NULL);
		curl_easy_cleanup(c);
	}
	curl_global_cleanup();
}

static int request_idempotent(const struct http_request *req)
{
	return req->retry_unsafe || http_method_idempotent(req->method);
}

int http_should_retry_status(const struct http_request *req, long status)
{
	if (!http_status_retryable(status))
		return 0;
	/* 429 and 503 say the server did not act on the request. */
	return request_idempotent(req) || status == 429 || status == 503;
}

/*
 * Transport failures worth another try; certificate and protocol errors
 * will not get better by retrying.  For a request that is not idempotent
 * only failures before anything was sent qualify.
 */
static int curl_code_retryable(const struct http_request *req, CURLcode c)
{
	if (!request_idempotent(req))
		return c == CURLE_COULDNT_RESOLVE_HOST || c == CURLE_COULDNT_CONNECT;
	switch (c) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return 1;
	default:
		return 0;
	}
}

/* Milliseconds left before the deadline (at least 1), or -1 without one. */
static long left_ms(const struct http_opts *o)
{
	int64_t left;

	if (o->deadline_ms == 0)
		return -1;
	left = o->deadline_ms - clock_mono_ms();
	return left > 1 ? (long)left : 1;
}

enum { BACKOFF_DONE = 0, BACKOFF_CANCELED = -1, BACKOFF_PAST_DEADLINE = -2 };

/* Sleeps before a retry: BACKOFF_CANCELED as soon as the request is
 * canceled, BACKOFF_PAST_DEADLINE (without sleeping) when the wait would
 * end after the deadline. */
static int backoff_wait(const struct http_opts *o, long ms)
{
	long left = left_ms(o);

	if (left >= 0 && ms >= left)
		return BACKOFF_PAST_DEADLINE;
	return clock_sleep_cancelable_ms(ms, o->cancel) == 0 ? BACKOFF_DONE : BACKOFF_CANCELED;
}

static double jitter_value(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)(ts.tv_nsec % 1000) / 1000.0;
}

/* --- callbacks --- */

/* Appends n bytes to the NUL-terminated *buf of *len bytes, growing it by
 * exactly what it needs; -1 (buf unchanged) when memory runs out. */
static int append_bytes(char **buf, size_t *len, const char *data, size_t n)
{
	char *nb = realloc(*buf, *len + n + 1);

	if (nb == NULL)
		return -1;
	*buf = nb;
	memcpy(nb + *len, data, n);
	*len += n;
	nb[*len] = '\0';
	return 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;

	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		/* A new response (the first, or one after a redirect): restart. */
		x->raw_len = 0;
		x->status = 0;
		const char *sp = memchr(data, ' ', len);
		if (sp != NULL)
			x->status = strtol(sp + 1, NULL, 10);
	}
	if (append_bytes(&x->raw_headers, &x->raw_len, data, len) < 0)
		return 0;
	if ((len == 2 && data[0] == '\r') || (len == 1 && data[0] == '\n')) {
		int redirect = x->status >= 300 && x->status < 400 && x->opts->max_redirects > 0;
		if (!redirect && x->status >= 200)
			x->headers_done = 1;
	}
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;

	if (!is_2xx(x->status)) {
		/* Keep only the start of an error body, for the message, and stop
		 * reading there: an error body that never ends must not hold the
		 * request until its timeout (and again for every retry). */
		size_t room = HTTP_ERROR_BODY_MAX - x->errbody_len;
		size_t take = len < room ? len : room;
		if (take > 0 && append_bytes(&x->errbody, &x->errbody_len, data, take) < 0)
			return 0;
		if (take < len && x->status >= 400) {
			x->errbody_full = 1;
			return 0;
		}
		return len;
	}
	if (x->opts->max_bytes >= 0 && x->received + (int64_t)len > x->opts->max_bytes) {
		x->limit_hit = 1;
		return 0;
	}
	x->received += (int64_t)len;
	if (x->stream && x->body_off == x->body_len) {
		x->body_off = 0;
		x->body_len = 0;
	}
	if (x->body_len + len + 1 > x->body_cap) {
		size_t cap = x->body_cap ? x->body_cap : 16384;
		while (cap < x->body_len + len + 1)
			cap *= 2;
		char *nb = realloc(x->body, cap);
		if (nb == NULL)
			return 0;
		x->body = nb;
		x->body_cap = cap;
	}
	memcpy(x->body + x->body_len, data, len);
	x->body_len += len;
	x->body[x->body_len] = '\0';
	return len;
}

static size_t on_upload(char *buf, size_t size, size_t n, void *ud)
{
	const struct http_request *req = ud;
	ssize_t got = req->body_read(req->body_ud, buf, size * n);

	return got < 0 ? CURL_READFUNC_ABORT : (size_t)got;
}

/* A streamed body can be sent again only if it can be restarted. */
static int can_resend(const struct http_request *req)
{
	return req->body_read == NULL || req->body_rewind != NULL;
}

/* Every attempt starts the streamed body from its beginning. */
static int rewind_body(const struct http_request *req, struct err *e)
{
	if (req->body_read == NULL || req->body_rewind == NULL || req->body_rewind(req->body_ud) == 0)
		return 0;
	char safe[URL_LOG_MAX];

	return err_set(e, ERR_IO, "%s %s: cannot restart the request body",
	    req->method ? req->method : "PUT", url_for_log(req->url, safe, sizeof(safe)));
}

/* Cancellation: curl calls this about every 100 ms while it waits. */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	const volatile int *cancel = ud;

	(void)dt; (void)dn; (void)ut; (void)un;
	return *cancel != 0;
}

static int canceled(const struct http_opts *o)
{
	return o->cancel != NULL && *o->cancel != 0;
}

/* --- shared setup --- */

static struct curl_slist *build_headers(const struct http_request *req, struct err *e)
{
	struct curl_slist *l = NULL, *t;

	/* Never let curl add "Expect: 100-continue" delays to uploads. */
	l = curl_slist_append(l, "Expect:");
	for (const char *const *h = req->headers; h != NULL && *h != NULL; h++) {
		t = curl_slist_append(l, *h);
		if (t == NULL) {
			curl_slist_free_all(l);
			err_set(e, ERR_NOMEM, "out of memory");
			return NULL;
		}
		l = t;
	}
	return l;
}

/* The connect and total timeouts, cut to what is left of o's deadline, and
 * the stall timeout. */
static void configure_timeouts(CURL *c, const struct http_opts *o)
{
	long timeout = o->timeout_ms, connect = o->connect_timeout_ms, left = left_ms(o);
	if (left >= 0 && (timeout == 0 || timeout > left))
		timeout = left;
	if (left >= 0 && connect > left)
		connect = left;
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout);
	if (o->stall_timeout_ms > 0) {
		long secs = o->stall_timeout_ms / 1000;
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, secs > 0 ? secs : 1L);
	}
}

/* The CA to trust and the client certificate, from files or PEM text. */
static void configure_tls(CURL *c, const struct http_opts *o)
{
	if (o->ca_file != NULL)
		curl_easy_setopt(c, CURLOPT_CAINFO, o->ca_file);
	if (o->ca_pem != NULL) {
		struct curl_blob b = { (void *)o->ca_pem, strlen(o->ca_pem), CURL_BLOB_COPY };
		curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &b);
	}
	if (o->client_cert_file != NULL)
		curl_easy_setopt(c, CURLOPT_SSLCERT, o->client_cert_file);
	if (o->client_key_file != NULL)
		curl_easy_setopt(c, CURLOPT_SSLKEY, o->client_key_file);
	if (o->client_cert_pem != NULL) {
		struct curl_blob b = { (void *)o->client_cert_pem, strlen(o->client_cert_pem), CURL_BLOB_COPY };
		curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &b);
		curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
	}
	if (o->client_key_pem != NULL) {
		struct curl_blob b = { (void *)o->client_key_pem, strlen(o->client_key_pem), CURL_BLOB_COPY };
		curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &b);
		curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
	}
}

/* The method, and the body: streamed (req->body_read) or from memory. */
static void configure_method(CURL *c, const struct http_request *req)
{
	const char *method = req->method ? req->method : "GET";

	if (req->body_read != NULL) {
		/* A streamed body: UPLOAD sends PUT, CUSTOMREQUEST renames it. */
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
		curl_easy_setopt(c, CURLOPT_READDATA, (void *)req);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
		if (strcmp(method, "PUT") != 0)
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	} else if (strcmp(method, "HEAD") == 0) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (strcmp(method, "GET") != 0) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
		if (req->body != NULL || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
		    strcmp(method, "PATCH") == 0) {
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? (const char *)req->body : "");
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
		}
	}
}

static void configure(CURL *c, const struct http_opts *o, const struct http_request *req,
    struct curl_slist *hdrs, struct xfer *x)
{
	curl_easy_setopt(c, CURLOPT_URL, req->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	configure_timeouts(c, o);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, o->max_redirects > 0 ? 1L : 0L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)o->max_redirects);
	curl_easy_setopt(c, CURLOPT_USERAGENT, o->user_agent ? o->user_agent : "pulumi-controller/" PC_VERSION);
	configure_tls(c, o);
	if (o->tcp_keepalive_s > 0) {
		curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
		curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, o->tcp_keepalive_s);
		curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, o->tcp_keepalive_s);
	}
	if (o->cancel != NULL) {
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)o->cancel);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	}
	if (o->insecure_skip_tls_verify) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	configure_method(c, req);
}

static void xfer_reset(struct xfer *x)
{
	free(x->raw_headers);
	free(x->body);
	free(x->errbody);
	const struct http_opts *o = x->opts;
	CURL *c = x->easy;
	int stream = x->stream;
	memset(x, 0, sizeof(*x));
	x->opts = o;
	x->easy = c;
	x->stream = stream;
}

/* The Retry-After of the response just received, in seconds (0 when absent
 * or in the past): libcurl parses both forms, delay-seconds and HTTP-date. */
static long retry_after(CURL *easy)
{
	curl_off_t ra = 0;

	if (curl_easy_getinfo(easy, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK || ra < 0)
		return 0;
	return ra > 86400 ? 86400 : (long)ra;
}

/* "canceled" for the request, its URL printable. */
static int canceled_error(struct err *e, const char *method, const char *url)
{
	char safe[URL_LOG_MAX];

	return err_set(e, ERR_CANCELED, "%s %s: canceled", method ? method : "GET",
	    url_for_log(url, safe, sizeof(safe)));
}

/* The transfer "failed" only because we stopped reading an error body that
 * was long enough: the status is what counts. */
static int stopped_on_error_body(const struct xfer *x, CURLcode rc)
{
	return rc == CURLE_WRITE_ERROR && x->errbody_full;
}

/* Turns a failed transfer into an error naming method and URL (printable:
 * no userinfo, no query, so no presigned signature). */
static int transfer_error(struct err *e, const struct http_request *req, const struct xfer *x,
    CURLcode rc, const char *curl_msg)
{
	const char *m = req->method ? req->method : "GET";
	char u[URL_LOG_MAX], cm[CURL_ERROR_SIZE];

	url_for_log(req->url, u, sizeof(u));
	log_printable(curl_msg, cm, sizeof(cm));
	if (x->limit_hit)
		return err_set(e, ERR_LIMIT, "%s %s: response body larger than the limit of %lld bytes",
		    m, u, (long long)x->opts->max_bytes);
	if (rc == CURLE_ABORTED_BY_CALLBACK && canceled(x->opts))
		return err_set(e, ERR_CANCELED, "%s %s: canceled", m, u);
	if (rc == CURLE_OPERATION_TIMEDOUT)
		return err_set(e, ERR_TIMEOUT, "%s %s: timed out: %s", m, u, cm);
	if (rc == CURLE_TOO_MANY_REDIRECTS)
		return err_set(e, ERR_HTTP, "%s %s: more than %d redirects", m, u, x->opts->max_redirects);
	if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE)
		return err_set(e, ERR_NET, "%s %s: TLS verification failed: %s", m, u, cm);
	return err_set(e, ERR_NET, "%s %s: %s", m, u, cm);
}

/* Message for a non-2xx final status, with the start of the error body. */
static int status_error(struct err *e, const struct http_request *req, long status, const char *body)
{
	char snippet[201];
	size_t n = 0;
	enum err_code code = status == 404 ? ERR_NOTFOUND :
	    (status == 401 || status == 403) ? ERR_AUTH : ERR_HTTP;

	for (const char *p = body; p && *p && n < sizeof(snippet) - 1; p++)
		snippet[n++] = (isprint((unsigned char)*p) ? *p : ' ');
	snippet[n] = '\0';
	char u[URL_LOG_MAX];

	err_set(e, code, "%s %s: HTTP %ld%s%s", req->method ? req->method : "GET",
	    url_for_log(req->url, u, sizeof(u)), status, n ? ": " : "", snippet);
	e->http_status = (int)status;
	return -1;
}

/* --- buffered requests --- */

int http_do(const struct http_opts *o, const struct http_request *req,
    struct http_response *resp, struct err *e)
{
	struct xfer x = { .opts = o };
	char curl_msg[CURL_ERROR_SIZE];
	struct curl_slist *hdrs;
	CURLcode rc;

	memset(resp, 0, sizeof(*resp));
	hdrs = build_headers(req, e);
	if (hdrs == NULL)
		return -1;
	x.easy = thread_easy();
	if (x.easy == NULL) {
		curl_slist_free_all(hdrs);
		return err_set(e, ERR_NOMEM, "curl_easy_init failed");
	}
	for (int attempt = 1;; attempt++) {
		if (rewind_body(req, e) < 0)
			break;
		xfer_reset(&x);
		curl_easy_reset(x.easy);
		configure(x.easy, o, req, hdrs, &x);
		curl_msg[0] = '\0';
		curl_easy_setopt(x.easy, CURLOPT_ERRORBUFFER, curl_msg);
		rc = curl_easy_perform(x.easy);
		int last = attempt > o->retries;
		if (rc != CURLE_OK && !stopped_on_error_body(&x, rc)) {
			if (!last && !x.limit_hit && curl_code_retryable(req, rc) && can_resend(req) &&
			    backoff_wait(o, http_backoff_ms(o, attempt, 0, jitter_value())) == 0)
				continue;
			if (canceled(o)) {
				canceled_error(e, req->method, req->url);
				break;
			}
			transfer_error(e, req, &x, rc, curl_msg[0] ? curl_msg : curl_easy_strerror(rc));
			break;
		}
		curl_easy_getinfo(x.easy, CURLINFO_RESPONSE_CODE, &resp->status);
		if (!last && http_should_retry_status(req, resp->status) && can_resend(req)) {
			int w = backoff_wait(o, http_backoff_ms(o, attempt, retry_after(x.easy), jitter_value()));
			if (w == BACKOFF_DONE)
				continue;
			if (w == BACKOFF_CANCELED) {
				resp->status = 0;
				canceled_error(e, req->method, req->url);
				break;
			}
			/* Past the deadline: this response is the answer. */
		}
		char *eff = NULL;
		curl_easy_getinfo(x.easy, CURLINFO_EFFECTIVE_URL, &eff);
		resp->effective_url = eff ? strdup(eff) : NULL;
		resp->raw_headers = x.raw_headers;
		x.raw_headers = NULL;
		if (is_2xx(resp->status)) {
			resp->body = x.body ? x.body : strdup("");
			resp->body_len = x.body_len;
			x.body = NULL;
		} else {
			resp->body = x.errbody ? strndup(x.errbody, x.errbody_len) : strdup("");
			resp->body_len = x.errbody_len;
		}
		resp->attempts = attempt;
		xfer_reset(&x);
		curl_easy_reset(x.easy);   /* drops pointers into this frame, keeps connections */
		curl_slist_free_all(hdrs);
		return 0;
	}
	xfer_reset(&x);
	curl_easy_reset(x.easy);
	curl_slist_free_all(hdrs);
	return -1;
}

/* --- streams --- */

static int stream_has_data(const struct http_stream *s)
{
	return s->x.body_off < s->x.body_len;
}

/* Drives the transfer once; waits up to 1 s for activity. */
static void stream_pump(struct http_stream *s)
{
	int running = 0, msgs;
	CURLMsg *m;

	curl_multi_perform(s->multi, &running);
	while ((m = curl_multi_info_read(s->multi, &msgs)) != NULL) {
		if (m->msg == CURLMSG_DONE) {
			s->done = 1;
			s->result = m->data.result;
		}
	}
	/* Wait for the socket only when there is nothing to hand over yet;
	 * with a cancel flag, wake often enough to notice it. */
	if (!s->done && running && !stream_has_data(s))
		curl_multi_poll(s->multi, NULL, 0, s->opts.cancel != NULL ? 100 : 1000, NULL);
	else if (!s->done && !running)
		s->done = 1;
}


struct http_stream *http_stream_open(const struct http_opts *o, const struct http_request *req,
    struct err *e)
{
	return http_stream_open_resp(o, req, NULL, e);
}

/* A stream with its handles and headers, not started; NULL + e.  The
 * caller frees it with http_stream_free. */
static struct http_stream *stream_new(const struct http_opts *o, const struct http_request *req,
    struct err *e)
{
	struct http_stream *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	s->opts = *o;
	s->x.opts = &s->opts;
	s->x.stream = 1;
	s->hdrs = build_headers(req, e);
	s->multi = curl_multi_init();
	s->x.easy = curl_easy_init();
	if (s->hdrs == NULL || s->multi == NULL || s->x.easy == NULL) {
		if (s->hdrs != NULL)
			err_set(e, ERR_NOMEM, "curl initialisation failed");
		http_stream_free(s);
		return NULL;
	}
	return s;
}

/* Starts one attempt and drives it until a 2xx response's headers are in
 * or the transfer has ended (a non-2xx answer, or a failure). */
static void stream_attempt(struct http_stream *s, const struct http_request *req)
{
	xfer_reset(&s->x);
	curl_easy_reset(s->x.easy);
	configure(s->x.easy, &s->opts, req, s->hdrs, &s->x);
	s->curl_msg[0] = '\0';
	curl_easy_setopt(s->x.easy, CURLOPT_ERRORBUFFER, s->curl_msg);
	s->done = 0;
	s->result = CURLE_OK;
	curl_multi_add_handle(s->multi, s->x.easy);
	while (!s->done && !(s->x.headers_done && is_2xx(s->x.status)))
		stream_pump(s);
}

/* The refused response into *failed for a caller that reads it: status,
 * headers (moved from the stream) and the start of its body. */
static void hand_over_refusal(struct http_stream *s, struct http_response *failed, int attempt)
{
	memset(failed, 0, sizeof(*failed));
	failed->status = s->x.status;
	failed->raw_headers = s->x.raw_headers;
	s->x.raw_headers = NULL;
	failed->body = s->x.errbody ? strndup(s->x.errbody, s->x.errbody_len) : strdup("");
	failed->body_len = s->x.errbody_len;
	failed->attempts = attempt;
}

/* The 2xx response's status, headers and final URL, for the reader. */
static void stream_accept(struct http_stream *s, const struct http_request *req, int attempt)
{
	char *eff = NULL;

	snprintf(s->method, sizeof(s->method), "%s", req->method ? req->method : "GET");
	s->resp.status = s->x.status;
	s->resp.raw_headers = s->x.raw_headers ? strdup(s->x.raw_headers) : NULL;
	curl_easy_getinfo(s->x.easy, CURLINFO_EFFECTIVE_URL, &eff);
	s->resp.effective_url = eff ? strdup(eff) : NULL;
	s->resp.attempts = attempt;
}

struct http_stream *http_stream_open_resp(const struct http_opts *o, const struct http_request *req,
    struct http_response *failed, struct err *e)
{
	struct http_stream *s = stream_new(o, req, e);

	if (s == NULL)
		return NULL;
	for (int attempt = 1;; attempt++) {
		char *msg = s->curl_msg;
		int last = attempt > o->retries;

		if (rewind_body(req, e) < 0) {
			http_stream_free(s);
			return NULL;
		}
		stream_attempt(s, req);
		/* Once a 2xx response has begun, a broken body is the reader's to
		 * see: retrying here would depend on how much curl had buffered. */
		if (s->done && s->result != CURLE_OK && !(s->x.headers_done && is_2xx(s->x.status)) &&
		    !stopped_on_error_body(&s->x, s->result)) {
			curl_multi_remove_handle(s->multi, s->x.easy);
			if (!last && !s->x.limit_hit && curl_code_retryable(req, s->result) && can_resend(req) &&
			    backoff_wait(o, http_backoff_ms(o, attempt, 0, jitter_value())) == 0)
				continue;
			if (canceled(o))
				canceled_error(e, req->method, req->url);
			else
				transfer_error(e, req, &s->x, s->result, msg[0] ? msg : curl_easy_strerror(s->result));
			http_stream_free(s);
			return NULL;
		}
		if (!is_2xx(s->x.status)) {
			/* Non-2xx responses are read to the end before judging them. */
			while (!s->done)
				stream_pump(s);
			curl_multi_remove_handle(s->multi, s->x.easy);
			if (!last && http_should_retry_status(req, s->x.status) && can_resend(req) &&
			    backoff_wait(o, http_backoff_ms(o, attempt, retry_after(s->x.easy), jitter_value())) == 0)
				continue;
			if (canceled(o)) {
				canceled_error(e, req->method, req->url);
				http_stream_free(s);
				return NULL;
			}
			status_error(e, req, s->x.status, s->x.errbody);
			if (failed != NULL)
				hand_over_refusal(s, failed, attempt);
			http_stream_free(s);
			return NULL;
		}
		stream_accept(s, req, attempt);
		return s;
	}
}

ssize_t http_stream_read(struct http_stream *s, void *buf, size_t len, struct err *e)
{
	while (!stream_has_data(s) && !s->done)
		stream_pump(s);
	if (stream_has_data(s)) {
		size_t avail = s->x.body_len - s->x.body_off;
		size_t n = avail < len ? avail : len;
		memcpy(buf, s->x.body + s->x.body_off, n);
		s->x.body_off += n;
		return (ssize_t)n;
	}
	if (s->result != CURLE_OK) {
		struct http_request req = { .method = s->method,
		    .url = s->resp.effective_url ? s->resp.effective_url : "(unknown)" };
		if (canceled(&s->opts))
			return canceled_error(e, req.method, req.url);
		return transfer_error(e, &req, &s->x, s->result,
		    s->curl_msg[0] ? s->curl_msg : curl_easy_strerror(s->result));
	}
	return 0;
}

const struct http_response *http_stream_response(const struct http_stream *s)
{
	return &s->resp;
}

int64_t http_stream_content_length(const struct http_stream *s)
{
	curl_off_t cl = -1;

	curl_easy_getinfo(s->x.easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
	return cl;
}

void http_stream_free(struct http_stream *s)
{
	if (s == NULL)
		return;
	if (s->multi != NULL && s->x.easy != NULL)
		curl_multi_remove_handle(s->multi, s->x.easy);
	if (s->x.easy != NULL)
		curl_easy_cleanup(s->x.easy);
	if (s->multi != NULL)
		curl_multi_cleanup(s->multi);
	curl_slist_free_all(s->hdrs);
	xfer_reset(&s->x);
	http_response_free(&s->resp);
	free(s);
}
