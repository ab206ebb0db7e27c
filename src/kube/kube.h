/*
 * kube.h - the Kubernetes client and controller runtime (the one public
 * header of src/kube/).
 *
 * Layers, bottom up (each usable alone):
 *   config    where the API server is and how to authenticate: in-cluster
 *             service account, or kubeconfig (libyaml) with CA file/data,
 *             tokens, token files, client certificates, exec plugins;
 *   client    REST requests with the API's error model (Status objects),
 *             credential refresh on 401, 429 Retry-After, retries only where
 *             a repeat cannot do harm;
 *   watch     the newline-delimited event stream splitter and decoder;
 *   informer  list+watch into a cache per kind (the reflector loop: pages,
 *             bookmarks, reconnect from the last resourceVersion, 410 ->
 *             relist), handlers and secondary indexes;
 *   queue     client-go's rate-limited work queue;
 *   leader    Lease-based leader election;
 *   events    core/v1 Events with repeats folded into a count.
 *
 * Objects are cJSON trees.  Every function that returns a cJSON * gives the
 * caller ownership (free with cJSON_Delete) unless it says otherwise.
 * Errors follow base/err.h; for API errors e->http_status is the HTTP code
 * and the message carries the Status reason and message.  No message ever
 * contains a credential.
 */
#ifndef PC_KUBE_H
#define PC_KUBE_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

/* ------------------------------------------------------------------ config */

#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* An exec credential plugin (client.authentication.k8s.io/v1). */
struct kube_exec {
	char *command;
	char **args;               /* NULL-terminated */
	char **env;                /* NULL-terminated "NAME=value" */
	char *api_version;
	int provide_cluster_info;
};

/* Where the server is and how to talk to it.  All strings owned; free with
 * kube_config_free. */
struct kube_config {
	char *source;              /* "in-cluster" or the kubeconfig path, for messages */
	char *server;              /* https://host:port, no trailing '/' */
	char *namespace;           /* context or service-account namespace; "default" */
	char *ca_file;             /* PEM bundle path, or NULL for the system store */
	char *ca_pem;              /* CA bundle as PEM bytes (from *-data), or NULL */
	int insecure_skip_tls_verify;
	char *client_cert_file, *client_key_file;
	char *client_cert_pem, *client_key_pem;   /* decoded *-data; secret */
	char *token;               /* static bearer token; secret */
	char *token_file;          /* re-read every minute and after a 401 */
	struct kube_exec *exec;
	int in_cluster;
};

void kube_config_free(struct kube_config *c);

/* In-cluster config from KUBERNETES_SERVICE_HOST/PORT (passed in so tests
 * need not set the environment) and the service-account directory.
 * ERR_NOTFOUND when host or port is empty (not in a cluster). */
int kube_config_incluster(const char *host, const char *port, const char *sa_dir,
    struct kube_config **out, struct err *e);

/* Parses kubeconfig files (a colon-separated list, merged the way kubectl
 * does: the first file to define a name or current-context wins).
 * `context` overrides current-context when non-NULL. */
int kube_config_kubeconfig(const char *paths, const char *context, struct kube_config **out,
    struct err *e);

/* The same from one in-memory document; `name` is used in messages and to
 * resolve relative paths (its directory).  Used by the fuzzer. */
int kube_config_parse(const char *name, const char *text, size_t len, const char *context,
    struct kube_config **out, struct err *e);

/* Controller-runtime's order: --kubeconfig (flag, may be NULL), $KUBECONFIG,
 * in-cluster, ~/.kube/config. */
int kube_config_load(const char *flag_path, struct kube_config **out, struct err *e);

/* Checks a config built by code the way kube_config_kubeconfig checks what
 * it reads (kube_client_new calls it): an http(s) server URL without user
 * information, query or fragment; no CA together with
 * insecure_skip_tls_verify (client-go refuses that too); a token that can
 * go into a header.  Messages start with c->source. */
int kube_config_validate(const struct kube_config *c, struct err *e);

/* The server URL as it may appear in a log line or a message, written to
 * buf (size n) and returned: url_for_log (base/url.h) of c->server.  A kubeconfig
 * server with user information, a query or a fragment is refused at load
 * (kube_config_kubeconfig), so this matters for configs built otherwise;
 * use it wherever the server is logged. */
const char *kube_config_server_for_log(const struct kube_config *c, char *buf, size_t n);

/* 0 when token can go into an Authorization header; -1 (ERR_INVALID) when
 * it holds a control character (a byte below 0x20, or 0x7f), which would
 * let whoever wrote it add request headers of their own.  The message
 * starts with `where` (the file, key or plugin it came from) and never
 * quotes the token. */
int kube_token_check(const char *token, const char *where, struct err *e);

/* Reads a bearer token file as client-go does (surrounding whitespace
 * trimmed) and checks it: ERR_LIMIT above 1 MiB, ERR_AUTH when empty or
 * when kube_token_check refuses it; messages name the file.  *out is a
 * secret (free with explicit wiping). */
int kube_read_token_file(const char *path, char **out, struct err *e);

/* ------------------------------------------------------------------ client */

/* What a kind is served at. */
struct kube_resource {
	const char *group;         /* "" for the core group */
	const char *version;
	const char *resource;      /* plural, lower case: "stacks" */
	const char *kind;          /* "Stack" */
	int namespaced;
};

struct kube_client;

/* The client borrows nothing: cfg is consumed (owned by the client from
 * then on, also on failure).  NULL with e set when kube_config_validate
 * refuses cfg.  With TLS verification off it logs one warning naming the
 * server. */
struct kube_client *kube_client_new(struct kube_config *cfg, struct err *e);
void kube_client_free(struct kube_client *c);
const struct kube_config *kube_client_config(const struct kube_client *c);

/* Request timeout for non-watch requests, default 60 s. */
void kube_client_set_timeout_ms(struct kube_client *c, long ms);
/* Attempts for a retryable failure (429, 5xx...), default 5. */
void kube_client_set_retries(struct kube_client *c, int retries);

/* Overrides the timeout and retry count for requests made by the calling
 * thread (timeout_ms <= 0 or retries < 0 restore the client's own), for
 * loops with their own deadline such as leader election. */
void kube_request_limits(long timeout_ms, int retries);

/* Requests made by the calling thread fail with ERR_CANCELED once *flag
 * becomes non-zero: one under way is aborted (http.h's cancel flag, polled
 * about every 100 ms), none is retried, and none is sent while it is set.
 * NULL clears.  Informers use it so that stopping one never waits out a
 * transfer or a retry loop. */
void kube_request_cancel_on(atomic_int *flag);

/* A parsed API error (a Status object). */
struct kube_status {
	long code;
	char reason[64];
	char message[512];
};

/* Fills st from a Status body; falls back to the HTTP status and text when
 * the body is not a Status.  Returns 0 when body was a Status, -1 if not. */
int kube_status_parse(const char *body, size_t len, long http_status, struct kube_status *st);

/* Turns a non-2xx reply into an error: ERR_NOTFOUND (404), ERR_AUTH
 * (401/403), ERR_CONFLICT (409), ERR_HTTP otherwise; e->http_status set;
 * the message is "<what>: <code> <reason>: <message>". */
int kube_status_error(struct err *e, const char *what, const struct kube_status *st);

/* Builds "/api/v1/namespaces/ns/secrets/name/status" (parts may be NULL).
 * Returns a malloc'd path (caller frees). */
char *kube_path(const struct kube_resource *r, const char *ns, const char *name,
    const char *subresource);

/* A raw request; path starts with '/' and may carry a query.  On 2xx
 * returns 0 with *status and *body (malloc'd, caller frees; may be NULL);
 * on an API error -1 with e filled from the Status and *status set. */
int kube_request(struct kube_client *c, const char *method, const char *path,
    const char *content_type, const char *body, long *status, char **resp_body, struct err *e);

enum kube_patch_type {
	KUBE_PATCH_MERGE,          /* application/merge-patch+json */
	KUBE_PATCH_JSON,           /* application/json-patch+json */
	KUBE_PATCH_APPLY,          /* application/apply-patch+yaml (server-side apply) */
};

/* List options; every field optional. */
struct kube_list_opts {
	const char *label_selector;
	const char *field_selector;
	long limit;                /* 0 = server default */
	const char *continue_token;
	const char *resource_version;
};

cJSON *kube_get(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *subresource, struct err *e);
/* One page; follow metadata.continue for more. */
cJSON *kube_list(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const struct kube_list_opts *o, struct err *e);
cJSON *kube_create(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const cJSON *obj, struct err *e);
/* PUT; obj must carry metadata.resourceVersion (409 if stale).
 * subresource is NULL or "status". */
cJSON *kube_update(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const cJSON *obj, const char *subresource, struct err *e);
/*
 * Read-modify-write with optimistic concurrency: GETs the object (or its
 * subresource), lets mutate change it in place, and PUTs it with the
 * resourceVersion read; on 409 Conflict it starts again, up to `attempts`
 * times (client-go's retry.RetryOnConflict).  mutate returns 1 to write, 0
 * when nothing needs to change (no request is made), -1 to abort with e
 * set.  Returns the written (or unchanged) object, caller frees.
 */
typedef int (*kube_mutate_fn)(void *ud, cJSON *obj, struct err *e);
cJSON *kube_modify(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *subresource, int attempts, kube_mutate_fn mutate, void *ud,
    struct err *e);
/* field_manager is required for APPLY; force only applies to APPLY. */
cJSON *kube_patch(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *subresource, enum kube_patch_type type, const char *patch,
    const char *field_manager, int force, struct err *e);
/* resource_version (optional) becomes a precondition. A 404 is an error. */
int kube_delete(struct kube_client *c, const struct kube_resource *r, const char *ns,
    const char *name, const char *resource_version, struct err *e);

/* 1 when group/version serves the resource, 0 when not (404 or absent from
 * the discovery document), -1 on error. */
int kube_resource_served(struct kube_client *c, const struct kube_resource *r, struct err *e);

/* ------------------------------------------------------------------ watch */

/* Splits a byte stream into '\n'-terminated lines however the bytes are cut
 * into chunks.  Lines longer than max_line fail with ERR_LIMIT. */
struct kube_lines {
	char *buf;
	size_t len, cap, max_line;
};

typedef int (*kube_line_fn)(void *ud, char *line, size_t len, struct err *e);

void kube_lines_init(struct kube_lines *l, size_t max_line);
/* Calls fn for each complete line (without the '\n'; empty lines skipped).
 * A -1 from fn stops and is returned. */
int kube_lines_feed(struct kube_lines *l, const char *data, size_t n, kube_line_fn fn, void *ud,
    struct err *e);
void kube_lines_free(struct kube_lines *l);

enum kube_event_type {
	KUBE_ADDED, KUBE_MODIFIED, KUBE_DELETED, KUBE_BOOKMARK, KUBE_ERROR,
};

struct kube_watch_event {
	enum kube_event_type type;
	cJSON *object;             /* owned; kube_watch_event_clear frees */
	const char *resource_version;  /* points into object */
	struct kube_status status; /* for KUBE_ERROR */
};

/* Decodes one line.  ERR_INVALID for anything that is not an event. */
int kube_watch_event_parse(const char *line, size_t len, struct kube_watch_event *ev,
    struct err *e);
void kube_watch_event_clear(struct kube_watch_event *ev);

/* Removes metadata.managedFields and the kubectl last-applied annotation,
 * which a controller never reads and which can be most of an object. */
void kube_strip_object(cJSON *obj);

/* ------------------------------------------------------------------ backoff */

struct kube_backoff {
	long initial_ms, max_ms;
	double factor, jitter;     /* wait = d + rand*jitter*d */
	long current_ms;
	unsigned int seed;
};

void kube_backoff_init(struct kube_backoff *b, long initial_ms, long max_ms, double factor,
    double jitter);
/* The next wait; grows by factor up to max. */
long kube_backoff_next(struct kube_backoff *b);
void kube_backoff_reset(struct kube_backoff *b);

/* ------------------------------------------------------------------ informer */

struct kube_informer;

enum kube_change { KUBE_CHANGE_ADD, KUBE_CHANGE_UPDATE, KUBE_CHANGE_DELETE };

/* Called from the informer's thread, without the cache lock held.  old is
 * NULL for an add, obj is the last state for a delete.  Both borrowed. */
typedef void (*kube_handler_fn)(void *ud, struct kube_informer *inf, enum kube_change change,
    const cJSON *old, const cJSON *obj);

/* Computes the index values of an object: returns how many were written to
 * out (at most max), each a malloc'd string the informer frees. */
typedef int (*kube_index_fn)(const cJSON *obj, char **out, int max);

struct kube_informer_opts {
	const char *namespace;     /* NULL or "" = all namespaces */
	const char *label_selector;
	long page_size;            /* list limit, default 100 */
	long watch_timeout_s;      /* server-side watch bound; default random 300..600 */
	long backoff_initial_ms, backoff_max_ms;   /* default 800 ms, 30 s */
	/* A watch that receives no byte for this long is ended and resumed from
	 * its resourceVersion: a connection can stall with both TCP ends alive (a
	 * proxy or load balancer in between), and keepalive probes are answered
	 * by the nearest hop.  kube-apiserver sends a BOOKMARK on a quiet watch
	 * about every minute, so the default, 120 s, is two missed bookmarks. */
	long watch_idle_timeout_s;
	/* Lists and watches ask for PartialObjectMetadata (as controller-
	 * runtime's metadata informers do): the cache holds apiVersion
	 * meta.k8s.io/v1, kind PartialObjectMetadata and metadata only, so a
	 * Secret's data is never received.  Read the object with a GET. */
	int metadata_only;
	/* Pages one list may take before it counts as failed (a continue chain
	 * that never ends); default 10,000.  A page is asked for with limit
	 * page_size and its reply may not exceed 16 MiB: a larger one is asked
	 * for again with half the limit, down to one object, and beyond that the
	 * list fails (ERR_LIMIT, "does the server ignore limit?").  A failed
	 * list is retried after the backoff. */
	long max_list_pages;
};

/* Neither c nor r is copied: both must outlive the informer. */
struct kube_informer *kube_informer_new(struct kube_client *c, const struct kube_resource *r,
    const struct kube_informer_opts *o);
/* At most 8 handlers, added before start: -1 beyond (or after start). */
int kube_informer_add_handler(struct kube_informer *inf, kube_handler_fn fn, void *ud);
/* Index functions must be added before start. */
int kube_informer_add_index(struct kube_informer *inf, const char *name, kube_index_fn fn);
int kube_informer_start(struct kube_informer *inf, struct err *e);
/* Waits until the first list is in the cache; 0 ok, -1 on timeout/stop. */
int kube_informer_wait_synced(struct kube_informer *inf, long timeout_ms);
int kube_informer_synced(struct kube_informer *inf);
/* Stops the thread (aborting an open watch) and joins it. */
void kube_informer_stop(struct kube_informer *inf);
/* Only asks it to stop (an open watch notices within about a second), so
 * several informers can wind down in parallel before kube_informer_stop. */
void kube_informer_request_stop(struct kube_informer *inf);
void kube_informer_free(struct kube_informer *inf);

const struct kube_resource *kube_informer_resource(const struct kube_informer *inf);
/* A copy of a cached object (caller frees), or NULL. */
cJSON *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name);
size_t kube_informer_count(struct kube_informer *inf);
/* Calls fn(ud, "ns/name") for each cached key whose index `name` has value. */
int kube_informer_by_index(struct kube_informer *inf, const char *index, const char *value,
    void (*fn)(void *ud, const char *key), void *ud);
/* Calls fn for each cached object with its key and resourceVersion, under
 * the cache lock (fn must not call back into the informer). */
void kube_informer_each(struct kube_informer *inf,
    void (*fn)(void *ud, const char *key, const char *rv), void *ud);
/* Counters for logs and metrics. */
struct kube_informer_stats {
	uint64_t lists, watches, events, relists_410, errors;
};
void kube_informer_stats(struct kube_informer *inf, struct kube_informer_stats *out);

/* "ns/name" or "name" for a cluster-scoped object; malloc'd. */
char *kube_object_key(const cJSON *obj);
/* Convenience readers; borrowed strings or NULL. */
const char *kube_obj_str(const cJSON *obj, const char *path);   /* "metadata.name" */

/* ------------------------------------------------------------------ queue */

struct kube_queue;

struct kube_queue_opts {
	long base_delay_ms;        /* per-key backoff start, default 5 ms */
	long max_delay_ms;         /* per-key backoff cap, default 1000 s */
	double qps;                /* overall bucket rate, default 10 */
	int burst;                 /* overall bucket size, default 100 */
	const char *name;          /* the workqueue_* metrics' name and controller
	                            * labels (copied); NULL: "default" */
};

struct kube_queue *kube_queue_new(const struct kube_queue_opts *o);
void kube_queue_free(struct kube_queue *q);
/* Queued once however often added; re-run after done if added meanwhile. */
void kube_queue_add(struct kube_queue *q, const char *key);
/* Any delay is fine: now + delay saturates instead of wrapping around. */
void kube_queue_add_after(struct kube_queue *q, const char *key, long delay_ms);
/* Delay from max(per-key exponential backoff, overall token bucket); no
 * delay exceeds a year. */
void kube_queue_add_rate_limited(struct kube_queue *q, const char *key);
/* The same with this key's backoff capped at max_ms (e.g. a Stack's
 * retryMaxBackoffDurationSeconds; <= 0: the queue's max_delay_ms).  The
 * overall bucket still applies. */
void kube_queue_add_rate_limited_max(struct kube_queue *q, const char *key, long max_ms);
/* Clears the key's failure count. */
void kube_queue_forget(struct kube_queue *q, const char *key);
int kube_queue_requeues(struct kube_queue *q, const char *key);
/* Blocks for the next key (malloc'd, caller frees and must call done), or
 * NULL once shut down. */
char *kube_queue_get(struct kube_queue *q);
void kube_queue_done(struct kube_queue *q, const char *key);
size_t kube_queue_len(struct kube_queue *q);
const char *kube_queue_name(const struct kube_queue *q);
/* Writes the scrape-time workqueue_* gauges (depth, the age of running
 * work) in the Prometheus text format; the counters and histograms are in
 * the default metrics registry (base/metrics.h). */
void kube_queue_write_metrics(struct kube_queue *q, FILE *out);
/* Stops handing out keys; get returns NULL. */
void kube_queue_shutdown(struct kube_queue *q);
/* Waits up to timeout_ms for keys being processed to be done; 0 when all
 * were, -1 on timeout. */
int kube_queue_drain(struct kube_queue *q, long timeout_ms);
/* The rate limiter's next delay for key; counts as one failure (this is
 * what add_rate_limited uses). */
long kube_queue_when(struct kube_queue *q, const char *key);
/* kube_queue_when with the key's backoff capped at max_ms. */
long kube_queue_when_max(struct kube_queue *q, const char *key, long max_ms);

/* ------------------------------------------------------------------ workers */

/*
 * The seam between the runtime and a controller's logic: the Stack
 * reconciler (src/stack/) implements this.  reconcile is called by one
 * worker for one key ("namespace/name"), never for the same key on two
 * workers at once.  It returns 0 when done (set *requeue_after_ms > 0 to be
 * called again later, e.g. for a resync or a drift check) or -1 with e set
 * to be retried with per-key backoff.
 *
 * interrupt (optional, may be NULL) asks every running reconcile to give
 * up now (for pulumi: pl_interrupt, so the CLI cancels cleanly and leaves no
 * lock).  It may be called from any thread, at any time, more than once,
 * also when nothing runs; it must not block.  The workers call it when the
 * grace period of kube_workers_stop runs out; kube_workers_interrupt calls
 * it at once (a lost Lease: another replica may start the same work).
 */
struct kube_reconciler {
	int (*reconcile)(void *ud, const char *key, long *requeue_after_ms, struct err *e);
	void (*interrupt)(void *ud);
	void *ud;
};

struct kube_workers;

/* Starts n threads taking keys from q.  q and r must outlive the workers
 * (until kube_workers_free). */
struct kube_workers *kube_workers_start(struct kube_queue *q, int n,
    const struct kube_reconciler *r, struct err *e);
/*
 * Shuts the queue down and waits up to grace_ms for running reconciles to
 * return; then calls r->interrupt (when set) and waits up to cancel_ms
 * more; then joins the threads.  Returns 0 when every thread was joined,
 * -1 when work was still running (nothing joined; the caller should exit
 * without releasing what the work uses, the Lease included).  Frees
 * nothing: kube_workers_counts stays valid until kube_workers_free.  A
 * second call after 0 returns 0 at once; after -1 it waits again.
 */
int kube_workers_stop(struct kube_workers *w, long grace_ms, long cancel_ms);
/* Calls r->interrupt now (no-op without one, or for NULL).  Thread-safe;
 * the workers keep taking keys (stop them with kube_workers_stop). */
void kube_workers_interrupt(struct kube_workers *w);
/* Frees w after kube_workers_stop returned 0, once no other thread reads
 * it (stop the metrics server first).  Does nothing when threads still
 * run (stop returned -1): they use w until the process exits.  NULL ok. */
void kube_workers_free(struct kube_workers *w);
/* Keys reconciled so far, and how many failed; any thread, any time
 * between start and free (w may be NULL: zeros). */
void kube_workers_counts(struct kube_workers *w, uint64_t *done, uint64_t *failed);
/* Writes the scrape-time controller_runtime_* gauges (configured and busy
 * workers); the reconcile counters and histogram are in the default
 * metrics registry.  NULL writes nothing. */
void kube_workers_write_metrics(struct kube_workers *w, FILE *out);

/* ------------------------------------------------------------------ leader */

struct kube_leader_opts {
	const char *namespace;
	const char *name;          /* Lease name */
	const char *identity;      /* default hostname_<random> */
	long lease_ms, renew_ms, retry_ms;  /* default 15 s / 10 s / 2 s */
	/* on_started and on_new_leader run on a callback thread of the
	 * elector's own, one at a time, never on the thread that renews: they
	 * may make API calls or block without costing a renewal (a later
	 * new-leader identity replaces one not yet reported).  on_stopped
	 * (leadership lost: the renew deadline passed, counted from the start of
	 * the last successful renewal; not called on release) runs on the
	 * election thread at once, possibly while on_started still runs: stop
	 * the work there (kube_workers_interrupt), quickly.  An on_started not
	 * yet begun when the Lease is lost is dropped. */
	void (*on_started)(void *ud);
	void (*on_stopped)(void *ud);
	void (*on_new_leader)(void *ud, const char *identity);
	void *ud;
};

struct kube_leader;

/* Validates lease > renew > 1.2 * retry > 0. */
struct kube_leader *kube_leader_new(struct kube_client *c, const struct kube_leader_opts *o,
    struct err *e);
int kube_leader_start(struct kube_leader *l, struct err *e);
int kube_leader_is_leader(struct kube_leader *l);
const char *kube_leader_identity(const struct kube_leader *l);
/* Stops the loop and, if leading, releases the Lease (holder "", 1 s);
 * then waits for a callback still running to return (a pending one is
 * dropped). */
void kube_leader_stop(struct kube_leader *l);
void kube_leader_free(struct kube_leader *l);

/* ------------------------------------------------------------------ events */

struct kube_recorder;

/* component: reportingComponent/source.component; instance: host. */
struct kube_recorder *kube_recorder_new(struct kube_client *c, const char *component,
    const char *instance);
void kube_recorder_free(struct kube_recorder *r);
/* Records an Event about obj (needs apiVersion, kind, metadata); a repeat of
 * the same type/reason/message for the same object bumps count instead of
 * creating a new Event.  type is "Normal" or "Warning". */
int kube_event(struct kube_recorder *r, const cJSON *obj, const char *type, const char *reason,
    const char *message, struct err *e);

/* ------------------------------------------------------------------ probes */

/*
 * A small HTTP server (libmicrohttpd) for the kubelet and Prometheus:
 * GET /healthz (200 while the process runs), /readyz (200 once ready()
 * says so, else 503) and /metrics (text exposition written by metrics()).
 * addr is "host:port" or ":port" (all interfaces); port 0 picks a free
 * one.  Callbacks run on the server's thread.
 */
struct kube_serve;
typedef int (*kube_ready_fn)(void *ud);
typedef void (*kube_metrics_fn)(void *ud, FILE *out);

struct kube_serve *kube_serve_start(const char *addr, kube_ready_fn ready,
    kube_metrics_fn metrics, void *ud, struct err *e);
int kube_serve_port(const struct kube_serve *s);
void kube_serve_stop(struct kube_serve *s);

/* ------------------------------------------------------------------ misc */

/* RFC 3339 with microseconds ("MicroTime"): 2026-11-30T10:00:00.123456Z. */
void kube_format_microtime(char *buf, size_t n, int64_t unix_us);
/* Parses an RFC 3339 time (what metav1.Time and MicroTime marshal to):
 * 2026-11-30T10:00:00Z, with optional fractional seconds and a Z or
 * +hh:mm / -hh:mm offset, into microseconds since the epoch.  -1 for
 * anything else (an invalid date, no offset, trailing bytes). */
int kube_parse_time_us(const char *s, int64_t *out);
int64_t kube_now_us(void);

/* The entry of obj's status.conditions whose type is type (borrowed from
 * obj); NULL when obj has none.  Any kind: a Stack, a Flux source, a Job,
 * a pod. */
const cJSON *kube_condition(const cJSON *obj, const char *type);
/* 1 when one of obj's metadata.ownerReferences names an object of kind with
 * this uid (the uid is what makes it that object and not a namesake). */
int kube_owned_by(const cJSON *obj, const char *kind, const char *uid);
/* The decoded value of a Secret's data[key]: a malloc'd buffer, NUL-
 * terminated (the NUL not counted in *len), that the caller wipes
 * (secret_wipe) and frees.  NULL with e: ERR_NOTFOUND when the Secret has
 * no such key (or it is not a string), ERR_INVALID when it is not base64,
 * ERR_NOMEM.  The value may hold NUL bytes: a caller that wants text
 * checks strlen against *len. */
unsigned char *kube_secret_value(const cJSON *secret, const char *key, size_t *len, struct err *e);

#endif
