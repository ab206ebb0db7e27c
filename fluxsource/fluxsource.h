/*
 * fluxsource.h - Flux source artifacts: from a source object's
 * status.artifact {url, digest, revision} to a verified, unpacked tree in the
 * artifact store.  At the end, notify.c: Stack events forwarded to
 * notification-controller, the other half of working with Flux.
 *
 * The store is a directory:
 *
 *     STORE/artifacts/<algo>/<hex>/              one unpacked artifact, read-only by convention
 *     STORE/artifacts/<algo>/.<hex>.lock         a lock file that serialises filling it
 *     STORE/artifacts/<algo>/.<hex>.tmp-XXXXXX   staging of a fill in progress
 *
 * Entries are keyed by the digest of the compressed tarball (what Flux
 * publishes; for an OCI layer, the layer digest), so every Stack using one
 * revision shares one download and one tree, and an entry that exists is
 * complete: it is only ever created by an atomic rename of a verified
 * staging directory.  Flux artifacts (flux_store_get) and OCI layers
 * (oci_store_pull in oci/oci.h) share the layout, the lock and the staging
 * rules below.
 *
 * One streaming pass does the work: the HTTP body is pulled through a
 * digest context into the safe extractor; nothing is written to disk but the
 * extracted files, and the staging directory is renamed into place only when
 * the digest matched.  Concurrent requests for one digest (threads or
 * processes) serialise on the lock file; the second finds the entry present
 * and uses it without touching the network.
 *
 * Bounds.  A download is limited in size (FLUX_DEFAULT_MAX_ARTIFACT_BYTES
 * unless the caller says otherwise), in the bytes it may carry after the
 * archive's end (FLUX_MAX_TRAILING_BYTES), and in time: timeout_ms covers
 * the lock wait, every attempt and the backoff between them.  A cancel flag
 * ends any of these within about 100 ms, and the staging directory goes
 * with it.  Staging that a killed process left behind is removed by
 * flux_store_sweep, and by the next fill of the same entry.
 */
#ifndef PC_FLUXSOURCE_H
#define PC_FLUXSOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/err.h"
#include "base/http.h"
#include "base/untar.h"

/* Default limit on one artifact's download (the compressed tarball):
 * `fetch --max-artifact-size`, `run --max-artifact-size`. */
#define FLUX_DEFAULT_MAX_ARTIFACT_BYTES (512LL << 20)

/* Bytes accepted after the tar end-of-archive marker (record padding, the
 * gzip trailer); anything longer is refused rather than hashed forever. */
#define FLUX_MAX_TRAILING_BYTES (1LL << 20)

/* Default budget of one fetch: lock wait, attempts and backoff (5 min). */
#define FLUX_DEFAULT_TIMEOUT_MS 300000L

/* What a Flux source reports in status.artifact.  Strings are borrowed. */
struct flux_artifact {
	const char *url;
	const char *digest;    /* "sha256:<hex>", or a bare legacy hex checksum */
	const char *revision;  /* informational: "main@sha1:...", "v1@sha256:..." */
};

struct flux_fetch_opts {
	/* http.max_bytes is the download limit (default
	 * FLUX_DEFAULT_MAX_ARTIFACT_BYTES; -1 = none).  http.timeout_ms caps one
	 * attempt; http.cancel is set from `cancel` below. */
	struct http_opts http;
	struct untar_limits limits;
	/* Replaces the host[:port] of artifact URLs, as kustomize-controller's
	 * SOURCE_CONTROLLER_LOCALHOST does, for running outside the cluster.
	 * NULL or "" leaves URLs alone. */
	const char *host_override;
	/* The whole call's budget: waiting for the store lock, every attempt
	 * and the backoff between them (default FLUX_DEFAULT_TIMEOUT_MS;
	 * 0 = none).  Past it: ERR_TIMEOUT. */
	long timeout_ms;
	/* When set, a non-zero value (written by another thread, or by a
	 * signal handler into a volatile sig_atomic_t-sized int) cancels the
	 * lock wait or the download: ERR_CANCELED, staging removed. */
	const volatile int *cancel;
	/* When set, every byte received from the server (all attempts) is
	 * added to it, for the controller's download metrics.  Owned by the
	 * caller; one call at a time. */
	long long *received;
};

/* Defaults: http_opts_default with the limits above, untar_limits_default,
 * and the SOURCE_CONTROLLER_LOCALHOST environment variable as host_override. */
void flux_fetch_opts_default(struct flux_fetch_opts *o);

/*
 * Returns a malloc'd copy of url with its host[:port] replaced by
 * host_override (which may carry a port, and may be "http(s)://host:port"
 * to change the scheme too).  The caller frees.  NULL with e set on a URL
 * that cannot be parsed.
 */
char *flux_rewrite_url(const char *url, const char *host_override, struct err *e);

/*
 * Downloads url, verifies it against digest and unpacks it to dest, which
 * must not exist.  On any failure (cancellation included) nothing is left
 * at dest and no staging directory remains; the message names the URL
 * (printed without userinfo or query) and what went wrong (HTTP status,
 * digest mismatch, the archive entry refused, a limit).  A connection that
 * breaks during the body is retried from the start, up to http.retries
 * times, within timeout_ms.
 */
int flux_fetch(const struct flux_fetch_opts *o, const char *url, const char *digest,
    const char *dest, struct err *e);

/*
 * Makes sure the artifact is in the store under `store_root` and writes the
 * path of its tree into path_out.  *cached (may be NULL) says whether it
 * was there already (no network access at all in that case).  Waits for
 * another filler of the same digest within o->timeout_ms (ERR_TIMEOUT
 * after it, naming the lock) and o->cancel (ERR_CANCELED).
 */
int flux_store_get(const char *store_root, const struct flux_artifact *a,
    const struct flux_fetch_opts *o, char *path_out, size_t path_len, int *cached,
    struct err *e);

/*
 * Removes staging directories (STORE/artifacts/<algo>/.<hex>.tmp-*) that
 * nobody is filling: their entry's lock is free, so the process that made
 * them is gone (killed, crashed).  Staging of a fill in progress is left
 * alone.  The controller calls it at start; it is cheap on a clean store.
 * Returns how many were removed, or -1 with e set; a missing store is 0.
 */
int flux_store_sweep(const char *store_root, struct err *e);

/* ---- the store's primitives, shared with the OCI store (oci/oci.h) ---- */

/* One entry of the store, locked while it is filled. */
struct flux_store_entry {
	char dir[4096];     /* STORE/artifacts/<algo>/<hex> */
	char lock[4096];    /* STORE/artifacts/<algo>/.<hex>.lock */
	int fd;             /* the lock file while held, else -1 */
};

/* Fills the paths of digest's entry (no file is touched); ERR_INVALID on a
 * malformed digest or a path too long. */
int flux_store_entry_init(const char *store_root, const char *digest, struct flux_store_entry *en,
    struct err *e);

/*
 * Takes the entry's lock, waiting until the monotonic deadline_ms
 * (clock_mono_ms; 0 = no limit) or *cancel (may be NULL), then removes
 * staging a dead filler left for this entry.  ERR_TIMEOUT or ERR_CANCELED
 * when the wait ended first.  The caller checks whether the entry exists
 * now (someone may have filled it meanwhile) before filling it through
 * fs_staging_dir(en->dir) and a rename.
 */
int flux_store_entry_lock(struct flux_store_entry *en, int64_t deadline_ms,
    const volatile int *cancel, struct err *e);

/* Releases the lock; with `filled` (the entry now exists) the lock file
 * is removed too, which is safe because every waiter re-checks the entry. */
void flux_store_entry_unlock(struct flux_store_entry *en, int filled);

/* ---- notifications: events to Flux's notification-controller (notify.c) ---- */

/*
 * A forwarder of Kubernetes-style events to notification-controller's event
 * endpoint (`run --events-addr`), in the JSON of fluxcd/pkg's
 * apis/event/v1beta1 Event, so Alerts and Providers route Stack events like
 * those of any Flux object (docs/notifications.md).
 *
 * A reconcile never waits for it: flux_notify_send builds the body and puts
 * it on a bounded queue (or drops it when the queue is full); one sender
 * thread POSTs each body, retrying a connection error or a 5xx (but 501)
 * with backoff up to max_attempts, never a 429 (the server's "duplicate
 * event") nor any other 4xx.  Every event not delivered is counted in
 * pulumi_controller_notifications_dropped_total{reason} (queue_full,
 * refused, retries_exhausted, shutdown) and in flux_notify_stats.
 */

/* The server's limits (notification-controller, fluxcd/pkg event type). */
#define FLUX_NOTIFY_MAX_MESSAGE 39000        /* message, in characters */
#define FLUX_NOTIFY_DEFAULT_QUEUE 1024
/* Five attempts, 1 s doubling to 30 s: the retrying client Flux's own
 * recorder posts with (go-retryablehttp's defaults). */
#define FLUX_NOTIFY_DEFAULT_ATTEMPTS 5
#define FLUX_NOTIFY_DEFAULT_TIMEOUT_MS 5000L
/* How long flux_notify_stop waits for queued events at shutdown. */
#define FLUX_NOTIFY_DEFAULT_DRAIN_MS 5000L

/* One event.  Strings are borrowed for the call; revision may be NULL. */
struct flux_notify_event {
	const char *api_version, *kind, *name, *namespace, *uid, *resource_version;
	const char *type;          /* Kubernetes event type: "Normal" or "Warning" */
	const char *reason, *message;
	const char *revision;      /* sent as metadata "<api group>/revision" */
};

struct flux_notify_opts {
	const char *url;           /* the event endpoint, http(s)://host[:port]/path */
	const char *controller;    /* reportingController (default "pulumi-controller") */
	const char *instance;      /* reportingInstance (default: the hostname) */
	size_t queue_size;         /* events waiting at most (default FLUX_NOTIFY_DEFAULT_QUEUE) */
	int max_attempts;          /* POSTs of one event, the first included */
	long timeout_ms;           /* one POST, connection included */
	long backoff_initial_ms;   /* wait before the first retry, doubled each time */
	long backoff_max_ms;
};

void flux_notify_opts_default(struct flux_notify_opts *o);

/* 0 when url is an absolute http:// or https:// URL with a host; else -1
 * with e naming what is wrong (the caller prefixes its flag). */
int flux_notify_check_url(const char *url, struct err *e);

/* What a POST's answer means: status is the HTTP status, 0 when no
 * response came (connection refused, reset, timed out). */
enum flux_notify_outcome { FLUX_NOTIFY_DELIVERED, FLUX_NOTIFY_RETRY, FLUX_NOTIFY_REFUSED };
enum flux_notify_outcome flux_notify_classify(long status);

/* The request body for ev, stamped `when` (RFC 3339, seconds).  Severity
 * is "error" for a Warning, else "info"; the message is cut to
 * FLUX_NOTIFY_MAX_MESSAGE characters (never inside a UTF-8 sequence).
 * NULL when kind, name, namespace or reason is missing (Flux's recorder
 * sends no such event either).  Malloc'd: the caller frees. */
char *flux_notify_event_json(const struct flux_notify_event *ev, const char *controller,
    const char *instance, time_t when);

struct flux_notify;

/* Starts the sender thread.  Strings of o are copied.  NULL with e set on
 * a bad URL or when the thread cannot start.  flux_notify_stop frees it. */
struct flux_notify *flux_notify_start(const struct flux_notify_opts *o, struct err *e);

/* Queues ev (never blocks on the network).  0 when queued, -1 when
 * dropped (queue full, or ev incomplete).  n may be NULL: nothing. */
int flux_notify_send(struct flux_notify *n, const struct flux_notify_event *ev);

/* flux_notify_send for an event about a Kubernetes object (apiVersion,
 * kind and metadata read from obj). */
struct cJSON;
int flux_notify_object(struct flux_notify *n, const struct cJSON *obj, const char *type,
    const char *reason, const char *message, const char *revision);

struct flux_notify_stats {
	unsigned long long queued, delivered, retries;
	unsigned long long dropped_queue_full, dropped_refused, dropped_retries_exhausted,
	    dropped_shutdown;
};
void flux_notify_get_stats(struct flux_notify *n, struct flux_notify_stats *st);

/* Stops taking events, sends what is queued for at most drain_ms (a POST
 * in flight past it is aborted), counts the rest as dropped (shutdown),
 * joins the thread and frees n.  NULL is fine. */
void flux_notify_stop(struct flux_notify *n, long drain_ms);

/* The process's forwarder, which stack_event uses (NULL: none).  Set it
 * before the workers start and clear it after they stopped. */
void flux_notify_set_default(struct flux_notify *n);
struct flux_notify *flux_notify_default(void);

#endif
