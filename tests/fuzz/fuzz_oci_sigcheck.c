/*
 * fuzz_oci_sigcheck.c - libFuzzer target for the cosign signature checks
 * (oci/sigcheck.c), fed what a hostile registry could serve: the first
 * input byte picks the document (simple-signing payload, in-toto
 * statement, bundle, `.sig` manifest, referrer manifest); the rest is the
 * document, and also every blob the checks fetch.  Keys are made once.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "oci/sig_internal.h"

#define TARGET "sha256:9c5079bfbe38c3924ece50d8ce9fe4a3df2dc1160a7cd92e2c5ab6d731cdc0ed"

static struct oci_keyring *ring;

struct input { const char *data; size_t len; };

static int fetch_input(void *ud, const char *digest, int64_t size, int64_t max, char **out,
    size_t *out_len, struct err *e)
{
	const struct input *in = ud;

	(void)digest;
	if (size > max || (int64_t)in->len > max)
		return err_set(e, ERR_LIMIT, "too big");
	*out = malloc(in->len + 1);
	if (*out == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	memcpy(*out, in->data, in->len);
	(*out)[in->len] = '\0';
	*out_len = in->len;
	return 0;
}

static void make_ring(void)
{
	EVP_PKEY *pkey = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	BIO *b = BIO_new(BIO_s_mem());
	char *pem;
	long n;
	struct err e;

	ring = oci_keyring_new();
	PEM_write_bio_PUBKEY(b, pkey);
	n = BIO_get_mem_data(b, &pem);
	if (oci_keyring_add_pem(ring, "fuzz.pub", pem, (size_t)n, &e) < 0)
		abort();
	BIO_free(b);
	EVP_PKEY_free(pkey);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in;
	const char *key;
	struct err e;

	if (ring == NULL)
		make_ring();
	if (size < 1)
		return 0;
	in.data = (const char *)data + 1;
	in.len = size - 1;
	switch (data[0] % 5) {
	case 0: oci_sig_check_payload(in.data, in.len, TARGET, &e); break;
	case 1: oci_sig_check_statement(in.data, in.len, TARGET, &e); break;
	case 2: oci_sig_check_bundle(in.data, in.len, TARGET, ring, &key, &e); break;
	case 3: oci_sig_check_simplesigning(in.data, in.len, TARGET, ring, fetch_input, &in, &key, &e); break;
	default: oci_sig_check_referrer(in.data, in.len, TARGET, ring, fetch_input, &in, &key, &e); break;
	}
	return 0;
}
