/*
 * http_get.c - a test-only client over base/http.h, so the e2e tests can
 * exercise what the commands do not show directly: connection reuse across
 * http_do calls, cancellation from another thread, error bodies.
 *
 *   http_get [--cancel-after-ms N] [--retries N] [--method M] URL...
 *
 * For each URL, one line on stdout: "<status> <body bytes>" or
 * "error <code name> <message>".
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/http.h"

static volatile int cancel_flag;

static void *cancel_later(void *arg)
{
	long ms = *(long *)arg;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
	__atomic_store_n(&cancel_flag, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "cancel-after-ms", required_argument, NULL, 'c' },
		{ "retries", required_argument, NULL, 'r' },
		{ "method", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	struct http_opts o;
	const char *method = "GET";
	long cancel_ms = -1;
	pthread_t th;
	struct err e;
	int c, rc = 0;

	http_opts_default(&o);
	o.backoff_initial_ms = 100;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': cancel_ms = atol(optarg); break;
		case 'r': o.retries = atoi(optarg); break;
		case 'm': method = optarg; break;
		default: return 2;
		}
	}
	if (http_global_init(&e) < 0)
		return 1;
	if (cancel_ms >= 0) {
		o.cancel = &cancel_flag;
		pthread_create(&th, NULL, cancel_later, &cancel_ms);
	}
	for (int i = optind; i < argc; i++) {
		struct http_request req = { .method = method, .url = argv[i] };
		struct http_response r;
		if (http_do(&o, &req, &r, &e) < 0) {
			printf("error %s %s\n", err_code_name(e.code), e.msg);
			rc = 1;
			continue;
		}
		printf("%ld %zu\n", r.status, r.body_len);
		http_response_free(&r);
	}
	if (cancel_ms >= 0)
		pthread_join(th, NULL);
	http_global_cleanup();
	return rc;
}
