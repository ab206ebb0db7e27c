/*
 * test_pulumi_parse.c - unit tests for the pulumi driver's parsers
 * (src/pulumi/pl_parse.c) and classifier (pl_classify.c): version strings,
 * the event log in any chunking, the JSON outputs, secret masking, and the
 * mapping of CLI texts to statuses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulumi/pl_internal.h"

static void test_version(void **state)
{
	int a, b, c;

	(void)state;
	assert_int_equal(pl_parse_version("v3.135.0\n", &a, &b, &c), 0);
	assert_int_equal(a * 10000 + b * 10 + c, 31350);
	assert_int_equal(pl_parse_version("3.2.0-alpha.1+dirty", &a, &b, &c), 0);
	assert_int_equal(b, 2);
	assert_int_equal(pl_parse_version("v3.x", &a, &b, &c), -1);
	assert_int_equal(pl_parse_version("", &a, &b, &c), -1);
	assert_int_equal(pl_parse_version("v3.1.2garbage", &a, &b, &c), -1);
}

static const char LOG[] =
	"{\"sequence\":0,\"timestamp\":1,\"preludeEvent\":{\"config\":{\"demo:pw\":\"[secret]\"}}}\n"
	"{\"sequence\":1,\"timestamp\":1,\"resourcePreEvent\":{\"metadata\":{\"op\":\"create\","
	"\"urn\":\"urn:pulumi:dev::demo::standin:index:File::a\",\"type\":\"standin:index:File\"}}}\n"
	"{\"sequence\":2,\"timestamp\":1,\"diagnosticEvent\":{\"message\":\"boom happened\\nmore\","
	"\"color\":\"never\",\"severity\":\"error\"}}\n"
	"{\"sequence\":3,\"timestamp\":1,\"policyEvent\":{\"message\":\"no files\\n\","
	"\"policyName\":\"no-files\",\"enforcementLevel\":\"mandatory\"}}\n"
	"{\"sequence\":4,\"timestamp\":1,\"policyEvent\":{\"message\":\"advice\\n\","
	"\"policyName\":\"hint\",\"enforcementLevel\":\"advisory\"}}\n"
	"not json at all\n"
	"{\"sequence\":5,\"timestamp\":2,\"summaryEvent\":{\"maybeCorrupt\":false,"
	"\"durationSeconds\":2,\"resourceChanges\":{\"create\":1,\"same\":3},\"PolicyPacks\":{},"
	"\"isPreview\":true,\"result\":\"failed\"}}\n"
	"{\"sequence\":6,\"timestamp\":2,\"cancelEvent\":{}}\n";

static int progress_calls;

static void on_step(void *arg, const struct pl_step *s)
{
	(void)arg;
	assert_string_equal(s->op, "create");
	progress_calls++;
}

static void check_log(struct pl_events *ev)
{
	assert_int_equal(ev->events, 7);
	assert_int_equal(ev->bad_lines, 1);
	assert_true(ev->saw_prelude && ev->saw_cancel);
	assert_int_equal(ev->steps, 1);
	assert_int_equal(ev->policy_violations, 1);
	assert_string_equal(ev->first_error, "boom happened");
	assert_string_equal(ev->first_policy, "no-files: no files");
	assert_true(ev->summary.present);
	assert_int_equal(ev->summary.count, 1);
	assert_true(ev->summary.is_preview);
	assert_string_equal(ev->summary.result, "failed");
	assert_int_equal(ev->summary.duration_seconds, 2);
	assert_int_equal(cJSON_GetObjectItem(ev->summary.changes, "same")->valueint, 3);
}

static void test_events_whole(void **state)
{
	struct pl_events ev;

	(void)state;
	pl_events_init(&ev);
	ev.progress = on_step;
	progress_calls = 0;
	pl_events_feed(&ev, LOG, strlen(LOG));
	pl_events_finish(&ev);
	check_log(&ev);
	assert_int_equal(progress_calls, 1);
	pl_events_free(&ev);
}

static int drifted_steps;

static void count_drifted(void *arg, const struct pl_step *s)
{
	(void)arg;
	drifted_steps += s->drifted;
}

/* An update's refresh (observed on v3.274.1): the outcome of a refreshed
 * resource whose read changed the state is op "refresh" with diffs. */
static void test_refresh_outcome_with_diffs_is_drift(void **state)
{
	static const char log[] =
	    "{\"sequence\":1,\"timestamp\":1,\"resOutputsEvent\":{\"metadata\":{\"op\":\"refresh\","
	    "\"urn\":\"urn:pulumi:dev::p::standin:index:File::note\",\"type\":\"standin:index:File\","
	    "\"diffs\":[\"content\"]}}}\n"
	    "{\"sequence\":2,\"timestamp\":1,\"resOutputsEvent\":{\"metadata\":{\"op\":\"refresh\","
	    "\"urn\":\"urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev\",\"type\":\"pulumi:pulumi:Stack\","
	    "\"diffs\":[]}}}\n"
	    "{\"sequence\":3,\"timestamp\":1,\"resourcePreEvent\":{\"metadata\":{\"op\":\"refresh\","
	    "\"urn\":\"urn:pulumi:dev::p::standin:index:File::other\",\"type\":\"standin:index:File\","
	    "\"diffs\":[\"content\"]}}}\n"
	    "{\"sequence\":4,\"timestamp\":1,\"resOutputsEvent\":{\"metadata\":{\"op\":\"update\","
	    "\"urn\":\"urn:pulumi:dev::p::standin:index:File::note\",\"type\":\"standin:index:File\","
	    "\"diffs\":[\"content\"]}}}\n";
	struct pl_events ev;

	(void)state;
	pl_events_init(&ev);
	ev.progress = count_drifted;
	drifted_steps = 0;
	pl_events_feed(&ev, log, strlen(log));
	pl_events_finish(&ev);
	assert_int_equal(drifted_steps, 1);   /* not the empty diffs, the pre-event, the update */
	pl_events_free(&ev);
}

static void test_events_any_chunking(void **state)
{
	(void)state;
	for (size_t chunk = 1; chunk < 40; chunk += 3) {
		struct pl_events ev;

		pl_events_init(&ev);
		for (size_t off = 0; off < strlen(LOG); off += chunk) {
			size_t n = strlen(LOG) - off < chunk ? strlen(LOG) - off : chunk;

			pl_events_feed(&ev, LOG + off, n);
		}
		pl_events_finish(&ev);
		check_log(&ev);
		pl_events_free(&ev);
	}
}

static void test_events_last_line_without_newline(void **state)
{
	static const char tail[] = "{\"sequence\":0,\"timestamp\":1,\"cancelEvent\":{}}";
	struct pl_events ev;

	(void)state;
	pl_events_init(&ev);
	pl_events_feed(&ev, tail, strlen(tail));
	assert_false(ev.saw_cancel);
	pl_events_finish(&ev);
	assert_true(ev.saw_cancel);
	pl_events_free(&ev);
}

static void test_events_overlong_line_is_skipped(void **state)
{
	size_t n = 5u * 1024 * 1024;
	char *big = malloc(n);
	static const char next[] = "\n{\"sequence\":1,\"timestamp\":1,\"cancelEvent\":{}}\n";
	struct pl_events ev;

	(void)state;
	memset(big, 'x', n);
	pl_events_init(&ev);
	for (size_t off = 0; off < n; off += 65536)
		pl_events_feed(&ev, big + off, 65536);
	pl_events_feed(&ev, next, strlen(next));
	pl_events_finish(&ev);
	assert_int_equal(ev.bad_lines, 1);
	assert_true(ev.saw_cancel);
	assert_null(ev.partial);
	pl_events_free(&ev);
	free(big);
}

static void test_outputs_history_config(void **state)
{
	cJSON *o, *h;
	int empty;

	(void)state;
	o = pl_parse_outputs("{\n  \"a\": 1,\n  \"s\": \"[secret]\"\n}\n");
	assert_non_null(o);
	assert_string_equal(cJSON_GetObjectItem(o, "s")->valuestring, "[secret]");
	cJSON_Delete(o);
	assert_null(pl_parse_outputs("[1,2]"));
	assert_null(pl_parse_outputs("{"));
	assert_null(pl_parse_outputs(NULL));

	h = pl_parse_history("[{\"kind\":\"update\",\"result\":\"succeeded\"},{\"kind\":\"x\"}]", &empty);
	assert_non_null(h);
	assert_false(empty);
	assert_string_equal(cJSON_GetObjectItem(h, "kind")->valuestring, "update");
	cJSON_Delete(h);
	assert_null(pl_parse_history("[]", &empty));
	assert_true(empty);
	assert_null(pl_parse_history("{}", &empty));
	assert_false(empty);

}

static void test_redact(void **state)
{
	const char *secrets[] = { "pw", "pw-long", "q\"uote", "" };
	char *s;

	(void)state;
	s = pl_redact("a pw-long b pw c {\"x\":\"q\\\"uote\"} q\"uote", secrets, 4);
	assert_string_equal(s, "a [secret] b [secret] c {\"x\":\"[secret]\"} [secret]");
	free(s);
	s = pl_redact(NULL, secrets, 4);
	assert_string_equal(s, "");
	free(s);
}

/* Issue 21 review: masked one after another, the longer secret's mask took
 * part of a shorter one it overlaps, and the rest of that one showed
 * ("hunter2-[secret]").  Overlapping and adjacent occurrences are one mask. */
static void test_redact_overlapping_secrets(void **state)
{
	const char *secrets[] = { "hunter2-topsecret", "topsecret-and-then-some" };
	const char *marker[] = { "[secret]", "secret" };
	char *s;

	(void)state;
	s = pl_redact("token=hunter2-topsecret-and-then-some end", secrets, 2);
	assert_string_equal(s, "token=[secret] end");
	free(s);
	s = pl_redact("a hunter2-topsecrethunter2-topsecret b", secrets, 1);
	assert_string_equal(s, "a [secret] b");
	free(s);
	/* A secret that is the mask, or inside it: masked once, no loop. */
	s = pl_redact("x [secret] y secret", marker, 2);
	assert_string_equal(s, "x [secret] y [secret]");
	free(s);
}

/* A PEM-like key and a JSON key file (holding a PEM key, escaped). */
static const char PEM[] =
	"-----BEGIN PRIVATE KEY-----\n"
	"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
	"BKcwggSjAgEAAoIBAQC7pemQ2x9vK3Lz\n"
	"-----END PRIVATE KEY-----\n";
static const char KEYFILE[] =
	"{\n"
	"  \"type\": \"service_account\",\n"
	"  \"private_key_id\": \"0123456789abcdef0123\",\n"
	"  \"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIEvgIBADANBgkqhkiG9w0BAQ\\n"
	"Zm9vYmFyYmF6cXV4cXV1eA==\\n-----END PRIVATE KEY-----\\n\",\n"
	"  \"client_email\": \"ci@demo-proj.iam.gserviceaccount.com\"\n"
	"}\n";

/* Fails when text holds any line (>= 8 bytes, trimmed) of secret, or the
 * secret's distinctive base64 bodies. */
static void assert_no_part_of(const char *text, const char *secret)
{
	static const char *const bodies[] = {
		"MIIEvQIBADAN", "BKcwggSjAgEA", "MIIEvgIBADAN", "Zm9vYmFyYmF6", "0123456789abcdef",
		"ci@demo-proj",
	};
	char line[512];
	const char *p = secret;

	while (*p) {
		size_t len = strcspn(p, "\n"), b = 0, e = len;

		while (b < e && p[b] == ' ')
			b++;
		if (e - b >= PL_REDACT_MIN_LINE && e - b < sizeof(line)) {
			memcpy(line, p + b, e - b);
			line[e - b] = '\0';
			if (strstr(text, line))
				fail_msg("a line of the secret survived: %s\nin: %s", line, text);
		}
		p += len + (p[len] == '\n');
	}
	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
		if (strstr(secret, bodies[i]) && strstr(text, bodies[i]))
			fail_msg("part of the secret survived: %s\nin: %s", bodies[i], text);
}

static void test_redact_multiline_secrets_line_by_line(void **state)
{
	const char *secrets[] = { PEM, KEYFILE };
	char text[4096], *s;

	(void)state;
	/* Re-indented by whoever printed it: the whole no longer matches. */
	snprintf(text, sizeof(text),
		 "error: bad key:\n    -----BEGIN PRIVATE KEY-----\n    MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
		 "    BKcwggSjAgEAAoIBAQC7pemQ2x9vK3Lz\n    -----END PRIVATE KEY-----\n"
		 "key file line:   \"private_key_id\": \"0123456789abcdef0123\",\n"
		 "decoded: MIIEvgIBADANBgkqhkiG9w0BAQ\nZm9vYmFyYmF6cXV4cXV1eA==\n"
		 "email ci@demo-proj.iam.gserviceaccount.com\n");
	s = pl_redact(text, secrets, 2);
	assert_no_part_of(s, PEM);
	assert_no_part_of(s, KEYFILE);
	assert_non_null(strstr(s, "error: bad key:"));
	/* Short lines ("}") are not masked everywhere. */
	free(s);
	s = pl_redact("{ } ok", secrets, 2);
	assert_string_equal(s, "{ } ok");
	free(s);
}

static void test_redact_tail_drops_a_cut_first_line(void **state)
{
	const char *secrets[] = { "tok-0123456789abcdefghij" };
	char *s;

	(void)state;
	/* The tail's bound fell inside the secret: its end is not the secret. */
	s = pl_redact_tail("456789abcdefghij rest\nmore tok-0123456789abcdefghij\n", 1, secrets, 1);
	assert_string_equal(s, "more [secret]\n");
	free(s);
	s = pl_redact_tail("whole\n", 0, secrets, 1);
	assert_string_equal(s, "whole\n");
	free(s);
	s = pl_redact_tail("no newline at all", 1, secrets, 1);
	assert_string_equal(s, "");
	free(s);
}

/* The secrets of a spec (what a Job's pod may print, masked by the
 * controller): values that are, or are inside, the mask itself, a short
 * value at the very end, the passphrase, JSON leaves, backend credentials. */
static void test_spec_redact_masks_the_secrets_pl_open_records(void **state)
{
	const struct pl_config_item cfg[] = {
		{ "a", "[secret]", 1, 0 }, { "b", "secret", 1, 0 }, { "c", "k9Zq", 1, 0 },
		{ "d", "{\"tok\":\"leafvalue\"}", 1, 1 }, { "e", "plain", 0, 0 },
	};
	const struct pl_env_var env[] = { { "PULUMI_CONFIG_PASSPHRASE", "pass-phrase", 1 } };
	struct pl_spec sp;
	char *s;

	(void)state;
	memset(&sp, 0, sizeof(sp));
	sp.stack = "dev";
	sp.config = cfg;
	sp.n_config = 5;
	sp.env = env;
	sp.n_env = 1;
	sp.backend_url = "s3://AKID:topsecretpw@minio.example/b";
	s = pl_spec_redact(&sp, "x [secret] secret plain leafvalue pass-phrase topsecretpw k9Zq");
	assert_non_null(s);
	assert_null(strstr(s, "k9Zq"));
	assert_null(strstr(s, "leafvalue"));
	assert_null(strstr(s, "pass-phrase"));
	assert_null(strstr(s, "topsecretpw"));
	assert_non_null(strstr(s, "plain"));
	assert_true(strncmp(s, "x [", 3) == 0);
	free(s);
	/* Invalid env: nothing may be shown. */
	sp.n_env = 0;
	sp.n_config = 0;
	{
		const struct pl_env_var bad[] = { { "1BAD", "v", 1 } };
		sp.env = bad;
		sp.n_env = 1;
		assert_null(pl_spec_redact(&sp, "text"));
	}
}

static void test_messages_are_masked_before_they_are_cut(void **state)
{
	const char *secrets[] = { PEM, KEYFILE };
	struct proc_result pr = { .started = 1, .exited = 1, .exit_code = 1 };
	char err[2048], log[4096];
	struct pl_events ev;
	struct pl_result r = { 0 };

	(void)state;
	/* stderr's error line is the first line of a message holding the key. */
	snprintf(err, sizeof(err), "error: invalid key \"%s\"\n", PEM);
	pr.out = "";
	pr.errout = err;
	pl_classify("up", &pr, NULL, secrets, 2, &r);
	assert_no_part_of(r.message, PEM);
	assert_non_null(strstr(r.message, "up: invalid key"));
	/* The last line of stderr is the last line of the key file. */
	snprintf(err, sizeof(err), "could not parse %s", KEYFILE);
	pl_classify("up", &pr, NULL, secrets, 2, &r);
	assert_no_part_of(r.message, KEYFILE);
	/* A long one-line secret cut by the message bound. */
	{
		char longsec[700];
		const char *one[] = { longsec };

		memset(longsec, 'k', sizeof(longsec) - 1);
		longsec[sizeof(longsec) - 1] = '\0';
		snprintf(err, sizeof(err), "error: token %s rejected\n", longsec);
		pl_classify("up", &pr, NULL, one, 1, &r);
		assert_null(strstr(r.message, "kkkkkkkk"));
		assert_non_null(strstr(r.message, "token [secret] rejected"));
	}
	/* An error diagnostic in the event log, cut to its first line. */
	pl_events_init(&ev);
	ev.secrets = secrets;
	ev.n_secrets = 2;
	{
		cJSON *line = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(line, "diagnosticEvent");
		char *msg = NULL, *printed;

		assert_true(asprintf(&msg, "invalid file name \"%s\": only letters", PEM) > 0);
		cJSON_AddStringToObject(d, "message", msg);
		cJSON_AddStringToObject(d, "severity", "error");
		printed = cJSON_PrintUnformatted(line);
		snprintf(log, sizeof(log), "%s\n", printed);
		free(printed);
		free(msg);
		cJSON_Delete(line);
	}
	pl_events_feed(&ev, log, strlen(log));
	assert_int_equal(ev.program_errors, 1);
	assert_no_part_of(ev.first_error, PEM);
	assert_non_null(strstr(ev.first_error, "invalid file name"));
	pr.errout = "";
	pl_classify("up", &pr, &ev, secrets, 2, &r);
	assert_no_part_of(r.message, PEM);
	pl_events_free(&ev);
}

/* The root stack's outputs ride on its resOutputsEvent (observed on
 * v3.274.1, also for an unchanged stack): plaintext in clear, secrets as
 * Pulumi's signature object. */
static void test_events_carry_the_root_stack_outputs(void **state)
{
	static const char log[] =
		"{\"sequence\":1,\"resOutputsEvent\":{\"metadata\":{\"op\":\"same\",\"urn\":"
		"\"urn:pulumi:dev::demo::standin:index:File::note\",\"type\":\"standin:index:File\","
		"\"new\":{\"outputs\":{\"content\":\"x\"}}}}}\n"
		"{\"sequence\":2,\"resOutputsEvent\":{\"metadata\":{\"op\":\"same\",\"urn\":"
		"\"urn:pulumi:dev::demo::pulumi:pulumi:Stack::demo-dev\",\"type\":\"pulumi:pulumi:Stack\","
		"\"new\":{\"outputs\":{\"message\":\"hi\",\"n\":[1,{\"deep\":{"
		"\"4dabf18193072939515e22adb298388d\":\"1b47061264138c4ac30d75fd1eb44270\","
		"\"ciphertext\":\"[secret]\"}}],\"secretOut\":{"
		"\"4dabf18193072939515e22adb298388d\":\"1b47061264138c4ac30d75fd1eb44270\","
		"\"ciphertext\":\"v1:abc\",\"plaintext\":\"\\\"leak-Me-4\\\"\"}}}}}}\n";
	struct pl_events ev;
	char *printed;

	(void)state;
	pl_events_init(&ev);
	pl_events_feed(&ev, log, strlen(log));
	assert_non_null(ev.outputs);
	assert_true(ev.has_secret_outputs);
	printed = cJSON_PrintUnformatted(ev.outputs);
	assert_string_equal(printed, "{\"message\":\"hi\",\"n\":[1,{\"deep\":\"[secret]\"}],"
			    "\"secretOut\":\"[secret]\"}");
	free(printed);
	pl_events_free(&ev);

	/* Without secrets; a failed step's event is not the stack's outputs. */
	pl_events_init(&ev);
	pl_events_feed(&ev, "{\"resOutputsEvent\":{\"metadata\":{\"type\":\"pulumi:pulumi:Stack\","
		       "\"new\":{\"outputs\":{\"a\":\"b\"}}}}}\n", 92);
	assert_non_null(ev.outputs);
	assert_false(ev.has_secret_outputs);
	pl_events_free(&ev);
	pl_events_init(&ev);
	pl_events_feed(&ev, "{\"resOpFailedEvent\":{\"metadata\":{\"type\":\"pulumi:pulumi:Stack\","
		       "\"new\":{\"outputs\":{\"a\":\"b\"}}}}}\n", 93);
	assert_null(ev.outputs);
	pl_events_free(&ev);
}

static struct proc_result fake(int code, const char *out, const char *errout)
{
	struct proc_result pr = { .started = 1, .exited = 1, .exit_code = code };

	pr.out = (char *)out;
	pr.errout = (char *)errout;
	return pr;
}

static enum pl_status classify(int code, const char *out, const char *errout, struct pl_result *r)
{
	struct proc_result pr = fake(code, out, errout);
	const char *secrets[] = { "hunter2" };

	memset(r, 0, sizeof(*r));
	pl_classify("up", &pr, NULL, secrets, 1, r);
	return r->status;
}

static void test_classify(void **state)
{
	struct pl_result r;

	(void)state;
	assert_int_equal(classify(0, "", "", &r), PL_OK);
	assert_int_equal(classify(1, "", "error: the stack is currently locked by 1 lock(s). Either "
				  "wait\n  file:///x: created by a@b (pid 7)\n", &r), PL_CONFLICT);
	assert_string_equal(r.message, "up: the stack is currently locked by 1 lock(s). Either wait");
	assert_true(r.lock.present);
	assert_string_equal(r.lock.owner, "a@b");
	assert_int_equal(classify(1, "", "error: the stack is currently locked by 1 lock(s).\n"
				  "  file:///s?no_tmp_dir=true/.pulumi/locks/organization/p/dev/x.json: "
				  "created by root@host-1 (pid 42) at 2025-09-23T13:21:31Z\n", &r), PL_CONFLICT);
	assert_string_equal(r.lock.owner, "root@host-1");
	assert_int_equal(r.lock.pid, 42);
	assert_string_equal(r.lock.created, "2025-09-23T13:21:31Z");
	assert_int_equal(classify(255, "", "error: [409] Conflict: Another update is currently in "
				  "progress.\n", &r), PL_CONFLICT);
	assert_int_equal(classify(6, "", "error: no stack named 'dev' found\n", &r), PL_NOT_FOUND);
	assert_int_equal(classify(7, "", "error: no changes were expected for update but changes "
				  "were proposed\n", &r), PL_CHANGES_NOT_EXPECTED);
	assert_int_equal(classify(1, "    error: an unhandled error occurred: failed to evaluate "
				  "template\n", "", &r), PL_PROGRAM_ERROR);
	assert_int_equal(classify(1, "", "error: resource urn:x violates plan: properties changed\n",
				  &r), PL_PLAN_VIOLATION);
	assert_int_equal(classify(8, "", "", &r), PL_CANCELED);
	assert_int_equal(classify(1, "Previewing update (dev):\n", "error: failed to load language "
				  "plugin yaml: no language plugin 'pulumi-language-yaml' found in the "
				  "workspace or on your $PATH\n", &r), PL_CLI_MISSING);
	assert_int_equal(classify(1, "", "error: bad password hunter2 given\n", &r), PL_FAILED);
	assert_string_equal(r.message, "up: bad password [secret] given");
	/* stderr's last line is a reason; stdout's is progress and is not. */
	assert_int_equal(classify(2, "", "last words\n\n", &r), PL_FAILED);
	assert_string_equal(r.message, "up: last words");
	assert_int_equal(classify(1, "Resources:\n    1 unchanged\n\nDuration: 1s\n", "", &r), PL_FAILED);
	assert_string_equal(r.message, "up: failed without a diagnostic (exit code 1)");
}

/* A toolchain missing from PATH is an installation problem (cli-missing,
 * Stalled PulumiUnavailable), and the message names it first. */
static void test_classify_missing_toolchain(void **state)
{
	struct pl_result r;

	(void)state;
	/* `pulumi install` of a Go program without `go` on PATH (v3.274.1, seen). */
	assert_int_equal(classify(1, "", "error: installing dependencies: unable to find program: go\n",
				  &r), PL_CLI_MISSING);
	assert_string_equal(r.message, "up: the program's toolchain `go` is not on the controller's PATH "
			    "(docs/run.md, Toolchains); installing dependencies: unable to find program: go");
	/* The Python host without python3 or python. */
	assert_int_equal(classify(1, "", "error: Failed to locate any of [python3 python] on your PATH.  "
				  "Have you installed Python 3.6 or greater?\n", &r), PL_CLI_MISSING);
	assert_non_null(strstr(r.message, "toolchain `python3 python` is not on"));
	/* Go's exec.LookPath, as a Node.js host says it. */
	assert_int_equal(classify(1, "", "error: exec: \"node\": executable file not found in $PATH\n",
				  &r), PL_CLI_MISSING);
	assert_non_null(strstr(r.message, "toolchain `node` is not on"));
	/* exec.LookPath's prefix for another failure is no missing toolchain. */
	assert_int_equal(classify(1, "", "error: exec: \"node\": permission denied\n", &r), PL_FAILED);
	assert_string_equal(r.message, "up: exec: \"node\": permission denied");
}

/* An unknown reference: Pulumi YAML reports it only as info#err lines the
 * CLI prints coloured under the stack's row (v3.274.1, seen). */
static void test_classify_coloured_yaml_error_on_stdout(void **state)
{
	struct proc_result pr = fake(1, "  pulumi:pulumi:Stack (demo-dev):\n"
	    "    \033[31mError\033[0m: resource, variable, or config value \"missing\" not found\n"
	    "      on Pulumi.yaml line 9:\n", "");
	struct pl_result r = { 0 };

	(void)state;
	pl_classify("up", &pr, NULL, NULL, 0, &r);
	assert_string_equal(r.message, "up: resource, variable, or config value \"missing\" not found");
}

static void test_classify_yaml_template_error(void **state)
{
	/* As the real v3.274.1 + pulumi-yaml 1.25 wrote it: no urn, the rest ran. */
	static const char log[] =
		"{\"sequence\":2,\"timestamp\":1,\"diagnosticEvent\":{\"prefix\":\"error: \",\"message\":"
		"\"resource or variable named \\\"nope\\\" could not be found\\n\\n  on Pulumi.yaml line 19:"
		"\\n\",\"color\":\"never\",\"severity\":\"error\"}}\n"
		"{\"sequence\":3,\"timestamp\":1,\"diagnosticEvent\":{\"urn\":\"urn:pulumi:dev::demo::"
		"standin:index:File::note\",\"message\":\"provider said no\\n\",\"color\":\"never\","
		"\"severity\":\"error\"}}\n";
	struct proc_result pr = fake(1, "", "");
	struct pl_events ev;
	struct pl_result r = { 0 };

	(void)state;
	pl_events_init(&ev);
	pl_events_feed(&ev, log, strlen(log));
	assert_int_equal(ev.program_errors, 1);
	pl_classify("up", &pr, &ev, NULL, 0, &r);
	assert_int_equal(r.status, PL_PROGRAM_ERROR);
	assert_string_equal(r.message, "up: resource or variable named \"nope\" could not be found");
	/* A failed resource step makes it a resource failure instead. */
	ev.failed_steps = 1;
	pl_classify("up", &pr, &ev, NULL, 0, &r);
	assert_int_equal(r.status, PL_FAILED);
	pl_events_free(&ev);
}

static void test_classify_interrupted(void **state)
{
	struct proc_result pr = fake(8, "", "");
	struct pl_result r = { 0 };

	(void)state;
	pr.interrupted = 1;
	pr.last_signal = 2;
	pl_classify("up", &pr, NULL, NULL, 0, &r);
	assert_int_equal(r.status, PL_CANCELED);
	assert_string_equal(r.message, "up: interrupted on request; the CLI's process group was "
			    "stopped with SIGINT");
	pr = fake(0, "", "");
	pr.interrupted = 1;
	pl_classify("up", &pr, NULL, NULL, 0, &r);
	assert_int_equal(r.status, PL_OK);   /* it finished before acting on the signal */
}

static void test_classify_timeout_missing_policy(void **state)
{
	struct proc_result pr = fake(0, "", "");
	struct pl_events ev;
	struct pl_result r = { 0 };

	(void)state;
	pr.timed_out = 1;
	pr.exited = 0;
	pr.last_signal = 9;
	pl_classify("up", &pr, NULL, NULL, 0, &r);
	assert_int_equal(r.status, PL_TIMEOUT);
	assert_non_null(strstr(r.message, "SIGKILL"));

	pr = fake(0, "", "");
	pr.started = 0;
	pl_classify("up", &pr, NULL, NULL, 0, &r);
	assert_int_equal(r.status, PL_CLI_MISSING);

	pl_events_init(&ev);
	pl_events_feed(&ev, LOG, strlen(LOG));
	pr = fake(1, "", "");
	pl_classify("up", &pr, &ev, NULL, 0, &r);
	assert_int_equal(r.status, PL_POLICY_VIOLATION);
	assert_string_equal(r.message, "up: policy violation: no-files: no files");
	pl_events_free(&ev);
}

static void test_message_is_one_bounded_line(void **state)
{
	char text[2000];
	struct pl_result r = { 0 };

	(void)state;
	memset(text, 'a', sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	text[10] = '\n';
	text[11] = '\t';
	pl_set_message(&r, "op", text, NULL, 0);
	assert_null(strchr(r.message, '\n'));
	assert_null(strchr(r.message, '\t'));
	assert_true(strlen(r.message) <= 304);
	assert_string_equal(pl_status_name(PL_CHANGES_NOT_EXPECTED), "changes-not-expected");
	assert_string_equal(pl_status_name(PL_CLI_TOO_OLD), "cli-too-old");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_events_whole),
		cmocka_unit_test(test_refresh_outcome_with_diffs_is_drift),
		cmocka_unit_test(test_events_any_chunking),
		cmocka_unit_test(test_events_last_line_without_newline),
		cmocka_unit_test(test_events_overlong_line_is_skipped),
		cmocka_unit_test(test_outputs_history_config),
		cmocka_unit_test(test_redact),
		cmocka_unit_test(test_redact_overlapping_secrets),
		cmocka_unit_test(test_events_carry_the_root_stack_outputs),
		cmocka_unit_test(test_redact_multiline_secrets_line_by_line),
		cmocka_unit_test(test_redact_tail_drops_a_cut_first_line),
		cmocka_unit_test(test_messages_are_masked_before_they_are_cut),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_classify_interrupted),
		cmocka_unit_test(test_classify_yaml_template_error),
		cmocka_unit_test(test_classify_coloured_yaml_error_on_stdout),
		cmocka_unit_test(test_classify_missing_toolchain),
		cmocka_unit_test(test_classify_timeout_missing_policy),
		cmocka_unit_test(test_message_is_one_bounded_line),
		cmocka_unit_test(test_spec_redact_masks_the_secrets_pl_open_records),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
