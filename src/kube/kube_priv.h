/*
 * kube_priv.h - helpers shared by the files of src/kube/ only (not a public
 * interface: other modules include kube.h).  A growable string buffer and a
 * string-keyed hash map, both small because the informer keeps thousands of
 * objects and every byte per entry counts.
 */
#ifndef PC_KUBE_PRIV_H
#define PC_KUBE_PRIV_H

#include <stdarg.h>
#include <stddef.h>

#include "kube/kube.h"

/* A NUL-terminated growable string; buf owned, free with sb_free (or take
 * it with sb_take).  Allocation failure aborts, as with kx_malloc. */
struct sb {
	char *buf;
	size_t len, cap;
};

void sb_init(struct sb *s);
void sb_addn(struct sb *s, const char *p, size_t n);
void sb_add(struct sb *s, const char *p);
void sb_printf(struct sb *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Percent-encodes for a URL query value. */
void sb_add_query_value(struct sb *s, const char *v);
/* Hands the buffer to the caller (never NULL; caller frees). */
char *sb_take(struct sb *s);
void sb_free(struct sb *s);

/* A hash map from string keys (copied) to opaque values (not owned). */
struct kmap_entry {
	struct kmap_entry *next;
	void *value;
	char key[];
};

struct kmap {
	struct kmap_entry **slots;
	size_t nslots, count;
};

void kmap_init(struct kmap *m);
void *kmap_get(const struct kmap *m, const char *key);
/* Inserts or replaces; returns the previous value (or NULL). */
void *kmap_put(struct kmap *m, const char *key, void *value);
/* Removes; returns the value that was there (or NULL). */
void *kmap_del(struct kmap *m, const char *key);
/* Iterates; fn may not modify the map. */
void kmap_each(const struct kmap *m, void (*fn)(void *ud, const char *key, void *value), void *ud);
/* Frees the map; values are passed to free_value when non-NULL. */
void kmap_free(struct kmap *m, void (*free_value)(void *value));

/* Allocation helpers that abort on failure (out of memory leaves a
 * controller nothing sensible to do; the pod restarts). */
void *kx_malloc(size_t n);
void *kx_calloc(size_t n, size_t sz);
void *kx_realloc(void *p, size_t n);
char *kx_strdup(const char *s);
char *kx_strndup(const char *s, size_t n);

/* base64 (standard alphabet, padding optional, whitespace ignored) decode;
 * malloc'd NUL-terminated result; -1 on bad input. */
int kube_b64_decode(const char *in, size_t inlen, char **out, size_t *outlen);

/* The next random double in [0,1) from a per-thread generator. */
double kube_rand01(void);
void kube_sleep_ms(long ms);

/* Reads a small file (token, namespace), trimming trailing whitespace. */
int kube_read_trimmed(const char *path, size_t max, char **out, struct err *e);

/* Credentials for one request: an "Authorization: Bearer ..." header line
 * (malloc'd, secret) or NULL. Defined in kube_client.c. */
char *kube_client_auth_header(struct kube_client *c, int force_refresh, struct err *e);
/* Sets TLS and client-certificate options on a curl easy handle. */
void kube_client_setup_tls(struct kube_client *c, void *curl);
const char *kube_client_server(const struct kube_client *c);

#endif
