/*
 * fuzz_stack_spec.c - libFuzzer target for stack_spec_parse, which reads
 * whatever a Stack's spec holds (an older CRD or one applied without
 * validation lets anything through).  The input is a Stack object, or a
 * bare spec when it has no "spec" member.  Besides not crashing or leaking,
 * an accepted spec must keep the promises the reconciler relies on: a
 * non-empty stack name, exactly one known source, a dir inside the
 * artifact, a resync period of at least 60 s, 1..1000 failures; a refused
 * one must carry a message; policy packs and prerequisites must not name
 * a path out of the artifact or the API.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stack/stack_machine.h"

/* "..x" is a name like any other; only a whole ".." component escapes. */
static int has_dotdot_component(const char *dir)
{
	size_t n = strlen(dir);

	for (size_t i = 0; i + 1 < n; i++)
		if (dir[i] == '.' && dir[i + 1] == '.' && (i == 0 || dir[i - 1] == '/') &&
		    (i + 2 == n || dir[i + 2] == '/'))
			return 1;
	return 0;
}

static void check_accepted(const struct stack_spec *s)
{
	if (s->stack == NULL || s->stack[0] == '\0')
		abort();
	if (s->source == STACK_SRC_OCI) {
		if (s->oci_url == NULL || strncmp(s->oci_url, "oci://", 6) != 0)
			abort();
		if ((s->oci_tag != NULL) + (s->oci_digest != NULL) + (s->oci_semver != NULL) != 1)
			abort();
	} else if (s->src_kind == NULL || s->src_name == NULL || s->src_name[0] == '\0') {
		abort();
	}
	if (s->dir != NULL && (s->dir[0] == '/' || has_dotdot_component(s->dir)))
		abort();
	if (s->resync_ms < 60000 || s->timeout_ms <= 0 || s->max_failures < 1 || s->max_failures > 1000)
		abort();
	for (size_t i = 0; i < s->n_config; i++)
		if (s->config[i].key == NULL || (s->config[i].v.kind == STACK_VAL_LITERAL ?
		    s->config[i].v.literal == NULL : s->config[i].v.object == NULL || s->config[i].v.key == NULL))
			abort();
	for (size_t i = 0; i < s->n_env; i++)
		if (s->env[i].name == NULL || s->env[i].name[0] == '\0' || strchr(s->env[i].name, '='))
			abort();
	/* Issue 14: policy packs inside the artifact, prerequisites that name
	 * an object (never a path), drift checks no more often than 1 s. */
	for (size_t i = 0; i < s->n_policy_packs; i++)
		if (s->policy_packs[i][0] == '\0' || s->policy_packs[i][0] == '/' ||
		    has_dotdot_component(s->policy_packs[i]))
			abort();
	for (size_t i = 0; i < s->n_prereqs; i++)
		if (s->prereqs[i].name == NULL || s->prereqs[i].name[0] == '\0' || strchr(s->prereqs[i].name, '/') ||
		    (s->prereqs[i].namespace && strchr(s->prereqs[i].namespace, '/')) || s->prereqs[i].within_ms < 0)
			abort();
	if (s->drift_interval_ms != 0 && s->drift_interval_ms < 1000)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	cJSON *in, *obj;
	struct stack_opts o;
	struct stack_spec s;
	struct err e;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	in = cJSON_Parse(text);
	free(text);
	if (in == NULL)
		return 0;
	if (cJSON_IsObject(in) && cJSON_GetObjectItemCaseSensitive(in, "spec") != NULL) {
		obj = in;
	} else {
		obj = cJSON_Parse("{\"metadata\": {\"name\": \"web\", \"namespace\": \"apps\"}}");
		if (obj == NULL) {
			cJSON_Delete(in);
			return 0;
		}
		cJSON_AddItemToObject(obj, "spec", in);
	}
	stack_opts_default(&o);
	if (stack_spec_parse(obj, &o, &s, &e) == 0)
		check_accepted(&s);
	else if (e.msg[0] == '\0' || (e.code != ERR_INVALID && e.code != ERR_NOMEM))
		abort();
	stack_spec_free(&s);
	cJSON_Delete(obj);
	return 0;
}
