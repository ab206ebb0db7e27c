/*
 * fuzz_oci_www_authenticate.c - libFuzzer target for the WWW-Authenticate
 * challenge parser (a header any registry, or anything posing as one, can
 * send), plus the docker config.json lookup on the same bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oci/oci.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct oci_challenge c;
	struct oci_creds creds;
	char *text, *helper = NULL;
	struct err e;

	text = malloc(size + 1);
	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (oci_challenge_parse(text, &c, &e) == 0)
		oci_challenge_free(&c);
	if (oci_docker_config_parse(text, size, "r.example.com:5000", &creds, &helper, &e) == 0) {
		oci_creds_free(&creds);
		free(helper);
	}
	free(text);
	return 0;
}
