/*
 * sign.c - signing a pushed manifest the way `cosign sign --key
 * --tlog-upload=false` does, so the real `cosign verify --key
 * --insecure-ignore-tlog` (and oci_verify) accept it: oci_sign.
 *
 *   simple signing: the payload blob, a placeholder image config listing it,
 *     and the sha256-<hex>.sig manifest whose layer carries the signature
 *     in its annotation; signatures already on that tag are kept.
 *   bundle: an in-toto statement in a DSSE envelope in a Sigstore bundle
 *     v0.3, pushed as a referrer manifest (subject = the signed manifest);
 *     when the registry does not say it indexes referrers (no OCI-Subject
 *     answer), the sha256-<hex> referrers tag index is updated, as
 *     go-containerregistry does for cosign.
 *
 * No transparency log entry is made: the signature is verified offline with
 * the public key, as Flux does for key-based verification.
 */
#include "oci/oci.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/base64.h"
#include "base/clock.h"
#include "base/digest.h"
#include "base/mem.h"
#include "base/str.h"
#include "oci/internal.h"
#include "oci/sig_internal.h"

/* sha256("{}"), the OCI empty descriptor's blob. */
#define EMPTY_DIGEST "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"

char *oci_sig_payload_json(const char *docker_reference, const char *digest)
{
	char *out = NULL;

	/* The byte layout of cosign's (Go encoding/json) payload: fields in
	 * struct order, a nil optional as null. */
	oci_asprintf(&out, "{\"critical\":{\"identity\":{\"docker-reference\":\"%s\"},\"image\":"
	    "{\"docker-manifest-digest\":\"%s\"},\"type\":\"" OCI_SIG_PAYLOAD_TYPE "\"},\"optional\":null}",
	    docker_reference, digest);
	return out;
}

static void digest_of(const void *data, size_t len, char out[DIGEST_STR_MAX])
{
	struct digest d;

	digest_bytes(DIGEST_SHA256, data, len, &d);
	digest_format(&d, out, DIGEST_STR_MAX);
}

/* The layers of an existing .sig manifest worth keeping (simple-signing
 * layers, except one identical to the one being added: same payload and
 * same signature), as a cJSON array.  Another signer's layer has the same
 * payload digest (the payload names only the image) and is kept. */
static cJSON *kept_layers(struct oci_client *c, const char *repo, const char *tag,
    const char *new_digest, const char *new_sig, struct err *e)
{
	struct oci_manifest m;
	char *mdigest = NULL, *body = NULL;
	size_t len = 0;
	cJSON *out = cJSON_CreateArray(), *root, *l;

	if (oci_get_manifest(c, repo, tag, &m, &mdigest, &body, &len, e) < 0) {
		if (oci_sig_transient(e->code)) {
			cJSON_Delete(out);
			return NULL;
		}
		return out;   /* none, or unusable: replaced */
	}
	oci_manifest_free(&m);
	free(mdigest);
	root = cJSON_ParseWithLength(body, len);
	free(body);
	cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(root, "layers")) {
		const cJSON *mt = cJSON_GetObjectItemCaseSensitive(l, "mediaType");
		const cJSON *dg = cJSON_GetObjectItemCaseSensitive(l, "digest");
		const cJSON *sig = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(l, "annotations"), OCI_SIG_ANNOTATION);
		if (!cJSON_IsString(mt) || strcmp(mt->valuestring, OCI_SIG_MT_SIMPLESIGNING) != 0 ||
		    !cJSON_IsString(dg) || !cJSON_IsString(sig))
			continue;
		if (strcmp(dg->valuestring, new_digest) == 0 && strcmp(sig->valuestring, new_sig) == 0)
			continue;
		if (cJSON_GetArraySize(out) < OCI_SIG_MAX_LAYERS - 1)
			cJSON_AddItemToArray(out, cJSON_Duplicate(l, 1));
	}
	cJSON_Delete(root);
	return out;
}

/* The placeholder image config cosign writes: rootfs.diff_ids = the payloads. */
static char *sig_config_json(const cJSON *layers)
{
	cJSON *cfg = cJSON_CreateObject(), *rootfs, *ids, *hist, *l;
	char *out;

	cJSON_AddStringToObject(cfg, "architecture", "");
	cJSON_AddStringToObject(cfg, "created", "0001-01-01T00:00:00Z");
	hist = cJSON_AddArrayToObject(cfg, "history");
	cJSON_AddItemToArray(hist, cJSON_CreateObject());
	cJSON_AddStringToObject(cJSON_GetArrayItem(hist, 0), "created", "0001-01-01T00:00:00Z");
	cJSON_AddStringToObject(cfg, "os", "");
	rootfs = cJSON_AddObjectToObject(cfg, "rootfs");
	cJSON_AddStringToObject(rootfs, "type", "layers");
	ids = cJSON_AddArrayToObject(rootfs, "diff_ids");
	cJSON_ArrayForEach(l, layers)
		cJSON_AddItemToArray(ids, cJSON_CreateString(cJSON_GetObjectItemCaseSensitive(l, "digest")->valuestring));
	cJSON_AddObjectToObject(cfg, "config");
	out = cJSON_PrintUnformatted(cfg);
	cJSON_Delete(cfg);
	return out;
}

static char *sign_b64(const struct oci_signer *s, const void *data, size_t len, struct err *e)
{
	unsigned char *sig = NULL;
	size_t siglen = 0;
	char *b64;

	if (oci_signer_sign(s, data, len, &sig, &siglen, e) < 0)
		return NULL;
	b64 = base64_encode(sig, siglen);
	free(sig);
	if (b64 == NULL)
		err_set(e, ERR_NOMEM, "out of memory");
	return b64;
}

static int sign_simplesigning(struct oci_client *c, const char *scope, const char *repo,
    const char *digest, const char *docker_reference, const struct oci_signer *s, char **where,
    struct err *e)
{
	char tag[80], pdigest[DIGEST_STR_MAX], cdigest[DIGEST_STR_MAX];
	char *payload = oci_sig_payload_json(docker_reference, digest), *b64 = NULL, *cfg = NULL;
	char *manifest = NULL, *mdigest = NULL;
	cJSON *layers = NULL, *layer, *root = NULL;
	int rc = -1;

	snprintf(tag, sizeof(tag), "sha256-%.64s.sig", digest + 7);
	if (payload == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	digest_of(payload, strlen(payload), pdigest);
	if ((b64 = sign_b64(s, payload, strlen(payload), e)) == NULL)
		goto out;
	if ((layers = kept_layers(c, repo, tag, pdigest, b64, e)) == NULL)
		goto out;
	layer = oci_descriptor_json(OCI_SIG_MT_SIMPLESIGNING, pdigest, strlen(payload));
	cJSON_AddStringToObject(cJSON_AddObjectToObject(layer, "annotations"), OCI_SIG_ANNOTATION, b64);
	cJSON_AddItemToArray(layers, layer);
	if ((cfg = sig_config_json(layers)) == NULL)
		goto nomem;
	digest_of(cfg, strlen(cfg), cdigest);
	root = cJSON_CreateObject();
	cJSON_AddNumberToObject(root, "schemaVersion", 2);
	cJSON_AddStringToObject(root, "mediaType", OCI_MT_MANIFEST);
	cJSON_AddItemToObject(root, "config", oci_descriptor_json(OCI_SIG_MT_IMAGE_CONFIG, cdigest, strlen(cfg)));
	cJSON_AddItemToObject(root, "layers", layers);
	layers = NULL;
	if ((manifest = cJSON_PrintUnformatted(root)) == NULL)
		goto nomem;
	if (oci_ensure_blob_mem(c, scope, repo, pdigest, payload, strlen(payload), "signature payload", e) < 0 ||
	    oci_ensure_blob_mem(c, scope, repo, cdigest, cfg, strlen(cfg), "signature config", e) < 0 ||
	    oci_put_manifest(c, scope, repo, tag, OCI_MT_MANIFEST, manifest, &mdigest, NULL, e) < 0)
		goto out;
	if (where != NULL && (*where = strdup(tag)) == NULL)
		goto nomem;
	rc = 0;
	goto out;
nomem:
	err_set(e, ERR_NOMEM, "out of memory");
out:
	free(payload);
	free(b64);
	free(cfg);
	free(manifest);
	free(mdigest);
	cJSON_Delete(layers);
	cJSON_Delete(root);
	return rc;
}

/* The bundle JSON for a signed statement. */
static char *bundle_json(const struct oci_signer *s, const char *statement, struct err *e)
{
	size_t pae_len = 0;
	unsigned char *pae = oci_dsse_pae(OCI_SIG_INTOTO_TYPE, (const unsigned char *)statement,
	    strlen(statement), &pae_len);
	char *sig = NULL, *payload = base64_encode(statement, strlen(statement));
	char *hint = oci_signer_key_hint(s), *out = NULL;
	cJSON *b, *env, *one;

	if (pae == NULL || payload == NULL || hint == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((sig = sign_b64(s, pae, pae_len, e)) == NULL)
		goto out;
	b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "mediaType", OCI_SIG_MT_BUNDLE_V03);
	cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(b, "verificationMaterial"),
	    "publicKey"), "hint", hint);
	env = cJSON_AddObjectToObject(b, "dsseEnvelope");
	cJSON_AddStringToObject(env, "payload", payload);
	cJSON_AddStringToObject(env, "payloadType", OCI_SIG_INTOTO_TYPE);
	one = cJSON_CreateObject();
	/* No keyid: cosign writes none, and sigstore-go skips a signature
	 * whose keyid differs from its verifier's. */
	cJSON_AddStringToObject(one, "sig", sig);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(env, "signatures"), one);
	out = cJSON_PrintUnformatted(b);
	cJSON_Delete(b);
	if (out == NULL)
		err_set(e, ERR_NOMEM, "out of memory");
out:
	free(pae);
	free(payload);
	free(hint);
	free(sig);
	return out;
}

static char *statement_json(const char *docker_reference, const char *digest)
{
	cJSON *st = cJSON_CreateObject(), *subj = cJSON_CreateObject();
	char *out;

	cJSON_AddStringToObject(st, "_type", OCI_SIG_STATEMENT_V1);
	cJSON_AddStringToObject(subj, "name", docker_reference);
	cJSON_AddStringToObject(cJSON_AddObjectToObject(subj, "digest"), "sha256", digest + 7);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(st, "subject"), subj);
	cJSON_AddStringToObject(st, "predicateType", OCI_SIG_PREDICATE_TYPE);
	cJSON_AddObjectToObject(st, "predicate");
	out = cJSON_PrintUnformatted(st);
	cJSON_Delete(st);
	return out;
}

/* Adds the referrer to the sha256-<hex> tag index (kept entries + it). */
static int update_referrers_tag(struct oci_client *c, const char *scope, const char *repo,
    const char *digest, cJSON *entry, struct err *e)
{
	struct oci_manifest m;
	char tag[80], *mdigest = NULL, *body = NULL, *text = NULL, *put_digest = NULL;
	size_t len = 0;
	cJSON *idx = NULL, *list, *d;
	int rc = -1;

	snprintf(tag, sizeof(tag), "sha256-%.64s", digest + 7);
	if (oci_get_manifest(c, repo, tag, &m, &mdigest, &body, &len, e) == 0) {
		oci_manifest_free(&m);
		idx = cJSON_ParseWithLength(body, len);
	} else if (oci_sig_transient(e->code)) {
		return -1;
	}
	free(mdigest);
	free(body);
	list = cJSON_CreateArray();
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(idx, "manifests")) {
		const cJSON *dg = cJSON_GetObjectItemCaseSensitive(d, "digest");
		if (cJSON_IsString(dg) && strcmp(dg->valuestring,
		    cJSON_GetObjectItemCaseSensitive(entry, "digest")->valuestring) != 0 &&
		    cJSON_GetArraySize(list) < 1000)
			cJSON_AddItemToArray(list, cJSON_Duplicate(d, 1));
	}
	cJSON_AddItemToArray(list, cJSON_Duplicate(entry, 1));
	cJSON_Delete(idx);
	idx = cJSON_CreateObject();
	cJSON_AddNumberToObject(idx, "schemaVersion", 2);
	cJSON_AddStringToObject(idx, "mediaType", OCI_MT_INDEX);
	cJSON_AddItemToObject(idx, "manifests", list);
	if ((text = cJSON_PrintUnformatted(idx)) == NULL)
		err_set(e, ERR_NOMEM, "out of memory");
	else if (oci_put_manifest(c, scope, repo, tag, OCI_MT_INDEX, text, &put_digest, NULL, e) == 0)
		rc = 0;
	free(text);
	free(put_digest);
	cJSON_Delete(idx);
	return rc;
}

static int sign_bundle(struct oci_client *c, const char *scope, const char *repo, const char *digest,
    const char *docker_reference, const struct oci_signer *s, char **where, struct err *e)
{
	struct oci_manifest target;
	char *tdigest = NULL, *tbody = NULL, *statement = NULL, *bundle = NULL, *manifest = NULL;
	char *rdigest = NULL, bdigest[DIGEST_STR_MAX], created[32];
	size_t tlen = 0;
	cJSON *root = NULL, *ann, *entry = NULL;
	int rc = -1, acked = 0;

	/* The subject descriptor needs the target's media type and size. */
	if (oci_get_manifest(c, repo, digest, &target, &tdigest, &tbody, &tlen, e) < 0)
		return -1;
	if ((statement = statement_json(docker_reference, digest)) == NULL ||
	    (bundle = bundle_json(s, statement, e)) == NULL)
		goto out;
	digest_of(bundle, strlen(bundle), bdigest);
	clock_format_rfc3339(created, sizeof(created), time(NULL));
	root = cJSON_CreateObject();
	cJSON_AddNumberToObject(root, "schemaVersion", 2);
	cJSON_AddStringToObject(root, "mediaType", OCI_MT_MANIFEST);
	cJSON_AddStringToObject(root, "artifactType", OCI_SIG_MT_BUNDLE_V03);
	cJSON_AddItemToObject(root, "config", oci_descriptor_json(OCI_SIG_MT_EMPTY, EMPTY_DIGEST, 2));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "layers"),
	    oci_descriptor_json(OCI_SIG_MT_BUNDLE_V03, bdigest, strlen(bundle)));
	cJSON_AddItemToObject(root, "subject", oci_descriptor_json(target.media_type, digest, tlen));
	ann = cJSON_AddObjectToObject(root, "annotations");
	cJSON_AddStringToObject(ann, "dev.sigstore.bundle.content", "dsse-envelope");
	cJSON_AddStringToObject(ann, "dev.sigstore.bundle.predicateType", OCI_SIG_PREDICATE_TYPE);
	cJSON_AddStringToObject(ann, "org.opencontainers.image.created", created);
	if ((manifest = cJSON_PrintUnformatted(root)) == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	char mdigest[DIGEST_STR_MAX];
	digest_of(manifest, strlen(manifest), mdigest);
	if (oci_ensure_blob_mem(c, scope, repo, bdigest, bundle, strlen(bundle), "signature bundle", e) < 0 ||
	    oci_ensure_blob_mem(c, scope, repo, EMPTY_DIGEST, "{}", 2, "empty config", e) < 0 ||
	    oci_put_manifest(c, scope, repo, mdigest, OCI_MT_MANIFEST, manifest, &rdigest, &acked, e) < 0)
		goto out;
	if (!acked) {
		entry = oci_descriptor_json(OCI_MT_MANIFEST, rdigest, strlen(manifest));
		cJSON_AddStringToObject(entry, "artifactType", OCI_SIG_MT_BUNDLE_V03);
		cJSON_AddItemToObject(entry, "annotations", cJSON_Duplicate(ann, 1));
		if (update_referrers_tag(c, scope, repo, digest, entry, e) < 0)
			goto out;
	}
	if (where != NULL && (*where = strdup(rdigest)) == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	rc = 0;
out:
	oci_manifest_free(&target);
	mem_free_all(tdigest, tbody, statement, bundle, manifest, rdigest);
	cJSON_Delete(root);
	cJSON_Delete(entry);
	return rc;
}

int oci_sign(struct oci_client *c, const char *repo, const char *manifest_digest,
    const char *docker_reference, const struct oci_signer *s, enum oci_sign_format format,
    char **where, struct err *e)
{
	char *scope;
	int rc;

	if (where != NULL)
		*where = NULL;
	if (!str_has_prefix(manifest_digest, "sha256:") ||
	    strlen(manifest_digest) != 71)
		return err_set(e, ERR_INVALID, "sign %.200s: the manifest digest must be sha256:<64 hex>", repo);
	if ((scope = oci_scope(repo, "pull,push")) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	if (format == OCI_SIGN_BUNDLE)
		rc = sign_bundle(c, scope, repo, manifest_digest, docker_reference, s, where, e);
	else
		rc = sign_simplesigning(c, scope, repo, manifest_digest, docker_reference, s, where, e);
	free(scope);
	if (rc < 0)
		err_prefix(e, "sign %.200s@%s (%s)", repo, manifest_digest,
		    format == OCI_SIGN_BUNDLE ? "sigstore bundle" : "cosign .sig");
	return rc;
}
