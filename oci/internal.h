/*
 * internal.h - private helpers shared by the files of oci/ (the client's
 * requests, descriptors and annotations, the uploads sign.c reuses).  Not
 * part of the module's interface: other modules include oci/oci.h only.
 */
#ifndef PC_OCI_INTERNAL_H
#define PC_OCI_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/http.h"
#include "oci/oci.h"

/* asprintf that returns -1 and leaves *out NULL on failure. */
int oci_asprintf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 when a bearer token can go into an Authorization header as it is:
 * visible ASCII only.  A token with CR/LF would add headers of its
 * sender's choosing, so such tokens are refused, never cleaned up. */
int oci_token_usable(const char *token);

/* "repository:<repo>:<actions>", malloc'd (NULL on no memory). */
char *oci_scope(const char *repo, const char *actions);

/* "https://host:port" of the client, and its registry "host:port". */
const char *oci_client_base(const struct oci_client *c);
const char *oci_client_registry(const struct oci_client *c);

/* 1 when url's "scheme://authority" is the client's (case-insensitive):
 * only such URLs get the Authorization header. */
int oci_same_origin(const struct oci_client *c, const char *url);
const struct http_opts *oci_client_http(const struct oci_client *c);
void oci_client_progress(struct oci_client *c, const char *what, int64_t done, int64_t total);

/*
 * http_do with the registry's auth: attaches Authorization for `scope` when
 * req->url is on the registry's origin, answers a 401 challenge and retries.
 * opts NULL = the client's.  Returns the final response whatever its status
 * (req->headers is restored before returning).
 */
int oci_request(struct oci_client *c, const char *scope, const struct http_opts *opts,
    struct http_request *req, struct http_response *resp, struct err *e);

/* A GET stream with the same auth handling (one retry after a 401).
 * timeout_ms bounds the whole transfer (0: only the stall timeout). */
struct http_stream *oci_open_stream(struct oci_client *c, const char *scope, const char *url,
    const char *const *extra_headers, long timeout_ms, struct err *e);

/* Fills e from a non-2xx registry response: "<what>: HTTP 404: CODE: msg". */
int oci_status_error(struct err *e, const char *what, const struct http_response *r);
void oci_registry_error_text(const char *body, char *out, size_t outlen);

/* {"mediaType","digest","size"}: a descriptor as manifests and indexes
 * write it (manifest.c).  The caller owns (or hands on) the new object. */
cJSON *oci_descriptor_json(const char *media_type, const char *digest, int64_t size);

/* Frees the keys and values of n annotations and the array itself. */
void oci_annotations_free(struct oci_annotation *a, size_t n);

/* push.c's uploads, for sign.c: a blob from memory unless the registry has
 * it, and a manifest (or index) PUT under a tag or digest with its media
 * type, checking the digest the registry reports.  *digest_out is malloc'd;
 * *subject_ack (may be NULL) is set when the registry answered OCI-Subject
 * (it indexes referrers itself). */
int oci_ensure_blob_mem(struct oci_client *c, const char *scope, const char *repo,
    const char *digest, const void *data, size_t len, const char *what, struct err *e);
int oci_put_manifest(struct oci_client *c, const char *scope, const char *repo, const char *tag,
    const char *media_type, const char *body, char **digest_out, int *subject_ack, struct err *e);

#endif
