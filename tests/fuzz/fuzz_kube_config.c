/*
 * fuzz_kube_config.c - libFuzzer target for the kubeconfig parser (libyaml
 * document walking, base64 *-data decoding, exec plugin lists) and the
 * checks after it (server URL, TLS settings, tokens, the server as
 * printed); the same bytes also go to the RFC 3339 parser that reads exec
 * credentials' expiry.  Any input must give a result or a clean error,
 * never a crash or a leak.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kube_config *c = NULL;
	struct err e;
	char server[256], *text;
	int64_t t;

	if (kube_config_parse("/fuzz/kubeconfig", (const char *)data, size, NULL, &c, &e) == 0) {
		kube_config_validate(c, &e);
		kube_config_server_for_log(c, server, sizeof(server));
		kube_config_free(c);
	}
	text = malloc(size + 1);
	if (text != NULL) {
		memcpy(text, data, size);
		text[size] = '\0';
		kube_parse_time_us(text, &t);
		free(text);
	}
	return 0;
}
