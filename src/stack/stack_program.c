/*
 * stack_program.c - a PKO Program (pulumi.com/v1, kind Program) as the
 * Pulumi.yaml of its program.
 *
 * Only the rendering is here so far (issue 23): packing it into the store,
 * the informer and programRef.name are still to come, and the spec check
 * still refuses programRef.name.
 *
 * The project file is written as JSON, which is YAML too, so no YAML
 * emitter decides quoting: a string stays a string ("yes", "1.0").  The
 * sections come in a fixed order and each keeps its keys in the order the
 * API server stored them, so the same stored Program renders to the same
 * bytes, and its digest names it as a revision.
 */
#include <stdlib.h>
#include <string.h>

#include "stack/stack_sources.h"

static const char *sections[] = { "configuration", "resources", "variables", "outputs", "packages" };

char *stack_program_render(const cJSON *program, struct err *e)
{
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(program, "metadata");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(meta, "name");
	const cJSON *body = cJSON_GetObjectItemCaseSensitive(program, "program");
	cJSON *out;
	char *text;

	if (!cJSON_IsString(name) || name->valuestring[0] == '\0')
		return err_set(e, ERR_INVALID, "Program: metadata.name is missing"), NULL;
	if (!cJSON_IsObject(body))
		return err_set(e, ERR_INVALID, "Program %s: program: must be an object", name->valuestring), NULL;
	if ((out = cJSON_CreateObject()) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	if (cJSON_AddStringToObject(out, "name", name->valuestring) == NULL ||
	    cJSON_AddStringToObject(out, "runtime", "yaml") == NULL)
		goto nomem;
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, sections[i]);
		cJSON *copy;

		if (v == NULL || cJSON_IsNull(v))
			continue;
		if (!cJSON_IsObject(v)) {
			err_set(e, ERR_INVALID, "Program %s: program.%s: must be an object", name->valuestring,
			    sections[i]);
			return cJSON_Delete(out), NULL;
		}
		if ((copy = cJSON_Duplicate(v, 1)) == NULL || !cJSON_AddItemToObject(out, sections[i], copy)) {
			cJSON_Delete(copy);
			goto nomem;
		}
	}
	text = cJSON_PrintUnformatted(out);
	cJSON_Delete(out);
	if (text == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	return text;
nomem:
	cJSON_Delete(out);
	return err_set(e, ERR_NOMEM, "out of memory"), NULL;
}
