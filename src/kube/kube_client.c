/*
 * kube_client.c - REST requests to the API server (kube.h "client").
 *
 * Every request goes through base/http.h's http_do with its own retries
 * turned off, because the API decides what is safe to repeat (below);
 * watches use http.h's streams (kube_informer.c).  Both get their TLS
 * settings, client certificate and Authorization header from
 * kube_transport_init here, so the two cannot disagree on credentials
 * (which kube_auth.c keeps current).  Like client-go, credentials are only
 * sent over https.
 *
 * Retries: 429 always (the server did not act), honouring Retry-After; 5xx
 * and connection failures only for reads, or for any verb when the server
 * sent Retry-After (client-go's rule); one retry after a 401 with freshly
 * read credentials.  Everything else is the caller's to judge.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/http.h"
#include "base/log.h"
#include "base/str.h"
#include "kube/kube_priv.h"

/* Reply bounds.  A list may be large (issue 15 will bound pages); one
 * object cannot be: etcd refuses requests over 1.5 MiB by default, so a
 * reply to a get, create, update, patch, delete or discovery request far
 * above that is a hostile or broken server, not an object. */
#define BODY_MAX (256LL << 20)
#define OBJECT_BODY_MAX (16LL << 20)

struct kube_client {
	struct kube_config *cfg;
	struct kube_creds creds;   /* kube_auth.c */
	int tls;
	long timeout_ms;
	int retries;
};

/* Per-thread overrides of the client's budget (kube_request_limits). */
static __thread long tl_timeout_ms = -1;
static __thread int tl_retries = -1;

void kube_request_limits(long timeout_ms, int retries)
{
	tl_timeout_ms = timeout_ms;
	tl_retries = retries;
}

static long timeout_of(const struct kube_client *c)
{
	return tl_timeout_ms > 0 ? tl_timeout_ms : c->timeout_ms;
}

/* Set by kube_request_cancel_on(): a flag that ends retries and aborts the
 * transfer once non-zero. */
static __thread atomic_int *tl_cancel;

/* http.h polls the flag as a plain int: gcc gives atomic_int the same size
 * and representation, and a stale read only delays a cancel by one poll. */
_Static_assert(sizeof(atomic_int) == sizeof(int), "atomic_int must look like an int to http.h");

void kube_request_cancel_on(atomic_int *flag)
{
	tl_cancel = flag;
}

static int canceled(void)
{
	return tl_cancel != NULL && atomic_load(tl_cancel) != 0;
}

/* Sleeps in short steps so a cancel is noticed; 1 when canceled. */
static int retry_sleep(long ms)
{
	while (ms > 0 && !canceled()) {
		long step = ms < 100 ? ms : 100;
		clock_sleep_ms(step);
		ms -= step;
	}
	return canceled();
}

static int retries_of(const struct kube_client *c)
{
	return tl_retries >= 0 ? tl_retries : c->retries;
}

struct kube_client *kube_client_new(struct kube_config *cfg, struct err *e)
{
	struct kube_client *c;

	if (cfg == NULL || cfg->server == NULL) {
		kube_config_free(cfg);
		err_set(e, ERR_INVALID, "kube client: no server configured");
		return NULL;
	}
	if (kube_config_validate(cfg, e) < 0) {
		kube_config_free(cfg);
		return NULL;
	}
	c = xcalloc(1, sizeof(*c));
	c->cfg = cfg;
	kube_creds_init(&c->creds);
	c->tls = str_has_prefix(cfg->server, "https://");
	if (c->tls && cfg->insecure_skip_tls_verify) {
		/* Once per client, at start, where an operator looks: every
		 * request from now on trusts whoever answers at this address. */
		char server[512];
		log_warn("TLS verification of the Kubernetes API server is off (insecure-skip-tls-verify): "
		    "its certificate is not checked, so anyone on the path can impersonate it and receive "
		    "the credentials sent to it",
		    "server", kube_config_server_for_log(cfg, server, sizeof(server)),
		    "config", cfg->source ? cfg->source : "", NULL);
	}
	c->timeout_ms = 60000;
	c->retries = 5;
	return c;
}

void kube_client_free(struct kube_client *c)
{
	if (c == NULL)
		return;
	kube_creds_free(&c->creds);
	kube_config_free(c->cfg);
	free(c);
}

const struct kube_config *kube_client_config(const struct kube_client *c)
{
	return c->cfg;
}

const char *kube_client_server(const struct kube_client *c)
{
	return c->cfg->server;
}

void kube_client_set_timeout_ms(struct kube_client *c, long ms)
{
	c->timeout_ms = ms;
}

void kube_client_set_retries(struct kube_client *c, int retries)
{
	c->retries = retries < 0 ? 0 : retries;
}

static int transport_init(struct kube_client *c, int force_refresh, unsigned long refused_gen,
    struct kube_transport *t, struct err *e)
{
	const struct kube_config *cfg = c->cfg;

	memset(t, 0, sizeof(*t));
	http_opts_default(&t->opts);
	t->opts.retries = 0;           /* the callers' policies decide */
	t->opts.max_redirects = 0;
	t->opts.insecure_skip_tls_verify = cfg->insecure_skip_tls_verify;
	if (cfg->ca_pem != NULL)
		t->opts.ca_pem = cfg->ca_pem;
	else
		t->opts.ca_file = cfg->ca_file;
	t->opts.cancel = (const volatile int *)(void *)tl_cancel;
	if (!c->tls)
		return 0;   /* never send credentials in the clear */
	if (kube_creds_get(&c->creds, cfg, force_refresh, refused_gen, t, e) < 0)
		return -1;
	if (t->cert_pem != NULL) {
		t->opts.client_cert_pem = t->cert_pem;
		t->opts.client_key_pem = t->key_pem;
	} else {
		/* data wins over a path, as in client-go */
		t->opts.client_cert_pem = cfg->client_cert_pem;
		t->opts.client_cert_file = cfg->client_cert_pem ? NULL : cfg->client_cert_file;
		t->opts.client_key_pem = cfg->client_key_pem;
		t->opts.client_key_file = cfg->client_key_pem ? NULL : cfg->client_key_file;
	}
	return 0;
}

int kube_transport_init(struct kube_client *c, int force_refresh, struct kube_transport *t,
    struct err *e)
{
	return transport_init(c, force_refresh, 0, t, e);
}

int kube_transport_renew(struct kube_client *c, unsigned long refused_gen,
    struct kube_transport *t, struct err *e)
{
	return transport_init(c, 1, refused_gen, t, e);
}

void kube_transport_free(struct kube_transport *t)
{
	secret_free(t->auth_header);
	free(t->cert_pem);
	secret_free(t->key_pem);
	memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------ status */

/*
 * Copies what a server said into a message buffer of n bytes: control
 * characters (a CR/LF would start a line of its own in a text log, an
 * escape sequence would drive the terminal) become spaces, and a cut falls
 * between UTF-8 characters, never inside one.
 */
static void copy_printable(char *dst, size_t n, const char *src)
{
	size_t w = 0, len = strlen(src);

	for (size_t i = 0; i < len;) {
		unsigned char ch = (unsigned char)src[i];
		size_t clen = ch < 0x80 ? 1 : ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc0 ? 2 : 1;
		if (clen > len - i)
			clen = len - i;
		if (w + clen >= n)
			break;
		if (ch < 0x20 || ch == 0x7f) {
			dst[w++] = ' ';
			i++;
			continue;
		}
		memcpy(dst + w, src + i, clen);
		w += clen;
		i += clen;
	}
	dst[w] = '\0';
}

/* A Status is a few hundred bytes; one far larger is not parsed (a hostile
 * server's body would cost many times its size as a cJSON tree). */
#define STATUS_PARSE_MAX (64 << 10)

int kube_status_parse(const char *body, size_t len, long http_status, struct kube_status *st)
{
	cJSON *doc = body && len <= STATUS_PARSE_MAX ? cJSON_ParseWithLength(body, len) : NULL;
	const char *kind = kube_obj_str(doc, "kind");
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(doc, "code");
	int rc = -1;

	memset(st, 0, sizeof(*st));
	st->code = http_status;
	if (str_eq(kind, "Status")) {
		const char *reason = kube_obj_str(doc, "reason"), *msg = kube_obj_str(doc, "message");
		if (cJSON_IsNumber(code) && code->valuedouble >= 100 && code->valuedouble < 600)
			st->code = (long)code->valuedouble;
		copy_printable(st->reason, sizeof(st->reason), reason ? reason : "");
		copy_printable(st->message, sizeof(st->message), msg ? msg : "");
		rc = 0;
	} else if (body != NULL && len > 0) {
		/* Not a Status (a proxy's error page...): keep a printable start. */
		size_t n = len < sizeof(st->message) - 1 ? len : sizeof(st->message) - 1;
		for (size_t i = 0; i < n; i++)
			st->message[i] = (body[i] >= 32 && body[i] < 127) ? body[i] : ' ';
		st->message[n] = '\0';
	}
	cJSON_Delete(doc);
	return rc;
}

int kube_status_error(struct err *e, const char *what, const struct kube_status *st)
{
	enum err_code code;

	switch (st->code) {
	case 404: code = ERR_NOTFOUND; break;
	case 401: case 403: code = ERR_AUTH; break;
	case 409: code = ERR_CONFLICT; break;
	case 504: code = ERR_TIMEOUT; break;
	default: code = ERR_HTTP; break;
	}
	if (st->code >= 300 && st->code < 400 && st->reason[0] == '\0')
		/* http.h was told not to follow: credentials go to the
		 * configured server and nowhere else */
		err_set(e, code, "%s: %ld: the server answered with a redirect, which is not followed",
		    what, st->code);
	else
		err_set(e, code, "%s: %ld %s%s%s", what, st->code, st->reason[0] ? st->reason : "error",
		    st->message[0] ? ": " : "", st->message);
	e->http_status = (int)st->code;
	return -1;
}

/* ------------------------------------------------------------ transport */

struct reply {
	long status;
	char *body;
	size_t len;
	long retry_after_s;        /* -1 when absent */
	unsigned long cred_gen;    /* the credentials it was sent with */
};

/* "GET /api/v1/namespaces/x/secrets" from a method and a path that may
 * carry a query: the name of a request in messages and logs. */
static void request_name(char *buf, size_t n, const char *method, const char *path)
{
	snprintf(buf, n, "%s %.*s", method, (int)strcspn(path, "?"), path);
}

/* One attempt, with fresh credentials when renew is set (the server
 * refused those of generation refused_gen). -1 only when no response came
 * back. */
static int send_once(struct kube_client *c, const char *method, const char *url,
    const char *content_type, const char *body, long long max_bytes, int renew,
    unsigned long refused_gen, struct reply *r, struct err *e)
{
	struct kube_transport t;
	struct http_request req = { .method = method, .url = url, .body = body,
	    .body_len = body ? strlen(body) : 0 };
	struct http_response resp;
	const char *hdrs[4];
	char ct[128];
	int n = 0, rc;

	memset(r, 0, sizeof(*r));
	r->retry_after_s = -1;
	if ((renew ? kube_transport_renew(c, refused_gen, &t, e) : kube_transport_init(c, 0, &t, e)) < 0)
		return -1;
	r->cred_gen = t.cred_gen;
	t.opts.timeout_ms = timeout_of(c);
	if (t.opts.connect_timeout_ms > t.opts.timeout_ms)
		t.opts.connect_timeout_ms = t.opts.timeout_ms;
	t.opts.max_bytes = max_bytes;
	hdrs[n++] = "Accept: application/json";
	if (content_type != NULL) {
		snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
		hdrs[n++] = ct;
	}
	if (t.auth_header != NULL)
		hdrs[n++] = t.auth_header;
	hdrs[n] = NULL;
	req.headers = hdrs;
	rc = http_do(&t.opts, &req, &resp, e);
	kube_transport_free(&t);
	if (rc < 0)
		return -1;   /* http.h names the URL through url_for_log: no query */
	r->status = resp.status;
	r->retry_after_s = http_response_retry_after(&resp);
	r->body = resp.body;
	r->len = resp.body_len;
	resp.body = NULL;
	http_response_free(&resp);
	return 0;
}

static int method_is_read(const char *m)
{
	return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

/* A request that failed before an answer is sent again only when it reads
 * (a write may have happened) and the failure may pass. */
static int transport_retryable(const char *method, const struct err *e)
{
	return method_is_read(method) && e->code != ERR_AUTH && e->code != ERR_LIMIT &&
	    e->code != ERR_CANCELED;
}

/* A 429 always; a 5xx but 501 when the request reads or the server said
 * when to come back (then it did not act on it). */
static int status_retryable(const char *method, const struct reply *r)
{
	if (r->status == 429)
		return 1;
	return r->status >= 500 && r->status != 501 && (method_is_read(method) || r->retry_after_s >= 0);
}

/* The server's Retry-After (bounded) if it sent one, else our backoff. */
static long retry_delay_ms(const struct reply *r, long backoff_ms)
{
	if (r->retry_after_s < 0)
		return backoff_ms;
	return (r->retry_after_s < KUBE_RETRY_AFTER_MAX_S ? r->retry_after_s : KUBE_RETRY_AFTER_MAX_S) * 1000;
}

static long next_backoff_ms(long ms)
{
	return ms * 2 > 10000 ? 10000 : ms * 2;
}

/* e from a refused reply's Status body; always -1. */
static int refused_error(struct err *e, const char *what, const struct reply *r)
{
	struct kube_status st;

	kube_status_parse(r->body, r->len, r->status, &st);
	kube_status_error(e, what, &st);
	return -1;
}

/* kube_request with a bound on the reply's size. */
static int request(struct kube_client *c, const char *method, const char *path,
    const char *content_type, const char *body, long long max_bytes, long *status,
    char **resp_body, struct err *e)
{
	struct strbuf url;
	struct reply r;
	int refreshed = 0, attempt;
	unsigned long refused_gen = 0;
	long wait_ms = 200;
	char what[600];

	strbuf_init(&url);
	strbuf_add(&url, c->cfg->server);
	strbuf_add(&url, path);
	request_name(what, sizeof(what), method, path);
	*status = 0;
	if (resp_body)
		*resp_body = NULL;
	if (canceled()) {
		strbuf_free(&url);
		return err_set(e, ERR_CANCELED, "%s: canceled", what);
	}
	for (attempt = 0;; attempt++) {
		int last = attempt >= retries_of(c);
		if (send_once(c, method, url.buf, content_type, body, max_bytes, refreshed == 1,
		    refused_gen, &r, e) < 0) {
			if (!last && transport_retryable(method, e) && !retry_sleep(wait_ms)) {
				wait_ms = next_backoff_ms(wait_ms);
				continue;
			}
			strbuf_free(&url);
			return -1;
		}
		*status = r.status;
		if (r.status >= 200 && r.status < 300) {
			if (resp_body)
				*resp_body = r.body;
			else
				free(r.body);
			strbuf_free(&url);
			return 0;
		}
		if (r.status == 401 && refreshed == 0 && c->cfg->token == NULL) {
			/* A rotated token or an expired exec credential: read again. */
			refreshed = 1;
			refused_gen = r.cred_gen;
			free(r.body);
			attempt--;
			continue;
		}
		if (refreshed == 1)
			refreshed = 2;
		if (!last && status_retryable(method, &r)) {
			log_debug("kube request retried", "request", what, "status",
			    r.status == 429 ? "429" : "5xx", NULL);
			free(r.body);
			if (retry_sleep(retry_delay_ms(&r, wait_ms))) {
				strbuf_free(&url);
				return err_set(e, ERR_CANCELED, "%s: canceled", what);
			}
			wait_ms = next_backoff_ms(wait_ms);
			continue;
		}
		refused_error(e, what, &r);
		free(r.body);
		strbuf_free(&url);
		return -1;
	}
}

int kube_request(struct kube_client *c, const char *method, const char *path,
    const char *content_type, const char *body, long *status, char **resp_body, struct err *e)
{
	return request(c, method, path, content_type, body, BODY_MAX, status, resp_body, e);
}

/* ------------------------------------------------------------ typed calls */

char *kube_path(const struct kube_resource *r, const char *ns, const char *name,
    const char *subresource)
{
	struct strbuf s;

	strbuf_init(&s);
	if (r->group == NULL || r->group[0] == '\0')
		strbuf_printf(&s, "/api/%s", r->version);
	else
		strbuf_printf(&s, "/apis/%s/%s", r->group, r->version);
	if (r->namespaced && ns != NULL && *ns) {
		strbuf_add(&s, "/namespaces/");
		strbuf_add_query_value(&s, ns);
	}
	strbuf_add(&s, "/");
	strbuf_add(&s, r->resource);
	if (name != NULL) {
		strbuf_add(&s, "/");
		strbuf_add_query_value(&s, name);
		if (subresource != NULL) {
			strbuf_add(&s, "/");
			strbuf_add(&s, subresource);
		}
	}
	return strbuf_take(&s);
}

static cJSON *json_call(struct kube_client *c, const char *method, char *path,
    const char *ctype, const char *body, long long max_bytes, struct err *e)
{
	long status;
	char *resp = NULL;
	cJSON *doc;

	if (request(c, method, path, ctype, body, max_bytes, &status, &resp, e) < 0) {
		free(path);
		return NULL;
	}
	doc = cJSON_Parse(resp ? resp : "");
	if (doc == NULL) {
		char what[600];
		request_name(what, sizeof(what), method, path);
		err_set(e, ERR_INVALID, "%s: the response is not JSON", what);
	}
	free(resp);
	free(path);
	return doc;
}

cJSON *kube_get(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *subresource, struct err *e)
{
	return json_call(c, "GET", kube_path(r, ns, name, subresource), NULL, NULL, OBJECT_BODY_MAX,
	    e);
}

cJSON *kube_list(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const struct kube_list_opts *o, struct err *e)
{
	struct strbuf s;
	char *base = kube_path(r, ns, NULL, NULL);
	char sep = '?';

	strbuf_init(&s);
	strbuf_add(&s, base);
	free(base);
#define QP(key, val) do { strbuf_printf(&s, "%c%s=", sep, key); strbuf_add_query_value(&s, val); sep = '&'; } while (0)
	if (o != NULL) {
		if (o->label_selector && *o->label_selector)
			QP("labelSelector", o->label_selector);
		if (o->field_selector && *o->field_selector)
			QP("fieldSelector", o->field_selector);
		if (o->limit > 0) {
			char n[32];
			snprintf(n, sizeof(n), "%ld", o->limit);
			QP("limit", n);
		}
		if (o->continue_token && *o->continue_token)
			QP("continue", o->continue_token);
		if (o->resource_version && *o->resource_version)
			QP("resourceVersion", o->resource_version);
	}
#undef QP
	return json_call(c, "GET", strbuf_take(&s), NULL, NULL, BODY_MAX, e);
}

cJSON *kube_create(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const cJSON *obj, struct err *e)
{
	char *body = cJSON_PrintUnformatted(obj);
	cJSON *out = json_call(c, "POST", kube_path(r, ns, NULL, NULL), "application/json", body,
	    OBJECT_BODY_MAX, e);
	free(body);
	return out;
}

cJSON *kube_update(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const cJSON *obj, const char *subresource, struct err *e)
{
	const char *name = kube_obj_str(obj, "metadata.name");
	char *body;
	cJSON *out;

	if (name == NULL) {
		err_set(e, ERR_INVALID, "update %s: the object has no metadata.name", r->resource);
		return NULL;
	}
	body = cJSON_PrintUnformatted(obj);
	out = json_call(c, "PUT", kube_path(r, ns, name, subresource), "application/json", body,
	    OBJECT_BODY_MAX, e);
	free(body);
	return out;
}

cJSON *kube_patch(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *subresource, enum kube_patch_type type, const char *patch,
    const char *field_manager, int force, struct err *e)
{
	static const char *ctypes[] = { "application/merge-patch+json",
		"application/json-patch+json", "application/apply-patch+yaml" };
	struct strbuf s;
	char *p = kube_path(r, ns, name, subresource);
	char sep = '?';

	if (type == KUBE_PATCH_APPLY && (field_manager == NULL || *field_manager == '\0')) {
		free(p);
		err_set(e, ERR_INVALID, "apply %s/%s: a field manager is required", r->resource, name);
		return NULL;
	}
	strbuf_init(&s);
	strbuf_add(&s, p);
	free(p);
	if (field_manager != NULL && *field_manager) {
		strbuf_printf(&s, "%cfieldManager=", sep);
		strbuf_add_query_value(&s, field_manager);
		sep = '&';
	}
	if (type == KUBE_PATCH_APPLY && force)
		strbuf_printf(&s, "%cforce=true", sep);
	return json_call(c, "PATCH", strbuf_take(&s), ctypes[type], patch, OBJECT_BODY_MAX, e);
}

cJSON *kube_modify(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *subresource, int attempts, kube_mutate_fn mutate, void *ud,
    struct err *e)
{
	for (int i = 0; i < (attempts > 0 ? attempts : 1); i++) {
		cJSON *obj = kube_get(c, r, ns, name, subresource, e), *out;
		int rc;
		if (obj == NULL)
			return NULL;
		rc = mutate(ud, obj, e);
		if (rc <= 0) {
			if (rc == 0)
				return obj;
			cJSON_Delete(obj);
			return NULL;
		}
		out = kube_update(c, r, ns, obj, subresource, e);
		cJSON_Delete(obj);
		if (out != NULL || e->http_status != 409)
			return out;
		/* someone wrote in between: read again (10 ms, as client-go) */
		clock_sleep_ms(10 + (long)(kube_rand01() * 2));
	}
	return NULL;
}

int kube_delete(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *resource_version, struct err *e)
{
	char *path = kube_path(r, ns, name, NULL), *body;
	cJSON *opts = cJSON_CreateObject();
	long status;
	int rc;

	cJSON_AddStringToObject(opts, "propagationPolicy", "Background");
	if (resource_version != NULL) {
		cJSON *pre = cJSON_AddObjectToObject(opts, "preconditions");
		cJSON_AddStringToObject(pre, "resourceVersion", resource_version);
	}
	body = cJSON_PrintUnformatted(opts);
	cJSON_Delete(opts);
	rc = request(c, "DELETE", path, "application/json", body, OBJECT_BODY_MAX, &status, NULL, e);
	free(body);
	free(path);
	return rc;
}

int kube_resource_served(struct kube_client *c, const struct kube_resource *r, struct err *e)
{
	struct strbuf s;
	cJSON *doc, *list, *it;
	long status;
	char *body = NULL;
	int found = 0;

	strbuf_init(&s);
	if (r->group == NULL || r->group[0] == '\0')
		strbuf_printf(&s, "/api/%s", r->version);
	else
		strbuf_printf(&s, "/apis/%s/%s", r->group, r->version);
	if (request(c, "GET", s.buf, NULL, NULL, OBJECT_BODY_MAX, &status, &body, e) < 0) {
		strbuf_free(&s);
		if (e->code == ERR_NOTFOUND)
			return 0;
		return -1;
	}
	doc = cJSON_Parse(body ? body : "");
	free(body);
	list = cJSON_GetObjectItemCaseSensitive(doc, "resources");
	cJSON_ArrayForEach(it, list) {
		const char *name = kube_obj_str(it, "name");
		if (str_eq(name, r->resource))
			found = 1;
	}
	if (doc == NULL) {
		err_set(e, ERR_INVALID, "GET %s: the discovery document is not JSON", s.buf);
		found = -1;
	}
	cJSON_Delete(doc);
	strbuf_free(&s);
	return found;
}
