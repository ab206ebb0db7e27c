/*
 * stack_job_slots.c - --max-concurrent-jobs: which update Jobs count as
 * running, and the Stacks that wait for a slot (docs/job-runner.md, "Slots").
 *
 * The running set is what this process created plus every unfinished Job
 * the Job informer (stack_ctl.c) sees, so a restarted controller counts the
 * Jobs already running.  A freed slot queues every waiting Stack; those that
 * lose the race for it wait again (and look again every 30 s anyway).
 */
#include <stdlib.h>
#include <string.h>

#include "stack/stack_internal.h"

/* ------------------------------------------------------------ slots */

struct str_set {
	char **v;
	size_t n, cap;
};

struct stack_job_slots {
	pthread_mutex_t lock;
	struct str_set running;     /* Job keys ns/name */
	struct str_set waiting;     /* Stack keys */
};

static int set_has(const struct str_set *s, const char *k)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i], k) == 0)
			return 1;
	return 0;
}

static int set_add(struct str_set *s, const char *k)
{
	if (set_has(s, k))
		return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **v = realloc(s->v, cap * sizeof(*v));
		if (v == NULL)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	if ((s->v[s->n] = strdup(k)) == NULL)
		return -1;
	s->n++;
	return 0;
}

static int set_remove(struct str_set *s, const char *k)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i], k) == 0) {
			free(s->v[i]);
			s->v[i] = s->v[--s->n];
			return 1;
		}
	return 0;
}

static void set_free(struct str_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

int stack_job_slots_new(struct stack_ctl *sc)
{
	if ((sc->slots = calloc(1, sizeof(*sc->slots))) == NULL)
		return -1;
	pthread_mutex_init(&sc->slots->lock, NULL);
	return 0;
}

void stack_job_slots_free(struct stack_ctl *sc)
{
	if (sc->slots == NULL)
		return;
	set_free(&sc->slots->running);
	set_free(&sc->slots->waiting);
	pthread_mutex_destroy(&sc->slots->lock);
	free(sc->slots);
	sc->slots = NULL;
}

int stack_job_slots_used(struct stack_ctl *sc)
{
	int n;

	if (sc->slots == NULL)
		return 0;
	pthread_mutex_lock(&sc->slots->lock);
	n = (int)sc->slots->running.n;
	pthread_mutex_unlock(&sc->slots->lock);
	return n;
}

/* 0: the slot is this Job's; 1: all taken (stack_key waits for one). */
int stack_job_slot_take(struct stack_ctl *sc, const char *job_key, const char *stack_key)
{
	struct stack_job_slots *s = sc->slots;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	if (!set_has(&s->running, job_key)) {
		if (s->running.n >= (size_t)sc->o.max_concurrent_jobs) {
			set_add(&s->waiting, stack_key);
			rc = 1;
		} else if (set_add(&s->running, job_key) < 0) {
			rc = 1;
		}
	}
	if (rc == 0)
		set_remove(&s->waiting, stack_key);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Frees job_key's slot; the Stacks that waited try again (those that lose
 * the race wait again). */
void stack_job_slot_release(struct stack_ctl *sc, const char *job_key)
{
	struct stack_job_slots *s = sc->slots;
	struct str_set wake = { 0 };

	pthread_mutex_lock(&s->lock);
	if (set_remove(&s->running, job_key)) {
		wake = s->waiting;
		memset(&s->waiting, 0, sizeof(s->waiting));
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < wake.n; i++)
		kube_queue_add(sc->queue, wake.v[i]);
	set_free(&wake);
}

void stack_job_slot_seen(struct stack_ctl *sc, const char *key, int active)
{
	if (sc->slots == NULL)
		return;
	if (!active) {
		stack_job_slot_release(sc, key);
		return;
	}
	pthread_mutex_lock(&sc->slots->lock);
	set_add(&sc->slots->running, key);
	pthread_mutex_unlock(&sc->slots->lock);
}

