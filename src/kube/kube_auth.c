/*
 * kube_auth.c - the credentials a request presents (kube_priv.h
 * "kube_creds"), kept current for kube_client.c's kube_transport_init:
 *
 *   - a static token from the config;
 *   - a token file, re-read at most every minute and after any 401 (the
 *     kubelet rotates projected service-account tokens);
 *   - an exec plugin (client.authentication.k8s.io/v1): its token or client
 *     certificate is used until 10 s before its expirationTimestamp, or
 *     until a 401.
 *
 * Every token is checked before it nears a header (kube_token_check), and
 * secrets are wiped when dropped.
 *
 * Locking: one mutex guards the state, held only for short work.  An exec
 * plugin may take up to a minute, so it runs with the mutex released, one
 * run at a time; while it runs, other requests go on with the current
 * credential if it has not expired yet (the refresh starts early for that
 * reason) and wait for the run otherwise.  Requests refused with the same
 * credentials renew them once (generations, kube_transport_renew).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/proc.h"
#include "base/str.h"
#include "kube/kube_priv.h"

extern char **environ;

#define TOKEN_REREAD_MS 60000
#define EXEC_OUTPUT_MAX (1 << 20)
#define EXEC_TIMEOUT_MS 60000
/* Refresh this long before expiry, so a request does not go out with a
 * credential that expires on the way, and others can use it meanwhile. */
#define EXEC_EARLY_US 10000000LL

void kube_creds_init(struct kube_creds *k)
{
	memset(k, 0, sizeof(*k));
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->exec_done, NULL);
}

void kube_creds_free(struct kube_creds *k)
{
	secret_free(k->token);
	free(k->exec_cert);
	secret_free(k->exec_key);
	pthread_cond_destroy(&k->exec_done);
	pthread_mutex_destroy(&k->lock);
}

/* ------------------------------------------------------------ exec plugin */

/* What one plugin run produced; strings owned (token and key secret) until
 * exec_install_locked takes them. */
struct exec_cred {
	char *token, *cert, *key;
	int64_t expiry_us;
	int expires;
};

static char *exec_info_json(const struct kube_config *cfg)
{
	cJSON *o = cJSON_CreateObject(), *spec;
	char *s;

	cJSON_AddStringToObject(o, "apiVersion", cfg->exec->api_version);
	cJSON_AddStringToObject(o, "kind", "ExecCredential");
	spec = cJSON_AddObjectToObject(o, "spec");
	cJSON_AddBoolToObject(spec, "interactive", 0);
	if (cfg->exec->provide_cluster_info) {
		cJSON *cl = cJSON_AddObjectToObject(spec, "cluster");
		cJSON_AddStringToObject(cl, "server", cfg->server);
		cJSON_AddBoolToObject(cl, "insecure-skip-tls-verify", cfg->insecure_skip_tls_verify);
	}
	s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

/* Runs the plugin (base/proc.h: own process group, timeout, bounded
 * output) and returns its stdout (malloc'd, secret).  Like client-go, the
 * plugin sees this process's environment plus its own env entries and
 * KUBERNETES_EXEC_INFO; stdin is /dev/null (never interactive). */
static int exec_run(const struct kube_config *cfg, char **out, struct err *e)
{
	const struct kube_exec *x = cfg->exec;
	struct proc_spec spec;
	struct proc_result r;
	size_t nargs = 0, nenv = 0, k = 0;
	char **argv, **envp, *info;
	struct strbuf s;
	int rc;

	while (x->args && x->args[nargs])
		nargs++;
	for (char **p = environ; p && *p; p++)
		nenv++;
	for (char **p = x->env; p && *p; p++)
		nenv++;
	argv = xcalloc(nargs + 2, sizeof(char *));
	argv[0] = x->command;
	for (size_t i = 0; i < nargs; i++)
		argv[i + 1] = x->args[i];
	envp = xcalloc(nenv + 2, sizeof(char *));
	for (char **p = environ; p && *p; p++)
		if (!str_has_prefix(*p, "KUBERNETES_EXEC_INFO="))
			envp[k++] = *p;
	for (char **p = x->env; p && *p; p++)
		envp[k++] = *p;
	info = exec_info_json(cfg);
	strbuf_init(&s);
	strbuf_printf(&s, "KUBERNETES_EXEC_INFO=%s", info ? info : "");
	free(info);
	info = strbuf_take(&s);
	envp[k++] = info;

	memset(&spec, 0, sizeof(spec));
	spec.file = x->command;
	spec.argv = argv;
	spec.envp = envp;
	spec.tail_max = EXEC_OUTPUT_MAX;
	spec.timeout_ms = EXEC_TIMEOUT_MS;
	spec.grace_ms = 2000;
	rc = proc_run(&spec, &r, e);
	free(argv);
	free(envp);
	free(info);
	if (rc < 0) {
		proc_result_free(&r);
		return err_set(e, ERR_AUTH, "exec plugin %s: cannot start: %s", x->command,
		    strerror(r.spawn_errno ? r.spawn_errno : EIO));
	}
	if (r.timed_out || !r.exited || r.exit_code != 0 || r.out_total > r.out_len) {
		char why[64];
		if (r.timed_out)
			snprintf(why, sizeof(why), "timed out");
		else if (!r.exited)
			snprintf(why, sizeof(why), "signal %d", r.term_signal);
		else if (r.exit_code != 0)
			snprintf(why, sizeof(why), "exit status %d", r.exit_code);
		else
			snprintf(why, sizeof(why), "output too large");
		proc_result_free(&r);
		return err_set(e, ERR_AUTH, "exec plugin %s: failed (%s)", x->command, why);
	}
	*out = r.out;
	r.out = NULL;
	proc_result_free(&r);
	return 0;
}

static void json_wipe_strings(cJSON *node)
{
	for (; node != NULL; node = node->next) {
		if (cJSON_IsString(node) && node->valuestring != NULL)
			secret_wipe(node->valuestring, strlen(node->valuestring));
		json_wipe_strings(node->child);
	}
}

/* Wipes every string of a parsed document before freeing it: an
 * ExecCredential holds a token or a private key. */
static void json_delete_secret(cJSON *doc)
{
	json_wipe_strings(doc);
	cJSON_Delete(doc);
}

/* Checks an ExecCredential and copies its credentials into out. */
static int exec_parse(const struct kube_config *cfg, const cJSON *doc, struct exec_cred *out,
    struct err *e)
{
	const char *cmd = cfg->exec->command, *api = kube_obj_str(doc, "apiVersion");
	const char *kind = kube_obj_str(doc, "kind"), *tok, *cert, *key, *exp;
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(doc, "status");

	memset(out, 0, sizeof(*out));
	if (!cJSON_IsObject(status) || kind == NULL || strcmp(kind, "ExecCredential") != 0)
		return err_set(e, ERR_AUTH, "exec plugin %s: output is not an ExecCredential with a status",
		    cmd);
	/* client-go's rule: the plugin answers in the version it was asked for */
	if (api == NULL || strcmp(api, cfg->exec->api_version) != 0)
		return err_set(e, ERR_AUTH,
		    "exec plugin %s: is configured to use API version %s, and its ExecCredential has another",
		    cmd, cfg->exec->api_version);
	tok = kube_obj_str(status, "token");
	cert = kube_obj_str(status, "clientCertificateData");
	key = kube_obj_str(status, "clientKeyData");
	exp = kube_obj_str(status, "expirationTimestamp");
	if (tok != NULL && *tok == '\0')
		tok = NULL;
	if (tok == NULL && (cert == NULL || key == NULL))
		return err_set(e, ERR_AUTH,
		    "exec plugin %s: ExecCredential has neither a token nor a client certificate", cmd);
	/* client-go fails to decode a credential whose expiry is not a
	 * time; taking it for "never expires" would use it forever. */
	if (exp != NULL && kube_parse_time_us(exp, &out->expiry_us) < 0)
		return err_set(e, ERR_AUTH,
		    "exec plugin %s: status.expirationTimestamp is not an RFC 3339 time", cmd);
	if (tok != NULL) {
		char where[300];
		snprintf(where, sizeof(where), "exec plugin %s: status.token", cmd);
		if (kube_token_check(tok, where, e) < 0) {
			e->code = ERR_AUTH;
			return -1;
		}
	}
	out->expires = exp != NULL;
	out->token = tok ? xstrdup(tok) : NULL;
	if (cert != NULL && key != NULL) {
		out->cert = xstrdup(cert);
		out->key = xstrdup(key);
	}
	return 0;
}

/* One plugin run; touches nothing shared, so it runs unlocked. */
static int exec_fetch(const struct kube_config *cfg, struct exec_cred *out, struct err *e)
{
	char *text = NULL;
	cJSON *doc;
	int rc;

	if (exec_run(cfg, &text, e) < 0)
		return -1;
	doc = cJSON_Parse(text);
	secret_free(text);
	rc = exec_parse(cfg, doc, out, e);
	json_delete_secret(doc);
	return rc;
}

/* Takes over x's strings. */
static void exec_install_locked(struct kube_creds *k, struct exec_cred *x)
{
	secret_free(k->token);
	free(k->exec_cert);
	secret_free(k->exec_key);
	k->token = x->token;
	k->exec_cert = x->cert;
	k->exec_key = x->key;
	k->expiry_us = x->expiry_us;
	k->expires = x->expires;
	k->gen++;
	memset(x, 0, sizeof(*x));
}

/* Makes the exec credential current; k->lock held (released while the
 * plugin runs). */
static int exec_current_locked(struct kube_creds *k, const struct kube_config *cfg, int force,
    struct err *e)
{
	struct exec_cred x;
	int rc;

	for (;;) {
		int64_t now = kube_now_us();
		int have = k->token != NULL || k->exec_cert != NULL;
		int soon = k->expires && now + EXEC_EARLY_US >= k->expiry_us;
		int gone = k->expires && now >= k->expiry_us;

		if (have && !force && !soon)
			return 0;
		if (k->exec_running) {
			/* someone is fetching: use what is still valid, else wait */
			if (have && !force && !gone)
				return 0;
			pthread_cond_wait(&k->exec_done, &k->lock);
			/* a forced refresh is what that run was */
			force = 0;
			continue;
		}
		k->exec_running = 1;
		pthread_mutex_unlock(&k->lock);
		rc = exec_fetch(cfg, &x, e);
		pthread_mutex_lock(&k->lock);
		k->exec_running = 0;
		if (rc == 0)
			exec_install_locked(k, &x);
		pthread_cond_broadcast(&k->exec_done);
		return rc;
	}
}

/* ------------------------------------------------------------ token files */

static int token_file_current_locked(struct kube_creds *k, const struct kube_config *cfg,
    int force, struct err *e)
{
	int64_t now = clock_mono_ms();
	char *tok;

	if (!force && k->token != NULL && now - k->token_read_ms < TOKEN_REREAD_MS)
		return 0;
	if (kube_read_token_file(cfg->token_file, &tok, e) < 0) {
		/* Keep using the old token when a rotation is mid-way (the file
		 * missing for a moment); never when the new one is refused
		 * outright. */
		if (k->token != NULL && e->code != ERR_AUTH && e->code != ERR_LIMIT)
			return 0;
		if (e->code != ERR_AUTH)
			err_prefix(e, "token file");
		return -1;
	}
	if (k->token == NULL || strcmp(k->token, tok) != 0)
		k->gen++;
	secret_free(k->token);
	k->token = tok;
	k->token_read_ms = now;
	return 0;
}

/* ------------------------------------------------------------ entry */

/*
 * Makes k current for cfg; k->lock held.  force asks for fresh credentials
 * because the server refused some; refused_gen, when not 0, is the
 * generation it refused: when the credentials have changed since (another
 * request got its 401 first and refreshed), those are used as they are.
 */
static int refresh_locked(struct kube_creds *k, const struct kube_config *cfg, int force,
    unsigned long refused_gen, struct err *e)
{
	if (force && refused_gen != 0 && refused_gen != k->gen)
		force = 0;
	if (cfg->token != NULL) {
		/* checked by kube_config_validate in kube_client_new */
		if (k->token == NULL) {
			k->token = xstrdup(cfg->token);
			k->gen++;
		}
		return 0;
	}
	if (cfg->token_file != NULL)
		return token_file_current_locked(k, cfg, force, e);
	if (cfg->exec != NULL)
		return exec_current_locked(k, cfg, force, e);
	return 0;
}

int kube_creds_get(struct kube_creds *k, const struct kube_config *cfg, int force,
    unsigned long refused_gen, struct kube_transport *t, struct err *e)
{
	pthread_mutex_lock(&k->lock);
	if (refresh_locked(k, cfg, force, refused_gen, e) < 0) {
		pthread_mutex_unlock(&k->lock);
		return -1;
	}
	t->cred_gen = k->gen;
	if (k->token != NULL) {
		struct strbuf s;
		strbuf_init(&s);
		strbuf_printf(&s, "Authorization: Bearer %s", k->token);
		t->auth_header = strbuf_take(&s);
	}
	if (k->exec_cert != NULL && k->exec_key != NULL) {
		t->cert_pem = xstrdup(k->exec_cert);
		t->key_pem = xstrdup(k->exec_key);
	}
	pthread_mutex_unlock(&k->lock);
	return 0;
}
