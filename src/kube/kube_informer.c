/*
 * kube_informer.c - list+watch into an in-memory cache of one kind (the
 * reflector of kube-api.md §1.5), with change handlers and secondary
 * indexes.
 *
 * The loop, on its own thread:
 *   list in pages (limit/continue), mark every object seen, drop the ones
 *   not seen (deleted while we were away), remember the list's
 *   resourceVersion; then watch from it with bookmarks and a server-side
 *   timeout, updating the last resourceVersion from every event, bookmarks
 *   included.  A watch that ends cleanly is reopened from the last
 *   resourceVersion; a 410 (HTTP or ERROR event) relists; other failures
 *   back off (0.8 s doubling to 30 s, full jitter) and reconnect.
 *
 * Lists use no resourceVersion (a consistent read): with RV=0 the API
 * server's cache ignores `limit` and would hand us every object at once,
 * which for 10,000 Stacks is most of our memory budget.
 *
 * The cache stores each object as compact JSON text with managedFields and
 * the last-applied annotation removed, not as a cJSON tree: an order of
 * magnitude less memory per object.  Readers get a parsed copy they own.
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
#include "kube/kube_priv.h"

#define MAX_INDEXES 4
#define MAX_INDEX_VALUES 16
#define MAX_HANDLERS 8
#define MAX_EVENT_BYTES (16u << 20)
/* Idle seconds before (and between) TCP keepalive probes on a watch: the
 * value libcurl uses when keepalive is merely switched on. */
#define WATCH_KEEPALIVE_S 60L
/* Smaller than client-go's 500: a page is parsed whole (body and cJSON tree,
 * managedFields included), and with 10,000 Stacks that transient and the
 * heap fragmentation it leaves behind set the peak RSS (46 MiB at 500,
 * 40 at 200, 38 at 100 in bench/watch-scale). */
#define KUBE_DEFAULT_PAGE 100
#define KUBE_DEFAULT_WATCH_IDLE_S 120L
/* One list reply is bounded far below what a server ignoring `limit`
 * could send: 100 typical objects are well under 1 MiB, and a page of big
 * ones is asked for again with a smaller limit (kube.h). */
#define LIST_REPLY_MAX (16LL << 20)
/* Pages per list: a million objects at the default page size. */
#define KUBE_DEFAULT_MAX_LIST_PAGES 10000L
/* A line the loop repeats (list failed, watch expired or failed) is logged
 * freely up to LOG_BURST times, then once per LOG_REPEAT_MS with the count
 * of those held back. */
#define LOG_BURST 5
#define LOG_REPEAT_MS 10000

#define ACCEPT_JSON "Accept: application/json"
#define ACCEPT_META_LIST "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
#define ACCEPT_META "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

struct item {
	char *json;                /* stripped object, compact JSON */
	unsigned long mark;        /* list generation that last saw it */
	char **vals[MAX_INDEXES];  /* index values, per index */
	int nvals[MAX_INDEXES];
};

struct index {
	char *name;
	kube_index_fn fn;
	struct kmap values;        /* value -> struct kmap* (set of object keys) */
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
	pthread_cond_t cond;

	struct kmap store;         /* "ns/name" -> struct item* */
	struct index idx[MAX_INDEXES];
	int nidx;
	struct handler handlers[MAX_HANDLERS];
	int nhandlers;
	unsigned long gen;
	int synced;
	char *last_rv;
	struct kube_informer_stats stats;
};

/* ------------------------------------------------------------ lifecycle */

struct kube_informer *kube_informer_new(struct kube_client *c, const struct kube_resource *r,
    const struct kube_informer_opts *o)
{
	struct kube_informer *inf = kx_calloc(1, sizeof(*inf));

	inf->c = c;
	inf->r = r;
	inf->ns = o && o->namespace && *o->namespace ? kx_strdup(o->namespace) : NULL;
	inf->selector = o && o->label_selector && *o->label_selector ? kx_strdup(o->label_selector) : NULL;
	inf->page_size = o && o->page_size > 0 ? o->page_size : KUBE_DEFAULT_PAGE;
	inf->watch_timeout_s = o ? o->watch_timeout_s : 0;
	inf->watch_idle_s = o && o->watch_idle_timeout_s > 0 ? o->watch_idle_timeout_s :
	    KUBE_DEFAULT_WATCH_IDLE_S;
	inf->backoff_initial_ms = o && o->backoff_initial_ms > 0 ? o->backoff_initial_ms : 800;
	inf->backoff_max_ms = o && o->backoff_max_ms > 0 ? o->backoff_max_ms : 30000;
	inf->max_pages = o && o->max_list_pages > 0 ? o->max_list_pages : KUBE_DEFAULT_MAX_LIST_PAGES;
	inf->metadata_only = o ? o->metadata_only : 0;
	pthread_mutex_init(&inf->lock, NULL);
	kube_mono_cond_init(&inf->cond);
	kmap_init(&inf->store);
	return inf;
}

int kube_informer_add_handler(struct kube_informer *inf, kube_handler_fn fn, void *ud)
{
	if (inf->nhandlers >= MAX_HANDLERS || inf->started)
		return -1;
	inf->handlers[inf->nhandlers++] = (struct handler){ fn, ud };
	return 0;
}

int kube_informer_add_index(struct kube_informer *inf, const char *name, kube_index_fn fn)
{
	if (inf->nidx >= MAX_INDEXES || inf->started)
		return -1;
	inf->idx[inf->nidx].name = kx_strdup(name);
	inf->idx[inf->nidx].fn = fn;
	kmap_init(&inf->idx[inf->nidx].values);
	inf->nidx++;
	return 0;
}

const struct kube_resource *kube_informer_resource(const struct kube_informer *inf)
{
	return inf->r;
}

static void free_keyset(void *v)
{
	kmap_free(v, NULL);
	free(v);
}

static void item_free(struct item *it, int nidx)
{
	for (int i = 0; i < nidx; i++) {
		for (int k = 0; k < it->nvals[i]; k++)
			free(it->vals[i][k]);
		free(it->vals[i]);
	}
	free(it->json);
	free(it);
}

struct free_ctx {
	int nidx;
};

static void free_item_cb(void *ud, const char *key, void *value)
{
	(void)key;
	item_free(value, ((struct free_ctx *)ud)->nidx);
}

void kube_informer_free(struct kube_informer *inf)
{
	struct free_ctx fc;

	if (inf == NULL)
		return;
	kube_informer_stop(inf);
	fc.nidx = inf->nidx;
	kmap_each(&inf->store, free_item_cb, &fc);
	kmap_free(&inf->store, NULL);
	for (int i = 0; i < inf->nidx; i++) {
		free(inf->idx[i].name);
		kmap_free(&inf->idx[i].values, free_keyset);
	}
	free(inf->ns);
	free(inf->selector);
	free(inf->last_rv);
	pthread_mutex_destroy(&inf->lock);
	pthread_cond_destroy(&inf->cond);
	free(inf);
}

/* ------------------------------------------------------------ store */

static void index_remove(struct kube_informer *inf, const char *key, struct item *it)
{
	for (int i = 0; i < inf->nidx; i++) {
		for (int k = 0; k < it->nvals[i]; k++) {
			struct kmap *set = kmap_get(&inf->idx[i].values, it->vals[i][k]);
			if (set != NULL) {
				kmap_del(set, key);
				if (set->count == 0)
					free_keyset(kmap_del(&inf->idx[i].values, it->vals[i][k]));
			}
			free(it->vals[i][k]);
		}
		free(it->vals[i]);
		it->vals[i] = NULL;
		it->nvals[i] = 0;
	}
}

static void index_add(struct kube_informer *inf, const char *key, struct item *it, const cJSON *obj)
{
	for (int i = 0; i < inf->nidx; i++) {
		char *vals[MAX_INDEX_VALUES];
		int n = inf->idx[i].fn(obj, vals, MAX_INDEX_VALUES);
		if (n <= 0)
			continue;
		it->vals[i] = kx_calloc((size_t)n, sizeof(char *));
		for (int k = 0; k < n; k++) {
			struct kmap *set = kmap_get(&inf->idx[i].values, vals[k]);
			if (set == NULL) {
				set = kx_calloc(1, sizeof(*set));
				kmap_put(&inf->idx[i].values, vals[k], set);
			}
			kmap_put(set, key, set);   /* a set: any non-NULL value */
			it->vals[i][k] = vals[k];
		}
		it->nvals[i] = n;
	}
}

static void call_handlers(struct kube_informer *inf, enum kube_change ch, const char *old_json,
    const cJSON *obj)
{
	cJSON *old = old_json ? cJSON_Parse(old_json) : NULL;

	for (int i = 0; i < inf->nhandlers; i++)
		inf->handlers[i].fn(inf->handlers[i].ud, inf, ch, old, obj);
	cJSON_Delete(old);
}

/* What the cache keeps of an object: no managedFields or last-applied
 * annotation, and for a metadata-only informer nothing but apiVersion, kind
 * and metadata, whatever the server sent. */
static void trim_object(const struct kube_informer *inf, cJSON *obj)
{
	cJSON *f, *next;

	kube_strip_object(obj);
	if (!inf->metadata_only)
		return;
	for (f = obj->child; f != NULL; f = next) {
		next = f->next;
		if (strcmp(f->string, "apiVersion") != 0 && strcmp(f->string, "kind") != 0 &&
		    strcmp(f->string, "metadata") != 0)
			cJSON_Delete(cJSON_DetachItemViaPointer(obj, f));
	}
}

/* Adds or replaces obj (consumed).  Handlers run after the lock is dropped. */
static void store_upsert(struct kube_informer *inf, cJSON *obj)
{
	char *key = kube_object_key(obj), *json, *old_json = NULL;
	struct item *it;
	int changed = 1;

	if (key == NULL) {
		cJSON_Delete(obj);
		return;
	}
	trim_object(inf, obj);
	json = cJSON_PrintUnformatted(obj);
	if (json == NULL) {
		free(key);
		cJSON_Delete(obj);
		return;
	}
	pthread_mutex_lock(&inf->lock);
	it = kmap_get(&inf->store, key);
	if (it == NULL) {
		it = kx_calloc(1, sizeof(*it));
		kmap_put(&inf->store, key, it);
	} else {
		changed = strcmp(it->json, json) != 0;
		index_remove(inf, key, it);
		if (changed && inf->nhandlers > 0)
			old_json = it->json;
		else
			free(it->json);
	}
	it->json = json;
	it->mark = inf->gen;
	index_add(inf, key, it, obj);
	pthread_mutex_unlock(&inf->lock);
	if (changed)
		call_handlers(inf, old_json ? KUBE_CHANGE_UPDATE : KUBE_CHANGE_ADD, old_json, obj);
	free(old_json);
	free(key);
	cJSON_Delete(obj);
}

static void store_delete_key(struct kube_informer *inf, const char *key, cJSON *last)
{
	struct item *it;
	cJSON *obj = last;

	pthread_mutex_lock(&inf->lock);
	it = kmap_del(&inf->store, key);
	if (it != NULL)
		index_remove(inf, key, it);
	pthread_mutex_unlock(&inf->lock);
	if (it == NULL) {
		cJSON_Delete(last);
		return;
	}
	if (obj == NULL)
		obj = cJSON_Parse(it->json);
	if (obj != NULL && inf->nhandlers > 0) {
		trim_object(inf, obj);
		for (int i = 0; i < inf->nhandlers; i++)
			inf->handlers[i].fn(inf->handlers[i].ud, inf, KUBE_CHANGE_DELETE, NULL, obj);
	}
	cJSON_Delete(obj);
	item_free(it, inf->nidx);
}

static void set_last_rv(struct kube_informer *inf, const char *rv)
{
	pthread_mutex_lock(&inf->lock);
	free(inf->last_rv);
	inf->last_rv = rv ? kx_strdup(rv) : NULL;
	pthread_mutex_unlock(&inf->lock);
}

/* ------------------------------------------------------------ readers */

cJSON *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name)
{
	struct sb key;
	struct item *it;
	cJSON *out = NULL;

	sb_init(&key);
	if (ns != NULL && *ns)
		sb_printf(&key, "%s/", ns);
	sb_add(&key, name);
	pthread_mutex_lock(&inf->lock);
	it = kmap_get(&inf->store, key.buf);
	if (it != NULL)
		out = cJSON_Parse(it->json);
	pthread_mutex_unlock(&inf->lock);
	sb_free(&key);
	return out;
}

size_t kube_informer_count(struct kube_informer *inf)
{
	size_t n;

	pthread_mutex_lock(&inf->lock);
	n = inf->store.count;
	pthread_mutex_unlock(&inf->lock);
	return n;
}

struct keylist {
	char **keys;
	size_t n;
};

static void collect_key(void *ud, const char *key, void *value)
{
	struct keylist *kl = ud;
	(void)value;
	kl->keys[kl->n++] = kx_strdup(key);
}

int kube_informer_by_index(struct kube_informer *inf, const char *index, const char *value,
    void (*fn)(void *ud, const char *key), void *ud)
{
	struct keylist kl = { NULL, 0 };
	struct kmap *set;
	int i;

	for (i = 0; i < inf->nidx; i++)
		if (strcmp(inf->idx[i].name, index) == 0)
			break;
	if (i == inf->nidx)
		return -1;
	/* Copy the keys so fn runs without the cache lock (it may enqueue). */
	pthread_mutex_lock(&inf->lock);
	set = kmap_get(&inf->idx[i].values, value);
	if (set != NULL) {
		kl.keys = kx_calloc(set->count, sizeof(char *));
		kmap_each(set, collect_key, &kl);
	}
	pthread_mutex_unlock(&inf->lock);
	for (size_t k = 0; k < kl.n; k++) {
		fn(ud, kl.keys[k]);
		free(kl.keys[k]);
	}
	free(kl.keys);
	return (int)kl.n;
}

struct each_ctx {
	void (*fn)(void *ud, const char *key, const char *rv);
	void *ud;
};

static void each_cb(void *ud, const char *key, void *value)
{
	struct each_ctx *c = ud;
	struct item *it = value;
	/* Parsed on demand: keeping the RV beside the text would cost memory
	 * on every object for the benefit of a rare dump. */
	cJSON *obj = cJSON_Parse(it->json);
	const char *v = kube_obj_str(obj, "metadata.resourceVersion");
	char rv[128];

	snprintf(rv, sizeof(rv), "%s", v ? v : "");
	cJSON_Delete(obj);
	c->fn(c->ud, key, rv);
}

void kube_informer_each(struct kube_informer *inf,
    void (*fn)(void *ud, const char *key, const char *rv), void *ud)
{
	struct each_ctx c = { fn, ud };

	pthread_mutex_lock(&inf->lock);
	kmap_each(&inf->store, each_cb, &c);
	pthread_mutex_unlock(&inf->lock);
}

void kube_informer_stats(struct kube_informer *inf, struct kube_informer_stats *out)
{
	pthread_mutex_lock(&inf->lock);
	*out = inf->stats;
	pthread_mutex_unlock(&inf->lock);
}

int kube_informer_synced(struct kube_informer *inf)
{
	int s;

	pthread_mutex_lock(&inf->lock);
	s = inf->synced;
	pthread_mutex_unlock(&inf->lock);
	return s;
}

int kube_informer_wait_synced(struct kube_informer *inf, long timeout_ms)
{
	int64_t deadline = kube_mono_deadline(timeout_ms);
	int rc;

	pthread_mutex_lock(&inf->lock);
	while (!inf->synced && !atomic_load(&inf->stop) &&
	    kube_mono_cond_wait(&inf->cond, &inf->lock, deadline) == 0)
		;
	rc = inf->synced ? 0 : -1;
	pthread_mutex_unlock(&inf->lock);
	return rc;
}

/* Sleeps, waking early when stopped; returns 1 when stopped. */
static int pause_ms(struct kube_informer *inf, long ms)
{
	return kube_mono_sleep_unless(&inf->lock, &inf->cond, &inf->stop, ms);
}

/* ------------------------------------------------------------ list */

struct stale_ctx {
	unsigned long gen;
	struct keylist kl;
	size_t cap;
};

static void find_stale(void *ud, const char *key, void *value)
{
	struct stale_ctx *s = ud;
	struct item *it = value;

	if (it->mark == s->gen)
		return;
	if (s->kl.n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->kl.keys = kx_realloc(s->kl.keys, s->cap * sizeof(char *));
	}
	s->kl.keys[s->kl.n++] = kx_strdup(key);
}

static char *list_path(const struct kube_informer *inf, const char *cont, long limit)
{
	char *base = kube_path(inf->r, inf->ns, NULL, NULL);
	struct sb s;

	sb_init(&s);
	sb_printf(&s, "%s?limit=%ld", base, limit);
	free(base);
	if (inf->selector) {
		sb_add(&s, "&labelSelector=");
		sb_add_query_value(&s, inf->selector);
	}
	if (cont) {
		sb_add(&s, "&continue=");
		sb_add_query_value(&s, cont);
	}
	return sb_take(&s);
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
	*cont = kx_strdup(next);
	return 0;
}

/* Lists every page into the cache; 0 ok, -1 with e set (a 410 when a
 * continue token expired; *retry_after_s when the server asked for a
 * pause). */
static int do_list(struct kube_informer *inf, long *retry_after_s, struct err *e)
{
	char *cont = NULL, *list_rv = NULL;
	struct stale_ctx stale = { 0 };
	long limit = inf->page_size, pages = 0;
	cJSON *page;

	pthread_mutex_lock(&inf->lock);
	inf->gen++;
	stale.gen = inf->gen;
	inf->stats.lists++;
	pthread_mutex_unlock(&inf->lock);
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
			list_rv = kx_strdup(rv);
		items = cJSON_GetObjectItemCaseSensitive(page, "items");
		/* Detach one item at a time so the page shrinks as we go. */
		while ((it = cJSON_DetachItemViaPointer(items, items ? items->child : NULL)) != NULL) {
			if (atomic_load(&inf->stop)) {
				cJSON_Delete(it);
				continue;
			}
			store_upsert(inf, it);
		}
		cJSON_Delete(page);
		/* Give the page's memory back now: it lies in holes between the
		 * cached strings just allocated, and would otherwise stay counted
		 * as the process's high-water mark. */
		malloc_trim(0);
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
	/* Objects not seen in this list were deleted while we were not watching. */
	pthread_mutex_lock(&inf->lock);
	kmap_each(&inf->store, find_stale, &stale);
	pthread_mutex_unlock(&inf->lock);
	for (size_t i = 0; i < stale.kl.n; i++) {
		store_delete_key(inf, stale.kl.keys[i], NULL);
		free(stale.kl.keys[i]);
	}
	free(stale.kl.keys);
	set_last_rv(inf, list_rv);
	free(list_rv);
	pthread_mutex_lock(&inf->lock);
	if (!inf->synced) {
		inf->synced = 1;
		pthread_cond_broadcast(&inf->cond);
	}
	pthread_mutex_unlock(&inf->lock);
	return 0;
}

/* ------------------------------------------------------------ watch */

enum watch_end { WATCH_EOF, WATCH_EXPIRED, WATCH_FAILED, WATCH_STOPPED };

struct watch_ctx {
	struct kube_informer *inf;
	unsigned long events;      /* ADDED, MODIFIED, DELETED and BOOKMARK: progress */
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
	/* An ERROR is no progress: it must not reset the backoff. */
	if (ev.type != KUBE_ERROR)
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
		set_last_rv(inf, ev.resource_version);
		break;
	case KUBE_ADDED:
	case KUBE_MODIFIED: {
		char *rv = kx_strdup(ev.resource_version);
		cJSON *obj = ev.object;
		ev.object = NULL;
		store_upsert(inf, obj);
		set_last_rv(inf, rv);
		free(rv);
		break;
	}
	case KUBE_DELETED: {
		char *key = kube_object_key(ev.object);
		char *rv = kx_strdup(ev.resource_version);
		cJSON *obj = ev.object;
		ev.object = NULL;
		if (key != NULL)
			store_delete_key(inf, key, obj);
		else
			cJSON_Delete(obj);
		set_last_rv(inf, rv);
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
	struct sb s;
	char *path = kube_path(inf->r, inf->ns, NULL, NULL);

	sb_init(&s);
	sb_add(&s, kube_client_server(inf->c));
	sb_add(&s, path);
	free(path);
	sb_printf(&s, "?watch=1&allowWatchBookmarks=true&timeoutSeconds=%ld&resourceVersion=", timeout_s);
	sb_add_query_value(&s, rv);
	if (inf->selector) {
		sb_add(&s, "&labelSelector=");
		sb_add_query_value(&s, inf->selector);
	}
	return sb_take(&s);
}

/* A watch the server answered with an error status; 410 means relist. */
static enum watch_end refused_watch(struct kube_informer *inf, const struct http_response *resp,
    long *retry_after_s, struct err *e)
{
	struct kube_status st;
	char what[256];

	*retry_after_s = kube_retry_after_s(resp);
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
	rv = kx_strdup(inf->last_rv ? inf->last_rv : "");
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

	if (retry_after_s * 1000 > wait)
		wait = retry_after_s * 1000;
	return wait;
}

/*
 * The reflector loop.  Every failure pauses with the backoff before the
 * next request, a 410 included: a server that answers every watch with 410
 * would otherwise be relisted as fast as it answers.  The backoff is reset
 * only by progress (a watch event other than ERROR, or a watch that ran its
 * course), never by a successful list, since a list followed by a failing
 * watch is exactly that storm.
 */
static void *informer_main(void *arg)
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
		started = kube_mono_ms();
		end = do_watch(inf, force_auth, &events, &retry_after_s, &e);
		force_auth = 0;
		if (end == WATCH_STOPPED)
			break;
		if (end == WATCH_EOF && (events > 0 || kube_mono_ms() - started > 1000)) {
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
		if (events > 0)
			kube_backoff_reset(&bo);
		if (pause_ms(inf, next_pause(&bo, retry_after_s)))
			break;
	}
	kube_request_cancel_on(NULL);
	return NULL;
}

int kube_informer_start(struct kube_informer *inf, struct err *e)
{
	int rc;

	if (inf->started)
		return 0;
	rc = pthread_create(&inf->thread, NULL, informer_main, inf);
	if (rc != 0)
		return err_set(e, ERR_IO, "informer %s: cannot start a thread: %s", inf->r->resource,
		    strerror(rc));
	inf->started = 1;
	return 0;
}

void kube_informer_request_stop(struct kube_informer *inf)
{
	pthread_mutex_lock(&inf->lock);
	atomic_store(&inf->stop, 1);
	pthread_cond_broadcast(&inf->cond);
	pthread_mutex_unlock(&inf->lock);
}

void kube_informer_stop(struct kube_informer *inf)
{
	if (!inf->started)
		return;
	kube_informer_request_stop(inf);
	pthread_join(inf->thread, NULL);
	inf->started = 0;
}
