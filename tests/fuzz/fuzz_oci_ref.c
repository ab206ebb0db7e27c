/*
 * fuzz_oci_ref.c - libFuzzer target for the user-facing string parsers of
 * oci/: references (oci://host/repo:tag@digest), semver ranges and
 * versions, and --ignore-paths patterns (matched against a fixed path).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oci/oci.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *s;
	struct oci_ref ref;
	struct oci_semver v;
	struct oci_semver_range *r;
	struct oci_ignore *ig;
	struct err e;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (oci_ref_parse(text, &ref, &e) == 0) {
		s = oci_ref_string(&ref);
		free(s);
		oci_ref_free(&ref);
	}
	r = oci_semver_range_parse(text, &e);
	if (r != NULL) {
		char *tags[] = { "1.2.3", "v2.0.0-rc.1", "0.0.1", "latest", text };
		oci_semver_select(r, tags, 5);
		oci_semver_range_free(r);
	}
	oci_semver_parse(text, &v);
	ig = oci_ignore_parse(text, &e);
	if (ig != NULL) {
		oci_ignore_match(ig, "a/b/c.txt", 0);
		oci_ignore_match(ig, "a/b", 1);
		oci_ignore_free(ig);
	}
	free(text);
	return 0;
}
