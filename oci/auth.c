/*
 * auth.c - what a registry client needs to know about credentials:
 * WWW-Authenticate challenges (RFC 7235 syntax, RFC 6750 Bearer params),
 * docker config.json lookups and docker-credential-* helpers.
 *
 * The token exchange itself lives in client.c; this file only parses and
 * finds.  Credential values are never formatted into errors or logs.
 */
#include "oci/oci.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base64.h"
#include "base/mem.h"
#include "base/fs.h"
#include "base/proc.h"
#include "base/secret.h"
#include "base/str.h"

#define DOCKER_HUB_API "registry-1.docker.io"
#define DOCKER_HUB_KEY "https://index.docker.io/v1/"
#define HELPER_OUTPUT_MAX (64 * 1024)
#define HELPER_TIMEOUT_MS 30000
#define CONFIG_MAX (4 << 20)

extern char **environ;

/* ---------------- WWW-Authenticate ---------------- */

void oci_challenge_free(struct oci_challenge *c)
{
	if (c == NULL)
		return;
	mem_free_all(c->scheme, c->realm, c->service, c->scope, c->error);
	memset(c, 0, sizeof(*c));
}

static int is_tchar(char c)
{
	return isalnum((unsigned char)c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

/* Reads a quoted-string starting at the opening quote; *out is malloc'd. */
static const char *read_quoted(const char *p, char **out)
{
	size_t n = 0, cap = strlen(p) + 1;
	char *buf = malloc(cap);

	if (buf == NULL)
		return NULL;
	for (p++; *p && *p != '"'; p++) {
		if (*p == '\\' && p[1] != '\0')
			p++;
		buf[n++] = *p;
	}
	if (*p != '"') {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*out = buf;
	return p + 1;
}

struct challenge_scan {
	struct oci_challenge cur;
	int have;
};

static void assign_param(struct oci_challenge *c, const char *name, size_t nlen, char *value)
{
	char **slot = NULL;

	if (nlen == 5 && strncasecmp(name, "realm", 5) == 0)
		slot = &c->realm;
	else if (nlen == 7 && strncasecmp(name, "service", 7) == 0)
		slot = &c->service;
	else if (nlen == 5 && strncasecmp(name, "scope", 5) == 0)
		slot = &c->scope;
	else if (nlen == 5 && strncasecmp(name, "error", 5) == 0)
		slot = &c->error;
	if (slot == NULL || *slot != NULL) {
		free(value);
		return;
	}
	*slot = value;
}

/*
 * Parses one challenge at p: a scheme, then auth-params until something that
 * is not "name=" (the next challenge).  Returns the position after it, or
 * NULL on a syntax error (e set).
 */
static const char *parse_one(const char *p, struct oci_challenge *c, struct err *e)
{
	const char *start = p;

	while (is_tchar(*p))
		p++;
	if (p == start)
		return err_set(e, ERR_INVALID, "WWW-Authenticate: expected an auth scheme"), NULL;
	c->scheme = strndup(start, (size_t)(p - start));
	if (c->scheme == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	p = skip_ws(p);
	for (;;) {
		const char *name = p, *q;
		size_t nlen;
		char *value = NULL;

		while (is_tchar(*p) && *p != '=')
			p++;
		nlen = (size_t)(p - name);
		q = skip_ws(p);
		if (nlen == 0 || *q != '=') {
			/* token68 ("Basic abc==") or the next challenge's scheme */
			if (nlen > 0 && *q == '=') {
				while (*q == '=')
					q++;
				return q;
			}
			return name;
		}
		q = skip_ws(q + 1);
		if (*q == '"') {
			q = read_quoted(q, &value);
			if (q == NULL)
				return err_set(e, ERR_INVALID, "WWW-Authenticate: unterminated quoted value"), NULL;
		} else {
			const char *vs = q;
			while (is_tchar(*q) || *q == '/' || *q == ':' || *q == '=')
				q++;
			value = strndup(vs, (size_t)(q - vs));
			if (value == NULL)
				return err_set(e, ERR_NOMEM, "out of memory"), NULL;
		}
		assign_param(c, name, nlen, value);
		p = skip_ws(q);
		if (*p != ',')
			return p;
		p = skip_ws(p + 1);
		while (*p == ',')
			p = skip_ws(p + 1);
	}
}

int oci_challenge_parse(const char *header, struct oci_challenge *out, struct err *e)
{
	const char *p = header;
	int have = 0;

	memset(out, 0, sizeof(*out));
	if (header == NULL)
		return err_set(e, ERR_INVALID, "WWW-Authenticate: missing");
	for (int guard = 0; guard < 64; guard++) {
		struct oci_challenge c = { 0 };

		p = skip_ws(p);
		while (*p == ',')
			p = skip_ws(p + 1);
		if (*p == '\0')
			break;
		const char *next = parse_one(p, &c, e);
		if (next == NULL) {
			oci_challenge_free(&c);
			oci_challenge_free(out);
			return -1;
		}
		if (next == p) {
			/* Not progressing: junk where a scheme should be. */
			oci_challenge_free(&c);
			break;
		}
		p = next;
		int bearer = strcasecmp(c.scheme, "Bearer") == 0;
		if (!have || (bearer && strcasecmp(out->scheme, "Bearer") != 0)) {
			oci_challenge_free(out);
			*out = c;
			have = 1;
		} else {
			oci_challenge_free(&c);
		}
	}
	if (!have)
		return err_set(e, ERR_INVALID, "WWW-Authenticate: no challenge");
	return 0;
}

/* ---------------- credentials ---------------- */

void oci_creds_free(struct oci_creds *c)
{
	if (c == NULL)
		return;
	free(c->username);
	secret_free(c->password);
	secret_free(c->identity_token);
	secret_free(c->registry_token);
	memset(c, 0, sizeof(*c));
}

int oci_creds_empty(const struct oci_creds *c)
{
	return c->username == NULL && c->password == NULL && c->identity_token == NULL &&
	    c->registry_token == NULL;
}

/* "https://host/v1/" -> "host" (into buf). */
static void key_host(const char *key, char *buf, size_t len)
{
	const char *p = key;
	size_t n;

	if (str_has_prefix(p, "https://"))
		p += 8;
	else if (str_has_prefix(p, "http://"))
		p += 7;
	n = strcspn(p, "/");
	if (n >= len)
		n = len - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
}

static int is_docker_hub(const char *host)
{
	return strcmp(host, DOCKER_HUB_API) == 0 || strcmp(host, "index.docker.io") == 0 ||
	    strcmp(host, "docker.io") == 0;
}

static int key_matches(const char *key, const char *registry)
{
	char host[300];

	key_host(key, host, sizeof(host));
	if (strcasecmp(host, registry) == 0)
		return 1;
	return is_docker_hub(registry) && is_docker_hub(host);
}

/* Decodes base64 "user:pass" into the creds (base64.h's rules).  0 ok, -1
 * malformed: not base64, no colon, or a NUL inside. */
static int decode_auth(const char *b64, struct oci_creds *out)
{
	unsigned char *buf;
	size_t len;
	struct err ignored;
	char *colon;

	if (strlen(b64) > 8192 || base64_decode(b64, strlen(b64), &buf, &len, &ignored) < 0)
		return -1;
	colon = memchr(buf, ':', len);
	if (colon == NULL || memchr(buf, '\0', len) != NULL) {
		secret_wipe(buf, len);
		free(buf);
		return -1;
	}
	*colon = '\0';
	out->username = strdup((char *)buf);
	out->password = strdup(colon + 1);
	secret_wipe(buf, len);
	free(buf);
	return 0;
}

static char *json_str(const cJSON *obj, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

	if (!cJSON_IsString(v) || v->valuestring[0] == '\0')
		return NULL;
	return strdup(v->valuestring);
}

static int creds_from_auth_entry(const cJSON *entry, const char *key, struct oci_creds *out,
    struct err *e)
{
	const cJSON *auth = cJSON_GetObjectItemCaseSensitive(entry, "auth");

	if (!cJSON_IsObject(entry))
		return err_set(e, ERR_INVALID, "docker config: auths entry \"%.200s\" is not an object", key);
	if (cJSON_IsString(auth) && auth->valuestring[0] != '\0') {
		if (decode_auth(auth->valuestring, out) < 0) {
			oci_creds_free(out);
			return err_set(e, ERR_INVALID,
			    "docker config: auths entry \"%.200s\": \"auth\" is not base64 of user:password", key);
		}
	} else {
		out->username = json_str(entry, "username");
		out->password = json_str(entry, "password");
	}
	out->identity_token = json_str(entry, "identitytoken");
	out->registry_token = json_str(entry, "registrytoken");
	return 0;
}

static int helper_name_valid(const char *name)
{
	if (name[0] == '\0' || strlen(name) > 100)
		return 0;
	for (const char *p = name; *p; p++)
		if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.'))
			return 0;
	return 1;
}

static int set_helper(char **helper, const char *name, struct err *e)
{
	if (!helper_name_valid(name))
		return err_set(e, ERR_INVALID, "docker config: bad credential helper name \"%.100s\"", name);
	*helper = strdup(name);
	return *helper ? 0 : err_set(e, ERR_NOMEM, "out of memory");
}

int oci_docker_config_parse(const char *json, size_t len, const char *registry,
    struct oci_creds *out, char **helper, struct err *e)
{
	cJSON *root = cJSON_ParseWithLength(json, len);
	const cJSON *helpers, *auths, *store, *it;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	*helper = NULL;
	if (root == NULL || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return err_set(e, ERR_INVALID, "docker config: not a JSON object");
	}
	helpers = cJSON_GetObjectItemCaseSensitive(root, "credHelpers");
	if (!cJSON_IsObject(helpers))
		helpers = NULL;
	cJSON_ArrayForEach(it, helpers) {
		if (key_matches(it->string, registry) && cJSON_IsString(it)) {
			rc = set_helper(helper, it->valuestring, e);
			goto out;
		}
	}
	auths = cJSON_GetObjectItemCaseSensitive(root, "auths");
	if (auths != NULL && !cJSON_IsObject(auths)) {
		rc = err_set(e, ERR_INVALID, "docker config: \"auths\" is not an object");
		goto out;
	}
	/* An exact host key wins over a URL-form key of the same host. */
	for (int pass = 0; pass < 2; pass++) {
		cJSON_ArrayForEach(it, auths) {
			int exact = strcasecmp(it->string, registry) == 0;
			if ((pass == 0 && !exact) || (pass == 1 && !key_matches(it->string, registry)))
				continue;
			rc = creds_from_auth_entry(it, it->string, out, e);
			if (rc < 0 || !oci_creds_empty(out))
				goto out;
		}
	}
	store = cJSON_GetObjectItemCaseSensitive(root, "credsStore");
	if (cJSON_IsString(store) && store->valuestring[0] != '\0')
		rc = set_helper(helper, store->valuestring, e);
out:
	cJSON_Delete(root);
	if (rc < 0)
		oci_creds_free(out);
	return rc;
}

/* ---------------- credential helpers ---------------- */

/* Runs `prog get` with `input` on stdin, through proc_run: a timeout, the
 * output bounded, and the helper's process group gone afterwards.  The
 * helper gets this process's environment (it may need HOME, PATH, D-Bus).
 * *output is malloc'd (a secret: the caller scrubs and frees it). */
static int run_helper(const char *prog, const char *input, char **output, int *exit_code, struct err *e)
{
	char *argv[] = { (char *)prog, "get", NULL };
	struct proc_spec spec = { .file = prog, .argv = argv, .envp = environ, .stdin_data = input,
	    .stdin_len = strlen(input), .tail_max = HELPER_OUTPUT_MAX, .timeout_ms = HELPER_TIMEOUT_MS,
	    .grace_ms = 1000 };
	struct proc_result r;
	int rc = -1;

	if (proc_run(&spec, &r, e) < 0) {
		if (r.spawn_errno != 0)
			err_set(e, ERR_NOTFOUND, "credential helper %s: %s", prog, strerror(r.spawn_errno));
		else
			err_prefix(e, "credential helper %s", prog);
		goto out;
	}
	if (r.timed_out) {
		err_set(e, ERR_TIMEOUT, "credential helper %s: no answer within %d s", prog,
		    HELPER_TIMEOUT_MS / 1000);
		goto out;
	}
	if (r.out_total > r.out_len) {
		err_set(e, ERR_LIMIT, "credential helper %s: output larger than %d bytes", prog, HELPER_OUTPUT_MAX);
		goto out;
	}
	*exit_code = r.exited ? r.exit_code : -1;
	*output = r.out;
	r.out = NULL;
	rc = 0;
out:
	if (r.out != NULL)
		secret_wipe(r.out, r.out_len);
	proc_result_free(&r);
	return rc;
}

int oci_cred_helper_get(const char *helper, const char *registry, struct oci_creds *out,
    struct err *e)
{
	char prog[160], *output = NULL;
	const char *server = is_docker_hub(registry) ? DOCKER_HUB_KEY : registry;
	int status = 0;
	cJSON *root;


	memset(out, 0, sizeof(*out));
	if (!helper_name_valid(helper))
		return err_set(e, ERR_INVALID, "bad credential helper name \"%.100s\"", helper);
	snprintf(prog, sizeof(prog), "docker-credential-%s", helper);
	if (run_helper(prog, server, &output, &status, e) < 0)
		return -1;
	if (status != 0) {
		int notfound = strstr(output, "credentials not found") != NULL;
		secret_wipe(output, strlen(output));
		free(output);
		if (notfound)
			return 0;
		return err_set(e, ERR_AUTH, "credential helper %s failed for %s (exit status %d)", prog,
		    server, status);
	}
	root = cJSON_Parse(output);
	secret_wipe(output, strlen(output));
	free(output);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return err_set(e, ERR_AUTH, "credential helper %s: output for %s is not a JSON object", prog,
		    server);
	}
	char *user = json_str(root, "Username");
	char *secret = json_str(root, "Secret");
	/* Scrub the parsed copy of the secret too. */
	cJSON *parsed = cJSON_GetObjectItemCaseSensitive(root, "Secret");
	if (cJSON_IsString(parsed))
		secret_wipe(parsed->valuestring, strlen(parsed->valuestring));
	cJSON_Delete(root);
	if (str_eq(user, "<token>")) {
		free(user);
		out->identity_token = secret;
	} else {
		out->username = user;
		out->password = secret;
	}
	return 0;
}

int oci_docker_config_load(const char *path, const char *registry, struct oci_creds *out,
    struct err *e)
{
	char def[4096], *text = NULL, *helper = NULL;
	size_t len = 0;
	int explicit = path != NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	if (path == NULL) {
		const char *dir = getenv("DOCKER_CONFIG");
		const char *home = getenv("HOME");
		if (dir != NULL && *dir != '\0')
			snprintf(def, sizeof(def), "%s/config.json", dir);
		else if (home != NULL && *home != '\0')
			snprintf(def, sizeof(def), "%s/.docker/config.json", home);
		else
			return 0;
		path = def;
		if (!fs_exists(path))
			return 0;
	}
	if (fs_read_file(path, CONFIG_MAX, &text, &len, e) < 0) {
		if (!explicit && e->code == ERR_NOTFOUND)
			return 0;
		return -1;
	}
	rc = oci_docker_config_parse(text, len, registry, out, &helper, e);
	secret_wipe(text, len);
	free(text);
	if (rc < 0) {
		err_prefix(e, "%s", path);
		return -1;
	}
	if (helper != NULL) {
		rc = oci_cred_helper_get(helper, registry, out, e);
		free(helper);
	}
	return rc;
}
