/*
 * kube_stream.c - the watch transfer: a GET whose body is handed to a line
 * callback as soon as its bytes arrive (kube_priv.h, kube_stream_lines).
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
