/*
 * strbuf.h - a growable NUL-terminated string, for building request paths,
 * query strings, keys and messages piece by piece.
 *
 * Out of memory aborts (the policy is stated in base/xalloc.h): no strbuf_
 * function fails, so callers never check.  Code that must report
 * ERR_NOMEM instead does not use this.
 *
 *     struct strbuf s;
 *     strbuf_init(&s);
 *     strbuf_printf(&s, "/api/v1/namespaces/%s/pods", ns);
 *     char *path = strbuf_take(&s);   // the caller frees path
 */
#ifndef PC_STRBUF_H
#define PC_STRBUF_H

#include <stddef.h>

/* buf is owned by the strbuf (NULL until something is added): free it
 * with strbuf_free, or take it with strbuf_take. */
struct strbuf {
	char *buf;
	size_t len, cap;
};

void strbuf_init(struct strbuf *s);
void strbuf_addn(struct strbuf *s, const char *p, size_t n);
void strbuf_add(struct strbuf *s, const char *p);
void strbuf_printf(struct strbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends v percent-encoded for a URL query value (libcurl's
 * curl_easy_escape: everything but A-Z a-z 0-9 - . _ ~ is encoded). */
void strbuf_add_query_value(struct strbuf *s, const char *v);
/* Hands the string to the caller, who frees it (never NULL: "" when
 * nothing was added); s is empty again afterwards. */
char *strbuf_take(struct strbuf *s);
void strbuf_free(struct strbuf *s);

#endif
