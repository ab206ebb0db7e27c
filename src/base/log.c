/*
 * log.c - JSON-lines and text log records (see log.h).
 *
 * Records are built completely in memory and written with one fwrite under a
 * mutex, so concurrent workers never produce interleaved lines.  JSON
 * escaping is left to cJSON rather than done by hand.  A record's fields are
 * the thread's context (log_context_set) followed by its own pairs; a key in
 * both is written once, with the record's value.
 */
#include "base/log.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static enum log_level cur_level = LOG_INFO;
static enum log_format cur_format = LOG_JSON;
static FILE *cur_out;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *level_names[] = { "debug", "info", "warn", "error", "off" };

/* Most key/value pairs one record carries (its own and the context's). */
#define LOG_PAIRS_MAX 40

struct log_context {
	int n;
	char key[LOG_CONTEXT_MAX][32];
	char value[LOG_CONTEXT_MAX][LOG_CONTEXT_VALUE_MAX];
};

static _Thread_local struct log_context ctx;

void log_context_set(const char *key, const char *value)
{
	int i = 0;

	while (i < ctx.n && strcmp(ctx.key[i], key) != 0)
		i++;
	if (i == ctx.n) {
		if (ctx.n == LOG_CONTEXT_MAX)
			return;
		ctx.n++;
		snprintf(ctx.key[i], sizeof(ctx.key[i]), "%s", key);
	}
	snprintf(ctx.value[i], sizeof(ctx.value[i]), "%s", value ? value : "");
}

void log_context_clear(void)
{
	ctx.n = 0;
}

struct pairs {
	size_t n;
	const char *k[LOG_PAIRS_MAX], *v[LOG_PAIRS_MAX];
};

static int has_key(const struct pairs *own, const char *key)
{
	for (size_t i = 0; i < own->n; i++)
		if (strcmp(own->k[i], key) == 0)
			return 1;
	return 0;
}

/* The record's fields in order: context first (unless the record sets the
 * same key), then the record's own pairs from ap. */
static void collect_pairs(va_list ap, struct pairs *out)
{
	struct pairs own = { 0 };

	for (;;) {
		const char *k = va_arg(ap, const char *);
		if (k == NULL)
			break;
		const char *v = va_arg(ap, const char *);
		if (own.n < LOG_PAIRS_MAX) {
			own.k[own.n] = k;
			own.v[own.n++] = v != NULL ? v : "";
		}
	}
	out->n = 0;
	for (int i = 0; i < ctx.n && out->n < LOG_PAIRS_MAX; i++)
		if (!has_key(&own, ctx.key[i])) {
			out->k[out->n] = ctx.key[i];
			out->v[out->n++] = ctx.value[i];
		}
	for (size_t i = 0; i < own.n && out->n < LOG_PAIRS_MAX; i++) {
		out->k[out->n] = own.k[i];
		out->v[out->n++] = own.v[i];
	}
}

void log_setup(enum log_level level, enum log_format format, FILE *out)
{
	pthread_mutex_lock(&log_lock);
	cur_level = level;
	cur_format = format;
	cur_out = out;
	pthread_mutex_unlock(&log_lock);
}

int log_parse_level(const char *s, enum log_level *out)
{
	for (int i = LOG_DEBUG; i <= LOG_OFF; i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

int log_parse_format(const char *s, enum log_format *out)
{
	if (strcmp(s, "json") == 0)
		*out = LOG_JSON;
	else if (strcmp(s, "text") == 0)
		*out = LOG_TEXT;
	else
		return -1;
	return 0;
}

int log_enabled(enum log_level level)
{
	return level >= cur_level && level != LOG_OFF;
}

static void format_time(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static char *render_json(enum log_level level, const char *ts, const char *msg, const struct pairs *f)
{
	cJSON *o = cJSON_CreateObject();
	char *line;

	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "level", level_names[level]);
	cJSON_AddStringToObject(o, "ts", ts);
	cJSON_AddStringToObject(o, "msg", msg);
	for (size_t i = 0; i < f->n; i++)
		cJSON_AddStringToObject(o, f->k[i], f->v[i]);
	line = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return line;
}

/*
 * One byte of untrusted text in its escaped form: control characters as
 * \n, \r, \t or \xNN; with LOG_ESC_QUOTES also \" and \\ (so a quoted
 * value cannot end early); with LOG_ESC_BYTES every byte outside
 * printable ASCII as \xNN, newline and bytes >= 0x80 included.
 * Returns the bytes written to out (at most 4).
 */
static size_t escape_byte(unsigned char c, unsigned flags, char *out)
{
	static const char hex[] = "0123456789abcdef";

	switch (flags & LOG_ESC_BYTES ? 0 : c) {
	case '\n': memcpy(out, "\\n", 2); return 2;
	case '\r': memcpy(out, "\\r", 2); return 2;
	case '\t': memcpy(out, "\\t", 2); return 2;
	default: break;
	}
	if ((flags & LOG_ESC_QUOTES) && (c == '"' || c == '\\')) {
		out[0] = '\\';
		out[1] = (char)c;
		return 2;
	}
	if (c < 0x20 || c == 0x7f || (c >= 0x80 && (flags & LOG_ESC_BYTES))) {
		out[0] = '\\';
		out[1] = 'x';
		out[2] = hex[c >> 4];
		out[3] = hex[c & 15];
		return 4;
	}
	out[0] = (char)c;
	return 1;
}

const char *log_escape(const char *in, char *out, size_t n, unsigned flags)
{
	const unsigned char *s = (const unsigned char *)(in ? in : "");
	size_t total = 0, len = 0, limit = n > 4 ? n - 4 : 0;
	char buf[4];
	int cut;

	if (n == 0)
		return out;
	for (const unsigned char *p = s; *p; p++)
		total += escape_byte(*p, flags, buf);
	/* Longer than n - 4: cut there (never inside an escape) and mark it,
	 * so a cut text always ends in "...". */
	cut = total > limit;
	for (const unsigned char *p = s; *p; p++) {
		size_t k = escape_byte(*p, flags, buf);
		if (cut && len + k > limit)
			break;
		memcpy(out + len, buf, k);
		len += k;
	}
	if (cut && n >= 4) {
		memcpy(out + len, "...", 3);
		len += 3;
	}
	out[len] = '\0';
	return out;
}

const char *log_printable(const char *in, char *out, size_t n)
{
	return log_escape(in, out, n, 0);
}

/* Appends s to the growing line at *buf, escaped as escape_byte says. */
static int append_escaped(char **buf, size_t *len, size_t *cap, const char *s, int quoted)
{
	size_t need = *len + strlen(s) * 4 + 8;
	char tmp[4];

	if (need > *cap) {
		char *nb = realloc(*buf, need * 2);
		if (nb == NULL)
			return -1;
		*buf = nb;
		*cap = need * 2;
	}
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		size_t k = escape_byte(*p, quoted ? LOG_ESC_QUOTES : 0, tmp);
		memcpy(*buf + *len, tmp, k);
		*len += k;
	}
	(*buf)[*len] = '\0';
	return 0;
}

static int append_raw(char **buf, size_t *len, size_t *cap, const char *s)
{
	return append_escaped(buf, len, cap, s, 0);
}

/* Text: "2026-11-30T10:00:00.123Z INFO  message key=value key2=\"a b\"".
 * Values are quoted when they hold a space, a quote, '=' or any character
 * that is escaped, so every record stays one parseable line. */
static char *render_text(enum log_level level, const char *ts, const char *msg, const struct pairs *f)
{
	size_t cap = 256 + strlen(msg), len = 0;
	char *s = malloc(cap);

	if (s == NULL)
		return NULL;
	len = (size_t)snprintf(s, cap, "%s %-5s ", ts, level_names[level]);
	if (append_raw(&s, &len, &cap, msg) < 0)
		goto fail;
	for (size_t i = 0; i < f->n; i++) {
		const char *k = f->k[i], *v = f->v[i];
		int quote = *v == '\0' || strpbrk(v, " \t\"=\\") != NULL;
		for (const unsigned char *p = (const unsigned char *)v; *p && !quote; p++)
			quote = *p < 0x20 || *p == 0x7f;
		if (append_raw(&s, &len, &cap, " ") < 0 || append_raw(&s, &len, &cap, k) < 0 ||
		    append_raw(&s, &len, &cap, quote ? "=\"" : "=") < 0 ||
		    append_escaped(&s, &len, &cap, v, quote) < 0 ||
		    (quote && append_raw(&s, &len, &cap, "\"") < 0))
			goto fail;
	}
	return s;
fail:
	free(s);
	return NULL;
}

void log_write(enum log_level level, const char *msg, ...)
{
	char ts[40];
	char *line;
	struct pairs f;
	va_list ap;

	if (!log_enabled(level))
		return;
	format_time(ts, sizeof(ts));
	va_start(ap, msg);
	collect_pairs(ap, &f);
	va_end(ap);
	if (cur_format == LOG_JSON)
		line = render_json(level, ts, msg, &f);
	else
		line = render_text(level, ts, msg, &f);
	if (line == NULL)
		return;
	pthread_mutex_lock(&log_lock);
	FILE *out = cur_out != NULL ? cur_out : stderr;
	fputs(line, out);
	fputc('\n', out);
	fflush(out);
	pthread_mutex_unlock(&log_lock);
	free(line);
}
