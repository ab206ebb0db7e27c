/*
 * kube_leader.c - leader election on a coordination.k8s.io/v1 Lease, the
 * algorithm of client-go's leaderelection (kube-api.md §4):
 *
 *   - candidates GET the Lease every retry period (jittered by up to 1.2x);
 *     a missing Lease is created, a held one is taken only when its record
 *     has not changed for leaseDurationSeconds as measured by *our* clock
 *     (observedTime), never by comparing the server's renewTime with our
 *     time, so clock skew between nodes cannot cause two leaders;
 *   - every write is a PUT carrying the resourceVersion read, so of two
 *     racing candidates only one succeeds (the other gets 409);
 *   - the leader renews every retry period; if it cannot renew within the
 *     renew deadline, counted from the start of its last successful
 *     renewal, it has lost and on_stopped runs (the process should then
 *     exit, as its work may now be done by another replica).  Every request
 *     of a renewal is bounded by the time left to that deadline, so a slow
 *     server cannot stretch leadership past the Lease;
 *   - a watchdog thread holds the leader to that deadline on the monotonic
 *     clock whatever the election thread is doing: a renewal stuck where no
 *     request bound reaches (an exec credential plugin that hangs, which
 *     runs up to a minute) ends leadership at the deadline all the same;
 *   - nothing but the election runs on the election thread: on_started and
 *     on_new_leader run on a callback thread of their own, so a callback
 *     that makes API calls (or blocks) never delays a renewal;
 *   - on a clean stop the leader releases: holderIdentity "" and a 1 s
 *     duration, so a successor need not wait out the lease.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/str.h"
#include "kube/kube_priv.h"

static const struct kube_resource lease_res = {
	"coordination.k8s.io", "v1", "leases", "Lease", 1,
};

struct kube_leader {
	struct kube_client *c;
	char *ns, *name, *id;
	long lease_ms, renew_ms, retry_ms;
	void (*on_started)(void *ud);
	void (*on_stopped)(void *ud);
	void (*on_new_leader)(void *ud, const char *identity);
	void *ud;

	pthread_t thread, cb_thread, dog_thread;
	int started;
	atomic_int stop;
	atomic_int leader;
	atomic_llong renew_by_ms;  /* leading: renewed by then or lost (monotonic) */
	atomic_int lost;           /* on_stopped ran (once) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Callbacks waiting for the callback thread (under lock, cb_cond). */
	pthread_cond_t cb_cond;
	int cb_started;            /* on_started is due */
	char *cb_new_leader;       /* on_new_leader is due with this identity */
	int cb_stop;
	char *observed;            /* holder|renewTime|RV of the last record seen */
	int64_t observed_ms;       /* when we saw it change (monotonic) */
	char *last_holder;         /* for on_new_leader */
};

struct kube_leader *kube_leader_new(struct kube_client *c, const struct kube_leader_opts *o,
    struct err *e)
{
	struct kube_leader *l;
	char host[256] = "", id[400];

	if (o->namespace == NULL || o->name == NULL || !*o->namespace || !*o->name) {
		err_set(e, ERR_INVALID, "leader election: a Lease namespace and name are required");
		return NULL;
	}
	l = xcalloc(1, sizeof(*l));
	l->lease_ms = o->lease_ms > 0 ? o->lease_ms : 15000;
	l->renew_ms = o->renew_ms > 0 ? o->renew_ms : 10000;
	l->retry_ms = o->retry_ms > 0 ? o->retry_ms : 2000;
	if (!(l->lease_ms > l->renew_ms && (double)l->renew_ms > 1.2 * (double)l->retry_ms)) {
		free(l);
		err_set(e, ERR_INVALID,
		    "leader election: need lease duration > renew deadline > 1.2 x retry period");
		return NULL;
	}
	l->c = c;
	l->ns = xstrdup(o->namespace);
	l->name = xstrdup(o->name);
	if (o->identity != NULL && *o->identity) {
		l->id = xstrdup(o->identity);
	} else {
		gethostname(host, sizeof(host) - 1);
		snprintf(id, sizeof(id), "%s_%08lx%08lx", host[0] ? host : "pulumi-controller",
		    (unsigned long)(kube_rand01() * 4294967295.0),
		    (unsigned long)(kube_rand01() * 4294967295.0));
		l->id = xstrdup(id);
	}
	l->on_started = o->on_started;
	l->on_stopped = o->on_stopped;
	l->on_new_leader = o->on_new_leader;
	l->ud = o->ud;
	pthread_mutex_init(&l->lock, NULL);
	clock_mono_cond_init(&l->cond);
	clock_mono_cond_init(&l->cb_cond);
	return l;
}

const char *kube_leader_identity(const struct kube_leader *l)
{
	return l->id;
}

int kube_leader_is_leader(struct kube_leader *l)
{
	return atomic_load(&l->leader);
}

static void now_micro(char *buf, size_t n)
{
	kube_format_microtime(buf, n, kube_now_us());
}

static cJSON *new_lease(struct kube_leader *l)
{
	cJSON *o = cJSON_CreateObject(), *meta, *spec;
	char now[64];

	now_micro(now, sizeof(now));
	cJSON_AddStringToObject(o, "apiVersion", "coordination.k8s.io/v1");
	cJSON_AddStringToObject(o, "kind", "Lease");
	meta = cJSON_AddObjectToObject(o, "metadata");
	cJSON_AddStringToObject(meta, "name", l->name);
	cJSON_AddStringToObject(meta, "namespace", l->ns);
	spec = cJSON_AddObjectToObject(o, "spec");
	cJSON_AddStringToObject(spec, "holderIdentity", l->id);
	cJSON_AddNumberToObject(spec, "leaseDurationSeconds", (double)((l->lease_ms + 999) / 1000));
	cJSON_AddStringToObject(spec, "acquireTime", now);
	cJSON_AddStringToObject(spec, "renewTime", now);
	cJSON_AddNumberToObject(spec, "leaseTransitions", 0);
	return o;
}

static void set_field(cJSON *spec, const char *k, cJSON *v)
{
	if (cJSON_GetObjectItemCaseSensitive(spec, k))
		cJSON_ReplaceItemInObjectCaseSensitive(spec, k, v);
	else
		cJSON_AddItemToObject(spec, k, v);
}

/* ------------------------------------------------------------ callbacks */

/* Hands a callback to the callback thread; only the latest new-leader
 * identity matters, so an unreported one is replaced. */
static void post_callback(struct kube_leader *l, int started, const char *new_leader)
{
	pthread_mutex_lock(&l->lock);
	if (started)
		l->cb_started = 1;
	if (new_leader != NULL) {
		free(l->cb_new_leader);
		l->cb_new_leader = xstrdup(new_leader);
	}
	pthread_cond_broadcast(&l->cb_cond);
	pthread_mutex_unlock(&l->lock);
}

static void *callback_main(void *arg)
{
	struct kube_leader *l = arg;

	pthread_mutex_lock(&l->lock);
	for (;;) {
		while (!l->cb_stop && !l->cb_started && l->cb_new_leader == NULL)
			pthread_cond_wait(&l->cb_cond, &l->lock);
		if (l->cb_stop)
			break;
		if (l->cb_new_leader != NULL) {
			char *id = l->cb_new_leader;
			l->cb_new_leader = NULL;
			pthread_mutex_unlock(&l->lock);
			if (l->on_new_leader)
				l->on_new_leader(l->ud, id);
			free(id);
		} else {
			l->cb_started = 0;
			pthread_mutex_unlock(&l->lock);
			/* Lost meanwhile (on_stopped ran): starting now would start
			 * work after the caller was told to stop it. */
			if (l->on_started && atomic_load(&l->leader))
				l->on_started(l->ud);
		}
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

static void note_holder(struct kube_leader *l, const char *holder)
{
	if (holder == NULL)
		holder = "";
	if (str_eq(l->last_holder, holder))
		return;
	free(l->last_holder);
	l->last_holder = xstrdup(holder);
	if (*holder && l->on_new_leader)
		post_callback(l, 0, holder);
}

/* Bounds the calling thread's next request by the round's deadline; 0 when
 * no time is left for one. */
static int bound_request(int64_t deadline_ms)
{
	int64_t left = deadline_ms - clock_mono_ms();

	if (left <= 0)
		return 0;
	kube_request_limits((long)left, 0);
	return 1;
}

/* The outcome of our write of the Lease (out is the reply, consumed): 1
 * when it went through and we hold the Lease, 0 when not.  A 409 means
 * another candidate wrote first, which is normal and not worth a warning. */
static int lease_written(struct kube_leader *l, cJSON *out, const struct err *e, const char *verb,
    int64_t now_ms)
{
	if (out == NULL) {
		if (e->http_status != 409 && e->code != ERR_CANCELED) {
			char msg[64];
			snprintf(msg, sizeof(msg), "leader election: cannot %s the Lease", verb);
			log_warn(msg, "error", e->msg, NULL);
		}
		return 0;
	}
	cJSON_Delete(out);
	l->observed_ms = now_ms;
	note_holder(l, l->id);
	return 1;
}

/* One round, every request of it over by deadline_ms: 1 when we hold the
 * Lease afterwards, 0 when not. */
static int try_acquire_or_renew(struct kube_leader *l, int64_t deadline_ms)
{
	struct err e;
	cJSON *lease, *spec, *out;
	const char *holder, *renew, *rv;
	const cJSON *dur, *trans;
	char now[64];
	struct strbuf observed;
	int64_t now_ms = clock_mono_ms();
	long dur_ms;
	int ours;

	if (!bound_request(deadline_ms))
		return 0;
	lease = kube_get(l->c, &lease_res, l->ns, l->name, NULL, &e);
	if (lease == NULL) {
		if (e.code != ERR_NOTFOUND) {
			if (e.code != ERR_CANCELED)   /* stopping */
				log_warn("leader election: cannot read the Lease", "error", e.msg, NULL);
			return 0;
		}
		if (!bound_request(deadline_ms))
			return 0;
		lease = new_lease(l);
		out = kube_create(l->c, &lease_res, l->ns, lease, &e);
		cJSON_Delete(lease);
		return lease_written(l, out, &e, "create", now_ms);
	}
	spec = cJSON_GetObjectItemCaseSensitive(lease, "spec");
	if (!cJSON_IsObject(spec)) {
		spec = cJSON_AddObjectToObject(lease, "spec");
	}
	holder = kube_obj_str(spec, "holderIdentity");
	renew = kube_obj_str(spec, "renewTime");
	rv = kube_obj_str(lease, "metadata.resourceVersion");
	dur = cJSON_GetObjectItemCaseSensitive(spec, "leaseDurationSeconds");
	trans = cJSON_GetObjectItemCaseSensitive(spec, "leaseTransitions");
	/* Another holder's duration comes from the server: bound it before casting. */
	dur_ms = cJSON_IsNumber(dur) && dur->valuedouble >= 0 && dur->valuedouble <= 86400 ?
	    (long)dur->valuedouble * 1000 : l->lease_ms;
	/* Whole, however long the holder's identity: a record cut short could
	 * hide a renewal, and a renewed Lease taken as stale makes two leaders. */
	strbuf_init(&observed);
	strbuf_printf(&observed, "%s|%s|%s", holder ? holder : "", renew ? renew : "", rv ? rv : "");
	if (l->observed == NULL || strcmp(l->observed, observed.buf) != 0) {
		free(l->observed);
		l->observed = strbuf_take(&observed);
		l->observed_ms = now_ms;
	} else {
		strbuf_free(&observed);
	}
	note_holder(l, holder);
	ours = str_eq(holder, l->id);
	if (!ours && holder != NULL && *holder && l->observed_ms + dur_ms > now_ms) {
		cJSON_Delete(lease);
		return 0;   /* someone else holds a valid lease */
	}
	now_micro(now, sizeof(now));
	set_field(spec, "holderIdentity", cJSON_CreateString(l->id));
	set_field(spec, "leaseDurationSeconds", cJSON_CreateNumber((double)((l->lease_ms + 999) / 1000)));
	set_field(spec, "renewTime", cJSON_CreateString(now));
	if (!ours) {
		set_field(spec, "acquireTime", cJSON_CreateString(now));
		set_field(spec, "leaseTransitions",
		    cJSON_CreateNumber(cJSON_IsNumber(trans) ? trans->valuedouble + 1 : 1));
	}
	if (!bound_request(deadline_ms)) {
		cJSON_Delete(lease);
		return 0;
	}
	out = kube_update(l->c, &lease_res, l->ns, lease, NULL, &e);
	cJSON_Delete(lease);
	return lease_written(l, out, &e, "update", now_ms);
}

/* Sleeps, waking early when stopped; returns 1 when stopped. */
static int wait_ms(struct kube_leader *l, long ms)
{
	return kube_mono_sleep_unless(&l->lock, &l->cond, &l->stop, ms);
}

/* Leadership ends, once, from whichever thread saw it first (the election
 * thread's renewals, or the watchdog): here, not behind a callback that may
 * still run, since the caller must stop its work now. */
static void lose(struct kube_leader *l, const char *why)
{
	if (atomic_load(&l->stop) || atomic_exchange(&l->lost, 1))
		return;
	atomic_store(&l->leader, 0);
	log_error("leader election: lost the lease", "identity", l->id, "lease", l->name, "reason", why, NULL);
	if (l->on_stopped)
		l->on_stopped(l->ud);
}

/* The watchdog: a leader not renewed by renew_by_ms has lost, even while
 * the election thread is stuck in a request. */
static void *watchdog_main(void *arg)
{
	struct kube_leader *l = arg;

	while (!atomic_load(&l->stop) && !atomic_load(&l->lost)) {
		int64_t by = atomic_load(&l->renew_by_ms), now = clock_mono_ms();
		long nap = l->retry_ms / 4 > 0 ? l->retry_ms / 4 : 1;
		if (atomic_load(&l->leader) && by > 0 && now >= by) {
			lose(l, "no renewal within the renew deadline (a request is stuck)");
			break;
		}
		if (atomic_load(&l->leader) && by > 0 && by - now < nap)
			nap = (long)(by - now);
		if (wait_ms(l, nap))
			break;
	}
	return NULL;
}

/* Keeps renewing until stopped (0) or until a renewal could not be had
 * within the renew deadline (-1). */
static int renew_loop(struct kube_leader *l, int64_t renewed_ms)
{
	while (!atomic_load(&l->stop)) {
		int64_t deadline = renewed_ms + l->renew_ms;
		int ok = 0;
		if (wait_ms(l, l->retry_ms))
			return 0;
		while (!atomic_load(&l->stop)) {
			int64_t start = clock_mono_ms();
			long pause;
			if (start >= deadline || atomic_load(&l->lost))
				break;
			if (try_acquire_or_renew(l, deadline)) {
				ok = !atomic_load(&l->lost);   /* too late when the watchdog ended it */
				renewed_ms = start;
				atomic_store(&l->renew_by_ms, renewed_ms + l->renew_ms);
				break;
			}
			pause = l->retry_ms / 2 > 0 ? l->retry_ms / 2 : 1;
			if (deadline - clock_mono_ms() < pause)
				pause = (long)(deadline - clock_mono_ms());
			if (pause > 0 && wait_ms(l, pause))
				return 0;
		}
		if (atomic_load(&l->stop))
			return 0;
		if (!ok)
			return -1;
	}
	return 0;
}

/* Campaigns, then renews until stopped or lost. */
static void elect(struct kube_leader *l)
{
	int64_t acquired_ms = 0;

	/* acquire */
	while (!atomic_load(&l->stop)) {
		int64_t start = clock_mono_ms();
		/* One round must fit in the renew deadline, and this loop retries
		 * by itself (client-go bounds each round the same way). */
		if (try_acquire_or_renew(l, start + l->renew_ms)) {
			acquired_ms = start;
			break;
		}
		if (wait_ms(l, l->retry_ms + (long)(kube_rand01() * 1.2 * (double)l->retry_ms)))
			return;
	}
	if (atomic_load(&l->stop))
		return;
	atomic_store(&l->renew_by_ms, acquired_ms + l->renew_ms);
	atomic_store(&l->leader, 1);
	log_info("leader election: became leader", "identity", l->id, "lease", l->name, NULL);
	post_callback(l, 1, NULL);
	if (renew_loop(l, acquired_ms) < 0)
		lose(l, "could not renew within the renew deadline");
}

static void *leader_main(void *arg)
{
	struct kube_leader *l = arg;

	/* A stop aborts a request under way instead of waiting it out (up to
	 * the renew deadline); the release is made by the stopping thread. */
	kube_request_cancel_on(&l->stop);
	elect(l);
	kube_request_cancel_on(NULL);
	return NULL;
}

static void stop_callbacks(struct kube_leader *l)
{
	pthread_mutex_lock(&l->lock);
	l->cb_stop = 1;
	pthread_cond_broadcast(&l->cb_cond);
	pthread_mutex_unlock(&l->lock);
	pthread_join(l->cb_thread, NULL);
	free(l->cb_new_leader);
	l->cb_new_leader = NULL;
	l->cb_started = 0;
}

int kube_leader_start(struct kube_leader *l, struct err *e)
{
	int rc;

	if (l->started)
		return 0;
	l->cb_stop = 0;
	rc = pthread_create(&l->cb_thread, NULL, callback_main, l);
	if (rc != 0)
		return err_set(e, ERR_IO, "leader election: cannot start a thread: %s", strerror(rc));
	rc = pthread_create(&l->dog_thread, NULL, watchdog_main, l);
	if (rc != 0) {
		stop_callbacks(l);
		return err_set(e, ERR_IO, "leader election: cannot start a thread: %s", strerror(rc));
	}
	rc = pthread_create(&l->thread, NULL, leader_main, l);
	if (rc != 0) {
		atomic_store(&l->stop, 1);
		pthread_cond_broadcast(&l->cond);
		pthread_join(l->dog_thread, NULL);
		stop_callbacks(l);
		return err_set(e, ERR_IO, "leader election: cannot start a thread: %s", strerror(rc));
	}
	l->started = 1;
	return 0;
}

static void release(struct kube_leader *l)
{
	struct err e;
	cJSON *lease = kube_get(l->c, &lease_res, l->ns, l->name, NULL, &e), *spec, *out;
	const char *holder;
	char now[64];

	if (lease == NULL)
		return;
	spec = cJSON_GetObjectItemCaseSensitive(lease, "spec");
	holder = kube_obj_str(spec, "holderIdentity");
	if (!cJSON_IsObject(spec) || holder == NULL || strcmp(holder, l->id) != 0) {
		cJSON_Delete(lease);
		return;
	}
	now_micro(now, sizeof(now));
	set_field(spec, "holderIdentity", cJSON_CreateString(""));
	set_field(spec, "leaseDurationSeconds", cJSON_CreateNumber(1));
	set_field(spec, "renewTime", cJSON_CreateString(now));
	set_field(spec, "acquireTime", cJSON_CreateString(now));
	out = kube_update(l->c, &lease_res, l->ns, lease, NULL, &e);
	cJSON_Delete(lease);
	if (out == NULL) {
		log_warn("leader election: cannot release the Lease", "error", e.msg, NULL);
		return;
	}
	cJSON_Delete(out);
	log_info("leader election: released the lease", "identity", l->id, "lease", l->name, NULL);
}

void kube_leader_stop(struct kube_leader *l)
{
	if (!l->started)
		return;
	pthread_mutex_lock(&l->lock);
	atomic_store(&l->stop, 1);
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
	pthread_join(l->dog_thread, NULL);
	pthread_join(l->thread, NULL);
	l->started = 0;
	if (atomic_load(&l->leader)) {
		/* On the stopping thread: bounded like a renewal, then restored. */
		kube_request_limits(l->renew_ms, 1);
		release(l);
		kube_request_limits(-1, -1);
		atomic_store(&l->leader, 0);
	}
	/* After the release, so a callback still running delays no successor. */
	stop_callbacks(l);
}

void kube_leader_free(struct kube_leader *l)
{
	if (l == NULL)
		return;
	kube_leader_stop(l);
	free(l->ns);
	free(l->name);
	free(l->id);
	free(l->observed);
	free(l->last_holder);
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->cond);
	pthread_cond_destroy(&l->cb_cond);
	free(l);
}
