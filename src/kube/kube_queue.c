/*
 * kube_queue.c - the controller work queue with client-go's semantics
 * (kube.h "queue"):
 *   - a key waiting in the queue is there once however often it is added
 *     ("dirty" set);
 *   - a key being processed is not handed to a second worker; if it is
 *     added meanwhile it is queued again when the first worker calls done
 *     ("processing" set);
 *   - delayed adds wait in a min-heap; the earliest requested time wins;
 *   - rate-limited adds wait max(per-key exponential backoff, an overall
 *     token bucket), like workqueue.DefaultControllerRateLimiter.
 *
 * Metrics are controller-runtime's workqueue_* families, labelled with the
 * queue's name (as controller-runtime labels name and controller with the
 * controller's), so dashboards made for Flux's controllers read them: adds,
 * retries (adds with a delay), how long keys waited and how long their
 * processing took are counted as they happen; depth and the age of running
 * work are read at scrape time (kube_queue_write_metrics).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/locked.h"
#include "base/metrics.h"
#include "kube/kube_priv.h"

/* controller-runtime's workqueue bounds: ExponentialBuckets(10e-9, 10, 12). */
static const double WORKQUEUE_BUCKETS[] = { 1e-08, 1e-07, 1e-06, 9.999999999999999e-06,
	9.999999999999999e-05, 0.001, 0.01, 0.1, 1, 10, 100, 1000 };

static struct metric_desc m_adds = { "workqueue_adds_total", "Total number of adds handled by workqueue",
	METRIC_COUNTER, { "name", "controller" }, NULL, 0, 0, NULL };
static struct metric_desc m_retries = { "workqueue_retries_total",
	"Total number of items added to the workqueue with a non-zero delay (rate-limited requeues and "
	"requeue-after)", METRIC_COUNTER, { "name", "controller" }, NULL, 0, 0, NULL };
static struct metric_desc m_wait = { "workqueue_queue_duration_seconds",
	"How long in seconds an item stays in workqueue before being requested", METRIC_HISTOGRAM,
	{ "name", "controller" }, WORKQUEUE_BUCKETS, 12, 0, NULL };
static struct metric_desc m_work = { "workqueue_work_duration_seconds",
	"How long in seconds processing an item from workqueue takes.", METRIC_HISTOGRAM,
	{ "name", "controller" }, WORKQUEUE_BUCKETS, 12, 0, NULL };

struct qnode {
	struct qnode *next;
	char *key;
	double queued_s;             /* clock_mono_s when it entered the queue */
};

struct delayed {
	int64_t at_ms;
	char *key;
};

struct kube_queue {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct qnode *head, *tail;
	size_t len;
	struct strmap dirty;
	struct strmap processing;    /* key -> start time (started_value) */
	struct strmap waiting;       /* key -> int64_t* earliest time (heap dedup) */
	struct delayed *heap;
	size_t nheap, capheap;
	struct strmap failures;      /* key -> (intptr_t) count */
	double tokens;
	int64_t tokens_at_ms;
	int shutdown;
	struct kube_queue_opts o;
	char *name;                  /* the metrics' name and controller label */
};

static void *const PRESENT = (void *)1;

/* A processing entry's value: its start in microseconds, never NULL. */
static void *started_value(double now_s)
{
	return (void *)(intptr_t)((int64_t)(now_s * 1e6) | 1);
}

static double started_s(void *v)
{
	return (double)(intptr_t)v / 1e6;
}

static const char *const *labels_of(const struct kube_queue *q, const char *l[2])
{
	l[0] = l[1] = q->name;
	return l;
}

struct kube_queue *kube_queue_new(const struct kube_queue_opts *o)
{
	struct kube_queue *q = xcalloc(1, sizeof(*q));

	pthread_mutex_init(&q->lock, NULL);
	clock_mono_cond_init(&q->cond);
	strmap_init(&q->dirty);
	strmap_init(&q->processing);
	strmap_init(&q->waiting);
	strmap_init(&q->failures);
	q->o.base_delay_ms = o && o->base_delay_ms > 0 ? o->base_delay_ms : 5;
	q->o.max_delay_ms = o && o->max_delay_ms > 0 ? o->max_delay_ms : 1000L * 1000;
	q->o.qps = o && o->qps > 0 ? o->qps : 10;
	q->o.burst = o && o->burst > 0 ? o->burst : 100;
	q->tokens = q->o.burst;
	q->tokens_at_ms = clock_mono_ms();
	q->name = xstrdup(o && o->name ? o->name : "default");
	{
		const char *l[2];
		metric_touch(metric_d(&m_adds), labels_of(q, l));
		metric_touch(metric_d(&m_retries), labels_of(q, l));
	}
	return q;
}

void kube_queue_free(struct kube_queue *q)
{
	struct qnode *n, *next;

	if (q == NULL)
		return;
	for (n = q->head; n; n = next) {
		next = n->next;
		free(n->key);
		free(n);
	}
	for (size_t i = 0; i < q->nheap; i++)
		free(q->heap[i].key);
	free(q->heap);
	strmap_free(&q->dirty, NULL);
	strmap_free(&q->processing, NULL);
	strmap_free(&q->waiting, free);
	strmap_free(&q->failures, NULL);
	free(q->name);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q);
}

static void push_locked(struct kube_queue *q, const char *key)
{
	struct qnode *n = xmalloc(sizeof(*n));

	n->key = xstrdup(key);
	n->next = NULL;
	n->queued_s = clock_mono_s();
	if (q->tail)
		q->tail->next = n;
	else
		q->head = n;
	q->tail = n;
	q->len++;
	pthread_cond_signal(&q->cond);
}

static void add_locked(struct kube_queue *q, const char *key)
{
	const char *l[2];

	if (q->shutdown || strmap_get(&q->dirty, key) != NULL)
		return;
	metric_add(metric_d(&m_adds), labels_of(q, l), 1);
	strmap_put(&q->dirty, key, PRESENT);
	if (strmap_get(&q->processing, key) != NULL)
		return;   /* done() will queue it again */
	push_locked(q, key);
}

void kube_queue_add(struct kube_queue *q, const char *key)
{
	pthread_mutex_lock(&q->lock);
	add_locked(q, key);
	pthread_mutex_unlock(&q->lock);
}

/* ------------------------------------------------------------ delays */

static void heap_swap(struct delayed *a, struct delayed *b)
{
	struct delayed t = *a;
	*a = *b;
	*b = t;
}

static void heap_push(struct kube_queue *q, int64_t at, const char *key)
{
	size_t i;

	if (q->nheap == q->capheap) {
		q->capheap = q->capheap ? q->capheap * 2 : 16;
		q->heap = xrealloc(q->heap, q->capheap * sizeof(*q->heap));
	}
	i = q->nheap++;
	q->heap[i].at_ms = at;
	q->heap[i].key = xstrdup(key);
	while (i > 0 && q->heap[(i - 1) / 2].at_ms > q->heap[i].at_ms) {
		heap_swap(&q->heap[(i - 1) / 2], &q->heap[i]);
		i = (i - 1) / 2;
	}
}

static struct delayed heap_pop(struct kube_queue *q)
{
	struct delayed top = q->heap[0];
	size_t i = 0;

	q->heap[0] = q->heap[--q->nheap];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < q->nheap && q->heap[l].at_ms < q->heap[m].at_ms)
			m = l;
		if (r < q->nheap && q->heap[r].at_ms < q->heap[m].at_ms)
			m = r;
		if (m == i)
			break;
		heap_swap(&q->heap[i], &q->heap[m]);
		i = m;
	}
	return top;
}

void kube_queue_add_after(struct kube_queue *q, const char *key, long delay_ms)
{
	int64_t at = kube_mono_deadline(delay_ms), *cur;
	const char *l[2];

	if (delay_ms <= 0) {
		kube_queue_add(q, key);
		return;
	}
	metric_add(metric_d(&m_retries), labels_of(q, l), 1);
	pthread_mutex_lock(&q->lock);
	if (!q->shutdown) {
		cur = strmap_get(&q->waiting, key);
		if (cur == NULL || at < *cur) {
			/* Earlier wins; a stale heap entry is skipped when it pops. */
			if (cur == NULL) {
				cur = xmalloc(sizeof(*cur));
				strmap_put(&q->waiting, key, cur);
			}
			*cur = at;
			heap_push(q, at, key);
			pthread_cond_signal(&q->cond);
		}
	}
	pthread_mutex_unlock(&q->lock);
}

/* Moves due delayed keys to the queue; returns the next due time or -1. */
static int64_t promote_locked(struct kube_queue *q)
{
	int64_t now = clock_mono_ms();

	while (q->nheap > 0 && q->heap[0].at_ms <= now) {
		struct delayed d = heap_pop(q);
		int64_t *cur = strmap_get(&q->waiting, d.key);
		if (cur != NULL && *cur == d.at_ms) {
			free(strmap_del(&q->waiting, d.key));
			add_locked(q, d.key);
		}
		free(d.key);
	}
	return q->nheap > 0 ? q->heap[0].at_ms : -1;
}

/* ------------------------------------------------------------ rate limit */

/* Longest delay handed out: a year, far below where a long or a deadline
 * could overflow (the bucket's debt grows without bound under a storm). */
#define QUEUE_DELAY_MAX_MS (366L * 86400 * 1000)

/* The delay for key: its exponential backoff (capped by cap_ms as well as
 * by the queue's max_delay_ms) or the overall bucket's, whichever is
 * longer.  record counts the failure and takes the token. */
static long when_locked(struct kube_queue *q, const char *key, int record, long cap_ms)
{
	intptr_t fails = (intptr_t)strmap_get(&q->failures, key);
	double per_key = (double)q->o.base_delay_ms, max = (double)q->o.max_delay_ms, wait;
	int64_t now = clock_mono_ms();
	double bucket_ms = 0, tokens;

	if (cap_ms > 0 && (double)cap_ms < max)
		max = (double)cap_ms;
	for (intptr_t i = 0; i < fails && per_key < max; i++)
		per_key *= 2;
	if (per_key > max)
		per_key = max;
	tokens = q->tokens + (double)(now - q->tokens_at_ms) / 1000.0 * q->o.qps;
	if (tokens > q->o.burst)
		tokens = q->o.burst;
	tokens -= 1;   /* reserve one */
	if (tokens < 0)
		bucket_ms = -tokens / q->o.qps * 1000.0;
	if (record) {
		q->tokens = tokens;
		q->tokens_at_ms = now;
		strmap_put(&q->failures, key, (void *)(fails + 1));
	}
	wait = per_key > bucket_ms ? per_key : bucket_ms;
	return wait < (double)QUEUE_DELAY_MAX_MS ? (long)wait : QUEUE_DELAY_MAX_MS;
}

long kube_queue_when_max(struct kube_queue *q, const char *key, long max_ms)
{
	long w;

	pthread_mutex_lock(&q->lock);
	w = when_locked(q, key, 1, max_ms);
	pthread_mutex_unlock(&q->lock);
	return w;
}

long kube_queue_when(struct kube_queue *q, const char *key)
{
	return kube_queue_when_max(q, key, 0);
}

void kube_queue_add_rate_limited(struct kube_queue *q, const char *key)
{
	kube_queue_add_after(q, key, kube_queue_when(q, key));
}

void kube_queue_add_rate_limited_max(struct kube_queue *q, const char *key, long max_ms)
{
	kube_queue_add_after(q, key, kube_queue_when_max(q, key, max_ms));
}

void kube_queue_forget(struct kube_queue *q, const char *key)
{
	pthread_mutex_lock(&q->lock);
	strmap_del(&q->failures, key);
	pthread_mutex_unlock(&q->lock);
}

int kube_queue_requeues(struct kube_queue *q, const char *key)
{
	intptr_t n;

	pthread_mutex_lock(&q->lock);
	n = (intptr_t)strmap_get(&q->failures, key);
	pthread_mutex_unlock(&q->lock);
	return (int)n;
}

/* ------------------------------------------------------------ workers */

char *kube_queue_get(struct kube_queue *q)
{
	char *key = NULL;
	double waited = -1;
	const char *l[2];

	pthread_mutex_lock(&q->lock);
	for (;;) {
		int64_t next = promote_locked(q);
		double now;
		if (q->shutdown)
			break;
		if (q->head != NULL) {
			struct qnode *n = q->head;
			q->head = n->next;
			if (q->head == NULL)
				q->tail = NULL;
			q->len--;
			key = n->key;
			now = clock_mono_s();
			waited = now - n->queued_s;
			free(n);
			strmap_put(&q->processing, key, started_value(now));
			strmap_del(&q->dirty, key);
			break;
		}
		if (next < 0)
			pthread_cond_wait(&q->cond, &q->lock);
		else
			clock_mono_cond_wait(&q->cond, &q->lock, next);
	}
	pthread_mutex_unlock(&q->lock);
	if (waited >= 0)
		metric_observe(metric_d(&m_wait), labels_of(q, l), waited);
	return key;
}

void kube_queue_done(struct kube_queue *q, const char *key)
{
	void *started;
	const char *l[2];

	pthread_mutex_lock(&q->lock);
	started = strmap_del(&q->processing, key);
	if (!q->shutdown && strmap_get(&q->dirty, key) != NULL)
		push_locked(q, key);
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	if (started != NULL)
		metric_observe(metric_d(&m_work), labels_of(q, l), clock_mono_s() - started_s(started));
}

size_t kube_queue_len(struct kube_queue *q)
{
	return locked_size(&q->lock, &q->len);
}

void kube_queue_shutdown(struct kube_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->shutdown = 1;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

int kube_queue_drain(struct kube_queue *q, long timeout_ms)
{
	int64_t deadline = kube_mono_deadline(timeout_ms);
	int rc;

	pthread_mutex_lock(&q->lock);
	while (q->processing.count > 0 && clock_mono_cond_wait(&q->cond, &q->lock, deadline) == 0)
		;
	rc = q->processing.count == 0 ? 0 : -1;
	pthread_mutex_unlock(&q->lock);
	return rc;
}

const char *kube_queue_name(const struct kube_queue *q)
{
	return q->name;
}

struct running_age {
	double now, total, longest;
};

static void add_age(void *ud, const char *key, void *value)
{
	struct running_age *a = ud;
	double age = a->now - started_s(value);
	(void)key;

	a->total += age;
	if (age > a->longest)
		a->longest = age;
}

void kube_queue_write_metrics(struct kube_queue *q, FILE *out)
{
	static const char *names[] = { "name", "controller" };
	struct running_age a = { clock_mono_s(), 0, 0 };
	const char *l[2];
	size_t depth;

	pthread_mutex_lock(&q->lock);
	depth = q->len;
	strmap_each(&q->processing, add_age, &a);
	pthread_mutex_unlock(&q->lock);
	labels_of(q, l);
	metrics_write_header(out, "workqueue_depth", "Current depth of workqueue", METRIC_GAUGE);
	metrics_write_sample(out, "workqueue_depth", 2, names, l, (double)depth);
	metrics_write_header(out, "workqueue_unfinished_work_seconds", "How many seconds of work has been done "
	    "that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads.",
	    METRIC_GAUGE);
	metrics_write_sample(out, "workqueue_unfinished_work_seconds", 2, names, l, a.total);
	metrics_write_header(out, "workqueue_longest_running_processor_seconds", "How many seconds has the "
	    "longest running processor for workqueue been running.", METRIC_GAUGE);
	metrics_write_sample(out, "workqueue_longest_running_processor_seconds", 2, names, l, a.longest);
}
