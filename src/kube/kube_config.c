/*
 * kube_config.c - finding the API server and the credentials: in-cluster
 * service-account files, or kubeconfig files parsed with libyaml.
 *
 * Only the fields a controller needs are read (kube-api.md §3): the current
 * context's cluster (server, CA file or data, insecure-skip-tls-verify) and
 * user (token, tokenFile, client certificate and key as files or data, exec
 * plugins).  Anything else that would change how we authenticate
 * (auth-provider, basic auth, impersonation) is refused rather than
 * silently ignored.  Errors name the file and the key; values are never
 * quoted because most of them are secrets.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/base64.h"
#include "base/fs.h"
#include "base/mem.h"
#include "base/secret.h"
#include "base/str.h"
#include "base/url.h"
#include "kube/kube_priv.h"

#define KUBECONFIG_MAX (4 << 20)

void kube_config_free(struct kube_config *c)
{
	if (c == NULL)
		return;
	mem_free_all(c->source, c->server, c->namespace, c->ca_file, c->ca_pem,
		     c->client_cert_file, c->client_key_file, c->client_cert_pem,
		     c->token_file);
	secret_free(c->client_key_pem);
	secret_free(c->token);
	if (c->exec) {
		free(c->exec->command);
		free(c->exec->api_version);
		for (char **p = c->exec->args; p && *p; p++)
			free(*p);
		free(c->exec->args);
		for (char **p = c->exec->env; p && *p; p++)
			free(*p);
		free(c->exec->env);
		free(c->exec);
	}
	free(c);
}

/* ------------------------------------------------------------ tokens */

#define TOKEN_FILE_MAX (1 << 20)

int kube_token_check(const char *token, const char *where, struct err *e)
{
	for (const char *p = token; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch < 0x20 || ch == 0x7f)
			return err_set(e, ERR_INVALID,
			    "%s: the token contains a control character (byte %zu), which cannot go into an HTTP header",
			    where, (size_t)(p - token));
	}
	return 0;
}

int kube_read_token_file(const char *path, char **out, struct err *e)
{
	char *tok, *start, where[600];

	*out = NULL;
	if (kube_read_trimmed(path, TOKEN_FILE_MAX, &tok, e) < 0)
		return -1;
	for (start = tok; isspace((unsigned char)*start); start++)
		;
	if (start != tok) {
		size_t lead = (size_t)(start - tok), len = strlen(start);
		memmove(tok, start, len + 1);
		secret_wipe(tok + len, lead);   /* the tail's stale copy */
	}
	if (*tok == '\0') {
		secret_free(tok);
		return err_set(e, ERR_AUTH, "token file %s: empty", path);
	}
	snprintf(where, sizeof(where), "token file %s", path);
	if (kube_token_check(tok, where, e) < 0) {
		secret_free(tok);
		e->code = ERR_AUTH;
		return -1;
	}
	*out = tok;
	return 0;
}

/* ------------------------------------------------------------ checks */

/* An http(s) URL with a host and nothing the client cannot use or print:
 * user information (libcurl would send it as basic auth, which is refused
 * in users[] too, and it would reach every log line naming the server), a
 * query or a fragment (paths are appended to the server).  The message
 * never quotes the URL: it may hold a password. */
static int server_check(const char *server, const char *where, struct err *e)
{
	CURLU *h = curl_url();
	char *scheme = NULL, *part = NULL;
	const char *bad = NULL;
	int rc = 0;

	if (h == NULL)
		return err_set(e, ERR_NOMEM, "%s: out of memory", where);
	if (curl_url_set(h, CURLUPART_URL, server, 0) != CURLUE_OK ||
	    curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcmp(scheme, "https") != 0 && strcmp(scheme, "http") != 0)) {
		rc = err_set(e, ERR_INVALID, "%s: must be an http(s) URL", where);
	} else if (curl_url_get(h, CURLUPART_USER, &part, 0) == CURLUE_OK) {
		bad = "user information (credentials belong in users[])";
	} else if (curl_url_get(h, CURLUPART_QUERY, &part, 0) == CURLUE_OK) {
		bad = "a query";
	} else if (curl_url_get(h, CURLUPART_FRAGMENT, &part, 0) == CURLUE_OK) {
		bad = "a fragment";
	}
	if (bad != NULL)
		rc = err_set(e, ERR_INVALID, "%s: must not carry %s", where, bad);
	if (part != NULL) {
		secret_wipe(part, strlen(part));
		curl_free(part);
	}
	curl_free(scheme);
	curl_url_cleanup(h);
	return rc;
}

/* client-go's rule (transport.TLSConfigFor): a CA and "do not verify"
 * contradict each other, and guessing which was meant could turn
 * verification off for a cluster whose CA was given. */
static int tls_check(const struct kube_config *c, const char *where, struct err *e)
{
	if (c->insecure_skip_tls_verify && (c->ca_file != NULL || c->ca_pem != NULL))
		return err_set(e, ERR_INVALID,
		    "%s: specifying a root certificates file with the insecure flag is not allowed "
		    "(certificate-authority or certificate-authority-data together with insecure-skip-tls-verify)",
		    where);
	return 0;
}

int kube_config_validate(const struct kube_config *c, struct err *e)
{
	const char *src = c->source ? c->source : "kubernetes configuration";
	char where[600];

	if (c->server == NULL)
		return err_set(e, ERR_INVALID, "%s: no server configured", src);
	snprintf(where, sizeof(where), "%s: server", src);
	if (server_check(c->server, where, e) < 0 || tls_check(c, src, e) < 0)
		return -1;
	snprintf(where, sizeof(where), "%s: token", src);
	if (c->token != NULL && kube_token_check(c->token, where, e) < 0)
		return -1;
	return 0;
}

const char *kube_config_server_for_log(const struct kube_config *c, char *buf, size_t n)
{
	return url_for_log(c->server ? c->server : "", buf, n);
}

/* ------------------------------------------------------------ in-cluster */

static char *join_host_port(const char *host, const char *port)
{
	struct strbuf s;

	strbuf_init(&s);
	/* An IPv6 literal needs brackets in a URL, as net.JoinHostPort adds. */
	if (strchr(host, ':') != NULL && host[0] != '[')
		strbuf_printf(&s, "https://[%s]:%s", host, port);
	else
		strbuf_printf(&s, "https://%s:%s", host, port);
	return strbuf_take(&s);
}

int kube_config_incluster(const char *host, const char *port, const char *sa_dir,
    struct kube_config **out, struct err *e)
{
	struct kube_config *c;
	char path[4096], *tok = NULL;

	if (host == NULL || *host == '\0' || port == NULL || *port == '\0')
		return err_set(e, ERR_NOTFOUND,
		    "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set");
	for (const char *p = port; *p; p++)
		if (*p < '0' || *p > '9')
			return err_set(e, ERR_INVALID, "KUBERNETES_SERVICE_PORT: not a port number");
	/* A name or an address, nothing that would change the URL's shape
	 * ('@', '/', '?'...). */
	for (const char *p = host; *p; p++)
		if (!isalnum((unsigned char)*p) && strchr(".-:[]", *p) == NULL)
			return err_set(e, ERR_INVALID,
			    "KUBERNETES_SERVICE_HOST: not a host name or IP address");
	/* the longest name below must fit in path, or a cut path is read */
	if (strlen(sa_dir) + sizeof("/namespace") > sizeof(path))
		return err_set(e, ERR_INVALID, "in-cluster config: service-account directory path too long");
	c = xcalloc(1, sizeof(*c));
	c->in_cluster = 1;
	c->source = xstrdup("in-cluster");
	c->server = join_host_port(host, port);
	snprintf(path, sizeof(path), "%s/token", sa_dir);
	/* Read it once now so a missing token fails at start, not at first use. */
	if (kube_read_token_file(path, &tok, e) < 0) {
		err_prefix(e, "in-cluster config");
		kube_config_free(c);
		return -1;
	}
	secret_free(tok);
	c->token_file = xstrdup(path);
	snprintf(path, sizeof(path), "%s/ca.crt", sa_dir);
	if (!fs_exists(path)) {
		kube_config_free(c);
		return err_set(e, ERR_NOTFOUND, "in-cluster config: %s is missing", path);
	}
	c->ca_file = xstrdup(path);
	snprintf(path, sizeof(path), "%s/namespace", sa_dir);
	if (fs_exists(path)) {
		if (kube_read_trimmed(path, 4096, &c->namespace, e) < 0) {
			err_prefix(e, "in-cluster config");
			kube_config_free(c);
			return -1;
		}
	}
	if (c->namespace == NULL || *c->namespace == '\0') {
		free(c->namespace);
		c->namespace = xstrdup("default");
	}
	*out = c;
	return 0;
}

/* ------------------------------------------------------------ kubeconfig */

struct kdoc {
	char *name;                /* the file, for messages */
	char *dir;                 /* its directory, for relative paths */
	yaml_document_t doc;
	int loaded;
};

struct kfiles {
	struct kdoc *docs;
	size_t n;
};

static void kfiles_free(struct kfiles *f)
{
	for (size_t i = 0; i < f->n; i++) {
		if (f->docs[i].loaded)
			yaml_document_delete(&f->docs[i].doc);
		free(f->docs[i].name);
		free(f->docs[i].dir);
	}
	free(f->docs);
}

static int kdoc_load(struct kdoc *d, const char *name, const char *text, size_t len,
    struct err *e)
{
	yaml_parser_t p;
	char *tmp;

	memset(d, 0, sizeof(*d));
	d->name = xstrdup(name);
	tmp = xstrdup(name);
	d->dir = xstrdup(dirname(tmp));
	free(tmp);
	if (!yaml_parser_initialize(&p))
		return err_set(e, ERR_NOMEM, "kubeconfig %s: cannot start the YAML parser", name);
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, &d->doc)) {
		err_set(e, ERR_INVALID, "kubeconfig %s: line %lu: %s", name,
		    (unsigned long)p.problem_mark.line + 1, p.problem ? p.problem : "invalid YAML");
		yaml_parser_delete(&p);
		return -1;
	}
	yaml_parser_delete(&p);
	d->loaded = 1;
	return 0;
}

static yaml_node_t *yroot(struct kdoc *d)
{
	yaml_node_t *n = yaml_document_get_root_node(&d->doc);
	return n && n->type == YAML_MAPPING_NODE ? n : NULL;
}

/* The value under key in a mapping, or NULL. */
static yaml_node_t *yget(struct kdoc *d, yaml_node_t *map, const char *key)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	    pr++) {
		yaml_node_t *k = yaml_document_get_node(&d->doc, pr->key);
		if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
		    memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
			return yaml_document_get_node(&d->doc, pr->value);
	}
	return NULL;
}

/* A scalar value; an explicit null or empty scalar is treated as absent. */
static int yscalar(struct kdoc *d, yaml_node_t *n, const char *where, const char **out,
    struct err *e)
{
	*out = NULL;
	if (n == NULL)
		return 0;
	if (n->type != YAML_SCALAR_NODE)
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s: expected a string", d->name, where);
	if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	    (strcmp((char *)n->data.scalar.value, "null") == 0 ||
	    strcmp((char *)n->data.scalar.value, "~") == 0))
		return 0;
	if (strlen((char *)n->data.scalar.value) != n->data.scalar.length)
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s: contains a NUL byte", d->name, where);
	if (n->data.scalar.length > 0)
		*out = (const char *)n->data.scalar.value;
	return 0;
}

static int ystr(struct kdoc *d, yaml_node_t *map, const char *key, const char *prefix,
    const char **out, struct err *e)
{
	char where[256];

	snprintf(where, sizeof(where), "%s.%s", prefix, key);
	return yscalar(d, yget(d, map, key), where, out, e);
}

/* The items of the optional list under key (*n = 0 when absent); anything
 * but a list is an error naming prefix.key (or key when prefix is NULL). */
static int ylist(struct kdoc *d, yaml_node_t *map, const char *key, const char *prefix,
    yaml_node_item_t **items, size_t *n, struct err *e)
{
	yaml_node_t *seq = yget(d, map, key);

	*items = NULL;
	*n = 0;
	if (seq == NULL)
		return 0;
	if (seq->type != YAML_SEQUENCE_NODE)
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s%s%s: expected a list", d->name,
		    prefix ? prefix : "", prefix ? "." : "", key);
	*items = seq->data.sequence.items.start;
	*n = (size_t)(seq->data.sequence.items.top - *items);
	return 0;
}

static int ybool(struct kdoc *d, yaml_node_t *map, const char *key, const char *prefix,
    int *out, struct err *e)
{
	const char *v;

	if (ystr(d, map, key, prefix, &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0)
		*out = 1;
	else if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0)
		*out = 0;
	else
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s.%s: expected true or false", d->name,
		    prefix, key);
	return 0;
}

/* Finds `list[name=N].<inner>` in the first file that has it. */
static yaml_node_t *find_named(struct kfiles *f, const char *list, const char *name,
    const char *inner, struct kdoc **doc_out, struct err *e)
{
	for (size_t i = 0; i < f->n; i++) {
		struct kdoc *d = &f->docs[i];
		yaml_node_item_t *items;
		size_t n_items;
		if (ylist(d, yroot(d), list, NULL, &items, &n_items, e) < 0)
			return NULL;
		for (size_t k = 0; k < n_items; k++) {
			yaml_node_t *item = yaml_document_get_node(&d->doc, items[k]), *val;
			const char *n;
			if (yscalar(d, yget(d, item, "name"), list, &n, e) < 0)
				return NULL;
			if (n == NULL || strcmp(n, name) != 0)
				continue;
			val = yget(d, item, inner);
			if (val == NULL || val->type != YAML_MAPPING_NODE) {
				err_set(e, ERR_INVALID, "kubeconfig %s: %s[\"%s\"].%s: missing or not a mapping",
				    d->name, list, name, inner);
				return NULL;
			}
			*doc_out = d;
			return val;
		}
	}
	err_set(e, ERR_NOTFOUND, "kubeconfig %s: %s: no entry named \"%s\"", f->docs[0].name, list, name);
	return NULL;
}

/* Relative paths are relative to the kubeconfig file's directory. */
static char *resolve_path(struct kdoc *d, const char *p)
{
	struct strbuf s;

	if (p[0] == '/')
		return xstrdup(p);
	strbuf_init(&s);
	strbuf_printf(&s, "%s/%s", d->dir, p);
	return strbuf_take(&s);
}

static int decode_data(struct kdoc *d, const char *prefix, const char *key, const char *v,
    char **out, struct err *e)
{
	unsigned char *bytes;
	struct err why;
	size_t n;

	if (base64_decode(v, strlen(v), &bytes, &n, &why) < 0) {
		if (why.code == ERR_NOMEM)
			return err_set(e, ERR_NOMEM, "kubeconfig %s: %s.%s: out of memory", d->name,
			    prefix, key);
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s.%s: not valid base64", d->name, prefix,
		    key);
	}
	*out = (char *)bytes;
	if (strlen(*out) != n) {
		secret_free(*out);
		*out = NULL;
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s.%s: not PEM text", d->name, prefix, key);
	}
	return 0;
}

static int parse_cluster(struct kfiles *f, const char *name, struct kube_config *c, struct err *e)
{
	struct kdoc *d = NULL;
	yaml_node_t *m = find_named(f, "clusters", name, "cluster", &d, e);
	char prefix[300], where[700];
	const char *server, *ca, *cadata;

	if (m == NULL)
		return -1;
	snprintf(prefix, sizeof(prefix), "clusters[\"%s\"].cluster", name);
	if (ystr(d, m, "server", prefix, &server, e) < 0 ||
	    ystr(d, m, "certificate-authority", prefix, &ca, e) < 0 ||
	    ystr(d, m, "certificate-authority-data", prefix, &cadata, e) < 0 ||
	    ybool(d, m, "insecure-skip-tls-verify", prefix, &c->insecure_skip_tls_verify, e) < 0)
		return -1;
	if (server == NULL)
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s.server: missing", d->name, prefix);
	snprintf(where, sizeof(where), "kubeconfig %s: %s.server", d->name, prefix);
	if (!str_has_prefix(server, "https://") && !str_has_prefix(server, "http://"))
		return err_set(e, ERR_INVALID, "%s: must be an http(s) URL", where);
	if (server_check(server, where, e) < 0)
		return -1;
	c->server = xstrdup(server);
	while (strlen(c->server) > 8 && c->server[strlen(c->server) - 1] == '/')
		c->server[strlen(c->server) - 1] = '\0';
	if (cadata != NULL) {
		if (decode_data(d, prefix, "certificate-authority-data", cadata, &c->ca_pem, e) < 0)
			return -1;
	} else if (ca != NULL) {
		c->ca_file = resolve_path(d, ca);
	}
	snprintf(where, sizeof(where), "kubeconfig %s: %s", d->name, prefix);
	return tls_check(c, where, e);
}

static int parse_exec(struct kdoc *d, yaml_node_t *m, const char *prefix, struct kube_config *c,
    struct err *e)
{
	char where[400];
	const char *api, *cmd;
	yaml_node_item_t *items;
	struct kube_exec *x;
	size_t n;

	snprintf(where, sizeof(where), "%s.exec", prefix);
	if (ystr(d, m, "apiVersion", where, &api, e) < 0 || ystr(d, m, "command", where, &cmd, e) < 0)
		return -1;
	if (cmd == NULL)
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s.command: missing", d->name, where);
	if (api == NULL || (strcmp(api, "client.authentication.k8s.io/v1") != 0 &&
	    strcmp(api, "client.authentication.k8s.io/v1beta1") != 0))
		return err_set(e, ERR_UNSUPPORTED,
		    "kubeconfig %s: %s.apiVersion: must be client.authentication.k8s.io/v1", d->name, where);
	{
		const char *mode;
		if (ystr(d, m, "interactiveMode", where, &mode, e) < 0)
			return -1;
		/* A controller has no terminal: a plugin that insists on one
		 * would hang or fail at every refresh. */
		if (str_eq(mode, "Always"))
			return err_set(e, ERR_UNSUPPORTED,
			    "kubeconfig %s: %s.interactiveMode: Always needs a terminal, which a controller does not have",
			    d->name, where);
	}
	x = xcalloc(1, sizeof(*x));
	c->exec = x;
	x->command = xstrdup(cmd);
	x->api_version = xstrdup(api);
	if (ybool(d, m, "provideClusterInfo", where, &x->provide_cluster_info, e) < 0)
		return -1;
	if (ylist(d, m, "args", where, &items, &n, e) < 0)
		return -1;
	x->args = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		const char *v;
		if (yscalar(d, yaml_document_get_node(&d->doc, items[i]), "exec.args", &v, e) < 0)
			return -1;
		x->args[i] = xstrdup(v ? v : "");
	}
	if (ylist(d, m, "env", where, &items, &n, e) < 0)
		return -1;
	x->env = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *item = yaml_document_get_node(&d->doc, items[i]);
		const char *k, *v;
		struct strbuf s;
		if (ystr(d, item, "name", "exec.env[]", &k, e) < 0 ||
		    ystr(d, item, "value", "exec.env[]", &v, e) < 0)
			return -1;
		if (k == NULL || strchr(k, '=') != NULL)
			return err_set(e, ERR_INVALID, "kubeconfig %s: %s.env[%zu].name: missing or invalid",
			    d->name, where, i);
		strbuf_init(&s);
		strbuf_printf(&s, "%s=%s", k, v ? v : "");
		x->env[i] = strbuf_take(&s);
	}
	return 0;
}

static int parse_user(struct kfiles *f, const char *name, struct kube_config *c, struct err *e)
{
	static const char *refused[] = { "auth-provider", "username", "password", "as", "as-groups",
		"as-uid" };
	struct kdoc *d = NULL;
	yaml_node_t *m = find_named(f, "users", name, "user", &d, e), *exec;
	char prefix[300];
	const char *tok, *tokfile, *cert, *key, *certdata, *keydata;

	if (m == NULL)
		return -1;
	snprintf(prefix, sizeof(prefix), "users[\"%s\"].user", name);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (yget(d, m, refused[i]) != NULL)
			return err_set(e, ERR_UNSUPPORTED, "kubeconfig %s: %s.%s: not supported", d->name,
			    prefix, refused[i]);
	if (ystr(d, m, "token", prefix, &tok, e) < 0 ||
	    ystr(d, m, "tokenFile", prefix, &tokfile, e) < 0 ||
	    ystr(d, m, "client-certificate", prefix, &cert, e) < 0 ||
	    ystr(d, m, "client-key", prefix, &key, e) < 0 ||
	    ystr(d, m, "client-certificate-data", prefix, &certdata, e) < 0 ||
	    ystr(d, m, "client-key-data", prefix, &keydata, e) < 0)
		return -1;
	if (tok != NULL) {
		char where[400];
		snprintf(where, sizeof(where), "kubeconfig %s: %s.token", d->name, prefix);
		if (kube_token_check(tok, where, e) < 0)
			return -1;
		c->token = xstrdup(tok);
	}
	else if (tokfile != NULL)
		c->token_file = resolve_path(d, tokfile);
	if (certdata != NULL) {
		if (decode_data(d, prefix, "client-certificate-data", certdata, &c->client_cert_pem, e) < 0)
			return -1;
	} else if (cert != NULL) {
		c->client_cert_file = resolve_path(d, cert);
	}
	if (keydata != NULL) {
		if (decode_data(d, prefix, "client-key-data", keydata, &c->client_key_pem, e) < 0)
			return -1;
	} else if (key != NULL) {
		c->client_key_file = resolve_path(d, key);
	}
	if ((c->client_cert_pem || c->client_cert_file) != (c->client_key_pem || c->client_key_file))
		return err_set(e, ERR_INVALID,
		    "kubeconfig %s: %s: client-certificate and client-key must be given together",
		    d->name, prefix);
	exec = yget(d, m, "exec");
	if (exec != NULL) {
		if (exec->type != YAML_MAPPING_NODE)
			return err_set(e, ERR_INVALID, "kubeconfig %s: %s.exec: expected a mapping", d->name,
			    prefix);
		if (parse_exec(d, exec, prefix, c, e) < 0)
			return -1;
	}
	return 0;
}

static int build_config(struct kfiles *f, const char *source, const char *context_override,
    struct kube_config **out, struct err *e)
{
	const char *ctxname = context_override, *cluster = NULL, *user = NULL, *ns = NULL;
	struct kube_config *c;
	struct kdoc *d = NULL;
	yaml_node_t *ctx;
	char prefix[300];

	for (size_t i = 0; i < f->n && ctxname == NULL; i++) {
		if (yroot(&f->docs[i]) == NULL)
			return err_set(e, ERR_INVALID, "kubeconfig %s: not a mapping", f->docs[i].name);
		if (ystr(&f->docs[i], yroot(&f->docs[i]), "current-context", "", &ctxname, e) < 0)
			return -1;
	}
	if (ctxname == NULL)
		return err_set(e, ERR_INVALID, "kubeconfig %s: current-context: not set", source);
	ctx = find_named(f, "contexts", ctxname, "context", &d, e);
	if (ctx == NULL)
		return -1;
	snprintf(prefix, sizeof(prefix), "contexts[\"%s\"].context", ctxname);
	if (ystr(d, ctx, "cluster", prefix, &cluster, e) < 0 || ystr(d, ctx, "user", prefix, &user, e) < 0 ||
	    ystr(d, ctx, "namespace", prefix, &ns, e) < 0)
		return -1;
	if (cluster == NULL)
		return err_set(e, ERR_INVALID, "kubeconfig %s: %s.cluster: missing", d->name, prefix);
	c = xcalloc(1, sizeof(*c));
	c->source = xstrdup(source);
	c->namespace = xstrdup(ns ? ns : "default");
	if (parse_cluster(f, cluster, c, e) < 0 || (user != NULL && parse_user(f, user, c, e) < 0)) {
		kube_config_free(c);
		return -1;
	}
	*out = c;
	return 0;
}

int kube_config_parse(const char *name, const char *text, size_t len, const char *context,
    struct kube_config **out, struct err *e)
{
	struct kfiles f = { xcalloc(1, sizeof(struct kdoc)), 1 };
	int rc = kdoc_load(&f.docs[0], name, text, len, e);

	if (rc == 0)
		rc = build_config(&f, name, context, out, e);
	kfiles_free(&f);
	return rc;
}

int kube_config_kubeconfig(const char *paths, const char *context, struct kube_config **out,
    struct err *e)
{
	struct kfiles f = { NULL, 0 };
	char *list = xstrdup(paths), *save = NULL;
	int rc = -1;

	for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		char *text;
		size_t len;
		if (*p == '\0')
			continue;
		if (fs_read_file(p, KUBECONFIG_MAX, &text, &len, e) < 0) {
			/* kubectl skips missing files in a list but not a lone one */
			if (e->code == ERR_NOTFOUND || !fs_exists(p)) {
				if (strchr(paths, ':') != NULL)
					continue;
			}
			err_prefix(e, "kubeconfig %s", p);
			goto out;
		}
		f.docs = xrealloc(f.docs, (f.n + 1) * sizeof(*f.docs));
		rc = kdoc_load(&f.docs[f.n], p, text, len, e);
		f.n++;
		free(text);
		if (rc < 0)
			goto out;
		rc = -1;
	}
	if (f.n == 0) {
		err_set(e, ERR_NOTFOUND, "kubeconfig %s: no such file", paths);
		goto out;
	}
	rc = build_config(&f, paths, context, out, e);
out:
	kfiles_free(&f);
	free(list);
	return rc;
}

int kube_config_load(const char *flag_path, struct kube_config **out, struct err *e)
{
	const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
	char path[4096];

	if (flag_path != NULL && *flag_path)
		return kube_config_kubeconfig(flag_path, NULL, out, e);
	if (env != NULL && *env)
		return kube_config_kubeconfig(env, NULL, out, e);
	if (getenv("KUBERNETES_SERVICE_HOST") != NULL)
		return kube_config_incluster(getenv("KUBERNETES_SERVICE_HOST"),
		    getenv("KUBERNETES_SERVICE_PORT"), KUBE_SA_DIR, out, e);
	if (home != NULL) {
		if (fs_join(path, sizeof(path), home, ".kube/config", e) < 0)
			return -1;
		if (fs_exists(path))
			return kube_config_kubeconfig(path, NULL, out, e);
	}
	return err_set(e, ERR_NOTFOUND,
	    "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, run in a cluster, or create ~/.kube/config");
}
