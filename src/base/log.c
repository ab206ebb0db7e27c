/*
 * log.c - JSON-lines and text log records (see log.h).
 *
 * Records are built completely in memory and written with one fwrite under a
 * mutex, so concurrent workers never produce interleaved lines.  JSON
 * escaping is left to cJSON rather than done by hand.
 */
#include "base/log.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static enum log_level cur_level = LOG_INFO;
static enum log_format cur_format = LOG_JSON;
static FILE *cur_out;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *level_names[] = { "debug", "info", "warn", "error", "off" };

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

static char *render_json(enum log_level level, const char *ts, const char *msg, va_list ap)
{
	cJSON *o = cJSON_CreateObject();
	char *line;

	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "level", level_names[level]);
	cJSON_AddStringToObject(o, "ts", ts);
	cJSON_AddStringToObject(o, "msg", msg);
	for (;;) {
		const char *k = va_arg(ap, const char *);
		if (k == NULL)
			break;
		const char *v = va_arg(ap, const char *);
		cJSON_AddStringToObject(o, k, v != NULL ? v : "");
	}
	line = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return line;
}

/* Text: "2026-11-30T10:00:00.123Z INFO  message key=value key2=\"a b\"". */
static char *render_text(enum log_level level, const char *ts, const char *msg, va_list ap)
{
	size_t cap = 256 + strlen(msg), len = 0;
	char *s = malloc(cap);

	if (s == NULL)
		return NULL;
	len = (size_t)snprintf(s, cap, "%s %-5s %s", ts, level_names[level], msg);
	for (;;) {
		const char *k = va_arg(ap, const char *);
		if (k == NULL)
			break;
		const char *v = va_arg(ap, const char *);
		if (v == NULL)
			v = "";
		int quote = strpbrk(v, " \t\"=") != NULL || *v == '\0';
		size_t need = len + strlen(k) + strlen(v) + 8;
		if (need > cap) {
			char *n = realloc(s, need * 2);
			if (n == NULL) {
				free(s);
				return NULL;
			}
			s = n;
			cap = need * 2;
		}
		len += (size_t)snprintf(s + len, cap - len, quote ? " %s=\"%s\"" : " %s=%s", k, v);
	}
	return s;
}

void log_write(enum log_level level, const char *msg, ...)
{
	char ts[40];
	char *line;
	va_list ap;

	if (!log_enabled(level))
		return;
	format_time(ts, sizeof(ts));
	va_start(ap, msg);
	if (cur_format == LOG_JSON)
		line = render_json(level, ts, msg, ap);
	else
		line = render_text(level, ts, msg, ap);
	va_end(ap);
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
