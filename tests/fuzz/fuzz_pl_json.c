/*
 * fuzz_pl_json.c - libFuzzer target for the pulumi driver's JSON output
 * parsers (stack output, stack history, version) and the
 * secret masker, all of which read text the CLI printed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pulumi/pulumi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	const char *secrets[2];
	char *masked;
	int empty, a, b, c;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	cJSON_Delete(pl_parse_outputs(text));
	cJSON_Delete(pl_parse_history(text, &empty));
	pl_parse_version(text, &a, &b, &c);
	/* Mask the text with two secrets cut from the input itself. */
	secrets[0] = text + size / 2;
	secrets[1] = size > 3 ? text + size - 3 : "";
	masked = pl_redact(text, secrets, 2);
	free(masked);
	free(text);
	return 0;
}
