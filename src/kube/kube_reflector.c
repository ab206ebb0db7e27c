/*
 * kube_reflector.c - the informer's list+watch loop (the reflector of
 * kube-api.md §1.5), on the informer's thread, filling the cache of
 * kube_informer.c through kube_informer_priv.h.
 *
 * The loop:
 *   list in pages (limit/continue), mark every object seen, drop the ones
 *   not seen (deleted while we were away), remember the list's
 *   resourceVersion; then watch from it with bookmarks and a server-side
 *   timeout, updating the last resourceVersion from every event, bookmarks
 *   included.  A watch that ends cleanly is reopened from the last
 *   resourceVersion; a 410 (HTTP or ERROR event) relists; every failure,
 *   a 410 included, backs off first (0.8 s doubling to 30 s, full jitter).
 *
 * Lists use no resourceVersion (a consistent read): with RV=0 the API
 * server's cache ignores `limit` and would hand us every object at once,
 * which for 10,000 Stacks is most of our memory budget.  What a hostile
 * server can make a list cost is bounded: bytes per reply, pages per list.
 *
 * Watches use the client's transport (kube_transport_init) with the stop
 * flag as their cancel flag, so kube_informer_stop on another thread aborts
 * an open watch; the bytes are read by kube_stream_lines (kube_stream.c).
 */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kube/kube_informer_priv.h"

#define MAX_EVENT_BYTES (16u << 20)
/* Idle seconds before (and between) TCP keepalive probes on a watch: the
 * value libcurl uses when keepalive is merely switched on. */
#define WATCH_KEEPALIVE_S 60L
/* One list reply is bounded far below what a server ignoring `limit`
 * could send: 100 typical objects are well under 1 MiB, and a page of big
 * ones is asked for again with a smaller limit (kube.h). */
#define LIST_REPLY_MAX (16LL << 20)
/* A line the loop repeats (list failed, watch expired or failed) is logged
 * freely up to LOG_BURST times, then once per LOG_REPEAT_MS with the count
 * of those held back. */
#define LOG_BURST 5
/* A watch shorter than this is no sign of health (client-go's "very short
 * watch" is under a second). */
#define WATCH_MIN_MS 1000
#define LOG_REPEAT_MS 10000

#define ACCEPT_JSON "Accept: application/json"
#define ACCEPT_META_LIST "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
#define ACCEPT_META "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

static pthread_mutex_t trim_lock = PTHREAD_MUTEX_INITIALIZER;

/* One thread at a time: glibc sets its allocator up on first use, and when
 * that first use is malloc_trim on several informer threads at once (a
 * sanitizer build, where malloc is the sanitizer's) they set it up together
 * and crash in mtrim (about one start in twelve with 16 threads). */
void kube_heap_trim(void)
{
	pthread_mutex_lock(&trim_lock);
	malloc_trim(0);
	pthread_mutex_unlock(&trim_lock);
}

/* Sleeps, waking early when stopped; returns 1 when stopped. */
static int pause_ms(struct kube_informer *inf, long ms)
{
	return kube_mono_sleep_unless(&inf->lock, &inf->cond, &inf->stop, ms);
}

/* ------------------------------------------------------------ list */

static char *list_path(const struct kube_informer *inf, const char *cont, long limit)
{
	char *base = kube_path(inf->r, inf->ns, NULL, NULL);
	struct strbuf s;

	strbuf_init(&s);
	strbuf_printf(&s, "%s?limit=%ld", base, limit);
	free(base);
	if (inf->selector) {
		strbuf_add(&s, "&labelSelector=");
		strbuf_add_query_value(&s, inf->selector);
	}
	if (cont) {
		strbuf_add(&s, "&continue=");
		strbuf_add_query_value(&s, cont);
	}
	return strbuf_take(&s);
}

/* One page; a reply over LIST_REPLY_MAX is asked for again with half the
 * limit, down to one object. */
static cJSON *fetch_page(struct kube_informer *inf, const char *cont, long *limit,
    long *retry_after_s, struct err *e)
{
	for (;;) {
		char *path = list_path(inf, cont, *limit);
		cJSON *page = kube_list_page(inf->c, path,
		    inf->metadata_only ? ACCEPT_META_LIST : ACCEPT_JSON, LIST_REPLY_MAX, retry_after_s, e);
		free(path);
		if (page != NULL || e->code != ERR_LIMIT || atomic_load(&inf->stop))
			return page;
		if (*limit <= 1) {
			err_set(e, ERR_LIMIT, "list %s: a reply is larger than %lld MiB even with limit=1 "
			    "(does the server ignore limit?)", inf->r->resource, LIST_REPLY_MAX >> 20);
			return NULL;
		}
		*limit /= 2;
	}
}

/* Takes the page's continue token (NULL at the end); -1 with e set when the
 * chain goes round in circles or will not end. */
static int next_continue(struct kube_informer *inf, const cJSON *page, char **cont, long pages,
    struct err *e)
{
	const char *next = kube_obj_str(page, "metadata.continue");

	if (next == NULL || *next == '\0') {
		free(*cont);
		*cont = NULL;
		return 0;
	}
	if (*cont != NULL && strcmp(*cont, next) == 0)
		return err_set(e, ERR_INVALID, "list %s: the server sent the same continue token twice",
		    inf->r->resource);
	if (pages >= inf->max_pages)
		return err_set(e, ERR_LIMIT, "list %s: still not complete after %ld pages "
		    "(metadata.continue never ends)", inf->r->resource, pages);
	free(*cont);
	*cont = xstrdup(next);
	return 0;
}

/* Lists every page into the cache; 0 ok, -1 with e set (a 410 when a
 * continue token expired; *retry_after_s when the server asked for a
 * pause). */
static int do_list(struct kube_informer *inf, long *retry_after_s, struct err *e)
{
	char *cont = NULL, *list_rv = NULL;
	long limit = inf->page_size, pages = 0;
	cJSON *page;

	kube_informer_list_begin(inf);
	do {
		cJSON *items, *it;
		const char *rv;
		page = fetch_page(inf, cont, &limit, retry_after_s, e);
		pages++;
		if (page == NULL || next_continue(inf, page, &cont, pages, e) < 0) {
			cJSON_Delete(page);
			free(cont);
			free(list_rv);
			return -1;
		}
		rv = kube_obj_str(page, "metadata.resourceVersion");
		if (list_rv == NULL && rv != NULL)
			list_rv = xstrdup(rv);
		items = cJSON_GetObjectItemCaseSensitive(page, "items");
		/* Detach one item at a time so the page shrinks as we go. */
		while ((it = cJSON_DetachItemViaPointer(items, items ? items->child : NULL)) != NULL) {
			if (atomic_load(&inf->stop)) {
				cJSON_Delete(it);
				continue;
			}
			kube_informer_upsert(inf, it);
		}
		cJSON_Delete(page);
		/* Give the page's memory back now: it lies in holes between the
		 * cached strings just allocated, and would otherwise stay counted
		 * as the process's high-water mark. */
		kube_heap_trim();
	} while (cont != NULL && !atomic_load(&inf->stop));
	free(cont);
	if (atomic_load(&inf->stop)) {
		free(list_rv);
		return -1;
	}
	if (list_rv == NULL) {
		err_set(e, ERR_INVALID, "list %s: the reply has no metadata.resourceVersion", inf->r->resource);
		return -1;
	}
	kube_informer_list_end(inf, list_rv);
	free(list_rv);
	return 0;
}

/* ------------------------------------------------------------ watch */

enum watch_end { WATCH_EOF, WATCH_EXPIRED, WATCH_FAILED, WATCH_STOPPED };

struct watch_ctx {
	struct kube_informer *inf;
	unsigned long events;      /* ADDED, MODIFIED, DELETED: progress */
	int bad_event;             /* an ERROR event or a line that is not an event */
	int expired;               /* an ERROR event said our resourceVersion is gone */
};

static int on_event_line(void *ud, char *line, size_t len, struct err *e)
{
	struct watch_ctx *w = ud;
	struct kube_informer *inf = w->inf;
	struct kube_watch_event ev;

	if (kube_watch_event_parse(line, len, &ev, e) < 0) {
		w->bad_event = 1;
		return -1;
	}
	pthread_mutex_lock(&inf->lock);
	inf->stats.events++;
	pthread_mutex_unlock(&inf->lock);
	/* An ERROR or a BOOKMARK is no progress: it must not reset the backoff
	 * (a server may end every watch after one). */
	if (ev.type != KUBE_ERROR && ev.type != KUBE_BOOKMARK)
		w->events++;
	switch (ev.type) {
	case KUBE_ERROR:
		if (ev.status.code == 410 || strcmp(ev.status.reason, "Expired") == 0 ||
		    strcmp(ev.status.reason, "Gone") == 0)
			w->expired = 1;
		w->bad_event = 1;
		kube_status_error(e, "watch: ERROR event", &ev.status);
		kube_watch_event_clear(&ev);
		return -1;
	case KUBE_BOOKMARK:
		kube_informer_set_rv(inf, ev.resource_version);
		break;
	case KUBE_ADDED:
	case KUBE_MODIFIED: {
		char *rv = xstrdup(ev.resource_version);
		cJSON *obj = ev.object;
		ev.object = NULL;
		kube_informer_upsert(inf, obj);
		kube_informer_set_rv(inf, rv);
		free(rv);
		break;
	}
	case KUBE_DELETED: {
		char *key = kube_object_key(ev.object);
		char *rv = xstrdup(ev.resource_version);
		cJSON *obj = ev.object;
		ev.object = NULL;
		if (key != NULL)
			kube_informer_remove(inf, key, obj);
		else
			cJSON_Delete(obj);
		kube_informer_set_rv(inf, rv);
		free(rv);
		free(key);
		break;
	}
	}
	kube_watch_event_clear(&ev);
	return 0;
}

static char *watch_url(struct kube_informer *inf, const char *rv, long timeout_s)
{
	struct strbuf s;
	char *path = kube_path(inf->r, inf->ns, NULL, NULL);

	strbuf_init(&s);
	strbuf_add(&s, kube_client_server(inf->c));
	strbuf_add(&s, path);
	free(path);
	strbuf_printf(&s, "?watch=1&allowWatchBookmarks=true&timeoutSeconds=%ld&resourceVersion=", timeout_s);
	strbuf_add_query_value(&s, rv);
	if (inf->selector) {
		strbuf_add(&s, "&labelSelector=");
		strbuf_add_query_value(&s, inf->selector);
	}
	return strbuf_take(&s);
}

/* A watch the server answered with an error status; 410 means relist. */
static enum watch_end refused_watch(struct kube_informer *inf, const struct http_response *resp,
    long *retry_after_s, struct err *e)
{
	struct kube_status st;
	char what[256];

	*retry_after_s = http_response_retry_after(resp);
	kube_status_parse(resp->body, resp->body_len, resp->status, &st);
	snprintf(what, sizeof(what), "watch %s: HTTP", inf->r->resource);
	kube_status_error(e, what, &st);
	return st.code == 410 ? WATCH_EXPIRED : WATCH_FAILED;
}

static enum watch_end do_watch(struct kube_informer *inf, int force_auth, unsigned long *events,
    long *retry_after_s, struct err *e)
{
	long timeout_s = inf->watch_timeout_s > 0 ? inf->watch_timeout_s :
	    300 + (long)(kube_rand01() * 300);
	const char *hdrs[3] = { inf->metadata_only ? ACCEPT_META : ACCEPT_JSON, NULL, NULL };
	struct http_request req = { .headers = hdrs };
	struct watch_ctx w = { inf, 0, 0, 0 };
	struct http_response refused;
	struct kube_transport t;
	enum watch_end end;
	int rc;
	char *rv, *url;

	*events = 0;
	*retry_after_s = -1;
	pthread_mutex_lock(&inf->lock);
	rv = xstrdup(inf->last_rv ? inf->last_rv : "");
	inf->stats.watches++;
	pthread_mutex_unlock(&inf->lock);
	url = watch_url(inf, rv, timeout_s);
	free(rv);
	if (kube_transport_init(inf->c, force_auth, &t, e) < 0) {
		free(url);
		return WATCH_FAILED;
	}
	/* The server ends the stream at timeoutSeconds; this bounds a server
	 * that does not. */
	t.opts.timeout_ms = (timeout_s + 30) * 1000L;
	/* A quiet watch still gets the server's periodic bookmarks, so silence
	 * longer than this is a stalled connection (see kube.h). */
	t.opts.stall_timeout_ms = inf->watch_idle_s * 1000L;
	/* Keepalive probes too, so a peer that vanished without a FIN is
	 * noticed even when nothing in between answers for it. */
	t.opts.tcp_keepalive_s = WATCH_KEEPALIVE_S;
	hdrs[1] = t.auth_header;
	req.url = url;
	rc = kube_stream_lines(&t.opts, &req, MAX_EVENT_BYTES, on_event_line, &w, &refused, e);
	*events = w.events;
	if (rc == 0) {
		end = WATCH_EOF;
	} else if (rc == 1) {
		end = refused_watch(inf, &refused, retry_after_s, e);
	} else if (w.bad_event) {
		end = w.expired ? WATCH_EXPIRED : WATCH_FAILED;
	} else {
		err_prefix(e, "watch %s", inf->r->resource);
		end = WATCH_FAILED;
	}
	if (atomic_load(&inf->stop))
		end = WATCH_STOPPED;
	http_response_free(&refused);
	free(url);
	kube_transport_free(&t);
	return end;
}

/* ------------------------------------------------------------ the loop */

static void count_error(struct kube_informer *inf, int relist)
{
	pthread_mutex_lock(&inf->lock);
	if (relist)
		inf->stats.relists_410++;
	else
		inf->stats.errors++;
	pthread_mutex_unlock(&inf->lock);
}

static void log_repeating(struct kube_informer *inf, struct kube_rate_gate *g,
    enum log_level level, const char *msg, const struct err *e)
{
	unsigned long held;
	char n[32];

	if (!kube_rate_gate_pass(g, LOG_BURST, LOG_REPEAT_MS, &held))
		return;
	snprintf(n, sizeof(n), "%lu", held);
	/* "suppressed" only when lines were held back (NULL ends the pairs). */
	log_write(level, msg, "resource", inf->r->resource, "error", e->msg,
	    held ? "suppressed" : NULL, n, NULL);
}

/* The next pause of the loop: the backoff, or longer when the server asked. */
static long next_pause(struct kube_backoff *bo, long retry_after_s)
{
	long wait = kube_backoff_next(bo);

	if (retry_after_s > KUBE_RETRY_AFTER_MAX_S)
		retry_after_s = KUBE_RETRY_AFTER_MAX_S;
	if (retry_after_s * 1000 > wait)
		wait = retry_after_s * 1000;
	return wait;
}

/*
 * The reflector loop.  Every failure pauses with the backoff before the
 * next request, a 410 included: a server that answers every watch with 410
 * would otherwise be relisted as fast as it answers.  The backoff is reset
 * only by progress (a watch that delivered changes, or lasted WATCH_MIN_MS),
 * never by a successful list, since a list followed by a failing watch is
 * exactly that storm; and a watch that ends sooner without a change, even
 * cleanly and with a BOOKMARK, pauses as a failure does.
 */
void *kube_reflector_main(void *arg)
{
	struct kube_informer *inf = arg;
	struct kube_backoff bo;
	int need_list = 1, force_auth = 0;
	struct err e;

	kube_backoff_init(&bo, inf->backoff_initial_ms, inf->backoff_max_ms, 2.0, 1.0);
	kube_request_cancel_on(&inf->stop);
	while (!atomic_load(&inf->stop)) {
		unsigned long events;
		long retry_after_s = -1;
		int64_t started;
		int lasted;
		enum watch_end end;
		if (need_list) {
			err_clear(&e);
			if (do_list(inf, &retry_after_s, &e) < 0) {
				if (atomic_load(&inf->stop))
					break;
				count_error(inf, 0);
				log_repeating(inf, &inf->gate_list, LOG_WARN, "list failed; retrying", &e);
				if (pause_ms(inf, next_pause(&bo, retry_after_s)))
					break;
				continue;
			}
			need_list = 0;
			log_debug("listed", "resource", inf->r->resource, NULL);
		}
		err_clear(&e);
		started = clock_mono_ms();
		end = do_watch(inf, force_auth, &events, &retry_after_s, &e);
		force_auth = 0;
		if (end == WATCH_STOPPED)
			break;
		lasted = clock_mono_ms() - started >= WATCH_MIN_MS;
		if (end == WATCH_EOF && (events > 0 || lasted)) {
			kube_backoff_reset(&bo);
			continue;   /* a normal end: watch again from the last RV */
		}
		if (end == WATCH_EXPIRED) {
			count_error(inf, 1);
			log_repeating(inf, &inf->gate_expired, LOG_INFO, "watch expired; relisting", &e);
			need_list = 1;
		} else if (end == WATCH_FAILED) {
			count_error(inf, 0);
			if (e.http_status == 401)
				force_auth = 1;
			log_repeating(inf, &inf->gate_watch, LOG_WARN, "watch failed; reconnecting", &e);
		}
		if (events > 0 || lasted)
			kube_backoff_reset(&bo);
		if (pause_ms(inf, next_pause(&bo, retry_after_s)))
			break;
	}
	kube_request_cancel_on(NULL);
	return NULL;
}

