/*
 * test_http.c - the HTTP client's retry policy and header parsing.
 * Requests against real servers are covered by tests/e2e/test_fetch.py.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include "base/http.h"

static void retryable_statuses(void **state)
{
	(void)state;
	assert_true(http_status_retryable(429));
	assert_true(http_status_retryable(500));
	assert_true(http_status_retryable(502));
	assert_true(http_status_retryable(503));
	assert_true(http_status_retryable(504));
	assert_true(http_status_retryable(599));
}

static void never_retried_statuses(void **state)
{
	(void)state;
	/* 501 Not Implemented will not change on a retry. */
	assert_false(http_status_retryable(501));
	const long no[] = { 200, 204, 301, 304, 400, 401, 403, 404, 405, 409, 410, 413, 422, 428 };
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		assert_false(http_status_retryable(no[i]));
}

static void backoff_doubles_and_caps(void **state)
{
	struct http_opts o;
	(void)state;

	http_opts_default(&o);
	o.backoff_initial_ms = 100;
	o.backoff_max_ms = 1000;
	assert_int_equal(http_backoff_ms(&o, 1, 0, 0.0), 100);
	assert_int_equal(http_backoff_ms(&o, 2, 0, 0.0), 200);
	assert_int_equal(http_backoff_ms(&o, 3, 0, 0.0), 400);
	assert_int_equal(http_backoff_ms(&o, 4, 0, 0.0), 800);
	assert_int_equal(http_backoff_ms(&o, 5, 0, 0.0), 1000);
	assert_int_equal(http_backoff_ms(&o, 60, 0, 0.0), 1000);
}

static void backoff_jitter_is_bounded(void **state)
{
	struct http_opts o;
	(void)state;

	http_opts_default(&o);
	o.backoff_initial_ms = 1000;
	o.backoff_max_ms = 60000;
	long lo = http_backoff_ms(&o, 1, 0, 0.0), hi = http_backoff_ms(&o, 1, 0, 0.999);
	assert_int_equal(lo, 1000);
	assert_true(hi > lo && hi < 1100);
}

static void retry_after_overrides_but_is_capped(void **state)
{
	struct http_opts o;
	(void)state;

	http_opts_default(&o);
	o.backoff_initial_ms = 100;
	o.backoff_max_ms = 5000;
	assert_int_equal(http_backoff_ms(&o, 1, 3, 0.0), 3000);
	/* A smaller Retry-After does not shorten the backoff. */
	assert_int_equal(http_backoff_ms(&o, 4, 0, 0.0), 800);
	assert_int_equal(http_backoff_ms(&o, 4, 0, 0.0), http_backoff_ms(&o, 4, 0, 0.0));
	/* A hostile Retry-After cannot stall us past the cap, nor overflow. */
	assert_int_equal(http_backoff_ms(&o, 1, 1000000, 0.0), 5000);
	assert_int_equal(http_backoff_ms(&o, 1, LONG_MAX, 0.0), 5000);
	assert_int_equal(http_backoff_ms(&o, 1, LONG_MAX / 1000 + 1, 0.0), 5000);
}

static void header_lookup(void **state)
{
	char raw[] = "HTTP/1.1 200 OK\r\n"
	    "Content-Type: application/json\r\n"
	    "docker-content-digest:   sha256:abc  \r\n"
	    "X-Empty:\r\n"
	    "\r\n";
	struct http_response r = { .raw_headers = raw };
	(void)state;

	char *v = http_response_header(&r, "Docker-Content-Digest");
	assert_non_null(v);
	assert_string_equal(v, "sha256:abc");
	free(v);
	v = http_response_header(&r, "content-type");
	assert_string_equal(v, "application/json");
	free(v);
	v = http_response_header(&r, "X-Empty");
	assert_string_equal(v, "");
	free(v);
	assert_null(http_response_header(&r, "Content"));
	assert_null(http_response_header(&r, "Missing"));
}

static void retries_follow_the_method(void **state)
{
	struct http_request get = { .method = "GET" }, put = { .method = "PUT" }, dflt = { 0 };
	struct http_request post = { .method = "POST" }, patch = { .method = "PATCH" };
	struct http_request forced = { .method = "POST", .retry_unsafe = 1 };
	(void)state;

	assert_true(http_method_idempotent("GET"));
	assert_true(http_method_idempotent("DELETE"));
	assert_false(http_method_idempotent("POST"));
	assert_false(http_method_idempotent("PATCH"));
	assert_true(http_should_retry_status(&get, 500));
	assert_true(http_should_retry_status(&put, 502));
	assert_true(http_should_retry_status(&dflt, 504));
	/* A POST that got a 500 may have been acted on: not repeated. */
	assert_false(http_should_retry_status(&post, 500));
	assert_false(http_should_retry_status(&patch, 502));
	/* 429 and 503 say the server did nothing: safe for any method. */
	assert_true(http_should_retry_status(&post, 429));
	assert_true(http_should_retry_status(&patch, 503));
	assert_true(http_should_retry_status(&forced, 500));
	assert_false(http_should_retry_status(&get, 404));
	assert_false(http_should_retry_status(&forced, 400));
}

static void defaults_are_safe(void **state)
{
	struct http_opts o;
	(void)state;

	http_opts_default(&o);
	assert_int_equal(o.insecure_skip_tls_verify, 0);
	assert_true(o.connect_timeout_ms > 0);
	assert_true(o.timeout_ms > 0);
	assert_true(o.max_redirects > 0 && o.max_redirects <= 20);
	assert_true(o.retries >= 1);
}

/* Both forms of RFC 9110's Retry-After, the HTTP-date one included. */
static void retry_after_parses_seconds_and_dates(void **state)
{
	/* Sun, 06 Nov 1994 08:49:37 GMT */
	time_t now = 784111777;
	struct http_response r = { .raw_headers = "HTTP/1.1 503 x\r\nRetry-After: 120\r\n\r\n" };
	(void)state;

	assert_int_equal(http_parse_retry_after("7", now), 7);
	assert_int_equal(http_parse_retry_after(" 30 ", now), 30);
	assert_int_equal(http_parse_retry_after("Sun, 06 Nov 1994 08:50:37 GMT", now), 60);
	assert_int_equal(http_parse_retry_after("Sun, 06 Nov 1994 08:40:00 GMT", now), 0);
	assert_int_equal(http_parse_retry_after("99999999999", now), 86400);
	assert_int_equal(http_parse_retry_after("soon", now), -1);
	assert_int_equal(http_parse_retry_after("5s", now), -1);
	assert_int_equal(http_parse_retry_after(NULL, now), -1);
	assert_int_equal(http_response_retry_after(&r), 120);
	r.raw_headers = "HTTP/1.1 503 x\r\n\r\n";
	assert_int_equal(http_response_retry_after(&r), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(retryable_statuses),
		cmocka_unit_test(never_retried_statuses),
		cmocka_unit_test(backoff_doubles_and_caps),
		cmocka_unit_test(backoff_jitter_is_bounded),
		cmocka_unit_test(retry_after_overrides_but_is_capped),
		cmocka_unit_test(header_lookup),
		cmocka_unit_test(retries_follow_the_method),
		cmocka_unit_test(defaults_are_safe),
		cmocka_unit_test(retry_after_parses_seconds_and_dates),
	};
	return cmocka_run_group_tests_name("http", tests, NULL, NULL);
}
