/*
 * test_kube_informer.c - the informer's and the runtime's limits that need
 * no server: handler registration refuses past its bound (instead of
 * dropping handlers silently) and after start.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kube/kube.h"

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
		cmocka_unit_test(handlers_past_the_bound_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
