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

#include "base/duration.h"
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

static const cJSON *item(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* o[k] into *v when it is what is() accepts: 0 (*v NULL when absent or
 * null); -1 with "field: must be <what>" when it is something else. */
static int typed(const cJSON *o, const char *k, const char *field, cJSON_bool (*is)(const cJSON *),
    const char *what, const cJSON **v, struct err *e)
{
	*v = item(o, k);
	if (*v == NULL || cJSON_IsNull(*v)) {
		*v = NULL;
		return 0;
	}
	if (!is(*v)) {
		*v = NULL;
		return err_set(e, ERR_INVALID, "%s: must be %s", field, what), -1;
	}
	return 0;
}

/* A string field: NULL when absent; -1 when present but not a string. */
static int get_str(const cJSON *o, const char *k, const char *field, char **out, struct err *e)
{
	const cJSON *v;

	*out = NULL;
	if (typed(o, k, field, cJSON_IsString, "a string", &v, e) < 0)
		return -1;
	if (v != NULL && (*out = strdup(v->valuestring)) == NULL)
		return err_set(e, ERR_NOMEM, "%s: out of memory", field), -1;
	return 0;
}

/* A string field that is either absent or the one value this controller
 * supports; any other is refused, naming it and saying why (the tail). */
static int get_only(const cJSON *o, const char *k, const char *field, const char *only, const char *why,
    struct err *e)
{
	char *v;
	int other;

	if (get_str(o, k, field, &v, e) < 0)
		return -1;
	other = v != NULL && strcmp(v, only) != 0;
	if (other)
		err_set(e, ERR_INVALID, "%s: \"%s\" is not supported; %s", field, v, why);
	free(v);
	return other ? -1 : 0;
}

/* An object field: 0 with *out (NULL when absent or null); -1 when it is
 * something else, which must not be read as "absent" (a string secretRef
 * would otherwise pull anonymously). */
static int get_obj(const cJSON *o, const char *k, const char *field, const cJSON **out, struct err *e)
{
	return typed(o, k, field, cJSON_IsObject, "an object", out, e);
}

static int get_bool(const cJSON *o, const char *k, const char *field, int *out, struct err *e)
{
	const cJSON *v;

	if (typed(o, k, field, cJSON_IsBool, "true or false", &v, e) < 0)
		return -1;
	if (v != NULL)
		*out = cJSON_IsTrue(v);
	return 0;
}

#define DURATION_WANTED "a positive duration such as 90s or 5m"

/* A Go duration string ("90s", "5m"); *ms left alone when absent. */
static int get_duration(const cJSON *o, const char *k, const char *field, long *ms, struct err *e)
{
	const cJSON *v;
	long d;

	if (typed(o, k, field, cJSON_IsString, DURATION_WANTED, &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if (duration_parse_ms(v->valuestring, &d) < 0 || d <= 0)
		return err_set(e, ERR_INVALID, "%s: must be " DURATION_WANTED, field), -1;
	*ms = d;
	return 0;
}

/* A whole number of seconds; *ms left alone when absent or 0. */
static int get_seconds(const cJSON *o, const char *k, const char *field, long *ms, struct err *e)
{
	const cJSON *v;

	if (typed(o, k, field, cJSON_IsNumber, "a number of seconds", &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if (v->valuedouble < 0 || v->valuedouble > 10L * 365 * 86400)
		return err_set(e, ERR_INVALID, "%s: must be a number of seconds", field), -1;
	if (v->valuedouble > 0)
		*ms = (long)v->valuedouble * 1000;
	return 0;
}

static int get_strings(const cJSON *o, const char *k, const char *field, char ***out, size_t *n,
    struct err *e)
{
	const cJSON *v, *it;
	size_t i = 0;

	*out = NULL;
	*n = 0;
	if (typed(o, k, field, cJSON_IsArray, "a list of strings", &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if ((*out = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof(char *))) == NULL)
		return err_set(e, ERR_NOMEM, "%s: out of memory", field), -1;
	cJSON_ArrayForEach(it, v) {
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
			return err_set(e, ERR_INVALID, "%s[%zu]: must be a non-empty string", field, i), -1;
		if (((*out)[i] = strdup(it->valuestring)) == NULL)
			return err_set(e, ERR_NOMEM, "%s: out of memory", field), -1;
		*n = ++i;
	}
	return 0;
}

/* ------------------------------------------------------------ values */

/* {name, key} of a secretKeyRef / configMapKeyRef / ResourceRef.secret.
 * A namespace is allowed only when it is the Stack's own (ns): the
 * operator's CRD says so, and its manifests spell it out. */
static int parse_key_ref(const cJSON *ref, const char *field, const char *ns, enum stack_value_kind kind,
    struct stack_value *v, struct err *e)
{
	const cJSON *rns = item(ref, "namespace");
	char f[200];

	if (!cJSON_IsObject(ref))
		return err_set(e, ERR_INVALID, "%s: must be an object with name and key", field), -1;
	if (rns != NULL && !cJSON_IsNull(rns) && (!cJSON_IsString(rns) ||
	    (rns->valuestring[0] != '\0' && (ns == NULL || strcmp(rns->valuestring, ns) != 0))))
		return err_set(e, ERR_INVALID, "%s.namespace: cross-namespace references are not allowed; "
		    "the object must be in the Stack's namespace", field), -1;
	v->kind = kind;
	snprintf(f, sizeof(f), "%s.name", field);
	if (get_str(ref, "name", f, &v->object, e) < 0)
		return -1;
	snprintf(f, sizeof(f), "%s.key", field);
	if (get_str(ref, "key", f, &v->key, e) < 0)
		return -1;
	if (v->object == NULL || v->key == NULL || !*v->object || !*v->key)
		return err_set(e, ERR_INVALID, "%s: name and key are required", field), -1;
	return 0;
}

/* The operator's ResourceRef: {type: Literal|Secret, literal: {value},
 * secret: {name, key}}. */
static int parse_resource_ref(const cJSON *ref, const char *field, const char *ns, struct stack_value *v,
    struct err *e)
{
	const cJSON *type = item(ref, "type");
	char f[200];

	if (!cJSON_IsObject(ref) || !cJSON_IsString(type))
		return err_set(e, ERR_INVALID, "%s.type: must be Literal or Secret", field), -1;
	if (strcmp(type->valuestring, "Literal") == 0) {
		const cJSON *lit = item(ref, "literal");
		v->kind = STACK_VAL_LITERAL;
		snprintf(f, sizeof(f), "%s.literal.value", field);
		if (!cJSON_IsObject(lit) || get_str(lit, "value", f, &v->literal, e) < 0 || v->literal == NULL)
			return e->code ? -1 : (err_set(e, ERR_INVALID, "%s: is required", f), -1);
		return 0;
	}
	if (strcmp(type->valuestring, "Secret") == 0) {
		snprintf(f, sizeof(f), "%s.secret", field);
		return parse_key_ref(item(ref, "secret"), f, ns, STACK_VAL_SECRET, v, e);
	}
	if (strcmp(type->valuestring, "Env") == 0 || strcmp(type->valuestring, "FS") == 0)
		return err_set(e, ERR_INVALID, "%s.type: %s references are not supported (the controller "
		    "runs no workspace pod to read them from); use Secret or Literal", field,
		    type->valuestring), -1;
	return err_set(e, ERR_INVALID, "%s.type: \"%s\" is not Literal or Secret", field,
	    type->valuestring), -1;
}

/* stack_spec_grow, _add_config and _add_env live in stack_spec_pko.c, which
 * this file calls: a split the other way would be a call cycle. */

/* config: strings raw, anything else as JSON text set leaf by leaf. */
static int parse_config(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	const cJSON *cfg, *it;

	if (typed(spec, "config", "spec.config", cJSON_IsObject, "a map of keys to values", &cfg, e) < 0)
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

	if (typed(spec, "configRef", "spec.configRef", cJSON_IsObject, "a map", &refs, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, refs) {
		struct stack_config *c;
		int json = 0;
		if (stack_spec_add_config(s, "spec.configRef", it->string, e) < 0)
			return -1;
		c = &s->config[s->n_config - 1];
		snprintf(f, sizeof(f), "spec.configRef.%s", it->string);
		if (parse_key_ref(it, f, ns, STACK_VAL_CONFIGMAP, &c->v, e) < 0)
			return -1;
		strncat(f, ".json", sizeof(f) - strlen(f) - 1);
		if (get_bool(it, "json", f, &json, e) < 0)
			return -1;
		c->v.structured = json;
	}
	if (typed(spec, "secretsRef", "spec.secretsRef", cJSON_IsObject, "a map", &sec, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, sec) {
		if (stack_spec_add_config(s, "spec.secretsRef", it->string, e) < 0)
			return -1;
		s->config[s->n_config - 1].secret = 1;
		snprintf(f, sizeof(f), "spec.secretsRef.%s", it->string);
		if (parse_resource_ref(it, f, ns, &s->config[s->n_config - 1].v, e) < 0)
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
	const cJSON *refs, *envs = item(spec, "envs"), *it;
	char f[200];

	if (typed(spec, "envRefs", "spec.envRefs", cJSON_IsObject, "a map", &refs, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, refs) {
		if (stack_spec_add_env(s, "spec.envRefs", it->string, e) < 0)
			return -1;
		snprintf(f, sizeof(f), "spec.envRefs.%s", it->string);
		if (parse_resource_ref(it, f, ns, &s->env[s->n_env - 1].v, e) < 0)
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
		const cJSON *from = item(it, "valueFrom");
		struct stack_value *v;
		if (stack_spec_add_env(s, "spec.envs", it->string, e) < 0)
			return -1;
		v = &s->env[s->n_env - 1].v;
		snprintf(f, sizeof(f), "spec.envs.%s", it->string);
		if (cJSON_IsString(item(it, "value"))) {
			v->kind = STACK_VAL_LITERAL;
			if ((v->literal = strdup(item(it, "value")->valuestring)) == NULL)
				return err_set(e, ERR_NOMEM, "out of memory"), -1;
		} else if (item(from, "secretKeyRef") != NULL) {
			strncat(f, ".valueFrom.secretKeyRef", sizeof(f) - strlen(f) - 1);
			if (parse_key_ref(item(from, "secretKeyRef"), f, ns, STACK_VAL_SECRET, v, e) < 0)
				return -1;
		} else if (item(from, "configMapKeyRef") != NULL) {
			strncat(f, ".valueFrom.configMapKeyRef", sizeof(f) - strlen(f) - 1);
			if (parse_key_ref(item(from, "configMapKeyRef"), f, ns, STACK_VAL_CONFIGMAP, v, e) < 0)
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
	const cJSON *ref = item(fs, "sourceRef");

	s->source = STACK_SRC_FLUX;
	if (!cJSON_IsObject(ref))
		return err_set(e, ERR_INVALID, "spec.fluxSource.sourceRef: is required"), -1;
	if (get_str(ref, "kind", "spec.fluxSource.sourceRef.kind", &s->src_kind, e) < 0 ||
	    get_str(ref, "name", "spec.fluxSource.sourceRef.name", &s->src_name, e) < 0 ||
	    get_str(fs, "dir", "spec.fluxSource.dir", &s->dir, e) < 0)
		return -1;
	if (s->src_kind == NULL || (strcmp(s->src_kind, "GitRepository") != 0 &&
	    strcmp(s->src_kind, "OCIRepository") != 0 && strcmp(s->src_kind, "Bucket") != 0))
		return err_set(e, ERR_INVALID, "spec.fluxSource.sourceRef.kind: must be GitRepository, "
		    "OCIRepository or Bucket"), -1;
	if (s->src_name == NULL || s->src_name[0] == '\0')
		return err_set(e, ERR_INVALID, "spec.fluxSource.sourceRef.name: is required"), -1;
	if (item(ref, "namespace") != NULL)
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
	if (get_only(v, "provider", "spec.ociSource.verify.provider", "cosign", "only cosign is", e) < 0)
		return -1;
	if (item(v, "matchOIDCIdentity") != NULL || item(v, "trustedRootSecretRef") != NULL)
		return err_set(e, ERR_INVALID, "spec.ociSource.verify.%s: keyless verification is not "
		    "supported; give the public keys in verify.secretRef", item(v, "matchOIDCIdentity") ?
		    "matchOIDCIdentity" : "trustedRootSecretRef"), -1;
	if (get_obj(v, "secretRef", "spec.ociSource.verify.secretRef", &sec, e) < 0 ||
	    get_str(sec, "name", "spec.ociSource.verify.secretRef.name", &s->oci_verify_secret, e) < 0)
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
	if (get_obj(os, "ref", "spec.ociSource.ref", &ref, e) < 0 ||
	    get_obj(os, "layerSelector", "spec.ociSource.layerSelector", &sel, e) < 0 ||
	    get_obj(os, "secretRef", "spec.ociSource.secretRef", &sec, e) < 0 ||
	    get_obj(os, "certSecretRef", "spec.ociSource.certSecretRef", &cert, e) < 0 ||
	    get_only(sel, "operation", "spec.ociSource.layerSelector.operation", "extract",
	        "a program is always extracted (extract)", e) < 0)
		return -1;
	if (get_str(os, "url", "spec.ociSource.url", &s->oci_url, e) < 0 ||
	    get_str(os, "dir", "spec.ociSource.dir", &s->dir, e) < 0 ||
	    get_str(ref, "tag", "spec.ociSource.ref.tag", &s->oci_tag, e) < 0 ||
	    get_str(ref, "digest", "spec.ociSource.ref.digest", &s->oci_digest, e) < 0 ||
	    get_str(ref, "semver", "spec.ociSource.ref.semver", &s->oci_semver, e) < 0 ||
	    get_str(sel, "mediaType", "spec.ociSource.layerSelector.mediaType", &s->oci_media_type, e) < 0 ||
	    get_str(sec, "name", "spec.ociSource.secretRef.name", &s->oci_secret, e) < 0 ||
	    get_str(cert, "name", "spec.ociSource.certSecretRef.name",
	        &s->oci_cert_secret, e) < 0 ||
	    get_bool(os, "insecure", "spec.ociSource.insecure", &s->oci_insecure, e) < 0 ||
	    get_duration(os, "interval", "spec.ociSource.interval", &s->oci_interval_ms, e) < 0)
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
	return parse_oci_verify(item(os, "verify"), s, e);
}

/* The classic programRef {repo, ref}: a GitRepository the controller owns. */
static int parse_program_ref(const cJSON *pr, const char *name, struct stack_spec *s, struct err *e)
{
	size_t n = strlen(name) + sizeof("-program");

	s->source = STACK_SRC_PROGRAM;
	if (item(pr, "name") != NULL && item(pr, "repo") == NULL)
		return err_set(e, ERR_INVALID, "spec.programRef.name: the operator's Program kind is not "
		    "supported; put the program in Git (programRef.repo) or an OCI artifact (ociSource)"), -1;
	if (get_str(pr, "repo", "spec.programRef.repo", &s->prog_repo, e) < 0 ||
	    get_str(pr, "ref", "spec.programRef.ref", &s->prog_ref, e) < 0 ||
	    get_str(pr, "dir", "spec.programRef.dir", &s->dir, e) < 0)
		return -1;
	if (s->prog_repo == NULL || s->prog_repo[0] == '\0')
		return err_set(e, ERR_INVALID, "spec.programRef.repo: is required"), -1;
	if ((s->src_kind = strdup("GitRepository")) == NULL || (s->src_name = malloc(n)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	snprintf(s->src_name, n, "%s-program", name);
	return 0;
}

static int valid_object_name(const char *s);

/* One credential value of gitAuth: a ResourceRef (Secret, or Literal, which
 * the operator's schema takes too). */
static int git_auth_ref(const cJSON *o, const char *k, const char *field, const char *ns,
    struct stack_git_auth *a, struct err *e)
{
	const cJSON *ref = item(o, k);

	if (ref == NULL || cJSON_IsNull(ref))
		return err_set(e, ERR_INVALID, "%s: is required", field), -1;
	return parse_resource_ref(ref, field, ns, &a->v[a->n++], e);
}

static int present(const cJSON *o, const char *k)
{
	return item(o, k) != NULL && !cJSON_IsNull(item(o, k));
}

/* gitAuthSecret, else gitAuth's first of sshAuth, accessToken, githubApp and
 * basicAuth: the order in which the operator picks one. */
static int parse_git_auth(const cJSON *spec, const char *ns, struct stack_spec *s, struct err *e)
{
	struct stack_git_auth *a = &s->git_auth;
	const cJSON *ga = NULL, *sub = NULL;

	if (get_str(spec, "gitAuthSecret", "spec.gitAuthSecret", &a->secret, e) < 0 ||
	    get_obj(spec, "gitAuth", "spec.gitAuth", &ga, e) < 0)
		return -1;
	if (a->secret != NULL && a->secret[0] != '\0') {
		if (!valid_object_name(a->secret))
			return err_set(e, ERR_INVALID, "spec.gitAuthSecret: must be the name of a Secret"), -1;
		a->kind = STACK_GIT_SECRET;
		return 0;
	}
	if (ga == NULL)
		return 0;
	if (present(ga, "sshAuth")) {
		a->kind = STACK_GIT_SSH;
		if (get_obj(ga, "sshAuth", "spec.gitAuth.sshAuth", &sub, e) < 0 ||
		    git_auth_ref(sub, "sshPrivateKey", "spec.gitAuth.sshAuth.sshPrivateKey", ns, a, e) < 0)
			return -1;
		/* source-controller needs the server's host keys beside the key. */
		if (a->v[0].kind != STACK_VAL_SECRET)
			return err_set(e, ERR_INVALID, "spec.gitAuth.sshAuth.sshPrivateKey: must be type Secret; "
			    "its Secret holds the server's host keys in key known_hosts too"), -1;
		return present(sub, "password") ?
		    git_auth_ref(sub, "password", "spec.gitAuth.sshAuth.password", ns, a, e) : 0;
	}
	if (present(ga, "accessToken")) {
		a->kind = STACK_GIT_TOKEN;
		return git_auth_ref(ga, "accessToken", "spec.gitAuth.accessToken", ns, a, e);
	}
	if (present(ga, "githubApp")) {
		a->kind = STACK_GIT_APP;
		if (get_obj(ga, "githubApp", "spec.gitAuth.githubApp", &sub, e) < 0 ||
		    git_auth_ref(sub, "appID", "spec.gitAuth.githubApp.appID", ns, a, e) < 0 ||
		    git_auth_ref(sub, "installationID", "spec.gitAuth.githubApp.installationID", ns, a, e) < 0)
			return -1;
		return git_auth_ref(sub, "privateKey", "spec.gitAuth.githubApp.privateKey", ns, a, e);
	}
	if (present(ga, "basicAuth")) {
		a->kind = STACK_GIT_BASIC;
		if (get_obj(ga, "basicAuth", "spec.gitAuth.basicAuth", &sub, e) < 0 ||
		    git_auth_ref(sub, "userName", "spec.gitAuth.basicAuth.userName", ns, a, e) < 0)
			return -1;
		return git_auth_ref(sub, "password", "spec.gitAuth.basicAuth.password", ns, a, e);
	}
	return err_set(e, ERR_INVALID, "spec.gitAuth: set one of sshAuth, accessToken, githubApp and "
	    "basicAuth"), -1;
}

/* The operator's Git source: projectRepo with exactly one of branch and
 * commit (the operator refuses both and neither), the program in repoDir.
 * It becomes the GitRepository <name>-program, as the classic programRef
 * does; shallow is accepted and changes nothing (source-controller fetches
 * one commit's tree whatever it says). */
static int parse_project_repo(const cJSON *spec, const char *name, const char *ns, struct stack_spec *s,
    struct err *e)
{
	size_t n = strlen(name) + sizeof("-program"), hex = 0;
	char *branch = NULL, *commit = NULL;
	int shallow = 0, rc = -1;

	s->source = STACK_SRC_PROGRAM;
	s->project_repo = 1;
	if (get_str(spec, "projectRepo", "spec.projectRepo", &s->prog_repo, e) < 0 ||
	    get_str(spec, "branch", "spec.branch", &branch, e) < 0 ||
	    get_str(spec, "commit", "spec.commit", &commit, e) < 0 ||
	    get_str(spec, "repoDir", "spec.repoDir", &s->dir, e) < 0 ||
	    get_bool(spec, "shallow", "spec.shallow", &shallow, e) < 0)
		goto out;
	/* The operator joins repoDir to the clone's root, so "/infra" is the
	 * repository's infra: its examples write it that way. */
	if (s->dir != NULL && s->dir[0] == '/') {
		memmove(s->dir, s->dir + strspn(s->dir, "/"), strlen(s->dir + strspn(s->dir, "/")) + 1);
		if (s->dir[0] == '\0') {
			free(s->dir);
			s->dir = NULL;
		}
	}
	if (s->prog_repo == NULL || s->prog_repo[0] == '\0') {
		err_set(e, ERR_INVALID, "spec.projectRepo: must be the URL of a Git repository");
		goto out;
	}
	if (branch != NULL && branch[0] != '\0' && commit != NULL && commit[0] != '\0') {
		err_set(e, ERR_INVALID, "spec.branch, spec.commit: set one of them, not both");
		goto out;
	}
	if (commit != NULL && commit[0] != '\0') {
		while (commit[hex] && strchr("0123456789abcdefABCDEF", commit[hex]))
			hex++;
		if (hex != 40 || commit[hex] != '\0') {
			err_set(e, ERR_INVALID, "spec.commit: must be a full commit SHA (40 hexadecimal digits)");
			goto out;
		}
		for (size_t i = 0; i < hex; i++)    /* GitRepository's ref.commit is lower case */
			if (commit[i] >= 'A' && commit[i] <= 'F')
				commit[i] = (char)(commit[i] - 'A' + 'a');
		s->prog_ref = commit;
		commit = NULL;
	} else if (branch != NULL && branch[0] != '\0') {
		/* "refs/heads/x" or "x": stack_source.c's ref rules then read it as a branch. */
		size_t m = strlen(branch) + sizeof("refs/heads/");
		if ((s->prog_ref = malloc(m)) == NULL) {
			err_set(e, ERR_NOMEM, "out of memory");
			goto out;
		}
		snprintf(s->prog_ref, m, "%s%s", strncmp(branch, "refs/", 5) == 0 ? "" : "refs/heads/", branch);
	} else {
		err_set(e, ERR_INVALID, "spec.branch: with spec.projectRepo, set branch (to follow) or commit "
		    "(to pin)");
		goto out;
	}
	if (parse_git_auth(spec, ns, s, e) < 0)
		goto out;
	if ((s->src_kind = strdup("GitRepository")) == NULL || (s->src_name = malloc(n)) == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	snprintf(s->src_name, n, "%s-program", name);
	rc = 0;
out:
	free(branch);
	free(commit);
	return rc;
}

static int parse_source(const cJSON *spec, const char *name, const char *ns, struct stack_spec *s,
    struct err *e)
{
	const cJSON *fs = item(spec, "fluxSource"), *os = item(spec, "ociSource");
	const cJSON *pr = item(spec, "programRef");
	int git = present(spec, "projectRepo");
	int n = cJSON_IsObject(fs) + cJSON_IsObject(os) + cJSON_IsObject(pr) + git;
	static const char *git_fields[] = { "commit", "branch", "repoDir", "gitAuth", "gitAuthSecret" };
	static const char *sources[] = { "fluxSource", "ociSource", "programRef" };

	if (present(spec, "projectRepo") && !cJSON_IsString(item(spec, "projectRepo")))
		return err_set(e, ERR_INVALID, "spec.projectRepo: must be a string (a Git URL)"), -1;
	/* The operator too reads them only with projectRepo (and refuses them
	 * without it): ignored, they would leave a Stack on another source. */
	for (size_t i = 0; !git && i < sizeof(git_fields) / sizeof(git_fields[0]); i++)
		if (present(spec, git_fields[i]) && !(cJSON_IsString(item(spec, git_fields[i])) &&
		    item(spec, git_fields[i])->valuestring[0] == '\0'))
			return err_set(e, ERR_INVALID, "spec.%s: only with spec.projectRepo", git_fields[i]), -1;

	/* A source given as a string or a list would otherwise be ignored, and
	 * the Stack would run from whichever source happened to be an object. */
	for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
		const cJSON *v = item(spec, sources[i]);
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
		return parse_project_repo(spec, name, ns, s, e);
	return parse_program_ref(pr, name, s, e);
}

/* `cloud` is the classic name of the backend; only a URL is one. */
static int parse_backend(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	static const char *schemes[] = { "s3://", "gs://", "azblob://", "file://", "https://", "http://" };
	char *cloud = NULL;

	if (get_str(spec, "backend", "spec.backend", &s->backend, e) < 0 ||
	    get_str(spec, "cloud", "spec.cloud", &cloud, e) < 0 ||
	    get_str(spec, "secretsProvider", "spec.secretsProvider", &s->secrets_provider, e) < 0)
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

/* Is ".." one of path's components? */
static int has_dotdot(const char *path)
{
	for (const char *p = path; *p; ) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return 1;
		p += n;
		while (*p == '/')
			p++;
	}
	return 0;
}

/* ------------------------------------------------------------ safety */

/* A Kubernetes object name: what a prerequisite may name (no "/", no
 * control characters; the API server checks the rest when it is read). */
static int valid_object_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 253)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.'))
			return 0;
	return 1;
}

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
	if (get_str(it, "name", fn, &r->name, e) < 0 ||
	    (flux && get_str(it, "namespace", fns, &r->namespace, e) < 0) ||
	    (!flux && get_obj(it, "requirement", fr, &req, e) < 0) ||
	    (req && get_duration(req, "succeededWithinDuration", fd, &r->within_ms, e) < 0))
		return -1;
	/* A shorter window would have the prerequisite updated again and again:
	 * its own update takes longer than that. */
	if (r->within_ms > 0 && r->within_ms < STACK_PREREQ_MIN_WITHIN_MS)
		return err_set(e, ERR_INVALID, "%s: must be at least 1m (a shorter one would have the prerequisite "
		    "run again and again)", fd), -1;
	if (r->name == NULL || !valid_object_name(r->name))
		return err_set(e, ERR_INVALID, "%s: must be the name of a Stack", fn), -1;
	if (r->namespace && !valid_object_name(r->namespace))
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
		if (typed(spec, lists[l].key, lists[l].field, cJSON_IsArray, "a list", &v, e) < 0)
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

	if (get_str(spec, "approval", "spec.approval", &approval, e) < 0)
		return -1;
	if (approval && strcmp(approval, "Manual") != 0 && strcmp(approval, "Auto") != 0) {
		free(approval);
		return err_set(e, ERR_INVALID, "spec.approval: must be Auto or Manual"), -1;
	}
	s->approval_manual = approval && strcmp(approval, "Manual") == 0;
	free(approval);
	if (get_str(spec, "approvedPlan", "spec.approvedPlan", &s->approved_plan, e) < 0 ||
	    get_bool(spec, "continue", "spec.continue", &s->continue_approval, e) < 0 ||
	    get_obj(spec, "driftDetection", "spec.driftDetection", &dd, e) < 0)
		return -1;
	if (dd && (get_duration(dd, "interval", "spec.driftDetection.interval", &s->drift_interval_ms, e) < 0 ||
	    get_bool(dd, "remediate", "spec.driftDetection.remediate", &s->drift_remediate, e) < 0))
		return -1;
	if (dd && s->drift_interval_ms == 0)
		return err_set(e, ERR_INVALID, "spec.driftDetection.interval: is required (such as 10m)"), -1;
	if (s->drift_interval_ms > 0 && s->drift_interval_ms < DRIFT_INTERVAL_MIN_MS)
		s->drift_interval_ms = DRIFT_INTERVAL_MIN_MS;
	for (size_t i = 0; i < s->n_policy_packs; i++)
		if (s->policy_packs[i][0] == '/' || has_dotdot(s->policy_packs[i]))
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
		const cJSON *v = item(spec, unserved[i].field);
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
	const cJSON *spec = item(obj, "spec");
	const char *name = kube_obj_str(obj, "metadata.name");
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	int dod = 0, dod2 = 0;
	long interval = 0;
	const cJSON *mf = item(spec, "maxUpdateFailures");

	memset(s, 0, sizeof(*s));
	err_clear(e);
	s->resync_ms = RESYNC_MIN_MS;
	s->retry_max_ms = RETRY_MAX_DEFAULT_MS;
	s->timeout_ms = o->update_timeout_ms;
	s->max_failures = o->max_failures;
	if (!cJSON_IsObject(spec) || name == NULL)
		return err_set(e, ERR_INVALID, "spec: is required"), -1;
	if (get_str(spec, "stack", "spec.stack", &s->stack, e) < 0)
		return -1;
	/* The classic manifest names no stack: it is the object's name. */
	if (s->stack == NULL && cJSON_IsObject(item(spec, "programRef")) && (s->stack = strdup(name)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	if (s->stack == NULL || s->stack[0] == '\0')
		return err_set(e, ERR_INVALID, "spec.stack: is required (the Pulumi stack name)"), -1;
	if (refuse_unserved(spec, e) < 0 ||
	    parse_source(spec, name, ns, s, e) < 0 || parse_backend(spec, s, e) < 0 ||
	    parse_config(spec, s, e) < 0 || parse_config_refs(spec, ns, s, e) < 0 || parse_env(spec, ns, s, e) < 0 ||
	    stack_spec_parse_pko(spec, s, e) < 0 || config_set_twice(s, e) < 0)
		return -1;
	s->n_env_spec = s->n_env;
	if (get_bool(spec, "refresh", "spec.refresh", &s->refresh, e) < 0 ||
	    get_bool(spec, "preview", "spec.preview", &s->preview, e) < 0 ||
	    get_bool(spec, "suspend", "spec.suspend", &s->suspend, e) < 0 ||
	    get_bool(spec, "destroyOnFinalize", "spec.destroyOnFinalize", &dod, e) < 0 ||
	    get_bool(spec, "destroyOnDelete", "spec.destroyOnDelete", &dod2, e) < 0 ||
	    get_bool(spec, "continueResyncOnCommitMatch", "spec.continueResyncOnCommitMatch",
	        &s->continue_resync, e) < 0 ||
	    get_strings(spec, "targets", "spec.targets", &s->targets, &s->n_targets, e) < 0 ||
	    get_strings(spec, "policyPacks", "spec.policyPacks", &s->policy_packs, &s->n_policy_packs, e) < 0 ||
	    get_seconds(spec, "resyncFrequencySeconds", "spec.resyncFrequencySeconds", &s->resync_ms, e) < 0 ||
	    get_duration(spec, "interval", "spec.interval", &interval, e) < 0 ||
	    get_seconds(spec, "retryMaxBackoffDurationSeconds", "spec.retryMaxBackoffDurationSeconds",
	        &s->retry_max_ms, e) < 0 ||
	    get_duration(spec, "timeout", "spec.timeout", &s->timeout_ms, e) < 0)
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
	if (s->dir != NULL && (s->dir[0] == '/' || has_dotdot(s->dir)))
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
	mem_free_all(a->revision, a->digest, a->url, a->index_digest);
	memset(a, 0, sizeof(*a));
}
