/*
 * url.c - printing URLs without their credentials (see url.h).
 *
 * libcurl's URL parser does the precise job when it accepts the text; only
 * what it refuses falls back to the conservative cut, which never needs to
 * understand the URL to be safe.
 */
#include "base/url.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* scheme://host[:port]/path of a URL libcurl accepts, malloc'd by curl
 * (curl_free), or NULL. */
static char *parsed_without_secrets(const char *url)
{
	CURLU *u = curl_url();
	char *out = NULL;

	if (u == NULL)
		return NULL;
	if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
		curl_url_set(u, CURLUPART_USER, NULL, 0);
		curl_url_set(u, CURLUPART_PASSWORD, NULL, 0);
		curl_url_set(u, CURLUPART_OPTIONS, NULL, 0);
		curl_url_set(u, CURLUPART_QUERY, NULL, 0);
		curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0);
		if (curl_url_get(u, CURLUPART_URL, &out, 0) != CURLUE_OK)
			out = NULL;
	}
	curl_url_cleanup(u);
	return out;
}

/*
 * For text libcurl refuses: drop through the last '@' after "://", or in
 * the whole text when it has no scheme (a
 * password may contain '?', '#' or '/', so the userinfo is cut first), then
 * from the first '?' or '#'.  Writes into out, which has room for url.
 */
static void cut_conservatively(const char *url, char *out)
{
	const char *sep = strstr(url, "://");
	const char *rest = url, *at;
	size_t head = 0;

	/* Only a real scheme ([A-Za-z][A-Za-z0-9+.-]*) is kept as the head;
	 * "x#p://..." has none, and its '#' must not survive. */
	if (sep != NULL && (sep == url || strspn(url, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789+.-") != (size_t)(sep - url)))
		sep = NULL;
	if (sep != NULL) {
		head = (size_t)(sep + 3 - url);
		rest = sep + 3;
	}
	at = strrchr(rest, '@');
	if (at != NULL)
		rest = at + 1;
	memcpy(out, url, head);
	size_t keep = strcspn(rest, "?#");
	memcpy(out + head, rest, keep);
	out[head + keep] = '\0';
}

const char *url_for_log(const char *url, char *out, size_t n)
{
	char *parsed, *cut;

	if (n == 0)
		return out;
	if (url == NULL) {
		log_printable("(none)", out, n);
		return out;
	}
	parsed = parsed_without_secrets(url);
	if (parsed != NULL) {
		log_printable(parsed, out, n);
		curl_free(parsed);
		return out;
	}
	cut = malloc(strlen(url) + 1);
	if (cut == NULL) {
		log_printable("(URL not shown)", out, n);
		return out;
	}
	cut_conservatively(url, cut);
	log_printable(cut, out, n);
	free(cut);
	return out;
}

char *url_for_log_dup(const char *url)
{
	size_t n = (url != NULL ? strlen(url) * 4 : 0) + 16;
	char *out = malloc(n);

	if (out != NULL)
		url_for_log(url, out, n);
	return out;
}
