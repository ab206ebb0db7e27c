/*
 * kube_watch.c - the watch stream format: splitting the chunked body into
 * '\n'-terminated lines (a chunk may hold several events and an event may
 * span several libcurl callbacks, kube-api.md §1.3) and decoding each line
 * into a typed event.  Pure functions over bytes, so they are unit-tested
 * and fuzzed without a server; the informer drives them.
 */
#include <stdlib.h>
#include <string.h>

#include "kube/kube_priv.h"
#include "base/str.h"

void kube_lines_init(struct kube_lines *l, size_t max_line)
{
	memset(l, 0, sizeof(*l));
	l->max_line = max_line;
}

void kube_lines_free(struct kube_lines *l)
{
	free(l->buf);
	memset(l, 0, sizeof(*l));
}

/* Appends to the pending partial line, enforcing the limit. */
static int lines_append(struct kube_lines *l, const char *p, size_t n, struct err *e)
{
	if (l->len + n > l->max_line) {
		l->len = 0;
		return err_set(e, ERR_LIMIT, "watch stream: an event is longer than %zu bytes", l->max_line);
	}
	if (l->len + n + 1 > l->cap) {
		size_t cap = l->cap ? l->cap : 4096;
		while (cap < l->len + n + 1)
			cap *= 2;
		l->buf = xrealloc(l->buf, cap);
		l->cap = cap;
	}
	memcpy(l->buf + l->len, p, n);
	l->len += n;
	l->buf[l->len] = '\0';
	return 0;
}

static int emit(char *line, size_t len, kube_line_fn fn, void *ud, struct err *e)
{
	while (len > 0 && line[len - 1] == '\r')
		len--;
	if (len == 0)
		return 0;
	line[len] = '\0';
	return fn(ud, line, len, e);
}

int kube_lines_feed(struct kube_lines *l, const char *data, size_t n, kube_line_fn fn, void *ud,
    struct err *e)
{
	while (n > 0) {
		const char *nl = memchr(data, '\n', n);
		size_t take;
		if (nl == NULL)
			return lines_append(l, data, n, e);
		take = (size_t)(nl - data);
		/* Always through the buffer: fn gets a writable, NUL-terminated
		 * line, and the length limit is checked in one place. */
		if (lines_append(l, data, take, e) < 0)
			return -1;
		{
			size_t len = l->len;
			l->len = 0;   /* reset first: fn may fail, the buffer is done */
			if (emit(l->buf, len, fn, ud, e) < 0)
				return -1;
		}
		data = nl + 1;
		n -= take + 1;
	}
	return 0;
}

void kube_watch_event_clear(struct kube_watch_event *ev)
{
	cJSON_Delete(ev->object);
	memset(ev, 0, sizeof(*ev));
}

int kube_watch_event_parse(const char *line, size_t len, struct kube_watch_event *ev,
    struct err *e)
{
	static const struct { const char *name; enum kube_event_type type; } types[] = {
		{ "ADDED", KUBE_ADDED }, { "MODIFIED", KUBE_MODIFIED }, { "DELETED", KUBE_DELETED },
		{ "BOOKMARK", KUBE_BOOKMARK }, { "ERROR", KUBE_ERROR },
	};
	cJSON *doc = cJSON_ParseWithLength(line, len), *obj;
	const char *type;
	size_t i;

	memset(ev, 0, sizeof(*ev));
	if (!cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		return err_set(e, ERR_INVALID, "watch stream: an event is not a JSON object");
	}
	type = kube_obj_str(doc, "type");
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (str_eq(type, types[i].name))
			break;
	if (i == sizeof(types) / sizeof(types[0])) {
		cJSON_Delete(doc);
		return err_set(e, ERR_INVALID, "watch stream: an event has no known type");
	}
	ev->type = types[i].type;
	obj = cJSON_DetachItemFromObjectCaseSensitive(doc, "object");
	cJSON_Delete(doc);
	if (!cJSON_IsObject(obj)) {
		cJSON_Delete(obj);
		return err_set(e, ERR_INVALID, "watch stream: a %s event has no object", types[i].name);
	}
	ev->object = obj;
	if (ev->type == KUBE_ERROR) {
		char *s = cJSON_PrintUnformatted(obj);
		kube_status_parse(s, s ? strlen(s) : 0, 500, &ev->status);
		free(s);
		return 0;
	}
	ev->resource_version = kube_obj_str(obj, "metadata.resourceVersion");
	if (ev->resource_version == NULL || ev->resource_version[0] == '\0') {
		kube_watch_event_clear(ev);
		return err_set(e, ERR_INVALID, "watch stream: a %s event has no metadata.resourceVersion",
		    types[i].name);
	}
	if (ev->type != KUBE_BOOKMARK && kube_obj_str(obj, "metadata.name") == NULL) {
		kube_watch_event_clear(ev);
		return err_set(e, ERR_INVALID, "watch stream: a %s event has no metadata.name",
		    types[i].name);
	}
	return 0;
}
