/*
 * test_stack_status.c - what the reconciler writes back (stack_status.c):
 *
 *   - stack_verdict and the small readers of the cached status;
 *   - stack_status_write / stack_status_write_running against the scripted
 *     API server of stack_fake_api.h, which records the PUT and answers
 *     with it: kstatus conditions for each verdict (Reconciling and Stalled
 *     only while True, never both), transition times that move only with
 *     the status, other owners' conditions kept, lastUpdate, history
 *     (newest first, at most 10), fingerprints, outputs masked, no write
 *     when nothing changed, a 409 handed back to the worker unless the pass
 *     ran an update (then written again onto the Stack as it is now), and
 *     the interrupted updates kept for lock recovery.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kube/kube.h"
#include "stack/stack_machine.h"
#include "stack_fake_api.h"

/* The status of the last PUT (caller frees), checking it went to the
 * status subresource of apps/web with the resourceVersion the pass read. */
static cJSON *written_status(void)
{
	cJSON *body = fake_put_json(), *st;

	assert_non_null(body);
	assert_int_equal(fake_count("PUT", "/apis/pulumi.com/v1/namespaces/apps/stacks/web/status"), 1);
	assert_string_equal(kube_obj_str(body, "metadata.resourceVersion"), "41");
	st = cJSON_DetachItemFromObjectCaseSensitive(body, "status");
	cJSON_Delete(body);
	assert_non_null(st);
	return st;
}

/* ------------------------------------------------------------ passes */

/* A pass over apps/web at generation 3 with the given status JSON (or
 * NULL); pass_free. */
static struct stack_pass *pass_new(const char *status_json)
{
	struct stack_pass *p = calloc(1, sizeof(*p));
	char text[16384];

	assert_non_null(p);
	snprintf(text, sizeof(text), "{\"apiVersion\": \"pulumi.com/v1\", \"kind\": \"Stack\", \"metadata\": "
	    "{\"name\": \"web\", \"namespace\": \"apps\", \"generation\": 3, \"resourceVersion\": \"41\", "
	    "\"uid\": \"u-1\"}, \"spec\": {\"stack\": \"dev\"}%s%s}", status_json ? ", \"status\": " : "",
	    status_json ? status_json : "");
	p->obj = cJSON_Parse(text);
	assert_non_null(p->obj);
	p->status = cJSON_GetObjectItemCaseSensitive(p->obj, "status");
	p->sc = &sc;
	snprintf(p->ns, sizeof(p->ns), "apps");
	snprintf(p->name, sizeof(p->name), "web");
	p->generation = 3;
	return p;
}

static void pass_free(struct stack_pass *p)
{
	cJSON_Delete(p->obj);
	stack_artifact_free(&p->art);
	cJSON_Delete(p->out.changes);
	cJSON_Delete(p->out.outputs);
	cJSON_Delete(p->out.outputs_plain);
	for (size_t i = 0; i < p->in.n_refs; i++)
		free(p->in.refs[i]);
	free(p->in.refs);
	stack_safety_free(&p->safety);
	free(p);
}

static void set_resource_version(struct stack_pass *p, const char *rv)
{
	cJSON *md = cJSON_GetObjectItemCaseSensitive(p->obj, "metadata");

	cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
	cJSON_AddStringToObject(md, "resourceVersion", rv);
}

static void set_artifact(struct stack_pass *p, const char *rev, const char *digest)
{
	stack_artifact_free(&p->art);
	p->art.revision = strdup(rev);
	p->art.digest = strdup(digest);
}

/* An up/preview/destroy that ran. */
static void set_outcome(struct stack_pass *p, const char *type, int ok)
{
	p->out.ran = 1;
	p->out.type = type;
	p->out.ok = ok;
	snprintf(p->out.message, sizeof(p->out.message), "%s", ok ? "update succeeded" : "exit status 255");
	p->out.start_us = 1700000000LL * 1000000;
	p->out.end_us = 1700000060LL * 1000000;
	cJSON_Delete(p->out.changes);
	p->out.changes = cJSON_Parse("{\"create\": 1, \"same\": 2}");
}

static const cJSON *condition(const cJSON *st, const char *type)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(st, "conditions"))
		if (strcmp(kube_obj_str(c, "type"), type) == 0)
			return c;
	return NULL;
}

static void assert_condition(const cJSON *st, const char *type, const char *status, const char *reason)
{
	const cJSON *c = condition(st, type);

	if (c == NULL)
		fail_msg("no %s condition", type);
	assert_string_equal(kube_obj_str(c, "status"), status);
	assert_string_equal(kube_obj_str(c, "reason"), reason);
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(c, "observedGeneration")->valuedouble, 3);
	assert_non_null(kube_obj_str(c, "lastTransitionTime"));
	assert_non_null(kube_obj_str(c, "message"));
}

static int n_conditions(const cJSON *st)
{
	return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "conditions"));
}

/* Writes p's status and returns what was PUT. */
static cJSON *write_status(struct stack_pass *p)
{
	struct err e;

	fake_put_answer(200);
	if (stack_status_write(p, &e) != 0)
		fail_msg("status write: %s", e.msg);
	assert_int_equal(fake_count(NULL, NULL), 1);
	return written_status();
}

/* A successful or failed update of type at rev/digest that wrote
 * fingerprint fp, and its status write; returns what was PUT. */
static cJSON *write_after_update(struct stack_pass *p, const char *type, int ok, const char *rev,
    const char *digest, const char *fp)
{
	set_resource_version(p, "41");
	set_artifact(p, rev, digest);
	snprintf(p->fingerprint, sizeof(p->fingerprint), "%s", fp);
	set_outcome(p, type, ok);
	if (ok)
		stack_verdict(p, STACK_READY, "Succeeded", 0, "%s of %s succeeded", type, rev);
	else
		stack_verdict(p, STACK_WAITING, "UpdateFailed", 30000, "%s of %s failed", type, rev);
	return write_status(p);
}

/* ------------------------------------------------------------ verdicts and readers */

static void verdict_fills_the_pass(void **state)
{
	struct stack_pass *p = pass_new(NULL);
	char big[3000];
	(void)state;

	stack_verdict(p, STACK_WAITING, "SourceNotFound", 30000, "GitRepository %s/%s not found", "apps", "infra");
	assert_int_equal(p->v.set, 1);
	assert_int_equal(p->v.state, STACK_WAITING);
	assert_string_equal(p->v.reason, "SourceNotFound");
	assert_int_equal(p->v.requeue_ms, 30000);
	assert_string_equal(p->v.message, "GitRepository apps/infra not found");

	/* A message longer than the condition's buffer is cut, not overflowed. */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	stack_verdict(p, STACK_STALLED, "SpecInvalid", 0, "%s", big);
	assert_int_equal(p->v.state, STACK_STALLED);
	assert_int_equal(strlen(p->v.message), sizeof(p->v.message) - 1);
	assert_int_equal(p->v.requeue_ms, 0);
	pass_free(p);
}

static void status_readers(void **state)
{
	struct stack_pass *p = pass_new("{\"lastUpdate\": {\"failures\": 2, \"lastSuccessfulCommit\": \"main@sha1:aa\","
	    " \"type\": 5}, \"observedGeneration\": 2, \"fingerprint\": \"ab\"}");
	struct stack_pass *none = pass_new(NULL);
	cJSON *fin;
	(void)state;

	assert_string_equal(stack_status_str(p, "fingerprint"), "ab");
	assert_string_equal(stack_status_str(p, "lastUpdate.lastSuccessfulCommit"), "main@sha1:aa");
	assert_null(stack_status_str(p, "lastUpdate.type"));            /* not a string */
	assert_null(stack_status_str(p, "lastUpdate.missing"));
	assert_null(stack_status_str(none, "fingerprint"));
	assert_int_equal(stack_status_int(p, "lastUpdate.failures", -1), 2);
	assert_int_equal(stack_status_int(p, "observedGeneration", -1), 2);
	assert_int_equal(stack_status_int(p, "fingerprint", -1), -1);    /* not a number */
	assert_int_equal(stack_status_int(p, "no.such.path", 9), 9);
	assert_int_equal(stack_status_int(none, "lastUpdate.failures", 7), 7);

	assert_int_equal(stack_has_finalizer(p->obj), 0);
	fin = cJSON_Parse("{\"metadata\": {\"finalizers\": [\"other.io/x\", 5, \"finalizer.stack.pulumi.com\"]}}");
	assert_int_equal(stack_has_finalizer(fin), 1);
	cJSON_Delete(fin);
	fin = cJSON_Parse("{\"metadata\": {\"finalizers\": \"finalizer.stack.pulumi.com\"}}");
	assert_int_equal(stack_has_finalizer(fin), 0);
	cJSON_Delete(fin);

	assert_true(stack_parse_time_us("2024-01-02T03:04:05Z") == 1704164645LL * 1000000);
	assert_true(stack_parse_time_us("not a time") == 0);
	assert_true(stack_parse_time_us(NULL) == 0);
	pass_free(none);
	pass_free(p);
}

/* ------------------------------------------------------------ conditions */

static void conditions_follow_kstatus(void **state)
{
	static const struct { enum stack_state st; const char *reason; } cases[] = {
		{ STACK_READY, "Succeeded" }, { STACK_WAITING, "ArtifactNotReady" }, { STACK_STALLED, "SpecInvalid" },
	};
	(void)state;

	for (size_t i = 0; i < 3; i++) {
		struct stack_pass *p = pass_new(NULL);
		cJSON *st;
		stack_verdict(p, cases[i].st, cases[i].reason, 0, "because %zu", i);
		st = write_status(p);
		assert_int_equal(cJSON_GetObjectItemCaseSensitive(st, "observedGeneration")->valuedouble, 3);
		assert_condition(st, "Ready", cases[i].st == STACK_READY ? "True" : "False", cases[i].reason);
		assert_string_equal(kube_obj_str(condition(st, "Ready"), "message"), cases[i].st == STACK_READY ?
		    "because 0" : cases[i].st == STACK_WAITING ? "because 1" : "because 2");
		if (cases[i].st == STACK_WAITING)
			assert_condition(st, "Reconciling", "True", cases[i].reason);
		else
			assert_null(condition(st, "Reconciling"));
		if (cases[i].st == STACK_STALLED)
			assert_condition(st, "Stalled", "True", cases[i].reason);
		else
			assert_null(condition(st, "Stalled"));
		assert_int_equal(n_conditions(st), cases[i].st == STACK_READY ? 1 : 2);
		/* The pass now holds the server's answer for its next write. */
		assert_string_equal(kube_obj_str(p->obj, "metadata.resourceVersion"), "next");
		assert_non_null(condition(p->status, "Ready"));
		cJSON_Delete(st);
		pass_free(p);
	}
}

#define OLD_TIME "2020-01-01T00:00:00Z"
#define OLD_CONDITIONS "\"conditions\": [" \
	"{\"type\": \"Ready\", \"status\": \"False\", \"reason\": \"Progressing\", \"message\": \"m\", " \
	"\"lastTransitionTime\": \"" OLD_TIME "\", \"observedGeneration\": 2}, " \
	"{\"type\": \"Reconciling\", \"status\": \"True\", \"reason\": \"Progressing\", \"message\": \"m\", " \
	"\"lastTransitionTime\": \"" OLD_TIME "\", \"observedGeneration\": 2}, " \
	"{\"type\": \"Healthy\", \"status\": \"True\", \"reason\": \"Probe\", \"message\": \"someone else's\", " \
	"\"lastTransitionTime\": \"" OLD_TIME "\"}]"

static void transition_time_moves_only_with_the_status(void **state)
{
	struct stack_pass *p = pass_new("{" OLD_CONDITIONS "}");
	cJSON *st;
	(void)state;

	/* Still not ready, for another reason: Ready keeps its time. */
	stack_verdict(p, STACK_WAITING, "UpdateFailed", 10000, "exit status 1");
	st = write_status(p);
	assert_condition(st, "Ready", "False", "UpdateFailed");
	assert_string_equal(kube_obj_str(condition(st, "Ready"), "lastTransitionTime"), OLD_TIME);
	assert_string_equal(kube_obj_str(condition(st, "Reconciling"), "lastTransitionTime"), OLD_TIME);
	/* Conditions other controllers own are kept as they were. */
	assert_non_null(condition(st, "Healthy"));
	assert_string_equal(kube_obj_str(condition(st, "Healthy"), "message"), "someone else's");
	cJSON_Delete(st);
	pass_free(p);

	/* Ready flips to True: its time moves; Reconciling goes. */
	p = pass_new("{" OLD_CONDITIONS "}");
	stack_verdict(p, STACK_READY, "Succeeded", 0, "up to date");
	st = write_status(p);
	assert_condition(st, "Ready", "True", "Succeeded");
	assert_string_not_equal(kube_obj_str(condition(st, "Ready"), "lastTransitionTime"), OLD_TIME);
	assert_null(condition(st, "Reconciling"));
	assert_non_null(condition(st, "Healthy"));
	assert_int_equal(n_conditions(st), 2);
	cJSON_Delete(st);
	pass_free(p);
}

static void note_and_reconcile_requests(void **state)
{
	struct stack_pass *p = pass_new(NULL);
	cJSON *st;
	(void)state;

	snprintf(p->note, sizeof(p->note), "spec.cloud \"secretsmanager\" is not a backend URL and was ignored");
	p->requested = "2024-05-01T10:00:00Z";
	p->request = "req-7";
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied main@sha1:aa");
	st = write_status(p);
	assert_string_equal(kube_obj_str(condition(st, "Ready"), "message"),
	    "applied main@sha1:aa; spec.cloud \"secretsmanager\" is not a backend URL and was ignored");
	assert_string_equal(kube_obj_str(st, "lastHandledReconcileAt"), "2024-05-01T10:00:00Z");
	assert_string_equal(kube_obj_str(st, "observedReconcileRequest"), "req-7");
	cJSON_Delete(st);
	pass_free(p);

	/* Issue 21: the request's update is in a Job that has not run yet: the
	 * pass that reads its outcome marks the request handled, not this one. */
	for (int i = 0; i < 2; i++) {
		p = pass_new(NULL);
		p->requested = "2024-05-01T10:00:00Z";
		p->request = "req-7";
		stack_verdict(p, STACK_WAITING, i ? "WaitingForJobSlot" : "JobRunning", 0, "the up runs in Job x");
		st = write_status(p);
		assert_null(kube_obj_str(st, "lastHandledReconcileAt"));
		assert_null(kube_obj_str(st, "observedReconcileRequest"));
		cJSON_Delete(st);
		pass_free(p);
	}
	/* Waiting for a Job of earlier inputs, which is not the request's. */
	p = pass_new(NULL);
	p->requested = "2024-05-01T10:00:00Z";
	p->job_waits_other = 1;
	stack_verdict(p, STACK_WAITING, "JobRunning", 0, "waiting for the Job x (earlier inputs) to finish");
	st = write_status(p);
	assert_string_equal(kube_obj_str(st, "lastHandledReconcileAt"), "2024-05-01T10:00:00Z");
	cJSON_Delete(st);
	pass_free(p);
}

/* ------------------------------------------------------------ updates */

static void successful_up(void **state)
{
	struct stack_pass *p = pass_new("{\"currentUpdate\": {\"startTime\": \"" OLD_TIME "\", \"controller\": \"x\"}}");
	const cJSON *lu, *h;
	cJSON *st;
	(void)state;

	set_artifact(p, "main@sha1:bbbb", "sha256:1111");
	snprintf(p->fingerprint, sizeof(p->fingerprint), "%064d", 7);
	set_outcome(p, "up", 1);
	p->out.outputs = cJSON_Parse("{\"url\": \"https://web\", \"password\": \"[secret]\"}");
	p->out.outputs_plain = cJSON_Parse("{\"url\": \"https://web\", \"password\": \"hunter2-plain\"}");
	p->request = "req-1";
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied");
	st = write_status(p);

	assert_null(cJSON_GetObjectItemCaseSensitive(st, "currentUpdate"));
	assert_string_equal(kube_obj_str(st, "artifact.revision"), "main@sha1:bbbb");
	assert_string_equal(kube_obj_str(st, "artifact.digest"), "sha256:1111");
	assert_string_equal(kube_obj_str(st, "lastAppliedRevision"), "main@sha1:bbbb");
	assert_string_equal(kube_obj_str(st, "lastAttemptedRevision"), "main@sha1:bbbb");
	assert_string_equal(kube_obj_str(st, "fingerprint"), p->fingerprint);
	assert_string_equal(kube_obj_str(st, "lastAttemptedFingerprint"), p->fingerprint);
	assert_string_equal(kube_obj_str(st, "outputsSecretName"), "web-outputs");
	assert_string_equal(kube_obj_str(st, "outputs.password"), "[secret]");
	/* The plain value of a secret output is written nowhere in status. */
	assert_false(fake_put_contains("hunter2-plain"));

	lu = cJSON_GetObjectItemCaseSensitive(st, "lastUpdate");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(lu, "generation")->valuedouble, 3);
	assert_string_equal(kube_obj_str(lu, "type"), "up");
	assert_string_equal(kube_obj_str(lu, "state"), "succeeded");
	assert_string_equal(kube_obj_str(lu, "message"), "update succeeded");
	assert_string_equal(kube_obj_str(lu, "lastAttemptedCommit"), "main@sha1:bbbb");
	assert_string_equal(kube_obj_str(lu, "lastSuccessfulCommit"), "main@sha1:bbbb");
	assert_string_equal(kube_obj_str(lu, "startTime"), "2023-11-14T22:13:20Z");
	assert_string_equal(kube_obj_str(lu, "endTime"), "2023-11-14T22:14:20Z");
	assert_string_equal(kube_obj_str(lu, "lastResyncTime"), "2023-11-14T22:14:20Z");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(lu, "failures")->valuedouble, 0);
	assert_string_equal(kube_obj_str(lu, "reconcileRequest"), "req-1");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(lu, "resourceChanges"), "same")->valuedouble, 2);

	h = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st, "history"), 0);
	assert_non_null(h);
	assert_string_equal(kube_obj_str(h, "revision"), "main@sha1:bbbb");
	assert_string_equal(kube_obj_str(h, "digest"), "sha256:1111");
	assert_string_equal(kube_obj_str(h, "type"), "up");
	assert_string_equal(kube_obj_str(h, "result"), "succeeded");
	assert_null(cJSON_GetObjectItemCaseSensitive(h, "message"));
	cJSON_Delete(st);
	pass_free(p);
}

static void failed_up_keeps_what_was_applied(void **state)
{
	struct stack_pass *p = pass_new("{\"lastAppliedRevision\": \"main@sha1:aaaa\", \"fingerprint\": \"old-fp\", "
	    "\"outputsSecretName\": \"web-outputs\", \"lastUpdate\": {\"lastSuccessfulCommit\": \"main@sha1:aaaa\"}}");
	const cJSON *lu;
	cJSON *st;
	(void)state;

	p->failures = 2;
	st = write_after_update(p, "up", 0, "main@sha1:cccc", "sha256:2222", "new-fp");
	assert_string_equal(kube_obj_str(st, "lastAppliedRevision"), "main@sha1:aaaa");
	assert_string_equal(kube_obj_str(st, "fingerprint"), "old-fp");
	assert_string_equal(kube_obj_str(st, "lastAttemptedRevision"), "main@sha1:cccc");
	assert_string_equal(kube_obj_str(st, "lastAttemptedFingerprint"), "new-fp");
	lu = cJSON_GetObjectItemCaseSensitive(st, "lastUpdate");
	assert_string_equal(kube_obj_str(lu, "state"), "failed");
	assert_string_equal(kube_obj_str(lu, "lastAttemptedCommit"), "main@sha1:cccc");
	assert_string_equal(kube_obj_str(lu, "lastSuccessfulCommit"), "main@sha1:aaaa");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(lu, "failures")->valuedouble, 2);
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st, "history"), 0),
	    "result"), "failed");
	cJSON_Delete(st);
	pass_free(p);
}

static void preview_and_destroy(void **state)
{
	struct stack_pass *p = pass_new("{\"lastAppliedRevision\": \"main@sha1:aaaa\", \"fingerprint\": \"old-fp\"}");
	cJSON *st;
	(void)state;

	/* A successful preview is what a preview-only Stack applies. */
	st = write_after_update(p, "preview", 1, "main@sha1:dddd", "sha256:3333", "preview-fp");
	assert_string_equal(kube_obj_str(st, "fingerprint"), "preview-fp");
	assert_string_equal(kube_obj_str(st, "lastAppliedRevision"), "main@sha1:aaaa");
	assert_string_equal(kube_obj_str(st, "lastUpdate.type"), "preview");
	cJSON_Delete(st);
	pass_free(p);

	/* A destroy is history, not an attempt at the current revision. */
	p = pass_new("{\"lastAttemptedRevision\": \"main@sha1:aaaa\", \"fingerprint\": \"old-fp\"}");
	st = write_after_update(p, "destroy", 1, "main@sha1:eeee", "sha256:4444", "destroy-fp");
	assert_string_equal(kube_obj_str(st, "lastUpdate.type"), "destroy");
	assert_string_equal(kube_obj_str(st, "lastAttemptedRevision"), "main@sha1:aaaa");
	assert_string_equal(kube_obj_str(st, "fingerprint"), "old-fp");
	assert_null(kube_obj_str(st, "lastAttemptedFingerprint"));
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st, "history"), 0),
	    "type"), "destroy");
	cJSON_Delete(st);
	pass_free(p);
}

static void history_is_newest_first_and_bounded(void **state)
{
	struct stack_pass *p = pass_new(NULL);
	char rev[64];
	cJSON *st, *h;
	(void)state;

	/* Twelve updates, each on the status the previous one wrote (the
	 * pass holds the server's answer; the fake checks resourceVersion 41). */
	for (int i = 0; i < 12; i++) {
		snprintf(rev, sizeof(rev), "main@sha1:%02d", i);
		cJSON_Delete(write_after_update(p, "up", 1, rev, "sha256:x", "fp"));
	}
	st = written_status();
	h = cJSON_GetObjectItemCaseSensitive(st, "history");
	assert_int_equal(cJSON_GetArraySize(h), STACK_HISTORY_MAX);
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(h, 0), "revision"), "main@sha1:11");
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(h, 1), "revision"), "main@sha1:10");
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(h, 9), "revision"), "main@sha1:02");
	cJSON_Delete(st);
	pass_free(p);
}

/* ------------------------------------------------------------ writes */

/* A pass that learned nothing new costs no API write. */
static void unchanged_status_is_not_written(void **state)
{
	struct stack_pass *p = pass_new(NULL);
	cJSON *st;
	struct err e;
	(void)state;

	set_artifact(p, "main@sha1:ffff", "sha256:5555");
	stack_verdict(p, STACK_READY, "Succeeded", 0, "up to date");
	st = write_status(p);
	cJSON_Delete(st);
	/* The same pass on the answer: same verdict, same artifact. */
	fake_put_answer(200);
	assert_int_equal(stack_status_write(p, &e), 0);
	assert_int_equal(fake_count(NULL, NULL), 0);
	/* A different message is a change. */
	stack_verdict(p, STACK_READY, "Succeeded", 0, "up to date at last");
	assert_int_equal(stack_status_write(p, &e), 0);
	assert_int_equal(fake_count(NULL, NULL), 1);
	pass_free(p);
}

static void conflict_goes_back_to_the_worker(void **state)
{
	struct stack_pass *p = pass_new(NULL);
	struct err e;
	(void)state;

	stack_verdict(p, STACK_WAITING, "Progressing", 0, "working");
	fake_put_answer(409);
	assert_int_equal(stack_status_write(p, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	/* The pass keeps the object it read. */
	assert_string_equal(kube_obj_str(p->obj, "metadata.resourceVersion"), "41");
	fake_put_answer(409);
	assert_int_equal(stack_status_write_running(p, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	fake_put_answer(200);
	pass_free(p);
}

static void running_status(void **state)
{
	struct stack_pass *p = pass_new("{\"conditions\": [{\"type\": \"Ready\", \"status\": \"False\", "
	    "\"reason\": \"UpdateFailed\", \"message\": \"m\", \"lastTransitionTime\": \"" OLD_TIME "\"}, "
	    "{\"type\": \"Stalled\", \"status\": \"True\", \"reason\": \"UpdateFailed\", \"message\": \"m\", "
	    "\"lastTransitionTime\": \"" OLD_TIME "\"}], \"lastAppliedRevision\": \"main@sha1:aaaa\"}");
	const cJSON *cur;
	cJSON *st;
	struct err e;
	(void)state;

	set_artifact(p, "main@sha1:9999", "sha256:6666");
	p->why = "a new revision";
	fake_put_answer(200);
	assert_int_equal(stack_status_write_running(p, &e), 0);
	assert_int_equal(fake_count(NULL, NULL), 1);
	st = written_status();
	cur = cJSON_GetObjectItemCaseSensitive(st, "currentUpdate");
	assert_non_null(cur);
	assert_string_equal(kube_obj_str(cur, "controller"), "controller-a");
	assert_string_equal(kube_obj_str(cur, "revision"), "main@sha1:9999");
	assert_non_null(kube_obj_str(cur, "startTime"));
	assert_condition(st, "Ready", "False", "Progressing");
	assert_condition(st, "Reconciling", "True", "Progressing");
	assert_null(condition(st, "Stalled"));             /* never both */
	assert_string_equal(kube_obj_str(condition(st, "Ready"), "lastTransitionTime"), OLD_TIME);
	assert_non_null(strstr(kube_obj_str(condition(st, "Ready"), "message"), "main@sha1:9999"));
	assert_non_null(strstr(kube_obj_str(condition(st, "Ready"), "message"), "a new revision"));
	assert_string_equal(kube_obj_str(st, "lastAppliedRevision"), "main@sha1:aaaa");
	assert_string_equal(kube_obj_str(st, "artifact.revision"), "main@sha1:9999");
	cJSON_Delete(st);

	/* The final write of the same pass clears currentUpdate. */
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied");
	set_resource_version(p, "41");
	st = write_status(p);
	assert_null(cJSON_GetObjectItemCaseSensitive(st, "currentUpdate"));
	cJSON_Delete(st);
	pass_free(p);
}

/* Issue 21 item 6: a label (or any change) during an update makes the final
 * PUT conflict; the Stack is read again and the update's outcome written
 * onto it, also when the generation moved on (observedGeneration stays the
 * one updated). */
#define STACK_PATH "/apis/pulumi.com/v1/namespaces/apps/stacks/web"

/* A pass whose up succeeded, over a Stack that the server now has with
 * that uid and another resourceVersion; pass_free. */
static struct stack_pass *conflicting_pass(const char *uid)
{
	struct stack_pass *p = pass_new(NULL);
	char body[256];

	set_outcome(p, "up", 1);
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied");
	snprintf(body, sizeof(body), "{'metadata': {'name': 'web', 'namespace': 'apps', 'resourceVersion': "
	    "'58', 'uid': '%s'}}", uid);
	fake_route(STACK_PATH, 200, body);
	return p;
}
static void update_outcome_survives_a_conflict(void **state)
{
	struct stack_pass *p = pass_new("{\"currentUpdate\": {\"controller\": \"controller-a\"}}");
	cJSON *body;
	struct err e;
	(void)state;

	set_artifact(p, "main@sha1:9999", "sha256:6666");
	set_outcome(p, "up", 1);
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied");
	fake_put_answer(200);
	fake_route(STACK_PATH, 200, "{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', 'metadata': {'name': 'web', "
	    "'namespace': 'apps', 'generation': 4, 'resourceVersion': '57', 'uid': 'u-1', 'labels': {'team': 'a'}}, "
	    "'spec': {'stack': 'dev', 'suspend': true}, 'status': {'currentUpdate': {'controller': 'controller-a'}}}");
	fake_put_conflicts(1);
	assert_int_equal(stack_status_write(p, &e), 0);
	assert_int_equal(fake_count("PUT", STACK_PATH "/status"), 2);
	assert_int_equal(fake_count("GET", STACK_PATH), 1);
	body = fake_put_json();
	assert_string_equal(kube_obj_str(body, "metadata.resourceVersion"), "57");
	assert_string_equal(kube_obj_str(body, "metadata.labels.team"), "a");
	assert_string_equal(kube_obj_str(body, "status.lastUpdate.state"), "succeeded");
	assert_string_equal(kube_obj_str(body, "status.lastAppliedRevision"), "main@sha1:9999");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(body, "status"),
	    "observedGeneration")->valuedouble, 3);
	assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(body, "status"),
	    "currentUpdate"));
	cJSON_Delete(body);
	pass_free(p);
	fake_reset();

	/* Conflicts every time: a bounded number of tries, then the worker. */
	p = conflicting_pass("u-1");
	fake_put_answer(409);
	assert_int_equal(stack_status_write(p, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_int_equal(fake_count("PUT", STACK_PATH "/status"), 5);
	pass_free(p);
	fake_reset();

	/* Another Stack of the same name now: nothing is written onto it. */
	p = conflicting_pass("u-2");
	fake_put_answer(200);
	fake_put_conflicts(1);
	assert_int_equal(stack_status_write(p, &e), -1);
	assert_non_null(strstr(e.msg, "deleted and created again"));
	assert_int_equal(fake_count("PUT", STACK_PATH "/status"), 1);
	pass_free(p);
	fake_reset();
}

/* A lock an interrupted update left is stale only when its host ran under
 * this Lease, and only once this controller has led for the grace: the pod
 * that lost the Lease may still be ending its CLI until then. */
static void interrupted_lock_waits_out_the_grace(void **state)
{
	cJSON *st = cJSON_Parse("{\"interruptedUpdates\": [{\"controller\": \"ctl-0\", \"lease\": \"ops/le\"}]}");
	(void)state;

	assert_non_null(st);
	assert_int_equal(stack_lock_interrupted_here(st, "ops/le", "ctl-0", 45000, 45000), 1);
	assert_int_equal(stack_lock_interrupted_here(st, "ops/le", "ctl-0", 44999, 45000), 0);
	assert_int_equal(stack_lock_interrupted_here(st, "ops/le", "ctl-0", 0, 45000), 0);
	assert_int_equal(stack_lock_interrupted_here(st, "ops/other", "ctl-0", 45000, 45000), 0);
	assert_int_equal(stack_lock_interrupted_here(st, NULL, "ctl-0", 45000, 45000), 0);
	assert_int_equal(stack_lock_interrupted_here(st, "ops/le", "laptop", 45000, 45000), 0);
	cJSON_Delete(st);
}

/* Issue 21 item 1: the update a pass finds running was interrupted (its
 * controller never wrote the outcome); its controller and Lease are kept
 * in status.interruptedUpdates, before this pass's own currentUpdate
 * replaces it, until an up succeeds. */
static void interrupted_updates_are_kept(void **state)
{
	struct stack_pass *p = pass_new("{\"currentUpdate\": {\"controller\": \"ctl-1\", \"lease\": \"ops/le\", "
	    "\"startTime\": \"" OLD_TIME "\"}, \"interruptedUpdates\": [{\"controller\": \"ctl-1\", \"lease\": "
	    "\"ops/le\"}, {\"controller\": \"ctl-0\", \"lease\": \"ops/le\"}]}");
	const cJSON *list;
	cJSON *st;
	struct err e;
	(void)state;

	sc.o.lease = "ops/le";
	set_artifact(p, "main@sha1:9999", "sha256:6666");
	fake_put_answer(200);
	assert_int_equal(stack_status_write_running(p, &e), 0);
	st = written_status();
	assert_string_equal(kube_obj_str(st, "currentUpdate.controller"), "controller-a");
	assert_string_equal(kube_obj_str(st, "currentUpdate.lease"), "ops/le");
	list = cJSON_GetObjectItemCaseSensitive(st, "interruptedUpdates");
	assert_int_equal(cJSON_GetArraySize(list), 2);      /* ctl-1 once, newest first */
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(list, 0), "controller"), "ctl-1");
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(list, 0), "startTime"), OLD_TIME);
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(list, 1), "controller"), "ctl-0");
	cJSON_Delete(st);

	/* This pass's own currentUpdate is not an interrupted one; a failed up
	 * (a lock conflict, say) keeps the list. */
	set_outcome(p, "up", 0);
	stack_verdict(p, STACK_WAITING, "UpdateConflict", 0, "locked");
	set_resource_version(p, "41");
	st = write_status(p);
	assert_null(cJSON_GetObjectItemCaseSensitive(st, "currentUpdate"));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "interruptedUpdates")), 2);
	cJSON_Delete(st);

	/* An up that succeeded took the lock: nothing interrupted is left. */
	set_outcome(p, "up", 1);
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied");
	set_resource_version(p, "41");
	st = write_status(p);
	assert_null(cJSON_GetObjectItemCaseSensitive(st, "interruptedUpdates"));
	cJSON_Delete(st);
	pass_free(p);

	/* A pass that runs no update (the spec no longer parses...) still
	 * keeps the interrupted one it found. */
	p = pass_new("{\"currentUpdate\": {\"controller\": \"ctl-2\"}}");
	stack_verdict(p, STACK_STALLED, "InvalidSpec", 0, "bad");
	st = write_status(p);
	assert_null(cJSON_GetObjectItemCaseSensitive(st, "currentUpdate"));
	assert_string_equal(kube_obj_str(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st,
	    "interruptedUpdates"), 0), "controller"), "ctl-2");
	cJSON_Delete(st);
	pass_free(p);
	sc.o.lease = NULL;
}

/* ------------------------------------------------------------ approval and drift (issue 14) */

static void set_cond(struct stack_extra_cond *c, int set, const char *reason)
{
	c->set = set;
	c->reason = reason;
	snprintf(c->message, sizeof(c->message), "%s happened", reason);
}

/* A pass whose spec says what is on: Manual approval, drift detection. */
static struct stack_pass *safety_pass(const char *status_json, int manual, int drift)
{
	struct stack_pass *p = pass_new(status_json);

	p->spec_ok = 1;
	p->spec.approval_manual = manual;
	p->spec.drift_interval_ms = drift ? 60000 : 0;
	return p;
}

static void approval_and_drift_in_status(void **state)
{
	struct stack_pass *p;
	cJSON *st, *again;
	char *text;
	(void)state;

	/* A plan awaits approval and drift was found: both conditions, and Ready False. */
	p = safety_pass(NULL, 1, 1);
	p->safety.preview = cJSON_Parse("{\"planId\": \"abc\", \"steps\": []}");
	p->safety.approval = cJSON_Parse("{\"continueObserved\": false}");
	p->safety.drift = cJSON_Parse("{\"drifted\": true}");
	set_cond(&p->safety.awaiting, 1, "AwaitingApproval");
	set_cond(&p->safety.drifted, 1, "DriftDetected");
	stack_verdict(p, STACK_WAITING, "AwaitingApproval", 0, "plan abc awaits approval");
	st = write_status(p);
	assert_string_equal(kube_obj_str(st, "preview.planId"), "abc");
	assert_non_null(cJSON_GetObjectItemCaseSensitive(st, "approval"));
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "drift"),
	    "drifted")));
	assert_condition(st, "Ready", "False", "AwaitingApproval");
	assert_condition(st, "AwaitingApproval", "True", "AwaitingApproval");
	assert_condition(st, "Drifted", "True", "DriftDetected");
	text = cJSON_PrintUnformatted(st);
	cJSON_Delete(st);
	pass_free(p);

	/* A pass that decides neither keeps them while the features are on. */
	p = safety_pass(text, 1, 1);
	stack_verdict(p, STACK_WAITING, "ArtifactNotReady", 0, "no artifact");
	again = write_status(p);
	assert_condition(again, "AwaitingApproval", "True", "AwaitingApproval");
	assert_condition(again, "Drifted", "True", "DriftDetected");
	assert_string_equal(kube_obj_str(again, "preview.planId"), "abc");
	cJSON_Delete(again);
	pass_free(p);

	/* The plan applied, the drift repaired: False, and the preview gone. */
	p = safety_pass(text, 1, 1);
	p->safety.clear_preview = 1;
	set_cond(&p->safety.awaiting, -1, "PlanApplied");
	set_cond(&p->safety.drifted, -1, "Remediated");
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied");
	again = write_status(p);
	assert_null(cJSON_GetObjectItemCaseSensitive(again, "preview"));
	assert_condition(again, "AwaitingApproval", "False", "PlanApplied");
	assert_condition(again, "Drifted", "False", "Remediated");
	assert_condition(again, "Ready", "True", "Succeeded");
	cJSON_Delete(again);
	pass_free(p);

	/* The features turned off: their conditions and status fields go. */
	p = safety_pass(text, 0, 0);
	stack_verdict(p, STACK_READY, "Succeeded", 0, "applied");
	again = write_status(p);
	assert_null(condition(again, "AwaitingApproval"));
	assert_null(condition(again, "Drifted"));
	assert_null(cJSON_GetObjectItemCaseSensitive(again, "preview"));
	assert_null(cJSON_GetObjectItemCaseSensitive(again, "approval"));
	assert_null(cJSON_GetObjectItemCaseSensitive(again, "drift"));
	cJSON_Delete(again);
	pass_free(p);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(verdict_fills_the_pass),
		cmocka_unit_test(status_readers),
		cmocka_unit_test(conditions_follow_kstatus),
		cmocka_unit_test(transition_time_moves_only_with_the_status),
		cmocka_unit_test(note_and_reconcile_requests),
		cmocka_unit_test(successful_up),
		cmocka_unit_test(failed_up_keeps_what_was_applied),
		cmocka_unit_test(preview_and_destroy),
		cmocka_unit_test(history_is_newest_first_and_bounded),
		cmocka_unit_test(unchanged_status_is_not_written),
		cmocka_unit_test(conflict_goes_back_to_the_worker),
		cmocka_unit_test(running_status),
		cmocka_unit_test(update_outcome_survives_a_conflict),
		cmocka_unit_test(interrupted_updates_are_kept),
		cmocka_unit_test(interrupted_lock_waits_out_the_grace),
		cmocka_unit_test(approval_and_drift_in_status),
	};
	return cmocka_run_group_tests(tests, fake_setup, fake_teardown);
}
