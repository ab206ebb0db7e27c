/*
 * test_kube_client.c - the REST layer against a scripted HTTP server on
 * 127.0.0.1 (libmicrohttpd): Status parsing into errors, which failures
 * are retried for which verbs (429 always, honouring Retry-After; 5xx for
 * reads, or with Retry-After; never a POST after a plain 500), paths and
 * query strings, patch content types and field managers, list pages,
 * discovery, and the informer's cache and index following a list.
 */
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/log.h"
#include "kube/kube.h"
#include "kube/kube_priv.h"

struct scripted {
	unsigned status;
	const char *retry_after;
	const char *body;
};

struct fake {
	struct MHD_Daemon *d;
	int port;
	pthread_mutex_t lock;
	struct scripted script[16];
	int nscript, next;
	char log[16][512];         /* "METHOD url?query ctype body" */
	int nlog;
	atomic_int *cancel;        /* set to 1 when a request arrives, if not NULL */
	const char *location;      /* a Location header on 3xx answers */
};

static struct fake F;

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
	char *q = cls;
	(void)kind;
	size_t n = strlen(q);
	snprintf(q + n, 300 - n, "%s%s=%s", n ? "&" : "?", k, v ? v : "");
	return MHD_YES;
}

struct upload {
	char buf[4096];
	size_t len;
};

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
    const char *method, const char *version, const char *data, size_t *data_len, void **st)
{
	struct upload *u = *st;
	struct MHD_Response *r;
	struct scripted s = { 500, NULL, "{}" };
	const char *ct;
	char query[300] = "";
	enum MHD_Result rc;
	(void)cls; (void)version;

	if (u == NULL) {
		*st = calloc(1, sizeof(struct upload));
		return MHD_YES;
	}
	if (*data_len > 0) {
		size_t take = *data_len < sizeof(u->buf) - 1 - u->len ? *data_len : sizeof(u->buf) - 1 - u->len;
		memcpy(u->buf + u->len, data, take);
		u->len += take;
		*data_len = 0;
		return MHD_YES;
	}
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_arg, query);
	ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	pthread_mutex_lock(&F.lock);
	if (F.nlog < 16)
		snprintf(F.log[F.nlog++], sizeof(F.log[0]), "%s %s%s %s %.*s", method, url, query,
		    ct ? ct : "-", (int)u->len, u->buf);
	if (F.next < F.nscript)
		s = F.script[F.next++];
	if (F.cancel != NULL)
		atomic_store(F.cancel, 1);
	pthread_mutex_unlock(&F.lock);
	r = MHD_create_response_from_buffer(strlen(s.body), (void *)s.body, MHD_RESPMEM_MUST_COPY);
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (s.retry_after)
		MHD_add_response_header(r, "Retry-After", s.retry_after);
	if (F.location && s.status >= 300 && s.status < 400)
		MHD_add_response_header(r, "Location", F.location);
	rc = MHD_queue_response(c, s.status, r);
	MHD_destroy_response(r);
	return rc;
}

static void completed(void *cls, struct MHD_Connection *c, void **st, enum MHD_RequestTerminationCode t)
{
	(void)cls; (void)c; (void)t;
	free(*st);
	*st = NULL;
}

static int setup(void **state)
{
	const union MHD_DaemonInfo *info;
	(void)state;
	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.lock, NULL);
	F.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler, NULL,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
	if (F.d == NULL)
		return -1;
	info = MHD_get_daemon_info(F.d, MHD_DAEMON_INFO_BIND_PORT);
	F.port = info->port;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	MHD_stop_daemon(F.d);
	pthread_mutex_destroy(&F.lock);
	return 0;
}

static void script(int n, const struct scripted *s)
{
	pthread_mutex_lock(&F.lock);
	memcpy(F.script, s, sizeof(*s) * (size_t)n);
	F.nscript = n;
	F.next = 0;
	F.nlog = 0;
	pthread_mutex_unlock(&F.lock);
}

static struct kube_client *client(void)
{
	struct kube_config *cfg = calloc(1, sizeof(*cfg));
	char url[64];
	struct err e;
	struct kube_client *c;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", F.port);
	cfg->server = strdup(url);
	cfg->namespace = strdup("default");
	cfg->source = strdup("test");
	/* A token over plain http must never be sent (client-go's rule). */
	cfg->token = strdup("must-not-leak");
	c = kube_client_new(cfg, &e);
	assert_non_null(c);
	kube_client_set_retries(c, 3);
	return c;
}

static const struct kube_resource stacks = { "pulumi.com", "v1", "stacks", "Stack", 1 };
static const struct kube_resource secrets = { "", "v1", "secrets", "Secret", 1 };

#define NOT_FOUND "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\"," \
	"\"message\":\"stacks.pulumi.com \\\"s1\\\" not found\",\"reason\":\"NotFound\",\"code\":404}"
#define CONFLICT "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\"," \
	"\"message\":\"the object has been modified\",\"reason\":\"Conflict\",\"code\":409}"
#define BUSY "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"slow down\",\"reason\":\"TooManyRequests\",\"code\":429}"
#define OBJ "{\"kind\":\"Stack\",\"metadata\":{\"name\":\"s1\",\"namespace\":\"n\",\"resourceVersion\":\"5\"}}"

static void status_parsing(void **state)
{
	(void)state;
	struct kube_status st;
	struct err e;

	assert_int_equal(kube_status_parse(CONFLICT, strlen(CONFLICT), 409, &st), 0);
	assert_int_equal(st.code, 409);
	assert_string_equal(st.reason, "Conflict");
	kube_status_error(&e, "PUT /x", &st);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_int_equal(e.http_status, 409);
	assert_string_equal(e.msg, "PUT /x: 409 Conflict: the object has been modified");

	/* not a Status: the HTTP code and a printable start of the body */
	assert_int_equal(kube_status_parse("<html>\x01oops", 11, 502, &st), -1);
	assert_int_equal(st.code, 502);
	assert_string_equal(st.message, "<html> oops");
	kube_status_error(&e, "GET /y", &st);
	assert_int_equal(e.code, ERR_HTTP);
	assert_null(kube_status_parse(NULL, 0, 401, &st) == 0 ? "parsed" : NULL);
	kube_status_error(&e, "GET /z", &st);
	assert_int_equal(e.code, ERR_AUTH);
	/* a Status code overrides an odd HTTP code, a bogus one does not */
	{
		const char *b = "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}";
		kube_status_parse(b, strlen(b), 200, &st);
	}
	assert_int_equal(st.code, 410);
	{
		const char *b = "{\"kind\":\"Status\",\"code\":99999}";
		kube_status_parse(b, strlen(b), 500, &st);
	}
	assert_int_equal(st.code, 500);
}

/* What a hostile server puts in a Status reaches messages and logs: no
 * control characters (a CR/LF would forge a log line in the text format,
 * an ESC drive the terminal), no cut through a UTF-8 character, and a
 * huge body is not parsed at all. */
static void status_from_a_hostile_server(void **state)
{
	(void)state;
	struct kube_status st;
	struct err e;
	const char *b = "{\"kind\":\"Status\",\"code\":403,\"reason\":\"Forbid\\nden\","
	    "\"message\":\"no\\r\\n{\\\"level\\\":\\\"info\\\"} \\u001b[2Jcleared\\u007f\"}";
	char *big;
	size_t n;

	assert_int_equal(kube_status_parse(b, strlen(b), 403, &st), 0);
	assert_string_equal(st.reason, "Forbid den");
	assert_string_equal(st.message, "no  {\"level\":\"info\"}  [2Jcleared ");
	kube_status_error(&e, "GET /x", &st);
	assert_null(strchr(e.msg, '\n'));
	assert_null(strchr(e.msg, '\r'));
	assert_null(strchr(e.msg, 0x1b));

	/* cut between characters: 300 two-byte characters into 512 bytes */
	{
		struct { char buf[1024]; } m;
		size_t w = (size_t)snprintf(m.buf, sizeof(m.buf), "{\"kind\":\"Status\",\"message\":\"");
		for (int i = 0; i < 300; i++)
			w += (size_t)snprintf(m.buf + w, sizeof(m.buf) - w, "\xc3\xa9");
		snprintf(m.buf + w, sizeof(m.buf) - w, "\"}");
		assert_int_equal(kube_status_parse(m.buf, strlen(m.buf), 500, &st), 0);
		assert_int_equal(strlen(st.message), 510);
		assert_true((unsigned char)st.message[509] == 0xa9);
	}

	/* 1 MiB of Status: not parsed, the printable start kept */
	n = 1 << 20;
	big = malloc(n + 1);
	{
		size_t w = (size_t)snprintf(big, n, "{\"kind\":\"Status\",\"message\":\"");
		memset(big + w, 'a', n - w - 2);
		memcpy(big + n - 2, "\"}", 3);
	}
	assert_int_equal(kube_status_parse(big, n, 500, &st), -1);
	assert_int_equal(st.code, 500);
	assert_true(strncmp(st.message, "{\"kind\":\"Status\",", 17) == 0);
	assert_true(strlen(st.message) < sizeof(st.message));
	free(big);
}

static void paths(void **state)
{
	(void)state;
	char *p = kube_path(&stacks, "ns", "a b", "status");
	assert_string_equal(p, "/apis/pulumi.com/v1/namespaces/ns/stacks/a%20b/status");
	free(p);
	p = kube_path(&secrets, NULL, NULL, NULL);
	assert_string_equal(p, "/api/v1/secrets");
	free(p);
}

static void get_and_errors(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = { { 200, NULL, OBJ }, { 404, NULL, NOT_FOUND } };
	struct err e;
	cJSON *o;

	script(2, s);
	o = kube_get(c, &stacks, "n", "s1", NULL, &e);
	assert_non_null(o);
	assert_string_equal(kube_obj_str(o, "metadata.resourceVersion"), "5");
	cJSON_Delete(o);
	assert_null(kube_get(c, &stacks, "n", "s1", NULL, &e));
	assert_int_equal(e.code, ERR_NOTFOUND);
	assert_non_null(strstr(e.msg, "404 NotFound: stacks.pulumi.com \"s1\" not found"));
	assert_null(strstr(F.log[0], "must-not-leak"));
	assert_int_equal(F.nlog, 2);   /* a 404 is not retried */
	kube_client_free(c);
}

static void retries_429_for_any_verb(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = { { 429, "0", BUSY }, { 429, "0", BUSY }, { 201, NULL, OBJ } };
	cJSON *obj = cJSON_Parse(OBJ), *o;
	struct err e;

	script(3, s);
	o = kube_create(c, &stacks, "n", obj, &e);
	assert_non_null(o);
	assert_int_equal(F.nlog, 3);
	assert_non_null(strstr(F.log[2], "POST /apis/pulumi.com/v1/namespaces/n/stacks application/json {"));
	cJSON_Delete(o);
	cJSON_Delete(obj);
	kube_client_free(c);
}

static void post_not_retried_after_plain_500(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = { { 500, NULL, "{\"kind\":\"Status\",\"code\":500,\"reason\":\"InternalError\",\"message\":\"boom\"}" },
		{ 201, NULL, OBJ } };
	cJSON *obj = cJSON_Parse(OBJ);
	struct err e;

	script(2, s);
	assert_null(kube_create(c, &stacks, "n", obj, &e));
	assert_int_equal(e.http_status, 500);
	assert_int_equal(F.nlog, 1);
	/* ... but with Retry-After the server says it did not act: retried */
	s[0].retry_after = "0";
	script(2, s);
	cJSON *o = kube_create(c, &stacks, "n", obj, &e);
	assert_non_null(o);
	assert_int_equal(F.nlog, 2);
	cJSON_Delete(o);
	cJSON_Delete(obj);
	kube_client_free(c);
}

static void reads_retried_after_500_until_limit(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = { { 503, NULL, "{}" }, { 500, NULL, "{}" }, { 500, NULL, "{}" },
		{ 500, NULL, "{}" }, { 200, NULL, OBJ } };
	struct err e;

	script(5, s);
	assert_null(kube_get(c, &stacks, "n", "s1", NULL, &e));   /* 1 + 3 retries */
	assert_int_equal(F.nlog, 4);
	assert_int_equal(e.http_status, 500);
	kube_client_free(c);
}

static void cancel_stops_retries(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = { { 503, NULL, "{}" }, { 503, NULL, "{}" }, { 200, NULL, OBJ } };
	atomic_int flag = 1;
	struct err e;

	/* canceled before it starts: nothing is sent */
	script(3, s);
	kube_request_cancel_on(&flag);
	assert_null(kube_get(c, &stacks, "n", "s1", NULL, &e));
	assert_int_equal(F.nlog, 0);
	assert_int_equal(e.code, ERR_CANCELED);
	/* canceled while the first attempt is served: no retry */
	atomic_store(&flag, 0);
	script(3, s);
	pthread_mutex_lock(&F.lock);
	F.cancel = &flag;
	pthread_mutex_unlock(&F.lock);
	assert_null(kube_get(c, &stacks, "n", "s1", NULL, &e));
	pthread_mutex_lock(&F.lock);
	F.cancel = NULL;
	pthread_mutex_unlock(&F.lock);
	kube_request_cancel_on(NULL);
	assert_int_equal(F.nlog, 1);
	assert_int_equal(e.code, ERR_CANCELED);
	kube_client_free(c);
}

/* The config's TLS settings and credentials as http.h options. */
static struct kube_client *tls_client(const char *server)
{
	struct kube_config *cfg = calloc(1, sizeof(*cfg));
	struct err e;
	struct kube_client *c;

	cfg->server = strdup(server);
	cfg->source = strdup("test");
	cfg->ca_file = strdup("/etc/ca.pem");
	cfg->ca_pem = strdup("-----BEGIN CERTIFICATE-----\nca\n");
	cfg->client_cert_file = strdup("/etc/client.crt");
	cfg->client_key_file = strdup("/etc/client.key");
	cfg->client_cert_pem = strdup("cert-data");
	cfg->client_key_pem = strdup("key-data");
	cfg->token = strdup("tok");
	c = kube_client_new(cfg, &e);
	assert_non_null(c);
	return c;
}

static void transport_options(void **state)
{
	(void)state;
	struct kube_client *c = tls_client("https://127.0.0.1:1");
	struct kube_transport t;
	atomic_int flag = 0;
	struct err e;

	kube_request_cancel_on(&flag);
	assert_int_equal(kube_transport_init(c, 0, &t, &e), 0);
	kube_request_cancel_on(NULL);
	/* *-data wins over a path, as in client-go; never both */
	assert_string_equal(t.opts.ca_pem, kube_client_config(c)->ca_pem);
	assert_null(t.opts.ca_file);
	assert_string_equal(t.opts.client_cert_pem, "cert-data");
	assert_string_equal(t.opts.client_key_pem, "key-data");
	assert_null(t.opts.client_cert_file);
	assert_null(t.opts.client_key_file);
	assert_string_equal(t.auth_header, "Authorization: Bearer tok");
	assert_int_equal(t.opts.retries, 0);
	assert_int_equal(t.opts.max_redirects, 0);
	assert_true((const void *)t.opts.cancel == (const void *)&flag);
	kube_transport_free(&t);
	assert_int_equal(kube_transport_init(c, 0, &t, &e), 0);
	assert_null(t.opts.cancel);
	kube_transport_free(&t);
	kube_client_free(c);

	/* paths when there is no data */
	c = tls_client("https://127.0.0.1:1");
	{
		struct kube_config *cfg = (struct kube_config *)kube_client_config(c);
		free(cfg->ca_pem);
		free(cfg->client_cert_pem);
		free(cfg->client_key_pem);
		cfg->ca_pem = cfg->client_cert_pem = cfg->client_key_pem = NULL;
	}
	assert_int_equal(kube_transport_init(c, 0, &t, &e), 0);
	assert_string_equal(t.opts.ca_file, "/etc/ca.pem");
	assert_null(t.opts.ca_pem);
	assert_string_equal(t.opts.client_cert_file, "/etc/client.crt");
	assert_string_equal(t.opts.client_key_file, "/etc/client.key");
	assert_null(t.opts.client_cert_pem);
	kube_transport_free(&t);
	kube_client_free(c);

	/* no credential of any kind over plain http */
	c = tls_client("http://127.0.0.1:1");
	assert_int_equal(kube_transport_init(c, 0, &t, &e), 0);
	assert_null(t.auth_header);
	assert_null(t.opts.client_cert_pem);
	assert_null(t.opts.client_key_pem);
	kube_transport_free(&t);
	kube_client_free(c);
}

/* A fresh path for a plugin script; plugin_remove deletes it and the file
 * where it counts its runs. */
static void plugin_tmp(char *path, size_t n)
{
	int fd;

	snprintf(path, n, "/tmp/test_kube_client_plugin.XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
}

static void plugin_remove(const char *path)
{
	char calls[300];

	snprintf(calls, sizeof(calls), "%s.calls", path);
	unlink(path);
	unlink(calls);
}

/* A client whose credentials come from an exec plugin: a shell script
 * printing `status` (a JSON object body) as its ExecCredential. */
static struct kube_client *exec_client(const char *script_path, const char *status)
{
	struct kube_config *cfg = calloc(1, sizeof(*cfg));
	struct err e;
	struct kube_client *c;
	FILE *f = fopen(script_path, "w");

	assert_non_null(f);
	fprintf(f, "#!/bin/sh\nprintf x >> '%s.calls'\ncat <<'EOF'\n{\"apiVersion\":\"client.authentication.k8s.io/v1\","
	    "\"kind\":\"ExecCredential\",\"status\":%s}\nEOF\n", script_path, status);
	fclose(f);
	assert_int_equal(chmod(script_path, 0700), 0);
	cfg->server = strdup("https://127.0.0.1:1");
	cfg->source = strdup("test");
	cfg->exec = calloc(1, sizeof(*cfg->exec));
	cfg->exec->command = strdup(script_path);
	cfg->exec->api_version = strdup("client.authentication.k8s.io/v1");
	cfg->exec->args = calloc(1, sizeof(char *));
	cfg->exec->env = calloc(1, sizeof(char *));
	c = kube_client_new(cfg, &e);
	assert_non_null(c);
	return c;
}

/* An exec plugin's token with CR/LF would add headers of the plugin
 * output's choosing: refused, naming the plugin, never the token. */
static void exec_token_with_control_characters_is_refused(void **state)
{
	(void)state;
	char path[64];
	struct kube_transport t;
	struct kube_client *c;
	struct err e;

	plugin_tmp(path, sizeof(path));
	c = exec_client(path, "{\"token\":\"tok-1\\r\\nX-Injected: 1\"}");
	assert_int_equal(kube_transport_init(c, 0, &t, &e), -1);
	assert_int_equal(e.code, ERR_AUTH);
	assert_non_null(strstr(e.msg, "exec plugin"));
	assert_non_null(strstr(e.msg, path));
	assert_non_null(strstr(e.msg, "status.token"));
	assert_non_null(strstr(e.msg, "control character"));
	assert_null(strstr(e.msg, "tok-1"));
	assert_null(strstr(e.msg, "Injected"));
	kube_client_free(c);
	/* the same plugin with a clean token works */
	c = exec_client(path, "{\"token\":\"tok-1\"}");
	assert_int_equal(kube_transport_init(c, 0, &t, &e), 0);
	assert_string_equal(t.auth_header, "Authorization: Bearer tok-1");
	kube_transport_free(&t);
	kube_client_free(c);
	/* an empty token is no token */
	c = exec_client(path, "{\"token\":\"\"}");
	assert_int_equal(kube_transport_init(c, 0, &t, &e), -1);
	assert_non_null(strstr(e.msg, "neither a token nor a client certificate"));
	kube_client_free(c);
	plugin_remove(path);
}

/* The plugin answers in the version it was asked for, with an
 * ExecCredential (client-go's checks). */
static void exec_credential_version_and_kind(void **state)
{
	(void)state;
	char path[64];
	struct kube_transport t;
	struct kube_client *c;
	struct err e;
	FILE *f;

	plugin_tmp(path, sizeof(path));
	c = exec_client(path, "{\"token\":\"t\"}");
	f = fopen(path, "w");
	fprintf(f, "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
	    "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n");
	fclose(f);
	assert_int_equal(kube_transport_init(c, 0, &t, &e), -1);
	assert_int_equal(e.code, ERR_AUTH);
	assert_non_null(strstr(e.msg, "is configured to use API version client.authentication.k8s.io/v1"));
	f = fopen(path, "w");
	fprintf(f, "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
	    "\"kind\":\"Secret\",\"status\":{\"token\":\"t\"}}'\n");
	fclose(f);
	assert_int_equal(kube_transport_init(c, 0, &t, &e), -1);
	assert_non_null(strstr(e.msg, "output is not an ExecCredential"));
	kube_client_free(c);
	plugin_remove(path);
}

/* Verification off is allowed alone, with one loud warning naming the
 * server (never its user information); with a CA it is refused, as
 * client-go refuses it. */
static void insecure_tls_is_warned_about_or_refused(void **state)
{
	(void)state;
	struct kube_config *cfg = calloc(1, sizeof(*cfg));
	struct kube_transport t;
	struct kube_client *c;
	char *logged = NULL;
	size_t logged_len = 0;
	FILE *log = open_memstream(&logged, &logged_len);
	struct err e;

	assert_non_null(log);
	log_setup(LOG_INFO, LOG_JSON, log);
	cfg->server = strdup("https://10.0.0.1:6443");
	cfg->source = strdup("/home/u/.kube/config");
	cfg->insecure_skip_tls_verify = 1;
	cfg->token = strdup("tok");
	c = kube_client_new(cfg, &e);
	assert_non_null(c);
	assert_int_equal(kube_transport_init(c, 0, &t, &e), 0);
	assert_int_equal(t.opts.insecure_skip_tls_verify, 1);
	kube_transport_free(&t);
	assert_int_equal(kube_transport_init(c, 0, &t, &e), 0);
	kube_transport_free(&t);
	kube_client_free(c);
	fflush(log);
	assert_non_null(strstr(logged, "\"level\":\"warn\""));
	assert_non_null(strstr(logged, "TLS verification of the Kubernetes API server is off"));
	assert_non_null(strstr(logged, "\"server\":\"https://10.0.0.1:6443/\""));
	/* once per client, not per request */
	assert_null(strstr(strstr(logged, "TLS verification") + 1, "TLS verification"));
	assert_null(strstr(logged, "tok\""));

	/* verification on: nothing said */
	fclose(log);
	free(logged);
	log = open_memstream(&logged, &logged_len);
	log_setup(LOG_INFO, LOG_JSON, log);
	c = tls_client("https://127.0.0.1:1");
	kube_client_free(c);
	fflush(log);
	assert_null(strstr(logged, "TLS verification"));
	log_setup(LOG_INFO, LOG_JSON, stderr);
	fclose(log);
	free(logged);

	/* with a CA: refused */
	cfg = calloc(1, sizeof(*cfg));
	cfg->server = strdup("https://10.0.0.1:6443");
	cfg->source = strdup("/home/u/.kube/config");
	cfg->insecure_skip_tls_verify = 1;
	cfg->ca_pem = strdup("-----BEGIN CERTIFICATE-----\n");
	assert_null(kube_client_new(cfg, &e));
	assert_int_equal(e.code, ERR_INVALID);
	assert_non_null(strstr(e.msg, "/home/u/.kube/config"));
	assert_non_null(strstr(e.msg, "specifying a root certificates file with the insecure flag is not allowed"));
}

static void secret_values(void **state)
{
	(void)state;
	cJSON *s = cJSON_Parse("{\"data\":{\"k\":\"aGVsbG8=\",\"bin\":\"YQBi\",\"bad\":\"!!\",\"n\":1}}");
	struct err e = { 0 };
	unsigned char *v;
	size_t len = 99;

	v = kube_secret_value(s, "k", &len, &e);
	assert_non_null(v);
	assert_string_equal((char *)v, "hello");
	assert_int_equal(len, 5);
	free(v);
	v = kube_secret_value(s, "bin", &len, &e);   /* NUL bytes are the caller's to judge */
	assert_non_null(v);
	assert_int_equal(len, 3);
	assert_int_equal(v[1], 0);
	free(v);
	assert_null(kube_secret_value(s, "bad", &len, &e));
	assert_int_equal(e.code, ERR_INVALID);
	e.code = ERR_OK;
	assert_null(kube_secret_value(s, "missing", &len, &e));
	assert_int_equal(e.code, ERR_NOTFOUND);
	assert_non_null(strstr(e.msg, "missing"));
	e.code = ERR_OK;
	assert_null(kube_secret_value(s, "n", &len, &e));
	assert_int_equal(e.code, ERR_NOTFOUND);
	e.code = ERR_OK;
	assert_null(kube_secret_value(NULL, "k", &len, &e));
	assert_int_equal(e.code, ERR_NOTFOUND);
	assert_int_equal(len, 0);
	cJSON_Delete(s);
}

static void rfc3339_times(void **state)
{
	(void)state;
	int64_t t;

	assert_int_equal(kube_parse_time_us("2026-11-30T10:00:00Z", &t), 0);
	assert_true(t == 1796032800LL * 1000000);
	assert_int_equal(kube_parse_time_us("2026-11-30T10:00:00.5Z", &t), 0);
	assert_true(t == 1796032800LL * 1000000 + 500000);
	assert_int_equal(kube_parse_time_us("2026-11-30T10:00:00.123456789z", &t), 0);
	assert_true(t == 1796032800LL * 1000000 + 123456);
	/* offsets: the same instant three ways */
	assert_int_equal(kube_parse_time_us("2026-11-30T12:30:00+02:30", &t), 0);
	assert_true(t == 1796032800LL * 1000000);
	assert_int_equal(kube_parse_time_us("2026-11-30T05:00:00-05:00", &t), 0);
	assert_true(t == 1796032800LL * 1000000);
	assert_int_equal(kube_parse_time_us("2026-12-01t00:00:00.25+14:00", &t), 0);
	assert_true(t == 1796032800LL * 1000000 + 250000);
	/* not RFC 3339 */
	static const char *bad[] = { "", "2026-11-30", "2026-11-30T10:00:00", "2026-11-30 10:00:00Z",
		"2026-11-30T10:00Z", "2026-11-30T10:00:00.Z", "2026-11-30T10:00:00+0200",
		"2026-11-30T10:00:00+02", "2026-11-30T10:00:00Zjunk", "2026-13-01T00:00:00Z",
		"2026-04-31T00:00:00Z", "2026-02-29T00:00:00Z", "2026-11-30T24:00:00Z",
		"2026-11-30T10:60:00Z", "2026-11-30T10:00:60Z", "2026-11-30T10:00:00+24:00",
		"2026-11-30T10:00:00+01:60", "26-11-30T10:00:00Z", "tomorrow" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (kube_parse_time_us(bad[i], &t) == 0)
			fail_msg("\"%s\" parsed", bad[i]);
	assert_int_equal(kube_parse_time_us("2028-02-29T00:00:00Z", &t), 0);
}

static size_t plugin_calls(const char *script)
{
	char path[300], buf[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s.calls", script);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	return n;
}

/* "when" is now + delta_s, written in the given UTC offset (minutes). */
static void time_with_offset(char *buf, size_t n, long delta_s, int offset_min)
{
	time_t local = time(NULL) + delta_s + offset_min * 60;
	struct tm tm;
	size_t w;

	gmtime_r(&local, &tm);
	w = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + w, n - w, "%c%02d:%02d", offset_min < 0 ? '-' : '+', abs(offset_min) / 60,
	    abs(offset_min) % 60);
}

/* Runs the client's credential logic twice; returns how many times the
 * plugin ran. */
static size_t runs_for_two_requests(const char *path, const char *status)
{
	char calls[300];
	struct kube_transport t;
	struct kube_client *c;
	struct err e;

	snprintf(calls, sizeof(calls), "%s.calls", path);
	unlink(calls);
	c = exec_client(path, status);
	for (int i = 0; i < 2; i++) {
		if (kube_transport_init(c, 0, &t, &e) < 0)
			fail_msg("%s", e.msg);
		kube_transport_free(&t);
	}
	kube_client_free(c);
	return plugin_calls(path);
}

/* The exec credential's expiry with its offset: the old parser dropped
 * the offset (an expired credential 5 h west looked valid, a valid one 5 h
 * east looked expired) and took an unparsable expiry for "never". */
static void exec_expiry_honours_offsets(void **state)
{
	(void)state;
	char path[64], when[64], status[256];
	struct kube_transport t;
	struct kube_client *c;
	struct err e;

	plugin_tmp(path, sizeof(path));
	/* valid for 10 more minutes, written 5 h behind UTC: one run */
	time_with_offset(when, sizeof(when), 600, -300);
	snprintf(status, sizeof(status), "{\"token\":\"t\",\"expirationTimestamp\":\"%s\"}", when);
	assert_int_equal(runs_for_two_requests(path, status), 1);
	/* expired 10 minutes ago, written 5 h ahead of UTC: a run per request */
	time_with_offset(when, sizeof(when), -600, 300);
	snprintf(status, sizeof(status), "{\"token\":\"t\",\"expirationTimestamp\":\"%s\"}", when);
	assert_int_equal(runs_for_two_requests(path, status), 2);
	/* no expiry: cached until a 401 */
	assert_int_equal(runs_for_two_requests(path, "{\"token\":\"t\"}"), 1);
	/* an expiry that is not a time is an error, not "never expires" */
	c = exec_client(path, "{\"token\":\"t\",\"expirationTimestamp\":\"next tuesday\"}");
	assert_int_equal(kube_transport_init(c, 0, &t, &e), -1);
	assert_int_equal(e.code, ERR_AUTH);
	assert_non_null(strstr(e.msg, "status.expirationTimestamp is not an RFC 3339 time"));
	assert_non_null(strstr(e.msg, path));
	kube_client_free(c);
	plugin_remove(path);
}

/* Requests that were refused (401) with the same credentials refresh them
 * once: the first runs the plugin again, the others take its result.
 * Before, each ran the plugin, one after the other with the client's lock
 * held, so a burst of 401s stalled every request for N plugin runs. */
static void concurrent_401s_refresh_once(void **state)
{
	(void)state;
	char path[64];
	struct kube_transport a, b, fresh_a, fresh_b, again;
	struct kube_client *c;
	struct err e;

	plugin_tmp(path, sizeof(path));
	c = exec_client(path, "{\"token\":\"t\"}");
	assert_int_equal(kube_transport_init(c, 0, &a, &e), 0);
	assert_int_equal(kube_transport_init(c, 0, &b, &e), 0);
	assert_int_equal(plugin_calls(path), 1);
	assert_true(a.cred_gen == b.cred_gen);
	/* both refused: a's renewal runs the plugin, b's takes the result */
	assert_int_equal(kube_transport_renew(c, a.cred_gen, &fresh_a, &e), 0);
	assert_int_equal(plugin_calls(path), 2);
	assert_int_equal(kube_transport_renew(c, b.cred_gen, &fresh_b, &e), 0);
	assert_int_equal(plugin_calls(path), 2);
	assert_true(fresh_a.cred_gen == fresh_b.cred_gen && fresh_a.cred_gen != a.cred_gen);
	assert_string_equal(fresh_b.auth_header, "Authorization: Bearer t");
	/* the fresh ones refused in turn: another run */
	assert_int_equal(kube_transport_renew(c, fresh_b.cred_gen, &again, &e), 0);
	assert_int_equal(plugin_calls(path), 3);
	/* kube_transport_init's force stays unconditional */
	kube_transport_free(&again);
	assert_int_equal(kube_transport_init(c, 1, &again, &e), 0);
	assert_int_equal(plugin_calls(path), 4);
	kube_transport_free(&a);
	kube_transport_free(&b);
	kube_transport_free(&fresh_a);
	kube_transport_free(&fresh_b);
	kube_transport_free(&again);
	kube_client_free(c);
	plugin_remove(path);
}

struct refresher {
	struct kube_client *c;
	struct kube_transport t;
	int rc;
	atomic_int done;
};

static void *refresh_in_background(void *arg)
{
	struct refresher *r = arg;
	struct err e;

	r->rc = kube_transport_init(r->c, 0, &r->t, &e);
	atomic_store(&r->done, 1);
	return NULL;
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* An exec plugin runs without the client's lock: while one request renews
 * a credential that is about to expire (the renewal starts 10 s early),
 * others go on with it instead of waiting for the plugin, which may take a
 * minute (and leader election's renewals are among them). */
static void requests_go_on_while_the_plugin_runs(void **state)
{
	(void)state;
	char path[64], started[128], release[128];
	struct kube_transport t;
	struct refresher r = { 0 };
	pthread_t th;
	struct err e;
	FILE *f;

	plugin_tmp(path, sizeof(path));
	snprintf(started, sizeof(started), "%s.started", path);
	snprintf(release, sizeof(release), "%s.release", path);
	r.c = exec_client(path, "{}");
	/* first run: a token that expires in 9.9 s, inside the 10 s in which
	 * the client renews early (the widest margin for a slow machine);
	 * later runs wait for the test */
	f = fopen(path, "w");
	fprintf(f, "#!/usr/bin/python3\n"
	    "import datetime, json, os, time\n"
	    "calls = '%s.calls'\n"
	    "n = os.path.getsize(calls) if os.path.exists(calls) else 0\n"
	    "open(calls, 'a').write('x')\n"
	    "now = datetime.datetime.now(datetime.timezone.utc)\n"
	    "if n == 0:\n"
	    "    tok, exp = 'old', now + datetime.timedelta(seconds=9.9)\n"
	    "else:\n"
	    "    open('%s', 'w').close()\n"
	    "    while not os.path.exists('%s'):\n"
	    "        time.sleep(0.01)\n"
	    "    tok, exp = 'new', now + datetime.timedelta(hours=1)\n"
	    "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
	    "    'status': {'token': tok, 'expirationTimestamp': exp.strftime('%%Y-%%m-%%dT%%H:%%M:%%S.%%fZ')}}))\n",
	    path, started, release);
	fclose(f);
	assert_int_equal(kube_transport_init(r.c, 0, &t, &e), 0);
	assert_string_equal(t.auth_header, "Authorization: Bearer old");
	kube_transport_free(&t);
	/* the next request renews, and blocks in the plugin until released */
	assert_int_equal(pthread_create(&th, NULL, refresh_in_background, &r), 0);
	for (int i = 0; i < 3000 && !exists(started); i++)
		usleep(10000);
	assert_true(exists(started));
	/* meanwhile: the old, still valid token, without waiting for the
	 * plugin (asked on a thread of its own, so that a client that did
	 * wait fails this test instead of hanging it) */
	{
		struct refresher other = { .c = r.c };
		pthread_t th2;
		assert_int_equal(pthread_create(&th2, NULL, refresh_in_background, &other), 0);
		for (int i = 0; i < 3000 && !atomic_load(&other.done); i++)
			usleep(10000);
		int waited = !atomic_load(&other.done);
		f = fopen(release, "w");
		fclose(f);
		pthread_join(th2, NULL);
		assert_false(waited);
		assert_int_equal(other.rc, 0);
		assert_string_equal(other.t.auth_header, "Authorization: Bearer old");
		kube_transport_free(&other.t);
	}
	pthread_join(th, NULL);
	assert_int_equal(r.rc, 0);
	assert_string_equal(r.t.auth_header, "Authorization: Bearer new");
	kube_transport_free(&r.t);
	assert_int_equal(kube_transport_init(r.c, 0, &t, &e), 0);
	assert_string_equal(t.auth_header, "Authorization: Bearer new");
	kube_transport_free(&t);
	assert_int_equal(plugin_calls(path), 2);
	kube_client_free(r.c);
	plugin_remove(path);
	unlink(started);
	unlink(release);
}

static long retry_after_of(const char *headers)
{
	struct http_response r = { .status = 429, .raw_headers = (char *)headers };
	return http_response_retry_after(&r);
}

static void retry_after_values(void **state)
{
	(void)state;
	assert_int_equal(retry_after_of("HTTP/1.1 429 x\r\nRetry-After: 7\r\n\r\n"), 7);
	assert_int_equal(retry_after_of("HTTP/1.1 429 x\r\nretry-after:0\r\n\r\n"), 0);
	/* capped (at a day; the kube client caps its waits at
	 * KUBE_RETRY_AFTER_MAX_S), and no overflow however large the number */
	assert_int_equal(retry_after_of("HTTP/1.1 429 x\r\nRetry-After: 99999999999999999999\r\n\r\n"), 86400);
	/* an HTTP date in the past is "now"; garbage, a negative number or
	 * nothing: absent */
	assert_int_equal(retry_after_of("HTTP/1.1 429 x\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n"), 0);
	assert_int_equal(retry_after_of("HTTP/1.1 429 x\r\nRetry-After: soon\r\n\r\n"), -1);
	assert_int_equal(retry_after_of("HTTP/1.1 429 x\r\nRetry-After: -5\r\n\r\n"), -1);
	assert_int_equal(retry_after_of("HTTP/1.1 429 x\r\n\r\n"), -1);
}

static int count_line(void *ud, char *line, size_t len, struct err *e)
{
	(void)e;
	strncat(ud, line, len);
	strcat(ud, "|");
	return 0;
}

/* kube_stream_lines: lines of a 2xx body to the callback, a refusal with
 * its status, headers and body, a cancel before anything is sent. */
static void stream_lines(void **state)
{
	(void)state;
	struct scripted s[] = { { 200, NULL, "{\"a\":1}\n\n{\"b\":2}\n" },
		{ 429, "3", BUSY } };
	const char *hdrs[] = { "Accept: application/json", NULL };
	struct http_request req = { .headers = hdrs };
	struct http_response refused;
	struct http_opts o;
	char url[64], got[256] = "";
	atomic_int flag = 1;
	struct err e;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/w", F.port);
	req.url = url;
	http_opts_default(&o);
	script(2, s);
	assert_int_equal(kube_stream_lines(&o, &req, 1024, count_line, got, &refused, &e), 0);
	assert_string_equal(got, "{\"a\":1}|{\"b\":2}|");
	assert_int_equal(kube_stream_lines(&o, &req, 1024, count_line, got, &refused, &e), 1);
	assert_int_equal(refused.status, 429);
	assert_int_equal(http_response_retry_after(&refused), 3);
	assert_string_equal(refused.body, BUSY);
	http_response_free(&refused);
	o.cancel = (const volatile int *)(void *)&flag;
	script(2, s);
	assert_int_equal(kube_stream_lines(&o, &req, 1024, count_line, got, &refused, &e), -1);
	assert_int_equal(e.code, ERR_CANCELED);
	assert_int_equal(F.nlog, 0);
}

/* Sums the numbers of lines "{\"n\":N}" and counts them. */
struct line_sum {
	long lines, sum;
	long stop_at;              /* fn fails on this line (1-based), 0 = never */
};

static int sum_line(void *ud, char *line, size_t len, struct err *e)
{
	struct line_sum *ls = ud;
	char tmp[64];

	assert_true(len < sizeof(tmp));
	memcpy(tmp, line, len);
	tmp[len] = '\0';
	ls->lines++;
	if (ls->lines == ls->stop_at)
		return err_set(e, ERR_INVALID, "line %ld refused", ls->lines);
	ls->sum += strtol(tmp + 5, NULL, 10);
	return 0;
}

/* kube_stream_lines on a body larger than one read: every line arrives
 * whole however the reads cut it; a failing callback stops the watch with
 * its own error; a line over the limit is ERR_LIMIT; a redirect is a
 * refusal, not followed. */
static void stream_lines_across_reads(void **state)
{
	(void)state;
	enum { N = 12000 };
	static char body[N * 16];
	struct scripted s[1] = { { 200, NULL, body } };
	struct scripted moved[1] = { { 302, NULL, "{}" } };
	struct http_request req = { 0 };
	struct http_response refused;
	struct line_sum ls = { 0, 0, 0 };
	struct http_opts o;
	char url[64];
	size_t off = 0;
	struct err e;

	for (long i = 1; i <= N; i++)
		off += (size_t)snprintf(body + off, sizeof(body) - off, "{\"n\":%ld}\n", i);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/w", F.port);
	req.url = url;
	http_opts_default(&o);
	script(1, s);
	assert_int_equal(kube_stream_lines(&o, &req, 64, sum_line, &ls, &refused, &e), 0);
	assert_int_equal(ls.lines, N);
	assert_int_equal(ls.sum, (long)N * (N + 1) / 2);

	memset(&ls, 0, sizeof(ls));
	ls.stop_at = 5000;
	script(1, s);
	assert_int_equal(kube_stream_lines(&o, &req, 64, sum_line, &ls, &refused, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.msg, "line 5000 refused");
	assert_int_equal(ls.lines, 5000);

	memset(&ls, 0, sizeof(ls));
	script(1, s);
	assert_int_equal(kube_stream_lines(&o, &req, 4, sum_line, &ls, &refused, &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
	assert_int_equal(ls.lines, 0);

	script(1, moved);
	assert_int_equal(kube_stream_lines(&o, &req, 64, sum_line, &ls, &refused, &e), 1);
	assert_int_equal(refused.status, 302);
	http_response_free(&refused);
}

static void patches_and_deletes(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = { { 200, NULL, OBJ }, { 200, NULL, OBJ }, { 201, NULL, OBJ },
		{ 409, NULL, CONFLICT }, { 200, NULL, "{\"kind\":\"Status\",\"status\":\"Success\"}" } };
	struct err e;
	cJSON *o;

	script(5, s);
	o = kube_patch(c, &stacks, "n", "s1", "status", KUBE_PATCH_MERGE, "{\"status\":{}}", "pulumi-controller", 0, &e);
	cJSON_Delete(o);
	o = kube_patch(c, &stacks, "n", "s1", NULL, KUBE_PATCH_JSON, "[{\"op\":\"test\",\"path\":\"/a\",\"value\":1}]", NULL, 0, &e);
	cJSON_Delete(o);
	o = kube_patch(c, &stacks, "n", "s1", NULL, KUBE_PATCH_APPLY, OBJ, "pulumi-controller", 1, &e);
	assert_non_null(o);
	cJSON_Delete(o);
	/* apply without a field manager is refused before any request */
	assert_null(kube_patch(c, &stacks, "n", "s1", NULL, KUBE_PATCH_APPLY, OBJ, NULL, 1, &e));
	o = cJSON_Parse(OBJ);
	assert_null(kube_update(c, &stacks, "n", o, NULL, &e));
	assert_int_equal(e.code, ERR_CONFLICT);
	cJSON_Delete(o);
	assert_int_equal(kube_delete(c, &stacks, "n", "s1", "5", &e), 0);

	assert_string_equal(F.log[0], "PATCH /apis/pulumi.com/v1/namespaces/n/stacks/s1/status?fieldManager=pulumi-controller "
	    "application/merge-patch+json {\"status\":{}}");
	assert_non_null(strstr(F.log[1], "PATCH /apis/pulumi.com/v1/namespaces/n/stacks/s1 application/json-patch+json [{"));
	assert_non_null(strstr(F.log[2], "s1?fieldManager=pulumi-controller&force=true application/apply-patch+yaml {"));
	assert_non_null(strstr(F.log[3], "PUT /apis/pulumi.com/v1/namespaces/n/stacks/s1 application/json"));
	assert_non_null(strstr(F.log[4], "DELETE /apis/pulumi.com/v1/namespaces/n/stacks/s1 application/json "
	    "{\"propagationPolicy\":\"Background\",\"preconditions\":{\"resourceVersion\":\"5\"}}"));
	assert_int_equal(F.nlog, 5);
	kube_client_free(c);
}

static int set_stack(void *ud, cJSON *obj, struct err *e)
{
	cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
	(void)e;
	if (ud == NULL)
		return 0;   /* nothing to change */
	if (spec == NULL)
		spec = cJSON_AddObjectToObject(obj, "spec");
	cJSON_DeleteItemFromObjectCaseSensitive(spec, "stack");
	cJSON_AddStringToObject(spec, "stack", ud);
	return 1;
}

static void modify_retries_conflicts(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = { { 200, NULL, OBJ }, { 409, NULL, CONFLICT }, { 200, NULL, OBJ },
		{ 200, NULL, OBJ }, { 200, NULL, OBJ } };
	struct err e;
	cJSON *o;

	script(5, s);
	o = kube_modify(c, &stacks, "n", "s1", NULL, 5, set_stack, "prod", &e);
	assert_non_null(o);
	cJSON_Delete(o);
	assert_int_equal(F.nlog, 4);   /* GET, PUT 409, GET, PUT */
	assert_non_null(strstr(F.log[1], "PUT "));
	assert_non_null(strstr(F.log[1], "\"stack\":\"prod\""));
	assert_non_null(strstr(F.log[1], "\"resourceVersion\":\"5\""));
	assert_non_null(strstr(F.log[3], "PUT "));
	/* no change wanted: no write */
	script(1, s);
	o = kube_modify(c, &stacks, "n", "s1", NULL, 5, set_stack, NULL, &e);
	assert_non_null(o);
	cJSON_Delete(o);
	assert_int_equal(F.nlog, 1);
	/* conflicts every time: gives up with the 409 */
	{
		struct scripted t[] = { { 200, NULL, OBJ }, { 409, NULL, CONFLICT }, { 200, NULL, OBJ },
			{ 409, NULL, CONFLICT } };
		script(4, t);
	}
	assert_null(kube_modify(c, &stacks, "n", "s1", NULL, 2, set_stack, "x", &e));
	assert_int_equal(e.code, ERR_CONFLICT);
	kube_client_free(c);
}

static void list_query_and_discovery(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = {
		{ 200, NULL, "{\"kind\":\"StackList\",\"metadata\":{\"resourceVersion\":\"9\",\"continue\":\"tok\"},\"items\":[]}" },
		{ 200, NULL, "{\"kind\":\"APIResourceList\",\"resources\":[{\"name\":\"stacks\"},{\"name\":\"stacks/status\"}]}" },
		{ 200, NULL, "{\"kind\":\"APIResourceList\",\"resources\":[{\"name\":\"other\"}]}" },
		{ 404, NULL, "{}" },
	};
	struct kube_list_opts lo = { "app in (a,b)", NULL, 500, "c1", NULL };
	struct err e;
	cJSON *l;

	script(4, s);
	l = kube_list(c, &stacks, NULL, &lo, &e);
	assert_non_null(l);
	assert_string_equal(kube_obj_str(l, "metadata.continue"), "tok");
	cJSON_Delete(l);
	assert_non_null(strstr(F.log[0], "GET /apis/pulumi.com/v1/stacks?"));
	assert_non_null(strstr(F.log[0], "labelSelector=app in (a,b)"));
	assert_non_null(strstr(F.log[0], "limit=500"));
	assert_non_null(strstr(F.log[0], "continue=c1"));
	assert_int_equal(kube_resource_served(c, &stacks, &e), 1);
	assert_int_equal(kube_resource_served(c, &stacks, &e), 0);
	assert_int_equal(kube_resource_served(c, &stacks, &e), 0);
	kube_client_free(c);
}

/* A list's query (continue tokens, selectors) stays out of every message:
 * an API error, a reply that is not JSON, a transfer that failed. */
static void messages_carry_no_query(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = {
		{ 403, NULL, "{\"kind\":\"Status\",\"code\":403,\"reason\":\"Forbidden\"}" },
		{ 200, NULL, "<html>not json</html>" },
	};
	struct kube_list_opts lo = { "team=a", NULL, 500, "SECRETCONT", NULL };
	struct kube_config *cfg;
	struct err e;

	script(2, s);
	assert_null(kube_list(c, &stacks, "n", &lo, &e));
	assert_string_equal(e.msg, "GET /apis/pulumi.com/v1/namespaces/n/stacks: 403 Forbidden");
	assert_null(kube_list(c, &stacks, "n", &lo, &e));
	assert_string_equal(e.msg, "GET /apis/pulumi.com/v1/namespaces/n/stacks: the response is not JSON");
	assert_non_null(strstr(F.log[0], "continue=SECRETCONT"));   /* it was sent */
	kube_client_free(c);

	/* nothing listens on port 1: http.h's message names the URL */
	cfg = calloc(1, sizeof(*cfg));
	cfg->server = strdup("http://127.0.0.1:1");
	cfg->source = strdup("test");
	c = kube_client_new(cfg, &e);
	assert_non_null(c);
	kube_client_set_retries(c, 0);
	assert_null(kube_list(c, &stacks, "n", &lo, &e));
	assert_int_equal(e.code, ERR_NET);
	assert_non_null(strstr(e.msg, "http://127.0.0.1:1/apis/pulumi.com/v1/namespaces/n/stacks: "));
	assert_null(strstr(e.msg, "SECRETCONT"));
	assert_null(strstr(e.msg, "team"));
	assert_null(strchr(e.msg, '?'));
	kube_client_free(c);
}

/* One object's reply cannot be larger than etcd lets an object be: a
 * 17 MiB answer to a GET is refused (before: buffered up to 256 MiB, and
 * parsed); a list of that size still passes. */
static void object_replies_are_bounded(void **state)
{
	(void)state;
	size_t n = 17 << 20;
	char *big = malloc(n + 1);
	struct kube_client *c = client();
	struct err e;
	cJSON *l;

	{
		size_t w = (size_t)snprintf(big, n, "{\"kind\":\"StackList\",\"items\":[],\"pad\":\"");
		memset(big + w, 'a', n - w - 2);
		memcpy(big + n - 2, "\"}", 3);
	}
	{
		struct scripted s[] = { { 200, NULL, big }, { 200, NULL, big } };
		script(2, s);
	}
	assert_null(kube_get(c, &stacks, "n", "s1", NULL, &e));
	assert_int_equal(e.code, ERR_LIMIT);
	assert_non_null(strstr(e.msg, "larger than the limit"));
	assert_int_equal(F.nlog, 1);   /* not retried */
	l = kube_list(c, &stacks, "n", NULL, &e);
	if (l == NULL)
		fail_msg("%s", e.msg);
	cJSON_Delete(l);
	kube_client_free(c);
	free(big);
}

static int other_host_requests;

static enum MHD_Result count_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *data, size_t *data_len, void **st)
{
	static const char body[] = "{}";
	struct MHD_Response *r;
	enum MHD_Result rc;
	(void)cls; (void)url; (void)method; (void)version; (void)data; (void)data_len; (void)st;

	other_host_requests++;
	r = MHD_create_response_from_buffer(2, (void *)body, MHD_RESPMEM_PERSISTENT);
	rc = MHD_queue_response(conn, 200, r);
	MHD_destroy_response(r);
	return rc;
}

/* A redirect is never followed, whatever its status and wherever it
 * points: the credentials go to the configured server only (libcurl is
 * never told CURLOPT_UNRESTRICTED_AUTH either; kube sets max_redirects 0). */
static void redirects_are_not_followed(void **state)
{
	(void)state;
	struct MHD_Daemon *other = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
	    count_request, NULL, MHD_OPTION_END);
	static const unsigned codes[] = { 301, 302, 303, 307, 308 };
	char location[128];
	struct kube_client *c = client();
	struct err e;

	assert_non_null(other);
	snprintf(location, sizeof(location), "http://localhost:%d/api/v1/namespaces/default",
	    MHD_get_daemon_info(other, MHD_DAEMON_INFO_BIND_PORT)->port);
	F.location = location;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		struct scripted s[] = { { codes[i], NULL, "moved" } };
		script(1, s);
		assert_null(kube_get(c, &secrets, "n", "x", NULL, &e));
		assert_int_equal(F.nlog, 1);   /* not retried either */
		assert_int_equal(e.http_status, (int)codes[i]);
		assert_non_null(strstr(e.msg, "the server answered with a redirect, which is not followed"));
		assert_null(strstr(e.msg, "localhost"));
	}
	F.location = NULL;
	assert_int_equal(other_host_requests, 0);
	kube_client_free(c);
	MHD_stop_daemon(other);
}

/* The informer lists pages into its cache, runs handlers and keeps the
 * secondary index; the watch that follows fails against this server and
 * is retried until stop. */
static int source_index(const cJSON *obj, char **out, int max)
{
	const char *src = kube_obj_str(obj, "spec.source");
	(void)max;
	if (src == NULL)
		return 0;
	out[0] = strdup(src);
	return 1;
}

static int adds;

static void count_adds(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	(void)ud; (void)inf; (void)old; (void)obj;
	if (ch == KUBE_CHANGE_ADD)
		adds++;
}

static void collect_key(void *ud, const char *key)
{
	strcat(ud, key);
	strcat(ud, ";");
}

static void informer_lists_pages(void **state)
{
	(void)state;
	struct kube_client *c = client();
	struct scripted s[] = {
		{ 200, NULL, "{\"metadata\":{\"resourceVersion\":\"10\",\"continue\":\"p2\"},\"items\":["
		    "{\"metadata\":{\"name\":\"a\",\"namespace\":\"n\",\"resourceVersion\":\"3\",\"managedFields\":[{}]},\"spec\":{\"source\":\"git/r1\"}}]}" },
		{ 200, NULL, "{\"metadata\":{\"resourceVersion\":\"10\"},\"items\":["
		    "{\"metadata\":{\"name\":\"b\",\"namespace\":\"n\",\"resourceVersion\":\"4\"},\"spec\":{\"source\":\"git/r1\"}},"
		    "{\"metadata\":{\"name\":\"c\",\"namespace\":\"m\",\"resourceVersion\":\"5\"},\"spec\":{\"source\":\"git/r2\"}}]}" },
	};
	struct kube_informer_opts io = { .page_size = 1, .backoff_initial_ms = 5, .backoff_max_ms = 10 };
	struct kube_informer *inf = kube_informer_new(c, &stacks, &io);
	char keys[256] = "";
	struct err e;
	cJSON *o;

	script(2, s);
	adds = 0;
	kube_informer_add_handler(inf, count_adds, NULL);
	assert_int_equal(kube_informer_add_index(inf, "source", source_index), 0);
	assert_int_equal(kube_informer_start(inf, &e), 0);
	assert_int_equal(kube_informer_add_index(inf, "late", source_index), -1);
	assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
	assert_int_equal(kube_informer_count(inf), 3);
	assert_int_equal(adds, 3);
	o = kube_informer_get(inf, "n", "a");
	assert_non_null(o);
	assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "managedFields"));
	cJSON_Delete(o);
	assert_null(kube_informer_get(inf, "n", "zzz"));
	assert_int_equal(kube_informer_by_index(inf, "source", "git/r1", collect_key, keys), 2);
	assert_true(strcmp(keys, "n/a;n/b;") == 0 || strcmp(keys, "n/b;n/a;") == 0);
	assert_int_equal(kube_informer_by_index(inf, "source", "git/none", collect_key, keys), 0);
	assert_int_equal(kube_informer_by_index(inf, "nosuch", "x", collect_key, keys), -1);
	assert_non_null(strstr(F.log[0], "limit=1"));
	assert_non_null(strstr(F.log[1], "continue=p2"));
	kube_informer_free(inf);
	kube_client_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(status_parsing),
		cmocka_unit_test(status_from_a_hostile_server),
		cmocka_unit_test(paths),
		cmocka_unit_test(get_and_errors),
		cmocka_unit_test(retries_429_for_any_verb),
		cmocka_unit_test(post_not_retried_after_plain_500),
		cmocka_unit_test(reads_retried_after_500_until_limit),
		cmocka_unit_test(cancel_stops_retries),
		cmocka_unit_test(transport_options),
		cmocka_unit_test(exec_token_with_control_characters_is_refused),
		cmocka_unit_test(exec_credential_version_and_kind),
		cmocka_unit_test(insecure_tls_is_warned_about_or_refused),
		cmocka_unit_test(secret_values),
		cmocka_unit_test(rfc3339_times),
		cmocka_unit_test(exec_expiry_honours_offsets),
		cmocka_unit_test(concurrent_401s_refresh_once),
		cmocka_unit_test(requests_go_on_while_the_plugin_runs),
		cmocka_unit_test(retry_after_values),
		cmocka_unit_test(stream_lines),
		cmocka_unit_test(stream_lines_across_reads),
		cmocka_unit_test(patches_and_deletes),
		cmocka_unit_test(modify_retries_conflicts),
		cmocka_unit_test(list_query_and_discovery),
		cmocka_unit_test(messages_carry_no_query),
		cmocka_unit_test(redirects_are_not_followed),
		cmocka_unit_test(object_replies_are_bounded),
		cmocka_unit_test(informer_lists_pages),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
