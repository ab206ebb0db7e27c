/*
 * digest.c - parsing, formatting and computing digests (see digest.h).
 */
#include "base/digest.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

struct algo_info {
	const char *name;
	size_t raw_len;
};

static const struct algo_info algos[] = {
	[DIGEST_SHA256] = { "sha256", 32 },
	[DIGEST_SHA384] = { "sha384", 48 },
	[DIGEST_SHA512] = { "sha512", 64 },
};

struct digest_ctx {
	EVP_MD_CTX *md;
	enum digest_algo algo;
};

static const EVP_MD *algo_md(enum digest_algo a)
{
	switch (a) {
	case DIGEST_SHA256: return EVP_sha256();
	case DIGEST_SHA384: return EVP_sha384();
	case DIGEST_SHA512: return EVP_sha512();
	}
	return NULL;
}

const char *digest_algo_name(enum digest_algo algo)
{
	return algos[algo].name;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_hex(const char *hex, size_t want, unsigned char *raw)
{
	if (strlen(hex) != want * 2)
		return -1;
	for (size_t i = 0; i < want; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		raw[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

int digest_parse(const char *text, struct digest *out, struct err *e)
{
	const char *colon, *hex;
	size_t namelen;
	int found = -1;

	char shown[160];

	if (text == NULL || *text == '\0')
		return err_set(e, ERR_INVALID, "empty digest");
	/* The value is echoed: a newline in it must not split the message. */
	log_printable(text, shown, sizeof(shown));
	colon = strchr(text, ':');
	if (colon == NULL) {
		/* Flux's legacy form: a bare sha256 hex checksum. */
		out->algo = DIGEST_SHA256;
		out->len = 32;
		if (parse_hex(text, 32, out->raw) < 0)
			return err_set(e, ERR_INVALID,
			    "digest \"%s\": expected \"<algorithm>:<hex>\" or 64 hex characters", shown);
		return 0;
	}
	namelen = (size_t)(colon - text);
	for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
		if (strlen(algos[i].name) == namelen && strncmp(algos[i].name, text, namelen) == 0)
			found = (int)i;
	}
	if (found < 0)
		return err_set(e, ERR_UNSUPPORTED,
		    "digest \"%s\": unsupported algorithm (supported: sha256, sha384, sha512)", shown);
	hex = colon + 1;
	out->algo = (enum digest_algo)found;
	out->len = algos[found].raw_len;
	if (parse_hex(hex, out->len, out->raw) < 0)
		return err_set(e, ERR_INVALID, "digest \"%s\": %s needs %zu hex characters",
		    shown, algos[found].name, out->len * 2);
	return 0;
}

void digest_hex(const struct digest *d, char *buf, size_t buflen)
{
	static const char hexdig[] = "0123456789abcdef";
	size_t n = 0;

	for (size_t i = 0; i < d->len && n + 2 < buflen; i++) {
		buf[n++] = hexdig[d->raw[i] >> 4];
		buf[n++] = hexdig[d->raw[i] & 15];
	}
	if (buflen > 0)
		buf[n] = '\0';
}

void digest_format(const struct digest *d, char *buf, size_t buflen)
{
	char hex[DIGEST_MAX_RAW * 2 + 1];

	digest_hex(d, hex, sizeof(hex));
	snprintf(buf, buflen, "%s:%s", algos[d->algo].name, hex);
}

int digest_equal(const struct digest *a, const struct digest *b)
{
	return a->algo == b->algo && a->len == b->len && memcmp(a->raw, b->raw, a->len) == 0;
}

struct digest_ctx *digest_ctx_new(enum digest_algo algo)
{
	struct digest_ctx *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->algo = algo;
	c->md = EVP_MD_CTX_new();
	if (c->md == NULL || EVP_DigestInit_ex(c->md, algo_md(algo), NULL) != 1) {
		EVP_MD_CTX_free(c->md);
		free(c);
		return NULL;
	}
	return c;
}

void digest_ctx_update(struct digest_ctx *c, const void *data, size_t len)
{
	EVP_DigestUpdate(c->md, data, len);
}

void digest_ctx_final(struct digest_ctx *c, struct digest *out)
{
	unsigned int n = 0;

	EVP_DigestFinal_ex(c->md, out->raw, &n);
	out->algo = c->algo;
	out->len = n;
}

void digest_ctx_free(struct digest_ctx *c)
{
	if (c == NULL)
		return;
	EVP_MD_CTX_free(c->md);
	free(c);
}

void digest_bytes(enum digest_algo algo, const void *data, size_t len, struct digest *out)
{
	unsigned int n = 0;

	EVP_Digest(data, len, out->raw, &n, algo_md(algo), NULL);
	out->algo = algo;
	out->len = n;
}

int digest_file(const char *path, enum digest_algo algo, struct digest *out, struct err *e)
{
	unsigned char buf[65536];
	struct digest_ctx *c;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return err_set(e, ERR_IO, "open %s: %s", path, strerror(errno));
	c = digest_ctx_new(algo);
	if (c == NULL) {
		close(fd);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		digest_ctx_update(c, buf, (size_t)n);
	if (n < 0) {
		int saved = errno;
		digest_ctx_free(c);
		close(fd);
		return err_set(e, ERR_IO, "read %s: %s", path, strerror(saved));
	}
	digest_ctx_final(c, out);
	digest_ctx_free(c);
	close(fd);
	return 0;
}
