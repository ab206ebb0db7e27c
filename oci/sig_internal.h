/*
 * sig_internal.h - the pieces of cosign signature verification and signing
 * shared by oci/sigkeys.c (keys and raw signatures), oci/sigcheck.c (what a
 * signature manifest, payload, bundle and statement must say), oci/verify.c
 * (fetching them from a registry) and oci/sign.c (making them).  Private to
 * oci/ and its unit test (tests/unit/test_oci_verify.c); other modules use
 * the "signatures" section of oci/oci.h.
 *
 * The checks are pure functions over bytes: the registry side hands them a
 * blob fetcher, so every refusal can be tested without a registry.
 */
#ifndef PC_OCI_SIG_INTERNAL_H
#define PC_OCI_SIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "oci/oci.h"

/* ---- the formats (cosign specs/SIGNATURE_SPEC.md, BUNDLE_SPEC.md) ---- */

#define OCI_SIG_MT_SIMPLESIGNING "application/vnd.dev.cosign.simplesigning.v1+json"
#define OCI_SIG_ANNOTATION       "dev.cosignproject.cosign/signature"
#define OCI_SIG_PAYLOAD_TYPE     "cosign container image signature"
#define OCI_SIG_MT_BUNDLE_V03    "application/vnd.dev.sigstore.bundle.v0.3+json"
#define OCI_SIG_MT_BUNDLE_V03_ALT "application/vnd.dev.sigstore.bundle+json;version=0.3"
#define OCI_SIG_MT_EMPTY         "application/vnd.oci.empty.v1+json"
#define OCI_SIG_MT_IMAGE_CONFIG  "application/vnd.oci.image.config.v1+json"
#define OCI_SIG_INTOTO_TYPE      "application/vnd.in-toto+json"
#define OCI_SIG_STATEMENT_V1     "https://in-toto.io/Statement/v1"
#define OCI_SIG_STATEMENT_V01    "https://in-toto.io/Statement/v0.1"
#define OCI_SIG_PREDICATE_TYPE   "https://sigstore.dev/cosign/sign/v1"

/* ---- limits: hostile registries get a clear refusal, never a crash ---- */

#define OCI_SIG_MAX_PAYLOAD   (1L << 20)   /* a simple-signing payload is ~250 bytes */
#define OCI_SIG_MAX_BUNDLE    (4L << 20)   /* a bundle with tlog entries is a few KiB */
#define OCI_SIG_MAX_LAYERS    64           /* signatures in one .sig manifest */
#define OCI_SIG_MAX_REFERRERS 64           /* candidate referrers examined */
#define OCI_SIG_MAX_SUBJECTS  1024         /* in-toto subjects, as sigstore-go */
#define OCI_SIG_MAX_SIG_B64   8192         /* base64 of one signature (RSA-4096: 684) */
#define OCI_SIG_MAX_KEYS      64           /* keys in one keyring */

/* ---- keys and raw signatures (sigkeys.c) ---- */

/*
 * Verifies sig over data with each key in turn, with the hash cosign uses
 * for that key type (ECDSA P-256 and RSA: SHA-256; P-384: SHA-384, then
 * SHA-256; P-521: SHA-512, then SHA-256; Ed25519: none).  ECDSA signatures
 * may be ASN.1 DER or IEEE P1363 r||s.  Returns the name of the key that
 * verified (owned by the keyring), or NULL.
 */
const char *oci_keyring_verify(const struct oci_keyring *k, const unsigned char *data, size_t len,
    const unsigned char *sig, size_t siglen);

/* The names of the keys, comma-separated, for messages (at most len-1 bytes). */
void oci_keyring_names(const struct oci_keyring *k, char *out, size_t len);

/*
 * DSSE v1 pre-authentication encoding: "DSSEv1 <len(type)> <type>
 * <len(body)> <body>" with lengths in ASCII decimal.  Malloc'd (caller
 * frees), length in *out_len; NULL when out of memory.
 */
unsigned char *oci_dsse_pae(const char *type, const unsigned char *body, size_t body_len,
    size_t *out_len);

/* Decodes standard or URL-safe base64 (DSSE allows either), malloc'd. */
int oci_sig_b64_decode(const char *in, unsigned char **out, size_t *out_len, struct err *e);

/* Signs data as cosign does for this key type (the verify rules above):
 * ECDSA in DER.  *sig malloc'd (caller frees). */
int oci_signer_sign(const struct oci_signer *s, const unsigned char *data, size_t len,
    unsigned char **sig, size_t *siglen, struct err *e);
/* The public key as PEM "PUBLIC KEY", malloc'd; NULL when out of memory. */
char *oci_signer_public_pem(const struct oci_signer *s);
/* cosign's key hint: base64(SHA-256(DER SubjectPublicKeyInfo)), malloc'd. */
char *oci_signer_key_hint(const struct oci_signer *s);

/* ---- what the documents must say (sigcheck.c) ---- */

/* Fetches the blob `digest` of declared `size` (refused above max),
 * checks its digest and returns the bytes (malloc'd, caller frees). */
typedef int (*oci_sig_fetch_fn)(void *ud, const char *digest, int64_t size, int64_t max,
    char **out, size_t *out_len, struct err *e);

/*
 * The simple-signing payload: JSON whose critical.type is the cosign type
 * and whose critical.image.docker-manifest-digest equals digest exactly.
 * Key names are matched case-sensitively, and an object that also holds a
 * key differing only in case (which Go's decoder would read instead) is
 * refused as ambiguous.  ERR_REFUSED naming the field.
 */
int oci_sig_check_payload(const char *payload, size_t len, const char *digest, struct err *e);

/* An in-toto statement: _type v1 (or v0.1), predicateType cosign's, a
 * subject whose digest.sha256 is digest's hex.  ERR_REFUSED. */
int oci_sig_check_statement(const char *stmt, size_t len, const char *digest, struct err *e);

/*
 * A Sigstore bundle v0.3 with a DSSE envelope: exactly one signature,
 * verified over PAE by a key of k, payloadType in-toto, then the statement
 * as above.  The transparency log material is ignored (key-based, offline).
 * 0 and *key (the keyring's name) on success; -1 ERR_REFUSED.
 */
int oci_sig_check_bundle(const char *bundle, size_t len, const char *digest,
    const struct oci_keyring *k, const char **key, struct err *e);

/*
 * A `.sig` manifest: each simple-signing layer (at most
 * OCI_SIG_MAX_LAYERS) is fetched, its signature annotation decoded and
 * verified over the exact payload bytes, then the payload checked.  0 when
 * one layer verifies (*key set); -1 with ERR_REFUSED (the first layer's
 * reason, and how many layers failed) or a transport error from fetch.
 */
int oci_sig_check_simplesigning(const char *manifest, size_t len, const char *digest,
    const struct oci_keyring *k, oci_sig_fetch_fn fetch, void *ud, const char **key,
    struct err *e);

/*
 * A referrer manifest: subject.digest must be digest, exactly one layer of
 * the bundle type, which is fetched and checked with oci_sig_check_bundle.
 * ERR_REFUSED, or a transport error from fetch.
 */
int oci_sig_check_referrer(const char *manifest, size_t len, const char *digest,
    const struct oci_keyring *k, oci_sig_fetch_fn fetch, void *ud, const char **key,
    struct err *e);

/* 1 when a transport error (the registry could not be asked), which stops
 * verification at once instead of counting as a refusal. */
int oci_sig_transient(enum err_code code);

/* ---- what signing writes (sign.c; exposed for the unit test) ---- */

/* The simple-signing payload cosign writes, malloc'd. */
char *oci_sig_payload_json(const char *docker_reference, const char *digest);

#endif
