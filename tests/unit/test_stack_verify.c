/*
 * test_stack_verify.c - the Stack's side of signature verification
 * (stack_verify.c) and the SourceVerified condition it leads to
 * (stack_status.c):
 *
 *   - a Flux OCIRepository's own SourceVerified, read as source-controller
 *     writes it: True for the revision offered at the source's generation
 *     lets the artifact through; False, missing, another revision or an
 *     older generation refuse it, with the source named;
 *   - ociSource.verify's keys Secret (on the scripted API server of
 *     stack_fake_api.h): missing, no .pub key, an unreadable .pub key, and
 *     a registry that cannot be reached, each with its reason and state;
 *   - the condition as written: True/False from the pass, removed when the
 *     source verifies nothing, kept by a pass that did not look.
 * The end-to-end cases (real signatures, the real cosign, the real
 * source-controller) are tests/e2e/test_stack_verify.py and
 * test_flux_verify.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/base64.h"
#include "kube/kube.h"
#include "stack/stack_machine.h"
#include "stack_fake_api.h"

#define OCI_VERIFY "{'stack': 'dev', 'ociSource': {'url': 'oci://127.0.0.1:1/team/app', 'ref': {'tag': " \
	"'v1'}, 'insecure': true, 'verify': {'provider': 'cosign', 'secretRef': {'name': 'keys'}}}}"
#define FLUX_OCI "{'stack': 'dev', 'fluxSource': {'sourceRef': {'apiVersion': " \
	"'source.toolkit.fluxcd.io/v1', 'kind': 'OCIRepository', 'name': 'app'}}}"
#define REV "latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define PUB "-----BEGIN PUBLIC KEY-----\n" \
	"MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE8nmP+3BMQO+pkmSg9sehreLUB+Bu\n" \
	"+Vxs/tYAdWfetoUUsoF2PcNOIKSXj0+YKh0QJd8FZ3wVbBvzd36Zj41XKA==\n" \
	"-----END PUBLIC KEY-----\n"

/* A pass whose spec (single quotes) is parsed; fake_pass_free. */
static struct stack_pass *pass_with(const char *spec, const char *status)
{
	struct stack_pass *p = fake_pass_new(spec, NULL, status);
	struct err e;

	if (stack_spec_parse(p->obj, &sc.o, &p->spec, &e) != 0)
		fail_msg("spec refused: %s", e.msg);
	p->spec_ok = 1;
	return p;
}

/* An OCIRepository at generation 4 with one SourceVerified condition
 * (NULL status: none); cJSON_Delete. */
static cJSON *oci_repository(const char *status, const char *message, int observed)
{
	char text[2048], cond[1024] = "";
	cJSON *o;

	if (status)
		snprintf(cond, sizeof(cond), "{'type': 'SourceVerified', 'status': '%s', 'reason': '%s', "
		    "'message': '%s', 'observedGeneration': %d}", status, strcmp(status, "True") == 0 ?
		    "Succeeded" : "VerificationError", message, observed);
	snprintf(text, sizeof(text), "{'metadata': {'name': 'app', 'namespace': 'apps', 'generation': 4}, "
	    "'spec': {'verify': {'provider': 'cosign', 'secretRef': {'name': 'k'}}}, 'status': {'conditions': "
	    "[{'type': 'Ready', 'status': 'True', 'reason': 'Succeeded', 'message': 'ok'}%s%s], "
	    "'artifact': {'revision': '" REV "'}}}", status ? ", " : "", cond);
	for (char *c = text; *c; c++)
		if (*c == '\'')
			*c = '"';
	o = cJSON_Parse(text);
	assert_non_null(o);
	return o;
}

static void assert_flux(const char *status, const char *message, int observed, int refused,
    enum stack_state st, const char *fragment)
{
	struct stack_pass *p = pass_with(FLUX_OCI, NULL);
	cJSON *src = oci_repository(status, message, observed);

	assert_int_equal(stack_verify_flux(p, src, REV), refused);
	assert_int_equal(p->verified.set, refused ? -1 : 1);
	if (refused) {
		assert_true(p->v.set);
		assert_int_equal(p->v.state, st);
		assert_string_equal(p->v.reason, "VerificationError");
		assert_string_equal(p->verified.reason, "VerificationError");
		assert_true(p->v.event);
		assert_string_equal(p->v.message, p->verified.message);
		assert_non_null(strstr(p->verified.message, "source apps/app says verification failed: "));
	} else {
		assert_false(p->v.set);
		assert_string_equal(p->verified.reason, "Succeeded");
	}
	if (strstr(p->verified.message, fragment) == NULL)
		fail_msg("\"%s\" not in \"%s\"", fragment, p->verified.message);
	cJSON_Delete(src);
	fake_pass_free(p);
}

static void flux_source_verified_condition_decides(void **state)
{
	(void)state;
	assert_flux("True", "verified signature of revision " REV, 4, 0, STACK_READY,
	    "source apps/app: verified signature of revision " REV);
	assert_flux("False", "failed to verify the signature using provider cosign: no matching "
	    "signatures were found", 4, 1, STACK_STALLED, "no matching signatures were found");
	/* a False of an older generation is still a failure */
	assert_flux("False", "failed to verify", 2, 1, STACK_STALLED, "failed to verify");
	assert_flux(NULL, "", 0, 1, STACK_WAITING, "has not verified revision " REV);
	/* True for another revision (the artifact moved on, or a prefix of this one) */
	assert_flux("True", "verified signature of revision latest@sha256:ffff", 4, 1, STACK_WAITING,
	    "SourceVerified True: verified signature of revision latest@sha256:ffff");
	assert_flux("True", "verified signature of revision " REV "00", 4, 1, STACK_WAITING,
	    "has not verified");
	/* True, but for the spec before the last change (keys may have changed) */
	assert_flux("True", "verified signature of revision " REV, 3, 1, STACK_WAITING,
	    "of an older generation");
	assert_flux("Unknown", "verifying", 4, 1, STACK_WAITING, "SourceVerified Unknown");
}

/* A Secret apps/keys with the data given as name, PEM pairs (NULL-ended). */
static void route_keys(const char *rv, ...)
{
	char body[4096];
	size_t n;
	const char *name;
	va_list ap;

	n = (size_t)snprintf(body, sizeof(body), "{'apiVersion': 'v1', 'kind': 'Secret', 'metadata': {'name': "
	    "'keys', 'namespace': 'apps', 'resourceVersion': '%s'}, 'data': {", rv);
	va_start(ap, rv);
	for (int i = 0; (name = va_arg(ap, const char *)) != NULL; i++) {
		const char *pem = va_arg(ap, const char *);
		char *b64 = base64_encode(pem, strlen(pem));
		assert_non_null(b64);
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s'%s': '%s'", i ? ", " : "", name, b64);
		free(b64);
	}
	va_end(ap);
	snprintf(body + n, sizeof(body) - n, "}}");
	fake_route("/api/v1/namespaces/apps/secrets/keys", 200, body);
}

/* stack_verify_oci on apps/web: refused with reason and state, the
 * message containing fragment. */
static void assert_oci_refused(const char *reason, enum stack_state st, const char *fragment)
{
	struct stack_pass *p = pass_with(OCI_VERIFY, NULL);
	const char *digest = REV + 7;

	assert_int_equal(stack_verify_oci(p, "apps|oci://127.0.0.1:1/team/app|v1|||", REV, digest, NULL), 1);
	assert_int_equal(p->verified.set, -1);
	assert_string_equal(p->verified.reason, reason);
	assert_true(p->v.set);
	assert_string_equal(p->v.reason, reason);
	assert_int_equal(p->v.state, st);
	assert_true(p->v.event);
	if (strstr(p->verified.message, fragment) == NULL)
		fail_msg("\"%s\" not in \"%s\"", fragment, p->verified.message);
	fake_pass_free(p);
}

static void oci_keys_secret_problems(void **state)
{
	(void)state;
	fake_reset();
	assert_oci_refused("ReferenceNotFound", STACK_WAITING,
	    "Secret apps/keys (spec.ociSource.verify.secretRef) not found");

	route_keys("7", "cosign.key", "-----BEGIN PRIVATE KEY-----\n", "README", "x", NULL);
	assert_oci_refused("PublicKeysInvalid", STACK_STALLED, "no key ending in .pub");

	fake_reset();
	route_keys("8", "a.pub", PUB, "b.pub", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
	    NULL);
	assert_oci_refused("PublicKeysInvalid", STACK_STALLED, "b.pub");

	/* usable keys, a registry that does not answer: retried soon */
	fake_reset();
	route_keys("9", "a.pub", PUB, NULL);
	assert_oci_refused("VerificationUnavailable", STACK_WAITING, "retrying");
	fake_reset();
}

/* ------------------------------------------------------------ the condition */

static const cJSON *condition(const cJSON *st, const char *type)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(st, "conditions"))
		if (strcmp(kube_obj_str(c, "type"), type) == 0)
			return c;
	return NULL;
}

/* Writes p's status through the fake; the written status (caller frees). */
static cJSON *write_status(struct stack_pass *p)
{
	cJSON *body, *st;
	struct err e;

	fake_reset();
	assert_int_equal(stack_status_write(p, &e), 0);
	body = fake_put_json();
	assert_non_null(body);
	st = cJSON_DetachItemFromObjectCaseSensitive(body, "status");
	cJSON_Delete(body);
	return st;
}

#define OLD_VERIFIED "{'conditions': [{'type': 'SourceVerified', 'status': 'True', 'reason': 'Succeeded', " \
	"'message': 'verified signature of revision v1@sha256:aa with a.pub (cosign .sig)', " \
	"'lastTransitionTime': '2026-01-01T00:00:00Z', 'observedGeneration': 1}]}"

static void source_verified_condition_is_written(void **state)
{
	struct stack_pass *p;
	cJSON *st;
	const cJSON *c;
	(void)state;

	/* False from the pass, with Ready False of the same reason */
	p = pass_with(OCI_VERIFY, OLD_VERIFIED);
	stack_verdict(p, STACK_STALLED, "VerificationError", 0, "revision v2 failed signature verification");
	p->verified.set = -1;
	p->verified.reason = "VerificationError";
	snprintf(p->verified.message, sizeof(p->verified.message), "%s", p->v.message);
	st = write_status(p);
	c = condition(st, "SourceVerified");
	assert_non_null(c);
	assert_string_equal(kube_obj_str(c, "status"), "False");
	assert_string_equal(kube_obj_str(c, "reason"), "VerificationError");
	assert_string_not_equal(kube_obj_str(c, "lastTransitionTime"), "2026-01-01T00:00:00Z");
	assert_string_equal(kube_obj_str(condition(st, "Ready"), "reason"), "VerificationError");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "conditions")), 3);
	cJSON_Delete(st);
	fake_pass_free(p);

	/* a pass that did not reach the source keeps it as it was */
	p = pass_with(OCI_VERIFY, OLD_VERIFIED);
	stack_verdict(p, STACK_WAITING, "PrerequisiteNotReady", 0, "waiting");
	st = write_status(p);
	c = condition(st, "SourceVerified");
	assert_non_null(c);
	assert_string_equal(kube_obj_str(c, "lastTransitionTime"), "2026-01-01T00:00:00Z");
	assert_string_equal(kube_obj_str(c, "status"), "True");
	cJSON_Delete(st);
	fake_pass_free(p);

	/* verify removed from the spec: gone */
	p = pass_with("{'stack': 'dev', 'ociSource': {'url': 'oci://r/a', 'ref': {'tag': 'v1'}}}", OLD_VERIFIED);
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied revision v1");
	st = write_status(p);
	assert_null(condition(st, "SourceVerified"));
	cJSON_Delete(st);
	fake_pass_free(p);

	/* a Flux OCIRepository without spec.verify (the source step says so): gone */
	p = pass_with(FLUX_OCI, OLD_VERIFIED);
	p->verified_none = 1;
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied revision v1");
	st = write_status(p);
	assert_null(condition(st, "SourceVerified"));
	cJSON_Delete(st);
	fake_pass_free(p);

	/* the intermediate "update running" status carries it too */
	p = pass_with(OCI_VERIFY, NULL);
	p->verified.set = 1;
	p->verified.reason = "Succeeded";
	snprintf(p->verified.message, sizeof(p->verified.message), "verified signature of revision v3");
	{
		struct err e;
		fake_reset();
		assert_int_equal(stack_status_write_running(p, &e), 0);
		st = fake_put_json();
		c = condition(cJSON_GetObjectItemCaseSensitive(st, "status"), "SourceVerified");
		assert_non_null(c);
		assert_string_equal(kube_obj_str(c, "status"), "True");
		assert_string_equal(kube_obj_str(c, "message"), "verified signature of revision v3");
		cJSON_Delete(st);
	}
	fake_pass_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(flux_source_verified_condition_decides),
		cmocka_unit_test(oci_keys_secret_problems),
		cmocka_unit_test(source_verified_condition_is_written),
	};
	return cmocka_run_group_tests(tests, fake_setup, fake_teardown);
}
