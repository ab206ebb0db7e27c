/*
 * test_oci_verify.c - cosign signature checks without a registry: keys of
 * every type cosign makes (generated with OpenSSL at test time), DSSE PAE,
 * the simple-signing payload and in-toto statement rules, whole `.sig`
 * manifests and bundle referrers over an in-memory blob store, and every
 * refusal (wrong key, tampered payload, another digest, garbage, limits).
 * The registry side is covered by tests/e2e/test_oci_sign.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "base/base64.h"
#include "base/digest.h"
#include "oci/sig_internal.h"

#define TARGET "sha256:9c5079bfbe38c3924ece50d8ce9fe4a3df2dc1160a7cd92e2c5ab6d731cdc0ed"
#define OTHER  "sha256:1111111111111111111111111111111111111111111111111111111111111111"

/* ---- keys ---- */

struct keypair {
	char *priv;   /* PEM PRIVATE KEY */
	char *pub;    /* PEM PUBLIC KEY */
};

static char *bio_text(BIO *b)
{
	char *data, *out;
	long n = BIO_get_mem_data(b, &data);

	out = malloc((size_t)n + 1);
	memcpy(out, data, (size_t)n);
	out[n] = '\0';
	return out;
}

static struct keypair make_key(const char *type, const char *curve, unsigned bits)
{
	EVP_PKEY *pkey = curve ? EVP_PKEY_Q_keygen(NULL, NULL, type, curve) :
	    bits ? EVP_PKEY_Q_keygen(NULL, NULL, type, (size_t)bits) : EVP_PKEY_Q_keygen(NULL, NULL, type);
	BIO *b1 = BIO_new(BIO_s_mem()), *b2 = BIO_new(BIO_s_mem());
	struct keypair k;

	assert_non_null(pkey);
	assert_int_equal(PEM_write_bio_PrivateKey(b1, pkey, NULL, NULL, 0, NULL, NULL), 1);
	assert_int_equal(PEM_write_bio_PUBKEY(b2, pkey), 1);
	k.priv = bio_text(b1);
	k.pub = bio_text(b2);
	BIO_free(b1);
	BIO_free(b2);
	EVP_PKEY_free(pkey);
	return k;
}

static void key_free(struct keypair *k)
{
	free(k->priv);
	free(k->pub);
}

static struct oci_keyring *ring_of(const char *name, const char *pub)
{
	struct oci_keyring *r = oci_keyring_new();
	struct err e;

	assert_int_equal(oci_keyring_add_pem(r, name, pub, strlen(pub), &e), 0);
	return r;
}

static char *sign_b64(const char *priv, const void *data, size_t len)
{
	struct err e;
	struct oci_signer *s = oci_signer_from_pem("k", priv, strlen(priv), NULL, &e);
	unsigned char *sig;
	size_t siglen;
	char *b64;

	assert_non_null(s);
	assert_int_equal(oci_signer_sign(s, data, len, &sig, &siglen, &e), 0);
	b64 = base64_encode(sig, siglen);
	free(sig);
	oci_signer_free(s);
	return b64;
}

/* ---- an in-memory registry of blobs ---- */

struct blob { char digest[DIGEST_STR_MAX]; char *data; size_t len; };
struct store { struct blob b[8]; int n; int transient; };

static const char *store_put(struct store *s, const char *data, size_t len)
{
	struct digest d;
	struct blob *b = &s->b[s->n++];

	digest_bytes(DIGEST_SHA256, data, len, &d);
	digest_format(&d, b->digest, sizeof(b->digest));
	b->data = malloc(len + 1);
	memcpy(b->data, data, len);
	b->data[len] = '\0';
	b->len = len;
	return b->digest;
}

static void store_free(struct store *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->b[i].data);
}

/* As verify.c's fetcher: size limit, then the digest of the bytes. */
static int store_fetch(void *ud, const char *digest, int64_t size, int64_t max, char **out,
    size_t *out_len, struct err *e)
{
	struct store *s = ud;
	struct digest want, got;

	if (s->transient)
		return err_set(e, ERR_NET, "connection refused");
	if (size > max)
		return err_set(e, ERR_LIMIT, "too big");
	for (int i = 0; i < s->n; i++) {
		if (strcmp(s->b[i].digest, digest) != 0)
			continue;
		assert_int_equal(digest_parse(digest, &want, e), 0);
		digest_bytes(DIGEST_SHA256, s->b[i].data, s->b[i].len, &got);
		if (!digest_equal(&want, &got))
			return err_set(e, ERR_DIGEST, "blob %s: digest mismatch", digest);
		*out = malloc(s->b[i].len + 1);
		memcpy(*out, s->b[i].data, s->b[i].len + 1);
		*out_len = s->b[i].len;
		return 0;
	}
	return err_set(e, ERR_REFUSED, "blob %s: HTTP 404", digest);
}

/* A `.sig` manifest with one simple-signing layer. */
static char *sig_manifest(const char *pdigest, size_t psize, const char *sig_b64)
{
	char *m;

	assert_true(asprintf(&m, "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_MANIFEST "\","
	    "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"size\":2,"
	    "\"digest\":\"" OTHER "\"},\"layers\":[{\"mediaType\":\"" OCI_SIG_MT_SIMPLESIGNING "\","
	    "\"size\":%zu,\"digest\":\"%s\",\"annotations\":{\"" OCI_SIG_ANNOTATION "\":\"%s\"}}]}",
	    psize, pdigest, sig_b64) > 0);
	return m;
}

struct sig_case {
	struct keypair key;
	struct store st;
	char *payload, *sig, *manifest;
};

/* A correctly signed payload for digest, in a store, with its manifest. */
static void sig_case_make(struct sig_case *c, const char *names)
{
	const char *pd;

	memset(c, 0, sizeof(*c));
	c->key = make_key("EC", "P-256", 0);
	c->payload = oci_sig_payload_json("127.0.0.1:5000/team/app", names);
	c->sig = sign_b64(c->key.priv, c->payload, strlen(c->payload));
	pd = store_put(&c->st, c->payload, strlen(c->payload));
	c->manifest = sig_manifest(pd, strlen(c->payload), c->sig);
}

static void sig_case_free(struct sig_case *c)
{
	key_free(&c->key);
	store_free(&c->st);
	free(c->payload);
	free(c->sig);
	free(c->manifest);
}

static int check_sig(struct sig_case *c, const char *pub, struct err *e)
{
	struct oci_keyring *r = ring_of("cosign.pub", pub);
	const char *key = NULL;
	int rc = oci_sig_check_simplesigning(c->manifest, strlen(c->manifest), TARGET, r, store_fetch,
	    &c->st, &key, e);

	if (rc == 0)
		assert_string_equal(key, "cosign.pub");
	oci_keyring_free(r);
	return rc;
}

static void assert_refused(int rc, const struct err *e, const char *needle)
{
	assert_int_equal(rc, -1);
	assert_int_equal(e->code, ERR_REFUSED);
	if (strstr(e->msg, needle) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", e->msg, needle);
}

/* ---- tests ---- */

static void pae_is_dsse_v1(void **state)
{
	size_t n;
	unsigned char *p = oci_dsse_pae("http://example.com/HelloWorld", (const unsigned char *)"hello world",
	    11, &n);

	(void)state;
	assert_int_equal(n, strlen("DSSEv1 29 http://example.com/HelloWorld 11 hello world"));
	assert_memory_equal(p, "DSSEv1 29 http://example.com/HelloWorld 11 hello world", n);
	free(p);
	p = oci_dsse_pae(OCI_SIG_INTOTO_TYPE, (const unsigned char *)"", 0, &n);
	assert_memory_equal(p, "DSSEv1 28 application/vnd.in-toto+json 0 ", n);
	free(p);
}

static void every_cosign_key_type_signs_and_verifies(void **state)
{
	struct keypair keys[] = {
		make_key("EC", "P-256", 0), make_key("EC", "P-384", 0), make_key("EC", "P-521", 0),
		make_key("RSA", NULL, 2048), make_key("ED25519", NULL, 0),
	};
	const char *msg = "payload bytes";

	(void)state;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		struct oci_keyring *r = ring_of("k.pub", keys[i].pub);
		struct err e;
		struct oci_signer *s = oci_signer_from_pem("k", keys[i].priv, strlen(keys[i].priv), NULL, &e);
		unsigned char *sig;
		size_t siglen;

		assert_non_null(s);
		assert_int_equal(oci_signer_sign(s, (const unsigned char *)msg, strlen(msg), &sig, &siglen, &e), 0);
		assert_string_equal(oci_keyring_verify(r, (const unsigned char *)msg, strlen(msg), sig, siglen), "k.pub");
		assert_null(oci_keyring_verify(r, (const unsigned char *)"payload bytez", strlen(msg), sig, siglen));
		sig[siglen / 2] ^= 1;
		assert_null(oci_keyring_verify(r, (const unsigned char *)msg, strlen(msg), sig, siglen));
		free(sig);
		oci_signer_free(s);
		oci_keyring_free(r);
		key_free(&keys[i]);
	}
}

/* sigstore accepts IEEE P1363 r||s as well as DER; so do we. */
static void ecdsa_p1363_signature_verifies(void **state)
{
	struct keypair k = make_key("EC", "P-256", 0);
	struct oci_keyring *r = ring_of("k.pub", k.pub);
	struct err e;
	struct oci_signer *s = oci_signer_from_pem("k", k.priv, strlen(k.priv), NULL, &e);
	unsigned char *der, raw[64];
	const unsigned char *p;
	size_t len;
	ECDSA_SIG *es;

	(void)state;
	assert_int_equal(oci_signer_sign(s, (const unsigned char *)"m", 1, &der, &len, &e), 0);
	p = der;
	es = d2i_ECDSA_SIG(NULL, &p, (long)len);
	assert_non_null(es);
	assert_int_equal(BN_bn2binpad(ECDSA_SIG_get0_r(es), raw, 32), 32);
	assert_int_equal(BN_bn2binpad(ECDSA_SIG_get0_s(es), raw + 32, 32), 32);
	assert_string_equal(oci_keyring_verify(r, (const unsigned char *)"m", 1, raw, 64), "k.pub");
	assert_null(oci_keyring_verify(r, (const unsigned char *)"n", 1, raw, 64));
	ECDSA_SIG_free(es);
	free(der);
	oci_signer_free(s);
	oci_keyring_free(r);
	key_free(&k);
}

static void keyring_refuses_unusable_keys(void **state)
{
	struct keypair weak = make_key("RSA", NULL, 1024), k1 = make_key("EC", "secp256k1", 0);
	struct keypair good = make_key("EC", "P-256", 0);
	struct oci_keyring *r = oci_keyring_new();
	struct err e;

	(void)state;
	assert_int_equal(oci_keyring_add_pem(r, "weak.pub", weak.pub, strlen(weak.pub), &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_non_null(strstr(e.msg, "weak.pub"));
	assert_non_null(strstr(e.msg, "1024 bits"));
	assert_int_equal(oci_keyring_add_pem(r, "k1.pub", k1.pub, strlen(k1.pub), &e), -1);
	assert_non_null(strstr(e.msg, "curve"));
	assert_int_equal(oci_keyring_add_pem(r, "priv.pub", good.priv, strlen(good.priv), &e), -1);
	assert_non_null(strstr(e.msg, "PUBLIC KEY"));
	const char *garbage = "-----BEGIN PUBLIC KEY-----\nnot base64 at all!\n-----END PUBLIC KEY-----\n";
	assert_int_equal(oci_keyring_add_pem(r, "bad.pub", garbage, strlen(garbage), &e), -1);
	assert_non_null(strstr(e.msg, "does not parse"));
	assert_int_equal(oci_keyring_count(r), 0);
	assert_int_equal(oci_keyring_add_pem(r, "good.pub", good.pub, strlen(good.pub), &e), 0);
	assert_int_equal(oci_keyring_count(r), 1);
	oci_keyring_free(r);
	key_free(&weak);
	key_free(&k1);
	key_free(&good);
}

static void signer_key_formats(void **state)
{
	struct keypair k = make_key("EC", "P-256", 0);
	const char *cosign = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJr\n"
	    "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
	EVP_PKEY *pkey;
	BIO *in = BIO_new_mem_buf(k.priv, -1), *out = BIO_new(BIO_s_mem());
	struct oci_signer *s;
	struct err e;
	char *enc;

	(void)state;
	s = oci_signer_from_pem("cosign.key", cosign, strlen(cosign), "pw", &e);
	assert_null(s);
	assert_int_equal(e.code, ERR_UNSUPPORTED);
	assert_non_null(strstr(e.msg, "cosign.key"));
	/* An encrypted PKCS#8 key: the right password opens it, a wrong one
	 * (or none) is refused without the password in the message. */
	pkey = PEM_read_bio_PrivateKey(in, NULL, NULL, NULL);
	assert_int_equal(PEM_write_bio_PKCS8PrivateKey(out, pkey, EVP_aes_256_cbc(), NULL, 0, NULL,
	    (void *)"s3cret-pw"), 1);
	enc = bio_text(out);
	s = oci_signer_from_pem("enc.key", enc, strlen(enc), "s3cret-pw", &e);
	assert_non_null(s);
	oci_signer_free(s);
	assert_null(oci_signer_from_pem("enc.key", enc, strlen(enc), "wrong-pw", &e));
	assert_null(strstr(e.msg, "wrong-pw"));
	assert_non_null(strstr(e.msg, "password"));
	assert_null(oci_signer_from_pem("enc.key", enc, strlen(enc), NULL, &e));
	free(enc);
	EVP_PKEY_free(pkey);
	BIO_free(in);
	BIO_free(out);
	key_free(&k);
}

static void payload_rules(void **state)
{
	struct err e;
	char *good = oci_sig_payload_json("r/x", TARGET), *other = oci_sig_payload_json("r/x", OTHER);
	const char *cases[][2] = {
		{ "not json", "not a JSON object" },
		{ "[1,2]", "not a JSON object" },
		{ "{\"optional\":null}", "no object \"critical\"" },
		{ "{\"critical\":{\"type\":\"something else\",\"image\":{\"docker-manifest-digest\":\"" TARGET
		  "\"}}}", "critical.type" },
		{ "{\"critical\":{\"type\":\"" OCI_SIG_PAYLOAD_TYPE "\"}}", "no object \"image\"" },
		/* Go would read this spelling; we refuse it instead of guessing. */
		{ "{\"critical\":{\"type\":\"" OCI_SIG_PAYLOAD_TYPE "\",\"image\":{\"Docker-manifest-digest\":\""
		  TARGET "\"}}}", "no string \"docker-manifest-digest\"" },
		{ "{\"critical\":{\"type\":\"" OCI_SIG_PAYLOAD_TYPE "\",\"image\":{\"docker-manifest-digest\":\""
		  TARGET "\",\"Docker-Manifest-Digest\":\"" OTHER "\"}}}", "ambiguous" },
		{ "{\"critical\":{\"type\":\"" OCI_SIG_PAYLOAD_TYPE "\",\"image\":{\"docker-manifest-digest\":\""
		  "SHA256:9C5079BFBE38C3924ECE50D8CE9FE4A3DF2DC1160A7CD92E2C5AB6D731CDC0ED\"}}}", "names digest" },
	};

	(void)state;
	assert_int_equal(oci_sig_check_payload(good, strlen(good), TARGET, &e), 0);
	assert_refused(oci_sig_check_payload(other, strlen(other), TARGET, &e), &e, "names digest " OTHER);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_refused(oci_sig_check_payload(cases[i][0], strlen(cases[i][0]), TARGET, &e), &e, cases[i][1]);
	free(good);
	free(other);
}

#define HEX "9c5079bfbe38c3924ece50d8ce9fe4a3df2dc1160a7cd92e2c5ab6d731cdc0ed"
#define STMT(type, subj, pred) "{\"_type\":\"" type "\",\"subject\":[{\"name\":\"r/x\",\"digest\":" \
	"{\"sha256\":\"" subj "\"}}],\"predicateType\":\"" pred "\",\"predicate\":{}}"

static void statement_rules(void **state)
{
	struct err e;
	const char *good = STMT(OCI_SIG_STATEMENT_V1, HEX, OCI_SIG_PREDICATE_TYPE);
	const char *cases[][2] = {
		{ STMT(OCI_SIG_STATEMENT_V1, "1111111111111111111111111111111111111111111111111111111111111111",
		  OCI_SIG_PREDICATE_TYPE), "subject is sha256:1111" },
		{ STMT(OCI_SIG_STATEMENT_V1, HEX, "https://spdx.dev/Document"), "predicateType" },
		{ STMT("https://example.com/Other", HEX, OCI_SIG_PREDICATE_TYPE), "_type" },
		{ "{\"_type\":\"" OCI_SIG_STATEMENT_V1 "\",\"predicateType\":\"" OCI_SIG_PREDICATE_TYPE "\"}",
		  "no array \"subject\"" },
		{ "{", "not a JSON object" },
	};

	(void)state;
	assert_int_equal(oci_sig_check_statement(good, strlen(good), TARGET, &e), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_refused(oci_sig_check_statement(cases[i][0], strlen(cases[i][0]), TARGET, &e), &e,
		    cases[i][1]);
}

static void sig_manifest_verifies(void **state)
{
	struct sig_case c;
	struct err e;

	(void)state;
	sig_case_make(&c, TARGET);
	assert_int_equal(check_sig(&c, c.key.pub, &e), 0);
	sig_case_free(&c);
}

static void sig_manifest_refusals(void **state)
{
	struct sig_case c;
	struct keypair wrong = make_key("EC", "P-256", 0);
	struct err e;
	char *m;

	(void)state;
	/* A wrong key. */
	sig_case_make(&c, TARGET);
	assert_refused(check_sig(&c, wrong.pub, &e), &e, "does not verify with the key(s) cosign.pub");
	/* A payload naming another digest (a signature copied from another tag). */
	sig_case_free(&c);
	sig_case_make(&c, OTHER);
	assert_refused(check_sig(&c, c.key.pub, &e), &e, "names digest " OTHER);
	sig_case_free(&c);
	/* A tampered payload blob under its old digest: the fetch refuses it. */
	sig_case_make(&c, TARGET);
	c.st.b[0].data[20] ^= 1;
	assert_refused(check_sig(&c, c.key.pub, &e), &e, "digest mismatch");
	sig_case_free(&c);
	/* A tampered payload whose descriptor was updated too: the signature fails. */
	sig_case_make(&c, TARGET);
	{
		char *tampered = strdup(c.payload);
		tampered[strlen(tampered) - 3] = 'X';
		const char *pd = store_put(&c.st, tampered, strlen(tampered));
		free(c.manifest);
		c.manifest = sig_manifest(pd, strlen(tampered), c.sig);
		free(tampered);
	}
	assert_refused(check_sig(&c, c.key.pub, &e), &e, "payload was changed");
	/* Bad base64 in the annotation. */
	m = c.manifest;
	c.manifest = sig_manifest(c.st.b[0].digest, strlen(c.payload), "@@not*base64@@");
	assert_refused(check_sig(&c, c.key.pub, &e), &e, "not valid base64");
	free(c.manifest);
	c.manifest = m;
	/* A huge declared payload is not fetched. */
	m = c.manifest;
	c.manifest = sig_manifest(c.st.b[0].digest, (size_t)OCI_SIG_MAX_PAYLOAD + 1, c.sig);
	assert_refused(check_sig(&c, c.key.pub, &e), &e, "limit");
	free(c.manifest);
	c.manifest = m;
	/* A transport error is not a refusal. */
	c.st.transient = 1;
	free(c.manifest);
	c.manifest = sig_manifest(c.st.b[0].digest, strlen(c.payload), c.sig);
	assert_int_equal(check_sig(&c, c.key.pub, &e), -1);
	assert_int_equal(e.code, ERR_NET);
	sig_case_free(&c);
	key_free(&wrong);
}

static void garbage_sig_manifests(void **state)
{
	struct sig_case c;
	struct err e;
	const char *cases[][2] = {
		{ "\x01\x02garbage", "not a JSON object" },
		{ "{\"layers\":\"x\"}", "no array \"layers\"" },
		{ "{\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\"}]}", "no " OCI_SIG_MT_SIMPLESIGNING },
		{ "{\"layers\":[{\"mediaType\":\"" OCI_SIG_MT_SIMPLESIGNING "\",\"digest\":\"" OTHER "\",\"size\":-5}]}",
		  "no valid size" },
		{ "{\"layers\":[{\"mediaType\":\"" OCI_SIG_MT_SIMPLESIGNING "\",\"digest\":\"" OTHER "\",\"size\":5}]}",
		  "no object \"annotations\"" },
		{ "{\"layers\":[{\"mediaType\":\"" OCI_SIG_MT_SIMPLESIGNING "\",\"digest\":\"" OTHER "\",\"size\":5,"
		  "\"annotations\":{}}]}", "no string \"" OCI_SIG_ANNOTATION "\"" },
	};
	char big[16384];
	size_t n = 0;

	(void)state;
	sig_case_make(&c, TARGET);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		free(c.manifest);
		c.manifest = strdup(cases[i][0]);
		assert_refused(check_sig(&c, c.key.pub, &e), &e, cases[i][1]);
	}
	/* More layers than the limit. */
	n += (size_t)snprintf(big + n, sizeof(big) - n, "{\"layers\":[");
	for (int i = 0; i <= OCI_SIG_MAX_LAYERS; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "%s{}", i ? "," : "");
	snprintf(big + n, sizeof(big) - n, "]}");
	free(c.manifest);
	c.manifest = strdup(big);
	assert_refused(check_sig(&c, c.key.pub, &e), &e, "layers (limit");
	sig_case_free(&c);
}

/* ---- bundles ---- */

static char *make_bundle(const char *priv, const char *stmt, int nsigs, const char *ptype)
{
	size_t pae_len;
	unsigned char *pae = oci_dsse_pae(ptype, (const unsigned char *)stmt, strlen(stmt), &pae_len);
	char *sig = sign_b64(priv, pae, pae_len), *payload = base64_encode(stmt, strlen(stmt)), *b;

	assert_true(asprintf(&b, "{\"mediaType\":\"" OCI_SIG_MT_BUNDLE_V03 "\",\"verificationMaterial\":"
	    "{\"publicKey\":{\"hint\":\"x\"},\"tlogEntries\":[]},\"dsseEnvelope\":{\"payload\":\"%s\","
	    "\"payloadType\":\"%s\",\"signatures\":[{\"sig\":\"%s\"}%s%s%s]}}", payload, ptype, sig,
	    nsigs > 1 ? ",{\"sig\":\"" : "", nsigs > 1 ? sig : "", nsigs > 1 ? "\"}" : "") > 0);
	free(pae);
	free(sig);
	free(payload);
	return b;
}

static int check_bundle(const char *b, const char *pub, struct err *e)
{
	struct oci_keyring *r = ring_of("cosign.pub", pub);
	const char *key;
	int rc = oci_sig_check_bundle(b, strlen(b), TARGET, r, &key, e);

	oci_keyring_free(r);
	return rc;
}

static void bundle_rules(void **state)
{
	struct keypair k = make_key("EC", "P-256", 0), wrong = make_key("EC", "P-256", 0);
	const char *stmt = STMT(OCI_SIG_STATEMENT_V1, HEX, OCI_SIG_PREDICATE_TYPE);
	struct err e;
	char *b;

	(void)state;
	b = make_bundle(k.priv, stmt, 1, OCI_SIG_INTOTO_TYPE);
	assert_int_equal(check_bundle(b, k.pub, &e), 0);
	assert_refused(check_bundle(b, wrong.pub, &e), &e, "DSSE signature does not verify");
	/* The statement swapped for another one: the PAE no longer matches. */
	{
		char *other = base64_encode(STMT(OCI_SIG_STATEMENT_V1,
		    "1111111111111111111111111111111111111111111111111111111111111111", OCI_SIG_PREDICATE_TYPE),
		    strlen(stmt));
		char *orig = base64_encode(stmt, strlen(stmt));
		char *at = strstr(b, orig);
		assert_non_null(at);
		memcpy(at, other, strlen(orig));
		assert_refused(check_bundle(b, k.pub, &e), &e, "statement was changed");
		free(other);
		free(orig);
	}
	free(b);
	b = make_bundle(k.priv, stmt, 2, OCI_SIG_INTOTO_TYPE);
	assert_refused(check_bundle(b, k.pub, &e), &e, "2 signatures");
	free(b);
	b = make_bundle(k.priv, stmt, 1, "application/json");
	assert_refused(check_bundle(b, k.pub, &e), &e, "payloadType");
	free(b);
	b = make_bundle(k.priv, STMT(OCI_SIG_STATEMENT_V1, "2222222222222222222222222222222222222222222222222222222222222222",
	    OCI_SIG_PREDICATE_TYPE), 1, OCI_SIG_INTOTO_TYPE);
	assert_refused(check_bundle(b, k.pub, &e), &e, "another artifact");
	free(b);
	const char *msg = "{\"mediaType\":\"" OCI_SIG_MT_BUNDLE_V03 "\",\"messageSignature\":{}}";
	assert_refused(check_bundle(msg, k.pub, &e), &e, "message signature");
	const char *old = "{\"mediaType\":\"application/vnd.dev.sigstore.bundle+json;version=0.1\"}";
	assert_refused(check_bundle(old, k.pub, &e), &e, "mediaType");
	key_free(&k);
	key_free(&wrong);
}

static char *referrer_manifest(const char *subject, const char *bdigest, size_t bsize, int layers,
    const char *mt)
{
	char *m;

	assert_true(asprintf(&m, "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_MANIFEST "\",\"artifactType\":\""
	    OCI_SIG_MT_BUNDLE_V03 "\",\"config\":{\"mediaType\":\"" OCI_SIG_MT_EMPTY "\",\"size\":2,"
	    "\"digest\":\"" OTHER "\"},\"layers\":[{\"mediaType\":\"%s\",\"size\":%zu,\"digest\":\"%s\"}%s],"
	    "\"subject\":{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"size\":10,\"digest\":\"%s\"}}", mt, bsize,
	    bdigest, layers > 1 ? ",{\"mediaType\":\"x\",\"size\":1,\"digest\":\"" OTHER "\"}" : "", subject) > 0);
	return m;
}

static void referrer_rules(void **state)
{
	struct keypair k = make_key("EC", "P-256", 0);
	struct oci_keyring *r = ring_of("cosign.pub", k.pub);
	struct store st = { 0 };
	char *b = make_bundle(k.priv, STMT(OCI_SIG_STATEMENT_V1, HEX, OCI_SIG_PREDICATE_TYPE), 1,
	    OCI_SIG_INTOTO_TYPE), *m;
	const char *bd = store_put(&st, b, strlen(b)), *key;
	struct err e;

	(void)state;
	m = referrer_manifest(TARGET, bd, strlen(b), 1, OCI_SIG_MT_BUNDLE_V03);
	assert_int_equal(oci_sig_check_referrer(m, strlen(m), TARGET, r, store_fetch, &st, &key, &e), 0);
	assert_string_equal(key, "cosign.pub");
	free(m);
	m = referrer_manifest(OTHER, bd, strlen(b), 1, OCI_SIG_MT_BUNDLE_V03);
	assert_refused(oci_sig_check_referrer(m, strlen(m), TARGET, r, store_fetch, &st, &key, &e), &e,
	    "subject is " OTHER);
	free(m);
	m = referrer_manifest(TARGET, bd, strlen(b), 2, OCI_SIG_MT_BUNDLE_V03);
	assert_refused(oci_sig_check_referrer(m, strlen(m), TARGET, r, store_fetch, &st, &key, &e), &e,
	    "2 layers");
	free(m);
	m = referrer_manifest(TARGET, bd, strlen(b), 1, "application/spdx+json");
	assert_refused(oci_sig_check_referrer(m, strlen(m), TARGET, r, store_fetch, &st, &key, &e), &e,
	    "not a");
	free(m);
	m = referrer_manifest(TARGET, bd, (size_t)OCI_SIG_MAX_BUNDLE + 1, 1, OCI_SIG_MT_BUNDLE_V03);
	assert_refused(oci_sig_check_referrer(m, strlen(m), TARGET, r, store_fetch, &st, &key, &e), &e,
	    "limit");
	free(m);
	free(b);
	store_free(&st);
	oci_keyring_free(r);
	key_free(&k);
}

static void payload_json_is_cosigns_layout(void **state)
{
	char *p = oci_sig_payload_json("127.0.0.1:5000/team/app", TARGET);

	(void)state;
	assert_string_equal(p, "{\"critical\":{\"identity\":{\"docker-reference\":\"127.0.0.1:5000/team/app\"},"
	    "\"image\":{\"docker-manifest-digest\":\"" TARGET "\"},\"type\":\"cosign container image signature\"},"
	    "\"optional\":null}");
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pae_is_dsse_v1),
		cmocka_unit_test(every_cosign_key_type_signs_and_verifies),
		cmocka_unit_test(ecdsa_p1363_signature_verifies),
		cmocka_unit_test(keyring_refuses_unusable_keys),
		cmocka_unit_test(signer_key_formats),
		cmocka_unit_test(payload_rules),
		cmocka_unit_test(statement_rules),
		cmocka_unit_test(sig_manifest_verifies),
		cmocka_unit_test(sig_manifest_refusals),
		cmocka_unit_test(garbage_sig_manifests),
		cmocka_unit_test(bundle_rules),
		cmocka_unit_test(referrer_rules),
		cmocka_unit_test(payload_json_is_cosigns_layout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
