/*
 * secret.h - wiping secrets (passwords, tokens, keys) from memory before
 * it is reused.  A plain memset before free may be removed by the
 * compiler as a dead store; these use OPENSSL_cleanse, which is not.
 *
 * The one copy of this in the program: the OCI client, the commands'
 * credential flags, the kube client's tokens and keys, the pulumi driver's
 * secrets (src/stack/ still calls explicit_bzero directly).
 */
#ifndef PC_SECRET_H
#define PC_SECRET_H

#include <stddef.h>

/* Overwrites n bytes at p (p may be NULL when n is 0). */
void secret_wipe(void *p, size_t n);

/* Wipes the NUL-terminated string s and frees it; NULL is fine. */
void secret_free(char *s);

#endif
