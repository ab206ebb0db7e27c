/*
 * fuzz_url.c - libFuzzer target for url_for_log, with its promise as the
 * oracle: whatever the input, the printable form has no query, no
 * fragment and no userinfo (no '@' in the authority), and no raw control
 * character; a violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/url.h"

static void check(const char *out)
{
	const char *auth = strstr(out, "://");
	size_t alen;

	if (strpbrk(out, "?#") != NULL)
		abort();
	for (const unsigned char *p = (const unsigned char *)out; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			abort();
	auth = auth != NULL ? auth + 3 : out;
	alen = strcspn(auth, "/");
	if (memchr(auth, '@', alen) != NULL)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *dup;
	char out[URL_LOG_MAX];

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	check(url_for_log(text, out, sizeof(out)));
	dup = url_for_log_dup(text);
	if (dup != NULL)
		check(dup);
	free(dup);
	free(text);
	return 0;
}
