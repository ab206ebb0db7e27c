/*
 * kube_workers.c - the worker pool that turns queued keys into reconcile
 * calls (kube.h "workers").  The queue guarantees one worker per key; this
 * file adds the result handling client-go's controllers use: success
 * forgets the key's backoff, failure re-adds it rate-limited, and a
 * requested requeue-after schedules the next run.
 *
 * Stopping and freeing are separate steps because other threads (the
 * metrics server) read the counters until the very end: kube_workers_stop
 * only winds the threads down, kube_workers_free releases the memory once
 * nothing can read it any more.
 *
 * Metrics are controller-runtime's controller_runtime_* families with the
 * queue's name as the controller label: reconciles by result (error,
 * requeue_after, success), errors, and the time each reconcile took, in the
 * default registry; busy and configured workers at scrape time.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "kube/kube_priv.h"

/* controller-runtime's bounds for controller_runtime_reconcile_time_seconds. */
static const double RECONCILE_BUCKETS[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4,
	0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10,
	15, 20, 25, 30, 40, 50, 60 };

static struct metric_desc m_total = { "controller_runtime_reconcile_total",
	"Total number of reconciliations per controller", METRIC_COUNTER, { "controller", "result" }, NULL, 0, 0,
	NULL };
static struct metric_desc m_errors = { "controller_runtime_reconcile_errors_total",
	"Total number of reconciliation errors per controller", METRIC_COUNTER, { "controller" }, NULL, 0, 0,
	NULL };
static struct metric_desc m_time = { "controller_runtime_reconcile_time_seconds",
	"Length of time per reconciliation per controller", METRIC_HISTOGRAM, { "controller" },
	RECONCILE_BUCKETS, sizeof(RECONCILE_BUCKETS) / sizeof(RECONCILE_BUCKETS[0]), 0, NULL };

struct kube_workers {
	struct kube_queue *q;
	const struct kube_reconciler *r;
	pthread_t *threads;
	int n;
	int joined;                /* kube_workers_stop joined every thread */
	atomic_ullong done, failed;
	atomic_int busy;           /* workers inside reconcile */
};

static void count_result(struct kube_workers *w, const char *result, double seconds)
{
	const char *name = kube_queue_name(w->q);

	metric_add(metric_d(&m_total), (const char *[]){ name, result }, 1);
	metric_observe(metric_d(&m_time), (const char *[]){ name }, seconds);
	if (strcmp(result, "error") == 0)
		metric_add(metric_d(&m_errors), (const char *[]){ name }, 1);
}

static void *worker_main(void *arg)
{
	struct kube_workers *w = arg;
	char *key;

	while ((key = kube_queue_get(w->q)) != NULL) {
		long requeue = 0;
		struct err e;
		double t0 = clock_mono_s();
		int rc;
		err_clear(&e);
		atomic_fetch_add(&w->busy, 1);
		rc = w->r->reconcile(w->r->ud, key, &requeue, &e);
		atomic_fetch_sub(&w->busy, 1);
		count_result(w, rc < 0 ? "error" : requeue > 0 ? "requeue_after" : "success", clock_mono_s() - t0);
		if (rc < 0) {
			atomic_fetch_add(&w->failed, 1);
			log_warn("reconcile failed; will retry", "key", key, "error", e.msg, NULL);
			kube_queue_add_rate_limited(w->q, key);
		} else {
			kube_queue_forget(w->q, key);
			if (requeue > 0)
				kube_queue_add_after(w->q, key, requeue);
		}
		log_context_clear();   /* what the reconcile set for its own lines */
		atomic_fetch_add(&w->done, 1);
		kube_queue_done(w->q, key);
		free(key);
	}
	return NULL;
}

struct kube_workers *kube_workers_start(struct kube_queue *q, int n,
    const struct kube_reconciler *r, struct err *e)
{
	struct kube_workers *w = xcalloc(1, sizeof(*w));

	w->q = q;
	w->r = r;
	{
		static const char *results[] = { "error", "requeue", "requeue_after", "success" };
		for (size_t i = 0; i < 4; i++)
			metric_touch(metric_d(&m_total), (const char *[]){ kube_queue_name(q), results[i] });
		metric_touch(metric_d(&m_errors), (const char *[]){ kube_queue_name(q) });
		metric_touch(metric_d(&m_time), (const char *[]){ kube_queue_name(q) });
	}
	w->threads = xcalloc((size_t)(n > 0 ? n : 1), sizeof(pthread_t));
	for (int i = 0; i < n; i++) {
		int rc = pthread_create(&w->threads[i], NULL, worker_main, w);
		if (rc != 0) {
			err_set(e, ERR_IO, "workers: cannot start a thread: %s", strerror(rc));
			kube_queue_shutdown(q);
			for (int k = 0; k < i; k++)
				pthread_join(w->threads[k], NULL);
			free(w->threads);
			free(w);
			return NULL;
		}
		w->n++;
	}
	return w;
}

void kube_workers_interrupt(struct kube_workers *w)
{
	if (w != NULL && w->r->interrupt != NULL)
		w->r->interrupt(w->r->ud);
}

int kube_workers_stop(struct kube_workers *w, long grace_ms, long cancel_ms)
{
	if (w == NULL || w->joined)
		return 0;
	kube_queue_shutdown(w->q);
	if (kube_queue_drain(w->q, grace_ms) < 0) {
		if (w->r->interrupt == NULL)
			return -1;
		log_warn("running reconciles outlived the grace period; interrupting them", NULL);
		kube_workers_interrupt(w);
		if (kube_queue_drain(w->q, cancel_ms) < 0)
			return -1;
	}
	/* Every key is done: the threads are on their way out of get(). */
	for (int i = 0; i < w->n; i++)
		pthread_join(w->threads[i], NULL);
	w->joined = 1;
	return 0;
}

void kube_workers_free(struct kube_workers *w)
{
	/* Threads that outlived a stop still use w: leave it to the exit. */
	if (w == NULL || (!w->joined && w->n > 0))
		return;
	free(w->threads);
	free(w);
}

void kube_workers_counts(struct kube_workers *w, uint64_t *done, uint64_t *failed)
{
	*done = w ? atomic_load(&w->done) : 0;
	*failed = w ? atomic_load(&w->failed) : 0;
}

void kube_workers_write_metrics(struct kube_workers *w, FILE *out)
{
	static const char *names[] = { "controller" };
	const char *name[1];

	if (w == NULL)
		return;
	name[0] = kube_queue_name(w->q);
	metrics_write_header(out, "controller_runtime_max_concurrent_reconciles",
	    "Maximum number of concurrent reconciles per controller", METRIC_GAUGE);
	metrics_write_sample(out, "controller_runtime_max_concurrent_reconciles", 1, names, name, (double)w->n);
	metrics_write_header(out, "controller_runtime_active_workers",
	    "Number of currently used workers per controller", METRIC_GAUGE);
	metrics_write_sample(out, "controller_runtime_active_workers", 1, names, name,
	    (double)atomic_load(&w->busy));
}
