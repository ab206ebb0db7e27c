/*
 * test_kube_queue.c - the work queue's client-go semantics (dedup, one
 * worker per key, re-run when re-added during processing, delayed adds
 * with earliest-wins, per-key exponential backoff, overall token bucket,
 * shutdown and drain), the worker pool's result handling, the reflector
 * backoff and Go duration parsing.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <limits.h>

#include "base/metrics.h"
#include "kube/kube.h"

static void dedups_while_waiting(void **state)
{
	(void)state;
	struct kube_queue *q = kube_queue_new(NULL);
	char *k;

	kube_queue_add(q, "ns/a");
	kube_queue_add(q, "ns/b");
	kube_queue_add(q, "ns/a");
	kube_queue_add(q, "ns/a");
	assert_int_equal(kube_queue_len(q), 2);
	k = kube_queue_get(q);
	assert_string_equal(k, "ns/a");   /* FIFO */
	kube_queue_done(q, k);
	free(k);
	k = kube_queue_get(q);
	assert_string_equal(k, "ns/b");
	kube_queue_done(q, k);
	free(k);
	assert_int_equal(kube_queue_len(q), 0);
	kube_queue_free(q);
}

static void readded_while_processing_runs_again_after_done(void **state)
{
	(void)state;
	struct kube_queue *q = kube_queue_new(NULL);
	char *k, *k2;

	kube_queue_add(q, "x");
	k = kube_queue_get(q);
	kube_queue_add(q, "x");
	kube_queue_add(q, "x");
	/* not handed to a second worker while the first holds it */
	assert_int_equal(kube_queue_len(q), 0);
	kube_queue_done(q, k);
	free(k);
	assert_int_equal(kube_queue_len(q), 1);
	k2 = kube_queue_get(q);
	assert_string_equal(k2, "x");
	kube_queue_done(q, k2);
	free(k2);
	assert_int_equal(kube_queue_len(q), 0);
	kube_queue_free(q);
}

static void delayed_adds(void **state)
{
	(void)state;
	struct kube_queue *q = kube_queue_new(NULL);
	char *k;

	kube_queue_add_after(q, "late", 60000);
	kube_queue_add_after(q, "soon", 30);
	kube_queue_add_after(q, "late", 20);   /* earlier wins */
	assert_int_equal(kube_queue_len(q), 0);
	k = kube_queue_get(q);   /* blocks until one is due */
	assert_true(strcmp(k, "late") == 0 || strcmp(k, "soon") == 0);
	kube_queue_done(q, k);
	free(k);
	k = kube_queue_get(q);
	assert_true(strcmp(k, "late") == 0 || strcmp(k, "soon") == 0);
	kube_queue_done(q, k);
	free(k);
	/* the superseded 60 s entry must not come back as a duplicate */
	kube_queue_add_after(q, "other", 40);
	k = kube_queue_get(q);
	assert_string_equal(k, "other");
	kube_queue_done(q, k);
	free(k);
	kube_queue_add_after(q, "now", 0);
	assert_int_equal(kube_queue_len(q), 1);
	kube_queue_free(q);
}

static void per_key_backoff_and_forget(void **state)
{
	(void)state;
	struct kube_queue_opts o = { 5, 1000, 1000, 1000, NULL };
	struct kube_queue *q = kube_queue_new(&o);

	assert_int_equal(kube_queue_when(q, "a"), 5);
	assert_int_equal(kube_queue_when(q, "a"), 10);
	assert_int_equal(kube_queue_when(q, "a"), 20);
	assert_int_equal(kube_queue_when(q, "b"), 5);   /* per key */
	assert_int_equal(kube_queue_requeues(q, "a"), 3);
	for (int i = 0; i < 20; i++)
		kube_queue_when(q, "a");
	assert_int_equal(kube_queue_when(q, "a"), 1000);   /* capped */
	kube_queue_forget(q, "a");
	assert_int_equal(kube_queue_requeues(q, "a"), 0);
	assert_int_equal(kube_queue_when(q, "a"), 5);
	kube_queue_free(q);
}

static void per_key_backoff_cap(void **state)
{
	(void)state;
	struct kube_queue_opts o = { 5, 1000000, 1000, 1000, NULL };
	struct kube_queue *q = kube_queue_new(&o);

	for (int i = 0; i < 30; i++)
		kube_queue_when(q, "a");
	assert_int_equal(kube_queue_when(q, "a"), 1000000);
	/* One key's own bound, below the queue's */
	assert_int_equal(kube_queue_when_max(q, "a", 60000), 60000);
	assert_int_equal(kube_queue_when_max(q, "b", 60000), 5);   /* still exponential below it */
	assert_int_equal(kube_queue_when_max(q, "b", 60000), 10);
	assert_int_equal(kube_queue_when_max(q, "a", 0), 1000000);   /* 0: the queue's cap */
	assert_int_equal(kube_queue_requeues(q, "a"), 33);
	kube_queue_add_rate_limited_max(q, "c", 1);
	kube_queue_add_rate_limited_max(q, "c", 1);
	{
		char *k = kube_queue_get(q);   /* due within a millisecond or two */
		assert_string_equal(k, "c");
		kube_queue_done(q, k);
		free(k);
	}
	kube_queue_free(q);
}

static void huge_delays_saturate(void **state)
{
	(void)state;
	struct kube_queue *q = kube_queue_new(NULL);
	/* A bucket so slow its debt would overflow a long in milliseconds. */
	struct kube_queue_opts slow = { 1, 1000, 1e-300, 1, NULL };
	struct kube_queue *q2 = kube_queue_new(&slow);
	char *k;

	/* now + LONG_MAX used to wrap to a time long past: due at once. */
	kube_queue_add_after(q, "never", LONG_MAX);
	kube_queue_add_after(q, "soon", 20);
	k = kube_queue_get(q);
	assert_string_equal(k, "soon");
	kube_queue_done(q, k);
	free(k);
	assert_int_equal(kube_queue_len(q), 0);
	kube_queue_when(q2, "x");
	assert_true(kube_queue_when(q2, "y") > 0);
	assert_true(kube_queue_when(q2, "z") <= 366L * 86400 * 1000);
	kube_queue_free(q);
	kube_queue_free(q2);
}

static void overall_bucket_limits_bursts(void **state)
{
	(void)state;
	/* One token per 1000 s, burst 2: the third distinct key waits ~1000 s,
	 * the fourth ~2000 s, whatever their own backoff says.  The rate is so
	 * low that the time between these calls cannot move the results. */
	struct kube_queue_opts o = { 1, 100000000, 0.001, 2, NULL };
	struct kube_queue *q = kube_queue_new(&o);
	long w1 = kube_queue_when(q, "k1"), w2 = kube_queue_when(q, "k2");
	long w3 = kube_queue_when(q, "k3"), w4 = kube_queue_when(q, "k4");

	assert_true(w1 <= 1 && w2 <= 1);
	assert_true(w3 > 990000 && w3 <= 1000000);
	assert_true(w4 > 1990000 && w4 <= 2000000);
	kube_queue_free(q);
}

static void shutdown_and_drain(void **state)
{
	(void)state;
	struct kube_queue *q = kube_queue_new(NULL);
	char *k;

	kube_queue_add(q, "a");
	k = kube_queue_get(q);
	kube_queue_shutdown(q);
	assert_null(kube_queue_get(q));
	kube_queue_add(q, "b");   /* ignored after shutdown */
	assert_int_equal(kube_queue_drain(q, 10), -1);   /* "a" still processing */
	kube_queue_done(q, k);
	free(k);
	assert_int_equal(kube_queue_drain(q, 1000), 0);
	kube_queue_free(q);
}

/* Many threads hammering few keys: never two workers on one key. */
struct hammer {
	struct kube_queue *q;
	atomic_int active[4];
	atomic_int violations, processed;
};

static void *hammer_worker(void *arg)
{
	struct hammer *h = arg;
	char *k;

	while ((k = kube_queue_get(h->q)) != NULL) {
		int idx = k[0] - 'a';
		if (atomic_fetch_add(&h->active[idx], 1) != 0)
			atomic_fetch_add(&h->violations, 1);
		usleep(100);
		atomic_fetch_sub(&h->active[idx], 1);
		atomic_fetch_add(&h->processed, 1);
		kube_queue_done(h->q, k);
		free(k);
	}
	return NULL;
}

static void one_worker_per_key(void **state)
{
	(void)state;
	struct hammer h = { .q = kube_queue_new(NULL) };
	pthread_t th[6];

	for (int i = 0; i < 6; i++)
		pthread_create(&th[i], NULL, hammer_worker, &h);
	for (int i = 0; i < 4000; i++) {
		char key[2] = { (char)('a' + i % 4), 0 };
		kube_queue_add(h.q, key);
	}
	while (kube_queue_len(h.q) > 0)
		usleep(1000);
	assert_int_equal(kube_queue_drain(h.q, 10000), 0);
	kube_queue_shutdown(h.q);
	for (int i = 0; i < 6; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&h.violations), 0);
	assert_true(atomic_load(&h.processed) >= 4);
	assert_true(atomic_load(&h.processed) <= 4000);
	kube_queue_free(h.q);
}

/* The worker pool: failures are retried with backoff, successes forgotten,
 * requeue-after honoured. */
struct recon {
	atomic_int calls_fail, calls_ok, calls_requeue;
};

static int reconcile(void *ud, const char *key, long *requeue, struct err *e)
{
	struct recon *r = ud;

	if (strcmp(key, "fail") == 0) {
		if (atomic_fetch_add(&r->calls_fail, 1) < 2)
			return err_set(e, ERR_HTTP, "transient");
		return 0;
	}
	if (strcmp(key, "requeue") == 0) {
		if (atomic_fetch_add(&r->calls_requeue, 1) == 0)
			*requeue = 10;
		return 0;
	}
	atomic_fetch_add(&r->calls_ok, 1);
	return 0;
}

static void workers_handle_results(void **state)
{
	(void)state;
	struct recon r = { 0 };
	struct kube_reconciler rec = { reconcile, NULL, &r };
	struct kube_queue *q = kube_queue_new(NULL);
	struct err e;
	struct kube_workers *w = kube_workers_start(q, 3, &rec, &e);
	uint64_t done, failed;

	assert_non_null(w);
	kube_queue_add(q, "fail");
	kube_queue_add(q, "requeue");
	kube_queue_add(q, "ok");
	/* The counters move inside reconcile, before the worker records the
	 * outcome: wait for the outcome too (the success that forgets "fail"). */
	for (int i = 0; i < 5000 && (atomic_load(&r.calls_fail) < 3 || atomic_load(&r.calls_requeue) < 2 ||
	    atomic_load(&r.calls_ok) < 1 || kube_queue_requeues(q, "fail") != 0); i++)
		usleep(1000);
	assert_int_equal(atomic_load(&r.calls_fail), 3);
	assert_int_equal(atomic_load(&r.calls_requeue), 2);
	assert_int_equal(atomic_load(&r.calls_ok), 1);
	assert_int_equal(kube_queue_requeues(q, "fail"), 0);   /* forgotten on success */
	kube_workers_counts(w, &done, &failed);
	assert_int_equal(failed, 2);
	assert_int_equal(kube_workers_stop(w, 5000, 0), 0);
	/* Stopped, not freed: a metrics scrape may still read the counters. */
	kube_workers_counts(w, &done, &failed);
	assert_int_equal(failed, 2);
	assert_int_equal(kube_workers_stop(w, 5000, 0), 0);   /* idempotent */
	kube_workers_free(w);
	kube_queue_free(q);
}

/* The value of a series of the default registry's family called name. */
static double metric_now(const char *name, enum metric_type type, const char *const *values)
{
	struct metric_desc d = { name, "", type, { NULL }, NULL, 0, 0, NULL };

	return metric_value(metrics_family(metrics_default(), &d), values);
}

/* controller-runtime's workqueue_* and controller_runtime_* families move
 * as keys are added, retried, waited for and reconciled. */
static void queue_and_workers_count_metrics(void **state)
{
	(void)state;
	struct recon r = { 0 };
	struct kube_reconciler rec = { reconcile, NULL, &r };
	struct kube_queue_opts o = { 0, 0, 0, 0, "mtest" };
	struct kube_queue *q = kube_queue_new(&o);
	const char *qv[] = { "mtest", "mtest" }, *cv[] = { "mtest" };
	struct kube_workers *w;
	struct err e;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	kube_queue_add(q, "fail");
	kube_queue_add(q, "fail");             /* deduplicated: not an add */
	kube_queue_add(q, "requeue");
	kube_queue_add(q, "ok");
	assert_true(metric_now("workqueue_adds_total", METRIC_COUNTER, qv) == 3);
	f = open_memstream(&text, &len);
	kube_queue_write_metrics(q, f);
	fclose(f);
	assert_non_null(strstr(text, "workqueue_depth{name=\"mtest\",controller=\"mtest\"} 3\n"));
	free(text);
	w = kube_workers_start(q, 2, &rec, &e);
	assert_non_null(w);
	for (int i = 0; i < 5000 && metric_now("workqueue_work_duration_seconds", METRIC_HISTOGRAM, qv) < 6; i++)
		usleep(1000);
	assert_int_equal(kube_workers_stop(w, 5000, 0), 0);
	/* fail: error, error, success; requeue: requeue_after, success; ok: success */
	assert_true(metric_now("controller_runtime_reconcile_total", METRIC_COUNTER,
	    (const char *[]){ "mtest", "error" }) == 2);
	assert_true(metric_now("controller_runtime_reconcile_total", METRIC_COUNTER,
	    (const char *[]){ "mtest", "requeue_after" }) == 1);
	assert_true(metric_now("controller_runtime_reconcile_total", METRIC_COUNTER,
	    (const char *[]){ "mtest", "success" }) == 3);
	assert_true(metric_now("controller_runtime_reconcile_errors_total", METRIC_COUNTER, cv) == 2);
	assert_true(metric_now("controller_runtime_reconcile_time_seconds", METRIC_HISTOGRAM, cv) == 6);
	/* Two rate-limited retries and one requeue-after, each added back. */
	assert_true(metric_now("workqueue_retries_total", METRIC_COUNTER, qv) == 3);
	assert_true(metric_now("workqueue_adds_total", METRIC_COUNTER, qv) == 6);
	assert_true(metric_now("workqueue_queue_duration_seconds", METRIC_HISTOGRAM, qv) == 6);
	f = open_memstream(&text, &len);
	kube_workers_write_metrics(w, f);
	fclose(f);
	assert_non_null(strstr(text, "controller_runtime_max_concurrent_reconciles{controller=\"mtest\"} 2\n"));
	assert_non_null(strstr(text, "controller_runtime_active_workers{controller=\"mtest\"} 0\n"));
	free(text);
	kube_workers_free(w);
	kube_queue_free(q);
}

/* A reconcile that runs until interrupted (or released by the test). */
struct blocker {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int running, released, interrupts;
	int interrupt_releases;    /* does interrupt() end the reconcile? */
};

static int blocking_reconcile(void *ud, const char *key, long *requeue, struct err *e)
{
	struct blocker *b = ud;
	(void)key; (void)requeue; (void)e;

	pthread_mutex_lock(&b->lock);
	b->running = 1;
	pthread_cond_broadcast(&b->cond);
	while (!b->released)
		pthread_cond_wait(&b->cond, &b->lock);
	b->running = 0;
	pthread_mutex_unlock(&b->lock);
	return 0;
}

static void blocking_interrupt(void *ud)
{
	struct blocker *b = ud;

	pthread_mutex_lock(&b->lock);
	b->interrupts++;
	if (b->interrupt_releases)
		b->released = 1;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

static void release_blocker(struct blocker *b)
{
	pthread_mutex_lock(&b->lock);
	b->released = 1;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

static void wait_running(struct blocker *b)
{
	pthread_mutex_lock(&b->lock);
	while (!b->running)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
}

/* A pool whose one key is running blocking_reconcile when this returns. */
struct blocked_pool {
	struct blocker b;
	struct kube_reconciler rec;
	struct kube_queue *q;
	struct kube_workers *w;
};

static void start_blocked(struct blocked_pool *p, int nworkers, int with_interrupt,
    int interrupt_releases)
{
	struct err e;

	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->b.lock, NULL);
	pthread_cond_init(&p->b.cond, NULL);
	p->b.interrupt_releases = interrupt_releases;
	p->rec = (struct kube_reconciler){ blocking_reconcile,
	    with_interrupt ? blocking_interrupt : NULL, &p->b };
	p->q = kube_queue_new(NULL);
	p->w = kube_workers_start(p->q, nworkers, &p->rec, &e);
	assert_non_null(p->w);
	kube_queue_add(p->q, "blocked");
	wait_running(&p->b);
}

static void free_blocked(struct blocked_pool *p)
{
	kube_workers_free(p->w);
	kube_queue_free(p->q);
	pthread_mutex_destroy(&p->b.lock);
	pthread_cond_destroy(&p->b.cond);
}

static void stop_interrupts_work_that_outlives_the_grace(void **state)
{
	(void)state;
	struct blocked_pool p;
	uint64_t done, failed;

	start_blocked(&p, 2, 1, 1);
	/* The grace period runs out, interrupt ends the work, stop joins. */
	assert_int_equal(kube_workers_stop(p.w, 20, 60000), 0);
	assert_int_equal(p.b.interrupts, 1);
	kube_workers_counts(p.w, &done, &failed);
	assert_int_equal(done, 1);
	free_blocked(&p);
}

static void stop_gives_up_when_interrupt_does_not_help(void **state)
{
	(void)state;
	struct blocked_pool p;
	uint64_t done, failed;

	start_blocked(&p, 1, 1, 0);
	assert_int_equal(kube_workers_stop(p.w, 10, 10), -1);
	assert_int_equal(p.b.interrupts, 1);
	kube_workers_free(p.w);   /* refused: the thread still runs */
	kube_workers_counts(p.w, &done, &failed);
	assert_int_equal(done, 0);
	release_blocker(&p.b);
	assert_int_equal(kube_workers_stop(p.w, 60000, 0), 0);
	kube_workers_counts(p.w, &done, &failed);
	assert_int_equal(done, 1);
	free_blocked(&p);
}

static void interrupt_now_for_a_lost_lease(void **state)
{
	(void)state;
	struct blocked_pool p, plain;

	start_blocked(&p, 1, 1, 1);
	kube_workers_interrupt(p.w);   /* at once, no stop needed */
	assert_int_equal(p.b.interrupts, 1);
	assert_int_equal(kube_workers_stop(p.w, 60000, 0), 0);
	free_blocked(&p);
	/* Without an interrupt member it is a no-op; so is a NULL pool. */
	start_blocked(&plain, 1, 0, 0);
	kube_workers_interrupt(plain.w);
	kube_workers_interrupt(NULL);
	assert_int_equal(plain.b.interrupts, 0);
	release_blocker(&plain.b);
	assert_int_equal(kube_workers_stop(plain.w, 60000, 0), 0);
	free_blocked(&plain);
}

static void backoff_grows_caps_and_resets(void **state)
{
	(void)state;
	struct kube_backoff b;
	long d;

	kube_backoff_init(&b, 800, 30000, 2.0, 0.0);
	assert_int_equal(kube_backoff_next(&b), 800);
	assert_int_equal(kube_backoff_next(&b), 1600);
	assert_int_equal(kube_backoff_next(&b), 3200);
	for (int i = 0; i < 10; i++)
		kube_backoff_next(&b);
	assert_int_equal(kube_backoff_next(&b), 30000);
	kube_backoff_reset(&b);
	assert_int_equal(kube_backoff_next(&b), 800);

	kube_backoff_init(&b, 800, 30000, 2.0, 1.0);   /* jitter: [d, 2d) */
	for (int i = 0; i < 100; i++) {
		kube_backoff_reset(&b);
		d = kube_backoff_next(&b);
		assert_true(d >= 800 && d < 1600);
	}
}

static void microtime(void **state)
{
	(void)state;
	char buf[64];

	kube_format_microtime(buf, sizeof(buf), 1795996800123456LL);
	assert_string_equal(buf, "2026-11-30T00:00:00.123456Z");
	kube_format_microtime(buf, sizeof(buf), 1795996800000001LL);
	assert_string_equal(buf, "2026-11-30T00:00:00.000001Z");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dedups_while_waiting),
		cmocka_unit_test(readded_while_processing_runs_again_after_done),
		cmocka_unit_test(delayed_adds),
		cmocka_unit_test(per_key_backoff_and_forget),
		cmocka_unit_test(per_key_backoff_cap),
		cmocka_unit_test(huge_delays_saturate),
		cmocka_unit_test(overall_bucket_limits_bursts),
		cmocka_unit_test(shutdown_and_drain),
		cmocka_unit_test(one_worker_per_key),
		cmocka_unit_test(workers_handle_results),
		cmocka_unit_test(queue_and_workers_count_metrics),
		cmocka_unit_test(stop_interrupts_work_that_outlives_the_grace),
		cmocka_unit_test(stop_gives_up_when_interrupt_does_not_help),
		cmocka_unit_test(interrupt_now_for_a_lost_lease),
		cmocka_unit_test(backoff_grows_caps_and_resets),
		cmocka_unit_test(microtime),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
