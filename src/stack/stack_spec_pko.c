/*
 * stack_spec_pko.c - the Pulumi Kubernetes Operator's input fields that
 * stack_spec.c does not fold in itself, so that a PKO v2 manifest runs as
 * written (docs/migrating-from-pko.md, "What runs, and how"):
 *
 *   envs: [ConfigMap names]  every key of each ConfigMap is a variable
 *                            (PKO: the workspace pod's envFrom)
 *
 * Each message names the field at fault, as in stack_spec.c.
 */
#include <stdlib.h>
#include <string.h>

#include "stack/stack_model.h"

/* The kubelet's older rule for envFrom keys, and what a Job's pod takes
 * (stack_runner_io.c): a ConfigMap key may also start with a digit or a
 * dot, and such a key would stop the pod. */
int stack_env_name_ok(const char *name)
{
	const char *c = name;

	if (name == NULL || !((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || *c == '_') ||
	    stack_env_reserved(name))
		return 0;
	for (; *c; c++)
		if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
		    *c == '_' || *c == '-' || *c == '.'))
			return 0;
	return 1;
}

/* A list of object names in the Stack's namespace; the keys are read when
 * a pass resolves its inputs (stack_inputs.c), since they are the object's
 * and may change without the Stack changing. */
int stack_spec_parse_env_from(const cJSON *list, const char *field, enum stack_value_kind kind,
    struct stack_spec *s, struct err *e)
{
	const cJSON *it;
	size_t i = 0;

	if (!cJSON_IsArray(list))
		return err_set(e, ERR_INVALID, "%s: must be a list of %s names", field,
		    kind == STACK_VAL_SECRET ? "Secret" : "ConfigMap"), -1;
	cJSON_ArrayForEach(it, list) {
		struct stack_env_from *v;
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0' || strchr(it->valuestring, '/') != NULL)
			return err_set(e, ERR_INVALID, "%s[%zu]: must be the name of a %s in the Stack's namespace",
			    field, i, kind == STACK_VAL_SECRET ? "Secret" : "ConfigMap"), -1;
		if ((v = realloc(s->env_from, (s->n_env_from + 1) * sizeof(*v))) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
		s->env_from = v;
		v = &s->env_from[s->n_env_from];
		v->kind = kind;
		v->field = field;
		if ((v->object = strdup(it->valuestring)) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
		s->n_env_from++;
		i++;
	}
	return 0;
}

int stack_spec_parse_pko(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	(void)spec;
	(void)s;
	(void)e;
	return 0;
}
