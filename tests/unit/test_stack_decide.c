/*
 * test_stack_decide.c - when stack_reconcile_pass runs an update and when
 * it does not (step_decide in stack_reconcile.c), with a Flux source in an
 * informer's cache.  The informer lists GitRepositories from the scripted
 * API server of stack_fake_api.h once; their artifact URLs point at the
 * fake, which has no artifact, so a pass that decided to update shows it by
 * trying the download (ArtifactFailed) and a pass that did not never asks.
 *
 *   - nothing new since the last update: Ready, no download, no write;
 *   - what makes an update due: a new generation, a reconcile request
 *     (either annotation), the resync period with continueResyncOnCommitMatch,
 *     a failure whose backoff is over, a failure at other inputs;
 *   - what does not: a handled request, a backoff not over (Reconciling
 *     RetryingAfterFailure), maxUpdateFailures reached (Stalled UpdateFailed);
 *   - the source's own states: missing, no artifact yet, no digest.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "base/fs.h"
#include "kube/kube.h"
#include "stack/stack_machine.h"
#include "stack_fake_api.h"

#define STACK_PATH "/apis/pulumi.com/v1/namespaces/apps/stacks/web"
#define STATUS_PATH STACK_PATH "/status"
#define LIST_PATH "/apis/source.toolkit.fluxcd.io/v1/gitrepositories"
#define ARTIFACT_PATH "/artifacts/infra/aaaa.tar.gz"
#define REVISION "main@sha1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DIGEST "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define FLUX(name) "'fluxSource': {'sourceRef': {'kind': 'GitRepository', 'name': '" name "'}}"

static const struct kube_resource git_res = { "source.toolkit.fluxcd.io", "v1", "gitrepositories",
    "GitRepository", 1 };
static char tmp[256];

/* The GitRepositories the informer lists: infra (an artifact on the fake),
 * pending (none yet, still cloning), nodigest (an artifact without one). */
static void route_sources(void)
{
	char list[2048];

	snprintf(list, sizeof(list), "{'kind': 'GitRepositoryList', 'apiVersion': 'source.toolkit.fluxcd.io/v1', "
	    "'metadata': {'resourceVersion': '10'}, 'items': ["
	    "{'metadata': {'name': 'infra', 'namespace': 'apps', 'resourceVersion': '7'}, "
	    " 'status': {'artifact': {'revision': '" REVISION "', 'digest': '" DIGEST "', "
	    "  'url': 'http://127.0.0.1:%d" ARTIFACT_PATH "'}}}, "
	    "{'metadata': {'name': 'pending', 'namespace': 'apps', 'resourceVersion': '8'}, "
	    " 'status': {'conditions': [{'type': 'Ready', 'status': 'False', 'reason': 'GitOperationFailed', "
	    "  'message': 'still cloning'}]}}, "
	    "{'metadata': {'name': 'nodigest', 'namespace': 'apps', 'resourceVersion': '9'}, "
	    " 'status': {'artifact': {'revision': '" REVISION "', 'url': 'http://127.0.0.1:%d/x.tar.gz'}}}]}",
	    F.port, F.port);
	fake_route(LIST_PATH, 200, list);
}

static int setup(void **state)
{
	struct kube_informer_opts o = { 0 };
	struct stack_kind *k = &sc.sources[0];
	struct err e;

	if (fake_setup(state) < 0)
		return -1;
	snprintf(tmp, sizeof(tmp), "/tmp/test_stack_decide.XXXXXX");
	if (mkdtemp(tmp) == NULL)
		return -1;
	sc.o.storage_path = tmp;
	sc.recorder = kube_recorder_new(sc.client, "pulumi-controller", "test");
	route_sources();
	/* After its one list the informer's watches end at once; a long
	 * backoff keeps it quiet for the rest of the run. */
	o.backoff_initial_ms = o.backoff_max_ms = 600000;
	k->res[0] = git_res;
	k->nres = 1;
	k->served = &k->res[0];
	k->inf = kube_informer_new(sc.client, k->served, &o);
	atomic_store(&k->live, 1);
	if (k->inf == NULL || kube_informer_start(k->inf, &e) < 0 || kube_informer_wait_synced(k->inf, 10000) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct err e;

	kube_informer_stop(sc.sources[0].inf);
	kube_informer_free(sc.sources[0].inf);
	memset(&sc.sources[0], 0, sizeof(sc.sources[0]));
	kube_recorder_free(sc.recorder);
	fs_rm_rf(tmp, &e);
	return fake_teardown(state);
}

/* ------------------------------------------------------------ passes */

static void rfc3339(time_t t, char *out, size_t n)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The fingerprint an update of apps/web at generation gen of the infra
 * artifact (no references) wrote. */
static void infra_fingerprint(long long gen, char out[65])
{
	struct stack_pass p;

	memset(&p, 0, sizeof(p));
	p.generation = gen;
	p.art.revision = (char *)REVISION;
	p.art.digest = (char *)DIGEST;
	stack_fingerprint(&p, out);
}

/* The status an update of generation gen left: state succeeded or
 * failed (with failures), at the fingerprint fp, ended at end. */
static void last_update(char *out, size_t n, const char *fp, const char *state, int failures, const char *end,
    const char *extra)
{
	snprintf(out, n, "{'observedGeneration': 2, 'fingerprint': '%s', 'lastAttemptedFingerprint': '%s', "
	    "'artifact': {'revision': '" REVISION "', 'digest': '" DIGEST "'}, "
	    "'lastUpdate': {'type': 'up', 'state': '%s', 'failures': %d, 'endTime': '%s', "
	    "'message': 'exit status 1: boom'}, "
	    "'conditions': [{'type': 'Ready', 'status': 'True', 'reason': 'Succeeded', "
	    "'message': 'applied revision " REVISION "', 'lastTransitionTime': '2020-01-01T00:00:00Z', "
	    "'observedGeneration': 2}]%s%s}",
	    strcmp(state, "succeeded") == 0 ? fp : "older", fp, state, failures, end, extra ? ", " : "",
	    extra ? extra : "");
}

/* Runs one pass on a fresh log; returns its requeue delay. */
static int run(struct stack_pass *p)
{
	struct err e;
	int rc;

	fake_reset();
	/* The Stack as the server has it, for the pass's fresh read. */
	{
		char *text = cJSON_PrintUnformatted(p->obj);
		fake_route(STACK_PATH, 200, text);
		free(text);
	}
	rc = stack_reconcile_pass(p, &e);
	if (rc < 0)
		fail_msg("pass failed: %s", e.msg);
	return rc;
}

/* The pass decided to update: it read the Stack fresh and tried the download. */
static void assert_update_ran_into_the_download(const struct stack_pass *p, const char *why)
{
	if (!p->v.set || strcmp(p->v.reason, "ArtifactFailed") != 0)
		fail_msg("no update was tried: %s %s", p->v.reason ? p->v.reason : "-", p->v.message);
	assert_int_equal(fake_count("GET", STACK_PATH), 1);
	assert_int_equal(fake_count("GET", ARTIFACT_PATH), 1);
	if (why)
		assert_string_equal(p->why, why);
}

static void assert_nothing_ran(void)
{
	assert_int_equal(fake_count("GET", STACK_PATH), 0);
	assert_int_equal(fake_count("GET", ARTIFACT_PATH), 0);
}

/* ------------------------------------------------------------ tests */

static void nothing_new_runs_nothing(void **state)
{
	char fp[65], status[2048], now[32];
	struct stack_pass *p;
	unsigned long long before = atomic_load(&sc.no_change);
	(void)state;

	infra_fingerprint(2, fp);
	rfc3339(time(NULL), now, sizeof(now));
	last_update(status, sizeof(status), fp, "succeeded", 0, now, NULL);
	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", NULL, status);
	assert_int_equal(run(p), 0);
	assert_int_equal(p->v.state, STACK_READY);
	assert_string_equal(p->v.reason, "Succeeded");
	assert_string_equal(p->fingerprint, fp);
	assert_int_equal(p->out.ran, 0);
	assert_nothing_ran();
	/* The status says all of that already: not even a write. */
	assert_int_equal(fake_count("PUT", STATUS_PATH), 0);
	assert_int_equal(atomic_load(&sc.no_change), before + 1);
	fake_pass_free(p);
}

static void a_new_generation_runs(void **state)
{
	char fp[65], status[2048], now[32];
	struct stack_pass *p;
	(void)state;

	infra_fingerprint(1, fp);         /* applied at generation 1 */
	rfc3339(time(NULL), now, sizeof(now));
	last_update(status, sizeof(status), fp, "succeeded", 0, now, NULL);
	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", NULL, status);
	run(p);
	assert_update_ran_into_the_download(p, "the revision, the spec or a referenced object changed");
	assert_int_equal(p->v.state, STACK_WAITING);
	fake_pass_free(p);

	/* Never applied: the first update. */
	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", NULL, NULL);
	run(p);
	assert_update_ran_into_the_download(p, "the first update");
	fake_pass_free(p);
}

static void reconcile_requests(void **state)
{
	char fp[65], status[2048], now[32];
	struct stack_pass *p;
	(void)state;

	infra_fingerprint(2, fp);
	rfc3339(time(NULL), now, sizeof(now));
	last_update(status, sizeof(status), fp, "succeeded", 0, now,
	    "'lastHandledReconcileAt': 'r1', 'observedReconcileRequest': 'q1'");

	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", "'annotations': {'reconcile.fluxcd.io/requestedAt': 'r2'}",
	    status);
	run(p);
	assert_update_ran_into_the_download(p, "a reconcile was requested");
	fake_pass_free(p);

	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", "'annotations': {'pulumi.com/reconciliation-request': 'q2'}",
	    status);
	run(p);
	assert_update_ran_into_the_download(p, "a reconcile was requested");
	fake_pass_free(p);

	/* Requests already handled are no news. */
	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", "'annotations': {'reconcile.fluxcd.io/requestedAt': 'r1', "
	    "'pulumi.com/reconciliation-request': 'q1'}", status);
	run(p);
	assert_string_equal(p->v.reason, "Succeeded");
	assert_nothing_ran();
	fake_pass_free(p);
}

static void resync_with_continue_on_commit_match(void **state)
{
	char fp[65], status[2048], now[32];
	struct stack_pass *p;
	int rq;
	(void)state;

	infra_fingerprint(2, fp);
	/* The period passed. */
	last_update(status, sizeof(status), fp, "succeeded", 0, "2020-01-01T00:00:00Z", NULL);
	p = fake_pass_new("{'stack': 'dev', 'continueResyncOnCommitMatch': true, " FLUX("infra") "}", NULL, status);
	run(p);
	assert_update_ran_into_the_download(p, "the resync interval elapsed");
	fake_pass_free(p);

	/* Without continueResyncOnCommitMatch the same status is up to date. */
	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", NULL, status);
	assert_int_equal(run(p), 0);
	assert_nothing_ran();
	fake_pass_free(p);

	/* Not passed yet: Ready, looked at again when it will have (60 s, +5%). */
	rfc3339(time(NULL), now, sizeof(now));
	last_update(status, sizeof(status), fp, "succeeded", 0, now, NULL);
	p = fake_pass_new("{'stack': 'dev', 'continueResyncOnCommitMatch': true, " FLUX("infra") "}", NULL, status);
	rq = run(p);
	assert_string_equal(p->v.reason, "Succeeded");
	assert_nothing_ran();
	assert_true(rq > 0 && rq <= 63001 + 1000);
	fake_pass_free(p);
}

static void failures_and_their_backoff(void **state)
{
	char fp[65], status[2048], now[32];
	struct stack_pass *p;
	int rq;
	(void)state;

	infra_fingerprint(2, fp);
	rfc3339(time(NULL), now, sizeof(now));

	/* One failure just now: wait out 10 s. */
	last_update(status, sizeof(status), fp, "failed", 1, now, NULL);
	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", NULL, status);
	rq = run(p);
	assert_int_equal(p->v.state, STACK_WAITING);
	assert_string_equal(p->v.reason, "RetryingAfterFailure");
	assert_non_null(strstr(p->v.message, "boom"));
	assert_true(rq > 0 && rq <= 10001);
	assert_nothing_ran();
	fake_pass_free(p);

	/* Its backoff is over: retried. */
	last_update(status, sizeof(status), fp, "failed", 1, "2020-01-01T00:00:00Z", NULL);
	p = fake_pass_new("{'stack': 'dev', " FLUX("infra") "}", NULL, status);
	run(p);
	assert_update_ran_into_the_download(p, "retrying after a failure");
	fake_pass_free(p);

	/* maxUpdateFailures reached: Stalled until something changes. */
	last_update(status, sizeof(status), fp, "failed", 3, "2020-01-01T00:00:00Z", NULL);
	p = fake_pass_new("{'stack': 'dev', 'maxUpdateFailures': 3, " FLUX("infra") "}", NULL, status);
	assert_int_equal(run(p), 0);
	assert_int_equal(p->v.state, STACK_STALLED);
	assert_string_equal(p->v.reason, "UpdateFailed");
	assert_non_null(strstr(p->v.message, "3 times"));
	assert_non_null(strstr(p->v.message, "boom"));
	assert_nothing_ran();
	fake_pass_free(p);

	/* ... and something changed (a new generation): it runs again. */
	infra_fingerprint(1, fp);
	last_update(status, sizeof(status), fp, "failed", 3, "2020-01-01T00:00:00Z", NULL);
	p = fake_pass_new("{'stack': 'dev', 'maxUpdateFailures': 3, " FLUX("infra") "}", NULL, status);
	run(p);
	assert_update_ran_into_the_download(p, NULL);
	fake_pass_free(p);
}

static void source_states(void **state)
{
	struct stack_pass *p;
	(void)state;

	p = fake_pass_new("{'stack': 'dev', " FLUX("missing") "}", NULL, NULL);
	assert_int_equal(run(p), (int)sc.o.requeue_dependency_ms);
	assert_int_equal(p->v.state, STACK_WAITING);
	assert_string_equal(p->v.reason, "SourceNotFound");
	assert_non_null(strstr(p->v.message, "GitRepository apps/missing not found"));
	fake_pass_free(p);

	p = fake_pass_new("{'stack': 'dev', " FLUX("pending") "}", NULL, NULL);
	assert_int_equal(run(p), (int)sc.o.requeue_dependency_ms);
	assert_string_equal(p->v.reason, "ArtifactNotReady");
	assert_non_null(strstr(p->v.message, "still cloning"));
	fake_pass_free(p);

	p = fake_pass_new("{'stack': 'dev', " FLUX("nodigest") "}", NULL, NULL);
	run(p);
	assert_string_equal(p->v.reason, "ArtifactNotReady");
	assert_non_null(strstr(p->v.message, "without a digest"));
	assert_nothing_ran();
	fake_pass_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(nothing_new_runs_nothing),
		cmocka_unit_test(a_new_generation_runs),
		cmocka_unit_test(reconcile_requests),
		cmocka_unit_test(resync_with_continue_on_commit_match),
		cmocka_unit_test(failures_and_their_backoff),
		cmocka_unit_test(source_states),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
