/*
 * kube_util.c - the small pieces under the Kubernetes client: string
 * buffers, the hash map, base64, secrets, time and durations, timed waits
 * on a condition variable, backoff, and readers for fields of cJSON
 * objects.  See kube_priv.h and kube.h.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/fs.h"
#include "kube/kube_priv.h"

/* ------------------------------------------------------------ allocation */

static void oom(void)
{
	fputs("pulumi-controller: out of memory\n", stderr);
	abort();
}

void *kx_malloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (p == NULL)
		oom();
	return p;
}

void *kx_calloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (p == NULL)
		oom();
	return p;
}

void *kx_realloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (q == NULL)
		oom();
	return q;
}

char *kx_strdup(const char *s)
{
	return kx_strndup(s, strlen(s));
}

char *kx_strndup(const char *s, size_t n)
{
	char *p = kx_malloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

/* ------------------------------------------------------------ strings */

void sb_init(struct sb *s)
{
	memset(s, 0, sizeof(*s));
}

static void sb_grow(struct sb *s, size_t extra)
{
	size_t need = s->len + extra + 1, cap = s->cap ? s->cap : 64;

	if (need <= s->cap)
		return;
	while (cap < need)
		cap *= 2;
	s->buf = kx_realloc(s->buf, cap);
	s->cap = cap;
}

void sb_addn(struct sb *s, const char *p, size_t n)
{
	sb_grow(s, n);
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	s->buf[s->len] = '\0';
}

void sb_add(struct sb *s, const char *p)
{
	sb_addn(s, p, strlen(p));
}

void sb_printf(struct sb *s, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	sb_grow(s, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	s->len += (size_t)n;
}

void sb_add_query_value(struct sb *s, const char *v)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *v; v++) {
		unsigned char ch = (unsigned char)*v;
		if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
			sb_addn(s, (const char *)&ch, 1);
		} else {
			char enc[3] = { '%', hex[ch >> 4], hex[ch & 15] };
			sb_addn(s, enc, 3);
		}
	}
}

char *sb_take(struct sb *s)
{
	char *p = s->buf ? s->buf : kx_strdup("");
	sb_init(s);
	return p;
}

void sb_free(struct sb *s)
{
	free(s->buf);
	sb_init(s);
}

/* ------------------------------------------------------------ hash map */

static size_t hash_str(const char *s)
{
	size_t h = 1469598103934665603ULL;   /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

void kmap_init(struct kmap *m)
{
	memset(m, 0, sizeof(*m));
}

static struct kmap_entry **kmap_find(const struct kmap *m, const char *key)
{
	struct kmap_entry **pp;

	if (m->nslots == 0)
		return NULL;
	for (pp = &m->slots[hash_str(key) & (m->nslots - 1)]; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->key, key) == 0)
			return pp;
	return NULL;
}

void *kmap_get(const struct kmap *m, const char *key)
{
	struct kmap_entry **pp = kmap_find(m, key);
	return pp ? (*pp)->value : NULL;
}

static void kmap_rehash(struct kmap *m)
{
	size_t n = m->nslots ? m->nslots * 2 : 16;
	struct kmap_entry **slots = kx_calloc(n, sizeof(*slots));

	for (size_t i = 0; i < m->nslots; i++) {
		struct kmap_entry *en = m->slots[i], *next;
		for (; en; en = next) {
			next = en->next;
			size_t h = hash_str(en->key) & (n - 1);
			en->next = slots[h];
			slots[h] = en;
		}
	}
	free(m->slots);
	m->slots = slots;
	m->nslots = n;
}

void *kmap_put(struct kmap *m, const char *key, void *value)
{
	struct kmap_entry **pp = kmap_find(m, key), *en;
	size_t klen = strlen(key), h;

	if (pp != NULL) {
		void *old = (*pp)->value;
		(*pp)->value = value;
		return old;
	}
	if (m->count + 1 > m->nslots)   /* load factor <= 1 */
		kmap_rehash(m);
	en = kx_malloc(sizeof(*en) + klen + 1);
	memcpy(en->key, key, klen + 1);
	en->value = value;
	h = hash_str(key) & (m->nslots - 1);
	en->next = m->slots[h];
	m->slots[h] = en;
	m->count++;
	return NULL;
}

void *kmap_del(struct kmap *m, const char *key)
{
	struct kmap_entry **pp = kmap_find(m, key), *en;
	void *v;

	if (pp == NULL)
		return NULL;
	en = *pp;
	*pp = en->next;
	v = en->value;
	free(en);
	m->count--;
	return v;
}

void kmap_each(const struct kmap *m, void (*fn)(void *ud, const char *key, void *value), void *ud)
{
	for (size_t i = 0; i < m->nslots; i++)
		for (struct kmap_entry *en = m->slots[i]; en; en = en->next)
			fn(ud, en->key, en->value);
}

void kmap_free(struct kmap *m, void (*free_value)(void *value))
{
	for (size_t i = 0; i < m->nslots; i++) {
		struct kmap_entry *en = m->slots[i], *next;
		for (; en; en = next) {
			next = en->next;
			if (free_value && en->value)
				free_value(en->value);
			free(en);
		}
	}
	free(m->slots);
	kmap_init(m);
}

/* ------------------------------------------------------------ time */

double kube_rand01(void)
{
	static __thread unsigned int seed;

	if (seed == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		seed = (unsigned int)(ts.tv_nsec ^ (ts.tv_sec << 16) ^ (uintptr_t)&seed);
		if (seed == 0)
			seed = 1;
	}
	return (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
}

int64_t kube_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The monotonic clock is base/clock.h's; this name stays only for the
 * callers outside src/kube/ (src/stack/, cmd_run.c) that still use it. */
int64_t kube_mono_ms(void)
{
	return clock_mono_ms();
}

void kube_format_microtime(char *buf, size_t n, int64_t unix_us)
{
	time_t secs = (time_t)(unix_us / 1000000);
	struct tm tm;
	size_t w;

	gmtime_r(&secs, &tm);
	w = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + w, n - w, ".%06ldZ", (long)(unix_us % 1000000));
}

/* n decimal digits at *p, advancing it; -1 when they are not there. */
static int digits(const char **p, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++, (*p)++) {
		if (!isdigit((unsigned char)**p))
			return -1;
		v = v * 10 + (**p - '0');
	}
	return v;
}

int kube_parse_time_us(const char *s, int64_t *out)
{
	const char *p = s;
	struct tm tm, check;
	int64_t frac_us = 0, offset_s = 0;
	time_t t;

	memset(&tm, 0, sizeof(tm));
	if ((tm.tm_year = digits(&p, 4)) < 0 || *p++ != '-' || (tm.tm_mon = digits(&p, 2)) < 1 ||
	    tm.tm_mon > 12 || *p++ != '-' || (tm.tm_mday = digits(&p, 2)) < 1 || tm.tm_mday > 31 ||
	    (*p != 'T' && *p != 't') || (p++, (tm.tm_hour = digits(&p, 2)) < 0) || tm.tm_hour > 23 ||
	    *p++ != ':' || (tm.tm_min = digits(&p, 2)) < 0 || tm.tm_min > 59 || *p++ != ':' ||
	    (tm.tm_sec = digits(&p, 2)) < 0 || tm.tm_sec > 59)
		return -1;
	if (*p == '.') {
		int64_t scale = 100000;
		p++;
		if (!isdigit((unsigned char)*p))
			return -1;
		for (; isdigit((unsigned char)*p); p++, scale /= 10)
			frac_us += (*p - '0') * scale;   /* digits past microseconds add 0 */
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p++ == '-' ? -1 : 1, oh, om;
		if ((oh = digits(&p, 2)) < 0 || oh > 23 || *p++ != ':' || (om = digits(&p, 2)) < 0 ||
		    om > 59)
			return -1;
		offset_s = sign * (oh * 3600 + om * 60);
	} else {
		return -1;
	}
	if (*p != '\0')
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	check = tm;
	t = timegm(&tm);
	/* timegm normalises 31 April into 1 May: that is not a date */
	if (tm.tm_mday != check.tm_mday || tm.tm_mon != check.tm_mon)
		return -1;
	/* local time = UTC + offset */
	*out = ((int64_t)t - offset_s) * 1000000 + frac_us;
	return 0;
}

/* ------------------------------------------------------------ backoff */

void kube_backoff_init(struct kube_backoff *b, long initial_ms, long max_ms, double factor,
    double jitter)
{
	memset(b, 0, sizeof(*b));
	b->initial_ms = initial_ms > 0 ? initial_ms : 1;
	b->max_ms = max_ms >= b->initial_ms ? max_ms : b->initial_ms;
	b->factor = factor >= 1.0 ? factor : 1.0;
	b->jitter = jitter >= 0 ? jitter : 0;
}

long kube_backoff_next(struct kube_backoff *b)
{
	long d;

	if (b->current_ms == 0)
		b->current_ms = b->initial_ms;
	d = b->current_ms;
	if ((double)b->current_ms * b->factor >= (double)b->max_ms)
		b->current_ms = b->max_ms;
	else
		b->current_ms = (long)((double)b->current_ms * b->factor);
	return d + (long)(kube_rand01() * b->jitter * (double)d);
}

void kube_backoff_reset(struct kube_backoff *b)
{
	b->current_ms = 0;
}

/* ------------------------------------------------------------ files */

int kube_read_trimmed(const char *path, size_t max, char **out, struct err *e)
{
	size_t len;
	char *buf;

	if (fs_read_file(path, max, &buf, &len, e) < 0)
		return -1;
	while (len > 0 && isspace((unsigned char)buf[len - 1]))
		buf[--len] = '\0';
	*out = buf;
	return 0;
}

/* ------------------------------------------------------------ objects */

const char *kube_obj_str(const cJSON *obj, const char *path)
{
	char part[128];
	const cJSON *cur = obj;

	while (cur != NULL && *path) {
		const char *dot = strchr(path, '.');
		size_t n = dot ? (size_t)(dot - path) : strlen(path);
		if (n >= sizeof(part))
			return NULL;
		memcpy(part, path, n);
		part[n] = '\0';
		cur = cJSON_GetObjectItemCaseSensitive(cur, part);
		path += n + (dot ? 1 : 0);
	}
	return cJSON_IsString(cur) ? cur->valuestring : NULL;
}

char *kube_object_key(const cJSON *obj)
{
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	const char *name = kube_obj_str(obj, "metadata.name");
	struct sb s;

	if (name == NULL)
		return NULL;
	sb_init(&s);
	if (ns != NULL && *ns) {
		sb_add(&s, ns);
		sb_add(&s, "/");
	}
	sb_add(&s, name);
	return sb_take(&s);
}

void kube_strip_object(cJSON *obj)
{
	cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
	cJSON *ann;

	if (!cJSON_IsObject(meta))
		return;
	cJSON_DeleteItemFromObjectCaseSensitive(meta, "managedFields");
	ann = cJSON_GetObjectItemCaseSensitive(meta, "annotations");
	if (cJSON_IsObject(ann)) {
		cJSON_DeleteItemFromObjectCaseSensitive(ann,
		    "kubectl.kubernetes.io/last-applied-configuration");
		if (ann->child == NULL)
			cJSON_DeleteItemFromObjectCaseSensitive(meta, "annotations");
	}
}
