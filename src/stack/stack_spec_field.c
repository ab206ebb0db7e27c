/*
 * stack_spec_field.c - the readers every part of the spec parser shares:
 * one typed field of an object (a string, a bool, a duration, a list of
 * strings), a reference to a key of a Secret or ConfigMap, and the checks
 * on names and paths.  stack_spec.c, stack_spec_git.c, stack_spec_pko.c and
 * stack_spec_runner.c read the spec through these, so that every field
 * gets the same message for the same mistake ("spec.x: must be a string").
 *
 * This is the bottom of the model layer: it calls nothing in src/stack/.
 * The strings it returns are the caller's to free.
 */
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "stack/stack_model.h"

const cJSON *stack_field(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* Set, and not null: the operator's schema lets an empty field be null. */
int stack_field_present(const cJSON *o, const char *k)
{
	return stack_field(o, k) != NULL && !cJSON_IsNull(stack_field(o, k));
}

/* o[k] into *v when it is what is() accepts: 0 (*v NULL when absent or
 * null); -1 with "field: must be <what>" when it is something else. */
int stack_field_typed(const cJSON *o, const char *k, const char *field, cJSON_bool (*is)(const cJSON *),
    const char *what, const cJSON **v, struct err *e)
{
	*v = stack_field(o, k);
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
int stack_field_str(const cJSON *o, const char *k, const char *field, char **out, struct err *e)
{
	const cJSON *v;

	*out = NULL;
	if (stack_field_typed(o, k, field, cJSON_IsString, "a string", &v, e) < 0)
		return -1;
	if (v != NULL && (*out = strdup(v->valuestring)) == NULL)
		return err_set(e, ERR_NOMEM, "%s: out of memory", field), -1;
	return 0;
}

/* A string field that is either absent or the one value this controller
 * supports; any other is refused, naming it and saying why (the tail). */
int stack_field_only(const cJSON *o, const char *k, const char *field, const char *only, const char *why,
    struct err *e)
{
	char *v;
	int other;

	if (stack_field_str(o, k, field, &v, e) < 0)
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
int stack_field_obj(const cJSON *o, const char *k, const char *field, const cJSON **out, struct err *e)
{
	return stack_field_typed(o, k, field, cJSON_IsObject, "an object", out, e);
}

int stack_field_bool(const cJSON *o, const char *k, const char *field, int *out, struct err *e)
{
	const cJSON *v;

	if (stack_field_typed(o, k, field, cJSON_IsBool, "true or false", &v, e) < 0)
		return -1;
	if (v != NULL)
		*out = cJSON_IsTrue(v);
	return 0;
}

#define DURATION_WANTED "a positive duration such as 90s or 5m"

/* A Go duration string ("90s", "5m"); *ms left alone when absent. */
int stack_field_duration(const cJSON *o, const char *k, const char *field, long *ms, struct err *e)
{
	const cJSON *v;
	long d;

	if (stack_field_typed(o, k, field, cJSON_IsString, DURATION_WANTED, &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if (duration_parse_ms(v->valuestring, &d) < 0 || d <= 0)
		return err_set(e, ERR_INVALID, "%s: must be " DURATION_WANTED, field), -1;
	*ms = d;
	return 0;
}

/* A whole number of seconds; *ms left alone when absent or 0. */
int stack_field_seconds(const cJSON *o, const char *k, const char *field, long *ms, struct err *e)
{
	const cJSON *v;

	if (stack_field_typed(o, k, field, cJSON_IsNumber, "a number of seconds", &v, e) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if (v->valuedouble < 0 || v->valuedouble > 10L * 365 * 86400)
		return err_set(e, ERR_INVALID, "%s: must be a number of seconds", field), -1;
	if (v->valuedouble > 0)
		*ms = (long)v->valuedouble * 1000;
	return 0;
}

int stack_field_strings(const cJSON *o, const char *k, const char *field, char ***out, size_t *n,
    struct err *e)
{
	const cJSON *v, *it;
	size_t i = 0;

	*out = NULL;
	*n = 0;
	if (stack_field_typed(o, k, field, cJSON_IsArray, "a list of strings", &v, e) < 0)
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

/* ------------------------------------------------------------ references */

/* {name, key} of a secretKeyRef / configMapKeyRef / ResourceRef.secret.
 * A namespace is allowed only when it is the Stack's own (ns): the
 * operator's CRD says so, and its manifests spell it out. */
int stack_spec_key_ref(const cJSON *ref, const char *field, const char *ns, enum stack_value_kind kind,
    struct stack_value *v, struct err *e)
{
	const cJSON *rns = stack_field(ref, "namespace");
	char f[200];

	if (!cJSON_IsObject(ref))
		return err_set(e, ERR_INVALID, "%s: must be an object with name and key", field), -1;
	if (rns != NULL && !cJSON_IsNull(rns) && (!cJSON_IsString(rns) ||
	    (rns->valuestring[0] != '\0' && (ns == NULL || strcmp(rns->valuestring, ns) != 0))))
		return err_set(e, ERR_INVALID, "%s.namespace: cross-namespace references are not allowed; "
		    "the object must be in the Stack's namespace", field), -1;
	v->kind = kind;
	snprintf(f, sizeof(f), "%s.name", field);
	if (stack_field_str(ref, "name", f, &v->object, e) < 0)
		return -1;
	snprintf(f, sizeof(f), "%s.key", field);
	if (stack_field_str(ref, "key", f, &v->key, e) < 0)
		return -1;
	if (v->object == NULL || v->key == NULL || !*v->object || !*v->key)
		return err_set(e, ERR_INVALID, "%s: name and key are required", field), -1;
	return 0;
}

/* The operator's ResourceRef: {type: Literal|Secret, literal: {value},
 * secret: {name, key}}. */
int stack_spec_resource_ref(const cJSON *ref, const char *field, const char *ns, struct stack_value *v,
    struct err *e)
{
	const cJSON *type = stack_field(ref, "type");
	char f[200];

	if (!cJSON_IsObject(ref) || !cJSON_IsString(type))
		return err_set(e, ERR_INVALID, "%s.type: must be Literal or Secret", field), -1;
	if (strcmp(type->valuestring, "Literal") == 0) {
		const cJSON *lit = stack_field(ref, "literal");
		v->kind = STACK_VAL_LITERAL;
		snprintf(f, sizeof(f), "%s.literal.value", field);
		if (!cJSON_IsObject(lit) || stack_field_str(lit, "value", f, &v->literal, e) < 0 || v->literal == NULL)
			return e->code ? -1 : (err_set(e, ERR_INVALID, "%s: is required", f), -1);
		return 0;
	}
	if (strcmp(type->valuestring, "Secret") == 0) {
		snprintf(f, sizeof(f), "%s.secret", field);
		return stack_spec_key_ref(stack_field(ref, "secret"), f, ns, STACK_VAL_SECRET, v, e);
	}
	if (strcmp(type->valuestring, "Env") == 0 || strcmp(type->valuestring, "FS") == 0)
		return err_set(e, ERR_INVALID, "%s.type: %s references are not supported (the controller "
		    "runs no workspace pod to read them from); use Secret or Literal", field,
		    type->valuestring), -1;
	return err_set(e, ERR_INVALID, "%s.type: \"%s\" is not Literal or Secret", field,
	    type->valuestring), -1;
}

/* Is ".." one of path's components? */
int stack_path_has_dotdot(const char *path)
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

/* A Kubernetes object name: what a prerequisite may name (no "/", no
 * control characters; the API server checks the rest when it is read). */
int stack_object_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 253)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.'))
			return 0;
	return 1;
}
