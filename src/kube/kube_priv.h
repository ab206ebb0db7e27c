/*
 * kube_priv.h - helpers shared by the files of src/kube/ only (not a public
 * interface: other modules include kube.h).  The generic pieces under
 * them (string buffer, hash map, allocation) are base/strbuf.h,
 * base/strmap.h and base/xalloc.h; src/kube/ follows xalloc.h's
 * out-of-memory policy (abort).
 */
#ifndef PC_KUBE_PRIV_H
#define PC_KUBE_PRIV_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/http.h"
#include "base/secret.h"
#include "base/strbuf.h"
#include "base/strmap.h"
#include "base/xalloc.h"
#include "kube/kube.h"

/* The next random double in [0,1) from a per-thread generator. */
double kube_rand01(void);

/*
 * Sleeps on CLOCK_MONOTONIC (kube_mono.c), for the runtime's threads, whose
 * condition variables are made by clock_mono_cond_init and waited on with
 * clock_mono_cond_wait (base/clock.h).  kube_mono_sleep_unless sleeps ms on
 * such a condition variable unless *stop is or becomes set (whoever sets it
 * broadcasts under lock; 1 when stopped).  kube_mono_deadline is now +
 * delay_ms, saturated (never wraps).
 */
int kube_mono_sleep_unless(pthread_mutex_t *lock, pthread_cond_t *cond, atomic_int *stop, long ms);
int64_t kube_mono_deadline(long delay_ms);

/* A token bucket for a log line that may repeat without end (a failing
 * loop, a client sending garbage): `burst` lines at once, then one per
 * interval_ms.  Zero-initialise; not thread-safe (one thread, or a lock). */
struct kube_rate_gate {
	int started;
	double tokens;
	int64_t at_ms;             /* when tokens was last brought up to date */
	unsigned long held;        /* lines not logged since the last one */
};

/* 1 when the line may be logged now, with *held the count held back since
 * the last one logged; 0 when it is to be dropped (counted). */
int kube_rate_gate_pass(struct kube_rate_gate *g, int burst, long interval_ms, unsigned long *held);

/* Reads a small file (token, namespace), trimming trailing whitespace. */
int kube_read_trimmed(const char *path, size_t max, char **out, struct err *e);

/*
 * What one request or watch presents to the server (kube_client.c): http.h
 * options carrying the config's TLS settings, the client certificate and
 * the calling thread's cancel flag (kube_request_cancel_on), plus the
 * Authorization header.  Credentials are copied, because an exec plugin
 * refresh on another thread may replace the client's own meanwhile.  The
 * caller adds timeouts; kube_transport_free releases it.  -1 with e set
 * when credentials cannot be had (token file, exec plugin).
 */
struct kube_transport {
	struct http_opts opts;     /* strings borrowed from the config and from below */
	char *auth_header;         /* "Authorization: Bearer ..." or NULL; secret, owned */
	char *cert_pem, *key_pem;  /* an exec plugin's certificate or NULL; owned, key secret */
	unsigned long cred_gen;    /* which credentials these are (kube_transport_renew) */
};

int kube_transport_init(struct kube_client *c, int force_refresh, struct kube_transport *t,
    struct err *e);
/* After a 401 to credentials of generation refused_gen (a transport's
 * cred_gen): fresh credentials (token file re-read, exec plugin re-run),
 * unless another request has already replaced the refused ones, then
 * those.  So concurrent 401s refresh once. */
int kube_transport_renew(struct kube_client *c, unsigned long refused_gen,
    struct kube_transport *t, struct err *e);
void kube_transport_free(struct kube_transport *t);

/*
 * The credentials of one client (kube_auth.c): the current token and exec
 * plugin certificate, refreshed from cfg (token file, exec plugin) as
 * needed.  kube_creds_get fills t's Authorization header, exec
 * certificate and cred_gen; force asks for fresh credentials (after a
 * 401), skipped when refused_gen (not 0) is no longer the current
 * generation.  Thread-safe.
 */
struct kube_creds {
	pthread_mutex_t lock;
	pthread_cond_t exec_done;  /* an exec plugin run ended */
	int exec_running;
	char *token;               /* secret */
	int64_t token_read_ms;     /* token file: monotonic time of the last read */
	int64_t expiry_us;         /* exec: wall-clock expiry ... */
	int expires;               /* ... when the plugin gave one */
	char *exec_cert, *exec_key;   /* exec: client certificate; key secret */
	unsigned long gen;         /* bumped whenever the credentials change */
};

void kube_creds_init(struct kube_creds *k);
void kube_creds_free(struct kube_creds *k);
int kube_creds_get(struct kube_creds *k, const struct kube_config *cfg, int force,
    unsigned long refused_gen, struct kube_transport *t, struct err *e);

/*
 * A GET whose body is handed to fn line by line as soon as the bytes arrive
 * (a watch; kube_stream.c, over http.h's stream reader).  o and req as for
 * http.h, except that o->retries and o->max_redirects are ignored: one
 * attempt, and a redirect is a refusal.  Returns 0 when the body ended
 * normally; 1 when the server answered with a non-2xx status, then *refused
 * holds the status, the header block and the start of the body (free
 * with http_response_free);
 * -1 with e set on a transfer failure, a cancel (ERR_CANCELED; nothing is
 * sent when o->cancel is already set) or when fn returned -1 (e as fn set
 * it).  Lines longer than max_line fail (ERR_LIMIT).
 */
int kube_stream_lines(const struct http_opts *o, const struct http_request *req, size_t max_line,
    kube_line_fn fn, void *ud, struct http_response *refused, struct err *e);

/*
 * One list page for an informer (kube_stream.c): GET path (with its query)
 * sending `accept` ("Accept: ..." header line), the reply bounded by
 * max_bytes (ERR_LIMIT beyond, before more is buffered), one attempt plus
 * one with fresh credentials after a 401: the informer's loop is the retry
 * policy.  Returns the page (caller frees), or NULL with e set; for a
 * non-2xx reply e carries the Status and e->http_status, and
 * *retry_after_s the server's Retry-After (else -1).
 */
cJSON *kube_list_page(struct kube_client *c, const char *path, const char *accept,
    int64_t max_bytes, long *retry_after_s, struct err *e);

/* malloc_trim(0), serialized (kube_reflector.c says why). */
void kube_heap_trim(void);

/* The longest pause a server's Retry-After (http_response_retry_after:
 * seconds or an HTTP-date) imposes on a kube request or an informer loop;
 * beyond it a broken server would stall the controller. */
#define KUBE_RETRY_AFTER_MAX_S 60L
const char *kube_client_server(const struct kube_client *c);

#endif
