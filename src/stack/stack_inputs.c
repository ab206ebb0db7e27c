/*
 * stack_inputs.c - the values an update runs with: config (inline, from
 * ConfigMaps, secret config from Secrets) and the environment (envRefs and
 * the classic envs), resolved for the pulumi driver, and the fingerprint of
 * everything an update depends on.
 *
 * ConfigMaps and Secrets are cached metadata-only (no Secret data is ever
 * held between reconciles); values are read with a GET when an update may
 * run and live only as long as the pass.  The fingerprint holds their
 * resourceVersions, never their values, so a changed Secret means a new
 * update and a restart of the controller does not.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/base64.h"
#include "base/log.h"
#include "base/secret.h"
#include "stack/stack_model.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };
static const struct kube_resource configmap_res = { "", "v1", "configmaps", "ConfigMap", 1 };

/* The objects one pass has read, so each is fetched once. */
struct fetched {
	char *kind, *name;
	cJSON *obj;            /* NULL: not found */
	struct fetched *next;
};

static void fetched_free(struct fetched *f)
{
	while (f) {
		struct fetched *n = f->next;
		free(f->kind);
		free(f->name);
		cJSON_Delete(f->obj);   /* Secret data: cJSON frees without wiping; it lived one pass */
		free(f);
		f = n;
	}
}

/* GETs kind/name once; *obj borrowed from the list (NULL when missing). */
static int fetch(struct stack_pass *p, struct fetched **list, enum stack_value_kind kind,
    const char *name, const cJSON **obj, struct err *e)
{
	const char *k = kind == STACK_VAL_SECRET ? "Secret" : "ConfigMap";
	struct fetched *f;

	for (f = *list; f; f = f->next)
		if (strcmp(f->kind, k) == 0 && strcmp(f->name, name) == 0) {
			*obj = f->obj;
			return 0;
		}
	if ((f = calloc(1, sizeof(*f))) == NULL || (f->kind = strdup(k)) == NULL ||
	    (f->name = strdup(name)) == NULL) {
		if (f)
			free(f->kind);
		free(f);
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	}
	f->obj = kube_get(p->sc->client, kind == STACK_VAL_SECRET ? &secret_res : &configmap_res, p->ns,
	    name, NULL, e);
	f->next = *list;
	*list = f;
	if (f->obj == NULL && e->code != ERR_NOTFOUND)
		return -1;
	err_clear(e);
	*obj = f->obj;
	return 0;
}

/* The value of key in a Secret (base64 data) or ConfigMap (data, then
 * binaryData); malloc'd, caller frees.  NULL when the key is absent. */
static char *object_value(const cJSON *obj, enum stack_value_kind kind, const char *key)
{
	const cJSON *v;
	unsigned char *out = NULL;
	size_t n;
	struct err e;

	if (kind != STACK_VAL_CONFIGMAP) {
		if ((out = kube_secret_value(obj, key, &n, &e)) == NULL)
			return NULL;
	} else {
		v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "data"), key);
		if (cJSON_IsString(v))
			return strdup(v->valuestring);
		v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "binaryData"), key);
		if (!cJSON_IsString(v) || base64_decode(v->valuestring, strlen(v->valuestring), &out, &n, &e) < 0)
			return NULL;
	}
	if (strlen((char *)out) != n) {   /* a NUL inside: not a value a CLI can take */
		secret_wipe(out, n);
		free(out);
		return NULL;
	}
	return (char *)out;
}

static int add_ref(struct stack_inputs *in, const char *kind, const cJSON *obj)
{
	const char *name = kube_obj_str(obj, "metadata.name");
	const char *rv = kube_obj_str(obj, "metadata.resourceVersion");
	size_t len = strlen(kind) + strlen(name ? name : "") + strlen(rv ? rv : "") + 3;
	char *ref = malloc(len), **v;

	if (ref == NULL)
		return -1;
	snprintf(ref, len, "%s/%s@%s", kind, name ? name : "", rv ? rv : "");
	for (size_t i = 0; i < in->n_refs; i++)
		if (strcmp(in->refs[i], ref) == 0)
			return free(ref), 0;
	if ((v = realloc(in->refs, (in->n_refs + 1) * sizeof(*v))) == NULL)
		return free(ref), -1;
	in->refs = v;
	in->refs[in->n_refs++] = ref;
	return 0;
}

/* One value: 0 with *out (malloc'd), 1 when a referenced object or key is
 * missing (what is written to missing), -1 on error. */
static int resolve_value(struct stack_pass *p, struct fetched **list, const struct stack_value *v,
    char **out, char *missing, size_t mn, struct err *e)
{
	const cJSON *obj;
	const char *k = v->kind == STACK_VAL_SECRET ? "Secret" : "ConfigMap";

	*out = NULL;
	if (v->kind == STACK_VAL_LITERAL) {
		if ((*out = strdup(v->literal)) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
		return 0;
	}
	if (fetch(p, list, v->kind, v->object, &obj, e) < 0)
		return -1;
	if (obj == NULL) {
		snprintf(missing, mn, "%s %s/%s not found", k, p->ns, v->object);
		return 1;
	}
	if ((*out = object_value(obj, v->kind, v->key)) == NULL) {
		snprintf(missing, mn, "%s %s/%s has no key \"%s\"", k, p->ns, v->object, v->key);
		return 1;
	}
	if (add_ref(&p->in, k, obj) < 0)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	return 0;
}

/* resolve_value for a pass: a missing object is left out (0, *out NULL)
 * when the pass is lenient, as a pass that only cleans up is. */
static int take_value(struct stack_pass *p, struct fetched **list, const struct stack_value *v, int lenient,
    char **out, char *missing, size_t mn, struct err *e)
{
	int r = resolve_value(p, list, v, out, missing, mn, e);

	if (r == 1 && lenient) {
		*out = NULL;
		return 0;
	}
	return r;
}

static void envvar_free(struct stack_envvar *v)
{
	free(v->name);
	free(v->v.object);
	free(v->v.key);
	memset(v, 0, sizeof(*v));
}

/* Sets name from key of object (kind): a later object's key replaces an
 * earlier one's; a variable the spec names itself is never replaced.
 * 0, 1 when the lists already made STACK_ENV_FROM_VARS_MAX variables, -1
 * out of memory. */
static int env_from_key(struct stack_spec *s, const cJSON *obj, enum stack_value_kind kind, const char *object,
    const char *key)
{
	struct stack_envvar *v = NULL;
	char *value;

	if (!stack_env_name_ok(key))
		return 0;
	/* A value no CLI can take (a NUL inside, bad base64) is left out like
	 * a bad name, rather than making the Stack wait for a key it has. */
	if ((value = object_value(obj, kind, key)) == NULL)
		return 0;
	secret_free(value);
	for (size_t i = 0; i < s->n_env; i++)
		if (strcmp(s->env[i].name, key) == 0) {
			if (i < s->n_env_spec)
				return 0;
			v = &s->env[i];
			envvar_free(v);
			break;
		}
	if (v == NULL) {
		if (s->n_env - s->n_env_spec >= STACK_ENV_FROM_VARS_MAX)
			return 1;
		if ((v = realloc(s->env, (s->n_env + 1) * sizeof(*v))) == NULL)
			return -1;
		s->env = v;
		v = &s->env[s->n_env++];
		memset(v, 0, sizeof(*v));
	}
	v->v.kind = kind;
	v->name = strdup(key);
	v->v.object = strdup(object);
	v->v.key = strdup(key);
	return v->name && v->v.object && v->v.key ? 0 : -1;
}

/*
 * The operator's envFrom lists (spec.envs as a list, spec.envSecrets):
 * every key of each object becomes a variable, as the kubelet makes them
 * of a pod's envFrom: in list order, a later object's key wins, a
 * variable the spec names itself wins over all, and a key that is no
 * variable name (or a reserved one) is left out.  They are appended to
 * the spec's variables, named like the others, so the local runner and a
 * Job's pod (secretKeyRef / configMapKeyRef) take them the same way; the
 * objects' resourceVersions join the fingerprint, so a changed key set
 * is a new update.  0, 1 when an object is missing (in missing), -1.
 */
static int expand_env_from(struct stack_pass *p, struct fetched **list, int lenient, char *missing,
    size_t mn, struct err *e)
{
	struct stack_spec *s = &p->spec;

	while (s->n_env > s->n_env_spec)
		envvar_free(&s->env[--s->n_env]);
	for (size_t i = 0; i < s->n_env_from; i++) {
		const struct stack_env_from *f = &s->env_from[i];
		const char *k = f->kind == STACK_VAL_SECRET ? "Secret" : "ConfigMap";
		const cJSON *obj, *it;
		if (fetch(p, list, f->kind, f->object, &obj, e) < 0)
			return -1;
		if (obj == NULL) {
			if (lenient)
				continue;
			snprintf(missing, mn, "%s %s/%s (%s) not found", k, p->ns, f->object, f->field);
			return 1;
		}
		if (add_ref(&p->in, k, obj) < 0)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
		for (int bin = 0; bin <= (f->kind == STACK_VAL_CONFIGMAP); bin++)
			cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(obj, bin ? "binaryData" : "data")) {
				int rc = env_from_key(s, obj, f->kind, f->object, it->string);
				if (rc < 0)
					return err_set(e, ERR_NOMEM, "out of memory"), -1;
				if (rc > 0)
					return err_set(e, ERR_INVALID, "%s %s/%s (%s): the envs and envSecrets objects "
					    "make more than %d variables", k, p->ns, f->object, f->field,
					    STACK_ENV_FROM_VARS_MAX), -1;
			}
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* lenient: a missing reference is skipped (destroy runs with what is left). */
static int resolve(struct stack_pass *p, int lenient)
{
	const struct stack_spec *s = &p->spec;
	struct fetched *list = NULL;
	struct err e;
	char missing[600] = "";
	int rc = 0;

	err_clear(&e);
	stack_inputs_free(&p->in);
	rc = expand_env_from(p, &list, lenient, missing, sizeof(missing), &e);
	p->in.config = calloc(s->n_config + 1, sizeof(*p->in.config));
	p->in.env = calloc(s->n_env + 1, sizeof(*p->in.env));
	if (rc == 0 && (p->in.config == NULL || p->in.env == NULL)) {
		err_set(&e, ERR_NOMEM, "out of memory");
		rc = -1;
	}
	for (size_t i = 0; rc == 0 && i < s->n_config; i++) {
		char *val;
		if ((rc = take_value(p, &list, &s->config[i].v, lenient, &val, missing, sizeof(missing), &e)) != 0 ||
		    val == NULL)
			continue;
		p->in.config[p->in.n_config++] = (struct pl_config_item){
			.key = s->config[i].key,
			.value = val,
			.secret = s->config[i].secret || s->config[i].v.kind == STACK_VAL_SECRET,
			.structured = s->config[i].v.structured,
		};
	}
	for (size_t i = 0; rc == 0 && i < s->n_env; i++) {
		char *val;
		if ((rc = take_value(p, &list, &s->env[i].v, lenient, &val, missing, sizeof(missing), &e)) != 0 ||
		    val == NULL)
			continue;
		/* ConfigMap values are not secret (they may well equal config values). */
		p->in.env[p->in.n_env++] = (struct pl_env_var){
			.name = s->env[i].name,
			.value = val,
			.secret = s->env[i].v.kind == STACK_VAL_SECRET,
		};
	}
	fetched_free(list);
	if (p->in.refs)
		qsort(p->in.refs, p->in.n_refs, sizeof(char *), cmp_str);
	if (rc == 1)
		stack_verdict(p, STACK_WAITING, "ReferenceNotFound", p->sc->o.requeue_dependency_ms,
		    "%s; the update waits for it", missing);
	else if (rc < 0)
		stack_verdict(p, STACK_WAITING, "ReferenceNotFound", p->sc->o.requeue_dependency_ms,
		    "cannot read the Stack's ConfigMaps and Secrets: %s", e.msg);
	return rc == 0 ? 0 : 1;
}

int stack_inputs_resolve(struct stack_pass *p)
{
	return resolve(p, 0);
}

void stack_inputs_resolve_lenient(struct stack_pass *p)
{
	resolve(p, 1);
}

void stack_inputs_free(struct stack_inputs *in)
{
	/* key and name are borrowed from the spec; values are owned. */
	for (size_t i = 0; i < in->n_config; i++) {
		char *v = (char *)in->config[i].value;
		secret_free(v);
	}
	for (size_t i = 0; i < in->n_env; i++) {
		char *v = (char *)in->env[i].value;
		secret_free(v);
	}
	for (size_t i = 0; i < in->n_refs; i++)
		free(in->refs[i]);
	free(in->config);
	free(in->env);
	free(in->refs);
	memset(in, 0, sizeof(*in));
}

/* One field, length-prefixed so that no two different field lists hash
 * alike (a newline inside a revision cannot shift the fields). */
static void hash_field(EVP_MD_CTX *ctx, const char *name, const char *value)
{
	char head[96];

	value = value ? value : "";
	snprintf(head, sizeof(head), "%s %zu:", name, strlen(value));
	EVP_DigestUpdate(ctx, head, strlen(head));
	EVP_DigestUpdate(ctx, value, strlen(value));
}

/* sha256 over the generation, the artifact, the dir and the references'
 * resourceVersions. */
void stack_fingerprint(const struct stack_pass *p, char out[65])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[32];
	unsigned int mdlen = 0;
	char gen[32];

	out[0] = '\0';
	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return;
	}
	snprintf(gen, sizeof(gen), "%lld", p->generation);
	hash_field(ctx, "generation", gen);
	hash_field(ctx, "revision", p->art.revision);
	hash_field(ctx, "digest", p->art.digest);
	hash_field(ctx, "dir", p->spec.dir ? p->spec.dir : ".");
	for (size_t i = 0; i < p->in.n_refs; i++)
		hash_field(ctx, "ref", p->in.refs[i]);
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	EVP_MD_CTX_free(ctx);
	for (unsigned int i = 0; i < mdlen && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}
