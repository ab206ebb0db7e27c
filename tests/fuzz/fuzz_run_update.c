/*
 * fuzz_run_update.c - libFuzzer target for what run-update reads and
 * writes back (src/stack/stack_runner_io.c): the bytes are the
 * PULUMI_CONTROLLER_UPDATE JSON (a result or a clean refusal, never a
 * crash or a leak), and the same bytes are a failure's message, whose
 * termination message must stay within its cap, parse as JSON and keep
 * the class, at the real cap and at a small one.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pulumi/pulumi.h"
#include "stack/stack.h"

static void check_termination(const struct stack_run_result *r, size_t max)
{
	char *text = stack_run_termination(r, max);
	cJSON *j = cJSON_Parse(text);

	if (strlen(text) > max || j == NULL ||
	    strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "class")), "failed") != 0)
		abort();
	cJSON_Delete(j);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stack_run_input *in;
	struct stack_run_result r;
	struct err e;
	char *text = malloc(size + 1);

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if ((in = stack_run_input_parse(text, &e)) != NULL)
		stack_run_input_free(in);
	memset(&r, 0, sizeof(r));
	r.status = PL_FAILED;
	r.cls = STACK_RUN_FAILED;
	snprintf(r.message, sizeof(r.message), "%s", text);
	check_termination(&r, STACK_RUN_TERMINATION_MAX);
	check_termination(&r, 160);
	free(text);
	return 0;
}
