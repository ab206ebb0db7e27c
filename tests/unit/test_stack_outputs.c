/*
 * test_stack_outputs.c - the objects besides status that the reconciler
 * writes (stack_status.c), against the scripted API server of
 * stack_fake_api.h:
 *
 *   - the outputs Secret <name>-outputs: created when missing, updated
 *     (with its resourceVersion) when it is the Stack's, refused when
 *     someone else's; Opaque, every output base64 (strings raw, anything
 *     else JSON), the pulumi.com/secrets annotation, the watch and
 *     stack-name labels, a controller ownerReference; the masked copy
 *     (pulumi.com/masked-outputs) a Job's status.outputs is read from
 *     (stack_outputs_from_secret);
 *   - the finalizer: a merge patch conditional on the resourceVersion that
 *     adds or removes only finalizer.stack.pulumi.com.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>

#include "kube/kube.h"
#include "stack/stack_machine.h"
#include "stack_fake_api.h"

#define SECRET_PATH "/api/v1/namespaces/apps/secrets/web-outputs"
#define STACK_PATH "/apis/pulumi.com/v1/namespaces/apps/stacks/web"

/* A pass over apps/web (uid u-1) whose update produced outputs (masked
 * and plain JSON; plain NULL: there were no secret outputs); pass_free. */
static struct stack_pass *pass_new(const char *finalizers, const char *masked, const char *plain)
{
	struct stack_pass *p = calloc(1, sizeof(*p));
	char text[1024];

	assert_non_null(p);
	snprintf(text, sizeof(text), "{\"apiVersion\": \"pulumi.com/v1\", \"kind\": \"Stack\", \"metadata\": "
	    "{\"name\": \"web\", \"namespace\": \"apps\", \"uid\": \"u-1\", \"resourceVersion\": \"41\"%s%s}, "
	    "\"spec\": {\"stack\": \"dev\"}}", finalizers ? ", \"finalizers\": " : "", finalizers ? finalizers : "");
	p->obj = cJSON_Parse(text);
	assert_non_null(p->obj);
	p->sc = &sc;
	snprintf(p->ns, sizeof(p->ns), "apps");
	snprintf(p->name, sizeof(p->name), "web");
	p->out.outputs = masked ? cJSON_Parse(masked) : NULL;
	p->out.outputs_plain = plain ? cJSON_Parse(plain) : NULL;
	return p;
}

static void pass_free(struct stack_pass *p)
{
	cJSON_Delete(p->obj);
	cJSON_Delete(p->out.outputs);
	cJSON_Delete(p->out.outputs_plain);
	free(p);
}

/* metadata.<map>[key] is want (keys with dots: no kube_obj_str path). */
static void assert_meta(const cJSON *obj, const char *map, const char *key, const char *want)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(obj, "metadata"), map), key);

	if (!cJSON_IsString(v))
		fail_msg("no metadata.%s[%s]", map, key);
	assert_string_equal(v->valuestring, want);
}

/* The decoded data[key] of the written Secret (caller frees). */
static char *secret_value(const cJSON *secret, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(secret, "data"), key);
	const char *enc = cJSON_IsString(v) ? v->valuestring : NULL;
	unsigned char *out;
	int n;

	if (enc == NULL)
		fail_msg("no data key %s", key);
	out = calloc(1, strlen(enc) + 1);
	assert_non_null(out);
	n = EVP_DecodeBlock(out, (const unsigned char *)enc, (int)strlen(enc));
	assert_true(n >= 0);
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	return (char *)out;
}

static void assert_secret_value(const cJSON *secret, const char *key, const char *want)
{
	char *have = secret_value(secret, key);

	assert_string_equal(have, want);
	free(have);
}

#define OUTPUTS_MASKED "{\"url\": \"https://web\", \"password\": \"[secret]\", \"count\": 3, " \
	"\"tags\": {\"a\": [1, true]}, \"my output\": \"x\", \"apiKey\": \"[secret]\"}"
#define OUTPUTS_PLAIN "{\"url\": \"https://web\", \"password\": \"hunter2\", \"count\": 3, " \
	"\"tags\": {\"a\": [1, true]}, \"my output\": \"x\", \"apiKey\": \"k-123\"}"

static void outputs_secret_created(void **state)
{
	struct stack_pass *p = pass_new(NULL, OUTPUTS_MASKED, OUTPUTS_PLAIN);
	const cJSON *owner;
	cJSON *secret;
	struct err e;
	(void)state;

	fake_reset();
	assert_int_equal(stack_outputs_write(p, &e), 0);
	assert_int_equal(fake_count("GET", SECRET_PATH), 1);
	fake_assert_write("POST", "/api/v1/namespaces/apps/secrets", NULL);
	secret = fake_put_json();
	assert_non_null(secret);
	assert_string_equal(kube_obj_str(secret, "kind"), "Secret");
	assert_string_equal(kube_obj_str(secret, "type"), "Opaque");
	assert_string_equal(kube_obj_str(secret, "metadata.name"), "web-outputs");
	assert_string_equal(kube_obj_str(secret, "metadata.namespace"), "apps");
	assert_meta(secret, "labels", "reconcile.fluxcd.io/watch", "Enabled");
	assert_meta(secret, "labels", "pulumi.com/stack-name", "web");
	owner = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(secret, "metadata"), "ownerReferences"), 0);
	assert_non_null(owner);
	assert_string_equal(kube_obj_str(owner, "apiVersion"), "pulumi.com/v1");
	assert_string_equal(kube_obj_str(owner, "kind"), "Stack");
	assert_string_equal(kube_obj_str(owner, "name"), "web");
	assert_string_equal(kube_obj_str(owner, "uid"), "u-1");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(owner, "controller")));

	/* Strings raw, the rest as JSON; secret outputs in the clear (it is a Secret). */
	assert_secret_value(secret, "url", "https://web");
	assert_secret_value(secret, "password", "hunter2");
	assert_secret_value(secret, "apiKey", "k-123");
	assert_secret_value(secret, "count", "3");
	assert_secret_value(secret, "tags", "{\"a\":[1,true]}");
	/* A name that is no Secret key is made one. */
	assert_secret_value(secret, "my_output", "x");
	/* The secret keys.  CONTRACT says sorted; the writer keeps the order
	 * of the CLI's output, so only the set is checked here. */
	{
		const cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(secret, "metadata"), "annotations"), "pulumi.com/secrets");
		cJSON *keys = cJSON_IsString(ann) ? cJSON_Parse(ann->valuestring) : NULL;
		const cJSON *k;
		int seen = 0;
		assert_int_equal(cJSON_GetArraySize(keys), 2);
		cJSON_ArrayForEach(k, keys)
			seen |= strcmp(k->valuestring, "apiKey") == 0 ? 1 : strcmp(k->valuestring, "password") == 0 ? 2 : 4;
		assert_int_equal(seen, 3);
		cJSON_Delete(keys);
	}
	cJSON_Delete(secret);
	pass_free(p);
}

/* Without secret outputs the masked outputs are the values. */
static void outputs_without_secrets(void **state)
{
	struct stack_pass *p = pass_new(NULL, "{\"url\": \"https://web\"}", NULL);
	cJSON *secret;
	struct err e;
	(void)state;

	fake_reset();
	assert_int_equal(stack_outputs_write(p, &e), 0);
	secret = fake_put_json();
	assert_secret_value(secret, "url", "https://web");
	assert_meta(secret, "annotations", "pulumi.com/secrets", "[]");
	cJSON_Delete(secret);
	pass_free(p);
}

static void outputs_secret_updated_when_ours(void **state)
{
	struct stack_pass *p = pass_new(NULL, "{\"url\": \"https://web2\"}", NULL);
	cJSON *secret;
	struct err e;
	(void)state;

	fake_reset();
	fake_route(SECRET_PATH, 200, "{'kind': 'Secret', 'metadata': {'name': 'web-outputs', 'namespace': 'apps', "
	    "'resourceVersion': '77', 'ownerReferences': [{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', "
	    "'name': 'web', 'uid': 'u-1', 'controller': true}]}, 'data': {'old': 'eA=='}}");
	assert_int_equal(stack_outputs_write(p, &e), 0);
	fake_assert_write("PUT", SECRET_PATH, NULL);
	secret = fake_put_json();
	assert_string_equal(kube_obj_str(secret, "metadata.resourceVersion"), "77");
	assert_secret_value(secret, "url", "https://web2");
	/* Outputs that are gone are gone from the Secret. */
	assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(secret, "data"), "old"));
	cJSON_Delete(secret);
	pass_free(p);
}

/* A Secret of that name that another Stack (same name, other uid: an
 * earlier incarnation) or a person owns is not overwritten. */
static void someone_elses_secret_is_left_alone(void **state)
{
	static const char *owners[] = {
	    "",
	    ", 'ownerReferences': [{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', 'name': 'web', 'uid': 'u-0'}]",
	    ", 'ownerReferences': [{'apiVersion': 'v1', 'kind': 'ConfigMap', 'name': 'x', 'uid': 'u-1'}]",
	};
	char body[512];
	(void)state;

	for (size_t i = 0; i < 3; i++) {
		struct stack_pass *p = pass_new(NULL, "{\"url\": \"x\"}", NULL);
		struct err e;
		fake_reset();
		snprintf(body, sizeof(body), "{'kind': 'Secret', 'metadata': {'name': 'web-outputs', "
		    "'resourceVersion': '5'%s}}", owners[i]);
		fake_route(SECRET_PATH, 200, body);
		assert_int_equal(stack_outputs_write(p, &e), -1);
		assert_int_equal(e.code, ERR_CONFLICT);
		assert_non_null(strstr(e.msg, "apps/web-outputs"));
		assert_int_equal(fake_count(NULL, NULL), 1);     /* the GET only */
		pass_free(p);
	}
}

static void outputs_write_failures(void **state)
{
	struct stack_pass *p = pass_new(NULL, "{\"url\": \"x\"}", NULL);
	struct err e;
	(void)state;

	fake_reset();
	fake_route(SECRET_PATH, 403, FAKE_STATUS(403, "Forbidden", "forbidden"));
	assert_int_equal(stack_outputs_write(p, &e), -1);
	assert_int_equal(e.code, ERR_AUTH);
	assert_int_equal(fake_count(NULL, NULL), 1);
	fake_reset();
	fake_put_answer(409);
	assert_int_equal(stack_outputs_write(p, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	pass_free(p);
}

/* Review 21: a Job's status.outputs is read back from the Secret its pod
 * wrote.  A secret nested in an object output is masked in place by the
 * CLI, so it is not in pulumi.com/secrets; a string "42" is "42" in data.
 * The masked copy on the Secret gives back exactly the masked outputs
 * (local mode's status.outputs), and no plain value. */
#define NESTED_MASKED "{\"conn\": {\"user\": \"admin\", \"password\": \"[secret]\"}, \"answer\": \"42\", " \
	"\"count\": 42, \"token\": \"[secret]\"}"
#define NESTED_PLAIN "{\"conn\": {\"user\": \"admin\", \"password\": \"n3sted\"}, \"answer\": \"42\", " \
	"\"count\": 42, \"token\": \"t0p\"}"

static void job_status_outputs_come_from_the_masked_copy(void **state)
{
	struct stack_pass *p = pass_new(NULL, NESTED_MASKED, NESTED_PLAIN);
	cJSON *secret, *back;
	char *text;
	struct err e;
	(void)state;

	fake_reset();
	assert_int_equal(stack_outputs_write(p, &e), 0);
	secret = fake_put_json();
	assert_secret_value(secret, "conn", "{\"user\":\"admin\",\"password\":\"n3sted\"}");
	assert_meta(secret, "annotations", "pulumi.com/secrets", "[\"token\"]");
	back = stack_outputs_from_secret(secret);
	assert_true(cJSON_Compare(back, p->out.outputs, 1));
	text = cJSON_PrintUnformatted(back);
	assert_null(strstr(text, "n3sted"));
	assert_null(strstr(text, "t0p"));
	free(text);
	cJSON_Delete(back);
	cJSON_Delete(secret);
	pass_free(p);
}

/* Without a readable masked copy (an older pod, outputs too large for an
 * annotation, a non-object) nothing says which values hold a secret: every
 * output reads "[secret]", and data is not decoded. */
static void without_the_masked_copy_every_output_is_masked(void **state)
{
	static const char *anns[] = { NULL, "[1]", "{\"a\":" };
	(void)state;

	for (size_t i = 0; i < sizeof(anns) / sizeof(anns[0]); i++) {
		cJSON *secret, *back;
		/* data: conn {"password":"n3sted"}, answer "42" */
		secret = cJSON_Parse("{\"metadata\": {\"name\": \"web-outputs\", \"annotations\": {}}, "
		    "\"data\": {\"conn\": \"eyJwYXNzd29yZCI6Im4zc3RlZCJ9\", \"answer\": \"NDI=\"}}");
		assert_non_null(secret);
		if (anns[i])
			cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
			    secret, "metadata"), "annotations"), STACK_ANN_MASKED_OUTPUTS, anns[i]);
		back = stack_outputs_from_secret(secret);
		assert_int_equal(cJSON_GetArraySize(back), 2);
		assert_string_equal(kube_obj_str(back, "conn"), "[secret]");
		assert_string_equal(kube_obj_str(back, "answer"), "[secret]");
		cJSON_Delete(back);
		cJSON_Delete(secret);
	}
}

/* Masked outputs past STACK_MASKED_OUTPUTS_MAX stay off the Secret (its
 * annotations are 256 KiB together); read back, every output is masked. */
static void masked_outputs_too_large_for_the_annotation(void **state)
{
	size_t n = STACK_MASKED_OUTPUTS_MAX + 1;
	char *big = malloc(n + 1), *json = malloc(n + 32);
	struct stack_pass *p;
	cJSON *secret, *back;
	struct err e;
	(void)state;

	assert_non_null(big);
	assert_non_null(json);
	memset(big, 'x', n);
	big[n] = '\0';
	snprintf(json, n + 32, "{\"big\": \"%s\"}", big);
	p = pass_new(NULL, json, NULL);
	fake_reset();
	assert_int_equal(stack_outputs_write(p, &e), 0);
	secret = fake_put_json();
	assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(secret, "metadata"), "annotations"), STACK_ANN_MASKED_OUTPUTS));
	back = stack_outputs_from_secret(secret);
	assert_string_equal(kube_obj_str(back, "big"), "[secret]");
	cJSON_Delete(back);
	cJSON_Delete(secret);
	pass_free(p);
	free(big);
	free(json);
}

/* ------------------------------------------------------------ finalizer */

static const cJSON *finalizers_of(const cJSON *obj)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "finalizers");
}

static void finalizer_added_and_removed(void **state)
{
	struct stack_pass *p = pass_new("[\"other.io/keep\"]", NULL, NULL);
	cJSON *patch;
	struct err e;
	(void)state;

	fake_reset();
	fake_route(STACK_PATH, 200, "{'metadata': {'name': 'web', 'namespace': 'apps', 'resourceVersion': '42', "
	    "'managedFields': [{'manager': 'x'}], "
	    "'finalizers': ['other.io/keep', 'finalizer.stack.pulumi.com']}, 'status': {'observedGeneration': 2}}");
	assert_int_equal(stack_finalizer_set(p, 1, &e), 0);
	fake_assert_write("PATCH", STACK_PATH, "application/merge-patch+json");
	patch = fake_put_json();
	/* Conditional on what the pass read; the other finalizer kept, first. */
	assert_string_equal(kube_obj_str(patch, "metadata.resourceVersion"), "41");
	assert_int_equal(cJSON_GetArraySize(finalizers_of(patch)), 2);
	assert_string_equal(cJSON_GetArrayItem(finalizers_of(patch), 0)->valuestring,
	    "other.io/keep");
	assert_string_equal(cJSON_GetArrayItem(finalizers_of(patch), 1)->valuestring,
	    STACK_FINALIZER);
	cJSON_Delete(patch);
	/* The pass holds the answer now, with its kind and status. */
	assert_string_equal(kube_obj_str(p->obj, "metadata.resourceVersion"), "42");
	assert_string_equal(kube_obj_str(p->obj, "kind"), "Stack");
	assert_string_equal(kube_obj_str(p->obj, "apiVersion"), "pulumi.com/v1");
	assert_true(stack_has_finalizer(p->obj));
	assert_non_null(p->status);

	/* Removing it (twice present: both go) keeps the other one. */
	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(p->obj, "metadata"), "finalizers");
	cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(p->obj, "metadata"), "finalizers",
	    cJSON_Parse("[\"finalizer.stack.pulumi.com\", \"other.io/keep\", \"finalizer.stack.pulumi.com\"]"));
	assert_int_equal(stack_finalizer_set(p, 0, &e), 0);
	patch = fake_put_json();
	assert_string_equal(kube_obj_str(patch, "metadata.resourceVersion"), "42");
	assert_int_equal(cJSON_GetArraySize(finalizers_of(patch)), 1);
	assert_string_equal(cJSON_GetArrayItem(finalizers_of(patch), 0)->valuestring,
	    "other.io/keep");
	cJSON_Delete(patch);
	pass_free(p);
}

static void finalizer_conflict(void **state)
{
	struct stack_pass *p = pass_new(NULL, NULL, NULL);
	cJSON *patch;
	struct err e;
	(void)state;

	fake_reset();
	fake_put_answer(409);
	assert_int_equal(stack_finalizer_set(p, 1, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_string_equal(kube_obj_str(p->obj, "metadata.resourceVersion"), "41");
	patch = fake_put_json();
	assert_int_equal(cJSON_GetArraySize(finalizers_of(patch)), 1);
	cJSON_Delete(patch);
	pass_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(outputs_secret_created),
		cmocka_unit_test(outputs_without_secrets),
		cmocka_unit_test(outputs_secret_updated_when_ours),
		cmocka_unit_test(someone_elses_secret_is_left_alone),
		cmocka_unit_test(outputs_write_failures),
		cmocka_unit_test(job_status_outputs_come_from_the_masked_copy),
		cmocka_unit_test(without_the_masked_copy_every_output_is_masked),
		cmocka_unit_test(masked_outputs_too_large_for_the_annotation),
		cmocka_unit_test(finalizer_added_and_removed),
		cmocka_unit_test(finalizer_conflict),
	};
	return cmocka_run_group_tests(tests, fake_setup, fake_teardown);
}
