/*
 * secret.c - see secret.h.
 */
#include "base/secret.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

void secret_wipe(void *p, size_t n)
{
	if (p != NULL && n > 0)
		OPENSSL_cleanse(p, n);
}

void secret_free(char *s)
{
	if (s == NULL)
		return;
	secret_wipe(s, strlen(s));
	free(s);
}
