/*
 * kube_event.c - core/v1 Events about objects (kube.h "events"), as
 * client-go's tools/record recorder writes them (kube-api.md §5): a new
 * Event named <object>.<hex nanoseconds> with count 1, and for a repeat of
 * the same type/reason/message about the same object a merge patch that
 * bumps count and lastTimestamp on the Event already written, so a Stack
 * failing in a loop produces one Event with a growing count, not thousands.
 *
 * The cache of written Events is bounded; when full the oldest half is
 * forgotten (a forgotten repeat just starts a new Event).  If the Event was
 * deleted meanwhile (events expire after an hour by default) the patch gets
 * 404 and a new one is created.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube_priv.h"

#define CACHE_MAX 4096

static const struct kube_resource event_res = { "", "v1", "events", "Event", 1 };

struct seen {
	char *name;                /* the Event's name */
	char *ns;
	long count;
	uint64_t order;
};

struct kube_recorder {
	struct kube_client *c;
	char *component, *instance;
	pthread_mutex_t lock;
	struct strmap cache;         /* identity -> struct seen* */
	uint64_t next_order;
};

struct kube_recorder *kube_recorder_new(struct kube_client *c, const char *component,
    const char *instance)
{
	struct kube_recorder *r = xcalloc(1, sizeof(*r));

	r->c = c;
	r->component = xstrdup(component ? component : "pulumi-controller");
	r->instance = xstrdup(instance ? instance : "");
	pthread_mutex_init(&r->lock, NULL);
	strmap_init(&r->cache);
	return r;
}

static void seen_free(void *v)
{
	struct seen *s = v;
	free(s->name);
	free(s->ns);
	free(s);
}

void kube_recorder_free(struct kube_recorder *r)
{
	if (r == NULL)
		return;
	strmap_free(&r->cache, seen_free);
	pthread_mutex_destroy(&r->lock);
	free(r->component);
	free(r->instance);
	free(r);
}

struct evict_ctx {
	uint64_t below;
	char **keys;
	size_t n;
};

static void pick_old(void *ud, const char *key, void *value)
{
	struct evict_ctx *c = ud;
	if (((struct seen *)value)->order < c->below)
		c->keys[c->n++] = xstrdup(key);
}

static void evict_locked(struct kube_recorder *r)
{
	struct evict_ctx c = { r->next_order - CACHE_MAX / 2, xcalloc(r->cache.count, sizeof(char *)), 0 };

	strmap_each(&r->cache, pick_old, &c);
	for (size_t i = 0; i < c.n; i++) {
		seen_free(strmap_del(&r->cache, c.keys[i]));
		free(c.keys[i]);
	}
	free(c.keys);
}

static cJSON *involved(const cJSON *obj)
{
	cJSON *ref = cJSON_CreateObject();
	static const char *fields[][2] = {
		{ "apiVersion", "apiVersion" }, { "kind", "kind" }, { "metadata.name", "name" },
		{ "metadata.namespace", "namespace" }, { "metadata.uid", "uid" },
		{ "metadata.resourceVersion", "resourceVersion" },
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		const char *v = kube_obj_str(obj, fields[i][0]);
		if (v != NULL)
			cJSON_AddStringToObject(ref, fields[i][1], v);
	}
	return ref;
}

static int create_event(struct kube_recorder *r, const cJSON *obj, const char *ns,
    const char *type, const char *reason, const char *message, char **name_out, struct err *e)
{
	const char *oname = kube_obj_str(obj, "metadata.name");
	cJSON *ev = cJSON_CreateObject(), *meta, *src, *out;
	char name[512], now[64];

	kube_format_microtime(now, sizeof(now), kube_now_us());
	/* metav1.Time has second precision: drop the fraction. */
	memcpy(now + 19, "Z", 2);
	snprintf(name, sizeof(name), "%.200s.%llx", oname, (unsigned long long)kube_now_us() * 1000ULL);
	cJSON_AddStringToObject(ev, "apiVersion", "v1");
	cJSON_AddStringToObject(ev, "kind", "Event");
	meta = cJSON_AddObjectToObject(ev, "metadata");
	cJSON_AddStringToObject(meta, "name", name);
	cJSON_AddStringToObject(meta, "namespace", ns);
	cJSON_AddItemToObject(ev, "involvedObject", involved(obj));
	cJSON_AddStringToObject(ev, "reason", reason);
	cJSON_AddStringToObject(ev, "message", message);
	cJSON_AddStringToObject(ev, "type", type);
	cJSON_AddStringToObject(ev, "firstTimestamp", now);
	cJSON_AddStringToObject(ev, "lastTimestamp", now);
	cJSON_AddNumberToObject(ev, "count", 1);
	src = cJSON_AddObjectToObject(ev, "source");
	cJSON_AddStringToObject(src, "component", r->component);
	if (*r->instance)
		cJSON_AddStringToObject(src, "host", r->instance);
	cJSON_AddStringToObject(ev, "reportingComponent", r->component);
	cJSON_AddStringToObject(ev, "reportingInstance", r->instance);
	out = kube_create(r->c, &event_res, ns, ev, e);
	cJSON_Delete(ev);
	if (out == NULL)
		return -1;
	cJSON_Delete(out);
	*name_out = xstrdup(name);
	return 0;
}

static int bump_event(struct kube_recorder *r, const char *ns, const char *name, long count,
    const char *message, struct err *e)
{
	cJSON *p = cJSON_CreateObject(), *out;
	char now[64], *body;

	kube_format_microtime(now, sizeof(now), kube_now_us());
	memcpy(now + 19, "Z", 2);
	cJSON_AddNumberToObject(p, "count", (double)count);
	cJSON_AddStringToObject(p, "lastTimestamp", now);
	cJSON_AddStringToObject(p, "message", message);
	body = cJSON_PrintUnformatted(p);
	cJSON_Delete(p);
	out = kube_patch(r->c, &event_res, ns, name, NULL, KUBE_PATCH_MERGE, body, r->component, 0, e);
	free(body);
	if (out == NULL)
		return -1;
	cJSON_Delete(out);
	return 0;
}

int kube_event(struct kube_recorder *r, const cJSON *obj, const char *type, const char *reason,
    const char *message, struct err *e)
{
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	const char *uid = kube_obj_str(obj, "metadata.uid");
	const char *kind = kube_obj_str(obj, "kind");
	const char *name = kube_obj_str(obj, "metadata.name");
	struct strbuf id;
	struct seen *s;
	char *ev_name = NULL, *ev_ns = NULL;
	long count = 0;
	int rc;

	if (name == NULL || kind == NULL)
		return err_set(e, ERR_INVALID, "event %s: the object has no kind or name", reason);
	if (ns == NULL || *ns == '\0')
		ns = "default";
	strbuf_init(&id);
	strbuf_printf(&id, "%s\n%s\n%s\n%s\n%s\n%s\n%s", kind, ns, name, uid ? uid : "", type, reason, message);
	pthread_mutex_lock(&r->lock);
	s = strmap_get(&r->cache, id.buf);
	if (s != NULL) {
		ev_name = xstrdup(s->name);
		ev_ns = xstrdup(s->ns);
		count = ++s->count;
		s->order = r->next_order++;
	}
	pthread_mutex_unlock(&r->lock);
	if (ev_name != NULL) {
		rc = bump_event(r, ev_ns, ev_name, count, message, e);
		free(ev_name);
		free(ev_ns);
		if (rc == 0 || e->code != ERR_NOTFOUND) {
			strbuf_free(&id);
			return rc;
		}
		/* The Event expired: start again. */
	}
	rc = create_event(r, obj, ns, type, reason, message, &ev_name, e);
	if (rc == 0) {
		struct seen *n = xcalloc(1, sizeof(*n));
		n->name = ev_name;
		n->ns = xstrdup(ns);
		n->count = 1;
		pthread_mutex_lock(&r->lock);
		n->order = r->next_order++;
		if (r->cache.count >= CACHE_MAX)
			evict_locked(r);
		s = strmap_put(&r->cache, id.buf, n);
		if (s != NULL)
			seen_free(s);
		pthread_mutex_unlock(&r->lock);
	}
	strbuf_free(&id);
	return rc;
}
