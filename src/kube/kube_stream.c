/*
 * kube_stream.c - the watch transfer: a GET whose body is handed to a line
 * callback as soon as its bytes arrive (kube_priv.h, kube_stream_lines).
 *
 * This is the one place where src/kube/ drives libcurl itself, and it is a
 * stopgap.  base/http.h's stream reader waits in curl_multi_poll for up to
 * a second after every delivery, even when the bytes it was waiting for
 * have just arrived (stream_pump in base/http.c polls after each
 * curl_multi_perform whether or not the write callback was fed), so each
 * watch event would reach the cache up to a second late: bench/watch-scale
 * measured 1,005 ms from write to handler instead of 2.8 ms.  Everything
 * else comes from the caller's http_opts (kube_transport_init), which this
 * file applies the way http.h does.  Once http_stream_read returns as soon
 * as data is there, this file should become a loop over
 * http_stream_open_resp/http_stream_read and lose its libcurl code.
 */
#include <curl/curl.h>
#include <string.h>

#include "kube/kube_priv.h"

struct stream {
	CURL *h;
	const struct http_opts *o;
	struct kube_lines lines;
	kube_line_fn fn;
	void *ud;
	struct err *e;
	long status;               /* of the response being received */
	struct sb headers;         /* header block of the last response */
	struct sb errbody;         /* start of a non-2xx body */
	int fn_failed;
};

static int is_2xx(long status)
{
	return status >= 200 && status < 300;
}

static size_t on_header(char *data, size_t size, size_t n, void *ud)
{
	struct stream *s = ud;
	size_t len = size * n;

	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		/* a new response (after a 100 Continue, say): keep only the last */
		sb_free(&s->headers);
		sb_init(&s->headers);
	}
	sb_addn(&s->headers, data, len);
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
	struct stream *s = ud;
	size_t len = size * n;

	if (s->status == 0)
		curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->status);
	if (!is_2xx(s->status)) {
		if (s->errbody.len < HTTP_ERROR_BODY_MAX)
			sb_addn(&s->errbody, data, len < HTTP_ERROR_BODY_MAX - s->errbody.len ? len :
			    HTTP_ERROR_BODY_MAX - s->errbody.len);
		return len;
	}
	if (kube_lines_feed(&s->lines, data, len, s->fn, s->ud, s->e) < 0) {
		s->fn_failed = 1;
		return 0;   /* aborts the transfer */
	}
	return len;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	const struct stream *s = ud;

	(void)dt; (void)dn; (void)ut; (void)un;
	return s->o->cancel != NULL && *s->o->cancel != 0;
}

static void set_blob(CURL *h, CURLoption opt, const char *pem)
{
	struct curl_blob b = { (void *)pem, strlen(pem), CURL_BLOB_COPY };

	curl_easy_setopt(h, opt, &b);
}

/* The settings http.h would apply for these options. */
static void apply_opts(CURL *h, const struct http_opts *o)
{
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_USERAGENT, o->user_agent ? o->user_agent :
	    "pulumi-controller/" PC_VERSION);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, o->timeout_ms);
	/* A quiet watch on a half-open connection is otherwise only noticed at
	 * the transfer timeout (http.h has no such option). */
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	if (o->ca_file != NULL)
		curl_easy_setopt(h, CURLOPT_CAINFO, o->ca_file);
	if (o->ca_pem != NULL)
		set_blob(h, CURLOPT_CAINFO_BLOB, o->ca_pem);
	if (o->client_cert_file != NULL)
		curl_easy_setopt(h, CURLOPT_SSLCERT, o->client_cert_file);
	if (o->client_key_file != NULL)
		curl_easy_setopt(h, CURLOPT_SSLKEY, o->client_key_file);
	if (o->client_cert_pem != NULL)
		set_blob(h, CURLOPT_SSLCERT_BLOB, o->client_cert_pem);
	if (o->client_key_pem != NULL)
		set_blob(h, CURLOPT_SSLKEY_BLOB, o->client_key_pem);
	if (o->insecure_skip_tls_verify) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
}

int kube_stream_lines(const struct http_opts *o, const struct http_request *req, size_t max_line,
    kube_line_fn fn, void *ud, struct http_response *refused, struct err *e)
{
	struct stream s = { .o = o, .fn = fn, .ud = ud, .e = e };
	struct curl_slist *hdrs = NULL;
	char msg[CURL_ERROR_SIZE] = "";
	CURLcode rc;
	int ret;

	memset(refused, 0, sizeof(*refused));
	if (o->cancel != NULL && *o->cancel != 0)
		return err_set(e, ERR_CANCELED, "GET %s: canceled", req->url);
	s.h = curl_easy_init();
	if (s.h == NULL)
		return err_set(e, ERR_NOMEM, "GET %s: curl_easy_init failed", req->url);
	for (const char *const *h = req->headers; h != NULL && *h != NULL; h++)
		hdrs = curl_slist_append(hdrs, *h);
	kube_lines_init(&s.lines, max_line);
	sb_init(&s.headers);
	sb_init(&s.errbody);
	apply_opts(s.h, o);
	curl_easy_setopt(s.h, CURLOPT_URL, req->url);
	curl_easy_setopt(s.h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(s.h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(s.h, CURLOPT_HEADERDATA, &s);
	curl_easy_setopt(s.h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(s.h, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(s.h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(s.h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(s.h, CURLOPT_XFERINFODATA, &s);
	curl_easy_setopt(s.h, CURLOPT_ERRORBUFFER, msg);
	rc = curl_easy_perform(s.h);
	if (s.status == 0)
		curl_easy_getinfo(s.h, CURLINFO_RESPONSE_CODE, &s.status);
	if (s.fn_failed) {
		ret = -1;   /* e set by fn */
	} else if (rc == CURLE_ABORTED_BY_CALLBACK) {
		ret = err_set(e, ERR_CANCELED, "GET %s: canceled", req->url);
	} else if (rc != CURLE_OK) {
		ret = err_set(e, rc == CURLE_OPERATION_TIMEDOUT ? ERR_TIMEOUT : ERR_NET, "GET %s: %s",
		    req->url, msg[0] ? msg : curl_easy_strerror(rc));
	} else if (!is_2xx(s.status)) {
		refused->status = s.status;
		refused->body_len = s.errbody.len;
		refused->body = sb_take(&s.errbody);
		refused->raw_headers = sb_take(&s.headers);
		ret = 1;
	} else {
		ret = 0;
	}
	curl_easy_cleanup(s.h);
	curl_slist_free_all(hdrs);
	kube_lines_free(&s.lines);
	sb_free(&s.headers);
	sb_free(&s.errbody);
	return ret;
}
