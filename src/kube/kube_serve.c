/*
 * kube_serve.c - the health and metrics endpoints (kube.h "probes") on
 * libmicrohttpd with its own polling thread.  Only GET is served; anything
 * else is 404/405, and nothing from the request is echoed back.  The
 * library's own messages (a malformed request, a failed bind) go through
 * base/log.h, rate-limited, never raw to stderr: stderr is JSON lines.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kube/kube_priv.h"

/* A client can make the library complain at will: a few lines, then one
 * every 10 s. */
#define MHD_LOG_BURST 5
#define MHD_LOG_INTERVAL_MS 10000L
/* Probes and scrapes use a connection or two each; a client holding more
 * (idle, each for the 10 s timeout) would otherwise take every descriptor
 * the process has, API connections included. */
#define CONNECTIONS_PER_IP 16
#define CONNECTIONS_MAX 128

struct kube_serve {
	struct MHD_Daemon *d;
	kube_ready_fn ready;
	kube_metrics_fn metrics;
	void *ud;
	int port;
};

static pthread_mutex_t mhd_log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kube_rate_gate mhd_log_gate;

/* libmicrohttpd's messages, one line each and sometimes with its canned
 * HTML error page; the text is the library's, not the client's. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char msg[512], n[32];
	unsigned long held;
	size_t len;
	int pass;
	(void)cls;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	len = strlen(msg);
	while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
		msg[--len] = '\0';
	pthread_mutex_lock(&mhd_log_lock);
	pass = kube_rate_gate_pass(&mhd_log_gate, MHD_LOG_BURST, MHD_LOG_INTERVAL_MS, &held);
	pthread_mutex_unlock(&mhd_log_lock);
	if (!pass)
		return;
	snprintf(n, sizeof(n), "%lu", held);
	log_warn("probe server", "error", msg, held ? "suppressed" : NULL, n, NULL);
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int code, const char *ctype,
    char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result rc;

	if (r == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	rc = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload, size_t *upload_len, void **state)
{
	struct kube_serve *s = cls;
	(void)version; (void)upload; (void)upload_len; (void)state;

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(conn, 405, "text/plain", xstrdup("method not allowed\n"), 19);
	if (strcmp(url, "/healthz") == 0 || strcmp(url, "/livez") == 0)
		return reply(conn, 200, "text/plain", xstrdup("ok\n"), 3);
	if (strcmp(url, "/readyz") == 0) {
		if (s->ready == NULL || s->ready(s->ud))
			return reply(conn, 200, "text/plain", xstrdup("ok\n"), 3);
		return reply(conn, 503, "text/plain", xstrdup("caches not synced\n"), 18);
	}
	if (strcmp(url, "/metrics") == 0 && s->metrics != NULL) {
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		if (f == NULL)
			return MHD_NO;
		s->metrics(s->ud, f);
		fclose(f);
		return reply(conn, 200, "text/plain; version=0.0.4", buf, len);
	}
	return reply(conn, 404, "text/plain", xstrdup("not found\n"), 10);
}

struct kube_serve *kube_serve_start(const char *addr, kube_ready_fn ready,
    kube_metrics_fn metrics, void *ud, struct err *e)
{
	struct sockaddr_in sin;
	const char *colon = addr ? strrchr(addr, ':') : NULL;
	char host[64];
	char *end;
	long port;
	struct kube_serve *s;
	const union MHD_DaemonInfo *info;

	if (colon == NULL) {
		err_set(e, ERR_INVALID, "listen address \"%s\": expected host:port or :port", addr ? addr : "");
		return NULL;
	}
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || end == colon + 1 || port < 0 || port > 65535) {
		err_set(e, ERR_INVALID, "listen address \"%s\": bad port", addr);
		return NULL;
	}
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	if ((size_t)(colon - addr) >= sizeof(host)) {
		err_set(e, ERR_INVALID, "listen address \"%s\": bad host", addr);
		return NULL;
	}
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	if (host[0] == '\0')
		sin.sin_addr.s_addr = htonl(INADDR_ANY);
	else if (strcmp(host, "localhost") == 0)
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else if (inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
		err_set(e, ERR_INVALID, "listen address \"%s\": host must be an IPv4 address", addr);
		return NULL;
	}
	s = xcalloc(1, sizeof(*s));
	s->ready = ready;
	s->metrics = metrics;
	s->ud = ud;
	s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
	    handle, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,   /* first, or it misses some */
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sin,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)CONNECTIONS_PER_IP,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONNECTIONS_MAX, MHD_OPTION_END);
	if (s->d == NULL) {
		free(s);
		err_set(e, ERR_IO, "listen on %s: cannot start the HTTP server (address in use?)", addr);
		return NULL;
	}
	info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : (int)port;
	return s;
}

int kube_serve_port(const struct kube_serve *s)
{
	return s ? s->port : 0;
}

void kube_serve_stop(struct kube_serve *s)
{
	if (s == NULL)
		return;
	MHD_stop_daemon(s->d);
	free(s);
}
