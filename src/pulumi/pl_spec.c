/*
 * pl_spec.c - the pulumi driver's copy of a stack's spec (pl_open,
 * pl_close) and its registry of secret values: every value the driver must
 * never show (the passphrase, secret config and env values, credentials in
 * the backend URL, secret outputs once read) is recorded here, and every
 * text handed back or logged is masked with these (pl_redact).  A secrets
 * provider URL that carries a credential is refused: it would go on argv.
 */
#include "pulumi/pl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/fs.h"
#include "base/secret.h"
#include "base/url.h"

/* Only when the controller itself has no PATH (see child_search_path). */
#define DEFAULT_PATH     "/usr/local/bin:/usr/bin:/bin"
#define DEFAULT_TIMEOUT  (60L * 60 * 1000)

static char *dup_or_null(const char *s, int *oom)
{
	char *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	if (d == NULL)
		*oom = 1;
	return d;
}

void pl_secret_add(struct pl_stack *st, const char *v)
{
	if (v == NULL || *v == '\0')
		return;
	for (size_t i = 0; i < st->secrets.n; i++)
		if (strcmp(st->secrets.v[i], v) == 0)
			return;
	pl_strv_add(&st->secrets, v);
	if (st->secrets.oom)
		st->oom = 1;
}

/* Every string and number leaf of a JSON value is a secret when the whole
 * value is: the CLI may print any of them. */
void pl_secret_add_leaves(struct pl_stack *st, const cJSON *v)
{
	if (cJSON_IsString(v)) {
		pl_secret_add(st, v->valuestring);
	} else if (cJSON_IsNumber(v) || cJSON_IsBool(v)) {
		char *p = cJSON_PrintUnformatted(v);

		if (p && strlen(p) >= 4)   /* masking "1" or "true" everywhere helps no one */
			pl_secret_add(st, p);
		free(p);
	} else {
		for (const cJSON *c = v ? v->child : NULL; c; c = c->next)
			pl_secret_add_leaves(st, c);
	}
}

/* 1 when a query parameter's name says its value is a credential: a
 * token, a key, an Azure SAS signature (sig=), a password. */
static int credential_param(const char *name, size_t len)
{
	static const char *const words[] = {
		"token", "secret", "password", "passwd", "pwd", "key", "sig", "credential", "auth",
	};
	char low[64];

	if (len == 0 || len >= sizeof(low))
		return len > 0;   /* an absurdly long name: assume the worst */
	for (size_t i = 0; i < len; i++)
		low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
	low[len] = '\0';
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strstr(low, words[i]))
			return 1;
	return 0;
}

/* Adds s and, when it differs, its percent-decoded form. */
static void add_secret_and_decoded(struct pl_stack *st, const char *s, size_t len)
{
	char *raw = strndup(s, len);
	int dlen = 0;
	char *dec = raw ? curl_easy_unescape(NULL, raw, 0, &dlen) : NULL;

	if (raw == NULL || dec == NULL) {
		st->oom = 1;
	} else {
		pl_secret_add(st, raw);
		if ((size_t)dlen == strlen(dec))   /* no NUL smuggled in */
			pl_secret_add(st, dec);
	}
	free(raw);
	curl_free(dec);
}

/* The credential query values of query (not decoded); returns how many. */
static int add_query_credentials(struct pl_stack *st, const char *query)
{
	int found = 0;

	while (query && *query) {
		size_t len = strcspn(query, "&");
		const char *eq = memchr(query, '=', len);

		if (eq && credential_param(query, (size_t)(eq - query)) && eq + 1 < query + len) {
			add_secret_and_decoded(st, eq + 1, (size_t)(query + len - eq - 1));
			found++;
		}
		query += len;
		if (*query == '&')
			query++;
	}
	return found;
}

/*
 * A backend URL may carry credentials: userinfo (postgres://user:pw@host/db,
 * https://TOKEN@host) or a query credential (azblob SAS sig=, ?token=).
 * Then the whole URL is a secret, and so is each credential part (raw and
 * percent-decoded), for the CLI may print either.  A URL without any is
 * left visible: it names the backend in messages.  Returns how many
 * credentials the URL carries (an unparseable URL: '@' counts as one).
 */
static int add_backend_secrets(struct pl_stack *st, const char *url)
{
	CURLU *u;
	char *user = NULL, *pw = NULL, *query = NULL;
	int creds = 0;

	if (url == NULL || *url == '\0')
		return 0;
	u = curl_url();
	if (u == NULL) {
		st->oom = 1;
		return 0;
	}
	if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS) != CURLUE_OK) {
		/* Unparseable (awskms:///arn:...?region=x has no host): an '@'
		 * anywhere may be userinfo; the query is read as text. */
		const char *q = strchr(url, '?');
		creds = strchr(url, '@') != NULL;
		if (q)
			creds += add_query_credentials(st, q + 1);
	} else {
		if (curl_url_get(u, CURLUPART_PASSWORD, &pw, 0) == CURLUE_OK && pw && *pw) {
			add_secret_and_decoded(st, pw, strlen(pw));
			creds++;
		} else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK && user && *user) {
			add_secret_and_decoded(st, user, strlen(user));   /* a token as user name */
			creds++;
		}
		if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK)
			creds += add_query_credentials(st, query);
	}
	if (creds > 0)
		pl_secret_add(st, url);
	if (pw)
		secret_wipe(pw, strlen(pw));
	curl_free(pw);
	curl_free(user);
	curl_free(query);
	curl_url_cleanup(u);
	return creds;
}

/*
 * The secrets provider goes on argv (`stack init --secrets-provider`, the
 * one way the CLI takes it) and into Pulumi.<stack>.yaml, so it must carry
 * no credential.  The CLI's providers (awskms, azurekeyvault, gcpkms,
 * hashivault) read theirs from the environment (AWS_*, AZURE_*,
 * GOOGLE_APPLICATION_CREDENTIALS, VAULT_SERVER_TOKEN): the Stack's envRefs.
 * A credential found is still registered (masked) by add_backend_secrets.
 */
static int check_provider(struct pl_stack *st, struct err *e)
{
	char safe[URL_LOG_MAX];

	if (add_backend_secrets(st, st->provider) == 0)
		return 0;
	return err_set(e, ERR_INVALID, "the secrets provider %s carries a credential (userinfo or a query "
	    "parameter such as token=), which would be on the pulumi command line and in Pulumi.%s.yaml; give "
	    "the provider its credential through its environment variables (envRefs) instead",
	    url_for_log(st->provider, safe, sizeof(safe)), st->stack ? st->stack : "<stack>");
}

static int valid_env_name(const char *n)
{
	if (n == NULL || !((*n >= 'A' && *n <= 'Z') || (*n >= 'a' && *n <= 'z') || *n == '_'))
		return 0;
	for (; *n; n++)
		if (!((*n >= 'A' && *n <= 'Z') || (*n >= 'a' && *n <= 'z') || *n == '_' ||
		      (*n >= '0' && *n <= '9')))
			return 0;
	return 1;
}

static int reserved_env_name(const char *n)
{
	static const char *const names[] = {
		"PATH", "HOME", "PULUMI_HOME", "PULUMI_SKIP_UPDATE_CHECK", "PULUMI_AUTOMATION_API",
		"PULUMI_DEBUG_COMMANDS", "PULUMI_EXPERIMENTAL", PROC_MARK_VAR,
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(n, names[i]) == 0)
			return 1;
	return 0;
}

int pl_env_name_ok(const char *name)
{
	return valid_env_name(name) && !reserved_env_name(name);
}

static int valid_stack_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 200)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '-' || *s == '_' || *s == '.' || *s == '/'))
			return 0;
	return 1;
}

static int valid_config_key(const char *k)
{
	if (k == NULL || *k == '\0' || *k == '-')
		return 0;
	for (; *k; k++)
		if ((unsigned char)*k < 0x20 || *k == '=' || *k == 0x7f)
			return 0;
	return 1;
}

static int copy_env(struct pl_stack *st, const struct pl_spec *sp, struct err *e)
{
	st->env = calloc(sp->n_env ? sp->n_env : 1, sizeof(*st->env));
	if (st->env == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < sp->n_env; i++) {
		const struct pl_env_var *v = &sp->env[i];

		if (!valid_env_name(v->name) || v->value == NULL)
			return err_set(e, ERR_INVALID, "stack %s: invalid environment variable name \"%.100s\"",
				       sp->stack, v->name ? v->name : "");
		if (reserved_env_name(v->name))
			return err_set(e, ERR_INVALID, "stack %s: environment variable %s is set by the driver",
				       sp->stack, v->name);
		/* The passphrase and the backend may also come as env values. */
		if (strcmp(v->name, "PULUMI_CONFIG_PASSPHRASE") == 0) {
			if (st->passphrase == NULL)
				st->passphrase = dup_or_null(v->value, &st->oom);
			continue;
		}
		if (strcmp(v->name, "PULUMI_BACKEND_URL") == 0) {
			if (st->backend == NULL)
				st->backend = dup_or_null(v->value, &st->oom);
			if (v->secret)
				pl_secret_add(st, v->value);
			continue;
		}
		st->env[st->n_env].name = dup_or_null(v->name, &st->oom);
		st->env[st->n_env].value = dup_or_null(v->value, &st->oom);
		st->env[st->n_env].secret = v->secret;
		if (v->secret)
			pl_secret_add(st, v->value);
		st->n_env++;
	}
	return 0;
}

static int copy_config(struct pl_stack *st, const struct pl_spec *sp, struct err *e)
{
	st->cfg = calloc(sp->n_config ? sp->n_config : 1, sizeof(*st->cfg));
	if (st->cfg == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < sp->n_config; i++) {
		const struct pl_config_item *c = &sp->config[i];

		if (!valid_config_key(c->key) || c->value == NULL)
			return err_set(e, ERR_INVALID, "stack %s: invalid config key \"%.100s\"", sp->stack,
				       c->key ? c->key : "");
		if (c->structured) {
			cJSON *j = cJSON_Parse(c->value);

			if (j == NULL)
				return err_set(e, ERR_INVALID, "stack %s: config %s: value is not JSON",
					       sp->stack, c->key);
			if (c->secret)
				pl_secret_add_leaves(st, j);
			cJSON_Delete(j);
		} else if (c->secret) {
			pl_secret_add(st, c->value);
		}
		st->cfg[i].key = dup_or_null(c->key, &st->oom);
		st->cfg[i].value = dup_or_null(c->value, &st->oom);
		st->cfg[i].secret = c->secret;
		st->cfg[i].structured = c->structured;
		st->n_cfg++;
	}
	return 0;
}

void pl_close(struct pl_stack *st)
{
	if (st == NULL)
		return;
	free(st->bin);
	free(st->search_path);
	free(st->home);
	free(st->pulumi_home);
	free(st->workdir);
	free(st->scratch);
	free(st->stack);
	free(st->backend);
	free(st->provider);
	secret_free(st->passphrase);
	free(st->min_version);
	for (size_t i = 0; i < st->n_env; i++) {
		free(st->env[i].name);
		secret_free(st->env[i].value);   /* wiped whether secret or not */
	}
	free(st->env);
	for (size_t i = 0; i < st->n_cfg; i++) {
		free(st->cfg[i].key);
		secret_free(st->cfg[i].value);
	}
	free(st->cfg);
	pl_strv_free(&st->environments);
	for (size_t i = 0; i < st->secrets.n; i++)
		secret_free(st->secrets.v[i]);
	free(st->secrets.v);
	free(st);
}

/* Copies sp's env and config into st and records every secret of them,
 * of the passphrase (st->passphrase) and of the backend URL (st->backend). */
static int record_secrets(struct pl_stack *st, const struct pl_spec *sp, struct err *e)
{
	if (copy_env(st, sp, e) < 0 || copy_config(st, sp, e) < 0)
		return -1;
	pl_secret_add(st, st->passphrase);
	add_backend_secrets(st, st->backend);
	return 0;
}

char *pl_spec_redact(const struct pl_spec *sp, const char *s)
{
	struct pl_stack *st = calloc(1, sizeof(*st));
	char *out = NULL;
	struct err e;

	if (st == NULL)
		return NULL;
	st->stack = dup_or_null(sp->stack ? sp->stack : "", &st->oom);
	st->backend = dup_or_null(sp->backend_url, &st->oom);
	st->passphrase = dup_or_null(sp->passphrase, &st->oom);
	if (record_secrets(st, sp, &e) == 0 && !st->oom)
		out = pl_redact(s, (const char *const *)st->secrets.v, st->secrets.n);
	pl_close(st);
	return out;
}

/*
 * The pulumi child's PATH after the CLI's own directory: the caller's, else
 * the controller's own PATH, as the user's image set it.  The CLI and its
 * language hosts run toolchains from PATH (`go`, `python3`, `node`, `npm`),
 * and images put them where they like (Go's and Pulumi's own images put `go`
 * in /usr/local/go/bin), so a fixed list would lose them; a Stack may not set
 * PATH itself (reserved_env_name), the image decides.
 */
static const char *child_search_path(const struct pl_spec *sp)
{
	const char *p = getenv("PATH");

	if (sp->search_path)
		return sp->search_path;
	return p && *p ? p : DEFAULT_PATH;
}

struct pl_stack *pl_open(const struct pl_spec *sp, struct err *e)
{
	struct pl_stack *st;
	int dummy;

	if (sp == NULL || sp->pulumi_home == NULL || sp->workdir == NULL || sp->scratch_dir == NULL ||
	    sp->stack == NULL) {
		err_set(e, ERR_INVALID, "pulumi driver: pulumi_home, workdir, scratch_dir and stack are required");
		return NULL;
	}
	if (!valid_stack_name(sp->stack)) {
		err_set(e, ERR_INVALID, "invalid stack name \"%.100s\"", sp->stack);
		return NULL;
	}
	st = calloc(1, sizeof(*st));
	if (st == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	st->bin = dup_or_null(sp->pulumi_bin ? sp->pulumi_bin : "pulumi", &st->oom);
	st->search_path = dup_or_null(child_search_path(sp), &st->oom);
	st->pulumi_home = dup_or_null(sp->pulumi_home, &st->oom);
	st->home = dup_or_null(sp->home ? sp->home : sp->pulumi_home, &st->oom);
	st->workdir = dup_or_null(sp->workdir, &st->oom);
	st->scratch = dup_or_null(sp->scratch_dir, &st->oom);
	st->stack = dup_or_null(sp->stack, &st->oom);
	st->backend = dup_or_null(sp->backend_url, &st->oom);
	st->provider = dup_or_null(sp->secrets_provider, &st->oom);
	st->passphrase = dup_or_null(sp->passphrase, &st->oom);
	st->min_version = dup_or_null(sp->min_version ? sp->min_version : PL_MIN_VERSION, &st->oom);
	st->timeout_ms = sp->timeout_ms > 0 ? sp->timeout_ms : DEFAULT_TIMEOUT;
	st->grace_ms = sp->grace_ms;
	st->tail_max = sp->tail_max;
	st->skip_version_check = sp->skip_version_check;
	st->no_create = sp->no_create;
	for (size_t i = 0; i < sp->n_environments; i++)
		pl_strv_add(&st->environments, sp->environments[i]);
	if (st->environments.oom)
		st->oom = 1;
	if (record_secrets(st, sp, e) < 0)
		goto fail;
	if (st->oom) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto fail;
	}
	if (check_provider(st, e) < 0)
		goto fail;
	if (pl_parse_version(st->min_version, &dummy, &dummy, &dummy) < 0) {
		err_set(e, ERR_INVALID, "invalid minimum pulumi version \"%.50s\"", st->min_version);
		goto fail;
	}
	if (fs_mkdir_p(st->scratch, 0700, e) < 0) {
		err_prefix(e, "stack %s: scratch directory", st->stack);
		goto fail;
	}
	return st;
fail:
	pl_close(st);
	return NULL;
}
