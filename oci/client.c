/*
 * client.c - talking to one registry: the auth dance, manifests, tags and
 * blob streams.  pull.c and push.c build on these.
 *
 * Auth.  The first request to a registry goes out anonymous unless a
 * registrytoken was configured.  A 401 carries a WWW-Authenticate challenge:
 *   Basic  -> the configured user/password are sent from then on;
 *   Bearer -> a token is requested from the realm for the scope
 *             (repository:<name>:pull or pull,push), with Basic credentials
 *             or, when an identity token is configured, the OAuth2
 *             refresh-token POST (falling back to GET on 404).  Tokens are
 *             cached per scope until shortly before they expire; a 401 with
 *             a cached token drops it and fetches a new one once.
 * The Authorization header is attached only to URLs on the registry's own
 * scheme://host:port, so blob redirects to object storage and foreign
 * upload locations never see it (curl additionally drops custom
 * Authorization headers on cross-host redirects).
 *
 * A client is used by one thread at a time (the caller serialises).
 * Tag listing is in tags.c.
 */
#include "oci/oci.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base64.h"
#include "base/digest.h"
#include "base/http.h"
#include "base/log.h"
#include "base/secret.h"
#include "base/url.h"
#include "oci/internal.h"

#define TOKEN_BODY_MAX (1 << 20)
/* Any other buffered registry response (upload sessions, PUT answers): a
 * registry has nothing large to say there. */
#define RESPONSE_BODY_MAX (1 << 20)
#define TOKEN_MARGIN_S 10
#define TOKEN_DEFAULT_TTL_S 60

struct token {
	char *scope;
	char *value;
	time_t expires;
};

enum auth_mode { AUTH_UNKNOWN, AUTH_NONE, AUTH_BASIC, AUTH_BEARER };

struct oci_client {
	char *registry;
	char *base;                  /* "https://host:port" */
	struct http_opts http;
	struct oci_creds creds;
	enum auth_mode mode;
	struct oci_challenge chal;   /* last Bearer challenge */
	struct token *tokens;
	size_t ntokens;
	oci_progress_fn progress;
	void *progress_ud;
};

static char *strdup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

struct oci_client *oci_client_new(const char *registry, const struct oci_client_opts *o,
    struct err *e)
{
	struct oci_client *c = calloc(1, sizeof(*c));
	size_t n;

	if (c == NULL)
		goto nomem;
	http_opts_default(&c->http);
	c->http.max_bytes = RESPONSE_BODY_MAX;
	c->http.ca_file = o->ca_file;
	c->http.insecure_skip_tls_verify = o->insecure_skip_tls_verify;
	c->http.cancel = o->cancel;
	if (o->timeout_ms > 0) {
		c->http.connect_timeout_ms = o->timeout_ms;
		c->http.stall_timeout_ms = o->timeout_ms;
	}
	if (o->retries >= 0)
		c->http.retries = o->retries;
	c->progress = o->progress;
	c->progress_ud = o->progress_ud;
	c->registry = strdup(registry);
	n = strlen(registry) + 16;
	c->base = malloc(n);
	if (c->registry == NULL || c->base == NULL)
		goto nomem;
	snprintf(c->base, n, "%s://%s", o->plain_http ? "http" : "https", registry);
	c->creds.username = strdup_or_null(o->creds.username);
	c->creds.password = strdup_or_null(o->creds.password);
	c->creds.identity_token = strdup_or_null(o->creds.identity_token);
	c->creds.registry_token = strdup_or_null(o->creds.registry_token);
	if ((o->creds.username && !c->creds.username) || (o->creds.password && !c->creds.password) ||
	    (o->creds.identity_token && !c->creds.identity_token) ||
	    (o->creds.registry_token && !c->creds.registry_token))
		goto nomem;
	if (c->creds.registry_token != NULL && !oci_token_usable(c->creds.registry_token)) {
		oci_client_free(c);
		err_set(e, ERR_INVALID, "registry %s: the configured registry token has characters a header "
		    "cannot carry (control characters or spaces); refused", registry);
		return NULL;
	}
	/* A registry token is a bearer token given to us: no challenge needed. */
	c->mode = c->creds.registry_token ? AUTH_BEARER : AUTH_UNKNOWN;
	return c;
nomem:
	oci_client_free(c);
	err_set(e, ERR_NOMEM, "out of memory");
	return NULL;
}

void oci_client_free(struct oci_client *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->ntokens; i++) {
		free(c->tokens[i].scope);
		secret_free(c->tokens[i].value);
	}
	free(c->tokens);
	oci_challenge_free(&c->chal);
	oci_creds_free(&c->creds);
	free(c->registry);
	free(c->base);
	free(c);
}

const char *oci_client_registry(const struct oci_client *c)
{
	return c->registry;
}

const char *oci_client_base(const struct oci_client *c)
{
	return c->base;
}

const struct http_opts *oci_client_http(const struct oci_client *c)
{
	return &c->http;
}

void oci_client_progress(struct oci_client *c, const char *what, int64_t done, int64_t total)
{
	if (c->progress != NULL)
		c->progress(c->progress_ud, what, done, total);
}

/* ---------------- small helpers ---------------- */

int oci_same_origin(const struct oci_client *c, const char *url)
{
	size_t bl = strlen(c->base);

	return strncasecmp(url, c->base, bl) == 0 && (url[bl] == '/' || url[bl] == '\0' || url[bl] == '?');
}

/* Percent-encodes s for a query or form value (RFC 3986 unreserved kept):
 * curl_easy_escape, copied into a malloc'd string the caller frees (a
 * secret when s was: scrub with secret_free).  NULL when out of memory. */
static char *pct_encode(const char *s)
{
	char *esc = curl_easy_escape(NULL, s, 0), *out;

	if (esc == NULL)
		return NULL;
	out = strdup(esc);
	secret_wipe(esc, strlen(esc));
	curl_free(esc);
	return out;
}

static char *basic_header(const struct oci_creds *cr)
{
	const char *user = cr->username ? cr->username : "", *pass = cr->password ? cr->password : "";
	size_t rawlen = strlen(user) + strlen(pass) + 1;
	char *raw = malloc(rawlen + 1), *b64 = NULL, *hdr = NULL;

	if (raw == NULL)
		return NULL;
	snprintf(raw, rawlen + 1, "%s:%s", user, pass);
	b64 = base64_encode(raw, rawlen);
	secret_wipe(raw, rawlen);
	free(raw);
	if (b64 != NULL && oci_asprintf(&hdr, "Authorization: Basic %s", b64) < 0)
		hdr = NULL;
	secret_free(b64);
	return hdr;
}

static char *bearer_header(const char *token)
{
	size_t n = strlen(token) + 32;
	char *h = malloc(n);

	if (h != NULL)
		snprintf(h, n, "Authorization: Bearer %s", token);
	return h;
}

/* The registry's {"errors":[{"code","message"}]} as "CODE: message". */
void oci_registry_error_text(const char *body, char *out, size_t outlen)
{
	cJSON *root = body ? cJSON_Parse(body) : NULL;
	const cJSON *errs = cJSON_GetObjectItemCaseSensitive(root, "errors");
	const cJSON *first = cJSON_IsArray(errs) ? cJSON_GetArrayItem(errs, 0) : NULL;
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(first, "code");
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(first, "message");

	out[0] = '\0';
	if (cJSON_IsString(code))
		snprintf(out, outlen, "%.80s%s%.200s", code->valuestring, cJSON_IsString(msg) ? ": " : "",
		    cJSON_IsString(msg) ? msg->valuestring : "");
	cJSON_Delete(root);
	for (char *p = out; *p; p++)
		if (!isprint((unsigned char)*p))
			*p = ' ';
}

int oci_status_error(struct err *e, const char *what, const struct http_response *r)
{
	char detail[300];
	enum err_code code = r->status == 404 ? ERR_NOTFOUND :
	    (r->status == 401 || r->status == 403) ? ERR_AUTH : ERR_HTTP;

	oci_registry_error_text(r->body, detail, sizeof(detail));
	if (code == ERR_AUTH)
		err_set(e, code, "%s: %s (HTTP %ld%s%s)", what,
		    r->status == 401 ? "authentication failed: credentials missing or refused" :
		    "access denied", r->status, detail[0] ? ", " : "", detail);
	else
		err_set(e, code, "%s: HTTP %ld%s%s", what, r->status, detail[0] ? ": " : "", detail);
	e->http_status = (int)r->status;
	return -1;
}

/* ---------------- tokens ---------------- */

int oci_token_usable(const char *t)
{
	/* RFC 6750 b64token is narrower; visible ASCII is what a header line
	 * can carry without the token adding headers (CR/LF) of its own. */
	if (t == NULL || *t == '\0')
		return 0;
	for (const unsigned char *p = (const unsigned char *)t; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			return 0;
	return 1;
}

static struct token *find_token(struct oci_client *c, const char *scope)
{
	time_t now = time(NULL);

	for (size_t i = 0; i < c->ntokens; i++)
		if (strcmp(c->tokens[i].scope, scope) == 0)
			return c->tokens[i].expires > now ? &c->tokens[i] : NULL;
	return NULL;
}

static void drop_token(struct oci_client *c, const char *scope)
{
	for (size_t i = 0; i < c->ntokens; i++) {
		if (strcmp(c->tokens[i].scope, scope) != 0)
			continue;
		free(c->tokens[i].scope);
		secret_free(c->tokens[i].value);
		c->tokens[i] = c->tokens[--c->ntokens];
		return;
	}
}

static int store_token(struct oci_client *c, const char *scope, char *value, long ttl, struct err *e)
{
	struct token *t;

	drop_token(c, scope);
	t = realloc(c->tokens, (c->ntokens + 1) * sizeof(*t));
	if (t == NULL) {
		secret_free(value);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	c->tokens = t;
	t = &c->tokens[c->ntokens];
	t->scope = strdup(scope);
	if (t->scope == NULL) {
		secret_free(value);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	t->value = value;
	/* Renew a little early so a token does not expire mid-request. */
	t->expires = time(NULL) + (ttl > 2 * TOKEN_MARGIN_S ? ttl - TOKEN_MARGIN_S : ttl / 2 + 1);
	c->ntokens++;
	return 0;
}

/* Parses {"token"|"access_token", "expires_in"}; takes ownership of nothing. */
static int parse_token_body(const char *body, char **value, long *ttl, struct err *e,
    const char *realm)
{
	cJSON *root = cJSON_Parse(body);
	const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "token");
	const cJSON *exp = cJSON_GetObjectItemCaseSensitive(root, "expires_in");

	if (!cJSON_IsString(tok) || tok->valuestring[0] == '\0')
		tok = cJSON_GetObjectItemCaseSensitive(root, "access_token");
	if (!cJSON_IsString(tok) || tok->valuestring[0] == '\0') {
		cJSON_Delete(root);
		char safe[URL_LOG_MAX];
		return err_set(e, ERR_AUTH, "token server %s: response has no token",
		    url_for_log(realm, safe, sizeof(safe)));
	}
	if (!oci_token_usable(tok->valuestring)) {
		char safe[URL_LOG_MAX];
		secret_wipe(tok->valuestring, strlen(tok->valuestring));
		cJSON_Delete(root);
		return err_set(e, ERR_AUTH, "token server %s: the token has characters a header cannot carry "
		    "(control characters or spaces); refused", url_for_log(realm, safe, sizeof(safe)));
	}
	*value = strdup(tok->valuestring);
	*ttl = cJSON_IsNumber(exp) && exp->valuedouble >= 1 && exp->valuedouble < 1e9 ?
	    (long)exp->valuedouble : TOKEN_DEFAULT_TTL_S;
	secret_wipe(tok->valuestring, strlen(tok->valuestring));
	cJSON_Delete(root);
	return *value ? 0 : err_set(e, ERR_NOMEM, "out of memory");
}

static int realm_allowed(const struct oci_client *c, const char *realm, struct err *e)
{
	if (strncasecmp(realm, "https://", 8) == 0)
		return 0;
	if (strncasecmp(realm, "http://", 7) == 0 && strncmp(c->base, "http://", 7) == 0)
		return 0;
	char safe[URL_LOG_MAX];

	return err_set(e, ERR_AUTH, "registry %s: token realm \"%s\" is not an https URL "
	    "(plain http only with --plain-http)", c->registry, url_for_log(realm, safe, sizeof(safe)));
}

/* 1 when scope `have` ("repository:x:pull,push") grants every action of
 * `want` on the same resource, so asking for `want` as well is pointless. */
static int scope_covers(const char *have, const char *want)
{
	const char *hc = strrchr(have, ':'), *wc = strrchr(want, ':');

	if (hc == NULL || wc == NULL || hc - have != wc - want || strncmp(have, want, (size_t)(hc - have)) != 0)
		return 0;
	for (const char *a = wc + 1; *a;) {
		size_t n = strcspn(a, ",");
		int found = 0;
		for (const char *b = hc + 1; *b && !found;) {
			size_t m = strcspn(b, ",");
			found = (m == n && strncmp(a, b, n) == 0) || (m == 1 && *b == '*');
			b += m + (b[m] == ',');
		}
		if (!found)
			return 0;
		a += n + (a[n] == ',');
	}
	return 1;
}

/* The token request's URL (GET) or form body (POST), malloc'd; NULL when
 * out of memory.  Every value is percent-encoded by libcurl. */
static char *token_params(const struct oci_client *c, const char *scope, int oauth)
{
	const char *extra = c->chal.scope != NULL && !scope_covers(scope, c->chal.scope) ? c->chal.scope : NULL;
	char *service = pct_encode(c->chal.service ? c->chal.service : "");
	char *sc1 = pct_encode(scope), *sc2 = pct_encode(extra ? extra : "");
	char *id = oauth ? pct_encode(c->creds.identity_token) : NULL, *out = NULL;
	const char *realm = c->chal.realm;

	if (service == NULL || sc1 == NULL || sc2 == NULL || (oauth && id == NULL))
		goto out;
	if (oauth) {
		if (oci_asprintf(&out, "grant_type=refresh_token&refresh_token=%s&service=%s&scope=%s%s%s"
		    "&client_id=pulumi-controller", id, service, sc1, extra ? "%20" : "", sc2) < 0)
			out = NULL;
	} else if (oci_asprintf(&out, "%s%cservice=%s&scope=%s%s%s", realm, strchr(realm, '?') ? '&' : '?',
	    service, sc1, extra ? "&scope=" : "", sc2) < 0) {
		out = NULL;
	}
out:
	free(service);
	free(sc1);
	free(sc2);
	secret_free(id);
	return out;
}

static int token_request(struct oci_client *c, const char *scope, struct http_response *resp,
    int oauth, struct err *e)
{
	const char *hdrs[4] = { NULL };
	char *url, *auth = NULL, *body = NULL, *params = token_params(c, scope, oauth);
	size_t n = 0;
	int rc;

	if (params == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	if (oauth) {
		body = params;
		url = strdup(c->chal.realm);
		hdrs[n++] = "Content-Type: application/x-www-form-urlencoded";
	} else {
		url = params;
		if (c->creds.username != NULL && c->creds.password != NULL) {
			auth = basic_header(&c->creds);
			if (auth == NULL) {
				free(url);
				return err_set(e, ERR_NOMEM, "out of memory");
			}
			hdrs[n++] = auth;
		}
	}
	if (url == NULL) {
		secret_free(body);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	struct http_request req = { .method = oauth ? "POST" : "GET", .url = url, .headers = hdrs,
	    .body = body, .body_len = body ? strlen(body) : 0 };
	struct http_opts ho = c->http;
	ho.max_bytes = TOKEN_BODY_MAX;
	rc = http_do(&ho, &req, resp, e);
	if (rc < 0 && e->code == ERR_LIMIT) {
		/* ERR_AUTH, not ERR_LIMIT: a caller must not read it as the limit
		 * of what it asked for (a manifest, a tag list) being hit. */
		char safe[URL_LOG_MAX];
		err_set(e, ERR_AUTH, "registry %s: token response from %s is larger than the limit of %d bytes",
		    c->registry, url_for_log(c->chal.realm, safe, sizeof(safe)), TOKEN_BODY_MAX);
	} else if (rc < 0) {
		err_prefix(e, "registry %s: token request", c->registry);
	}
	free(url);
	secret_free(body);
	secret_free(auth);
	return rc;
}

/* Gets a token for scope from the challenge's realm and caches it. */
static int fetch_token(struct oci_client *c, const char *scope, struct err *e)
{
	struct http_response resp;
	char *value = NULL;
	long ttl = 0;
	int oauth = c->creds.identity_token != NULL;

	if (c->chal.realm == NULL)
		return err_set(e, ERR_AUTH, "registry %s: Bearer challenge without a realm", c->registry);
	if (realm_allowed(c, c->chal.realm, e) < 0)
		return -1;
	if (token_request(c, scope, &resp, oauth, e) < 0)
		return -1;
	if (oauth && (resp.status == 404 || resp.status == 405)) {
		http_response_free(&resp);
		if (token_request(c, scope, &resp, 0, e) < 0)
			return -1;
	}
	if (resp.status != 200) {
		char what[600], safe[URL_LOG_MAX];
		snprintf(what, sizeof(what), "registry %s: token request to %s", c->registry,
		    url_for_log(c->chal.realm, safe, sizeof(safe)));
		oci_status_error(e, what, &resp);
		http_response_free(&resp);
		return -1;
	}
	int rc = parse_token_body(resp.body, &value, &ttl, e, c->chal.realm);
	secret_wipe(resp.body, resp.body_len);
	http_response_free(&resp);
	if (rc < 0)
		return -1;
	log_debug("registry token obtained", "registry", c->registry, "scope", scope, NULL);
	return store_token(c, scope, value, ttl, e);
}

/* Learns what the registry wants from a 401's WWW-Authenticate. */
static int learn_challenge(struct oci_client *c, const struct http_response *r, struct err *e)
{
	char *h = http_response_header(r, "WWW-Authenticate");
	struct oci_challenge ch;
	int rc;

	if (h == NULL)
		return err_set(e, ERR_AUTH, "registry %s: HTTP 401 without a WWW-Authenticate challenge",
		    c->registry);
	rc = oci_challenge_parse(h, &ch, e);
	free(h);
	if (rc < 0) {
		err_prefix(e, "registry %s", c->registry);
		return -1;
	}
	if (strcasecmp(ch.scheme, "Basic") == 0) {
		oci_challenge_free(&ch);
		if (c->creds.username == NULL || c->creds.password == NULL)
			return err_set(e, ERR_AUTH, "registry %s: authentication required (Basic) and no "
			    "credentials were given (--creds or --docker-config)", c->registry);
		c->mode = AUTH_BASIC;
		return 0;
	}
	if (strcasecmp(ch.scheme, "Bearer") != 0) {
		err_set(e, ERR_UNSUPPORTED, "registry %s: unsupported auth scheme \"%.40s\"", c->registry,
		    ch.scheme);
		oci_challenge_free(&ch);
		return -1;
	}
	oci_challenge_free(&c->chal);
	c->chal = ch;
	c->mode = AUTH_BEARER;
	return 0;
}

/*
 * The Authorization header for a request to url under scope, or NULL when
 * none is to be sent.  *out is malloc'd (a secret: free with secret_free).
 */
static int auth_for(struct oci_client *c, const char *scope, const char *url, char **out,
    struct err *e)
{
	struct token *t;

	*out = NULL;
	if (!oci_same_origin(c, url))
		return 0;
	switch (c->mode) {
	case AUTH_BASIC:
		*out = basic_header(&c->creds);
		break;
	case AUTH_BEARER:
		if (c->creds.registry_token != NULL) {
			*out = bearer_header(c->creds.registry_token);
			break;
		}
		t = find_token(c, scope);
		if (t == NULL) {
			if (fetch_token(c, scope, e) < 0)
				return -1;
			t = find_token(c, scope);
		}
		if (t == NULL)
			return err_set(e, ERR_AUTH, "registry %s: token expired immediately", c->registry);
		*out = bearer_header(t->value);
		break;
	default:
		return 0;
	}
	return *out ? 0 : err_set(e, ERR_NOMEM, "out of memory");
}

/* Merges extra headers and the auth header into a NULL-terminated list. */
static const char **header_list(const char *const *extra, const char *auth, const char **buf, size_t max)
{
	size_t n = 0;

	for (const char *const *h = extra; h != NULL && *h != NULL && n + 2 < max; h++)
		buf[n++] = *h;
	if (auth != NULL)
		buf[n++] = auth;
	buf[n] = NULL;
	return buf;
}

/* After a 401: learn the challenge and forget the token that failed.
 * Returns 1 when a retry makes sense, 0 when not, -1 on error. */
static int handle_401(struct oci_client *c, const char *scope, const struct http_response *r,
    int had_auth, struct err *e)
{
	enum auth_mode before = c->mode;

	if (c->creds.registry_token != NULL && had_auth)
		return 0;
	if (learn_challenge(c, r, e) < 0)
		return -1;
	if (c->mode == AUTH_BEARER) {
		if (had_auth && before == AUTH_BEARER) {
			drop_token(c, scope);
			/* An "insufficient_scope"-less 401 to a fresh token means refused. */
		}
		return 1;
	}
	return !(had_auth && before == AUTH_BASIC);
}

int oci_request(struct oci_client *c, const char *scope, const struct http_opts *opts,
    struct http_request *req, struct http_response *resp, struct err *e)
{
	const char *hdrs[16];
	const char *const *extra = req->headers;

	for (int attempt = 0;; attempt++) {
		char *auth = NULL;
		int rc;

		if (auth_for(c, scope, req->url, &auth, e) < 0)
			return -1;
		req->headers = header_list(extra, auth, hdrs, sizeof(hdrs) / sizeof(hdrs[0]));
		rc = http_do(opts ? opts : &c->http, req, resp, e);
		req->headers = extra;
		secret_free(auth);
		if (rc < 0)
			return -1;
		if (resp->status != 401 || attempt >= 2 || !oci_same_origin(c, req->url))
			return 0;
		rc = handle_401(c, scope, resp, auth != NULL, e);
		if (rc <= 0) {
			if (rc < 0)
				http_response_free(resp);
			return rc;
		}
		http_response_free(resp);
	}
}

struct http_stream *oci_open_stream(struct oci_client *c, const char *scope, const char *url,
    const char *const *extra, long timeout_ms, struct err *e)
{
	const char *hdrs[16];

	for (int attempt = 0;; attempt++) {
		char *auth = NULL;
		struct http_stream *s;

		if (auth_for(c, scope, url, &auth, e) < 0)
			return NULL;
		struct http_request req = { .url = url,
		    .headers = header_list(extra, auth, hdrs, sizeof(hdrs) / sizeof(hdrs[0])) };
		struct http_opts o = c->http;
		struct http_response refused = { 0 };
		int rc;

		o.timeout_ms = timeout_ms;   /* big blobs: the caller's budget, not a request's */
		o.max_bytes = -1;            /* the reader counts against the descriptor's size */
		s = http_stream_open_resp(&o, &req, &refused, e);
		if (s != NULL || refused.status != 401 || attempt >= 1 || !oci_same_origin(c, url)) {
			secret_free(auth);
			http_response_free(&refused);
			return s;
		}
		/* The 401's challenge says how to authenticate, as for any request. */
		rc = handle_401(c, scope, &refused, auth != NULL, e);
		secret_free(auth);
		http_response_free(&refused);
		if (rc <= 0)
			return NULL;   /* e: the 401 itself, or why the challenge failed */
	}
}

/* ---------------- manifests ---------------- */

static const char *const accept_manifests =
	"Accept: " OCI_MT_MANIFEST ", " OCI_MT_INDEX ", " OCI_MT_DOCKER_MANIFEST ", " OCI_MT_DOCKER_LIST;

static int verify_manifest_digest(const char *what, const struct http_response *r,
    const char *reference, char **digest_out, struct err *e)
{
	char *header = http_response_header(r, "Docker-Content-Digest");
	struct digest want, got;
	char buf[DIGEST_STR_MAX];
	struct err de;
	enum digest_algo algo = DIGEST_SHA256;
	int pinned = strchr(reference, ':') != NULL;

	if (pinned) {
		if (digest_parse(reference, &want, &de) < 0) {
			free(header);
			return err_set(e, ERR_INVALID, "%s: %s", what, de.msg);
		}
		algo = want.algo;
	}
	if (header != NULL && *header != '\0') {
		struct digest hd;
		if (digest_parse(header, &hd, &de) < 0) {
			free(header);
			return err_set(e, ERR_DIGEST, "%s: malformed Docker-Content-Digest header", what);
		}
		digest_bytes(hd.algo, r->body, r->body_len, &got);
		if (!digest_equal(&hd, &got)) {
			digest_format(&got, buf, sizeof(buf));
			err_set(e, ERR_DIGEST, "%s: digest mismatch: the registry says %.140s, the bytes are %s",
			    what, header, buf);
			free(header);
			return -1;
		}
	}
	free(header);
	if (pinned) {
		digest_bytes(algo, r->body, r->body_len, &got);
		if (!digest_equal(&want, &got)) {
			digest_format(&got, buf, sizeof(buf));
			return err_set(e, ERR_DIGEST, "%s: digest mismatch: requested %s, the bytes are %s", what,
			    reference, buf);
		}
	}
	/* The manifest digest we report is always sha256, as Flux writes it. */
	digest_bytes(DIGEST_SHA256, r->body, r->body_len, &got);
	digest_format(&got, buf, sizeof(buf));
	*digest_out = strdup(buf);
	return *digest_out ? 0 : err_set(e, ERR_NOMEM, "out of memory");
}

char *oci_scope(const char *repo, const char *actions)
{
	size_t n = strlen(repo) + strlen(actions) + 16;
	char *s = malloc(n);

	if (s != NULL)
		snprintf(s, n, "repository:%s:%s", repo, actions);
	return s;
}

int oci_get_manifest(struct oci_client *c, const char *repo, const char *reference,
    struct oci_manifest *out, char **digest_out, char **body_out, size_t *body_len, struct err *e)
{
	char *url = NULL, *scope = oci_scope(repo, "pull"), *ctype = NULL, what[700];
	const char *hdrs[] = { accept_manifests, NULL };
	struct http_response r = { 0 };
	struct http_opts o = c->http;
	int rc = -1;

	*digest_out = NULL;
	memset(out, 0, sizeof(*out));
	snprintf(what, sizeof(what), "manifest %s/%s%s%s", c->registry, repo,
	    strchr(reference, ':') ? "@" : ":", reference);
	if (scope == NULL || oci_asprintf(&url, "%s/v2/%s/manifests/%s", c->base, repo, reference) < 0) {
		free(scope);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	o.max_bytes = OCI_MANIFEST_MAX;
	struct http_request req = { .url = url, .headers = hdrs };
	if (oci_request(c, scope, &o, &req, &r, e) < 0) {
		if (e->code == ERR_LIMIT)
			err_set(e, ERR_LIMIT, "%s: larger than the limit of %lld bytes", what,
			    (long long)OCI_MANIFEST_MAX);
		else
			err_prefix(e, "%s", what);
		goto out;
	}
	if (r.status != 200) {
		oci_status_error(e, what, &r);
		goto out;
	}
	if (verify_manifest_digest(what, &r, reference, digest_out, e) < 0)
		goto out;
	ctype = http_response_header(&r, "Content-Type");
	if (oci_manifest_parse(r.body, r.body_len, ctype, out, e) < 0) {
		err_prefix(e, "%s", what);
		goto out;
	}
	if (body_out != NULL) {
		*body_out = r.body;
		*body_len = r.body_len;
		r.body = NULL;
	}
	rc = 0;
out:
	if (rc < 0) {
		free(*digest_out);
		*digest_out = NULL;
	}
	free(ctype);
	free(url);
	free(scope);
	http_response_free(&r);
	return rc;
}

int oci_asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(out, fmt, ap);
	va_end(ap);
	if (n < 0) {
		*out = NULL;
		return -1;
	}
	return n;
}
