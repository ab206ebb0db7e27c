/*
 * verify.c - finding a manifest's cosign signatures in its registry and
 * deciding (with sigcheck.c) whether one of them verifies: oci_verify.
 *
 * Order, as cosign v3 and Flux's OCIRepository: Sigstore bundles attached
 * as OCI 1.1 referrers first (the referrers API; on 404, the referrers tag
 * sha256-<hex>, since registries such as distribution 2.8 have no referrers
 * API), then the legacy sha256-<hex>.sig tag.  Any one verifying signature
 * with any one key is enough.  A registry that cannot be asked (network,
 * auth, 5xx) stops everything with that error: a transient failure is never
 * reported as "unsigned" or "refused".
 *
 * Everything a registry returns here is hostile input: sizes are checked
 * before a download and counted during it, digests after it, and the number
 * of referrers examined is bounded.
 */
#include "oci/oci.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/digest.h"
#include "base/mem.h"
#include "base/str.h"
#include "oci/internal.h"
#include "oci/sig_internal.h"

const char *oci_sig_scheme_name(enum oci_sig_scheme s)
{
	switch (s) {
	case OCI_SIG_SIMPLESIGNING: return "cosign .sig";
	case OCI_SIG_BUNDLE: return "sigstore bundle";
	default: return "none";
	}
}

void oci_verify_result_free(struct oci_verify_result *r)
{
	if (r == NULL)
		return;
	mem_free_all(r->key_name, r->signature);
	memset(r, 0, sizeof(*r));
}

struct fetch_ctx {
	struct oci_client *c;
	const char *repo;
};

/* oci_sig_fetch_fn over the registry: GET the blob, at most max bytes, and
 * check its size and digest. */
static int fetch_blob(void *ud, const char *digest, int64_t size, int64_t max, char **out,
    size_t *out_len, struct err *e)
{
	struct fetch_ctx *f = ud;
	struct http_response r = { 0 };
	struct http_opts o = *oci_client_http(f->c);
	struct digest want, got;
	char *url = NULL, *scope, what[300];
	struct err de;
	int rc = -1;

	*out = NULL;
	snprintf(what, sizeof(what), "blob %.150s", digest);
	if (digest_parse(digest, &want, &de) < 0)
		return err_set(e, ERR_REFUSED, "%s: not a valid digest", what);
	if (size < 0 || size > max)
		return err_set(e, ERR_LIMIT, "%s: declared size %lld outside 0..%lld", what, (long long)size,
		    (long long)max);
	scope = oci_scope(f->repo, "pull");
	if (scope == NULL || oci_asprintf(&url, "%s/v2/%s/blobs/%s", oci_client_base(f->c), f->repo,
	    digest) < 0) {
		free(scope);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	o.max_bytes = max;
	struct http_request req = { .url = url };
	if (oci_request(f->c, scope, &o, &req, &r, e) < 0) {
		if (e->code == ERR_LIMIT)
			err_set(e, ERR_LIMIT, "%s: larger than the limit of %lld bytes", what, (long long)max);
		else
			err_prefix(e, "%s", what);
		goto out;
	}
	if (r.status != 200) {
		oci_status_error(e, what, &r);
		if (e->code == ERR_NOTFOUND)
			e->code = ERR_REFUSED;   /* a signature that names a missing blob is broken */
		goto out;
	}
	digest_bytes(want.algo, r.body, r.body_len, &got);
	if (!digest_equal(&want, &got) || (int64_t)r.body_len != size) {
		err_set(e, ERR_DIGEST, "%s: the bytes (%zu) do not match the descriptor's digest and size %lld",
		    what, r.body_len, (long long)size);
		goto out;
	}
	*out = r.body;
	*out_len = r.body_len;
	r.body = NULL;
	rc = 0;
out:
	http_response_free(&r);
	free(url);
	free(scope);
	return rc;
}

/* A manifest's raw bytes by tag or digest (digest-checked by the client).
 * 1 when there is none (404), 0 found, -1 error. */
static int fetch_manifest(struct oci_client *c, const char *repo, const char *reference,
    char **body, size_t *len, struct err *e)
{
	struct oci_manifest m;
	char *digest = NULL;

	*body = NULL;
	if (oci_get_manifest(c, repo, reference, &m, &digest, body, len, e) < 0)
		return e->code == ERR_NOTFOUND ? 1 : -1;
	oci_manifest_free(&m);
	free(digest);
	return 0;
}

/* How one scheme went. */
struct scheme_try {
	int found;           /* signature documents of this scheme exist */
	int failed;          /* how many of them were refused */
	struct err first;    /* the first refusal */
	char where[300];     /* of the first refusal */
};

static void note_refusal(struct scheme_try *t, const char *where, const struct err *e)
{
	if (t->failed++ == 0) {
		t->first = *e;
		snprintf(t->where, sizeof(t->where), "%s", where);
	}
}

static int set_result(struct oci_verify_result *res, enum oci_sig_scheme scheme, const char *key,
    const char *where, struct err *e)
{
	if (res == NULL)
		return 0;
	res->scheme = scheme;
	res->key_name = strdup(key);
	res->signature = strdup(where);
	if (res->key_name == NULL || res->signature == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	return 0;
}

/* The referrers index: the API's answer, else the referrers tag.  0 with
 * *body (possibly NULL: no referrers), or -1 for a transport error. */
static int referrers_index(struct oci_client *c, const char *repo, const char *digest,
    char **body, size_t *len, char *source, size_t source_len, struct err *e)
{
	static const char *const hdrs[] = { "Accept: " OCI_MT_INDEX, NULL };
	struct http_response r = { 0 };
	struct http_opts o = *oci_client_http(c);
	char *url = NULL, *scope = oci_scope(repo, "pull"), tag[80], what[300];
	int rc;

	*body = NULL;
	snprintf(what, sizeof(what), "referrers of %.100s", digest);
	if (scope == NULL || oci_asprintf(&url, "%s/v2/%s/referrers/%s", oci_client_base(c), repo,
	    digest) < 0) {
		free(scope);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	o.max_bytes = OCI_MANIFEST_MAX;
	struct http_request req = { .url = url, .headers = hdrs };
	rc = oci_request(c, scope, &o, &req, &r, e);
	free(url);
	free(scope);
	if (rc < 0) {
		if (e->code == ERR_LIMIT)
			return 0;   /* an index past the limit: treated as none, like an invalid one */
		err_prefix(e, "%s", what);
		return -1;
	}
	if (r.status == 200) {
		snprintf(source, source_len, "the referrers API");
		*body = r.body;
		*len = r.body_len;
		r.body = NULL;
		http_response_free(&r);
		return 0;
	}
	/* 404 is what the spec says a registry without the API answers; some
	 * answer 400, 405 or 501 instead. */
	if (r.status != 404 && r.status != 400 && r.status != 405 && r.status != 501) {
		oci_status_error(e, what, &r);
		http_response_free(&r);
		return -1;
	}
	http_response_free(&r);
	snprintf(tag, sizeof(tag), "sha256-%.64s", digest + 7);
	snprintf(source, source_len, "the referrers tag %s", tag);
	rc = fetch_manifest(c, repo, tag, body, len, e);
	if (rc < 0 && oci_sig_transient(e->code))
		return -1;
	if (rc != 0) {
		/* Missing, or not a valid index: "assume there are no referrers". */
		free(*body);
		*body = NULL;
	}
	return 0;
}

/* 1 when an index entry may be a Sigstore bundle referrer. */
static int bundle_candidate(const cJSON *d)
{
	const cJSON *at = cJSON_GetObjectItemCaseSensitive(d, "artifactType");
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(d, "mediaType");
	const cJSON *dg = cJSON_GetObjectItemCaseSensitive(d, "digest");

	if (!cJSON_IsString(dg) || !cJSON_IsString(mt) || strcmp(mt->valuestring, OCI_MT_MANIFEST) != 0)
		return 0;
	/* Without artifactType (older clients' tag indexes) it has to be read. */
	return !cJSON_IsString(at) || str_has_prefix(at->valuestring, "application/vnd.dev.sigstore.bundle");
}

/* -1 transport error; 0 verified; 1 not verified (t says why). */
static int try_bundles(struct oci_client *c, const char *repo, const char *digest,
    const struct oci_keyring *keys, struct scheme_try *t, struct oci_verify_result *res,
    struct err *e)
{
	struct fetch_ctx f = { c, repo };
	char *index = NULL, source[120];
	size_t len = 0;
	cJSON *root, *d;
	int examined = 0, rc = 1;

	if (referrers_index(c, repo, digest, &index, &len, source, sizeof(source), e) < 0)
		return -1;
	if (index == NULL)
		return 1;
	root = cJSON_ParseWithLength(index, len);
	free(index);
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "manifests")) {
		const char *rdigest, *key = NULL;
		char *body = NULL, where[300];
		size_t blen = 0;
		struct err re = { 0 };
		int got;

		if (!bundle_candidate(d))
			continue;
		if (++examined > OCI_SIG_MAX_REFERRERS)
			break;
		rdigest = cJSON_GetObjectItemCaseSensitive(d, "digest")->valuestring;
		snprintf(where, sizeof(where), "referrer %.100s (from %s)", rdigest, source);
		t->found = 1;
		got = fetch_manifest(c, repo, rdigest, &body, &blen, &re);
		if (got == 0 && oci_sig_check_referrer(body, blen, digest, keys, fetch_blob, &f, &key, &re) == 0) {
			free(body);
			rc = set_result(res, OCI_SIG_BUNDLE, key, rdigest, e) < 0 ? -1 : 0;
			goto out;
		}
		free(body);
		if (got == 1)
			err_set(&re, ERR_REFUSED, "the referrer manifest is missing (HTTP 404)");
		if (oci_sig_transient(re.code)) {
			*e = re;
			rc = -1;
			goto out;
		}
		note_refusal(t, where, &re);
	}
out:
	cJSON_Delete(root);
	return rc;
}

/* -1 transport error; 0 verified; 1 not verified (t says why). */
static int try_sig_tag(struct oci_client *c, const char *repo, const char *digest,
    const struct oci_keyring *keys, struct scheme_try *t, struct oci_verify_result *res,
    struct err *e)
{
	struct fetch_ctx f = { c, repo };
	char tag[80], *body = NULL;
	const char *key = NULL;
	size_t len = 0;
	struct err se = { 0 };
	int got;

	snprintf(tag, sizeof(tag), "sha256-%.64s.sig", digest + 7);
	got = fetch_manifest(c, repo, tag, &body, &len, &se);
	if (got == 1)
		return 1;
	t->found = 1;
	if (got == 0 && oci_sig_check_simplesigning(body, len, digest, keys, fetch_blob, &f, &key, &se) == 0) {
		free(body);
		return set_result(res, OCI_SIG_SIMPLESIGNING, key, tag, e) < 0 ? -1 : 0;
	}
	free(body);
	if (oci_sig_transient(se.code)) {
		*e = se;
		return -1;
	}
	if (got < 0) {
		/* The client refused the manifest itself: not JSON, bad digest, too big. */
		char msg[ERR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", se.msg);
		err_set(&se, ERR_REFUSED, "the signature manifest is unusable: %s", msg);
	}
	note_refusal(t, tag, &se);
	return 1;
}

static int valid_target(const char *digest)
{
	if (!str_has_prefix(digest, "sha256:") || strlen(digest) != 71)
		return 0;
	for (const char *p = digest + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

/* Appends "<scheme> <where>: <reason>" of a refused scheme to buf. */
static void describe(char *buf, size_t len, const char *scheme, const struct scheme_try *t)
{
	size_t used = strlen(buf);

	if (!t->found || used + 1 >= len)
		return;
	snprintf(buf + used, len - used, "%s%s %s: %s%s", used ? "; " : "", scheme, t->where, t->first.msg,
	    t->failed > 1 ? " (and more signatures, all refused)" : "");
}

int oci_verify(struct oci_client *c, const char *repo, const char *manifest_digest,
    const struct oci_keyring *keys, struct oci_verify_result *res, struct err *e)
{
	struct scheme_try bundle = { 0 }, sig = { 0 };
	char why[ERR_MSG_MAX];
	int rc;

	if (res != NULL)
		memset(res, 0, sizeof(*res));
	if (!valid_target(manifest_digest))
		return err_set(e, ERR_INVALID, "verify %.200s: the manifest digest must be sha256:<64 hex>",
		    repo);
	if (oci_keyring_count(keys) == 0)
		return err_set(e, ERR_INVALID, "verify %.200s@%s: no public keys to verify with", repo,
		    manifest_digest);
	if (res != NULL)
		res->scheme = OCI_SIG_BUNDLE;
	rc = try_bundles(c, repo, manifest_digest, keys, &bundle, res, e);
	if (rc <= 0)
		return rc;
	if (res != NULL)
		res->scheme = OCI_SIG_SIMPLESIGNING;
	rc = try_sig_tag(c, repo, manifest_digest, keys, &sig, res, e);
	if (rc <= 0)
		return rc;
	if (!bundle.found && !sig.found) {
		if (res != NULL)
			res->scheme = OCI_SIG_NONE;
		return err_set(e, ERR_NOTFOUND, "no signature found for %s/%.200s@%s: no sigstore bundle "
		    "referrer and no sha256-%.12s….sig tag", oci_client_registry(c), repo, manifest_digest,
		    manifest_digest + 7);
	}
	why[0] = '\0';
	describe(why, sizeof(why), oci_sig_scheme_name(OCI_SIG_BUNDLE), &bundle);
	describe(why, sizeof(why), oci_sig_scheme_name(OCI_SIG_SIMPLESIGNING), &sig);
	if (res != NULL && !sig.found)
		res->scheme = OCI_SIG_BUNDLE;
	return err_set(e, ERR_REFUSED, "signature of %s/%.200s@%s refused: %s", oci_client_registry(c), repo,
	    manifest_digest, why);
}
