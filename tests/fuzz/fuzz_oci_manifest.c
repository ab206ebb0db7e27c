/*
 * fuzz_oci_manifest.c - libFuzzer target for the manifest/index parser and
 * what consumes its output (layer and platform selection), fed untrusted
 * registry bytes.  The first input byte picks the Content-Type.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oci/oci.h"

static const char *const content_types[] = {
	NULL, OCI_MT_MANIFEST, OCI_MT_INDEX, OCI_MT_DOCKER_MANIFEST, OCI_MT_DOCKER_LIST,
	"application/json", "text/plain; charset=utf-8", "",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct oci_manifest m;
	struct err e;
	const char *ct;

	if (size < 1)
		return 0;
	ct = content_types[data[0] % (sizeof(content_types) / sizeof(content_types[0]))];
	if (oci_manifest_parse((const char *)data + 1, size - 1, ct, &m, &e) == 0) {
		if (m.kind == OCI_KIND_INDEX) {
			oci_select_platform(&m, &e);
		} else {
			oci_select_layer(&m, NULL, &e);
			oci_select_layer(&m, OCI_MT_LAYER_TAR, &e);
		}
		oci_manifest_free(&m);
	}
	return 0;
}
