/*
 * oci.h - the OCI distribution client: references, registry auth, manifests
 * and indexes, blobs, tags and semver selection, pull into a directory and
 * push of Flux-format artifacts (what `flux push artifact` produces, so
 * Flux's OCIRepository can consume what we push).
 *
 * This module knows nothing about Stacks; the controller and the `pull` /
 * `push` commands compose it.  It sits on src/base (http, digest, untar, fs,
 * log) and libarchive (packing) only.
 *
 * Secrets (passwords, identity tokens, bearer tokens) live only inside
 * struct oci_creds and the client's token cache.  They are never put into an
 * error message or a log line, and an Authorization header is only attached
 * to requests whose host is the registry's own host (a redirect to object
 * storage is followed without it; curl also drops it on cross-host
 * redirects).
 *
 * Conventions: every fallible function returns -1 (or NULL) and fills the
 * caller's struct err; strings in result structs are malloc'd and owned by
 * the struct (freed by its *_free function).
 */
#ifndef PC_OCI_H
#define PC_OCI_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/untar.h"

/* ---- media types ---- */

#define OCI_MT_MANIFEST        "application/vnd.oci.image.manifest.v1+json"
#define OCI_MT_INDEX           "application/vnd.oci.image.index.v1+json"
#define OCI_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define OCI_MT_DOCKER_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define OCI_MT_FLUX_CONFIG     "application/vnd.cncf.flux.config.v1+json"
#define OCI_MT_FLUX_CONTENT    "application/vnd.cncf.flux.content.v1.tar+gzip"
#define OCI_MT_LAYER_TAR       "application/vnd.oci.image.layer.v1.tar"
#define OCI_MT_LAYER_TGZ       "application/vnd.oci.image.layer.v1.tar+gzip"
#define OCI_MT_LAYER_TZST      "application/vnd.oci.image.layer.v1.tar+zstd"
#define OCI_MT_DOCKER_LAYER    "application/vnd.docker.image.rootfs.diff.tar.gzip"

/* Manifests larger than this are refused (distribution-spec: support 4 MB). */
#define OCI_MANIFEST_MAX (4LL << 20)

/* ---- references: oci://host[:port]/path/repo[:tag][@sha256:...] ---- */

struct oci_ref {
	char *registry;    /* API host[:port]; docker.io becomes registry-1.docker.io */
	char *repository;  /* "team/app"; docker.io single names get "library/" */
	char *tag;         /* NULL when absent */
	char *digest;      /* "sha256:<hex>" (normalised) or NULL; it pins the reference */
};

/*
 * Parses a reference with or without the "oci://" prefix.  Errors
 * (ERR_INVALID) quote the reference and say which part is wrong.  Neither a
 * tag nor a digest is required; callers default to "latest".
 */
int oci_ref_parse(const char *text, struct oci_ref *out, struct err *e);
void oci_ref_free(struct oci_ref *r);

/* 1 when t is a tag the distribution spec allows: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}. */
int oci_tag_valid(const char *t);

/* "host/repo[:tag][@digest]" (no scheme), malloc'd; NULL on no memory. */
char *oci_ref_string(const struct oci_ref *r);

/* ---- WWW-Authenticate ---- */

struct oci_challenge {
	char *scheme;      /* "Bearer", "Basic" ... as sent */
	char *realm;       /* may be NULL */
	char *service;
	char *scope;
	char *error;       /* RFC 6750 error=, e.g. "invalid_token" */
};

/* Parses the first challenge of a WWW-Authenticate value (a later Bearer
 * challenge is preferred to an earlier Basic one). */
int oci_challenge_parse(const char *header, struct oci_challenge *out, struct err *e);
void oci_challenge_free(struct oci_challenge *c);

/* ---- credentials ---- */

struct oci_creds {
	char *username;
	char *password;
	char *identity_token;   /* OAuth2 refresh token (docker identitytoken) */
	char *registry_token;   /* bearer token sent as is (docker registrytoken) */
};

void oci_creds_free(struct oci_creds *c);
int oci_creds_empty(const struct oci_creds *c);

/*
 * Looks up credentials for `registry` (host[:port]) in the text of a docker
 * config.json.  Matching keys: "host", "https://host", "http://host/v2/" and
 * so on; for docker.io also "https://index.docker.io/v1/".  credHelpers
 * (per registry) and credsStore (default) name a helper: its name is
 * returned in *helper (malloc'd, caller frees) and *out stays empty; the
 * caller runs it with oci_cred_helper_get.  Nothing found: 0 with both
 * empty.
 */
int oci_docker_config_parse(const char *json, size_t len, const char *registry,
    struct oci_creds *out, char **helper, struct err *e);

/* Runs `docker-credential-<helper> get` with the server URL on stdin. A helper
 * saying "credentials not found" gives 0 with *out empty. */
int oci_cred_helper_get(const char *helper, const char *registry, struct oci_creds *out,
    struct err *e);

/* Reads a config.json file (path NULL: $DOCKER_CONFIG/config.json, else
 * ~/.docker/config.json, and a missing default file is not an error) and
 * resolves helpers. */
int oci_docker_config_load(const char *path, const char *registry, struct oci_creds *out,
    struct err *e);

/* ---- semantic versions and ranges (like Flux's ref.semver) ---- */

struct oci_semver {
	uint64_t major, minor, patch;
	const char *pre;        /* the pre-release (without '-') inside the parsed text; */
	size_t npre;            /* its length, 0 when there is none */
};

/* A tag as Flux's tag parser (fluxcd/pkg/version) reads it: the text has at
 * least two dots, then an optional "v", one to three numbers (each up to
 * 2^64-1, leading zeros allowed), optional -pre (numeric identifiers without
 * leading zeros) and +build, 256 bytes at most.  So "1.26" and "v2" are not
 * versions and "1.2-rc.1" is (1.2.0-rc.1).  out->pre points into text, which
 * must outlive out.  Returns -1 for a string that is not a version. */
int oci_semver_parse(const char *text, struct oci_semver *out);
/* Precedence as Masterminds/semver: build metadata is ignored, a numeric
 * pre-release identifier too large for 64 bits compares as text. */
int oci_semver_cmp(const struct oci_semver *a, const struct oci_semver *b);

struct oci_semver_range;
/* Masterminds/semver v3 syntax and rules, as Flux's ref.semver: ">=1.2.0
 * <2.0.0", "~1.2", "^1", "1.x", "*", "1.2 - 1.4", "a || b", "*-0" (with
 * pre-releases); commas or spaces between comparators mean "and".  At most
 * 512 bytes and 32 alternatives.  The range owns its copy of text. */
struct oci_semver_range *oci_semver_range_parse(const char *text, struct err *e);
int oci_semver_range_match(const struct oci_semver_range *r, const struct oci_semver *v);
void oci_semver_range_free(struct oci_semver_range *r);

/* The highest tag matching the range (the first listed among equal
 * versions), or NULL; returns a pointer into tags. */
const char *oci_semver_select(const struct oci_semver_range *r, char *const *tags, size_t ntags);

/* ---- manifests ---- */

enum oci_manifest_kind { OCI_KIND_MANIFEST, OCI_KIND_INDEX };

struct oci_descriptor {
	char *media_type;
	char *digest;           /* validated "algo:hex" */
	int64_t size;
	char *os, *arch, *variant;   /* index entries: platform, may be NULL */
};

struct oci_annotation { char *key, *value; };

struct oci_manifest {
	enum oci_manifest_kind kind;
	char *media_type;              /* effective type (body field or Content-Type) */
	struct oci_descriptor config;  /* manifests only */
	struct oci_descriptor *layers; /* manifests: layers; indexes: manifests */
	size_t nlayers;
	struct oci_annotation *annotations;
	size_t nannotations;
};

/*
 * Parses manifest or index JSON.  content_type (may be NULL) is the
 * response's Content-Type; when the body names a different mediaType it is
 * refused.  Every descriptor must have a media type, a valid digest and a
 * non-negative size.
 */
int oci_manifest_parse(const char *body, size_t len, const char *content_type,
    struct oci_manifest *out, struct err *e);
void oci_manifest_free(struct oci_manifest *m);

/* The layer to unpack: the first whose type is `want` when given, else by
 * preference Flux content, OCI tar+gzip, tar, tar+zstd, Docker tar.gzip.
 * Returns NULL with e set (naming the types seen) when none fits. */
const struct oci_descriptor *oci_select_layer(const struct oci_manifest *m, const char *want,
    struct err *e);

/* Index entry to follow: linux/amd64 when present, else the first entry that
 * is a manifest.  NULL with e set when none is usable. */
const struct oci_descriptor *oci_select_platform(const struct oci_manifest *idx, struct err *e);

/* ---- the registry client ---- */

/* Progress of a blob transfer: bytes so far and the total (-1 unknown). */
typedef void (*oci_progress_fn)(void *ud, const char *what, int64_t done, int64_t total);

struct oci_client_opts {
	/* Plain HTTP, no TLS at all: what `insecure: true` means on a Flux
	 * OCIRepository (and on a Stack's ociSource).  Not the same as
	 * insecure_skip_tls_verify, which keeps TLS but trusts any certificate. */
	int plain_http;
	const char *ca_file;          /* extra CA bundle, or NULL */
	int insecure_skip_tls_verify; /* https without certificate checks (never implied) */
	struct oci_creds creds;       /* borrowed; may be all NULL (anonymous) */
	long timeout_ms;              /* stall and per-request timeout; 0 = http defaults */
	int retries;                  /* -1 = http default */
	oci_progress_fn progress;     /* may be NULL */
	void *progress_ud;
	/* When set, a non-zero value (another thread, a signal handler) cancels
	 * every request, the store lock wait and the extraction: ERR_CANCELED. */
	const volatile int *cancel;
};

struct oci_client;

/* A client for one registry host.  opts->creds is copied. Free with
 * oci_client_free. */
struct oci_client *oci_client_new(const char *registry, const struct oci_client_opts *opts,
    struct err *e);
void oci_client_free(struct oci_client *c);

/*
 * Fetches a manifest by tag or digest and verifies it: size limit, digest of
 * the bytes against Docker-Content-Digest and against `reference` when that
 * is a digest.  *digest_out receives "sha256:..." (caller frees); *body_out
 * the raw bytes (caller frees) when body_out is not NULL.
 */
int oci_get_manifest(struct oci_client *c, const char *repo, const char *reference,
    struct oci_manifest *out, char **digest_out, char **body_out, size_t *body_len,
    struct err *e);

/* All tags of a repository, following Link pagination.  *tags is a malloc'd
 * array of malloc'd strings; free with oci_tags_free.  Entries that are not
 * valid tags (oci_tag_valid) are skipped; at most 100,000 tags, 1,000 pages
 * and 16 MiB of tag-list bodies in all (ERR_LIMIT beyond). */
int oci_list_tags(struct oci_client *c, const char *repo, char ***tags, size_t *ntags,
    struct err *e);
void oci_tags_free(char **tags, size_t ntags);

/* ---- pull ---- */

/* Default limit on a layer's (compressed) size, as for Flux artifacts. */
#define OCI_DEFAULT_MAX_LAYER_BYTES (512LL << 20)
/* Bytes a layer may carry after its tar end-of-archive marker. */
#define OCI_MAX_TRAILING_BYTES (1LL << 20)
/* Default wait for another pull of the same layer into a store (5 min). */
#define OCI_DEFAULT_LOCK_TIMEOUT_MS 300000L
/* Default limit on one layer's download, start to end (5 min, as a Flux
 * artifact fetch): a registry trickling bytes just above the stall
 * threshold cannot hold a pull for days. */
#define OCI_DEFAULT_LAYER_TIMEOUT_MS 300000L

struct oci_pull_opts {
	const char *media_type;       /* layer selector, or NULL */
	const char *semver;           /* range: the tag is chosen from the tag list */
	struct untar_limits limits;   /* limits.cancel defaults to the client's cancel */
	int64_t max_layer_bytes;      /* compressed layer size limit; default
	                               * OCI_DEFAULT_MAX_LAYER_BYTES, -1 = none */
	long lock_timeout_ms;         /* oci_store_pull's lock wait; default
	                               * OCI_DEFAULT_LOCK_TIMEOUT_MS, 0 = no limit */
	long layer_timeout_ms;        /* the layer download, whole; default
	                               * OCI_DEFAULT_LAYER_TIMEOUT_MS, 0 = no limit */
};

struct oci_pull_result {
	char *tag;                    /* the tag used, NULL when pulled by digest only */
	char *revision;               /* "<tag>@sha256:<manifest>" or "sha256:<manifest>" */
	char *manifest_digest;        /* of the image manifest (after the index) */
	char *index_digest;           /* when the reference named an index, else NULL */
	char *platform;               /* "linux/amd64", or what was picked; NULL if no index */
	char *layer_digest;
	char *layer_media_type;
	int64_t layer_size;
	struct oci_annotation *annotations;  /* of the manifest */
	size_t nannotations;
};

void oci_pull_opts_default(struct oci_pull_opts *o);
void oci_pull_result_free(struct oci_pull_result *r);

/* The parts of one resolve-and-fetch that live and go together: the
 * reference, the options (at their defaults after init), the result and
 * the registry client.  oci_pull_parts_free frees whichever were set, and
 * leaves them as init did, so a caller frees once on every path. */
struct oci_pull_parts {
	struct oci_ref ref;
	struct oci_pull_opts po;
	struct oci_pull_result res;
	struct oci_client *c;
};
void oci_pull_parts_init(struct oci_pull_parts *x);
void oci_pull_parts_free(struct oci_pull_parts *x);

/*
 * Resolves the reference (semver range, tag or digest), verifies the
 * manifest, streams the selected layer through the digest check and the
 * safe extractor into a staging directory beside `dest`, and renames it to
 * `dest` only once the digest and size matched.  `dest` must not exist, or
 * be an empty directory.  On failure nothing is left at `dest`.
 */
int oci_pull(struct oci_client *c, const struct oci_ref *ref, const struct oci_pull_opts *o,
    const char *dest, struct oci_pull_result *res, struct err *e);

/* The two halves of oci_pull, for callers that keep a content-addressed
 * store: oci_resolve does everything but the layer download (tag, manifest,
 * index, layer choice) and fills res; the caller can then look the layer
 * digest up before calling oci_fetch_layer, which streams, verifies and
 * unpacks res's layer to dest through a staging directory.  With
 * content_addressed set, finding dest already filled by a concurrent fetch
 * of the same digest is success. */
int oci_resolve(struct oci_client *c, const struct oci_ref *ref, const struct oci_pull_opts *o,
    struct oci_pull_result *res, struct err *e);
int oci_fetch_layer(struct oci_client *c, const char *repo, const struct oci_pull_result *res,
    const struct oci_pull_opts *o, const char *dest, int content_addressed, struct err *e);

/*
 * The OCI side of the artifact store (fluxsource.h: the same layout, lock,
 * staging and sweep as Flux artifacts): resolves ref (tag, digest, or
 * o->semver) to a manifest and its layer, then makes sure the layer's tree
 * is at STORE/artifacts/<algo>/<hex of the layer digest>/, pulling,
 * verifying and unpacking it only when it is not there yet: once per
 * digest, however many callers (threads or processes) ask at once; the
 * others wait on the entry's lock up to o->lock_timeout_ms (ERR_TIMEOUT)
 * or the client's cancel flag (ERR_CANCELED).  The manifest is always
 * fetched (a tag moves).  res receives the revision and digests (free with
 * oci_pull_result_free); path_out the tree; *cached (may be NULL) whether
 * no layer download was needed.  On failure nothing is left in the store
 * but what was there.
 */
int oci_store_pull(const char *store_root, struct oci_client *c, const struct oci_ref *ref,
    const struct oci_pull_opts *o, struct oci_pull_result *res, char *path_out, size_t path_len,
    int *cached, struct err *e);

/* ---- packing and push ---- */

/* Flux's default exclusions for `flux push artifact` (VCS and archives). */
#define OCI_DEFAULT_IGNORE ".git/,.gitignore,.gitmodules,.gitattributes," \
	"*.jpg,*.jpeg,*.gif,*.png,*.wmv,*.flv,*.tar.gz,*.zip"

struct oci_pack_opts {
	const char *ignore;           /* comma-separated gitignore-style patterns; NULL = default */
	int reproducible;             /* kept for the record; packing is always deterministic */
};

/*
 * Packs the tree at `dir` into a tar+gzip file at `out_path` (created, 0600):
 * entries relative with no leading directory, sorted by name, owners and
 * times zeroed, modes kept; only directories and regular files (symlinks
 * and specials are skipped, as Flux does).  The digest and size of the
 * compressed file are returned.
 */
int oci_pack_dir(const char *dir, const struct oci_pack_opts *o, const char *out_path,
    char *digest_out, size_t digest_len, int64_t *size_out, struct err *e);

/* 1 when rel (a path relative to the packed root) is excluded by patterns. */
struct oci_ignore;
struct oci_ignore *oci_ignore_parse(const char *patterns, struct err *e);
int oci_ignore_match(const struct oci_ignore *ig, const char *rel, int is_dir);
void oci_ignore_free(struct oci_ignore *ig);

struct oci_push_opts {
	const char *path;             /* directory to pack */
	const char *source;           /* org.opencontainers.image.source, or NULL */
	const char *revision;         /* org.opencontainers.image.revision, or NULL */
	const char *const *annotations;   /* "k=v" strings, NULL-terminated, may be NULL */
	int reproducible;             /* created = 1970-01-01T00:00:00Z */
	const char *ignore;           /* see oci_pack_opts */
};

struct oci_push_result {
	char *manifest_digest;
	char *layer_digest;
	int64_t layer_size;
	int layer_uploaded;           /* 0 when the registry had it already */
	int config_uploaded;
};

void oci_push_result_free(struct oci_push_result *r);

/* Packs, uploads what the registry lacks, puts the manifest under ref's tag
 * (or "latest"), and checks the digest the registry reports. */
int oci_push(struct oci_client *c, const struct oci_ref *ref, const struct oci_push_opts *o,
    struct oci_push_result *res, struct err *e);

/* Builds the Flux manifest JSON for the given blobs (exposed for tests). */
char *oci_flux_manifest_json(const char *config_digest, int64_t config_size,
    const char *layer_digest, int64_t layer_size, const struct oci_annotation *ann, size_t nann);

/* ---- signatures: cosign, key-based (oci/verify.c, sign.c, sigkeys.c, sigcheck.c) ---- */

/* Trusted public keys (PEM "PUBLIC KEY": ECDSA P-256/P-384/P-521, RSA 2048-4096, Ed25519).
 * Names are for messages ("cosign.pub", the Secret key name). */
struct oci_keyring;
struct oci_keyring *oci_keyring_new(void);                    /* caller frees with oci_keyring_free */
/* ERR_INVALID names the key; at most 64 keys (ERR_LIMIT). */
int oci_keyring_add_pem(struct oci_keyring *k, const char *name, const char *pem, size_t len,
    struct err *e);
size_t oci_keyring_count(const struct oci_keyring *k);
void oci_keyring_free(struct oci_keyring *k);

enum oci_sig_scheme { OCI_SIG_NONE, OCI_SIG_SIMPLESIGNING, OCI_SIG_BUNDLE };
const char *oci_sig_scheme_name(enum oci_sig_scheme s);        /* "none", "cosign .sig", "sigstore bundle" */

struct oci_verify_result {
	enum oci_sig_scheme scheme;   /* what verified (or, on failure, the last scheme tried) */
	char *key_name;               /* the key that matched; NULL on failure */
	char *signature;              /* where it was found: "sha256-<hex>.sig" or the referrer's digest */
};
void oci_verify_result_free(struct oci_verify_result *r);

/*
 * Verifies that manifest_digest ("sha256:<hex>", the manifest that is then pulled: the caller passes
 * the digest oci_resolve returned, so there is no check-then-pull race) in repo is signed by one of
 * keys: Sigstore bundles first (referrers API, then the sha256-<hex> tag), then the sha256-<hex>.sig
 * tag.  0 when one signature verifies; -1 with e:
 *   ERR_NOTFOUND  no signature of either scheme ("no signature found for <repo>@<digest>: ...")
 *   ERR_REFUSED   signatures exist but none verifies; the message names the scheme and what did not
 *                 match (wrong key, payload names another digest, tampered payload, garbage manifest)
 *   ERR_NET/ERR_HTTP/ERR_AUTH/ERR_TIMEOUT  the registry could not be asked (a transient failure)
 * res is filled either way (may be NULL).
 */
int oci_verify(struct oci_client *c, const char *repo, const char *manifest_digest,
    const struct oci_keyring *keys, struct oci_verify_result *res, struct err *e);

/* A private key for signing. */
struct oci_signer;
/* PEM text of an unencrypted "PRIVATE KEY" (PKCS#8), "EC PRIVATE KEY" or "RSA PRIVATE KEY",
 * or an "ENCRYPTED PRIVATE KEY" (PKCS#8) with password (may be NULL).  cosign's own
 * "ENCRYPTED SIGSTORE PRIVATE KEY" (scrypt + secretbox) is refused with a message saying
 * how to get a PEM key.  `name` (a file name) is for messages; the password never appears
 * in one.  Caller frees with oci_signer_free. */
struct oci_signer *oci_signer_from_pem(const char *name, const char *pem, size_t len,
    const char *password, struct err *e);
void oci_signer_free(struct oci_signer *s);

enum oci_sign_format { OCI_SIGN_SIMPLESIGNING = 1, OCI_SIGN_BUNDLE = 2 };

/*
 * Signs manifest_digest in repo the way `cosign sign --key` does (no transparency log):
 *   OCI_SIGN_SIMPLESIGNING: a simple-signing payload naming the digest and docker_reference
 *     ("host/repo"), signed and added as a layer of the sha256-<hex>.sig manifest (the
 *     signatures already there are kept);
 *   OCI_SIGN_BUNDLE: a Sigstore bundle v0.3 (DSSE, in-toto statement) pushed as an OCI 1.1
 *     referrer, and the sha256-<hex> referrers tag index updated for registries without the
 *     referrers API.
 * *where (may be NULL) receives the tag or referrer digest written (caller frees).
 */
int oci_sign(struct oci_client *c, const char *repo, const char *manifest_digest,
    const char *docker_reference, const struct oci_signer *s, enum oci_sign_format format,
    char **where, struct err *e);

#endif
