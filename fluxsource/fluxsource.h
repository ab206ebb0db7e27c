/*
 * fluxsource.h - Flux source artifacts: from a source object's
 * status.artifact {url, digest, revision} to a verified, unpacked tree in the
 * artifact store.
 *
 * The store is a directory:
 *
 *     STORE/artifacts/<algo>/<hex>/      one unpacked artifact, read-only by convention
 *     STORE/artifacts/<algo>/.<hex>.lock a lock file that serialises its download
 *
 * Entries are keyed by the digest of the compressed tarball (what Flux
 * publishes), so every Stack using one revision shares one download and one
 * tree, and an entry that exists is complete: it is only ever created by an
 * atomic rename of a verified staging directory.
 *
 * One streaming pass does the work: the HTTP body is pulled through a
 * digest context into the safe extractor; nothing is written to disk but the
 * extracted files, and the staging directory is renamed into place only when
 * the digest matched.  Concurrent requests for one digest (threads or
 * processes) serialise on the lock file; the second finds the entry present
 * and uses it without touching the network.
 */
#ifndef PC_FLUXSOURCE_H
#define PC_FLUXSOURCE_H

#include <stddef.h>

#include "base/err.h"
#include "base/http.h"
#include "base/untar.h"

/* What a Flux source reports in status.artifact.  Strings are borrowed. */
struct flux_artifact {
	const char *url;
	const char *digest;    /* "sha256:<hex>", or a bare legacy hex checksum */
	const char *revision;  /* informational: "main@sha1:...", "v1@sha256:..." */
};

struct flux_fetch_opts {
	struct http_opts http;       /* http.max_bytes = max download size */
	struct untar_limits limits;
	/* Replaces the host[:port] of artifact URLs, as kustomize-controller's
	 * SOURCE_CONTROLLER_LOCALHOST does, for running outside the cluster.
	 * NULL or "" leaves URLs alone. */
	const char *host_override;
};

/* Defaults: http_opts_default, untar_limits_default, and the
 * SOURCE_CONTROLLER_LOCALHOST environment variable as host_override. */
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
 * must not exist.  On any failure nothing is left at dest and no staging
 * directory remains; the message names the URL and what went wrong
 * (HTTP status, digest mismatch, the archive entry refused, a limit).
 * A connection that breaks during the body is retried from the start, up to
 * http.retries times.
 */
int flux_fetch(const struct flux_fetch_opts *o, const char *url, const char *digest,
    const char *dest, struct err *e);

/*
 * Makes sure the artifact is in the store under `store_root` and writes the
 * path of its tree into path_out.  *cached (may be NULL) says whether it
 * was there already (no network access at all in that case).
 */
int flux_store_get(const char *store_root, const struct flux_artifact *a,
    const struct flux_fetch_opts *o, char *path_out, size_t path_len, int *cached,
    struct err *e);

#endif
