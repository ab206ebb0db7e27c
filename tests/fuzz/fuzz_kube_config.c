/*
 * fuzz_kube_config.c - libFuzzer target for the kubeconfig parser (libyaml
 * document walking, base64 *-data decoding, exec plugin lists): any input
 * must give a config or a clean error, never a crash or a leak.
 */
#include <stddef.h>
#include <stdint.h>

#include "kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kube_config *c = NULL;
	struct err e;

	if (kube_config_parse("/fuzz/kubeconfig", (const char *)data, size, NULL, &c, &e) == 0)
		kube_config_free(c);
	return 0;
}
