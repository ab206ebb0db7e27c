/*
 * stack_runner.c - one update inside a Job's pod: what `pulumi-controller
 * run-update` (src/cmd_run_update.c) does once its flags are read.
 *
 *     input      PULUMI_CONTROLLER_UPDATE, the JSON the controller put into
 *                the pod's environment (stack_run_input_parse)
 *     artifact   the Flux tarball by URL and digest, or the OCI manifest by
 *                its digest, into a store under --work-dir (fluxsource/, oci/)
 *     workspace  the same copy the local runner makes (stack_workspace.c)
 *     driver     the same pulumi sequence as local mode (stack_update.c)
 *     result     the outputs Secret (stack_outputs_write) and the
 *                termination message (stack_run_termination)
 *
 * The local runner's code works on a struct stack_pass of a struct
 * stack_ctl; this file builds a small one of each for the one Stack the
 * pod runs, so that the pod and the controller run the very same code.
 * There is no Stack object in the pod: the pass has no status (so the
 * stack is selected, else created, as on a Stack's first update) and no
 * event recorder (its one event, a stale lock cancelled, is logged only).
 */
#include <ctype.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/secret.h"
#include "fluxsource/fluxsource.h"
#include "oci/oci.h"
#include "stack/stack_internal.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

/* ------------------------------------------------------------ input */

#define INPUT "PULUMI_CONTROLLER_UPDATE"

static void strings_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static void pairs_free(struct stack_run_pair *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		free(v[i].key);
		free(v[i].value);
	}
	free(v);
}

void stack_run_input_free(struct stack_run_input *in)
{
	if (in == NULL)
		return;
	free(in->operation);
	free(in->namespace);
	free(in->name);
	free(in->stack);
	free(in->fingerprint);
	free(in->url);
	free(in->digest);
	free(in->revision);
	free(in->manifest_digest);
	free(in->layer_digest);
	free(in->media_type);
	free(in->dir);
	free(in->backend);
	free(in->secrets_provider);
	pairs_free(in->config, in->n_config);
	pairs_free(in->secret_config, in->n_secret_config);
	pairs_free(in->config_from_env, in->n_config_from_env);
	strings_free(in->structured, in->n_structured);
	strings_free(in->env, in->n_env);
	strings_free(in->targets, in->n_targets);
	strings_free(in->policy_packs, in->n_policy_packs);
	free(in->outputs_secret);
	free(in);
}

static char *dup_or_die(const char *s)
{
	char *d = strdup(s);

	if (d == NULL)
		abort();   /* a pod out of memory at start: nothing sensible is left to do */
	return d;
}

/* obj.field as an owned string into *out: required (NULL or missing is an
 * error) or optional (left NULL).  Empty strings count as missing. */
static int get_str(const cJSON *obj, const char *path, const char *field, int required, char **out,
    struct err *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);

	if (v == NULL || cJSON_IsNull(v)) {
		if (required)
			return err_set(e, ERR_INVALID, INPUT ": %s is required", path), -1;
		return 0;
	}
	if (!cJSON_IsString(v))
		return err_set(e, ERR_INVALID, INPUT ": %s must be a string", path), -1;
	if (v->valuestring[0] == '\0') {
		if (required)
			return err_set(e, ERR_INVALID, INPUT ": %s must not be empty", path), -1;
		return 0;
	}
	*out = dup_or_die(v->valuestring);
	return 0;
}

static int get_bool(const cJSON *obj, const char *path, const char *field, int *out, struct err *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsBool(v))
		return err_set(e, ERR_INVALID, INPUT ": %s must be true or false", path), -1;
	*out = cJSON_IsTrue(v);
	return 0;
}

static int get_strings(const cJSON *obj, const char *field, char ***out, size_t *n, struct err *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field), *it;
	int i = 0;

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsArray(v))
		return err_set(e, ERR_INVALID, INPUT ": %s must be an array of strings", field), -1;
	*out = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof(char *));
	if (*out == NULL)
		abort();
	cJSON_ArrayForEach(it, v) {
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
			return err_set(e, ERR_INVALID, INPUT ": %s[%d] must be a non-empty string", field, i), -1;
		(*out)[(*n)++] = dup_or_die(it->valuestring);
		i++;
	}
	return 0;
}

static int get_pairs(const cJSON *obj, const char *field, struct stack_run_pair **out, size_t *n,
    struct err *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field), *it;

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsObject(v))
		return err_set(e, ERR_INVALID, INPUT ": %s must be an object of strings", field), -1;
	*out = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof(**out));
	if (*out == NULL)
		abort();
	cJSON_ArrayForEach(it, v) {
		/* The key only: a value may be a plaintext config value, and even
		 * those stay out of the pod's messages. */
		if (it->string[0] == '\0')
			return err_set(e, ERR_INVALID, INPUT ": %s has an empty key", field), -1;
		if (!cJSON_IsString(it))
			return err_set(e, ERR_INVALID, INPUT ": %s.%s must be a string", field, it->string), -1;
		(*out)[*n].key = dup_or_die(it->string);
		(*out)[(*n)++].value = dup_or_die(it->valuestring);
	}
	return 0;
}

/* A C-identifier-like environment variable name, as the kubelet accepts. */
static int env_name_ok(const char *s)
{
	if (!(isalpha((unsigned char)*s) || *s == '_'))
		return 0;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '-' || *s == '.'))
			return 0;
	return 1;
}

/* A namespace or object name (DNS subdomain): it becomes a path. */
static int object_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 253 || s[0] == '.' || s[0] == '-')
		return 0;
	for (; *s; s++)
		if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-' || *s == '.'))
			return 0;
	return 1;
}

/* "sha256:<64 hex>" (sha384/sha512 too when any is allowed). */
static int digest_ok(const char *d, int sha256_only)
{
	static const struct { const char *algo; size_t hex; } algos[] = {
		{ "sha256:", 64 }, { "sha384:", 96 }, { "sha512:", 128 },
	};

	for (size_t i = 0; i < (sha256_only ? 1 : 3); i++) {
		size_t n = strlen(algos[i].algo);
		if (strncmp(d, algos[i].algo, n) != 0)
			continue;
		if (strlen(d + n) != algos[i].hex)
			return 0;
		for (const char *h = d + n; *h; h++)
			if (!isxdigit((unsigned char)*h) || isupper((unsigned char)*h))
				return 0;
		return 1;
	}
	return 0;
}

/* A path inside the artifact: relative, no "..", no empty component. */
static int inner_path_ok(const char *p)
{
	const char *c = p;

	if (*p == '/' || *p == '\0')
		return 0;
	while (*c) {
		size_t n = strcspn(c, "/");
		if (n == 0 || (n == 2 && strncmp(c, "..", 2) == 0))
			return 0;
		c += n;
		if (*c == '/')
			c++;
	}
	return 1;
}

static int parse_source(const cJSON *root, struct stack_run_input *in, struct err *e)
{
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
	char *kind = NULL;
	int rc;

	if (!cJSON_IsObject(src))
		return err_set(e, ERR_INVALID, INPUT ": source must be an object"), -1;
	if (get_str(src, "source.kind", "kind", 1, &kind, e) < 0)
		return -1;
	in->oci = strcmp(kind, "oci") == 0;
	rc = in->oci || strcmp(kind, "artifact") == 0 ? 0 :
	    err_set(e, ERR_INVALID, INPUT ": source.kind must be \"artifact\" or \"oci\"");
	free(kind);
	if (rc < 0 || get_str(src, "source.url", "url", 1, &in->url, e) < 0 ||
	    get_str(src, "source.revision", "revision", 0, &in->revision, e) < 0)
		return -1;
	if (!in->oci) {
		if (strncmp(in->url, "http://", 7) != 0 && strncmp(in->url, "https://", 8) != 0)
			return err_set(e, ERR_INVALID, INPUT ": source.url must be an http(s) URL"), -1;
		if (get_str(src, "source.digest", "digest", 1, &in->digest, e) < 0)
			return -1;
		if (!digest_ok(in->digest, 0))
			return err_set(e, ERR_INVALID, INPUT ": source.digest must be sha256:, sha384: or "
			    "sha512: and the hex digest"), -1;
		return 0;
	}
	if (strncmp(in->url, "oci://", 6) != 0 || strchr(in->url, '@') != NULL)
		return err_set(e, ERR_INVALID, INPUT ": source.url must be oci://host/repository without "
		    "a digest"), -1;
	if (get_str(src, "source.manifestDigest", "manifestDigest", 1, &in->manifest_digest, e) < 0 ||
	    get_str(src, "source.layerDigest", "layerDigest", 0, &in->layer_digest, e) < 0 ||
	    get_str(src, "source.mediaType", "mediaType", 0, &in->media_type, e) < 0 ||
	    get_bool(src, "source.insecure", "insecure", &in->insecure, e) < 0 ||
	    get_bool(src, "source.verify", "verify", &in->verify, e) < 0)
		return -1;
	if (!digest_ok(in->manifest_digest, 1))
		return err_set(e, ERR_INVALID, INPUT ": source.manifestDigest must be sha256:<64 hex>"), -1;
	if (in->layer_digest && !digest_ok(in->layer_digest, 0))
		return err_set(e, ERR_INVALID, INPUT ": source.layerDigest must be sha256:<hex>"), -1;
	return 0;
}

static int check_names(const struct stack_run_input *in, struct err *e)
{
	static const char *ops[] = { "up", "preview", "destroy", "refresh" };
	int op_ok = 0;

	for (size_t i = 0; i < 4; i++)
		op_ok |= strcmp(in->operation, ops[i]) == 0;
	if (!op_ok)
		return err_set(e, ERR_INVALID, INPUT ": operation must be up, preview, destroy or refresh"), -1;
	if (!object_name_ok(in->namespace))
		return err_set(e, ERR_INVALID, INPUT ": namespace is not a valid namespace name"), -1;
	if (!object_name_ok(in->name))
		return err_set(e, ERR_INVALID, INPUT ": name is not a valid object name"), -1;
	if (in->fingerprint)
		for (const char *h = in->fingerprint; *h; h++)
			if (!isxdigit((unsigned char)*h))
				return err_set(e, ERR_INVALID, INPUT ": fingerprint must be hex"), -1;
	if (in->dir && !inner_path_ok(in->dir))
		return err_set(e, ERR_INVALID, INPUT ": dir must be a relative path inside the artifact"), -1;
	for (size_t i = 0; i < in->n_policy_packs; i++)
		if (!inner_path_ok(in->policy_packs[i]))
			return err_set(e, ERR_INVALID, INPUT ": policyPacks[%zu] must be a relative path inside "
			    "the artifact", i), -1;
	return 0;
}

/* The env names of secretConfig, configFromEnv and env. */
static int check_env_names(const struct stack_run_input *in, struct err *e)
{
	for (size_t i = 0; i < in->n_secret_config; i++)
		if (!env_name_ok(in->secret_config[i].value))
			return err_set(e, ERR_INVALID, INPUT ": secretConfig.%s must name an environment "
			    "variable", in->secret_config[i].key), -1;
	for (size_t i = 0; i < in->n_config_from_env; i++)
		if (!env_name_ok(in->config_from_env[i].value))
			return err_set(e, ERR_INVALID, INPUT ": configFromEnv.%s must name an environment "
			    "variable", in->config_from_env[i].key), -1;
	for (size_t i = 0; i < in->n_env; i++)
		if (!env_name_ok(in->env[i]))
			return err_set(e, ERR_INVALID, INPUT ": env[%zu] is not an environment variable name",
			    i), -1;
	return 0;
}

/* The local runner writes the Secret "<name>-outputs" (stack_outputs_write),
 * and the pod writes it through the same code. */
static int check_outputs_secret(const struct stack_run_input *in, struct err *e)
{
	char want[300];

	if (in->outputs_secret == NULL)
		return 0;
	snprintf(want, sizeof(want), "%s-outputs", in->name);
	if (strcmp(in->outputs_secret, want) != 0)
		return err_set(e, ERR_INVALID, INPUT ": outputsSecret must be \"%s\" (the Stack's outputs "
		    "Secret)", want), -1;
	return 0;
}

static int parse_fields(const cJSON *root, struct stack_run_input *in, struct err *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "v"), *t;

	if (!cJSON_IsNumber(v) || v->valuedouble != 1)
		return err_set(e, ERR_INVALID, INPUT ": v must be 1 (this build reads version 1 only)"), -1;
	if (get_str(root, "operation", "operation", 1, &in->operation, e) < 0 ||
	    get_str(root, "namespace", "namespace", 1, &in->namespace, e) < 0 ||
	    get_str(root, "name", "name", 1, &in->name, e) < 0 ||
	    get_str(root, "stack", "stack", 1, &in->stack, e) < 0 ||
	    get_str(root, "fingerprint", "fingerprint", 0, &in->fingerprint, e) < 0 ||
	    parse_source(root, in, e) < 0 ||
	    get_str(root, "dir", "dir", 0, &in->dir, e) < 0 ||
	    get_str(root, "backend", "backend", 0, &in->backend, e) < 0 ||
	    get_str(root, "secretsProvider", "secretsProvider", 0, &in->secrets_provider, e) < 0 ||
	    get_pairs(root, "config", &in->config, &in->n_config, e) < 0 ||
	    get_strings(root, "structuredConfig", &in->structured, &in->n_structured, e) < 0 ||
	    get_pairs(root, "secretConfig", &in->secret_config, &in->n_secret_config, e) < 0 ||
	    get_pairs(root, "configFromEnv", &in->config_from_env, &in->n_config_from_env, e) < 0 ||
	    get_strings(root, "env", &in->env, &in->n_env, e) < 0 ||
	    get_bool(root, "refresh", "refresh", &in->refresh, e) < 0 ||
	    get_strings(root, "targets", &in->targets, &in->n_targets, e) < 0 ||
	    get_strings(root, "policyPacks", &in->policy_packs, &in->n_policy_packs, e) < 0 ||
	    get_str(root, "outputsSecret", "outputsSecret", 0, &in->outputs_secret, e) < 0)
		return -1;
	t = cJSON_GetObjectItemCaseSensitive(root, "timeoutSeconds");
	if (t != NULL && !cJSON_IsNull(t)) {
		if (!cJSON_IsNumber(t) || t->valuedouble < 1 || t->valuedouble > 7 * 86400.0)
			return err_set(e, ERR_INVALID, INPUT ": timeoutSeconds must be a number of seconds "
			    "from 1 to 604800"), -1;
		in->timeout_seconds = (long)t->valuedouble;
	}
	return check_names(in, e) < 0 || check_env_names(in, e) < 0 || check_outputs_secret(in, e) < 0 ?
	    -1 : 0;
}

struct stack_run_input *stack_run_input_parse(const char *json, struct err *e)
{
	struct stack_run_input *in;
	cJSON *root;

	if (json == NULL || *json == '\0')
		return err_set(e, ERR_INVALID, INPUT " is not set (the Job's pod sets it)"), NULL;
	if ((root = cJSON_Parse(json)) == NULL || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return err_set(e, ERR_INVALID, INPUT " is not a JSON object"), NULL;
	}
	if ((in = calloc(1, sizeof(*in))) == NULL)
		abort();
	in->timeout_seconds = 3600;
	if (parse_fields(root, in, e) < 0) {
		stack_run_input_free(in);
		in = NULL;
	}
	cJSON_Delete(root);
	return in;
}

/* ------------------------------------------------------------ result */

const char *stack_run_class_name(enum stack_run_class c)
{
	static const char *names[] = { "ok", "conflict", "timeout", "policy", "cli", "source", "internal",
	    "failed" };

	return (size_t)c < sizeof(names) / sizeof(names[0]) ? names[c] : "failed";
}

static enum stack_run_class class_of(enum pl_status s)
{
	switch (s) {
	case PL_OK: return STACK_RUN_OK;
	case PL_CONFLICT: return STACK_RUN_CONFLICT;
	case PL_TIMEOUT: return STACK_RUN_TIMEOUT;
	case PL_POLICY_VIOLATION: return STACK_RUN_POLICY;
	case PL_CLI_MISSING: case PL_CLI_TOO_OLD: return STACK_RUN_CLI;
	case PL_INTERNAL: return STACK_RUN_INTERNAL;
	default: return STACK_RUN_FAILED;
	}
}

void stack_run_result_free(struct stack_run_result *r)
{
	cJSON_Delete(r->changes);
	r->changes = NULL;
}

/* A failure before the CLI ran: class cls, status PL_FAILED (PL_INTERNAL
 * for internal ones). */
static void result_fail(struct stack_run_result *r, enum stack_run_class cls, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void result_fail(struct stack_run_result *r, enum stack_run_class cls, const char *fmt, ...)
{
	va_list ap;

	r->cls = cls;
	r->status = cls == STACK_RUN_INTERNAL ? PL_INTERNAL : PL_FAILED;
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof(r->message), fmt, ap);
	va_end(ap);
}

void stack_run_result_usage(struct stack_run_result *r, const struct err *e)
{
	memset(r, 0, sizeof(*r));
	r->usage = 1;
	result_fail(r, STACK_RUN_INTERNAL, "%s", e->msg);
}

int stack_run_exit_code(const struct stack_run_result *r)
{
	return r->usage ? 2 : r->status == PL_OK ? 0 : 1;
}

/* ------------------------------------------------------------ the pass */

/* The controller and the pass the local runner's code works on. */
struct runner {
	struct stack_ctl sc;
	struct stack_pass p;
	const struct stack_run_input *in;
	const struct stack_run_opts *o;
	struct stack_run_result *r;
	pthread_t watcher;
	int watching;
	volatile int done;
};

/* Turns SIGTERM (the Job's deadline, a deleted pod) into the controller's
 * interrupt: the CLI gets SIGINT and releases its lock. */
static void *watch_cancel(void *arg)
{
	struct runner *u = arg;
	const struct timespec tick = { 0, 100 * 1000 * 1000 };

	while (!u->done) {
		if (*u->o->cancel) {
			stack_ctl_interrupt(&u->sc);
			return NULL;
		}
		nanosleep(&tick, NULL);
	}
	return NULL;
}

static char **strings_dup(char *const *v, size_t n)
{
	char **d = calloc(n + 1, sizeof(char *));

	if (d == NULL)
		abort();
	for (size_t i = 0; i < n; i++)
		d[i] = dup_or_die(v[i]);
	return d;
}

static void runner_init(struct runner *u)
{
	const struct stack_run_input *in = u->in;
	struct stack_spec *s = &u->p.spec;
	long t = in->timeout_seconds;

	stack_opts_default(&u->sc.o);
	u->sc.o.storage_path = u->o->work_dir;
	u->sc.o.pulumi_bin = u->o->pulumi_bin;
	snprintf(u->sc.pulumi_home, sizeof(u->sc.pulumi_home), "%s/pulumi-home", u->o->work_dir);
	if (u->o->identity)
		snprintf(u->sc.identity, sizeof(u->sc.identity), "%s", u->o->identity);
	else if (gethostname(u->sc.identity, sizeof(u->sc.identity) - 1) != 0)
		snprintf(u->sc.identity, sizeof(u->sc.identity), "run-update");
	pthread_mutex_init(&u->sc.lock, NULL);

	u->p.sc = &u->sc;
	snprintf(u->p.ns, sizeof(u->p.ns), "%s", in->namespace);
	snprintf(u->p.name, sizeof(u->p.name), "%s", in->name);
	/* No kind: the stale-lock event is refused (logged) rather than sent
	 * to a recorder the pod has not got. */
	u->p.obj = cJSON_CreateObject();
	s->stack = dup_or_die(in->stack);
	s->source = in->oci ? STACK_SRC_OCI : STACK_SRC_FLUX;
	s->dir = in->dir ? dup_or_die(in->dir) : NULL;
	s->backend = in->backend ? dup_or_die(in->backend) : NULL;
	s->secrets_provider = in->secrets_provider ? dup_or_die(in->secrets_provider) : NULL;
	s->refresh = in->refresh;
	s->preview = strcmp(in->operation, "preview") == 0;
	s->targets = strings_dup(in->targets, in->n_targets);
	s->n_targets = in->n_targets;
	s->policy_packs = strings_dup(in->policy_packs, in->n_policy_packs);
	s->n_policy_packs = in->n_policy_packs;
	/* The driver's own limit falls a little before the Job's deadline, so
	 * that a slow update ends as a timeout the CLI was told about. */
	s->timeout_ms = (t > 60 ? t - (t / 10 < 30 ? t / 10 : 30) : t) * 1000L;
}

static void runner_free(struct runner *u)
{
	if (u->watching) {
		u->done = 1;
		pthread_join(u->watcher, NULL);
	}
	stack_inputs_free(&u->p.in);
	stack_spec_free(&u->p.spec);
	stack_artifact_free(&u->p.art);
	cJSON_Delete(u->p.obj);
	cJSON_Delete(u->p.out.changes);
	cJSON_Delete(u->p.out.outputs);
	cJSON_Delete(u->p.out.outputs_plain);
	stack_safety_free(&u->p.safety);
	pthread_mutex_destroy(&u->sc.lock);
}

/* ------------------------------------------------------------ artifact */

static int fetch_flux_artifact(struct runner *u)
{
	struct flux_fetch_opts fo;
	struct flux_artifact a = { u->in->url, u->in->digest, u->in->revision };
	struct err e;
	int cached = 0;

	flux_fetch_opts_default(&fo);
	fo.cancel = &u->sc.cancel;
	if (flux_store_get(u->o->work_dir, &a, &fo, u->p.tree, sizeof(u->p.tree), &cached, &e) < 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "artifact: %s", e.msg);
		return -1;
	}
	u->p.art.revision = dup_or_die(u->in->revision ? u->in->revision : u->in->digest);
	u->p.art.digest = dup_or_die(u->in->digest);
	u->p.art.url = dup_or_die(u->in->url);
	return 0;
}

/* dir/name into a malloc'd buffer when the file exists (caller frees). */
static char *file_in(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct err e;

	if (dir == NULL || fs_join(path, sizeof(path), dir, name, &e) < 0 || !fs_exists(path))
		return NULL;
	return dup_or_die(path);
}

/* Registry credentials and CA from the mounted Secrets, then the client. */
static struct oci_client *registry_client(struct runner *u, const struct oci_ref *ref, struct err *e)
{
	struct oci_client_opts co;
	struct oci_creds creds;
	struct oci_client *c;
	char *cfg_path = file_in(u->o->oci_secret_dir, ".dockerconfigjson");
	char *ca = file_in(u->o->oci_secret_dir, "ca.crt");

	memset(&co, 0, sizeof(co));
	memset(&creds, 0, sizeof(creds));
	co.plain_http = u->in->insecure;
	co.retries = -1;
	co.cancel = &u->sc.cancel;
	co.ca_file = ca;
	if (cfg_path) {
		char *cfg = NULL, *helper = NULL;
		size_t len = 0;
		int rc = fs_read_file(cfg_path, 1 << 20, &cfg, &len, e);
		if (rc == 0)
			rc = oci_docker_config_parse(cfg, len, ref->registry, &creds, &helper, e);
		if (cfg)
			secret_wipe(cfg, len);
		free(cfg);
		if (rc == 0 && helper)
			rc = err_set(e, ERR_UNSUPPORTED, "%s: credential helpers are not supported in a "
			    "pod; put the credentials in the Secret", cfg_path);
		free(helper);
		free(cfg_path);
		if (rc < 0) {
			oci_creds_free(&creds);
			free(ca);
			return NULL;
		}
		co.creds = creds;
	}
	c = oci_client_new(ref->registry, &co, e);
	oci_creds_free(&creds);
	free(ca);
	return c;
}

/*
 * Signature verification is issue 15's oci_verify (SIGN.md), not in this
 * build yet: a Stack that asks for it must not run unverified.
 * TODO(lead): call oci_verify with a keyring of --verify-keys-dir here.
 */
static int verify_signature(struct runner *u, struct oci_client *c, const struct oci_ref *ref,
    const char *manifest_digest, struct err *e)
{
	(void)c; (void)ref; (void)manifest_digest;
	if (!u->in->verify)
		return 0;
	return err_set(e, ERR_UNSUPPORTED, "verify requested but this build cannot verify signatures; "
	    "nothing was run"), -1;
}

static int fetch_oci_artifact(struct runner *u)
{
	struct oci_ref ref;
	struct oci_pull_opts po;
	struct oci_pull_result res;
	struct oci_client *c = NULL;
	struct err e;
	char text[2048];
	const char *colon;
	int rc = -1;

	memset(&ref, 0, sizeof(ref));
	memset(&res, 0, sizeof(res));
	oci_pull_opts_default(&po);
	po.media_type = u->in->media_type;
	/* The manifest by its digest: what the controller resolved (and, with
	 * verify, what was signed) is exactly what is pulled. */
	snprintf(text, sizeof(text), "%s@%s", u->in->url, u->in->manifest_digest);
	if (oci_ref_parse(text, &ref, &e) < 0 || (c = registry_client(u, &ref, &e)) == NULL ||
	    oci_resolve(c, &ref, &po, &res, &e) < 0 ||
	    verify_signature(u, c, &ref, res.manifest_digest, &e) < 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s: %s", u->in->url, e.msg);
		goto out;
	}
	if (u->in->layer_digest && strcmp(u->in->layer_digest, res.layer_digest) != 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s@%s: the manifest's layer is %s, not %s as resolved by "
		    "the controller; nothing was run", u->in->url, u->in->manifest_digest, res.layer_digest,
		    u->in->layer_digest);
		goto out;
	}
	colon = strchr(res.layer_digest, ':');
	snprintf(u->p.tree, sizeof(u->p.tree), "%s/artifacts/%.*s/%s", u->o->work_dir,
	    (int)(colon - res.layer_digest), res.layer_digest, colon + 1);
	if (!fs_is_dir(u->p.tree) && oci_fetch_layer(c, ref.repository, &res, &po, u->p.tree, 1, &e) < 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s: %s", u->in->url, e.msg);
		goto out;
	}
	u->p.art.revision = dup_or_die(u->in->revision ? u->in->revision : res.revision);
	u->p.art.digest = dup_or_die(res.layer_digest);   /* the tree's key, as stack_source.c */
	rc = 0;
out:
	oci_client_free(c);
	oci_ref_free(&ref);
	oci_pull_result_free(&res);
	return rc;
}

static int prepare_workspace(struct runner *u)
{
	struct err e;
	char artifacts[PATH_MAX + 16];

	snprintf(artifacts, sizeof(artifacts), "%s/artifacts", u->o->work_dir);
	if (fs_mkdir_p(artifacts, 0700, &e) < 0 || fs_mkdir_p(u->sc.pulumi_home, 0700, &e) < 0) {
		result_fail(u->r, STACK_RUN_INTERNAL, "--work-dir: %s", e.msg);
		return -1;
	}
	if ((u->in->oci ? fetch_oci_artifact(u) : fetch_flux_artifact(u)) < 0)
		return -1;
	log_info("artifact ready", "revision", u->p.art.revision, NULL);
	if (stack_workspace_prepare(&u->p) != 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s", u->p.v.message);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ inputs */

static int is_structured(const struct stack_run_input *in, const char *key)
{
	for (size_t i = 0; i < in->n_structured; i++)
		if (strcmp(in->structured[i], key) == 0)
			return 1;
	return 0;
}

static void add_config(struct runner *u, const char *key, const char *value, int secret)
{
	struct pl_config_item *c = &u->p.in.config[u->p.in.n_config++];

	c->key = key;   /* borrowed from the input, as stack_inputs.c borrows from the spec */
	c->value = dup_or_die(value);
	c->secret = secret;
	c->structured = is_structured(u->in, key);
}

/* The config and environment the driver gets: plaintext from the JSON,
 * the rest from the pod's environment under the names the JSON gives. */
static int resolve_inputs(struct runner *u)
{
	const struct stack_run_input *in = u->in;
	size_t n = in->n_config + in->n_secret_config + in->n_config_from_env;

	if ((u->p.in.config = calloc(n + 1, sizeof(*u->p.in.config))) == NULL ||
	    (u->p.in.env = calloc(in->n_env + 1, sizeof(*u->p.in.env))) == NULL)
		abort();
	for (size_t i = 0; i < in->n_config; i++)
		add_config(u, in->config[i].key, in->config[i].value, 0);
	for (size_t i = 0; i < in->n_secret_config + in->n_config_from_env; i++) {
		int secret = i < in->n_secret_config;
		const struct stack_run_pair *ref = secret ? &in->secret_config[i] :
		    &in->config_from_env[i - in->n_secret_config];
		const char *v = getenv(ref->value);
		if (v == NULL) {
			result_fail(u->r, STACK_RUN_INTERNAL, "%s.%s: the environment variable %s is not set",
			    secret ? "secretConfig" : "configFromEnv", ref->key, ref->value);
			return -1;
		}
		add_config(u, ref->key, v, secret);
	}
	for (size_t i = 0; i < in->n_env; i++) {
		const char *v = getenv(in->env[i]);
		if (v == NULL) {
			/* An optional reference the kubelet left out. */
			log_warn("an environment variable of \"env\" is not set; pulumi runs without it",
			    "variable", in->env[i], NULL);
			continue;
		}
		/* Which of them came from a Secret the pod cannot tell: all are
		 * masked in what the driver returns. */
		u->p.in.env[u->p.in.n_env].name = in->env[i];
		u->p.in.env[u->p.in.n_env].value = dup_or_die(v);
		u->p.in.env[u->p.in.n_env++].secret = 1;
	}
	return 0;
}

/* ------------------------------------------------------------ outputs */

/* The outputs Secret the controller created for this Stack: its owner
 * reference to the Stack stands in for the Stack object the pod has not
 * got (stack_outputs_write writes it back as it was). */
static int adopt_owner(struct runner *u, struct kube_client *c, struct err *e)
{
	cJSON *have = kube_get(c, &secret_res, u->p.ns, u->in->outputs_secret, NULL, e);
	const cJSON *o;
	int found = 0;

	if (have == NULL)
		return -1;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(have, "metadata"), "ownerReferences")) {
		const char *k = kube_obj_str(o, "kind"), *n = kube_obj_str(o, "name");
		const char *uid = kube_obj_str(o, "uid"), *api = kube_obj_str(o, "apiVersion");
		if (k && n && uid && api && strcmp(k, "Stack") == 0 && strcmp(n, u->p.name) == 0) {
			cJSON *md = cJSON_AddObjectToObject(u->p.obj, "metadata");
			cJSON_AddStringToObject(u->p.obj, "apiVersion", api);
			cJSON_AddStringToObject(md, "uid", uid);
			found = 1;
			break;
		}
	}
	cJSON_Delete(have);
	if (!found)
		return err_set(e, ERR_CONFLICT, "Secret %s/%s is not owned by the Stack %s; the outputs are not "
		    "written", u->p.ns, u->in->outputs_secret, u->p.name), -1;
	return 0;
}

static struct kube_client *incluster_client(const struct stack_run_opts *o, struct err *e)
{
	struct kube_config *cfg = NULL;

	if (kube_config_incluster(o->kube_host, o->kube_port, o->service_account_dir, &cfg, e) < 0)
		return NULL;
	return kube_client_new(cfg, e);
}

static enum stack_run_outputs write_outputs(struct runner *u, struct err *e)
{
	struct kube_client *c;
	int rc;

	if (u->in->outputs_secret == NULL || u->p.out.outputs == NULL)
		return STACK_RUN_OUTPUTS_NONE;
	if ((c = incluster_client(u->o, e)) == NULL)
		return STACK_RUN_OUTPUTS_FAILED;
	u->sc.client = c;
	rc = adopt_owner(u, c, e);
	if (rc == 0 && (rc = stack_outputs_write(&u->p, e)) < 0 && e->code == ERR_CONFLICT &&
	    e->http_status == 409) {
		/* Someone wrote the Secret in between: read it again, once. */
		log_info("the outputs Secret changed while it was written; writing it again", NULL);
		rc = stack_outputs_write(&u->p, e);
	}
	u->sc.client = NULL;
	kube_client_free(c);
	return rc == 0 ? STACK_RUN_OUTPUTS_WRITTEN : STACK_RUN_OUTPUTS_FAILED;
}

/* ------------------------------------------------------------ driver */

static void run_operation(struct runner *u)
{
	const char *op = u->in->operation;

	if (strcmp(op, "destroy") == 0)
		stack_update_destroy(&u->p);
	else if (strcmp(op, "refresh") == 0)
		stack_update_drift_check(&u->p);   /* what local mode's refresh is */
	else
		stack_update_run(&u->p);
}

static void take_outcome(struct runner *u)
{
	struct stack_run_result *r = u->r;
	const struct stack_outcome *out = &u->p.out;

	r->status = out->status;
	r->cls = class_of(out->status);
	snprintf(r->message, sizeof(r->message), "%s", out->message);
	r->changes = out->changes ? cJSON_Duplicate(out->changes, 1) : NULL;
	if (out->lock.present) {
		r->lock_present = 1;
		snprintf(r->lock_owner, sizeof(r->lock_owner), "%s", out->lock.owner);
		snprintf(r->lock_created, sizeof(r->lock_created), "%s", out->lock.created);
		r->lock_pid = out->lock.pid;
	}
}

void stack_run(const struct stack_run_input *in, const struct stack_run_opts *o,
    struct stack_run_result *r)
{
	struct runner *u = calloc(1, sizeof(*u));
	struct err e;

	if (u == NULL)
		abort();
	memset(r, 0, sizeof(*r));
	u->in = in;
	u->o = o;
	u->r = r;
	runner_init(u);
	if (o->cancel && pthread_create(&u->watcher, NULL, watch_cancel, u) == 0)
		u->watching = 1;
	log_context_set("namespace", in->namespace);
	log_context_set("name", in->name);
	log_info("run-update starting", "operation", in->operation, "stack", in->stack, NULL);
	if (resolve_inputs(u) < 0 || prepare_workspace(u) < 0)
		goto out;
	run_operation(u);
	take_outcome(u);
	if (r->status == PL_OK && strcmp(in->operation, "up") == 0) {
		r->outputs = write_outputs(u, &e);
		if (r->outputs == STACK_RUN_OUTPUTS_FAILED) {
			log_warn("cannot write the outputs Secret", "error", e.msg, NULL);
			snprintf(r->message, sizeof(r->message), "%s; the outputs Secret was not written: %s",
			    u->p.out.message, e.msg);
		}
	}
out:
	log_info("run-update finished", "status", pl_status_name((enum pl_status)r->status),
	    "class", stack_run_class_name(r->cls), NULL);
	log_context_clear();
	runner_free(u);
	free(u);
}

/* ------------------------------------------------------------ termination message */

/* Length of s[0..n) as a JSON string body (cJSON's escaping). */
static size_t json_escaped_len(unsigned char ch)
{
	if (ch == '"' || ch == '\\' || ch == '\b' || ch == '\f' || ch == '\n' || ch == '\r' || ch == '\t')
		return 2;
	return ch < 0x20 ? 6 : 1;
}

/* Bytes of the UTF-8 sequence at s (1..4), 0 when it is not valid:
 * overlong forms, surrogates and code points past U+10FFFF are not. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n = s[0] < 0x80 ? 1 : s[0] < 0xc2 ? 0 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 :
	    s[0] < 0xf5 ? 4 : 0;

	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

/* The longest prefix of msg, valid UTF-8 (bad bytes become '?'), whose
 * JSON form fits in budget bytes; "…" marks a cut.  Caller frees. */
static char *fit_message(const char *msg, size_t budget)
{
	static const char mark[] = "\xe2\x80\xa6";   /* U+2026 */
	size_t len = strlen(msg), used = 0, o = 0;
	char *out = malloc(len + sizeof(mark));
	const unsigned char *s = (const unsigned char *)msg;

	if (out == NULL)
		abort();
	for (size_t i = 0; i < len;) {
		size_t n = utf8_len(s + i), w = n == 1 ? json_escaped_len(s[i]) : n == 0 ? 1 : n;
		/* Room for the mark unless this is the very end. */
		size_t need = used + w + (i + (n ? n : 1) < len ? sizeof(mark) - 1 : 0);
		if (need > budget) {
			if (used + sizeof(mark) - 1 <= budget) {
				memcpy(out + o, mark, sizeof(mark) - 1);
				o += sizeof(mark) - 1;
			}
			break;
		}
		if (n == 0) {
			out[o++] = '?';
			i++;
		} else {
			memcpy(out + o, s + i, n);
			o += n;
			i += n;
		}
		used += w;
	}
	out[o] = '\0';
	return out;
}

static cJSON *termination_json(const struct stack_run_result *r, const char *message, int with_changes)
{
	cJSON *j = cJSON_CreateObject();
	static const char *outputs[] = { "none", "written", "failed" };

	cJSON_AddNumberToObject(j, "v", 1);
	cJSON_AddStringToObject(j, "status", pl_status_name((enum pl_status)r->status));
	cJSON_AddStringToObject(j, "message", message);
	if (with_changes && r->changes)
		cJSON_AddItemToObject(j, "changes", cJSON_Duplicate(r->changes, 1));
	else
		cJSON_AddNullToObject(j, "changes");
	cJSON_AddStringToObject(j, "outputs", outputs[r->outputs]);
	if (r->lock_present) {
		cJSON *l = cJSON_AddObjectToObject(j, "lock");
		char *owner = fit_message(r->lock_owner, 127), *created = fit_message(r->lock_created, 47);
		cJSON_AddStringToObject(l, "owner", owner);
		cJSON_AddNumberToObject(l, "pid", (double)r->lock_pid);
		cJSON_AddStringToObject(l, "created", created);
		free(owner);
		free(created);
	} else {
		cJSON_AddNullToObject(j, "lock");
	}
	cJSON_AddStringToObject(j, "class", stack_run_class_name(r->cls));
	return j;
}

static char *print_with(const struct stack_run_result *r, const char *message, int with_changes)
{
	cJSON *j = termination_json(r, message, with_changes);
	char *s = cJSON_PrintUnformatted(j);

	cJSON_Delete(j);
	if (s == NULL)
		abort();
	return s;
}

char *stack_run_termination(const struct stack_run_result *r, size_t max)
{
	/* What everything but the message takes; the changes go first when
	 * even an empty message does not fit (a hostile summary). */
	int with_changes = 1;
	char *s = print_with(r, "", with_changes), *msg;
	size_t base = strlen(s);

	if (base > max) {
		free(s);
		with_changes = 0;
		s = print_with(r, "", 0);
		base = strlen(s);
	}
	free(s);
	msg = fit_message(r->message, base < max ? max - base : 0);
	s = print_with(r, msg, with_changes);
	free(msg);
	return s;
}
