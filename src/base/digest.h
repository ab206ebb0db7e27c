/*
 * digest.h - content digests in the OCI / Flux notation, computed with
 * OpenSSL EVP.
 *
 * Accepted text forms: "sha256:<64 hex>", "sha384:<96 hex>",
 * "sha512:<128 hex>", and a bare 64-hex value, which means sha256 (Flux's
 * legacy checksum field).  Hex is normalised to lower case.  Any other
 * algorithm (blake3, md5...) or a wrong length is an ERR_INVALID /
 * ERR_UNSUPPORTED error naming the value.
 */
#ifndef PC_DIGEST_H
#define PC_DIGEST_H

#include <stddef.h>

#include "base/err.h"

enum digest_algo { DIGEST_SHA256 = 0, DIGEST_SHA384, DIGEST_SHA512 };

#define DIGEST_MAX_RAW 64
/* "sha512:" + 128 hex + NUL */
#define DIGEST_STR_MAX 140

struct digest {
	enum digest_algo algo;
	size_t len;                          /* bytes used in raw */
	unsigned char raw[DIGEST_MAX_RAW];
};

int digest_parse(const char *text, struct digest *out, struct err *e);

/* Writes "algo:hex" into buf (DIGEST_STR_MAX bytes is always enough). */
void digest_format(const struct digest *d, char *buf, size_t buflen);

/* Lower-case hex only, without the algorithm. */
void digest_hex(const struct digest *d, char *buf, size_t buflen);

const char *digest_algo_name(enum digest_algo algo);
int digest_equal(const struct digest *a, const struct digest *b);

/* Streaming computation.  digest_ctx_new returns NULL on allocation failure;
 * the caller frees with digest_ctx_free (also after digest_ctx_final). */
struct digest_ctx;
struct digest_ctx *digest_ctx_new(enum digest_algo algo);
void digest_ctx_update(struct digest_ctx *c, const void *data, size_t len);
void digest_ctx_final(struct digest_ctx *c, struct digest *out);
void digest_ctx_free(struct digest_ctx *c);

/* One-shot helpers. */
void digest_bytes(enum digest_algo algo, const void *data, size_t len, struct digest *out);
int digest_file(const char *path, enum digest_algo algo, struct digest *out, struct err *e);

#endif
