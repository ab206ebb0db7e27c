/*
 * strbuf.c - the growable string (see strbuf.h); allocation failure aborts
 * through xalloc.h.
 */
#include "base/strbuf.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"


void strbuf_init(struct strbuf *s)
{
	memset(s, 0, sizeof(*s));
}

static void strbuf_grow(struct strbuf *s, size_t extra)
{
	size_t need = s->len + extra + 1, cap = s->cap ? s->cap : 64;

	if (need <= s->cap)
		return;
	while (cap < need)
		cap *= 2;
	s->buf = xrealloc(s->buf, cap);
	s->cap = cap;
}

void strbuf_addn(struct strbuf *s, const char *p, size_t n)
{
	strbuf_grow(s, n);
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	s->buf[s->len] = '\0';
}

void strbuf_add(struct strbuf *s, const char *p)
{
	strbuf_addn(s, p, strlen(p));
}

void strbuf_printf(struct strbuf *s, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	strbuf_grow(s, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	s->len += (size_t)n;
}

void strbuf_add_query_value(struct strbuf *s, const char *v)
{
	char *esc = curl_easy_escape(NULL, v, 0);

	if (esc == NULL) {   /* libcurl fails only when out of memory */
		fputs("pulumi-controller: out of memory\n", stderr);
		abort();
	}
	strbuf_add(s, esc);
	curl_free(esc);
}

char *strbuf_take(struct strbuf *s)
{
	char *p = s->buf ? s->buf : xstrdup("");
	strbuf_init(s);
	return p;
}

void strbuf_free(struct strbuf *s)
{
	free(s->buf);
	strbuf_init(s);
}
