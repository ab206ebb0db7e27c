/*
 * stack_verify.c - whether what a Stack's source offers is signed by a key
 * the Stack trusts, and the SourceVerified condition that says so
 * (docs/stack-api.md).  The source step (stack_source.c) calls it between
 * resolving the source and using it, so a refused revision is never
 * fetched, unpacked or applied, and the revision applied before stays.
 *
 *   ociSource.verify   the manifest digest the resolution names (the one
 *                      fetch_oci then pulls: no check-then-pull race) is
 *                      checked with oci_verify against every key ending in
 *                      .pub of the Secret; a pass on the same digest and
 *                      the same Secret resourceVersion reuses the check
 *                      kept with the resolution (stack_source.c).
 *   Flux OCIRepository with spec.verify
 *                      source-controller verifies; its SourceVerified
 *                      condition is reported through, and its artifact is
 *                      used only when that condition is True for the very
 *                      revision offered, at the source's generation.
 *
 * Every refusal is Ready=False with the condition's reason and a Warning
 * event; what is retried and how soon depends on whether time can help
 * (a signature not pushed yet, a registry down) or a person must act.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/log.h"
#include "oci/oci.h"
#include "stack/stack_sources.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

static void vset(struct stack_pass *p, int ok, const char *reason, const char *fmt, va_list ap)
{
	p->verified.set = ok ? 1 : -1;
	p->verified.reason = reason;
	vsnprintf(p->verified.message, sizeof(p->verified.message), fmt, ap);
}

/* SourceVerified True. */
static void verified(struct stack_pass *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verified(struct stack_pass *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset(p, 1, "Succeeded", fmt, ap);
	va_end(ap);
}

/* SourceVerified False, and Ready False with the same reason and message
 * and a Warning event: the pass ends here. */
static void refuse(struct stack_pass *p, enum stack_state st, const char *reason, long requeue_ms,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void refuse(struct stack_pass *p, enum stack_state st, const char *reason, long requeue_ms,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset(p, 0, reason, fmt, ap);
	va_end(ap);
	stack_verdict(p, st, reason, requeue_ms, "%s", p->verified.message);
	p->v.event = 1;
}

/* ------------------------------------------------------------ Flux */

static const cJSON *source_verified_condition(const cJSON *src)
{
	const cJSON *c, *found = NULL;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(src, "status"), "conditions"))
		if (kube_obj_str(c, "type") && strcmp(kube_obj_str(c, "type"), "SourceVerified") == 0)
			found = c;
	return found;
}

/* Does msg say revision was verified ("verified signature of revision
 * <rev>", source-controller's words), for exactly that revision? */
static int says_verified(const char *msg, const char *revision)
{
	static const char prefix[] = "verified signature of revision ";
	const char *at = msg ? strstr(msg, prefix) : NULL;
	size_t n = strlen(revision);

	if (at == NULL)
		return 0;
	at += sizeof(prefix) - 1;
	return strncmp(at, revision, n) == 0 && (at[n] == '\0' || at[n] == ' ');
}

/*
 * source-controller (reference/signing-events-jobs.md 1.3, and its v1.9
 * code) verifies before it pulls: SourceVerified True "verified signature
 * of revision <rev>" at the generation it verified for; False
 * VerificationError when it failed, in which case status.artifact still
 * holds the previous artifact, which may predate spec.verify or its keys;
 * a False condition is removed when it tries again.  So only True, at the
 * source's generation and naming the revision offered, lets it through.
 */
int stack_verify_flux(struct stack_pass *p, const cJSON *src, const char *revision)
{
	const cJSON *c = source_verified_condition(src);
	const cJSON *gen = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(src, "metadata"),
	    "generation");
	const cJSON *og = c ? cJSON_GetObjectItemCaseSensitive(c, "observedGeneration") : NULL;
	const char *status = c ? kube_obj_str(c, "status") : NULL, *msg = c ? kube_obj_str(c, "message") : NULL;
	int current = !cJSON_IsNumber(gen) || !cJSON_IsNumber(og) || og->valuedouble == gen->valuedouble;

	if (status && strcmp(status, "False") == 0) {
		/* It retries on its own; its next condition queues the Stack. */
		refuse(p, STACK_STALLED, "VerificationError", 0, "source %s/%s says verification failed: %s",
		    p->ns, p->spec.src_name, msg ? msg : "(no message)");
		return 1;
	}
	if (status == NULL || strcmp(status, "True") != 0 || !current || !says_verified(msg, revision)) {
		refuse(p, STACK_WAITING, "VerificationError", p->sc->o.requeue_dependency_ms,
		    "source %s/%s says verification failed: it has not verified revision %s it offers "
		    "(SourceVerified %s%s%s%s); waiting for source-controller", p->ns, p->spec.src_name,
		    revision, status ? status : "missing", status && !current ? " of an older generation" : "",
		    msg ? ": " : "", msg ? msg : "");
		return 1;
	}
	verified(p, "source %s/%s: %s", p->ns, p->spec.src_name, msg);
	return 0;
}

/* ------------------------------------------------------------ ociSource */

/* One Secret key ending in .pub added to k; -1 with e naming the key. */
static int add_key(struct oci_keyring *k, const cJSON *v, struct err *e)
{
	unsigned char *pem = NULL;
	size_t len = 0;
	int rc;

	if (!cJSON_IsString(v) || base64_decode(v->valuestring, strlen(v->valuestring), &pem, &len, e) < 0)
		return err_set(e, ERR_INVALID, "key \"%s\" is not base64", v->string), -1;
	rc = oci_keyring_add_pem(k, v->string, (const char *)pem, len, e);
	free(pem);
	return rc;
}

static int is_pub(const char *name)
{
	size_t n = strlen(name);

	return n > 4 && strcmp(name + n - 4, ".pub") == 0;
}

/* The trusted keys: every key of the verify Secret whose name ends in
 * .pub (as Flux's OCIRepository reads its Secret).  0 with *out (caller
 * frees with oci_keyring_free) and keys_id "<secret>@<resourceVersion>";
 * 1 when the pass is decided (verdict set). */
static int load_keys(struct stack_pass *p, struct oci_keyring **out, char *keys_id, size_t n)
{
	const char *name = p->spec.oci_verify_secret;
	const cJSON *v;
	struct oci_keyring *k;
	struct err e;
	cJSON *s = kube_get(p->sc->client, &secret_res, p->ns, name, NULL, &e);
	int bad = 0;

	*out = NULL;
	if (s == NULL && e.code == ERR_NOTFOUND) {
		refuse(p, STACK_WAITING, "ReferenceNotFound", p->sc->o.requeue_dependency_ms, "Secret %s/%s "
		    "(spec.ociSource.verify.secretRef) not found; nothing is applied until it exists", p->ns, name);
		return 1;
	}
	if (s == NULL) {
		refuse(p, STACK_WAITING, "ReferenceNotFound", p->sc->o.requeue_dependency_ms, "cannot read "
		    "Secret %s/%s (spec.ociSource.verify.secretRef): %s", p->ns, name, e.msg);
		return 1;
	}
	snprintf(keys_id, n, "%s@%s", name, kube_obj_str(s, "metadata.resourceVersion") ?
	    kube_obj_str(s, "metadata.resourceVersion") : "");
	if ((k = oci_keyring_new()) == NULL) {
		cJSON_Delete(s);
		stack_verdict(p, STACK_WAITING, "VerificationUnavailable", 1000, "out of memory");
		return 1;
	}
	cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(s, "data"))
		/* One unreadable key is a mistake to show, not one to skip. */
		if (is_pub(v->string) && add_key(k, v, &e) < 0) {
			bad = 1;
			break;
		}
	cJSON_Delete(s);
	if (!bad && oci_keyring_count(k) == 0) {
		err_set(&e, ERR_INVALID, "it has no key ending in .pub");
		bad = 1;
	}
	if (bad) {
		oci_keyring_free(k);
		refuse(p, STACK_STALLED, "PublicKeysInvalid", 0, "Secret %s/%s (spec.ociSource.verify.secretRef): "
		    "%s; nothing is applied until it holds PEM public keys named *.pub", p->ns, name, e.msg);
		return 1;
	}
	*out = k;
	return 0;
}

static long shorter(long a, long b)
{
	return a < b ? a : b;
}

/* The verdict on a verification that failed, by the library's error code
 * (oci.h, "signatures"). */
static void verify_failed(struct stack_pass *p, const char *revision, const struct err *e)
{
	const char *applied = stack_status_str(p, "lastAppliedRevision");
	char stays[600] = "";

	if (applied)
		snprintf(stays, sizeof(stays), "; revision %s stays applied", applied);
	switch (e->code) {
	case ERR_NOTFOUND:
		/* Signing usually follows the push by a moment: looked at again soon. */
		refuse(p, STACK_WAITING, "SignatureNotFound", shorter(p->spec.oci_interval_ms,
		    p->sc->o.requeue_dependency_ms), "revision %s is not signed: %s; nothing from it is applied%s",
		    revision, e->msg, stays);
		return;
	case ERR_REFUSED:
	case ERR_INVALID:
	case ERR_LIMIT:
	case ERR_UNSUPPORTED:
	case ERR_DIGEST:
		/* A person must sign it or change the keys; the registry is still
		 * polled, so a new signature or a new digest is found. */
		refuse(p, STACK_STALLED, "VerificationError", p->spec.oci_interval_ms, "revision %s failed "
		    "signature verification: %s; nothing from it is applied%s", revision, e->msg, stays);
		return;
	default:
		refuse(p, STACK_WAITING, "VerificationUnavailable", p->sc->o.requeue_dependency_ms, "cannot "
		    "verify the signature of revision %s: %s; retrying%s", revision, e->msg, stays);
	}
}

/* Asks the registry whether digest is signed by one of keys. */
static int verify_digest(struct stack_pass *p, const char *digest, const struct oci_keyring *keys,
    struct oci_verify_result *vr, struct err *e)
{
	char *repo = NULL;
	struct oci_client *c = stack_source_oci_client(p, &repo, e);
	int rc = -1;

	memset(vr, 0, sizeof(*vr));
	if (c != NULL)
		rc = oci_verify(c, repo, digest, keys, vr, e);
	oci_client_free(c);
	free(repo);
	return rc;
}

/* The manifest first; a multi-platform tag is signed on its index (which
 * names the manifest by digest), looked for when the manifest has no
 * signature at all. */
static int verify_resolution(struct stack_pass *p, const char *manifest, const char *index,
    const struct oci_keyring *keys, struct oci_verify_result *vr, struct err *e)
{
	struct err ie;
	int rc = verify_digest(p, manifest, keys, vr, e);

	if (rc == 0 || e->code != ERR_NOTFOUND || index == NULL)
		return rc;
	oci_verify_result_free(vr);
	if ((rc = verify_digest(p, index, keys, vr, &ie)) < 0 && ie.code != ERR_NOTFOUND)
		*e = ie;
	return rc;
}

int stack_verify_oci(struct stack_pass *p, const char *poll_key, const char *revision, const char *manifest,
    const char *index)
{
	struct oci_keyring *keys;
	struct oci_verify_result vr;
	struct err e;
	char keys_id[600], key_name[256], scheme[64];
	const char *sname;

	if (load_keys(p, &keys, keys_id, sizeof(keys_id)))
		return 1;
	if (stack_source_verified_lookup(p->sc, poll_key, manifest, keys_id, key_name, sizeof(key_name), scheme,
	    sizeof(scheme))) {
		oci_keyring_free(keys);
		verified(p, "verified signature of revision %s with %s (%s)", revision, key_name, scheme);
		return 0;
	}
	if (verify_resolution(p, manifest, index, keys, &vr, &e) < 0) {
		oci_keyring_free(keys);
		oci_verify_result_free(&vr);
		log_warn("signature verification failed", "namespace", p->ns, "name", p->name, "revision", revision,
		    "error", e.msg, NULL);
		verify_failed(p, revision, &e);
		return 1;
	}
	oci_keyring_free(keys);
	sname = oci_sig_scheme_name(vr.scheme);
	stack_source_verified_store(p->sc, poll_key, manifest, keys_id, vr.key_name, sname);
	verified(p, "verified signature of revision %s with %s (%s)", revision, vr.key_name ? vr.key_name : "?",
	    sname);
	log_info("signature verified", "namespace", p->ns, "name", p->name, "revision", revision, "key",
	    vr.key_name ? vr.key_name : "", "scheme", sname, "signature", vr.signature ? vr.signature : "", NULL);
	oci_verify_result_free(&vr);
	return 0;
}
