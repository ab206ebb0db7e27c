/*
 * kube_util.c - the small pieces under the Kubernetes client: jitter,
 * wall-clock times (RFC 3339), backoff, small files, and readers for
 * fields of cJSON objects (conditions, owners, a Secret's values).  See kube_priv.h and kube.h; the generic
 * helpers (strings, maps, time, base64, secrets) are in src/base/.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base64.h"
#include "base/clock.h"
#include "base/fs.h"
#include "base/str.h"
#include "kube/kube_priv.h"

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
	struct strbuf s;

	if (name == NULL)
		return NULL;
	strbuf_init(&s);
	if (ns != NULL && *ns) {
		strbuf_add(&s, ns);
		strbuf_add(&s, "/");
	}
	strbuf_add(&s, name);
	return strbuf_take(&s);
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

/* ------------------------------------------------------------ objects */

static const cJSON *field(const cJSON *obj, const char *name)
{
	return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
}

const cJSON *kube_condition(const cJSON *obj, const char *type)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, field(field(obj, "status"), "conditions"))
		if (str_eq(kube_obj_str(c, "type"), type))
			return c;
	return NULL;
}

int kube_owned_by(const cJSON *obj, const char *kind, const char *uid)
{
	const cJSON *o;

	cJSON_ArrayForEach(o, field(field(obj, "metadata"), "ownerReferences"))
		if (str_eq(kube_obj_str(o, "kind"), kind) && str_eq(kube_obj_str(o, "uid"), uid))
			return 1;
	return 0;
}

unsigned char *kube_secret_value(const cJSON *secret, const char *key, size_t *len, struct err *e)
{
	const cJSON *v = field(field(secret, "data"), key);
	unsigned char *out = NULL;

	*len = 0;
	if (!cJSON_IsString(v)) {
		err_set(e, ERR_NOTFOUND, "no key \"%.100s\"", key);
		return NULL;
	}
	if (base64_decode(v->valuestring, strlen(v->valuestring), &out, len, e) < 0)
		return NULL;
	return out;
}
