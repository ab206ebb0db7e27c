/*
 * sigkeys.c - the cryptography of cosign signatures on OpenSSL: the keyring
 * of trusted public keys, verifying one raw signature against it, the DSSE
 * pre-authentication encoding, and the private key `push --sign-key` signs
 * with.  What the signed documents must say is sigcheck.c's business; where
 * they come from is verify.c's.
 *
 * No algorithm identifier travels with a cosign signature ("clients must
 * determine the signature scheme out-of-band"), so the key type decides:
 * ECDSA P-256 and RSA PKCS#1 v1.5 hash with SHA-256 (what cosign and Flux
 * load a key file with), P-384 and P-521 with their own hash first (what
 * sigstore's default verifier picks for them) and SHA-256 as well, Ed25519
 * signs the message itself.  ECDSA signatures are ASN.1 DER, or IEEE P1363
 * r||s, which sigstore's verifier also accepts.
 */
#include "oci/sig_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include "base/base64.h"
#include "base/mem.h"
#include "base/str.h"

struct oci_key {
	char *name;
	EVP_PKEY *pkey;
};

struct oci_keyring {
	struct oci_key *keys;
	size_t n;
};

struct oci_signer {
	char *name;
	EVP_PKEY *pkey;
};

struct oci_keyring *oci_keyring_new(void)
{
	return calloc(1, sizeof(struct oci_keyring));
}

size_t oci_keyring_count(const struct oci_keyring *k)
{
	return k ? k->n : 0;
}

void oci_keyring_free(struct oci_keyring *k)
{
	if (k == NULL)
		return;
	for (size_t i = 0; i < k->n; i++) {
		free(k->keys[i].name);
		EVP_PKEY_free(k->keys[i].pkey);
	}
	free(k->keys);
	free(k);
}

/* The curve's name ("P-256") for EC keys, or NULL for any other curve. */
static const char *ec_curve(const EVP_PKEY *pkey)
{
	char group[64];
	size_t len = 0;

	if (!EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), &len))
		return NULL;
	if (strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0)
		return "P-256";
	if (strcmp(group, "secp384r1") == 0 || strcmp(group, "P-384") == 0)
		return "P-384";
	if (strcmp(group, "secp521r1") == 0 || strcmp(group, "P-521") == 0)
		return "P-521";
	return NULL;
}

/* 0 when pkey is a type cosign makes or imports; else ERR_INVALID naming it. */
static int key_type_ok(const char *what, const char *name, EVP_PKEY *pkey, struct err *e)
{
	switch (EVP_PKEY_get_base_id(pkey)) {
	case EVP_PKEY_EC:
		if (ec_curve(pkey) == NULL)
			return err_set(e, ERR_INVALID, "%s %s: an ECDSA key on a curve other than P-256, "
			    "P-384 or P-521", what, name);
		return 0;
	case EVP_PKEY_RSA: {
		int bits = EVP_PKEY_get_bits(pkey);
		if (bits < 2048 || bits > 4096)
			return err_set(e, ERR_INVALID, "%s %s: an RSA key of %d bits (2048 to 4096 accepted)",
			    what, name, bits);
		return 0;
	}
	case EVP_PKEY_ED25519:
		return 0;
	default:
		return err_set(e, ERR_INVALID, "%s %s: unsupported key type (ECDSA P-256/P-384/P-521, "
		    "RSA or Ed25519 accepted)", what, name);
	}
}

int oci_keyring_add_pem(struct oci_keyring *k, const char *name, const char *pem, size_t len,
    struct err *e)
{
	BIO *bio;
	EVP_PKEY *pkey;
	struct oci_key *grown;

	if (k->n >= OCI_SIG_MAX_KEYS)
		return err_set(e, ERR_LIMIT, "public key %s: more than %d keys", name, OCI_SIG_MAX_KEYS);
	if (len > 64 * 1024 || len > (size_t)INT32_MAX)
		return err_set(e, ERR_INVALID, "public key %s: larger than 64 KiB", name);
	if (memmem(pem, len, "-----BEGIN PUBLIC KEY-----", 26) == NULL)
		return err_set(e, ERR_INVALID, "public key %s: no PEM \"PUBLIC KEY\" block (cosign.pub "
		    "format: PKIX SubjectPublicKeyInfo)", name);
	bio = BIO_new_mem_buf(pem, (int)len);
	if (bio == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	pkey = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	BIO_free(bio);
	ERR_clear_error();
	if (pkey == NULL)
		return err_set(e, ERR_INVALID, "public key %s: the PEM \"PUBLIC KEY\" block does not parse",
		    name);
	if (key_type_ok("public key", name, pkey, e) < 0) {
		EVP_PKEY_free(pkey);
		return -1;
	}
	grown = realloc(k->keys, (k->n + 1) * sizeof(*grown));
	if (grown == NULL || (name = strdup(name)) == NULL) {
		if (grown != NULL)
			k->keys = grown;
		EVP_PKEY_free(pkey);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	k->keys = grown;
	k->keys[k->n].name = (char *)name;
	k->keys[k->n].pkey = pkey;
	k->n++;
	return 0;
}

void oci_keyring_names(const struct oci_keyring *k, char *out, size_t len)
{
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; k != NULL && i < k->n && used + 1 < len; i++) {
		int n = snprintf(out + used, len - used, "%s%s", i ? ", " : "", k->keys[i].name);
		if (n < 0)
			break;
		used += (size_t)n < len - used ? (size_t)n : len - used - 1;
	}
}

/* The hashes to try for a key, NULL-terminated (a lone NULL entry means
 * "no digest": Ed25519 signs the message). */
static int key_hashes(EVP_PKEY *pkey, const EVP_MD *mds[3])
{
	const char *curve;

	mds[0] = mds[1] = mds[2] = NULL;
	switch (EVP_PKEY_get_base_id(pkey)) {
	case EVP_PKEY_ED25519:
		return 1;
	case EVP_PKEY_EC:
		curve = ec_curve(pkey);
		if (str_eq(curve, "P-384")) {
			mds[0] = EVP_sha384();
			mds[1] = EVP_sha256();
			return 2;
		}
		if (str_eq(curve, "P-521")) {
			mds[0] = EVP_sha512();
			mds[1] = EVP_sha256();
			return 2;
		}
		mds[0] = EVP_sha256();
		return 1;
	default:
		mds[0] = EVP_sha256();
		return 1;
	}
}

static int verify_one(EVP_PKEY *pkey, const EVP_MD *md, const unsigned char *data, size_t len,
    const unsigned char *sig, size_t siglen)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = 0;

	if (ctx != NULL && EVP_DigestVerifyInit(ctx, NULL, md, NULL, pkey) == 1)
		ok = EVP_DigestVerify(ctx, sig, siglen, data, len) == 1;
	EVP_MD_CTX_free(ctx);
	ERR_clear_error();
	return ok;
}

/* r||s of an ECDSA signature as DER, malloc'd; NULL when sig is not the
 * curve's P1363 length. */
static unsigned char *p1363_to_der(EVP_PKEY *pkey, const unsigned char *sig, size_t siglen,
    size_t *der_len)
{
	int bits = EVP_PKEY_get_bits(pkey);
	size_t half = ((size_t)bits + 7) / 8;
	ECDSA_SIG *es;
	BIGNUM *r, *s;
	unsigned char *der = NULL;
	int n;

	if (bits <= 0 || siglen != 2 * half)
		return NULL;
	es = ECDSA_SIG_new();
	r = BN_bin2bn(sig, (int)half, NULL);
	s = BN_bin2bn(sig + half, (int)half, NULL);
	if (es == NULL || r == NULL || s == NULL || ECDSA_SIG_set0(es, r, s) != 1) {
		BN_free(r);
		BN_free(s);
		ECDSA_SIG_free(es);
		return NULL;
	}
	n = i2d_ECDSA_SIG(es, &der);
	ECDSA_SIG_free(es);
	if (n <= 0)
		return NULL;
	*der_len = (size_t)n;
	return der;
}

static int key_verifies(EVP_PKEY *pkey, const unsigned char *data, size_t len,
    const unsigned char *sig, size_t siglen)
{
	const EVP_MD *mds[3];
	int nmd = key_hashes(pkey, mds);
	unsigned char *der = NULL;
	size_t der_len = 0;
	int ok = 0;

	if (EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC)
		der = p1363_to_der(pkey, sig, siglen, &der_len);
	for (int i = 0; i < nmd && !ok; i++) {
		ok = verify_one(pkey, mds[i], data, len, sig, siglen);
		if (!ok && der != NULL)
			ok = verify_one(pkey, mds[i], data, len, der, der_len);
	}
	OPENSSL_free(der);
	return ok;
}

const char *oci_keyring_verify(const struct oci_keyring *k, const unsigned char *data, size_t len,
    const unsigned char *sig, size_t siglen)
{
	if (k == NULL || siglen == 0)
		return NULL;
	for (size_t i = 0; i < k->n; i++)
		if (key_verifies(k->keys[i].pkey, data, len, sig, siglen))
			return k->keys[i].name;
	return NULL;
}

unsigned char *oci_dsse_pae(const char *type, const unsigned char *body, size_t body_len,
    size_t *out_len)
{
	size_t tlen = strlen(type);
	size_t cap = tlen + body_len + 64;
	unsigned char *out = malloc(cap);
	int head;

	if (out == NULL)
		return NULL;
	head = snprintf((char *)out, cap, "DSSEv1 %zu %s %zu ", tlen, type, body_len);
	if (head < 0 || (size_t)head + body_len >= cap) {
		free(out);
		return NULL;
	}
	if (body_len > 0)
		memcpy(out + head, body, body_len);
	*out_len = (size_t)head + body_len;
	return out;
}

int oci_sig_b64_decode(const char *in, unsigned char **out, size_t *out_len, struct err *e)
{
	size_t len = strlen(in);
	char *std = malloc(len + 1);
	int rc;

	if (std == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	for (size_t i = 0; i <= len; i++)
		std[i] = in[i] == '-' ? '+' : in[i] == '_' ? '/' : in[i];
	rc = base64_decode(std, len, out, out_len, e);
	free(std);
	return rc;
}

/* ---- signing ---- */

static int password_cb(char *buf, int size, int rwflag, void *ud)
{
	const char *pw = ud;
	size_t n;

	(void)rwflag;
	if (pw == NULL || size <= 0)
		return 0;
	n = strlen(pw);
	if (n > (size_t)size)
		n = (size_t)size;
	memcpy(buf, pw, n);
	return (int)n;
}

struct oci_signer *oci_signer_from_pem(const char *name, const char *pem, size_t len,
    const char *password, struct err *e)
{
	struct oci_signer *s;
	EVP_PKEY *pkey;
	BIO *bio;

	if (memmem(pem, len, "SIGSTORE PRIVATE KEY-----", 25) != NULL ||
	    memmem(pem, len, "COSIGN PRIVATE KEY-----", 23) != NULL) {
		err_set(e, ERR_UNSUPPORTED, "signing key %s: cosign's encrypted key format (scrypt + "
		    "secretbox) is not read; give a PEM key OpenSSL reads (\"PRIVATE KEY\", \"EC PRIVATE "
		    "KEY\", \"ENCRYPTED PRIVATE KEY\"), the kind `cosign import-key-pair` takes", name);
		return NULL;
	}
	if (len > 64 * 1024) {
		err_set(e, ERR_INVALID, "signing key %s: larger than 64 KiB", name);
		return NULL;
	}
	bio = BIO_new_mem_buf(pem, (int)len);
	if (bio == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	/* The callback, never OpenSSL's terminal prompt: no password means none. */
	pkey = PEM_read_bio_PrivateKey(bio, NULL, password_cb, (void *)password);
	BIO_free(bio);
	ERR_clear_error();
	if (pkey == NULL) {
		err_set(e, ERR_INVALID, "signing key %s: no PEM private key OpenSSL can read%s", name,
		    memmem(pem, len, "ENCRYPTED", 9) != NULL ?
		    " (encrypted: is the password right? it is read from COSIGN_PASSWORD or --sign-key-password-file)" : "");
		return NULL;
	}
	if (key_type_ok("signing key", name, pkey, e) < 0) {
		EVP_PKEY_free(pkey);
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL || (s->name = strdup(name)) == NULL) {
		free(s);
		EVP_PKEY_free(pkey);
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	s->pkey = pkey;
	return s;
}

void oci_signer_free(struct oci_signer *s)
{
	if (s == NULL)
		return;
	EVP_PKEY_free(s->pkey);
	mem_free_all(s->name, s);
}

int oci_signer_sign(const struct oci_signer *s, const unsigned char *data, size_t len,
    unsigned char **sig, size_t *siglen, struct err *e)
{
	const EVP_MD *mds[3];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	size_t n = 0;
	int rc = -1;

	*sig = NULL;
	key_hashes(s->pkey, mds);
	if (ctx == NULL || EVP_DigestSignInit(ctx, NULL, mds[0], NULL, s->pkey) != 1 ||
	    EVP_DigestSign(ctx, NULL, &n, data, len) != 1 || (*sig = malloc(n)) == NULL ||
	    EVP_DigestSign(ctx, *sig, &n, data, len) != 1) {
		free(*sig);
		*sig = NULL;
		err_set(e, ERR_INVALID, "signing key %s: OpenSSL could not sign", s->name);
	} else {
		*siglen = n;
		rc = 0;
	}
	EVP_MD_CTX_free(ctx);
	ERR_clear_error();
	return rc;
}

char *oci_signer_public_pem(const struct oci_signer *s)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data, *out = NULL;
	long n;

	if (bio == NULL)
		return NULL;
	if (PEM_write_bio_PUBKEY(bio, s->pkey) == 1 && (n = BIO_get_mem_data(bio, &data)) > 0 &&
	    (out = malloc((size_t)n + 1)) != NULL) {
		memcpy(out, data, (size_t)n);
		out[n] = '\0';
	}
	BIO_free(bio);
	return out;
}

char *oci_signer_key_hint(const struct oci_signer *s)
{
	unsigned char *der = NULL, md[SHA256_DIGEST_LENGTH];
	int n = i2d_PUBKEY(s->pkey, &der);
	char *hint;

	if (n <= 0)
		return NULL;
	SHA256(der, (size_t)n, md);
	OPENSSL_free(der);
	hint = base64_encode(md, sizeof(md));
	return hint;
}
