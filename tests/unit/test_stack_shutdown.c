/*
 * test_stack_shutdown.c - stack_ctl_unwatch frees no informer while
 * another informer's handler may still read the Stack informer (issue 21
 * item 7), shown deterministically: a Secret handler is held inside its
 * Stack-index lookup while unwatch runs.
 *
 * The real informers run against the scripted API of stack_fake_api.h:
 * one Stack (apps/web, reading Secret apps/creds) and that Secret.  The
 * Secret informer's handler (on_reference, enqueue_dependents) has read
 * the Stack informer's pointer and calls kube_informer_by_index with it;
 * the test holds it there and lets it go only when unwatch waits for the
 * Secret informer's thread (kube_informer_stop on it), the last moment
 * before unwatch would wait forever.  Joining every informer before
 * freeing any, the Stack informer is still alive then and the lookup
 * finds apps/web; freeing each informer as soon as its thread is joined,
 * the Stack informer is freed by then and the lookup reads freed memory
 * (an ASan heap-use-after-free, every run).
 *
 * The two interpositions are the linker's (--wrap, set for this binary
 * alone in the Makefile): calls from stack_ctl.o into kube_informer.o go
 * through the __wrap_ functions below, so the product carries no hook.
 * The e2e counterpart (SIGTERM during event bursts, both tiers) is
 * tests/e2e/test_stack_shutdown.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/fs.h"
#include "kube/kube.h"
#include "kube/kube_priv.h"
#include "stack/stack_machine.h"
#include "stack_fake_api.h"

#define HELD_VALUE "Secret/apps/creds"

/* The held handler and what it saw; lock guards all but ctl. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct stack_ctl *ctl;
	int held;       /* the Secret handler is waiting in its lookup */
	int released;   /* unwatch is waiting for the Secret informer's thread */
	int found;      /* what the held lookup returned (-2: not yet) */
} H = { .lock = PTHREAD_MUTEX_INITIALIZER, .found = -2 };

int __real_kube_informer_by_index(struct kube_informer *inf, const char *index, const char *value,
    void (*fn)(void *ud, const char *key), void *ud);
int __wrap_kube_informer_by_index(struct kube_informer *inf, const char *index, const char *value,
    void (*fn)(void *ud, const char *key), void *ud);
void __real_kube_informer_stop(struct kube_informer *inf);
void __wrap_kube_informer_stop(struct kube_informer *inf);

/* The first lookup for Secret apps/creds (the Secret informer's handler,
 * inf already read from sc->stacks.inf) waits until released. */
int __wrap_kube_informer_by_index(struct kube_informer *inf, const char *index, const char *value,
    void (*fn)(void *ud, const char *key), void *ud)
{
	int hold, n;

	pthread_mutex_lock(&H.lock);
	hold = !H.held && strcmp(index, "ref") == 0 && strcmp(value, HELD_VALUE) == 0;
	if (hold) {
		H.held = 1;
		pthread_cond_broadcast(&H.cond);
		while (!H.released)
			pthread_cond_wait(&H.cond, &H.lock);
	}
	pthread_mutex_unlock(&H.lock);
	n = __real_kube_informer_by_index(inf, index, value, fn, ud);
	if (hold) {
		pthread_mutex_lock(&H.lock);
		H.found = n;
		pthread_mutex_unlock(&H.lock);
	}
	return n;
}

/* Waiting for the Secret informer's thread releases the held handler
 * (it would never end otherwise). */
void __wrap_kube_informer_stop(struct kube_informer *inf)
{
	pthread_mutex_lock(&H.lock);
	if (H.ctl != NULL && inf == H.ctl->secrets.inf && !H.released) {
		H.released = 1;
		pthread_cond_broadcast(&H.cond);
	}
	pthread_mutex_unlock(&H.lock);
	__real_kube_informer_stop(inf);
}

#define STACK_LIST "{'kind': 'StackList', 'apiVersion': 'pulumi.com/v1', 'metadata': {'resourceVersion': '5'}, " \
	"'items': [{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', 'metadata': {'name': 'web', " \
	"'namespace': 'apps', 'uid': 'u-1', 'generation': 1, 'resourceVersion': '4'}, " \
	"'spec': {'stack': 'dev', 'ociSource': {'url': 'oci://registry.example/web', " \
	"'secretRef': {'name': 'creds'}}}}]}"
#define SECRET_LIST "{'kind': 'PartialObjectMetadataList', 'apiVersion': 'meta.k8s.io/v1', " \
	"'metadata': {'resourceVersion': '6'}, 'items': [{'kind': 'PartialObjectMetadata', " \
	"'apiVersion': 'meta.k8s.io/v1', 'metadata': {'name': 'creds', 'namespace': 'apps', " \
	"'resourceVersion': '3'}}]}"
#define EMPTY_LIST "{'kind': 'PartialObjectMetadataList', 'apiVersion': 'meta.k8s.io/v1', " \
	"'metadata': {'resourceVersion': '6'}, 'items': []}"

static char tmp[256];

static int setup(void **state)
{
	if (fake_setup(state) < 0)
		return -1;
	snprintf(tmp, sizeof(tmp), "/tmp/test_stack_shutdown.XXXXXX");
	if (mkdtemp(tmp) == NULL)
		return -1;
	clock_mono_cond_init(&H.cond);
	fake_route("/apis/pulumi.com/v1", 200, "{'kind': 'APIResourceList', 'resources': [{'name': 'stacks'}]}");
	fake_route("/apis/pulumi.com/v1/stacks", 200, STACK_LIST);
	fake_route("/api/v1/secrets", 200, SECRET_LIST);
	fake_route("/api/v1/configmaps", 200, EMPTY_LIST);
	return 0;
}

static int teardown(void **state)
{
	struct err e;

	fs_rm_rf(tmp, &e);
	pthread_cond_destroy(&H.cond);
	return fake_teardown(state);
}

/* Waits (bounded, so a broken setup fails rather than hangs) until the
 * Secret handler is held. */
static void wait_held(void)
{
	int64_t deadline = kube_mono_deadline(30000);

	pthread_mutex_lock(&H.lock);
	while (!H.held && clock_mono_cond_wait(&H.cond, &H.lock, deadline) == 0)
		;
	pthread_mutex_unlock(&H.lock);
	assert_true(H.held);
}

static void test_unwatch_frees_the_stack_informer_only_after_every_handler_ends(void **state)
{
	struct kube_queue *q = kube_queue_new(NULL);
	struct stack_opts o;
	struct stack_ctl *ctl;
	struct err e;
	(void)state;

	assert_non_null(q);
	stack_opts_default(&o);
	o.storage_path = tmp;
	ctl = stack_ctl_new(sc.client, q, NULL, &o, &e);
	assert_non_null(ctl);
	H.ctl = ctl;
	assert_int_equal(stack_ctl_watch(ctl, &e), 0);
	wait_held();
	/* The Stack is in the index the held handler is about to read. */
	assert_int_equal(kube_informer_wait_synced(ctl->stacks.inf, 30000), 0);

	stack_ctl_unwatch(ctl);
	assert_int_equal(H.released, 1);
	/* The held lookup ran on the live Stack cache and found the reader. */
	assert_int_equal(H.found, 1);

	H.ctl = NULL;
	stack_ctl_free(ctl);
	kube_queue_free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unwatch_frees_the_stack_informer_only_after_every_handler_ends),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
