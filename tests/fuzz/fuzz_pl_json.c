/*
 * fuzz_pl_json.c - libFuzzer target for the pulumi driver's JSON output
 * parsers (stack output, stack history, version) and the
 * secret masker (pl_redact, pl_redact_tail with its multi-line and JSON
 * rules), all of which read text the CLI printed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pulumi/pulumi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	const char *secrets[3];
	char *masked;
	int empty, a, b, c;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	cJSON_Delete(pl_parse_outputs(text));
	cJSON_Delete(pl_parse_history(text, &empty));
	pl_parse_version(text, &a, &b, &c);
	/* Mask the text with secrets cut from the input itself; the whole
	 * input as one makes the multi-line and JSON-leaf rules run on it. */
	secrets[0] = text + size / 2;
	secrets[1] = size > 3 ? text + size - 3 : "";
	secrets[2] = text;
	masked = pl_redact(text, secrets, 3);
	if (masked && strlen(text) >= 8 && !strstr(text, "[secret]") && strstr(masked, text))
		__builtin_trap();   /* a whole secret survived */
	free(masked);
	free(pl_redact_tail(text, 1, secrets, 2));
	free(text);
	return 0;
}
