/*
 * notify.c - Stack events forwarded to Flux's notification-controller
 * (`run --events-addr`), so an Alert for kind Stack reaches Slack, a
 * generic webhook or any Provider the way Flux's own objects' events do.
 *
 * The wire format is fluxcd/pkg's apis/event/v1beta1 Event, POSTed as JSON
 * to the one handler the server mounts on "/".  The server keeps only the
 * metadata keys prefixed with the involved object's API group, so the
 * revision goes as "<group>/revision" (pulumi.com/revision for a Stack),
 * and the group comes from involvedObject.apiVersion, always sent.
 *
 * Who waits for whom: a reconcile only formats the body and appends it to
 * a bounded ring under a mutex (dropping it when the ring is full); the one
 * sender thread owns every network call.  Retries follow Flux's recorder:
 * connection errors and 5xx (but 501) again with exponential backoff, a 429
 * (the server's answer to a duplicate within its rate-limit window) and
 * every other 4xx never.  Each event that is not delivered is counted once,
 * by why, in pulumi_controller_notifications_dropped_total{reason}.
 *
 * Shutdown: flux_notify_stop lets the sender empty the ring until the drain
 * deadline, then cancels the POST in flight and counts what is left.
 */
#include "fluxsource/fluxsource.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/http.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/str.h"
#include "base/url.h"
#include "base/xalloc.h"

static struct metric_desc m_sent = { "pulumi_controller_notifications_sent_total",
	"Stack events delivered to notification-controller (--events-addr): a 2xx answer.",
	METRIC_COUNTER, { NULL }, NULL, 0, 0, NULL };
static struct metric_desc m_retries = { "pulumi_controller_notifications_retries_total",
	"POSTs of Stack events to notification-controller repeated after a connection error or a 5xx.",
	METRIC_COUNTER, { NULL }, NULL, 0, 0, NULL };
static struct metric_desc m_dropped = { "pulumi_controller_notifications_dropped_total",
	"Stack events never delivered to notification-controller, by reason: queue_full, refused "
	"(a 4xx, 429 included), retries_exhausted, shutdown.", METRIC_COUNTER, { "reason" }, NULL, 0, 0,
	NULL };

static const char *const DROP_REASONS[] = { "queue_full", "refused", "retries_exhausted", "shutdown" };
enum drop_reason { DROP_QUEUE_FULL, DROP_REFUSED, DROP_RETRIES_EXHAUSTED, DROP_SHUTDOWN };

struct flux_notify {
	char *url, *controller, *instance;
	struct flux_notify_opts o;

	pthread_mutex_t lock;
	pthread_cond_t wake;           /* an event was queued, or stop */
	pthread_cond_t idle;           /* the sender finished (done) */
	char **ring;                   /* queue_size bodies; head..head+count */
	size_t head, count;
	int stopping, done;
	int64_t drain_deadline_ms;     /* set with stopping */
	int full_logged;               /* one warning per run of drops */
	int started;                   /* the thread exists */
	volatile int cancel;           /* aborts the POST in flight */
	unsigned int seed;             /* backoff jitter, sender only */
	pthread_t thread;

	atomic_ullong queued, delivered, retries;
	atomic_ullong dropped[4];
};

static _Atomic(struct flux_notify *) default_notify;

void flux_notify_opts_default(struct flux_notify_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->controller = "pulumi-controller";
	o->queue_size = FLUX_NOTIFY_DEFAULT_QUEUE;
	o->max_attempts = FLUX_NOTIFY_DEFAULT_ATTEMPTS;
	o->timeout_ms = FLUX_NOTIFY_DEFAULT_TIMEOUT_MS;
	o->backoff_initial_ms = 1000;
	o->backoff_max_ms = 30000;
}

int flux_notify_check_url(const char *url, struct err *e)
{
	CURLU *u;
	char *scheme = NULL, *host = NULL;
	char safe[URL_LOG_MAX];
	int rc = -1;

	if (url == NULL || *url == '\0')
		return err_set(e, ERR_INVALID, "no URL given (e.g. http://notification-controller.flux-system.svc./)");
	url_for_log(url, safe, sizeof(safe));
	if ((u = curl_url()) == NULL)
		return err_set(e, ERR_NOMEM, "cannot parse \"%s\"", safe);
	if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
		err_set(e, ERR_INVALID, "\"%s\": the scheme must be http or https (e.g. http://host:9090/)", safe);
	else if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK)
		err_set(e, ERR_INVALID, "\"%s\" is not an absolute URL (e.g. http://host:9090/)", safe);
	else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
		err_set(e, ERR_INVALID, "\"%s\": the scheme must be http or https", safe);
	else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || *host == '\0')
		err_set(e, ERR_INVALID, "\"%s\" names no host", safe);
	else
		rc = 0;
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}

enum flux_notify_outcome flux_notify_classify(long status)
{
	if (status >= 200 && status < 300)
		return FLUX_NOTIFY_DELIVERED;
	/* 501 is no outage: the server will never do it (retryablehttp agrees). */
	if (status == 0 || (status >= 500 && status != 501))
		return FLUX_NOTIFY_RETRY;
	/* 429 is notification-controller's "duplicate event": retrying would
	 * only be refused again until its rate-limit window ends. */
	return FLUX_NOTIFY_REFUSED;
}

/* ------------------------------------------------------------ the body */

/* The byte length of s's first max_chars characters (UTF-8), so a cut
 * never splits a sequence. */
static size_t utf8_prefix_len(const char *s, size_t max_chars)
{
	size_t i = 0, chars = 0;

	while (s[i] && chars < max_chars) {
		i++;
		while ((s[i] & 0xC0) == 0x80)
			i++;
		chars++;
	}
	return i;
}

/* "pulumi.com" of "pulumi.com/v1"; "" for the core group ("v1"). */
static void api_group(const char *api_version, char *out, size_t n)
{
	const char *slash = api_version ? strchr(api_version, '/') : NULL;

	snprintf(out, n, "%.*s", slash ? (int)(slash - api_version) : 0, slash ? api_version : "");
}

static void add_if_set(cJSON *o, const char *key, const char *v)
{
	if (v && *v)
		cJSON_AddStringToObject(o, key, v);
}

char *flux_notify_event_json(const struct flux_notify_event *ev, const char *controller,
    const char *instance, time_t when)
{
	cJSON *body, *ref;
	char ts[CLOCK_RFC3339_LEN], group[256], *msg, *out;
	const char *m = ev->message ? ev->message : "";

	if (!ev->kind || !*ev->kind || !ev->name || !*ev->name || !ev->namespace || !*ev->namespace ||
	    !ev->reason || !*ev->reason)
		return NULL;
	body = cJSON_CreateObject();
	ref = cJSON_AddObjectToObject(body, "involvedObject");
	add_if_set(ref, "apiVersion", ev->api_version);
	cJSON_AddStringToObject(ref, "kind", ev->kind);
	cJSON_AddStringToObject(ref, "name", ev->name);
	cJSON_AddStringToObject(ref, "namespace", ev->namespace);
	add_if_set(ref, "uid", ev->uid);
	add_if_set(ref, "resourceVersion", ev->resource_version);
	cJSON_AddStringToObject(body, "severity", str_eq(ev->type, "Warning") ? "error" : "info");
	clock_format_rfc3339(ts, sizeof(ts), when);
	cJSON_AddStringToObject(body, "timestamp", ts);
	msg = xstrndup(m, utf8_prefix_len(m, FLUX_NOTIFY_MAX_MESSAGE));
	cJSON_AddStringToObject(body, "message", msg);
	free(msg);
	cJSON_AddStringToObject(body, "reason", ev->reason);
	api_group(ev->api_version, group, sizeof(group));
	if (ev->revision && *ev->revision && *group) {
		char key[300];
		snprintf(key, sizeof(key), "%s/revision", group);
		cJSON_AddStringToObject(cJSON_AddObjectToObject(body, "metadata"), key, ev->revision);
	}
	cJSON_AddStringToObject(body, "reportingController", controller);
	add_if_set(body, "reportingInstance", instance);
	out = cJSON_PrintUnformatted(body);
	cJSON_Delete(body);
	return out;   /* NULL only when out of memory: the event is lost, not the process */
}

/* ------------------------------------------------------------ counting */

static void count_drop(struct flux_notify *n, enum drop_reason why)
{
	atomic_fetch_add(&n->dropped[why], 1);
	metric_add(metric_d(&m_dropped), (const char *[]){ DROP_REASONS[why] }, 1);
}

void flux_notify_get_stats(struct flux_notify *n, struct flux_notify_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (n == NULL)
		return;
	st->queued = atomic_load(&n->queued);
	st->delivered = atomic_load(&n->delivered);
	st->retries = atomic_load(&n->retries);
	st->dropped_queue_full = atomic_load(&n->dropped[DROP_QUEUE_FULL]);
	st->dropped_refused = atomic_load(&n->dropped[DROP_REFUSED]);
	st->dropped_retries_exhausted = atomic_load(&n->dropped[DROP_RETRIES_EXHAUSTED]);
	st->dropped_shutdown = atomic_load(&n->dropped[DROP_SHUTDOWN]);
}

/* ------------------------------------------------------------ the sender */

/* Waits ms on the sender's condition variable, cut short by the drain
 * deadline.  Returns 0 when the whole wait ran, -1 when the deadline (or
 * cancel) ended it.  Called with the lock held. */
static int backoff_wait(struct flux_notify *n, long ms)
{
	int64_t until = clock_mono_ms() + ms;

	for (;;) {
		int64_t now = clock_mono_ms();
		if (n->cancel || (n->stopping && now >= n->drain_deadline_ms))
			return -1;
		if (now >= until)
			return 0;
		if (n->stopping && n->drain_deadline_ms < until)
			until = n->drain_deadline_ms;
		clock_mono_cond_wait(&n->wake, &n->lock, until);
	}
}

/* One POST; the HTTP status, or 0 when no answer came (e says why). */
static long post_once(struct flux_notify *n, const char *body, int64_t deadline_ms, struct err *e)
{
	static const char *const headers[] = { "Content-Type: application/json", NULL };
	struct http_opts ho;
	struct http_request req = { "POST", n->url, headers, body, strlen(body), NULL, NULL, NULL, 0 };
	struct http_response resp;
	long status;

	http_opts_default(&ho);
	ho.retries = 0;                       /* the classification below is ours */
	ho.timeout_ms = n->o.timeout_ms;
	ho.connect_timeout_ms = n->o.timeout_ms;
	ho.max_bytes = 65536;
	ho.cancel = &n->cancel;
	ho.deadline_ms = deadline_ms;
	if (http_do(&ho, &req, &resp, e) < 0)
		return 0;
	status = resp.status;
	http_response_free(&resp);
	return status;
}

/* Sends one body with retries; counts how it ended. */
static void deliver(struct flux_notify *n, const char *body)
{
	char safe[URL_LOG_MAX];
	int attempt;

	url_for_log(n->url, safe, sizeof(safe));
	for (attempt = 1;; attempt++) {
		struct err e;
		int64_t deadline;
		long status, wait;
		char st[16];

		pthread_mutex_lock(&n->lock);
		deadline = n->stopping ? n->drain_deadline_ms : 0;
		pthread_mutex_unlock(&n->lock);
		err_clear(&e);
		status = post_once(n, body, deadline, &e);
		switch (flux_notify_classify(status)) {
		case FLUX_NOTIFY_DELIVERED:
			atomic_fetch_add(&n->delivered, 1);
			metric_add(metric_d(&m_sent), NULL, 1);
			return;
		case FLUX_NOTIFY_REFUSED:
			snprintf(st, sizeof(st), "%ld", status);
			log_write(status == 429 ? LOG_DEBUG : LOG_WARN, "notification refused by the event endpoint",
			    "url", safe, "status", st, NULL);
			count_drop(n, DROP_REFUSED);
			return;
		case FLUX_NOTIFY_RETRY:
			break;
		}
		if (e.code == ERR_CANCELED) {
			count_drop(n, DROP_SHUTDOWN);
			return;
		}
		if (attempt >= n->o.max_attempts) {
			snprintf(st, sizeof(st), "%d", attempt);
			log_write(LOG_WARN, "notification not delivered: attempts exhausted", "url", safe,
			    "attempts", st, "error", status ? "server error" : e.msg, NULL);
			count_drop(n, DROP_RETRIES_EXHAUSTED);
			return;
		}
		wait = http_backoff_ms(&(struct http_opts){ .backoff_initial_ms = n->o.backoff_initial_ms,
		    .backoff_max_ms = n->o.backoff_max_ms }, attempt, -1, (double)(rand_r(&n->seed) % 1000) / 1000.0);
		pthread_mutex_lock(&n->lock);
		if (backoff_wait(n, wait) < 0) {
			pthread_mutex_unlock(&n->lock);
			count_drop(n, DROP_SHUTDOWN);
			return;
		}
		pthread_mutex_unlock(&n->lock);
		atomic_fetch_add(&n->retries, 1);
		metric_add(metric_d(&m_retries), NULL, 1);
	}
}

static char *pop_locked(struct flux_notify *n)
{
	char *body = n->ring[n->head];

	n->ring[n->head] = NULL;
	n->head = (n->head + 1) % n->o.queue_size;
	n->count--;
	return body;
}

static void *sender_main(void *arg)
{
	struct flux_notify *n = arg;

	pthread_mutex_lock(&n->lock);
	for (;;) {
		char *body;
		while (n->count == 0 && !n->stopping)
			pthread_cond_wait(&n->wake, &n->lock);
		if (n->count == 0 || n->cancel || (n->stopping && clock_mono_ms() >= n->drain_deadline_ms))
			break;
		body = pop_locked(n);
		pthread_mutex_unlock(&n->lock);
		deliver(n, body);
		free(body);
		pthread_mutex_lock(&n->lock);
	}
	/* Past the drain deadline: what is left is dropped, and counted. */
	while (n->count > 0) {
		free(pop_locked(n));
		count_drop(n, DROP_SHUTDOWN);
	}
	n->done = 1;
	pthread_cond_broadcast(&n->idle);
	pthread_mutex_unlock(&n->lock);
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */

struct flux_notify *flux_notify_start(const struct flux_notify_opts *o, struct err *e)
{
	struct flux_notify *n;
	char host[256] = "";
	size_t i;

	if (flux_notify_check_url(o->url, e) < 0)
		return NULL;
	n = xcalloc(1, sizeof(*n));
	n->o = *o;
	if (n->o.queue_size == 0)
		n->o.queue_size = FLUX_NOTIFY_DEFAULT_QUEUE;
	if (n->o.max_attempts < 1)
		n->o.max_attempts = 1;
	if (n->o.timeout_ms <= 0)
		n->o.timeout_ms = FLUX_NOTIFY_DEFAULT_TIMEOUT_MS;
	n->url = xstrdup(o->url);
	n->controller = xstrdup(o->controller ? o->controller : "pulumi-controller");
	if (o->instance == NULL)
		gethostname(host, sizeof(host) - 1);
	n->instance = xstrdup(o->instance ? o->instance : host);
	n->o.url = n->url;
	n->o.controller = n->controller;
	n->o.instance = n->instance;
	n->ring = xcalloc(n->o.queue_size, sizeof(*n->ring));
	n->seed = (unsigned int)clock_mono_ms() ^ (unsigned int)getpid();
	pthread_mutex_init(&n->lock, NULL);
	/* Monotonic: a wall clock stepped back (NTP, a VM resumed) must not
	 * stretch a backoff or the shutdown drain. */
	clock_mono_cond_init(&n->wake);
	clock_mono_cond_init(&n->idle);
	/* Every drop reason shows on /metrics from the start, at 0. */
	for (i = 0; i < sizeof(DROP_REASONS) / sizeof(DROP_REASONS[0]); i++)
		metric_touch(metric_d(&m_dropped), (const char *[]){ DROP_REASONS[i] });
	metric_d(&m_sent);
	metric_d(&m_retries);
	if (pthread_create(&n->thread, NULL, sender_main, n) != 0) {
		err_set(e, ERR_IO, "cannot start the notification sender thread");
		n->done = 1;
		flux_notify_stop(n, 0);
		return NULL;
	}
	n->started = 1;
	return n;
}

int flux_notify_send(struct flux_notify *n, const struct flux_notify_event *ev)
{
	char *body;

	if (n == NULL)
		return 0;
	if ((body = flux_notify_event_json(ev, n->controller, n->instance, time(NULL))) == NULL)
		return -1;
	pthread_mutex_lock(&n->lock);
	if (n->stopping || n->count == n->o.queue_size) {
		int first = !n->full_logged;
		n->full_logged = 1;
		pthread_mutex_unlock(&n->lock);
		free(body);
		count_drop(n, n->stopping ? DROP_SHUTDOWN : DROP_QUEUE_FULL);
		if (first)
			log_warn("notification queue full: events are dropped until the event endpoint catches up",
			    "reason", ev->reason, NULL);
		return -1;
	}
	n->ring[(n->head + n->count) % n->o.queue_size] = body;
	n->count++;
	n->full_logged = 0;
	atomic_fetch_add(&n->queued, 1);
	pthread_cond_signal(&n->wake);
	pthread_mutex_unlock(&n->lock);
	return 0;
}

static const char *obj_str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int flux_notify_object(struct flux_notify *n, const struct cJSON *obj, const char *type,
    const char *reason, const char *message, const char *revision)
{
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
	struct flux_notify_event ev = {
		obj_str(obj, "apiVersion"), obj_str(obj, "kind"), obj_str(meta, "name"),
		obj_str(meta, "namespace"), obj_str(meta, "uid"), obj_str(meta, "resourceVersion"),
		type, reason, message, revision,
	};

	return n ? flux_notify_send(n, &ev) : 0;
}

void flux_notify_stop(struct flux_notify *n, long drain_ms)
{
	if (n == NULL)
		return;
	pthread_mutex_lock(&n->lock);
	n->stopping = 1;
	n->drain_deadline_ms = clock_mono_ms() + (drain_ms > 0 ? drain_ms : 0);
	pthread_cond_broadcast(&n->wake);
	while (!n->done) {
		int64_t left = n->drain_deadline_ms - clock_mono_ms();
		if (left <= 0) {
			n->cancel = 1;          /* the POST in flight ends within ~100 ms */
			pthread_cond_broadcast(&n->wake);
			while (!n->done)
				pthread_cond_wait(&n->idle, &n->lock);
			break;
		}
		clock_mono_cond_wait(&n->idle, &n->lock, n->drain_deadline_ms);
	}
	pthread_mutex_unlock(&n->lock);
	if (n->started)
		pthread_join(n->thread, NULL);
	if (atomic_load(&n->dropped[DROP_SHUTDOWN]) > 0) {
		char count[32];
		snprintf(count, sizeof(count), "%llu", (unsigned long long)atomic_load(&n->dropped[DROP_SHUTDOWN]));
		log_warn("notifications not sent before shutdown", "dropped", count, NULL);
	}
	pthread_mutex_destroy(&n->lock);
	pthread_cond_destroy(&n->wake);
	pthread_cond_destroy(&n->idle);
	free(n->ring);
	free(n->url);
	free(n->controller);
	free(n->instance);
	free(n);
}

void flux_notify_set_default(struct flux_notify *n)
{
	atomic_store(&default_notify, n);
}

struct flux_notify *flux_notify_default(void)
{
	return atomic_load(&default_notify);
}
