/*
 * stack_job_slots.c - --max-concurrent-jobs: which update Jobs count as
 * running, and the Stacks that wait for a slot (docs/job-runner.md, "Slots";
 * docs/sharding.md for several shards).
 *
 * The running set is what this process created plus every unfinished Job
 * the Job informer (stack_ctl.c) sees, each with the Stack it belongs to, so
 * a restarted controller counts the Jobs already running.  Anyone who may
 * create Jobs can give one the controller's labels and ownerReference, so a
 * Job the informer saw counts only when its controller ownerReference has
 * the uid of the cached Stack and its name is one the controller gives that
 * Stack's Jobs; and at most one Job per Stack counts (a Stack runs one at a
 * time), so a tenant takes at most as many slots as it has Stacks, as it
 * could by updating them.  Only the Jobs of
 * Stacks in this controller's Stack cache count: the Job informer sees every
 * shard's Jobs (the shards share namespaces and the managed-by label), but
 * each shard's --max-concurrent-jobs is its own.  Whose a Job is is decided
 * when it is counted, not when it is seen, so a Stack moved to another shard
 * takes its running Job with it, and a Job seen before its Stack was cached
 * (the informers sync in parallel) is not miscounted.
 *
 * Waiting Stacks queue in arrival order.  A freed slot wakes as many of them
 * as there are free slots, oldest first, not every one: waking all made each
 * freed slot cost a pass (a Stack GET, its Secret reads) per waiting Stack,
 * so the requests per update grew with the Stack count (bench/job-scale).  A
 * woken Stack holds its place until its pass took the slot or found it gone
 * (then it is woken again next).  A Stack leaves the queue when it gets its
 * slot, is deleted (or leaves this shard's cache), or a pass of it decides
 * without asking for a slot (suspended, nothing due, another step; the take
 * count, stack_job_slot_mark, tells): stack_job_slot_forget and _pass_done,
 * which hand a wake it held to the next waiter.  One
 * whose pass never came all the same is passed over after WAKE_HOLD_S.
 * Waiting Stacks also look again on their own (stack_job_slot_poll_ms), a
 * backstop only.
 *
 * Whose a running Job is reads the Stack cache (a copy of the Stack per
 * Job), so it is counted outside the slots lock, on a copy of the running
 * set (lock_counted).
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/locked.h"
#include "base/mem.h"
#include "stack/stack_exec.h"

/* How long a woken Stack keeps a free slot for its pass. */
#define WAKE_HOLD_S 60.0
/* The longest backstop poll of a Stack far back in the queue. */
#define SLOT_POLL_MAX_MS (60L * 60 * 1000)

struct slot_job {
	char *job;       /* ns/name of the Job */
	char *stack;     /* ns/name of its Stack */
	char *uid;       /* its Stack's uid as the Job says; NULL: this process's own */
	long next;       /* scratch of count_ours: the Job counted before, or -1 */
};

struct slot_waiter {
	char *stack;
	double woken_s;  /* clock_mono_s() of its wake; 0: not woken */
	unsigned long asked;   /* the take count when it last found no slot */
};

struct stack_job_slots {
	pthread_mutex_t lock;
	struct slot_job *run;
	size_t nrun, caprun;
	unsigned long run_gen;        /* bumped by every change of run[] */
	struct slot_waiter *wait;     /* oldest first */
	size_t nwait, capwait;
	unsigned long takes;          /* slot requests so far (stack_job_slot_mark) */
};

/* ------------------------------------------------------------ lists */

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
	void *nv;
	size_t ncap;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	if ((nv = realloc(*v, ncap * size)) == NULL)
		return -1;
	*v = nv;
	*cap = ncap;
	return 0;
}

/* The index of the first of the n elements of size bytes at v whose string
 * member at offset off is key, or -1.  The running Jobs and the waiting
 * Stacks are both short unsorted arrays looked up by a name; one search
 * serves both (run_find, wait_find). */
static long find_named(const void *v, size_t n, size_t size, size_t off, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(*(char *const *)((const char *)v + i * size + off), key) == 0)
			return (long)i;
	return -1;
}

static long run_find(const struct stack_job_slots *s, const char *job)
{
	return find_named(s->run, s->nrun, sizeof(*s->run), offsetof(struct slot_job, job), job);
}

static void slot_job_free(struct slot_job *j)
{
	mem_free_all(j->job, j->stack, j->uid);
}

/* Fills *j with copies of job, stack and uid (NULL stays NULL); -1 when
 * out of memory (nothing left allocated). */
static int slot_job_set(struct slot_job *j, const char *job, const char *stack, const char *uid)
{
	j->job = strdup(job);
	j->stack = strdup(stack ? stack : "");
	j->uid = uid ? strdup(uid) : NULL;
	j->next = -1;
	if (j->job == NULL || j->stack == NULL || (uid && j->uid == NULL)) {
		slot_job_free(j);
		return -1;
	}
	return 0;
}

static int run_add(struct stack_job_slots *s, const char *job, const char *stack, const char *uid)
{
	if (run_find(s, job) >= 0)
		return 0;
	if (grow((void **)&s->run, &s->caprun, s->nrun, sizeof(*s->run)) < 0 ||
	    slot_job_set(&s->run[s->nrun], job, stack, uid) < 0)
		return -1;
	s->nrun++;
	s->run_gen++;
	return 0;
}

static int run_remove(struct stack_job_slots *s, const char *job)
{
	long i = run_find(s, job);

	if (i < 0)
		return 0;
	slot_job_free(&s->run[i]);
	s->run[i] = s->run[--s->nrun];
	s->run_gen++;
	return 1;
}

static long wait_find(const struct stack_job_slots *s, const char *stack)
{
	return find_named(s->wait, s->nwait, sizeof(*s->wait), offsetof(struct slot_waiter, stack), stack);
}

/* Appends stack (it keeps its place if it waits already); it is not woken. */
static void wait_add(struct stack_job_slots *s, const char *stack)
{
	long i = wait_find(s, stack);

	if (i >= 0) {
		s->wait[i].woken_s = 0;
		s->wait[i].asked = s->takes;
		return;
	}
	if (grow((void **)&s->wait, &s->capwait, s->nwait, sizeof(*s->wait)) < 0)
		return;
	if ((s->wait[s->nwait].stack = strdup(stack)) == NULL)
		return;
	s->wait[s->nwait].asked = s->takes;
	s->wait[s->nwait++].woken_s = 0;
}

/* Does this waiter hold a wake (a free slot kept for its pass)? */
static int holds_wake(const struct slot_waiter *w, double now)
{
	return w->woken_s > 0 && now - w->woken_s < WAKE_HOLD_S;
}

/* Removes stack keeping the others' order; 1 when it held a wake. */
static int wait_remove(struct stack_job_slots *s, const char *stack)
{
	long i = wait_find(s, stack);
	int held;

	if (i < 0)
		return 0;
	held = holds_wake(&s->wait[i], clock_mono_s());
	free(s->wait[i].stack);
	memmove(&s->wait[i], &s->wait[i + 1], (s->nwait - (size_t)i - 1) * sizeof(*s->wait));
	s->nwait--;
	return held;
}

/* ------------------------------------------------------------ counting */

static const char *name_of(const char *key)
{
	const char *slash = strchr(key, '/');

	return slash ? slash + 1 : key;
}

/* Is j a Job of a Stack in this controller's cache, the Stack's own?  One
 * this process made or follows is; one the informer saw (its name shape
 * checked when seen) must point at the cached Stack's uid. */
static int job_is_ours(struct stack_ctl *sc, const struct slot_job *j)
{
	return stack_ctl_has_stack_uid(sc, j->stack, j->uid);
}

/* Of v[0..n), the Jobs that count: ours, and one per Stack.  The counted
 * ones are chained through v[].next, so a Stack with many Jobs costs one
 * comparison per counted Job, not per Job. */
static size_t count_ours(struct stack_ctl *sc, struct slot_job *v, size_t n)
{
	size_t ours = 0;
	long last = -1;

	for (size_t i = 0; i < n; i++) {
		long k = last;
		while (k >= 0 && strcmp(v[k].stack, v[i].stack) != 0)
			k = v[k].next;
		if (k >= 0 || !job_is_ours(sc, &v[i]))
			continue;
		v[i].next = last;
		last = (long)i;
		ours++;
	}
	return ours;
}

static void free_run_copy(struct slot_job *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		slot_job_free(&v[i]);
	free(v);
}

/* The running set, copied (caller frees it with free_run_copy); NULL when
 * out of memory.  Lock held. */
static struct slot_job *copy_run(const struct stack_job_slots *s, size_t *n)
{
	struct slot_job *v = calloc(s->nrun ? s->nrun : 1, sizeof(*v));

	*n = 0;
	if (v == NULL)
		return NULL;
	for (; *n < s->nrun; (*n)++)
		if (slot_job_set(&v[*n], s->run[*n].job, s->run[*n].stack, s->run[*n].uid) < 0) {
			free_run_copy(v, *n);
			return NULL;
		}
	return v;
}

/* Takes the slots lock and returns the running Jobs of this controller's
 * Stacks.  The Stack cache is read without the lock, on a copy of the
 * running set; a set that changed meanwhile is counted again (after a few
 * tries, under the lock).  Returns with the lock held. */
static size_t lock_counted(struct stack_ctl *sc)
{
	struct stack_job_slots *s = sc->slots;

	for (int attempt = 0;; attempt++) {
		unsigned long gen;
		size_t n, ours;
		struct slot_job *copy;
		pthread_mutex_lock(&s->lock);
		if (attempt == 3 || (copy = copy_run(s, &n)) == NULL)
			return count_ours(sc, s->run, s->nrun);   /* the last resort */
		gen = s->run_gen;
		pthread_mutex_unlock(&s->lock);
		ours = count_ours(sc, copy, n);
		free_run_copy(copy, n);
		pthread_mutex_lock(&s->lock);
		if (s->run_gen == gen)
			return ours;
		pthread_mutex_unlock(&s->lock);
	}
}

/* Marks the oldest waiters not yet holding a wake as woken, as many as the
 * slots free (used of them taken) and not held for an earlier wake; returns
 * their keys (caller frees each and the array) in *out.  Lock held. */
static size_t pick_woken(struct stack_ctl *sc, size_t used, char ***out)
{
	struct stack_job_slots *s = sc->slots;
	double now = clock_mono_s();
	size_t held = 0, n = 0, free_slots;
	char **keys;

	*out = NULL;
	for (size_t i = 0; i < s->nwait; i++)
		held += (size_t)holds_wake(&s->wait[i], now);
	if (used + held >= (size_t)sc->o.max_concurrent_jobs || s->nwait == 0)
		return 0;
	free_slots = (size_t)sc->o.max_concurrent_jobs - used - held;
	if ((keys = calloc(free_slots, sizeof(*keys))) == NULL)
		return 0;
	for (size_t i = 0; i < s->nwait && n < free_slots; i++) {
		struct slot_waiter *w = &s->wait[i];
		if (holds_wake(w, now))
			continue;
		if ((keys[n] = strdup(w->stack)) == NULL)
			break;
		w->woken_s = now;
		n++;
	}
	*out = keys;
	return n;
}

static void queue_woken(struct stack_ctl *sc, char **keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		kube_queue_add(sc->queue, keys[i]);
		free(keys[i]);
	}
	free(keys);
}

/* ------------------------------------------------------------ the API */

int stack_job_slots_new(struct stack_ctl *sc)
{
	if ((sc->slots = calloc(1, sizeof(*sc->slots))) == NULL)
		return -1;
	pthread_mutex_init(&sc->slots->lock, NULL);
	return 0;
}

void stack_job_slots_free(struct stack_ctl *sc)
{
	struct stack_job_slots *s = sc->slots;

	if (s == NULL)
		return;
	for (size_t i = 0; i < s->nrun; i++)
		slot_job_free(&s->run[i]);
	for (size_t i = 0; i < s->nwait; i++)
		free(s->wait[i].stack);
	free(s->run);
	free(s->wait);
	pthread_mutex_destroy(&s->lock);
	free(s);
	sc->slots = NULL;
}

int stack_job_slots_used(struct stack_ctl *sc)
{
	size_t n;

	if (sc->slots == NULL)
		return 0;
	n = lock_counted(sc);   /* takes the lock */
	pthread_mutex_unlock(&sc->slots->lock);
	return (int)n;
}

size_t stack_job_slots_waiting(struct stack_ctl *sc)
{
	if (sc->slots == NULL)
		return 0;
	return locked_size(&sc->slots->lock, &sc->slots->nwait);
}

/* The backstop: the head of the queue looks again every
 * STACK_JOB_SLOT_POLL_MS, a Stack further back less often, since it cannot
 * have a slot before the ones ahead (each further --max-concurrent-jobs
 * waiting ahead adds one poll interval, up to an hour): a Stack's polls
 * while it waits stay about one however long the queue. */
long stack_job_slot_poll_ms(struct stack_ctl *sc, const char *stack_key)
{
	long pos, rounds, max = sc->o.max_concurrent_jobs > 0 ? sc->o.max_concurrent_jobs : 1;

	pthread_mutex_lock(&sc->slots->lock);
	pos = wait_find(sc->slots, stack_key);
	pthread_mutex_unlock(&sc->slots->lock);
	rounds = 1 + (pos > 0 ? pos / max : 0);
	if (rounds > SLOT_POLL_MAX_MS / STACK_JOB_SLOT_POLL_MS)
		rounds = SLOT_POLL_MAX_MS / STACK_JOB_SLOT_POLL_MS;
	return rounds * STACK_JOB_SLOT_POLL_MS;
}

/* 0: the slot is this Job's; 1: all taken (stack_key waits for one). */
int stack_job_slot_take(struct stack_ctl *sc, const char *job_key, const char *stack_key)
{
	struct stack_job_slots *s = sc->slots;
	size_t used;
	int rc = 0;

	used = lock_counted(sc);   /* takes the lock */
	s->takes++;
	if (run_find(s, job_key) < 0) {
		if (used >= (size_t)sc->o.max_concurrent_jobs) {
			wait_add(s, stack_key);
			rc = 1;
		} else if (run_add(s, job_key, stack_key, NULL) < 0) {
			rc = 1;
		}
	}
	if (rc == 0)
		wait_remove(s, stack_key);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Frees job_key's slot and wakes as many waiting Stacks as slots are free. */
void stack_job_slot_release(struct stack_ctl *sc, const char *job_key)
{
	struct stack_job_slots *s = sc->slots;
	char **keys = NULL;
	size_t n = 0;

	size_t used;
	int removed;

	pthread_mutex_lock(&s->lock);
	removed = run_remove(s, job_key);
	pthread_mutex_unlock(&s->lock);
	if (!removed)
		return;
	used = lock_counted(sc);   /* takes the lock */
	n = pick_woken(sc, used, &keys);
	pthread_mutex_unlock(&s->lock);
	queue_woken(sc, keys, n);
}

unsigned long stack_job_slot_mark(struct stack_ctl *sc)
{
	if (sc->slots == NULL)
		return 0;
	return locked_ulong(&sc->slots->lock, &sc->slots->takes);
}

/* Removes stack_key from the queue (all of it when since is ULONG_MAX; else
 * only when it asked for no slot after since); a wake it held goes to the
 * next waiter. */
static void forget_unless_asked(struct stack_ctl *sc, const char *stack_key, unsigned long since)
{
	struct stack_job_slots *s = sc->slots;
	char **keys = NULL;
	size_t n = 0, used;
	long i;
	int asked;

	if (s == NULL)
		return;
	/* Most passes concern no waiter: no count for them. */
	pthread_mutex_lock(&s->lock);
	i = wait_find(s, stack_key);
	asked = i >= 0 && since != ULONG_MAX && s->wait[i].asked > since;
	pthread_mutex_unlock(&s->lock);
	if (i < 0 || asked)
		return;
	used = lock_counted(sc);   /* takes the lock */
	if (wait_remove(s, stack_key))
		n = pick_woken(sc, used, &keys);
	pthread_mutex_unlock(&s->lock);
	queue_woken(sc, keys, n);
}

void stack_job_slot_forget(struct stack_ctl *sc, const char *stack_key)
{
	forget_unless_asked(sc, stack_key, ULONG_MAX);
}

void stack_job_slot_pass_done(struct stack_ctl *sc, const char *stack_key, unsigned long mark)
{
	forget_unless_asked(sc, stack_key, mark);
}

/* uid NULL: the Job is this process's own for stack_key. */
static void seen(struct stack_ctl *sc, const char *key, const char *stack_key, const char *uid, int active)
{
	if (sc->slots == NULL)
		return;
	if (!active) {
		stack_job_slot_release(sc, key);
		return;
	}
	pthread_mutex_lock(&sc->slots->lock);
	run_add(sc->slots, key, stack_key, uid);
	pthread_mutex_unlock(&sc->slots->lock);
}

void stack_job_slot_seen(struct stack_ctl *sc, const char *key, const char *stack_key, int active)
{
	seen(sc, key, stack_key, NULL, active);
}

void stack_job_slot_seen_job(struct stack_ctl *sc, const char *key, const char *stack_key, const char *stack_uid,
    int active)
{
	/* A Job with no Stack owner, or not named as that Stack's Jobs are,
	 * never counts: it is not even kept. */
	int may_count = stack_key && stack_key[0] && stack_uid && stack_uid[0] &&
	    stack_job_is_named(name_of(stack_key), name_of(key));

	seen(sc, key, stack_key, stack_uid, active && may_count);
}
