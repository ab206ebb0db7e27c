/*
 * kube_informer_priv.h - what the informer's cache (kube_informer.c) and
 * its list+watch loop (kube_reflector.c) share; nothing else includes it.
 */
#ifndef PC_KUBE_INFORMER_PRIV_H
#define PC_KUBE_INFORMER_PRIV_H

#include <pthread.h>
#include <stdatomic.h>

#include "kube/kube_priv.h"

#define MAX_INDEXES 4
#define MAX_HANDLERS 8

struct index {
	char *name;
	kube_index_fn fn;
	struct strmap values;        /* value -> struct strmap* (set of object keys) */
};

struct handler {
	kube_handler_fn fn;
	void *ud;
};

struct kube_informer {
	struct kube_client *c;
	const struct kube_resource *r;
	char *ns, *selector;
	long page_size, watch_timeout_s, watch_idle_s, backoff_initial_ms, backoff_max_ms;
	long max_pages;
	int metadata_only;
	struct kube_rate_gate gate_list, gate_expired, gate_watch;   /* the loop's thread only */

	pthread_t thread;
	int started;
	atomic_int stop;
	pthread_mutex_t lock;      /* store, indexes, synced, last_rv, stats */
	pthread_cond_t cond;       /* monotonic (kube_mono.c) */

	struct strmap store;         /* "ns/name" -> struct item* (kube_informer.c) */
	struct index idx[MAX_INDEXES];
	int nidx;
	struct handler handlers[MAX_HANDLERS];
	int nhandlers;
	unsigned long gen;         /* list generation, for the stale sweep */
	int synced;
	char *last_rv;
	struct kube_informer_stats stats;
};

/* The cache's side (kube_informer.c).  upsert consumes obj; remove consumes
 * last (may be NULL: the cached object is passed to the handlers); both run
 * the handlers without the lock. */
void kube_informer_upsert(struct kube_informer *inf, cJSON *obj);
void kube_informer_remove(struct kube_informer *inf, const char *key, cJSON *last);
void kube_informer_set_rv(struct kube_informer *inf, const char *rv);
/* A list starts a generation; its end removes what it did not see, takes
 * its resourceVersion and marks the cache synced. */
void kube_informer_list_begin(struct kube_informer *inf);
void kube_informer_list_end(struct kube_informer *inf, const char *list_rv);

/* The thread's body (kube_reflector.c); arg is the informer. */
void *kube_reflector_main(void *arg);

#endif
