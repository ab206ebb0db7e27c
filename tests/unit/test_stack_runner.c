/*
 * test_stack_runner.c - the pod side of the Job runner (stack_runner.c)
 * without a pod: what run-update reads and what it writes back.
 *
 *   - stack_run_input_parse: every field of PULUMI_CONTROLLER_UPDATE
 *     (JOBS.md), defaults for what is absent, and refusals that name the
 *     field and never quote a value;
 *   - stack_run_termination: the compact JSON the controller reads back,
 *     at most the cap however hostile the message (quotes, control bytes,
 *     invalid UTF-8, megabytes), always valid JSON and UTF-8, the message
 *     cut with a mark; a summary too large to fit is dropped, not the JSON;
 *   - stack_run_exit_code: 0 / 1 / 2.
 *
 * Inputs are written with single quotes for readability (json() swaps them).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pulumi/pulumi.h"
#include "stack/stack.h"

#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define FLUX_SRC "'source': {'kind': 'artifact', 'url': 'http://sc.flux-system/a.tar.gz', " \
	"'digest': '" DIGEST "', 'revision': 'main@sha1:abc'}"
#define BASE "'v': 1, 'operation': 'up', 'namespace': 'apps', 'name': 'web', 'stack': 'dev', "

/* s with ' turned into " (static buffer: one at a time). */
static const char *json(const char *s)
{
	static char buf[8192];
	size_t i;

	for (i = 0; s[i] && i < sizeof(buf) - 1; i++)
		buf[i] = s[i] == '\'' ? '"' : s[i];
	buf[i] = '\0';
	return buf;
}

static struct stack_run_input *parse_ok(const char *text)
{
	struct err e = { 0 };
	struct stack_run_input *in = stack_run_input_parse(json(text), &e);

	if (in == NULL)
		fail_msg("refused: %s", e.msg);
	return in;
}

static void full_flux_input(void **state)
{
	struct stack_run_input *in = parse_ok("{" BASE "'fingerprint': 'ab12', " FLUX_SRC ", "
	    "'dir': 'infra/web', 'backend': 'file:///state', 'secretsProvider': 'passphrase', "
	    "'config': {'greeting': 'hi', 'tags': '{\\'a\\':1}'}, 'structuredConfig': ['tags'], "
	    "'secretConfig': {'db': 'PC_SECRET_0'}, 'configFromEnv': {'region': 'PC_CM_0'}, "
	    "'env': ['PULUMI_CONFIG_PASSPHRASE', 'AWS_REGION'], 'refresh': true, "
	    "'targets': ['urn:a'], 'policyPacks': ['policy'], 'outputsSecret': 'web-outputs', "
	    "'timeoutSeconds': 900, 'cancelLock': 'pulumi@web-up-0123456789-abcde'}");

	(void)state;
	assert_string_equal(in->cancel_lock, "pulumi@web-up-0123456789-abcde");
	assert_string_equal(in->operation, "up");
	assert_string_equal(in->namespace, "apps");
	assert_string_equal(in->name, "web");
	assert_string_equal(in->stack, "dev");
	assert_string_equal(in->fingerprint, "ab12");
	assert_int_equal(in->oci, 0);
	assert_string_equal(in->url, "http://sc.flux-system/a.tar.gz");
	assert_string_equal(in->digest, DIGEST);
	assert_string_equal(in->revision, "main@sha1:abc");
	assert_string_equal(in->dir, "infra/web");
	assert_string_equal(in->backend, "file:///state");
	assert_string_equal(in->secrets_provider, "passphrase");
	assert_int_equal(in->n_config, 2);
	assert_string_equal(in->config[1].key, "tags");
	assert_string_equal(in->config[1].value, "{\"a\":1}");
	assert_int_equal(in->n_structured, 1);
	assert_string_equal(in->structured[0], "tags");
	assert_int_equal(in->n_secret_config, 1);
	assert_string_equal(in->secret_config[0].key, "db");
	assert_string_equal(in->secret_config[0].value, "PC_SECRET_0");
	assert_string_equal(in->config_from_env[0].value, "PC_CM_0");
	assert_int_equal(in->n_env, 2);
	assert_string_equal(in->env[1], "AWS_REGION");
	assert_int_equal(in->refresh, 1);
	assert_int_equal(in->n_targets, 1);
	assert_string_equal(in->policy_packs[0], "policy");
	assert_string_equal(in->outputs_secret, "web-outputs");
	assert_int_equal(in->timeout_seconds, 900);
	stack_run_input_free(in);
}

static void oci_input_and_defaults(void **state)
{
	struct stack_run_input *in = parse_ok("{" BASE "'source': {'kind': 'oci', "
	    "'url': 'oci://registry.test/team/app', 'manifestDigest': '" DIGEST "', "
	    "'layerDigest': '" DIGEST "', 'revision': 'v1@" DIGEST "', 'mediaType': null, "
	    "'insecure': true, 'verify': true}, 'dir': null, 'secretsProvider': null}");

	(void)state;
	assert_int_equal(in->oci, 1);
	assert_string_equal(in->url, "oci://registry.test/team/app");
	assert_string_equal(in->manifest_digest, DIGEST);
	assert_string_equal(in->layer_digest, DIGEST);
	assert_null(in->media_type);
	assert_int_equal(in->insecure, 1);
	assert_int_equal(in->verify, 1);
	/* what is absent or null */
	assert_null(in->dir);
	assert_null(in->backend);
	assert_null(in->secrets_provider);
	assert_null(in->outputs_secret);
	assert_null(in->cancel_lock);
	assert_int_equal(in->n_config + in->n_env + in->n_targets + in->n_policy_packs, 0);
	assert_int_equal(in->refresh, 0);
	assert_int_equal(in->timeout_seconds, 3600);
	stack_run_input_free(in);
}

/* Each refusal: ERR_INVALID, the field named, no value quoted. */
static void refusals_name_the_field(void **state)
{
	static const struct { const char *text, *want; } cases[] = {
		{ "", "is not set" },
		{ "[1]", "not a JSON object" },
		{ "{'v': 1", "not a JSON object" },
		{ "{" FLUX_SRC "}", "v must be 1" },
		{ "{'v': 2, 'operation': 'up'}", "v must be 1" },
		{ "{'v': 1, 'operation': 'apply', 'namespace': 'a', 'name': 'b', 'stack': 'c', " FLUX_SRC "}",
		  "operation" },
		{ "{'v': 1, 'operation': 'up', 'name': 'b', 'stack': 'c', " FLUX_SRC "}",
		  "namespace is required" },
		{ "{'v': 1, 'operation': 'up', 'namespace': 'a', 'name': 'b', 'stack': '', " FLUX_SRC "}",
		  "stack must not be empty" },
		{ "{'v': 1, 'operation': 'up', 'namespace': 'a', 'name': '../etc', 'stack': 'c', " FLUX_SRC "}",
		  "name is not a valid" },
		{ "{'v': 1, 'operation': 'up', 'namespace': 'A/B', 'name': 'b', 'stack': 'c', " FLUX_SRC "}",
		  "namespace is not a valid" },
		{ "{" BASE "'source': 'x'}", "source must be an object" },
		{ "{" BASE "'source': {'kind': 'git', 'url': 'x'}}", "source.kind" },
		{ "{" BASE "'source': {'kind': 'artifact', 'url': 'file:///x', 'digest': '" DIGEST "'}}",
		  "source.url" },
		{ "{" BASE "'source': {'kind': 'artifact', 'url': 'http://x/a'}}", "source.digest is required" },
		{ "{" BASE "'source': {'kind': 'artifact', 'url': 'http://x/a', 'digest': 'sha256:00'}}",
		  "source.digest" },
		{ "{" BASE "'source': {'kind': 'oci', 'url': 'http://x/a', 'manifestDigest': '" DIGEST "'}}",
		  "source.url" },
		{ "{" BASE "'source': {'kind': 'oci', 'url': 'oci://x/a@" DIGEST "', 'manifestDigest': '"
		  DIGEST "'}}", "source.url" },
		{ "{" BASE "'source': {'kind': 'oci', 'url': 'oci://x/a', 'manifestDigest': 'v1'}}",
		  "source.manifestDigest" },
		{ "{" BASE "'source': {'kind': 'oci', 'url': 'oci://x/a', 'manifestDigest': '" DIGEST "', "
		  "'verify': 'yes'}}", "source.verify must be true or false" },
		{ "{" BASE FLUX_SRC ", 'dir': '/abs'}", "dir must be" },
		{ "{" BASE FLUX_SRC ", 'dir': 'a/../../b'}", "dir must be" },
		{ "{" BASE FLUX_SRC ", 'policyPacks': ['../p']}", "policyPacks[0]" },
		{ "{" BASE FLUX_SRC ", 'config': ['a']}", "config must be an object" },
		{ "{" BASE FLUX_SRC ", 'config': {'k': 5}}", "config.k must be a string" },
		{ "{" BASE FLUX_SRC ", 'secretConfig': {'db': 'X=Y'}}", "secretConfig.db" },
		{ "{" BASE FLUX_SRC ", 'configFromEnv': {'r': ''}}", "configFromEnv.r" },
		{ "{" BASE FLUX_SRC ", 'env': ['OK', '1BAD']}", "env[1]" },
		{ "{" BASE FLUX_SRC ", 'targets': 'urn'}", "targets must be an array" },
		{ "{" BASE FLUX_SRC ", 'targets': ['']}", "targets[0]" },
		{ "{" BASE FLUX_SRC ", 'refresh': 1}", "refresh must be true or false" },
		{ "{" BASE FLUX_SRC ", 'timeoutSeconds': -5}", "timeoutSeconds" },
		{ "{" BASE FLUX_SRC ", 'timeoutSeconds': '60'}", "timeoutSeconds" },
		{ "{" BASE FLUX_SRC ", 'outputsSecret': 'someone-elses'}", "outputsSecret must be \"web-outputs\"" },
		{ "{" BASE FLUX_SRC ", 'fingerprint': 'not-hex'}", "fingerprint" },
		{ "{" BASE FLUX_SRC ", 'cancelLock': '" "0123456789012345678901234567890123456789012345678901234567890123"
		  "0123456789012345678901234567890123456789012345678901234567890123'}", "cancelLock must be" },
		{ "{" BASE FLUX_SRC ", 'cancelLock': 'a@b\\u0001'}", "cancelLock holds a control" },
		{ "{" BASE FLUX_SRC ", 'cancelLock': 7}", "cancelLock" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct err e = { 0 };
		struct stack_run_input *in = stack_run_input_parse(cases[i].text[0] ? json(cases[i].text) : "",
		    &e);
		if (in != NULL)
			fail_msg("case %zu accepted: %s", i, cases[i].text);
		assert_int_equal(e.code, ERR_INVALID);
		if (strstr(e.msg, cases[i].want) == NULL)
			fail_msg("case %zu: \"%s\" does not say \"%s\"", i, e.msg, cases[i].want);
		assert_non_null(strstr(e.msg, "PULUMI_CONTROLLER_UPDATE"));
	}
}

static void refusals_quote_no_value(void **state)
{
	struct err e = { 0 };

	(void)state;
	/* a plaintext value beside the bad field, and a bad value itself */
	assert_null(stack_run_input_parse(json("{" BASE FLUX_SRC ", 'config': {'a': 'val-QX7', "
	    "'b': 7}}"), &e));
	assert_null(strstr(e.msg, "val-QX7"));
	assert_null(stack_run_input_parse(json("{" BASE FLUX_SRC ", 'secretConfig': {'db': "
	    "'hunter2 is my password'}}"), &e));
	assert_null(strstr(e.msg, "hunter2"));
	assert_non_null(strstr(e.msg, "secretConfig.db"));
}

/* ---- termination message ---- */

/* Strict UTF-8: no overlong form, surrogate or code point past U+10FFFF. */
static int utf8_valid(const unsigned char *s)
{
	while (*s) {
		size_t n = *s < 0x80 ? 1 : *s < 0xc2 ? 0 : *s < 0xe0 ? 2 : *s < 0xf0 ? 3 : *s < 0xf5 ? 4 : 0;
		if (n == 0)
			return 0;
		for (size_t i = 1; i < n; i++)
			if ((s[i] & 0xc0) != 0x80)
				return 0;
		if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
		    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
			return 0;
		s += n;
	}
	return 1;
}

/* Checks text as a termination message: size, JSON, UTF-8, the fixed
 * fields; returns the parsed object (caller frees). */
static cJSON *check_message(const char *text, size_t max)
{
	cJSON *j;

	assert_true(strlen(text) <= max);
	assert_true(utf8_valid((const unsigned char *)text));
	j = cJSON_Parse(text);
	assert_non_null(j);
	assert_int_equal(cJSON_GetObjectItem(j, "v")->valueint, 1);
	assert_true(cJSON_IsString(cJSON_GetObjectItem(j, "status")));
	assert_true(cJSON_IsString(cJSON_GetObjectItem(j, "message")));
	assert_true(cJSON_IsString(cJSON_GetObjectItem(j, "outputs")));
	assert_true(cJSON_IsString(cJSON_GetObjectItem(j, "class")));
	assert_non_null(cJSON_GetObjectItem(j, "changes"));
	assert_non_null(cJSON_GetObjectItem(j, "lock"));
	return j;
}

static void termination_of_a_success(void **state)
{
	struct stack_run_result r;
	char *text;
	cJSON *j;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.status = PL_OK;
	r.cls = STACK_RUN_OK;
	r.outputs = STACK_RUN_OUTPUTS_WRITTEN;
	snprintf(r.message, sizeof(r.message), "succeeded");
	r.changes = cJSON_Parse("{\"create\":1,\"same\":2}");
	text = stack_run_termination(&r, STACK_RUN_TERMINATION_MAX);
	assert_string_equal(text, "{\"v\":1,\"status\":\"ok\",\"message\":\"succeeded\",\"changes\":"
	    "{\"create\":1,\"same\":2},\"outputs\":\"written\",\"lock\":null,\"class\":\"ok\"}");
	free(text);
	/* a conflict names its lock */
	r.status = PL_CONFLICT;
	r.cls = STACK_RUN_CONFLICT;
	r.outputs = STACK_RUN_OUTPUTS_NONE;
	r.lock_present = 1;
	snprintf(r.lock_owner, sizeof(r.lock_owner), "ops@elsewhere");
	snprintf(r.lock_created, sizeof(r.lock_created), "2026-12-01T10:00:00Z");
	r.lock_pid = 4242;
	text = stack_run_termination(&r, STACK_RUN_TERMINATION_MAX);
	j = check_message(text, STACK_RUN_TERMINATION_MAX);
	assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "conflict");
	assert_string_equal(cJSON_GetObjectItem(j, "class")->valuestring, "conflict");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "lock"),
	    "owner")), "ops@elsewhere");
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "lock"), "pid")->valueint, 4242);
	cJSON_Delete(j);
	free(text);
	stack_run_result_free(&r);
}

/* A message of every kind of trouble: JSON metacharacters and control
 * bytes (escaped 2 or 6 times longer), multi-byte UTF-8, invalid bytes. */
static void hostile(char *buf, size_t n, unsigned seed)
{
	static const char *parts[] = { "\"", "\\", "\x01", "\n", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xff",
	    "\xc3", "a", "\x1f", "\xed\xa0\x80", "}", "\t" };
	size_t o = 0;

	while (o + 5 < n) {
		const char *p = parts[(seed = seed * 1103515245u + 12345u) % (sizeof(parts) / sizeof(parts[0]))];
		memcpy(buf + o, p, strlen(p));
		o += strlen(p);
	}
	buf[o] = '\0';
}

static void termination_is_capped_whatever_the_message(void **state)
{
	static const size_t caps[] = { STACK_RUN_TERMINATION_MAX, 1000, 200, 150 };
	struct stack_run_result r;

	(void)state;
	for (unsigned seed = 1; seed <= 40; seed++)
		for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
			char *text;
			cJSON *j;
			memset(&r, 0, sizeof(r));
			r.status = PL_FAILED;
			r.cls = STACK_RUN_FAILED;
			hostile(r.message, sizeof(r.message), seed);
			text = stack_run_termination(&r, caps[c]);
			j = check_message(text, caps[c]);
			/* cut, and says so (at the real cap some fit whole) */
			if (caps[c] < 1000 && strstr(cJSON_GetObjectItem(j, "message")->valuestring, "\xe2\x80\xa6") == NULL)
				fail_msg("seed %u cap %zu: %s", seed, caps[c], text);
			assert_string_equal(cJSON_GetObjectItem(j, "class")->valuestring, "failed");
			cJSON_Delete(j);
			free(text);
		}
}

/* Close to the cap the cut is tight: the message fills what is left. */
static void termination_uses_the_room_it_has(void **state)
{
	struct stack_run_result r;
	char *text;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.status = PL_FAILED;
	r.cls = STACK_RUN_FAILED;
	memset(r.message, 'x', sizeof(r.message) - 1);
	text = stack_run_termination(&r, 1000);
	assert_true(strlen(text) >= 1000 - 3 && strlen(text) <= 1000);
	free(text);
	/* a message that fits is whole, without a mark */
	snprintf(r.message, sizeof(r.message), "error: \"quoted\"\n");
	text = stack_run_termination(&r, 1000);
	assert_non_null(strstr(text, "\"message\":\"error: \\\"quoted\\\"\\n\""));
	free(text);
}

/* A summary larger than the cap goes, the message and JSON stay. */
static void huge_changes_are_dropped(void **state)
{
	struct stack_run_result r;
	char key[32], *text;
	cJSON *j;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.status = PL_OK;
	r.cls = STACK_RUN_OK;
	snprintf(r.message, sizeof(r.message), "succeeded");
	r.changes = cJSON_CreateObject();
	for (int i = 0; i < 500; i++) {
		snprintf(key, sizeof(key), "op-%d", i);
		cJSON_AddNumberToObject(r.changes, key, i);
	}
	text = stack_run_termination(&r, STACK_RUN_TERMINATION_MAX);
	j = check_message(text, STACK_RUN_TERMINATION_MAX);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "changes")));
	assert_string_equal(cJSON_GetObjectItem(j, "message")->valuestring, "succeeded");
	cJSON_Delete(j);
	free(text);
	stack_run_result_free(&r);
}

/* What a refresh found drifted travels back (status.drift): whole when it
 * fits, and when it does not, cut from the end with the rest counted as
 * omitted, the message keeping its room. */
static void drift_resources_fit_the_cap(void **state)
{
	struct stack_run_result r;
	char urn[300], *text;
	const cJSON *d;
	cJSON *j;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.status = PL_CHANGES_NOT_EXPECTED;
	r.cls = STACK_RUN_FAILED;
	snprintf(r.message, sizeof(r.message), "no changes were expected");
	r.drift = cJSON_Parse("[{\"op\":\"update\",\"urn\":\"urn:pulumi:dev::p::standin:index:File::note\"}]");
	r.drift_omitted = 0;
	text = stack_run_termination(&r, STACK_RUN_TERMINATION_MAX);
	j = check_message(text, STACK_RUN_TERMINATION_MAX);
	d = cJSON_GetObjectItem(j, "drift");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(d, "resources")), 1);
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "resources"), 0),
	    "op")->valuestring, "update");
	assert_int_equal(cJSON_GetObjectItem(d, "omitted")->valueint, 0);
	cJSON_Delete(j);
	free(text);
	/* 50 long URNs (what the pod keeps) and 7 more it counted */
	cJSON_Delete(r.drift);
	r.drift = cJSON_CreateArray();
	for (int i = 0; i < 50; i++) {
		cJSON *e = cJSON_CreateObject();
		snprintf(urn, sizeof(urn), "urn:pulumi:dev::network::aws:ec2/securityGroupRule:"
		    "SecurityGroupRule::a-rather-long-resource-name-of-the-ingress-rule-%03d", i);
		cJSON_AddStringToObject(e, "op", "update");
		cJSON_AddStringToObject(e, "urn", urn);
		cJSON_AddItemToArray(r.drift, e);
	}
	r.drift_omitted = 7;
	memset(r.message, 'm', 1000);
	r.message[1000] = '\0';
	text = stack_run_termination(&r, STACK_RUN_TERMINATION_MAX);
	j = check_message(text, STACK_RUN_TERMINATION_MAX);
	d = cJSON_GetObjectItem(j, "drift");
	{
		int kept = cJSON_GetArraySize(cJSON_GetObjectItem(d, "resources"));
		assert_true(kept > 10 && kept < 50);
		assert_int_equal(cJSON_GetObjectItem(d, "omitted")->valueint, 57 - kept);
	}
	assert_true(strlen(cJSON_GetObjectItem(j, "message")->valuestring) >= 390);
	cJSON_Delete(j);
	free(text);
	stack_run_result_free(&r);
}

static void exit_codes(void **state)
{
	struct stack_run_result r;
	struct err e;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.status = PL_OK;
	assert_int_equal(stack_run_exit_code(&r), 0);
	r.status = PL_PROGRAM_ERROR;
	assert_int_equal(stack_run_exit_code(&r), 1);
	r.status = PL_CHANGES_NOT_EXPECTED;   /* drift found: the check itself succeeded */
	assert_int_equal(stack_run_exit_code(&r), 0);
	err_set(&e, ERR_INVALID, "PULUMI_CONTROLLER_UPDATE: v must be 1");
	stack_run_result_usage(&r, &e);
	assert_int_equal(stack_run_exit_code(&r), 2);
	assert_string_equal(stack_run_class_name(r.cls), "internal");
	assert_string_equal(r.message, e.msg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(full_flux_input),
		cmocka_unit_test(oci_input_and_defaults),
		cmocka_unit_test(refusals_name_the_field),
		cmocka_unit_test(refusals_quote_no_value),
		cmocka_unit_test(termination_of_a_success),
		cmocka_unit_test(termination_is_capped_whatever_the_message),
		cmocka_unit_test(termination_uses_the_room_it_has),
		cmocka_unit_test(huge_changes_are_dropped),
		cmocka_unit_test(drift_resources_fit_the_cap),
		cmocka_unit_test(exit_codes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
