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
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kube/kube_priv.h"

struct kube_workers {
	struct kube_queue *q;
	const struct kube_reconciler *r;
	pthread_t *threads;
	int n;
	int joined;                /* kube_workers_stop joined every thread */
	atomic_ullong done, failed;
};

static void *worker_main(void *arg)
{
	struct kube_workers *w = arg;
	char *key;

	while ((key = kube_queue_get(w->q)) != NULL) {
		long requeue = 0;
		struct err e;
		err_clear(&e);
		if (w->r->reconcile(w->r->ud, key, &requeue, &e) < 0) {
			atomic_fetch_add(&w->failed, 1);
			log_warn("reconcile failed; will retry", "key", key, "error", e.msg, NULL);
			kube_queue_add_rate_limited(w->q, key);
		} else {
			kube_queue_forget(w->q, key);
			if (requeue > 0)
				kube_queue_add_after(w->q, key, requeue);
		}
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
