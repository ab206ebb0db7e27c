/*
 * kube_stream.c - the informer's transfers (kube_priv.h): the watch, a GET
 * whose body is handed to a line callback as soon as its bytes arrive
 * (kube_stream_lines), and one list page with the informer's own Accept
 * header and a bound on the reply (kube_list_page).
 *
 * A loop over base/http.h's pull stream: http_stream_read returns as soon
 * as bytes are there, so each watch event reaches the cache without delay,
 * and the caller's http_opts (kube_transport_init: CA, client certificate,
 * cancel flag, keepalive, timeouts) apply exactly as for every other
 * request.  The chunks the reader returns are cut anywhere; kube_lines
 * puts the lines back together.
 */
#include <stdlib.h>
#include <string.h>

#include "kube/kube_priv.h"

/* Bytes taken from the stream per read; lines span reads freely. */
#define READ_CHUNK 16384
/* One list page, as the client's default request timeout. */
#define LIST_PAGE_TIMEOUT_MS 60000L

/* Feeds the body to fn until it ends; 0 at its end, -1 with e set. */
static int pump_lines(struct http_stream *st, size_t max_line, kube_line_fn fn, void *ud,
    struct err *e)
{
	struct kube_lines lines;
	char *buf = malloc(READ_CHUNK);
	ssize_t n;
	int ret = 0;

	if (buf == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	kube_lines_init(&lines, max_line);
	while ((n = http_stream_read(st, buf, READ_CHUNK, e)) > 0) {
		if (kube_lines_feed(&lines, buf, (size_t)n, fn, ud, e) < 0) {
			ret = -1;   /* e set by fn or the splitter */
			break;
		}
	}
	if (n < 0)
		ret = -1;   /* e names method and URL (http.h) */
	kube_lines_free(&lines);
	free(buf);
	return ret;
}

int kube_stream_lines(const struct http_opts *o, const struct http_request *req, size_t max_line,
    kube_line_fn fn, void *ud, struct http_response *refused, struct err *e)
{
	struct http_opts one = *o;
	struct http_stream *st;
	int ret;

	memset(refused, 0, sizeof(*refused));
	/* Nothing goes out once the caller has been told to stop. */
	if (o->cancel != NULL && *o->cancel != 0)
		return err_set(e, ERR_CANCELED, "%s %s: canceled", req->method ? req->method : "GET",
		    req->url);
	/* One attempt: the informer's loop is the retry policy (backoff,
	 * relist on 410, fresh credentials on 401), and it must see every
	 * refusal.  An API server does not redirect a watch; a redirect is
	 * reported as the refusal it is. */
	one.retries = 0;
	one.max_redirects = 0;
	st = http_stream_open_resp(&one, req, refused, e);
	if (st == NULL)
		return refused->status != 0 ? 1 : -1;
	ret = pump_lines(st, max_line, fn, ud, e);
	http_stream_free(st);   /* aborts the transfer when fn stopped it */
	return ret;
}

/* One GET of the page; 0 with a response of any status, -1 with e set
 * when none came back (network, timeout, the size bound, a cancel). */
static int get_page(struct kube_client *c, const char *url, const char *accept, int64_t max_bytes,
    int force_auth, struct http_response *resp, struct err *e)
{
	const char *hdrs[3] = { accept, NULL, NULL };
	struct http_request req = { .url = url, .headers = hdrs };
	struct kube_transport t;
	int rc;

	if (kube_transport_init(c, force_auth, &t, e) < 0)
		return -1;
	t.opts.timeout_ms = LIST_PAGE_TIMEOUT_MS;
	t.opts.max_bytes = max_bytes;
	hdrs[1] = t.auth_header;
	rc = http_do(&t.opts, &req, resp, e);
	kube_transport_free(&t);
	return rc;
}

cJSON *kube_list_page(struct kube_client *c, const char *path, const char *accept,
    int64_t max_bytes, long *retry_after_s, struct err *e)
{
	struct http_response resp;
	struct strbuf url;
	cJSON *page = NULL;
	int rc;

	*retry_after_s = -1;
	strbuf_init(&url);
	strbuf_add(&url, kube_client_server(c));
	strbuf_add(&url, path);
	rc = get_page(c, url.buf, accept, max_bytes, 0, &resp, e);
	if (rc == 0 && resp.status == 401) {
		/* A rotated token or an expired exec credential: read again. */
		http_response_free(&resp);
		rc = get_page(c, url.buf, accept, max_bytes, 1, &resp, e);
	}
	strbuf_free(&url);
	if (rc < 0)
		return NULL;   /* e names the URL (http.h) */
	if (resp.status < 200 || resp.status >= 300) {
		struct kube_status st;
		char what[600];
		*retry_after_s = http_response_retry_after(&resp);
		kube_status_parse(resp.body, resp.body_len, resp.status, &st);
		snprintf(what, sizeof(what), "GET %s", path);
		kube_status_error(e, what, &st);
	} else if ((page = cJSON_ParseWithLength(resp.body ? resp.body : "", resp.body_len)) == NULL) {
		err_set(e, ERR_INVALID, "GET %s: the response is not JSON", path);
	}
	http_response_free(&resp);
	return page;
}
