/*
 * stack_spec.c - a Stack's spec, parsed and validated into struct
 * stack_spec.  The API server's schema and CEL rules already refuse most bad
 * shapes; this is the controller's own check (an older CRD, or one applied
 * without validation, must not make it act on half a spec), and the place
 * where aliases and the classic shape are folded into one meaning:
 *
 *   destroyOnDelete      -> destroyOnFinalize
 *   interval             -> resyncFrequencySeconds
 *   cloud (a URL)        -> backend; any other value is ignored with a note
 *   programRef {repo}    -> the GitRepository <name>-program
 *   envs (classic map)   -> environment values, like envRefs
 *
 * Every message names the field at fault, so the Stalled condition says
 * what to change.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/secret.h"
#include "stack/stack_model.h"

#define RESYNC_MIN_MS 60000L
#define RETRY_MAX_DEFAULT_MS (86400L * 1000)
#define OCI_INTERVAL_DEFAULT_MS (5L * 60 * 1000)
#define OCI_INTERVAL_MIN_MS 1000L
/* Drift checks more often than this would only load the cloud's API. */
#define DRIFT_INTERVAL_MIN_MS 1000L

/* stack_spec_grow, _add_config and _add_env live in stack_spec_pko.c, which
 * this file calls: a split the other way would be a call cycle.  The typed
 * readers are stack_spec_field.c's, the Git sources stack_spec_git.c's. */

/* config: strings raw, anything else as JSON text set leaf by leaf. */
static int parse_config(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	const cJSON *cfg, *it;

	if (stack_field_typed(spec, "config", "spec.config", cJSON_IsObject, "a map of keys to values", &cfg, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, cfg) {
		struct stack_config *c;
		if (stack_spec_add_config(s, "spec.config", it->string, e) < 0)
			return -1;
		c = &s->config[s->n_config - 1];
		c->v.kind = STACK_VAL_LITERAL;
		if (cJSON_IsString(it)) {
			c->v.literal = strdup(it->valuestring);
		} else if (cJSON_IsNull(it)) {
			return err_set(e, ERR_INVALID, "spec.config.%s: null is not a value", it->string), -1;
		} else {
			c->v.literal = cJSON_PrintUnformatted(it);
			c->v.structured = 1;
		}
		if (c->v.literal == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
	}
	return 0;
}

static int parse_config_refs(const cJSON *spec, const char *ns, struct stack_spec *s, struct err *e)
{
	const cJSON *refs, *sec, *it;
	char f[200];

	if (stack_field_typed(spec, "configRef", "spec.configRef", cJSON_IsObject, "a map", &refs, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, refs) {
		struct stack_config *c;
		int json = 0;
		if (stack_spec_add_config(s, "spec.configRef", it->string, e) < 0)
			return -1;
		c = &s->config[s->n_config - 1];
		snprintf(f, sizeof(f), "spec.configRef.%s", it->string);
		if (stack_spec_key_ref(it, f, ns, STACK_VAL_CONFIGMAP, &c->v, e) < 0)
			return -1;
		strncat(f, ".json", sizeof(f) - strlen(f) - 1);
		if (stack_field_bool(it, "json", f, &json, e) < 0)
			return -1;
		c->v.structured = json;
	}
	if (stack_field_typed(spec, "secretsRef", "spec.secretsRef", cJSON_IsObject, "a map", &sec, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, sec) {
		if (stack_spec_add_config(s, "spec.secretsRef", it->string, e) < 0)
			return -1;
		s->config[s->n_config - 1].secret = 1;
		snprintf(f, sizeof(f), "spec.secretsRef.%s", it->string);
		if (stack_spec_resource_ref(it, f, ns, &s->config[s->n_config - 1].v, e) < 0)
			return -1;
	}
	return 0;
}

static int config_set_twice(const struct stack_spec *s, struct err *e)
{
	for (size_t i = 0; i < s->n_config; i++)
		for (size_t j = i + 1; j < s->n_config; j++)
			if (strcmp(s->config[i].key, s->config[j].key) == 0)
				return err_set(e, ERR_INVALID, "config key %s is set twice (config, configRef, "
				    "secretsRef, secrets)", s->config[i].key), -1;
	return 0;
}

/* envRefs (the operator's) and envs (the classic map). */
static int parse_env(const cJSON *spec, const char *ns, struct stack_spec *s, struct err *e)
{
	const cJSON *refs, *envs = stack_field(spec, "envs"), *it;
	char f[200];

	if (stack_field_typed(spec, "envRefs", "spec.envRefs", cJSON_IsObject, "a map", &refs, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, refs) {
		if (stack_spec_add_env(s, "spec.envRefs", it->string, e) < 0)
			return -1;
		snprintf(f, sizeof(f), "spec.envRefs.%s", it->string);
		if (stack_spec_resource_ref(it, f, ns, &s->env[s->n_env - 1].v, e) < 0)
			return -1;
	}
	if (envs == NULL || cJSON_IsNull(envs))
		return 0;
	/* The operator's deprecated form; told apart by its JSON type (the
	 * schema keeps envs unknown-fields-preserving for both). */
	if (cJSON_IsArray(envs))
		return stack_spec_parse_env_from(envs, "spec.envs", STACK_VAL_CONFIGMAP, s, e);
	if (!cJSON_IsObject(envs))
		return err_set(e, ERR_INVALID, "spec.envs: must be a map of names to values"), -1;
	cJSON_ArrayForEach(it, envs) {
		const cJSON *from = stack_field(it, "valueFrom");
		struct stack_value *v;
		if (stack_spec_add_env(s, "spec.envs", it->string, e) < 0)
			return -1;
		v = &s->env[s->n_env - 1].v;
		snprintf(f, sizeof(f), "spec.envs.%s", it->string);
		if (cJSON_IsString(stack_field(it, "value"))) {
			v->kind = STACK_VAL_LITERAL;
			if ((v->literal = strdup(stack_field(it, "value")->valuestring)) == NULL)
				return err_set(e, ERR_NOMEM, "out of memory"), -1;
		} else if (stack_field(from, "secretKeyRef") != NULL) {
			strncat(f, ".valueFrom.secretKeyRef", sizeof(f) - strlen(f) - 1);
			if (stack_spec_key_ref(stack_field(from, "secretKeyRef"), f, ns, STACK_VAL_SECRET, v, e) < 0)
				return -1;
		} else if (stack_field(from, "configMapKeyRef") != NULL) {
			strncat(f, ".valueFrom.configMapKeyRef", sizeof(f) - strlen(f) - 1);
			if (stack_spec_key_ref(stack_field(from, "configMapKeyRef"), f, ns, STACK_VAL_CONFIGMAP, v, e) < 0)
				return -1;
		} else {
			return err_set(e, ERR_INVALID, "%s: needs value or valueFrom.secretKeyRef / "
			    "valueFrom.configMapKeyRef", f), -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ sources */

static int parse_flux_source(const cJSON *fs, struct stack_spec *s, struct err *e)
{
	const cJSON *ref = stack_field(fs, "sourceRef");

	s->source = STACK_SRC_FLUX;
	if (!cJSON_IsObject(ref))
		return err_set(e, ERR_INVALID, "spec.fluxSource.sourceRef: is required"), -1;
	if (stack_field_str(ref, "kind", "spec.fluxSource.sourceRef.kind", &s->src_kind, e) < 0 ||
	    stack_field_str(ref, "name", "spec.fluxSource.sourceRef.name", &s->src_name, e) < 0 ||
	    stack_field_str(fs, "dir", "spec.fluxSource.dir", &s->dir, e) < 0)
		return -1;
	if (s->src_kind == NULL || (strcmp(s->src_kind, "GitRepository") != 0 &&
	    strcmp(s->src_kind, "OCIRepository") != 0 && strcmp(s->src_kind, "Bucket") != 0))
		return err_set(e, ERR_INVALID, "spec.fluxSource.sourceRef.kind: must be GitRepository, "
		    "OCIRepository or Bucket"), -1;
	if (s->src_name == NULL || s->src_name[0] == '\0')
		return err_set(e, ERR_INVALID, "spec.fluxSource.sourceRef.name: is required"), -1;
	if (stack_field(ref, "namespace") != NULL)
		return err_set(e, ERR_INVALID, "spec.fluxSource.sourceRef.namespace: the source must be in "
		    "the Stack's namespace"), -1;
	return 0;
}

/* ociSource.verify {provider, secretRef}: key-based cosign verification
 * only.  Flux's keyless fields (matchOIDCIdentity, trustedRootSecretRef)
 * are refused rather than ignored: ignoring them would verify against
 * keys the user did not mean. */
static int parse_oci_verify(const cJSON *v, struct stack_spec *s, struct err *e)
{
	const cJSON *sec;

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsObject(v))
		return err_set(e, ERR_INVALID, "spec.ociSource.verify: must be an object"), -1;
	if (stack_field_only(v, "provider", "spec.ociSource.verify.provider", "cosign", "only cosign is", e) < 0)
		return -1;
	if (stack_field(v, "matchOIDCIdentity") != NULL || stack_field(v, "trustedRootSecretRef") != NULL)
		return err_set(e, ERR_INVALID, "spec.ociSource.verify.%s: keyless verification is not "
		    "supported; give the public keys in verify.secretRef", stack_field(v, "matchOIDCIdentity") ?
		    "matchOIDCIdentity" : "trustedRootSecretRef"), -1;
	if (stack_field_obj(v, "secretRef", "spec.ociSource.verify.secretRef", &sec, e) < 0 ||
	    stack_field_str(sec, "name", "spec.ociSource.verify.secretRef.name", &s->oci_verify_secret, e) < 0)
		return -1;
	if (s->oci_verify_secret == NULL || s->oci_verify_secret[0] == '\0')
		return err_set(e, ERR_INVALID, "spec.ociSource.verify.secretRef.name: is required (a Secret "
		    "whose keys ending in .pub are the trusted public keys; keyless verification is not "
		    "supported)"), -1;
	s->oci_verify = 1;
	return 0;
}

static int parse_oci_source(const cJSON *os, struct stack_spec *s, struct err *e)
{
	const cJSON *ref, *sel, *sec, *cert;
	int nref;

	s->source = STACK_SRC_OCI;
	s->oci_interval_ms = OCI_INTERVAL_DEFAULT_MS;
	if (stack_field_obj(os, "ref", "spec.ociSource.ref", &ref, e) < 0 ||
	    stack_field_obj(os, "layerSelector", "spec.ociSource.layerSelector", &sel, e) < 0 ||
	    stack_field_obj(os, "secretRef", "spec.ociSource.secretRef", &sec, e) < 0 ||
	    stack_field_obj(os, "certSecretRef", "spec.ociSource.certSecretRef", &cert, e) < 0 ||
	    stack_field_only(sel, "operation", "spec.ociSource.layerSelector.operation", "extract",
	        "a program is always extracted (extract)", e) < 0)
		return -1;
	if (stack_field_str(os, "url", "spec.ociSource.url", &s->oci_url, e) < 0 ||
	    stack_field_str(os, "dir", "spec.ociSource.dir", &s->dir, e) < 0 ||
	    stack_field_str(ref, "tag", "spec.ociSource.ref.tag", &s->oci_tag, e) < 0 ||
	    stack_field_str(ref, "digest", "spec.ociSource.ref.digest", &s->oci_digest, e) < 0 ||
	    stack_field_str(ref, "semver", "spec.ociSource.ref.semver", &s->oci_semver, e) < 0 ||
	    stack_field_str(sel, "mediaType", "spec.ociSource.layerSelector.mediaType", &s->oci_media_type, e) < 0 ||
	    stack_field_str(sec, "name", "spec.ociSource.secretRef.name", &s->oci_secret, e) < 0 ||
	    stack_field_str(cert, "name", "spec.ociSource.certSecretRef.name",
	        &s->oci_cert_secret, e) < 0 ||
	    stack_field_bool(os, "insecure", "spec.ociSource.insecure", &s->oci_insecure, e) < 0 ||
	    stack_field_duration(os, "interval", "spec.ociSource.interval", &s->oci_interval_ms, e) < 0)
		return -1;
	/* Each poll is a registry request; Flux's OCIRepository is not polled
	 * more often either in practice. */
	if (s->oci_interval_ms < OCI_INTERVAL_MIN_MS)
		return err_set(e, ERR_INVALID, "spec.ociSource.interval: must be at least 1s"), -1;
	if (s->oci_url == NULL || strncmp(s->oci_url, "oci://", 6) != 0 || s->oci_url[6] == '\0')
		return err_set(e, ERR_INVALID, "spec.ociSource.url: must be oci://host/repository"), -1;
	nref = (s->oci_tag != NULL) + (s->oci_digest != NULL) + (s->oci_semver != NULL);
	if (nref > 1)
		return err_set(e, ERR_INVALID, "spec.ociSource.ref: set one of tag, digest and semver"), -1;
	if (nref == 0 && (s->oci_tag = strdup("latest")) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	return parse_oci_verify(stack_field(os, "verify"), s, e);
}

/* The classic programRef {repo, ref}: a GitRepository the controller owns. */
static int parse_source(const cJSON *spec, const char *name, const char *ns, struct stack_spec *s,
    struct err *e)
{
	const cJSON *fs = stack_field(spec, "fluxSource"), *os = stack_field(spec, "ociSource");
	const cJSON *pr = stack_field(spec, "programRef");
	int git = stack_field_present(spec, "projectRepo");
	int n = cJSON_IsObject(fs) + cJSON_IsObject(os) + cJSON_IsObject(pr) + git;
	static const char *git_fields[] = { "commit", "branch", "repoDir", "gitAuth", "gitAuthSecret" };
	static const char *sources[] = { "fluxSource", "ociSource", "programRef" };

	if (stack_field_present(spec, "projectRepo") && !cJSON_IsString(stack_field(spec, "projectRepo")))
		return err_set(e, ERR_INVALID, "spec.projectRepo: must be a string (a Git URL)"), -1;
	/* The operator too reads them only with projectRepo (and refuses them
	 * without it): ignored, they would leave a Stack on another source. */
	for (size_t i = 0; !git && i < sizeof(git_fields) / sizeof(git_fields[0]); i++)
		if (stack_field_present(spec, git_fields[i]) && !(cJSON_IsString(stack_field(spec, git_fields[i])) &&
		    stack_field(spec, git_fields[i])->valuestring[0] == '\0'))
			return err_set(e, ERR_INVALID, "spec.%s: only with spec.projectRepo", git_fields[i]), -1;

	/* A source given as a string or a list would otherwise be ignored, and
	 * the Stack would run from whichever source happened to be an object. */
	for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
		const cJSON *v = stack_field(spec, sources[i]);
		if (v != NULL && !cJSON_IsObject(v) && !cJSON_IsNull(v))
			return err_set(e, ERR_INVALID, "spec.%s: must be an object", sources[i]), -1;
	}
	if (n != 1)
		return err_set(e, ERR_INVALID, "spec: set exactly one of fluxSource, ociSource, programRef and "
		    "projectRepo (found %d)", n), -1;
	if (cJSON_IsObject(fs))
		return parse_flux_source(fs, s, e);
	if (cJSON_IsObject(os))
		return parse_oci_source(os, s, e);
	if (git)
		return stack_spec_parse_project_repo(spec, name, ns, s, e);
	return stack_spec_parse_program_ref(pr, name, s, e);
}

/* `cloud` is the classic name of the backend; only a URL is one. */
static int parse_backend(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	static const char *schemes[] = { "s3://", "gs://", "azblob://", "file://", "https://", "http://" };
	char *cloud = NULL;

	if (stack_field_str(spec, "backend", "spec.backend", &s->backend, e) < 0 ||
	    stack_field_str(spec, "cloud", "spec.cloud", &cloud, e) < 0 ||
	    stack_field_str(spec, "secretsProvider", "spec.secretsProvider", &s->secrets_provider, e) < 0)
		return free(cloud), -1;
	if (cloud == NULL)
		return 0;
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (strncmp(cloud, schemes[i], strlen(schemes[i])) == 0) {
			if (s->backend == NULL) {
				s->backend = cloud;
				return 0;
			}
			s->cloud_shadowed = cloud;
			return 0;
		}
	s->cloud_ignored = cloud;
	return 0;
}

/* ------------------------------------------------------------ safety */

static int add_prereq(struct stack_spec *s, const cJSON *it, const char *field, size_t i, int flux,
    struct err *e)
{
	struct stack_prereq *r;
	const cJSON *req = NULL;
	char fn[64], fns[64], fr[64], fd[96];

	if (!cJSON_IsObject(it))
		return err_set(e, ERR_INVALID, "%s[%zu]: must be an object", field, i), -1;
	if (stack_spec_grow((void **)&s->prereqs, s->n_prereqs, sizeof(*s->prereqs), e) < 0)
		return -1;
	r = &s->prereqs[s->n_prereqs++];
	snprintf(fn, sizeof(fn), "%s[%zu].name", field, i);
	snprintf(fns, sizeof(fns), "%s[%zu].namespace", field, i);
	snprintf(fr, sizeof(fr), "%s[%zu].requirement", field, i);
	snprintf(fd, sizeof(fd), "%s.succeededWithinDuration", fr);
	if (stack_field_str(it, "name", fn, &r->name, e) < 0 ||
	    (flux && stack_field_str(it, "namespace", fns, &r->namespace, e) < 0) ||
	    (!flux && stack_field_obj(it, "requirement", fr, &req, e) < 0) ||
	    (req && stack_field_duration(req, "succeededWithinDuration", fd, &r->within_ms, e) < 0))
		return -1;
	/* A shorter window would have the prerequisite updated again and again:
	 * its own update takes longer than that. */
	if (r->within_ms > 0 && r->within_ms < STACK_PREREQ_MIN_WITHIN_MS)
		return err_set(e, ERR_INVALID, "%s: must be at least 1m (a shorter one would have the prerequisite "
		    "run again and again)", fd), -1;
	if (r->name == NULL || !stack_object_name_ok(r->name))
		return err_set(e, ERR_INVALID, "%s: must be the name of a Stack", fn), -1;
	if (r->namespace && !stack_object_name_ok(r->namespace))
		return err_set(e, ERR_INVALID, "%s: must be a namespace name", fns), -1;
	return 0;
}

/* spec.prerequisites and its Flux-style alias spec.dependsOn, as one list. */
static int parse_prereqs(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	static const struct { const char *key, *field; int flux; } lists[] = {
		{ "prerequisites", "spec.prerequisites", 0 },
		{ "dependsOn", "spec.dependsOn", 1 },
	};

	for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
		const cJSON *v, *it;
		size_t i = 0;
		if (stack_field_typed(spec, lists[l].key, lists[l].field, cJSON_IsArray, "a list", &v, e) < 0)
			return -1;
		cJSON_ArrayForEach(it, v)
			if (add_prereq(s, it, lists[l].field, i++, lists[l].flux, e) < 0)
				return -1;
	}
	return 0;
}

/* approval, approvedPlan, continue, driftDetection. */
static int parse_safety(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	const cJSON *dd = NULL;
	char *approval = NULL;

	if (stack_field_str(spec, "approval", "spec.approval", &approval, e) < 0)
		return -1;
	if (approval && strcmp(approval, "Manual") != 0 && strcmp(approval, "Auto") != 0) {
		free(approval);
		return err_set(e, ERR_INVALID, "spec.approval: must be Auto or Manual"), -1;
	}
	s->approval_manual = approval && strcmp(approval, "Manual") == 0;
	free(approval);
	if (stack_field_str(spec, "approvedPlan", "spec.approvedPlan", &s->approved_plan, e) < 0 ||
	    stack_field_bool(spec, "continue", "spec.continue", &s->continue_approval, e) < 0 ||
	    stack_field_obj(spec, "driftDetection", "spec.driftDetection", &dd, e) < 0)
		return -1;
	if (dd && (stack_field_duration(dd, "interval", "spec.driftDetection.interval", &s->drift_interval_ms, e) < 0 ||
	    stack_field_bool(dd, "remediate", "spec.driftDetection.remediate", &s->drift_remediate, e) < 0))
		return -1;
	if (dd && s->drift_interval_ms == 0)
		return err_set(e, ERR_INVALID, "spec.driftDetection.interval: is required (such as 10m)"), -1;
	if (s->drift_interval_ms > 0 && s->drift_interval_ms < DRIFT_INTERVAL_MIN_MS)
		s->drift_interval_ms = DRIFT_INTERVAL_MIN_MS;
	for (size_t i = 0; i < s->n_policy_packs; i++)
		if (s->policy_packs[i][0] == '/' || stack_path_has_dotdot(s->policy_packs[i]))
			return err_set(e, ERR_INVALID, "spec.policyPacks[%zu] \"%s\": must be a relative path "
			    "inside the artifact without \"..\"", i, s->policy_packs[i]), -1;
	return parse_prereqs(spec, s, e);
}

/*
 * Fields of the operator's Stack that the schema takes (so its manifests
 * apply as written) but this controller does not act on yet.  Ignoring one
 * would surprise: a workspaceTemplate run in the controller's own pod, a
 * stack created that was meant to exist already.  Each is refused by name until it is served; the
 * operator's no-ops (expectNoRefreshChanges, retryOnUpdateConflict,
 * shallow, workspaceReclaimPolicy, updateTemplate) are accepted and mean
 * nothing here either (docs/migrating-from-pko.md).
 */
static int refuse_unserved(const cJSON *spec, struct err *e)
{
	static const struct { const char *field, *instead; } unserved[] = {
		{ "workspaceTemplate", "runner: {type: Job, podTemplate}" },
		{ "serviceAccountName", "runner: {type: Job, serviceAccountName}" },
	};

	for (size_t i = 0; i < sizeof(unserved) / sizeof(unserved[0]); i++) {
		const cJSON *v = stack_field(spec, unserved[i].field);
		if (v == NULL || cJSON_IsNull(v) || cJSON_IsFalse(v) ||
		    ((cJSON_IsArray(v) || cJSON_IsObject(v)) && cJSON_GetArraySize(v) == 0) ||
		    (cJSON_IsString(v) && v->valuestring[0] == '\0'))
			continue;
		return err_set(e, ERR_INVALID, "spec.%s: the operator's field is not acted on by this "
		    "controller yet; use %s (docs/migrating-from-pko.md)", unserved[i].field,
		    unserved[i].instead), -1;
	}
	return 0;
}

/* ------------------------------------------------------------ the spec */

int stack_spec_parse(const cJSON *obj, const struct stack_opts *o, struct stack_spec *s,
    struct err *e)
{
	const cJSON *spec = stack_field(obj, "spec");
	const char *name = kube_obj_str(obj, "metadata.name");
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	int dod = 0, dod2 = 0;
	long interval = 0;
	const cJSON *mf = stack_field(spec, "maxUpdateFailures");

	memset(s, 0, sizeof(*s));
	err_clear(e);
	s->resync_ms = RESYNC_MIN_MS;
	s->retry_max_ms = RETRY_MAX_DEFAULT_MS;
	s->timeout_ms = o->update_timeout_ms;
	s->max_failures = o->max_failures;
	if (!cJSON_IsObject(spec) || name == NULL)
		return err_set(e, ERR_INVALID, "spec: is required"), -1;
	if (stack_field_str(spec, "stack", "spec.stack", &s->stack, e) < 0)
		return -1;
	/* The classic manifest names no stack: it is the object's name. */
	if (s->stack == NULL && cJSON_IsObject(stack_field(spec, "programRef")) && (s->stack = strdup(name)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	if (s->stack == NULL || s->stack[0] == '\0')
		return err_set(e, ERR_INVALID, "spec.stack: is required (the Pulumi stack name)"), -1;
	if (refuse_unserved(spec, e) < 0 ||
	    parse_source(spec, name, ns, s, e) < 0 || parse_backend(spec, s, e) < 0 ||
	    parse_config(spec, s, e) < 0 || parse_config_refs(spec, ns, s, e) < 0 || parse_env(spec, ns, s, e) < 0 ||
	    stack_spec_parse_pko(spec, s, e) < 0 || config_set_twice(s, e) < 0)
		return -1;
	s->n_env_spec = s->n_env;
	if (stack_field_bool(spec, "refresh", "spec.refresh", &s->refresh, e) < 0 ||
	    stack_field_bool(spec, "preview", "spec.preview", &s->preview, e) < 0 ||
	    stack_field_bool(spec, "suspend", "spec.suspend", &s->suspend, e) < 0 ||
	    stack_field_bool(spec, "destroyOnFinalize", "spec.destroyOnFinalize", &dod, e) < 0 ||
	    stack_field_bool(spec, "destroyOnDelete", "spec.destroyOnDelete", &dod2, e) < 0 ||
	    stack_field_bool(spec, "continueResyncOnCommitMatch", "spec.continueResyncOnCommitMatch",
	        &s->continue_resync, e) < 0 ||
	    stack_field_strings(spec, "targets", "spec.targets", &s->targets, &s->n_targets, e) < 0 ||
	    stack_field_strings(spec, "policyPacks", "spec.policyPacks", &s->policy_packs, &s->n_policy_packs, e) < 0 ||
	    stack_field_seconds(spec, "resyncFrequencySeconds", "spec.resyncFrequencySeconds", &s->resync_ms, e) < 0 ||
	    stack_field_duration(spec, "interval", "spec.interval", &interval, e) < 0 ||
	    stack_field_seconds(spec, "retryMaxBackoffDurationSeconds", "spec.retryMaxBackoffDurationSeconds",
	        &s->retry_max_ms, e) < 0 ||
	    stack_field_duration(spec, "timeout", "spec.timeout", &s->timeout_ms, e) < 0)
		return -1;
	if (parse_safety(spec, s, e) < 0 || stack_runner_parse(spec, o, s, e) < 0)
		return -1;
	s->destroy_on_finalize = dod || dod2;
	if (interval > 0)
		s->resync_ms = interval;
	if (s->resync_ms < RESYNC_MIN_MS)
		s->resync_ms = RESYNC_MIN_MS;
	if (mf != NULL && !cJSON_IsNull(mf)) {
		if (!cJSON_IsNumber(mf) || mf->valuedouble < 1 || mf->valuedouble > 1000)
			return err_set(e, ERR_INVALID, "spec.maxUpdateFailures: must be 1..1000"), -1;
		s->max_failures = (int)mf->valuedouble;
	}
	if (s->dir != NULL && (s->dir[0] == '/' || stack_path_has_dotdot(s->dir)))
		return err_set(e, ERR_INVALID, "dir \"%s\": must be a relative path inside the artifact "
		    "without \"..\"", s->dir), -1;
	return 0;
}

static void value_free(struct stack_value *v)
{
	if (v->literal)
		secret_free(v->literal);
	free(v->object);
	free(v->key);
}

static void strings_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void stack_spec_free(struct stack_spec *s)
{
	mem_free_all(s->stack, s->src_kind, s->src_name, s->dir, s->oci_url, s->oci_tag, s->oci_digest,
	    s->oci_semver, s->oci_media_type, s->oci_secret, s->oci_cert_secret, s->oci_verify_secret,
	    s->prog_repo, s->prog_ref, s->backend, s->secrets_provider, s->cloud_ignored, s->cloud_shadowed,
	    s->approved_plan);
	for (size_t i = 0; i < s->n_config; i++) {
		free(s->config[i].key);
		value_free(&s->config[i].v);
	}
	free(s->config);
	for (size_t i = 0; i < s->n_env; i++) {
		free(s->env[i].name);
		value_free(&s->env[i].v);
	}
	free(s->env);
	free(s->git_auth.secret);
	for (int i = 0; i < s->git_auth.n; i++)
		value_free(&s->git_auth.v[i]);
	for (size_t i = 0; i < s->n_env_from; i++)
		free(s->env_from[i].object);
	free(s->env_from);
	strings_free(s->targets, s->n_targets);
	strings_free(s->policy_packs, s->n_policy_packs);
	strings_free(s->environments, s->n_environments);
	for (size_t i = 0; i < s->n_prereqs; i++) {
		free(s->prereqs[i].name);
		free(s->prereqs[i].namespace);
	}
	free(s->prereqs);
	stack_runner_free(&s->runner);
	memset(s, 0, sizeof(*s));
}

void stack_artifact_free(struct stack_artifact *a)
{
	mem_free_all(a->revision, a->digest, a->url, a->index_digest, a->content);
	memset(a, 0, sizeof(*a));
}
