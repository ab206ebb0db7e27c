/*
 * base64.h - base64 (RFC 4648, standard alphabet) on OpenSSL's EVP block
 * functions, with one set of rules for every caller: docker config "auth"
 * fields, kubeconfig *-data fields, Secret data.
 *
 * Decoding accepts the standard alphabet only (not the URL-safe one);
 * ASCII whitespace anywhere is ignored (PEM-style and wrapped values);
 * '=' padding is optional but, when present, only at the end and at most
 * two; a length that cannot be base64 (one character left over) is refused.
 * Anything else is ERR_INVALID.  Messages never quote the input (it is
 * usually a secret).
 */
#ifndef PC_BASE64_H
#define PC_BASE64_H

#include <stddef.h>

#include "base/err.h"

/*
 * Decodes in[0..len) into a malloc'd buffer, NUL-terminated for
 * convenience (the NUL is not counted in *outlen).  The caller frees it,
 * after OPENSSL_cleanse when it held a secret.  -1 with e set
 * (ERR_INVALID, ERR_NOMEM).
 */
int base64_decode(const char *in, size_t len, unsigned char **out, size_t *outlen, struct err *e);

/* Encodes with padding, no line breaks: a malloc'd NUL-terminated string
 * (the caller frees), NULL when out of memory. */
char *base64_encode(const void *data, size_t len);

#endif
