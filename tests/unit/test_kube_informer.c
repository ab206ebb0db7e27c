/*
 * test_kube_informer.c - the informer's and the runtime's limits that need
 * no server: handler registration refuses past its bound (instead of
 * dropping handlers silently) and after start; the heap trim after each
 * list page is safe when informers list at once from a fresh process.
 */
#include <pthread.h>
#include <setjmp.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kube/kube_priv.h"

static const struct kube_resource stacks = { "pulumi.com", "v1", "stacks", "Stack", 1 };

/* A client for a port nothing listens on: the informer's thread fails and
 * backs off, which these tests do not care about. */
static struct kube_client *unreachable_client(void)
{
	struct kube_config *cfg = calloc(1, sizeof(*cfg));
	struct err e;
	struct kube_client *c;

	cfg->server = strdup("http://127.0.0.1:1");
	cfg->namespace = strdup("default");
	cfg->source = strdup("test");
	c = kube_client_new(cfg, &e);
	assert_non_null(c);
	return c;
}

#define TRIMMERS 16
#define TRIM_PROCESSES 100

static pthread_barrier_t trim_start;

static void *trimmer(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&trim_start);
	kube_heap_trim();
	return NULL;
}

/* Informers trim after each page and list together at start; in a fresh
 * process that is the allocator's first use.  Unserialized, about one
 * process in twelve crashed (so a hundred catch it). */
static void concurrent_first_trims(void **state)
{
	(void)state;
	int crashed = 0;

	for (int p = 0; p < TRIM_PROCESSES; p++) {
		pid_t pid = fork();
		int status;
		assert_true(pid >= 0);
		if (pid == 0) {
			pthread_t t[TRIMMERS];
			pthread_barrier_init(&trim_start, NULL, TRIMMERS);
			for (int i = 0; i < TRIMMERS; i++)
				pthread_create(&t[i], NULL, trimmer, NULL);
			for (int i = 0; i < TRIMMERS; i++)
				pthread_join(t[i], NULL);
			_exit(0);
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			crashed++;
	}
	assert_int_equal(crashed, 0);
}

static void handler(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	(void)ud; (void)inf; (void)ch; (void)old; (void)obj;
}

static void handlers_past_the_bound_are_refused(void **state)
{
	(void)state;
	struct kube_client *c = unreachable_client();
	struct kube_informer *inf = kube_informer_new(c, &stacks, NULL);
	struct err e;

	for (int i = 0; i < 8; i++)
		assert_int_equal(kube_informer_add_handler(inf, handler, NULL), 0);
	assert_int_equal(kube_informer_add_handler(inf, handler, NULL), -1);
	kube_informer_free(inf);

	inf = kube_informer_new(c, &stacks, NULL);
	assert_int_equal(kube_informer_start(inf, &e), 0);
	/* The informer's thread reads the handlers without a lock. */
	assert_int_equal(kube_informer_add_handler(inf, handler, NULL), -1);
	kube_informer_free(inf);
	kube_client_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(concurrent_first_trims),   /* first: before any trim */
		cmocka_unit_test(handlers_past_the_bound_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
