/*
 * stack_job_build.c - the batch/v1 Job one update runs in, built from the
 * parsed spec and the resolved artifact (the contract with the pod is
 * /work/wt/JOBS.md, the user's view docs/job-runner.md).
 *
 * Pure: nothing here talks to the API server, so tests/unit/test_stack_job.c
 * checks the JSON exactly.  What the Job never holds is a value read from a
 * Secret or ConfigMap: those reach the pod as secretKeyRef / configMapKeyRef
 * env and secret volumes, resolved by the kubelet; nor a secret value written
 * in the Stack (backend, secretsProvider, secretsRef Literal), which goes
 * through the Stack's Secret <stack>-job-inputs (stack_job_inputs_data).  The pod's security is
 * fixed here (restricted Pod Security Standard) and spec.runner can add only
 * what stack_spec_runner.c allowed.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/digest.h"
#include "base/secret.h"
#include "base/str.h"
#include "stack/stack_exec.h"

#define JOB_NAME_MAX 63
#define FP_LEN 10
#define RUNNER_UID 65532        /* the image's USER (Dockerfile) */
#define MNT_OCI "/var/run/pulumi-controller/oci"
#define MNT_KEYS "/var/run/pulumi-controller/keys"
#define TERMINATION_LOG "/tmp/termination-log"

static int alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int stack_job_name(const char *stack, const char *op, const char *fingerprint, char *out, size_t n)
{
	size_t suffix = 1 + strlen(op) + 1 + FP_LEN, keep = strlen(stack);

	if (n < JOB_NAME_MAX + 1 || strlen(fingerprint) < FP_LEN || suffix >= JOB_NAME_MAX)
		return -1;
	if (keep > JOB_NAME_MAX - suffix)
		keep = JOB_NAME_MAX - suffix;
	/* A cut name must still end in a letter or digit before the "-". */
	while (keep > 0 && !alnum(stack[keep - 1]))
		keep--;
	snprintf(out, n, "%.*s-%s-%.*s", (int)keep, stack, op, FP_LEN, fingerprint);
	return 0;
}

/* The hex part hashes the Stack's uid with the fingerprint: two Stacks
 * whose names share the kept part, at the same inputs, still get different
 * Jobs (the fingerprint alone names no Stack), and one Stack at the same
 * inputs always gets the same one (a restarted controller finds it). */
int stack_job_name_of(const char *stack, const char *uid, const char *op, const char *fingerprint, char *out,
    size_t n)
{
	struct digest_ctx *c;
	struct digest d;
	char hex[DIGEST_STR_MAX], head[64];

	if (strlen(fingerprint) < FP_LEN || (c = digest_ctx_new(DIGEST_SHA256)) == NULL)
		return -1;
	uid = uid ? uid : "";
	snprintf(head, sizeof(head), "uid %zu:", strlen(uid));
	digest_ctx_update(c, head, strlen(head));
	digest_ctx_update(c, uid, strlen(uid));
	snprintf(head, sizeof(head), "fingerprint %zu:", strlen(fingerprint));
	digest_ctx_update(c, head, strlen(head));
	digest_ctx_update(c, fingerprint, strlen(fingerprint));
	digest_ctx_final(c, &d);
	digest_ctx_free(c);
	digest_hex(&d, hex, sizeof(hex));
	return stack_job_name(stack, op, hex, out, n);
}

void stack_job_inputs_secret_name(const char *stack, char *out, size_t n)
{
	snprintf(out, n, "%s-job-inputs", stack);
}

static cJSON *labels(const struct stack_job_in *in)
{
	cJSON *l = cJSON_CreateObject(), *it;
	char v[64];

	cJSON_ArrayForEach(it, in->spec->runner.labels)
		cJSON_AddStringToObject(l, it->string, it->valuestring);
	cJSON_AddStringToObject(l, STACK_JOB_LABEL_MANAGED, STACK_JOB_MANAGER);
	stack_label_value(in->name, v);
	cJSON_AddStringToObject(l, STACK_LABEL_NAME, v);
	cJSON_AddStringToObject(l, "pulumi.com/operation", in->op);
	snprintf(v, sizeof(v), "%.*s", FP_LEN, in->fingerprint);
	cJSON_AddStringToObject(l, "pulumi.com/fingerprint", v);
	return l;
}

static cJSON *owner_refs(const struct stack_job_in *in)
{
	return stack_owner_refs(in->api_version, in->name, in->uid);
}

static cJSON *strings(char *const *v, size_t n)
{
	cJSON *a = cJSON_CreateArray();

	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
	return a;
}

/* "tag@sha256:..." -> "sha256:..." (the manifest digest of an OCI revision). */
static const char *manifest_digest(const char *revision)
{
	const char *at = revision ? strrchr(revision, '@') : NULL;

	return at ? at + 1 : revision;
}

static cJSON *source_json(const struct stack_job_in *in)
{
	const struct stack_spec *s = in->spec;
	const struct stack_artifact *a = in->art;
	cJSON *src = cJSON_CreateObject();

	if (s->source == STACK_SRC_OCI) {
		cJSON_AddStringToObject(src, "kind", "oci");
		cJSON_AddStringToObject(src, "url", s->oci_url);
		cJSON_AddStringToObject(src, "manifestDigest", manifest_digest(a->revision) ? manifest_digest(a->revision) : "");
		cJSON_AddStringToObject(src, "layerDigest", a->digest ? a->digest : "");
		/* The pod falls back to the index's signature as the controller did. */
		if (a->index_digest)
			cJSON_AddStringToObject(src, "indexDigest", a->index_digest);
		cJSON_AddStringToObject(src, "revision", a->revision ? a->revision : "");
		if (s->oci_media_type)
			cJSON_AddStringToObject(src, "mediaType", s->oci_media_type);
		else
			cJSON_AddNullToObject(src, "mediaType");
		cJSON_AddBoolToObject(src, "insecure", s->oci_insecure);
		cJSON_AddBoolToObject(src, "verify", s->oci_verify);
		return src;
	}
	cJSON_AddStringToObject(src, "kind", "artifact");
	cJSON_AddStringToObject(src, "url", a->url ? a->url : "");
	cJSON_AddStringToObject(src, "digest", a->digest ? a->digest : "");
	cJSON_AddStringToObject(src, "revision", a->revision ? a->revision : "");
	return src;
}

static void add_str_or_null(cJSON *o, const char *k, const char *v)
{
	if (v)
		cJSON_AddStringToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

/* The env var a config value of the pod comes in (index-named: config
 * keys such as "aws:region" are no env names). */
static void config_env_name(size_t i, char *out, size_t n)
{
	snprintf(out, n, "PULUMI_CONTROLLER_CONFIG_%zu", i);
}

static cJSON *key_ref(const char *kind, const struct stack_value *v)
{
	cJSON *from = cJSON_CreateObject(), *ref = cJSON_AddObjectToObject(from, kind);

	cJSON_AddStringToObject(ref, "name", v->object);
	cJSON_AddStringToObject(ref, "key", v->key);
	return from;
}

/* One env entry: a literal value, or a reference the kubelet resolves. */
static void add_env(cJSON *env, const char *name, const struct stack_value *v)
{
	cJSON *e = cJSON_CreateObject();

	cJSON_AddStringToObject(e, "name", name);
	if (v->kind == STACK_VAL_LITERAL)
		cJSON_AddStringToObject(e, "value", v->literal);
	else
		cJSON_AddItemToObject(e, "valueFrom", key_ref(v->kind == STACK_VAL_SECRET ? "secretKeyRef" :
		    "configMapKeyRef", v));
	cJSON_AddItemToArray(env, e);
}

/* backend and secretsProvider may carry credentials (s3://key:secret@...,
 * a key vault URL): never literal in the Job, which `get jobs` shows, but
 * a key of the Secret <stack>-job-inputs (stack_job_ensure_inputs) that
 * the pod's env references, named in the document's <field>FromEnv. */
static void add_from_inputs_secret(cJSON *doc, cJSON *env, const struct stack_job_in *in, const char *field,
    const char *var, const char *value)
{
	char secret[300], from[64];
	struct stack_value v = { STACK_VAL_SECRET, NULL, secret, (char *)field, 0 };

	if (value == NULL)
		return;
	stack_job_inputs_secret_name(in->name, secret, sizeof(secret));
	add_env(env, var, &v);
	snprintf(from, sizeof(from), "%sFromEnv", field);
	cJSON_AddStringToObject(doc, from, var);
}

/* A secret config value written in the Stack itself (secretsRef of type
 * Literal): like backend, never literal in the Job, but a key of
 * <stack>-job-inputs.  Values of other Secrets stay references to them. */
static int config_in_inputs(const struct stack_config *c)
{
	return c->secret && c->v.kind == STACK_VAL_LITERAL;
}

/* Its key there: from the config's index, never from its key or value, so
 * no value can name (or overwrite) another key, and "backend" and
 * "secretsProvider" have no dot. */
static void config_input_key(size_t i, char *out, size_t n)
{
	snprintf(out, n, "%s%zu", STACK_JOB_INPUT_CONFIG_PREFIX, i);
}

/* Base64 of value as data[key]; -1 out of memory.  The plain copy made by
 * base64 is wiped (cJSON keeps its own). */
static int add_b64(cJSON *data, const char *key, const char *value)
{
	char *b64 = base64_encode(value, strlen(value));

	if (b64 == NULL)
		return -1;
	cJSON_AddStringToObject(data, key, b64);
	secret_wipe(b64, strlen(b64));
	free(b64);
	return 0;
}

cJSON *stack_job_inputs_data(const struct stack_spec *s)
{
	cJSON *data = cJSON_CreateObject();
	char key[64];
	int rc = data ? 0 : -1;

	if (rc == 0 && s->backend)
		rc = add_b64(data, STACK_JOB_INPUT_BACKEND, s->backend);
	if (rc == 0 && s->secrets_provider)
		rc = add_b64(data, STACK_JOB_INPUT_SECRETS_PROVIDER, s->secrets_provider);
	for (size_t i = 0; rc == 0 && i < s->n_config; i++) {
		if (!config_in_inputs(&s->config[i]))
			continue;
		config_input_key(i, key, sizeof(key));
		rc = add_b64(data, key, s->config[i].v.literal);
	}
	if (rc < 0) {
		cJSON_Delete(data);
		return NULL;
	}
	return data;
}

/* Config into the update document and, for referenced or secret values,
 * into the pod's env (env: the container's list). */
static void add_config(cJSON *doc, cJSON *env, const struct stack_job_in *in)
{
	const struct stack_spec *s = in->spec;
	char inputs[300], key[64];
	struct stack_value from_inputs = { STACK_VAL_SECRET, NULL, inputs, key, 0 };

	cJSON *config = cJSON_AddObjectToObject(doc, "config");
	cJSON *structured = cJSON_AddArrayToObject(doc, "structuredConfig");
	cJSON *secret = cJSON_AddObjectToObject(doc, "secretConfig");
	cJSON *from_env = cJSON_AddObjectToObject(doc, "configFromEnv");

	for (size_t i = 0; i < s->n_config; i++) {
		const struct stack_config *c = &s->config[i];
		char name[64];
		if (c->v.structured)
			cJSON_AddItemToArray(structured, cJSON_CreateString(c->key));
		if (c->v.kind == STACK_VAL_LITERAL && !c->secret) {
			cJSON_AddStringToObject(config, c->key, c->v.literal);
			continue;
		}
		config_env_name(i, name, sizeof(name));
		if (config_in_inputs(c)) {
			stack_job_inputs_secret_name(in->name, inputs, sizeof(inputs));
			config_input_key(i, key, sizeof(key));
		}
		add_env(env, name, config_in_inputs(c) ? &from_inputs : &c->v);
		cJSON_AddStringToObject(c->secret || c->v.kind == STACK_VAL_SECRET ? secret : from_env, c->key, name);
	}
}

/* The update document; env (may be NULL) receives the entries it names. */
static char *stack_job_update_json_env(const struct stack_job_in *in, cJSON *env)
{
	const struct stack_spec *s = in->spec;
	cJSON *doc = cJSON_CreateObject(), *scratch = env ? NULL : cJSON_CreateArray(), *names;
	char secret_name[300], *text;

	if (env == NULL)
		env = scratch;
	cJSON_AddNumberToObject(doc, "v", 1);
	cJSON_AddStringToObject(doc, "operation", in->op);
	cJSON_AddStringToObject(doc, "namespace", in->ns);
	cJSON_AddStringToObject(doc, "name", in->name);
	cJSON_AddStringToObject(doc, "stack", s->stack);
	cJSON_AddStringToObject(doc, "fingerprint", in->fingerprint);
	cJSON_AddItemToObject(doc, "source", source_json(in));
	add_str_or_null(doc, "dir", s->dir);
	add_from_inputs_secret(doc, env, in, STACK_JOB_INPUT_BACKEND, "PULUMI_CONTROLLER_BACKEND", s->backend);
	add_from_inputs_secret(doc, env, in, STACK_JOB_INPUT_SECRETS_PROVIDER, "PULUMI_CONTROLLER_SECRETS_PROVIDER",
	    s->secrets_provider);
	add_config(doc, env, in);
	names = cJSON_AddArrayToObject(doc, "env");
	for (size_t i = 0; i < s->n_env; i++) {
		add_env(env, s->env[i].name, &s->env[i].v);
		cJSON_AddItemToArray(names, cJSON_CreateString(s->env[i].name));
	}
	cJSON_AddBoolToObject(doc, "refresh", s->refresh || in->refresh);
	cJSON_AddItemToObject(doc, "targets", strings(s->targets, s->n_targets));
	cJSON_AddItemToObject(doc, "policyPacks", strings(s->policy_packs, s->n_policy_packs));
	/* The operator's flags: only when set, so a Job of a Stack without them
	 * reads as before. */
	if (s->target_dependents)
		cJSON_AddBoolToObject(doc, "targetDependents", 1);
	if (s->run_program)
		cJSON_AddBoolToObject(doc, "runProgram", 1);
	if (s->local_stack_only)
		cJSON_AddBoolToObject(doc, "useLocalStackOnly", 1);
	if (s->n_environments)
		cJSON_AddItemToObject(doc, "environment", strings(s->environments, s->n_environments));
	snprintf(secret_name, sizeof(secret_name), "%s-outputs", in->name);
	cJSON_AddStringToObject(doc, "outputsSecret", secret_name);
	cJSON_AddNumberToObject(doc, "timeoutSeconds", (double)((s->timeout_ms + 999) / 1000));
	if (in->cancel_lock)
		cJSON_AddStringToObject(doc, "cancelLock", in->cancel_lock);
	if (strcmp(in->op, STACK_JOB_OP_PLAN) == 0) {
		stack_job_plan_result_name(in->name, secret_name, sizeof(secret_name));
		cJSON_AddStringToObject(doc, "planSecret", secret_name);
	}
	if (in->plan_id)
		cJSON_AddStringToObject(doc, "planId", in->plan_id);
	if (in->plan_id && in->plan_after && in->plan_after[0])
		cJSON_AddStringToObject(doc, "planAfter", in->plan_after);
	text = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	cJSON_Delete(scratch);
	return text;
}

char *stack_job_update_json(const struct stack_job_in *in)
{
	return stack_job_update_json_env(in, NULL);
}

static cJSON *mount(const char *name, const char *path, int read_only)
{
	cJSON *m = cJSON_CreateObject();

	cJSON_AddStringToObject(m, "name", name);
	cJSON_AddStringToObject(m, "mountPath", path);
	if (read_only)
		cJSON_AddBoolToObject(m, "readOnly", 1);
	return m;
}

static cJSON *empty_dir(const char *name)
{
	cJSON *v = cJSON_CreateObject();

	cJSON_AddStringToObject(v, "name", name);
	cJSON_AddObjectToObject(v, "emptyDir");
	return v;
}

/* ociSource.verify's public keys: the pod checks the signature again
 * before it runs anything (run-update --verify-keys-dir). */
static cJSON *keys_volume(const struct stack_spec *s)
{
	cJSON *v = cJSON_CreateObject();

	cJSON_AddStringToObject(v, "name", "pulumi-controller-keys");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(v, "secret"), "secretName", s->oci_verify_secret);
	return v;
}

/* The approved plan an up Job applies: the Stack's plan Secret. */
static cJSON *plan_volume(const struct stack_job_in *in)
{
	cJSON *v = cJSON_CreateObject();
	char name[300];

	stack_job_plan_secret_name(in->name, name, sizeof(name));
	cJSON_AddStringToObject(v, "name", "pulumi-controller-plan");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(v, "secret"), "secretName", name);
	return v;
}

/* Registry credentials and CA, one projected volume (their keys differ:
 * .dockerconfigjson, ca.crt, tls.crt, tls.key). */
static cJSON *oci_volume(const struct stack_spec *s)
{
	cJSON *v = cJSON_CreateObject(), *proj, *sources;

	cJSON_AddStringToObject(v, "name", "pulumi-controller-oci");
	proj = cJSON_AddObjectToObject(v, "projected");
	sources = cJSON_AddArrayToObject(proj, "sources");
	for (int i = 0; i < 2; i++) {
		const char *name = i == 0 ? s->oci_secret : s->oci_cert_secret;
		cJSON *src;
		if (name == NULL)
			continue;
		src = cJSON_CreateObject();
		cJSON_AddStringToObject(cJSON_AddObjectToObject(src, "secret"), "name", name);
		cJSON_AddItemToArray(sources, src);
	}
	return v;
}

static void append_all(cJSON *to, const cJSON *from)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, from)
		cJSON_AddItemToArray(to, cJSON_Duplicate(it, 1));
}

/* The restricted profile, on the container (and runAsNonRoot, the user
 * and seccomp on the pod as well). */
static cJSON *container_security(void)
{
	cJSON *sc = cJSON_CreateObject(), *caps;

	cJSON_AddBoolToObject(sc, "allowPrivilegeEscalation", 0);
	cJSON_AddBoolToObject(sc, "readOnlyRootFilesystem", 1);
	cJSON_AddBoolToObject(sc, "runAsNonRoot", 1);
	cJSON_AddBoolToObject(sc, "privileged", 0);
	caps = cJSON_AddObjectToObject(sc, "capabilities");
	cJSON_AddItemToArray(cJSON_AddArrayToObject(caps, "drop"), cJSON_CreateString("ALL"));
	cJSON_AddStringToObject(cJSON_AddObjectToObject(sc, "seccompProfile"), "type", "RuntimeDefault");
	return sc;
}

static cJSON *pod_security(void)
{
	cJSON *sc = cJSON_CreateObject();

	cJSON_AddBoolToObject(sc, "runAsNonRoot", 1);
	cJSON_AddNumberToObject(sc, "runAsUser", RUNNER_UID);
	cJSON_AddNumberToObject(sc, "runAsGroup", RUNNER_UID);
	cJSON_AddNumberToObject(sc, "fsGroup", RUNNER_UID);
	cJSON_AddStringToObject(cJSON_AddObjectToObject(sc, "seccompProfile"), "type", "RuntimeDefault");
	return sc;
}

static cJSON *container(const struct stack_job_in *in, struct err *e)
{
	const struct stack_spec *s = in->spec;
	cJSON *c = cJSON_CreateObject(), *args, *env, *mounts, *upd;
	char *doc;
	int oci = s->source == STACK_SRC_OCI && (s->oci_secret || s->oci_cert_secret);
	int verify = s->source == STACK_SRC_OCI && s->oci_verify && s->oci_verify_secret;

	cJSON_AddStringToObject(c, "name", "update");
	cJSON_AddStringToObject(c, "image", in->image);
	cJSON_AddItemToObject(c, "command", cJSON_CreateStringArray((const char *[]){ "pulumi-controller",
	    "run-update" }, 2));
	args = cJSON_AddArrayToObject(c, "args");
	{
		const char *fixed[] = { "--work-dir", "/work", "--termination-log", TERMINATION_LOG,
			"--service-account-dir", KUBE_SA_DIR };
		for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
			cJSON_AddItemToArray(args, cJSON_CreateString(fixed[i]));
	}
	if (oci) {
		cJSON_AddItemToArray(args, cJSON_CreateString("--oci-secret-dir"));
		cJSON_AddItemToArray(args, cJSON_CreateString(MNT_OCI));
	}
	if (verify) {
		cJSON_AddItemToArray(args, cJSON_CreateString("--verify-keys-dir"));
		cJSON_AddItemToArray(args, cJSON_CreateString(MNT_KEYS));
	}
	if (in->plan_id) {
		cJSON_AddItemToArray(args, cJSON_CreateString("--plan-dir"));
		cJSON_AddItemToArray(args, cJSON_CreateString(STACK_JOB_PLAN_MOUNT));
	}
	if (in->plugins_dir) {
		cJSON_AddItemToArray(args, cJSON_CreateString("--plugins-dir"));
		cJSON_AddItemToArray(args, cJSON_CreateString(in->plugins_dir));
	}
	if (in->max_artifact_bytes != 0) {   /* the pod downloads under the controller's limit */
		char size[32];
		snprintf(size, sizeof(size), "%lld", in->max_artifact_bytes);
		cJSON_AddItemToArray(args, cJSON_CreateString("--max-artifact-size"));
		cJSON_AddItemToArray(args, cJSON_CreateString(size));
	}
	env = cJSON_AddArrayToObject(c, "env");
	upd = cJSON_CreateObject();
	cJSON_AddStringToObject(upd, "name", "PULUMI_CONTROLLER_UPDATE");
	cJSON_AddItemToArray(env, upd);
	if ((doc = stack_job_update_json_env(in, env)) == NULL) {
		cJSON_Delete(c);
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	}
	cJSON_AddStringToObject(upd, "value", doc);
	free(doc);
	{
		cJSON *home = cJSON_CreateObject();
		cJSON_AddStringToObject(home, "name", "HOME");
		cJSON_AddStringToObject(home, "value", "/work");
		cJSON_AddItemToArray(env, home);
	}
	append_all(env, s->runner.env);
	if (s->runner.resources)
		cJSON_AddItemToObject(c, "resources", cJSON_Duplicate(s->runner.resources, 1));
	cJSON_AddItemToObject(c, "securityContext", container_security());
	cJSON_AddStringToObject(c, "terminationMessagePath", TERMINATION_LOG);
	cJSON_AddStringToObject(c, "terminationMessagePolicy", "File");
	mounts = cJSON_AddArrayToObject(c, "volumeMounts");
	cJSON_AddItemToArray(mounts, mount("tmp", "/tmp", 0));
	cJSON_AddItemToArray(mounts, mount("work", "/work", 0));
	if (oci)
		cJSON_AddItemToArray(mounts, mount("pulumi-controller-oci", MNT_OCI, 1));
	if (verify)
		cJSON_AddItemToArray(mounts, mount("pulumi-controller-keys", MNT_KEYS, 1));
	if (in->plan_id)
		cJSON_AddItemToArray(mounts, mount("pulumi-controller-plan", STACK_JOB_PLAN_MOUNT, 1));
	append_all(mounts, s->runner.volume_mounts);
	return c;
}

static cJSON *pod_spec(const struct stack_job_in *in, struct err *e)
{
	const struct stack_spec *s = in->spec;
	cJSON *ps = cJSON_CreateObject(), *vols, *c;
	char sa[300];

	if ((c = container(in, e)) == NULL) {
		cJSON_Delete(ps);
		return NULL;
	}
	cJSON_AddStringToObject(ps, "restartPolicy", "Never");
	cJSON_AddStringToObject(ps, "serviceAccountName", stack_job_runner_sa(s, in->name, in->op, sa, sizeof(sa)));
	/* The pod writes the outputs Secret with its own token. */
	cJSON_AddBoolToObject(ps, "automountServiceAccountToken", 1);
	cJSON_AddBoolToObject(ps, "enableServiceLinks", 0);
	cJSON_AddItemToObject(ps, "securityContext", pod_security());
	if (s->runner.node_selector)
		cJSON_AddItemToObject(ps, "nodeSelector", cJSON_Duplicate(s->runner.node_selector, 1));
	if (s->runner.tolerations)
		cJSON_AddItemToObject(ps, "tolerations", cJSON_Duplicate(s->runner.tolerations, 1));
	if (s->runner.affinity)
		cJSON_AddItemToObject(ps, "affinity", cJSON_Duplicate(s->runner.affinity, 1));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(ps, "containers"), c);
	vols = cJSON_AddArrayToObject(ps, "volumes");
	cJSON_AddItemToArray(vols, empty_dir("tmp"));
	cJSON_AddItemToArray(vols, empty_dir("work"));
	if (s->source == STACK_SRC_OCI && (s->oci_secret || s->oci_cert_secret))
		cJSON_AddItemToArray(vols, oci_volume(s));
	if (s->source == STACK_SRC_OCI && s->oci_verify && s->oci_verify_secret)
		cJSON_AddItemToArray(vols, keys_volume(s));
	if (in->plan_id)
		cJSON_AddItemToArray(vols, plan_volume(in));
	append_all(vols, s->runner.volumes);
	return ps;
}

cJSON *stack_job_build(const struct stack_job_in *in, struct err *e)
{
	cJSON *job = cJSON_CreateObject(), *md, *spec, *tmpl, *tmd, *ps;
	char name[JOB_NAME_MAX + 1];

	if (stack_job_name_of(in->name, in->uid, in->op, in->fingerprint, name, sizeof(name)) < 0) {
		cJSON_Delete(job);
		return err_set(e, ERR_INVALID, "Stack %s/%s: no Job name can be made from fingerprint \"%s\"",
		    in->ns, in->name, in->fingerprint), NULL;
	}
	if ((ps = pod_spec(in, e)) == NULL) {
		cJSON_Delete(job);
		return NULL;
	}
	cJSON_AddStringToObject(job, "apiVersion", "batch/v1");
	cJSON_AddStringToObject(job, "kind", "Job");
	md = cJSON_AddObjectToObject(job, "metadata");
	cJSON_AddStringToObject(md, "name", name);
	cJSON_AddStringToObject(md, "namespace", in->ns);
	cJSON_AddItemToObject(md, "labels", labels(in));
	cJSON_AddItemToObject(md, "ownerReferences", owner_refs(in));
	spec = cJSON_AddObjectToObject(job, "spec");
	/* The controller owns retries (backoff, maxUpdateFailures): one pod. */
	cJSON_AddNumberToObject(spec, "backoffLimit", 0);
	cJSON_AddNumberToObject(spec, "activeDeadlineSeconds", (double)((in->spec->timeout_ms + 999) / 1000));
	cJSON_AddNumberToObject(spec, "ttlSecondsAfterFinished", (double)in->ttl_s);
	tmpl = cJSON_AddObjectToObject(spec, "template");
	tmd = cJSON_AddObjectToObject(tmpl, "metadata");
	cJSON_AddItemToObject(tmd, "labels", labels(in));
	if (in->spec->runner.annotations)
		cJSON_AddItemToObject(tmd, "annotations", cJSON_Duplicate(in->spec->runner.annotations, 1));
	cJSON_AddItemToObject(tmpl, "spec", ps);
	return job;
}

const char *stack_job_runner_sa(const struct stack_spec *s, const char *stack, const char *op, char *buf, size_t n)
{
	if (s->runner.service_account)
		return s->runner.service_account;
	/* Plan Jobs run the program under review: never as the up Job's
	 * ServiceAccount, which may write <name>-outputs. */
	snprintf(buf, n, "%s-%s", stack, str_eq(op, STACK_JOB_OP_PLAN) ? "planner" : "runner");
	return buf;
}

void stack_job_plan_secret_name(const char *stack, char *out, size_t n)
{
	snprintf(out, n, "%s-plan", stack);
}

void stack_job_plan_result_name(const char *stack, char *out, size_t n)
{
	snprintf(out, n, "%s-plan-result", stack);
}
