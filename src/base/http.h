/*
 * http.h - the one HTTP client of the program, on libcurl.
 *
 * Two ways to make a request:
 *   - http_do(): the whole response body into memory (bounded by max_bytes),
 *     for API calls and manifests;
 *   - http_stream_open()/http_stream_read(): a pull stream over the body,
 *     for artifacts and blobs, so a download can be hashed and unpacked in
 *     the same pass without ever being held in memory or written to disk.
 *
 * Retry policy (http_should_retry): connection errors, timeouts, 5xx except
 * 501, and 429 are retried with exponential backoff (Retry-After honoured for
 * 429 and 503); other 4xx never are.  Retries happen only before the first
 * body byte reaches the caller; a stream that breaks later fails with
 * ERR_NET and the caller decides whether to start over.
 *
 * TLS verification is always on unless insecure_skip_tls_verify is set;
 * ca_file adds a custom CA bundle.  Redirects are followed up to
 * max_redirects; curl does not send an Authorization header to another host.
 *
 * Error messages name the method and the URL as url_for_log (base/url.h)
 * prints it: without userinfo, query or fragment, so neither a password in
 * the URL nor the signature of a presigned redirect target reaches a
 * message.  Header values are never put into them (they may carry
 * credentials).
 */
#ifndef PC_HTTP_H
#define PC_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "base/err.h"

struct http_opts {
	long connect_timeout_ms;   /* default 10 s */
	long timeout_ms;           /* whole request incl. body; 0 = none. default 5 min */
	long stall_timeout_ms;     /* abort when no byte arrives for this long; 0 = none. default 30 s */
	int retries;               /* attempts after the first; default 3 */
	long backoff_initial_ms;   /* first wait; doubled each retry; default 500 ms */
	long backoff_max_ms;       /* cap on one wait; default 30 s */
	int64_t max_bytes;         /* response body limit; -1 = none. default -1 */
	int max_redirects;         /* 0 = do not follow; default 10 */
	const char *ca_file;       /* CA bundle (PEM) to trust instead of the system's, or NULL */
	const char *ca_pem;        /* the same given in memory (kubeconfig certificate-authority-data) */
	int insecure_skip_tls_verify;
	/* TLS client authentication: files, or PEM in memory.  Borrowed. */
	const char *client_cert_file, *client_key_file;
	const char *client_cert_pem, *client_key_pem;
	const char *user_agent;    /* default "pulumi-controller/<version>" */
	/* When set, a non-zero value cancels the request (checked about every
	 * 100 ms and between retries): ERR_CANCELED.  For stopping watches and
	 * requests from another thread. */
	const volatile int *cancel;
	/* TCP keepalive probes after this many idle seconds (0 = off), so a
	 * long-lived watch notices a peer that vanished without a FIN. */
	long tcp_keepalive_s;
	/* A clock_mono_ms() time (base/clock.h) that bounds the whole call,
	 * retries and their backoff (Retry-After included) too: each attempt's
	 * timeout is cut to what is left, and no wait runs past it (the last
	 * response or error is reported instead).  0 = none. */
	int64_t deadline_ms;
};

void http_opts_default(struct http_opts *o);

/*
 * One request.  headers is a NULL-terminated list of "Name: value" lines
 * (or NULL).  body may be NULL.
 *
 * A large body can be streamed instead: body_read fills buf and returns the
 * bytes it wrote, 0 at the end, -1 to abort; body_len must then be the total
 * length.  body_rewind (may be NULL) restarts it and is called before every
 * attempt, so the same request can be passed to http_do again (after a 401,
 * say); without it a streamed request is tried once.  Nothing here is owned
 * by the request.
 *
 * Retries follow the method: GET, HEAD, PUT, DELETE and OPTIONS are
 * idempotent and retried as the policy above says; POST and PATCH are
 * retried only when the request surely was not processed (could not
 * connect, 429, 503), unless retry_unsafe is set.
 */
struct http_request {
	const char *method;        /* "GET" when NULL */
	const char *url;
	const char *const *headers;
	const void *body;
	size_t body_len;
	ssize_t (*body_read)(void *ud, void *buf, size_t len);
	int (*body_rewind)(void *ud);
	void *body_ud;
	int retry_unsafe;
};

/* What came back.  All strings are owned by the response; free with
 * http_response_free.  For a non-2xx response body holds at most the first
 * HTTP_ERROR_BODY_MAX bytes (enough for a Kubernetes Status with causes);
 * the transfer of a 4xx/5xx body stops there, so an error body that never
 * ends costs nothing more. */
#define HTTP_ERROR_BODY_MAX 65536
struct http_response {
	long status;
	char *body;                /* NUL-terminated; NULL for streams */
	size_t body_len;
	char *raw_headers;         /* header block of the final response */
	char *effective_url;       /* after redirects; may hold a presigned query: print it
	                            * only through url_for_log */
	int attempts;              /* how many tries were made */
};

void http_response_free(struct http_response *r);

/* Case-insensitive header lookup in the final response.  Returns a malloc'd
 * value (caller frees) or NULL. */
char *http_response_header(const struct http_response *r, const char *name);

/*
 * Performs the request with retries and returns the final response whatever
 * its status (the caller judges 4xx/5xx); -1 only when no response could be
 * had (network, timeout, size limit), with e set.
 */
int http_do(const struct http_opts *o, const struct http_request *req,
    struct http_response *resp, struct err *e);

/*
 * Opens a streaming GET-like request.  Returns NULL with e set unless the
 * final status is 2xx; for a non-2xx final status e->code is ERR_NOTFOUND
 * (404), ERR_AUTH (401/403) or ERR_HTTP, e->http_status is set, and the
 * message includes the start of the server's error body.
 * The stream is freed with http_stream_free, which aborts the transfer.
 */
struct http_stream;
struct http_stream *http_stream_open(const struct http_opts *o, const struct http_request *req,
    struct err *e);

/* As http_stream_open; when the final status is not 2xx and failed is not
 * NULL, it receives that response (status, headers, the start of the body)
 * so a caller can read e.g. WWW-Authenticate.  Free it with
 * http_response_free. */
struct http_stream *http_stream_open_resp(const struct http_opts *o, const struct http_request *req,
    struct http_response *failed, struct err *e);

/* Reads up to len body bytes.  Returns >0 bytes, 0 at the end of the body,
 * -1 on error (ERR_NET, ERR_TIMEOUT, ERR_LIMIT) with e set. */
ssize_t http_stream_read(struct http_stream *s, void *buf, size_t len, struct err *e);

/* The response headers of a stream (valid until http_stream_free). */
const struct http_response *http_stream_response(const struct http_stream *s);

/* Content-Length when the server sent one, else -1. */
int64_t http_stream_content_length(const struct http_stream *s);

void http_stream_free(struct http_stream *s);

/* --- the retry policy, exposed for tests --- */

/* 1 when a response with this status should be retried. */
int http_status_retryable(long status);

/* 1 for methods whose repetition is harmless (GET, HEAD, PUT, DELETE, OPTIONS). */
int http_method_idempotent(const char *method);

/* The retry decision for a status, given the request's method. */
int http_should_retry_status(const struct http_request *req, long status);

/* Wait before retry number `attempt` (1-based): initial * 2^(attempt-1),
 * capped, plus up to 10% jitter from `jitter` in [0,1).  A Retry-After
 * value (seconds, >= 0) overrides it when larger, still capped. */
long http_backoff_ms(const struct http_opts *o, int attempt, long retry_after_s, double jitter);

/*
 * Retry-After (RFC 9110 10.2.3) in seconds from now, for callers that make
 * their own retry decisions (the kube client): value is delay-seconds or
 * an HTTP-date (parsed by libcurl's curl_getdate), `now` the current
 * wall-clock time.  Returns -1 when value is NULL or neither form, 0 for a
 * date in the past; values are capped at one day.  The retries inside this
 * module take the same number from libcurl (CURLINFO_RETRY_AFTER).
 */
long http_parse_retry_after(const char *value, time_t now);

/* The response's Retry-After as http_parse_retry_after reads it; -1 when
 * the header is absent or unreadable. */
long http_response_retry_after(const struct http_response *r);

/*
 * Global libcurl setup; call once from main before any thread starts.
 * http_do keeps one curl handle per thread so connections (and TLS
 * sessions) to a server are reused across requests; a thread's handle is
 * freed when the thread exits, the main thread's by http_global_cleanup.
 */
int http_global_init(struct err *e);
void http_global_cleanup(void);

#endif
