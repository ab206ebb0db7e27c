/*
 * stack_runner_io.c - what run-update reads and what it writes back
 * (the contract between the controller's Job and its pod; docs/cli.md,
 * "run-update"):
 *
 *   in   PULUMI_CONTROLLER_UPDATE: the update's non-secret inputs as JSON,
 *        parsed and validated here into struct stack_run_input, every
 *        refusal naming its field and never quoting a value;
 *   out  the termination message: compact JSON of a struct
 *        stack_run_result, at most STACK_RUN_TERMINATION_MAX bytes, the
 *        message cut to fit (the kubelet keeps 4 KiB of it).
 *
 * stack_runner.c runs the update in between; stack_run_client is the
 * pod's own connection to the API server (its ServiceAccount token).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/xalloc.h"
#include "kube/kube.h"
#include "pulumi/pulumi.h"
#include "stack/stack.h"

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
	mem_free_all(in->operation, in->namespace, in->name, in->stack, in->fingerprint, in->url, in->digest,
	    in->revision, in->manifest_digest, in->layer_digest, in->index_digest, in->media_type, in->dir,
	    in->backend, in->secrets_provider, in->backend_env, in->secrets_provider_env, in->outputs_secret,
	    in->cancel_lock, in->plan_secret, in->plan_id, in->plan_after);
	pairs_free(in->config, in->n_config);
	pairs_free(in->secret_config, in->n_secret_config);
	pairs_free(in->config_from_env, in->n_config_from_env);
	strings_free(in->structured, in->n_structured);
	strings_free(in->env, in->n_env);
	strings_free(in->targets, in->n_targets);
	strings_free(in->policy_packs, in->n_policy_packs);
	strings_free(in->environments, in->n_environments);
	free(in);
}

/* obj.field into *v when it is what is() accepts: 0 (*v NULL when absent
 * or null); -1 with "<path> must be <what>" when it is something else. */
static int typed(const cJSON *obj, const char *path, const char *field, cJSON_bool (*is)(const cJSON *),
    const char *what, const cJSON **v, struct err *e)
{
	*v = cJSON_GetObjectItemCaseSensitive(obj, field);
	if (*v == NULL || cJSON_IsNull(*v)) {
		*v = NULL;
		return 0;
	}
	if (!is(*v))
		return err_set(e, ERR_INVALID, INPUT ": %s must be %s", path, what), -1;
	return 0;
}

/* obj.field as an owned string into *out: required (NULL or missing is an
 * error) or optional (left NULL).  Empty strings count as missing. */
static int get_str(const cJSON *obj, const char *path, const char *field, int required, char **out,
    struct err *e)
{
	const cJSON *v;

	if (typed(obj, path, field, cJSON_IsString, "a string", &v, e) < 0)
		return -1;
	if (required && v == NULL)
		return err_set(e, ERR_INVALID, INPUT ": %s is required", path), -1;
	if (required && v->valuestring[0] == '\0')
		return err_set(e, ERR_INVALID, INPUT ": %s must not be empty", path), -1;
	if (v != NULL && v->valuestring[0] != '\0')
		*out = xstrdup(v->valuestring);
	return 0;
}

static int get_bool(const cJSON *obj, const char *path, const char *field, int *out, struct err *e)
{
	const cJSON *v;

	if (typed(obj, path, field, cJSON_IsBool, "true or false", &v, e) < 0)
		return -1;
	if (v != NULL)
		*out = cJSON_IsTrue(v);
	return 0;
}

static int get_strings(const cJSON *obj, const char *field, char ***out, size_t *n, struct err *e)
{
	const cJSON *v, *it;
	int i = 0;

	if (typed(obj, field, field, cJSON_IsArray, "an array of strings", &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	*out = xcalloc((size_t)cJSON_GetArraySize(v) + 1, sizeof(char *));
	cJSON_ArrayForEach(it, v) {
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
			return err_set(e, ERR_INVALID, INPUT ": %s[%d] must be a non-empty string", field, i), -1;
		(*out)[(*n)++] = xstrdup(it->valuestring);
		i++;
	}
	return 0;
}

static int get_pairs(const cJSON *obj, const char *field, struct stack_run_pair **out, size_t *n,
    struct err *e)
{
	const cJSON *v, *it;

	if (typed(obj, field, field, cJSON_IsObject, "an object of strings", &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	*out = xcalloc((size_t)cJSON_GetArraySize(v) + 1, sizeof(**out));
	cJSON_ArrayForEach(it, v) {
		/* The key only: a value may be a plaintext config value, and even
		 * those stay out of the pod's messages. */
		if (it->string[0] == '\0')
			return err_set(e, ERR_INVALID, INPUT ": %s has an empty key", field), -1;
		if (!cJSON_IsString(it))
			return err_set(e, ERR_INVALID, INPUT ": %s.%s must be a string", field, it->string), -1;
		(*out)[*n].key = xstrdup(it->string);
		(*out)[(*n)++].value = xstrdup(it->valuestring);
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
	    get_str(src, "source.indexDigest", "indexDigest", 0, &in->index_digest, e) < 0 ||
	    get_str(src, "source.mediaType", "mediaType", 0, &in->media_type, e) < 0 ||
	    get_bool(src, "source.insecure", "insecure", &in->insecure, e) < 0 ||
	    get_bool(src, "source.verify", "verify", &in->verify, e) < 0)
		return -1;
	if (!digest_ok(in->manifest_digest, 1))
		return err_set(e, ERR_INVALID, INPUT ": source.manifestDigest must be sha256:<64 hex>"), -1;
	if (in->layer_digest && !digest_ok(in->layer_digest, 0))
		return err_set(e, ERR_INVALID, INPUT ": source.layerDigest must be sha256:<hex>"), -1;
	if (in->index_digest && !digest_ok(in->index_digest, 1))
		return err_set(e, ERR_INVALID, INPUT ": source.indexDigest must be sha256:<64 hex>"), -1;
	return 0;
}

static int check_names(const struct stack_run_input *in, struct err *e)
{
	static const char *ops[] = { "up", "preview", "destroy", "refresh", "plan" };
	int op_ok = 0;

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		op_ok |= strcmp(in->operation, ops[i]) == 0;
	if (!op_ok)
		return err_set(e, ERR_INVALID, INPUT ": operation must be up, preview, destroy, refresh or plan"), -1;
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

/* The env names of backendFromEnv, secretsProviderFromEnv, secretConfig,
 * configFromEnv and env; a value comes either inline or from the env. */
static int check_env_names(const struct stack_run_input *in, struct err *e)
{
	if (in->backend_env && (in->backend || !env_name_ok(in->backend_env)))
		return err_set(e, ERR_INVALID, INPUT ": backendFromEnv must name an environment variable, "
		    "and backend must then be absent"), -1;
	if (in->secrets_provider_env && (in->secrets_provider || !env_name_ok(in->secrets_provider_env)))
		return err_set(e, ERR_INVALID, INPUT ": secretsProviderFromEnv must name an environment "
		    "variable, and secretsProvider must then be absent"), -1;
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

/* cancelLock: the owner ("user@host") of a lock the controller found left
 * by a pod that is gone; the CLI reports owners of at most 127 bytes. */
static int parse_cancel_lock(const cJSON *root, struct stack_run_input *in, struct err *e)
{
	if (get_str(root, "cancelLock", "cancelLock", 0, &in->cancel_lock, e) < 0)
		return -1;
	if (in->cancel_lock == NULL)
		return 0;
	if (strlen(in->cancel_lock) > 127)
		return err_set(e, ERR_INVALID, INPUT ": cancelLock must be a lock owner of at most 127 bytes"), -1;
	for (const unsigned char *c = (const unsigned char *)in->cancel_lock; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return err_set(e, ERR_INVALID, INPUT ": cancelLock holds a control character"), -1;
	return 0;
}

/* A plan Job writes "<name>-plan-result" and nothing else; an up Job names
 * the approved plan and the one applied before it by their ids (hex). */
static int check_plan(const struct stack_run_input *in, struct err *e)
{
	char want[300];

	snprintf(want, sizeof(want), "%s-plan-result", in->name);   /* stack_job_plan_result_name */
	if (strcmp(in->operation, "plan") == 0 && (in->plan_secret == NULL || strcmp(in->plan_secret, want) != 0))
		return err_set(e, ERR_INVALID, INPUT ": planSecret must be \"%s\" (the Stack's plan result "
		    "Secret)", want), -1;
	if (in->plan_id && (strlen(in->plan_id) != 32 || strspn(in->plan_id, "0123456789abcdef") != 32))
		return err_set(e, ERR_INVALID, INPUT ": planId must be 32 hex digits"), -1;
	if (in->plan_after && (strlen(in->plan_after) != 32 || strspn(in->plan_after, "0123456789abcdef") != 32))
		return err_set(e, ERR_INVALID, INPUT ": planAfter must be 32 hex digits"), -1;
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
	    get_str(root, "backendFromEnv", "backendFromEnv", 0, &in->backend_env, e) < 0 ||
	    get_str(root, "secretsProviderFromEnv", "secretsProviderFromEnv", 0, &in->secrets_provider_env, e) < 0 ||
	    get_pairs(root, "config", &in->config, &in->n_config, e) < 0 ||
	    get_strings(root, "structuredConfig", &in->structured, &in->n_structured, e) < 0 ||
	    get_pairs(root, "secretConfig", &in->secret_config, &in->n_secret_config, e) < 0 ||
	    get_pairs(root, "configFromEnv", &in->config_from_env, &in->n_config_from_env, e) < 0 ||
	    get_strings(root, "env", &in->env, &in->n_env, e) < 0 ||
	    get_bool(root, "refresh", "refresh", &in->refresh, e) < 0 ||
	    get_strings(root, "targets", &in->targets, &in->n_targets, e) < 0 ||
	    get_strings(root, "policyPacks", &in->policy_packs, &in->n_policy_packs, e) < 0 ||
	    get_bool(root, "targetDependents", "targetDependents", &in->target_dependents, e) < 0 ||
	    get_bool(root, "runProgram", "runProgram", &in->run_program, e) < 0 ||
	    get_bool(root, "useLocalStackOnly", "useLocalStackOnly", &in->local_stack_only, e) < 0 ||
	    get_strings(root, "environment", &in->environments, &in->n_environments, e) < 0 ||
	    get_str(root, "outputsSecret", "outputsSecret", 0, &in->outputs_secret, e) < 0 ||
	    get_str(root, "planSecret", "planSecret", 0, &in->plan_secret, e) < 0 ||
	    get_str(root, "planId", "planId", 0, &in->plan_id, e) < 0 ||
	    get_str(root, "planAfter", "planAfter", 0, &in->plan_after, e) < 0)
		return -1;
	t = cJSON_GetObjectItemCaseSensitive(root, "timeoutSeconds");
	if (t != NULL && !cJSON_IsNull(t)) {
		if (!cJSON_IsNumber(t) || t->valuedouble < 1 || t->valuedouble > 7 * 86400.0)
			return err_set(e, ERR_INVALID, INPUT ": timeoutSeconds must be a number of seconds "
			    "from 1 to 604800"), -1;
		in->timeout_seconds = (long)t->valuedouble;
	}
	if (parse_cancel_lock(root, in, e) < 0)
		return -1;
	return check_names(in, e) < 0 || check_env_names(in, e) < 0 || check_outputs_secret(in, e) < 0 ||
	    check_plan(in, e) < 0 ? -1 : 0;
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
	in = xcalloc(1, sizeof(*in));
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
	char *out = xmalloc(len + sizeof(mark));
	const unsigned char *s = (const unsigned char *)msg;

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

/* What the message leaves out: how the parts below share the budget. */
struct termination_cut {
	int with_changes;
	int n_drift;                      /* drift resources kept, the rest counted as omitted */
};

/* "drift": {"resources": [the first n], "omitted": the rest}, when the
 * operation's refresh found any. */
static void add_drift(cJSON *j, const struct stack_run_result *r, int n)
{
	cJSON *d, *list;
	int total = cJSON_GetArraySize(r->drift), i = 0;
	const cJSON *it;

	if (r->drift == NULL && r->drift_omitted == 0)
		return;
	d = cJSON_AddObjectToObject(j, "drift");
	list = cJSON_AddArrayToObject(d, "resources");
	cJSON_ArrayForEach(it, r->drift)
		if (i++ < n)
			cJSON_AddItemToArray(list, cJSON_Duplicate(it, 1));
	cJSON_AddNumberToObject(d, "omitted", (double)(r->drift_omitted + (total > n ? total - n : 0)));
}

static cJSON *termination_json(const struct stack_run_result *r, const char *message,
    const struct termination_cut *cut)
{
	cJSON *j = cJSON_CreateObject();
	static const char *outputs[] = { "none", "written", "failed" };

	cJSON_AddNumberToObject(j, "v", 1);
	cJSON_AddStringToObject(j, "status", pl_status_name((enum pl_status)r->status));
	cJSON_AddStringToObject(j, "message", message);
	if (cut->with_changes && r->changes)
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
	add_drift(j, r, cut->n_drift);
	return j;
}

static char *print_with(const struct stack_run_result *r, const char *message,
    const struct termination_cut *cut)
{
	cJSON *j = termination_json(r, message, cut);
	char *s = cJSON_PrintUnformatted(j);

	cJSON_Delete(j);
	if (s == NULL)
		abort();
	return s;
}

static size_t printed_len(const struct stack_run_result *r, const char *message,
    const struct termination_cut *cut)
{
	char *s = print_with(r, message, cut);
	size_t n = strlen(s);

	free(s);
	return n;
}

/* The room the message keeps when drift resources compete for it: its
 * whole JSON form up to this much (a drift check's own message says
 * little; the resources are what status.drift shows). */
#define MESSAGE_RESERVE 400

static size_t message_json_len(const char *msg)
{
	size_t n = 0;

	for (const unsigned char *s = (const unsigned char *)msg; *s; s++)
		n += *s < 0x80 ? json_escaped_len(*s) : 1;
	return n;
}

char *stack_run_termination(const struct stack_run_result *r, size_t max)
{
	/* What everything but the message takes; the drift resources go
	 * first, one by one from the end, then the changes (a hostile
	 * summary), until the message has its reserve. */
	struct termination_cut cut = { 1, cJSON_GetArraySize(r->drift) };
	size_t reserve = message_json_len(r->message), base;
	char *s, *msg;

	if (reserve > MESSAGE_RESERVE)
		reserve = MESSAGE_RESERVE;
	while ((base = printed_len(r, "", &cut)) + reserve > max && cut.n_drift > 0)
		cut.n_drift--;
	if (base > max) {
		cut.with_changes = 0;
		base = printed_len(r, "", &cut);
	}
	msg = fit_message(r->message, base < max ? max - base : 0);
	s = print_with(r, msg, &cut);
	free(msg);
	return s;
}

/* ------------------------------------------------------------ the API server */

struct kube_client *stack_run_client(const struct stack_run_opts *o, struct err *e)
{
	struct kube_config *cfg = NULL;

	if (kube_config_incluster(o->kube_host, o->kube_port, o->service_account_dir, &cfg, e) < 0)
		return NULL;
	return kube_client_new(cfg, e);
}
