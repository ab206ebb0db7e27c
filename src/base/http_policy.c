/*
 * http_policy.c - the pure parts of the HTTP client (http.h): which
 * statuses and methods are retried, the backoff, Retry-After, and header
 * lookup in a response.  No transfer state: http.c does the requests.
 */
#include "base/http.h"
#include "base/mem.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int http_status_retryable(long status)
{
	return status == 429 || (status >= 500 && status <= 599 && status != 501);
}

long http_backoff_ms(const struct http_opts *o, int attempt, long retry_after_s, double jitter)
{
	long wait = o->backoff_initial_ms;

	for (int i = 1; i < attempt && wait < o->backoff_max_ms; i++)
		wait *= 2;
	if (wait > o->backoff_max_ms)
		wait = o->backoff_max_ms;
	wait += (long)((double)wait * 0.1 * jitter);
	/* Compare in seconds: a hostile Retry-After must not overflow. */
	if (retry_after_s > 0 && retry_after_s > wait / 1000)
		wait = retry_after_s > o->backoff_max_ms / 1000 ? o->backoff_max_ms : retry_after_s * 1000;
	if (wait > o->backoff_max_ms)
		wait = o->backoff_max_ms;
	return wait;
}

int http_method_idempotent(const char *method)
{
	static const char *const safe[] = { "GET", "HEAD", "PUT", "DELETE", "OPTIONS" };

	if (method == NULL)
		return 1;
	for (size_t i = 0; i < sizeof(safe) / sizeof(safe[0]); i++)
		if (strcmp(method, safe[i]) == 0)
			return 1;
	return 0;
}

long http_parse_retry_after(const char *value, time_t now)
{
	char *end;
	long long secs;
	time_t when;

	if (value == NULL)
		return -1;
	while (*value == ' ' || *value == '\t')
		value++;
	if (isdigit((unsigned char)*value)) {
		secs = strtoll(value, &end, 10);
		while (*end == ' ' || *end == '\t' || *end == '\r')
			end++;
		if (*end != '\0')
			return -1;
		return secs > 86400 ? 86400 : (long)secs;
	}
	when = curl_getdate(value, NULL);
	if (when == (time_t)-1)
		return -1;
	return when <= now ? 0 : (when - now > 86400 ? 86400 : (long)(when - now));
}

long http_response_retry_after(const struct http_response *r)
{
	char *v = http_response_header(r, "Retry-After");
	long s = http_parse_retry_after(v, time(NULL));

	free(v);
	return s;
}

void http_response_free(struct http_response *r)
{
	if (r == NULL)
		return;
	mem_free_all(r->body, r->raw_headers, r->effective_url);
	memset(r, 0, sizeof(*r));
}

char *http_response_header(const struct http_response *r, const char *name)
{
	size_t nl = strlen(name);
	const char *p = r->raw_headers;

	while (p != NULL && *p != '\0') {
		const char *eol = strchr(p, '\n');
		size_t linelen = eol ? (size_t)(eol - p) : strlen(p);
		if (linelen > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1, *end = p + linelen;
			while (v < end && (*v == ' ' || *v == '\t'))
				v++;
			while (end > v && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
				end--;
			return strndup(v, (size_t)(end - v));
		}
		p = eol ? eol + 1 : NULL;
	}
	return NULL;
}
