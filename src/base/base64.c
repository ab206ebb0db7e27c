/*
 * base64.c - base64 with the rules of base64.h on EVP_DecodeBlock /
 * EVP_EncodeBlock.  EVP_DecodeBlock wants whole 4-character quanta and
 * counts padding as zero bytes, so the input is cleaned and padded here
 * and the padding subtracted afterwards.
 */
#include "base/base64.h"

#include <ctype.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

static int b64_char(unsigned char c)
{
	return isalnum(c) || c == '+' || c == '/';
}

/* Copies the significant characters of in into clean; -1 on a character
 * outside the alphabet or data after padding. */
static int clean_input(const char *in, size_t len, char *clean, size_t *n, size_t *pad)
{
	*n = 0;
	*pad = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
			continue;
		if (c == '=') {
			(*pad)++;
			continue;
		}
		if (*pad > 0 || !b64_char(c))
			return -1;
		clean[(*n)++] = (char)c;
	}
	return *pad > 2 || *n % 4 == 1 ? -1 : 0;
}

int base64_decode(const char *in, size_t len, unsigned char **out, size_t *outlen, struct err *e)
{
	char *clean;
	unsigned char *dst;
	size_t n, pad;
	int got;

	*out = NULL;
	if (len > INT_MAX / 2)
		return err_set(e, ERR_INVALID, "base64 value too long");
	clean = malloc(len + 4);
	if (clean == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	if (clean_input(in, len, clean, &n, &pad) < 0) {
		OPENSSL_cleanse(clean, len + 4);
		free(clean);
		return err_set(e, ERR_INVALID, "not valid base64");
	}
	pad = (4 - n % 4) % 4;
	for (size_t i = 0; i < pad; i++)
		clean[n++] = '=';
	dst = malloc(n / 4 * 3 + 1);
	if (dst == NULL) {
		OPENSSL_cleanse(clean, len + 4);
		free(clean);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	got = n > 0 ? EVP_DecodeBlock(dst, (const unsigned char *)clean, (int)n) : 0;
	OPENSSL_cleanse(clean, len + 4);
	free(clean);
	if (got < 0) {
		free(dst);
		return err_set(e, ERR_INVALID, "not valid base64");
	}
	got -= (int)pad;
	dst[got] = '\0';
	*out = dst;
	if (outlen != NULL)
		*outlen = (size_t)got;
	return 0;
}

char *base64_encode(const void *data, size_t len)
{
	char *out;

	if (len > INT_MAX / 4 * 3 - 3)
		return NULL;
	out = malloc(4 * ((len + 2) / 3) + 1);
	if (out != NULL)
		EVP_EncodeBlock((unsigned char *)out, data, (int)len);
	return out;
}
