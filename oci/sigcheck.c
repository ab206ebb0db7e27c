/*
 * sigcheck.c - what cosign's signature documents must say before a
 * signature counts: the `.sig` manifest and its simple-signing payloads,
 * the referrer manifest, the Sigstore bundle, its DSSE envelope and the
 * in-toto statement inside.  Pure functions over bytes (blobs come from the
 * caller's fetcher), so verify.c only finds documents and every refusal is
 * unit-tested (tests/unit/test_oci_verify.c).
 *
 * The signature is always checked over the exact bytes fetched (no
 * re-serialisation), and only then is the signed JSON read.  Key names are
 * looked up case-sensitively: cosign writes them in lower case, and Go's
 * decoder, which matches case-insensitively and lets a later key win,
 * would read a differently-cased duplicate that cJSON would not, so an
 * object holding both spellings is refused as ambiguous instead.
 */
#include "oci/sig_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base64.h"
#include "base/json_strict.h"
#include "base/str.h"

int oci_sig_transient(enum err_code code)
{
	return code == ERR_NET || code == ERR_HTTP || code == ERR_AUTH || code == ERR_TIMEOUT ||
	    code == ERR_NOMEM || code == ERR_CANCELED || code == ERR_IO;
}

/* A member of obj; json_member refuses two spellings of one name. */
static int member(const cJSON *obj, const char *name, const char *where, const cJSON **out,
    struct err *e)
{
	return json_member(obj, name, where, out, e);
}

/* A member that must be a string: its value, or NULL with e set. */
static const char *string_member(const cJSON *obj, const char *name, const char *where, struct err *e)
{
	const cJSON *it;
	int rc = member(obj, name, where, &it, e);

	if (rc < 0)
		return NULL;
	if (rc > 0 || !cJSON_IsString(it) || it->valuestring == NULL) {
		err_set(e, ERR_REFUSED, "%s has no string \"%s\"", where, name);
		return NULL;
	}
	return it->valuestring;
}

/* A member that must be an object (or array when want_array). */
static const cJSON *typed_member(const cJSON *obj, const char *name, const char *where, int want_array,
    struct err *e)
{
	const cJSON *it;
	int rc = member(obj, name, where, &it, e);

	if (rc < 0)
		return NULL;
	if (rc > 0 || (want_array ? !cJSON_IsArray(it) : !cJSON_IsObject(it))) {
		err_set(e, ERR_REFUSED, "%s has no %s \"%s\"", where, want_array ? "array" : "object", name);
		return NULL;
	}
	return it;
}

static cJSON *parse_object(const char *text, size_t len, const char *what, struct err *e)
{
	cJSON *root = cJSON_ParseWithLength(text, len);

	if (root == NULL || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		err_set(e, ERR_REFUSED, "%s is not a JSON object", what);
		return NULL;
	}
	return root;
}

int oci_sig_check_payload(const char *payload, size_t len, const char *digest, struct err *e)
{
	cJSON *root = parse_object(payload, len, "the simple-signing payload", e);
	const cJSON *critical, *image;
	const char *type, *named;
	int rc = -1;

	if (root == NULL)
		return -1;
	if ((critical = typed_member(root, "critical", "the payload", 0, e)) == NULL ||
	    (type = string_member(critical, "type", "the payload's critical", e)) == NULL)
		goto out;
	if (strcmp(type, OCI_SIG_PAYLOAD_TYPE) != 0) {
		err_set(e, ERR_REFUSED, "the payload's critical.type is \"%.100s\", not \"%s\"", type,
		    OCI_SIG_PAYLOAD_TYPE);
		goto out;
	}
	if ((image = typed_member(critical, "image", "the payload's critical", 0, e)) == NULL ||
	    (named = string_member(image, "docker-manifest-digest", "the payload's critical.image", e)) == NULL)
		goto out;
	if (strcmp(named, digest) != 0) {
		err_set(e, ERR_REFUSED, "the payload names digest %.100s, not the manifest %s that is pulled "
		    "(a signature of another artifact)", named, digest);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(root);
	return rc;
}

/* 1 when one of the statement's subjects has digest.sha256 == hex. */
static int subject_matches(const cJSON *subjects, const char *hex, struct err *e)
{
	const cJSON *s;
	int n = 0;

	cJSON_ArrayForEach(s, subjects) {
		const cJSON *dig, *sha;
		if (++n > OCI_SIG_MAX_SUBJECTS)
			return err_set(e, ERR_REFUSED, "the statement has more than %d subjects",
			    OCI_SIG_MAX_SUBJECTS);
		if (member(s, "digest", "a statement subject", &dig, e) < 0 ||
		    member(dig, "sha256", "a statement subject's digest", &sha, e) < 0)
			return -1;
		if (cJSON_IsString(sha) && str_eq(sha->valuestring, hex))
			return 1;
	}
	return 0;
}

int oci_sig_check_statement(const char *stmt, size_t len, const char *digest, struct err *e)
{
	cJSON *root = parse_object(stmt, len, "the DSSE payload (an in-toto statement)", e);
	const cJSON *subjects;
	const char *type, *pred, *hex = strchr(digest, ':');
	int rc = -1, found;

	if (root == NULL)
		return -1;
	hex = hex ? hex + 1 : digest;
	if ((type = string_member(root, "_type", "the in-toto statement", e)) == NULL)
		goto out;
	if (strcmp(type, OCI_SIG_STATEMENT_V1) != 0 && strcmp(type, OCI_SIG_STATEMENT_V01) != 0) {
		err_set(e, ERR_REFUSED, "the statement's _type is \"%.100s\", not \"%s\"", type,
		    OCI_SIG_STATEMENT_V1);
		goto out;
	}
	if ((pred = string_member(root, "predicateType", "the in-toto statement", e)) == NULL)
		goto out;
	if (strcmp(pred, OCI_SIG_PREDICATE_TYPE) != 0) {
		err_set(e, ERR_REFUSED, "the statement's predicateType is \"%.150s\", not \"%s\" (an "
		    "attestation, not a signature)", pred, OCI_SIG_PREDICATE_TYPE);
		goto out;
	}
	if ((subjects = typed_member(root, "subject", "the in-toto statement", 1, e)) == NULL)
		goto out;
	found = subject_matches(subjects, hex, e);
	if (found < 0)
		goto out;
	if (!found) {
		const cJSON *first = cJSON_GetArrayItem(subjects, 0), *d = NULL, *sha = NULL;
		struct err ignored;
		member(first, "digest", "", &d, &ignored);
		member(d, "sha256", "", &sha, &ignored);
		err_set(e, ERR_REFUSED, "the statement's subject is sha256:%.64s, not the manifest %s that "
		    "is pulled (a signature of another artifact)",
		    cJSON_IsString(sha) && sha->valuestring ? sha->valuestring : "(none)", digest);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(root);
	return rc;
}

static int bundle_type_ok(const char *mt)
{
	return strcmp(mt, OCI_SIG_MT_BUNDLE_V03) == 0 || strcmp(mt, OCI_SIG_MT_BUNDLE_V03_ALT) == 0;
}

/* The envelope's single signature, decoded. */
static int envelope_signature(const cJSON *env, unsigned char **sig, size_t *siglen, struct err *e)
{
	const cJSON *sigs = typed_member(env, "signatures", "the DSSE envelope", 1, e), *one;
	const char *b64;
	int n;

	if (sigs == NULL)
		return -1;
	n = cJSON_GetArraySize(sigs);
	if (n != 1)
		return err_set(e, ERR_REFUSED, "the DSSE envelope has %d signatures (exactly one required)", n);
	one = cJSON_GetArrayItem(sigs, 0);
	if ((b64 = string_member(one, "sig", "the DSSE signature", e)) == NULL)
		return -1;
	if (strlen(b64) > OCI_SIG_MAX_SIG_B64)
		return err_set(e, ERR_REFUSED, "the DSSE signature is longer than %d base64 characters",
		    OCI_SIG_MAX_SIG_B64);
	if (oci_sig_b64_decode(b64, sig, siglen, e) < 0) {
		if (e->code == ERR_NOMEM)
			return -1;
		return err_set(e, ERR_REFUSED, "the DSSE signature is not valid base64");
	}
	return 0;
}

/* Decodes the payload and checks the signature over its PAE. */
static int envelope_verify(const cJSON *env, const struct oci_keyring *k, unsigned char **body,
    size_t *body_len, const char **key, struct err *e)
{
	const char *ptype, *b64;
	unsigned char *sig = NULL, *pae;
	size_t siglen = 0, pae_len = 0;
	char names[256];

	*body = NULL;
	if ((ptype = string_member(env, "payloadType", "the DSSE envelope", e)) == NULL)
		return -1;
	if (strcmp(ptype, OCI_SIG_INTOTO_TYPE) != 0)
		return err_set(e, ERR_REFUSED, "the DSSE payloadType is \"%.100s\", not \"%s\"", ptype,
		    OCI_SIG_INTOTO_TYPE);
	if ((b64 = string_member(env, "payload", "the DSSE envelope", e)) == NULL)
		return -1;
	if (envelope_signature(env, &sig, &siglen, e) < 0)
		return -1;
	if (oci_sig_b64_decode(b64, body, body_len, e) < 0) {
		free(sig);
		return e->code == ERR_NOMEM ? -1 : err_set(e, ERR_REFUSED, "the DSSE payload is not valid base64");
	}
	pae = oci_dsse_pae(ptype, *body, *body_len, &pae_len);
	if (pae == NULL) {
		free(sig);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	*key = oci_keyring_verify(k, pae, pae_len, sig, siglen);
	free(pae);
	free(sig);
	if (*key == NULL) {
		oci_keyring_names(k, names, sizeof(names));
		return err_set(e, ERR_REFUSED, "the DSSE signature does not verify with the key(s) %s "
		    "(signed by another key, or the statement was changed)", names);
	}
	return 0;
}

int oci_sig_check_bundle(const char *bundle, size_t len, const char *digest,
    const struct oci_keyring *k, const char **key, struct err *e)
{
	cJSON *root = parse_object(bundle, len, "the bundle", e);
	const cJSON *env, *msg;
	const char *mt;
	unsigned char *body = NULL;
	size_t body_len = 0;
	int rc = -1;

	*key = NULL;
	if (root == NULL)
		return -1;
	if ((mt = string_member(root, "mediaType", "the bundle", e)) == NULL)
		goto out;
	if (!bundle_type_ok(mt)) {
		err_set(e, ERR_REFUSED, "the bundle's mediaType is \"%.100s\", not \"%s\"", mt,
		    OCI_SIG_MT_BUNDLE_V03);
		goto out;
	}
	if (member(root, "dsseEnvelope", "the bundle", &env, e) < 0 ||
	    member(root, "messageSignature", "the bundle", &msg, e) < 0)
		goto out;
	if (env == NULL || msg != NULL || !cJSON_IsObject(env)) {
		err_set(e, ERR_REFUSED, "the bundle holds %s, not a DSSE envelope (cosign signs images with "
		    "one)", msg != NULL ? "a message signature" : "no dsseEnvelope object");
		goto out;
	}
	if (envelope_verify(env, k, &body, &body_len, key, e) < 0 ||
	    oci_sig_check_statement((const char *)body, body_len, digest, e) < 0) {
		*key = NULL;
		goto out;
	}
	rc = 0;
out:
	free(body);
	cJSON_Delete(root);
	return rc;
}

/* A descriptor's digest and size, checked for presence and shape. */
static int descriptor(const cJSON *d, const char *where, const char **digest, int64_t *size,
    struct err *e)
{
	const cJSON *sz;

	if ((*digest = string_member(d, "digest", where, e)) == NULL)
		return -1;
	if (member(d, "size", where, &sz, e) < 0)
		return -1;
	if (!cJSON_IsNumber(sz) || sz->valuedouble < 0 || sz->valuedouble > 9e15)
		return err_set(e, ERR_REFUSED, "%s has no valid size", where);
	*size = (int64_t)sz->valuedouble;
	return 0;
}

/* One simple-signing layer: fetch, verify, check.  0, or -1 with e. */
static int check_sig_layer(const cJSON *layer, const char *where, const char *digest,
    const struct oci_keyring *k, oci_sig_fetch_fn fetch, void *ud, const char **key, struct err *e)
{
	const cJSON *ann;
	const char *b64, *bdigest;
	int64_t size;
	unsigned char *sig = NULL;
	size_t siglen = 0, plen = 0;
	char *payload = NULL, names[256];
	int rc = -1;

	if (descriptor(layer, where, &bdigest, &size, e) < 0)
		return -1;
	if ((ann = typed_member(layer, "annotations", where, 0, e)) == NULL ||
	    (b64 = string_member(ann, OCI_SIG_ANNOTATION, where, e)) == NULL)
		return -1;
	if (strlen(b64) > OCI_SIG_MAX_SIG_B64)
		return err_set(e, ERR_REFUSED, "%s: the signature is longer than %d base64 characters", where,
		    OCI_SIG_MAX_SIG_B64);
	if (base64_decode(b64, strlen(b64), &sig, &siglen, e) < 0)
		return e->code == ERR_NOMEM ? -1 :
		    err_set(e, ERR_REFUSED, "%s: the signature annotation is not valid base64", where);
	if (size > OCI_SIG_MAX_PAYLOAD) {
		err_set(e, ERR_REFUSED, "%s: the payload is %lld bytes (limit %ld)", where, (long long)size,
		    OCI_SIG_MAX_PAYLOAD);
		goto out;
	}
	if (fetch(ud, bdigest, size, OCI_SIG_MAX_PAYLOAD, &payload, &plen, e) < 0) {
		if (!oci_sig_transient(e->code))
			e->code = ERR_REFUSED;
		err_prefix(e, "%s: the payload", where);
		goto out;
	}
	*key = oci_keyring_verify(k, (const unsigned char *)payload, plen, sig, siglen);
	if (*key == NULL) {
		oci_keyring_names(k, names, sizeof(names));
		err_set(e, ERR_REFUSED, "%s: the signature does not verify with the key(s) %s (signed by "
		    "another key, or the payload was changed)", where, names);
		goto out;
	}
	if (oci_sig_check_payload(payload, plen, digest, e) < 0) {
		*key = NULL;
		err_prefix(e, "%s", where);
		goto out;
	}
	rc = 0;
out:
	free(sig);
	free(payload);
	return rc;
}

int oci_sig_check_simplesigning(const char *manifest, size_t len, const char *digest,
    const struct oci_keyring *k, oci_sig_fetch_fn fetch, void *ud, const char **key, struct err *e)
{
	cJSON *root = parse_object(manifest, len, "the signature manifest", e);
	const cJSON *layers, *layer;
	struct err first = { 0 };
	int idx = 0, tried = 0, rc = -1;

	*key = NULL;
	if (root == NULL)
		return -1;
	if ((layers = typed_member(root, "layers", "the signature manifest", 1, e)) == NULL)
		goto out;
	if (cJSON_GetArraySize(layers) > OCI_SIG_MAX_LAYERS) {
		err_set(e, ERR_REFUSED, "the signature manifest has %d layers (limit %d)",
		    cJSON_GetArraySize(layers), OCI_SIG_MAX_LAYERS);
		goto out;
	}
	cJSON_ArrayForEach(layer, layers) {
		char where[64];
		const char *mt;
		struct err le = { 0 };

		idx++;
		snprintf(where, sizeof(where), "layer %d", idx);
		mt = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(layer, "mediaType")) ?
		    cJSON_GetObjectItemCaseSensitive(layer, "mediaType")->valuestring : "";
		if (strcmp(mt, OCI_SIG_MT_SIMPLESIGNING) != 0)
			continue;
		tried++;
		if (check_sig_layer(layer, where, digest, k, fetch, ud, key, &le) == 0) {
			rc = 0;
			goto out;
		}
		if (oci_sig_transient(le.code)) {
			*e = le;
			goto out;
		}
		if (first.code == ERR_OK)
			first = le;
	}
	if (tried == 0)
		err_set(e, ERR_REFUSED, "the signature manifest has no %s layer", OCI_SIG_MT_SIMPLESIGNING);
	else if (tried == 1)
		*e = first;
	else
		err_set(e, ERR_REFUSED, "none of %d signatures verifies; the first: %s", tried, first.msg);
out:
	cJSON_Delete(root);
	return rc;
}

int oci_sig_check_referrer(const char *manifest, size_t len, const char *digest,
    const struct oci_keyring *k, oci_sig_fetch_fn fetch, void *ud, const char **key, struct err *e)
{
	cJSON *root = parse_object(manifest, len, "the referrer manifest", e);
	const cJSON *subject, *layers, *layer;
	const char *sdigest, *mt, *bdigest;
	int64_t size;
	char *bundle = NULL;
	size_t blen = 0;
	int rc = -1;

	*key = NULL;
	if (root == NULL)
		return -1;
	if ((subject = typed_member(root, "subject", "the referrer manifest", 0, e)) == NULL ||
	    (sdigest = string_member(subject, "digest", "the referrer's subject", e)) == NULL)
		goto out;
	if (strcmp(sdigest, digest) != 0) {
		err_set(e, ERR_REFUSED, "the referrer's subject is %.100s, not the manifest %s that is pulled",
		    sdigest, digest);
		goto out;
	}
	if ((layers = typed_member(root, "layers", "the referrer manifest", 1, e)) == NULL)
		goto out;
	if (cJSON_GetArraySize(layers) != 1) {
		err_set(e, ERR_REFUSED, "the referrer manifest has %d layers (exactly one bundle required)",
		    cJSON_GetArraySize(layers));
		goto out;
	}
	layer = cJSON_GetArrayItem(layers, 0);
	if ((mt = string_member(layer, "mediaType", "the bundle layer", e)) == NULL)
		goto out;
	if (!bundle_type_ok(mt)) {
		err_set(e, ERR_REFUSED, "the referrer's layer is \"%.100s\", not a %s", mt, OCI_SIG_MT_BUNDLE_V03);
		goto out;
	}
	if (descriptor(layer, "the bundle layer", &bdigest, &size, e) < 0)
		goto out;
	if (size > OCI_SIG_MAX_BUNDLE) {
		err_set(e, ERR_REFUSED, "the bundle is %lld bytes (limit %ld)", (long long)size,
		    OCI_SIG_MAX_BUNDLE);
		goto out;
	}
	if (fetch(ud, bdigest, size, OCI_SIG_MAX_BUNDLE, &bundle, &blen, e) < 0) {
		if (!oci_sig_transient(e->code))
			e->code = ERR_REFUSED;
		err_prefix(e, "the bundle");
		goto out;
	}
	rc = oci_sig_check_bundle(bundle, blen, digest, k, key, e);
out:
	free(bundle);
	cJSON_Delete(root);
	return rc;
}
