/*
 * test_stack_reconcile.c - stack_reconcile_pass, the state machine, on the
 * paths that end before a source is read (stack_reconcile.c), against the
 * scripted API server of stack_fake_api.h with no informers running (so
 * every Flux kind is "not served"):
 *
 *   - a suspended Stack: nothing is read or written;
 *   - an invalid spec: Stalled SpecInvalid, one Warning Event, and a second
 *     pass on the written object writes nothing at all;
 *   - the finalizer: added for destroyOnFinalize, removed for preview;
 *   - programRef: the GitRepository <name>-program applied server-side
 *     (url, ref mapping, interval, owner), then SourceNotFound until the
 *     (here never started) informer has it;
 *   - deletion: without our finalizer nothing happens; with it and nothing
 *     to destroy (invalid spec, no destroyOnFinalize, never deployed) the
 *     finalizer is released and the workspace removed; with something
 *     deployed and no program, DestroyFailed keeps the finalizer; with a
 *     destroy that succeeded in status (a controller killed before its
 *     release), released without the program.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/fs.h"
#include "kube/kube.h"
#include "stack/stack_machine.h"
#include "stack_fake_api.h"

#define STACK_PATH "/apis/pulumi.com/v1/namespaces/apps/stacks/web"
#define STATUS_PATH STACK_PATH "/status"
#define EVENTS_PATH "/api/v1/namespaces/apps/events"
#define FLUX "'fluxSource': {'sourceRef': {'kind': 'GitRepository', 'name': 'infra'}}"

static char tmp[256];

static int setup(void **state)
{
	if (fake_setup(state) < 0)
		return -1;
	snprintf(tmp, sizeof(tmp), "/tmp/test_stack_reconcile.XXXXXX");
	if (mkdtemp(tmp) == NULL)
		return -1;
	sc.o.storage_path = tmp;
	sc.recorder = kube_recorder_new(sc.client, "pulumi-controller", "test");
	return sc.recorder ? 0 : -1;
}

static int teardown(void **state)
{
	struct err e;

	kube_recorder_free(sc.recorder);
	fs_rm_rf(tmp, &e);
	return fake_teardown(state);
}

/* Runs one pass, which must not fail; returns its requeue delay. */
static int run(struct stack_pass *p)
{
	struct err e;
	int rc = stack_reconcile_pass(p, &e);

	if (rc < 0)
		fail_msg("pass failed: %s", e.msg);
	return rc;
}

static const cJSON *written_condition(const cJSON *body, const char *type)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(body, "status"),
	    "conditions"))
		if (strcmp(kube_obj_str(c, "type"), type) == 0)
			return c;
	return NULL;
}

/* The last write was a status PUT stalling the Stack for reason. */
static void assert_stalled_written(const char *reason)
{
	cJSON *body = fake_put_json();
	const cJSON *ready, *stalled;

	fake_assert_write("PUT", STATUS_PATH, NULL);
	assert_non_null(body);
	ready = written_condition(body, "Ready");
	stalled = written_condition(body, "Stalled");
	assert_non_null(ready);
	assert_non_null(stalled);
	assert_string_equal(kube_obj_str(ready, "status"), "False");
	assert_string_equal(kube_obj_str(ready, "reason"), reason);
	assert_string_equal(kube_obj_str(stalled, "reason"), reason);
	assert_null(written_condition(body, "Reconciling"));
	cJSON_Delete(body);
}

static void suspended_reads_and_writes_nothing(void **state)
{
	struct stack_pass *p = fake_pass_new("{'stack': 'dev', 'suspend': true}", NULL,
	    "{'conditions': [{'type': 'Ready', 'status': 'True', 'reason': 'Succeeded', 'message': 'm'}]}");
	(void)state;

	fake_reset();
	assert_int_equal(run(p), 0);
	assert_int_equal(p->suspended, 1);
	assert_int_equal(fake_count(NULL, NULL), 0);
	fake_pass_free(p);
}

static void invalid_spec_stalls_once(void **state)
{
	struct stack_pass *p = fake_pass_new("{'stack': 'dev', 'projectRepo': 'https://github.com/acme/x.git'}", NULL, NULL);
	cJSON *answer;
	(void)state;

	fake_reset();
	assert_int_equal(run(p), 0);                      /* no requeue: a person must act */
	assert_stalled_written("SpecInvalid");
	assert_true(fake_put_contains("spec.projectRepo"));
	assert_int_equal(fake_count("PUT", STATUS_PATH), 1);
	assert_int_equal(fake_count("POST", EVENTS_PATH), 1);

	/* The next pass, on the object as written: the same verdict is no
	 * news, so neither status nor an Event is written. */
	answer = p->obj;
	p->obj = NULL;
	fake_pass_free(p);
	p = fake_pass_new("{'stack': 'dev'}", NULL, NULL);
	cJSON_Delete(p->obj);
	p->obj = answer;
	p->status = cJSON_GetObjectItemCaseSensitive(answer, "status");
	fake_reset();
	assert_int_equal(run(p), 0);
	assert_int_equal(fake_count(NULL, NULL), 0);
	fake_pass_free(p);
}

/* No informer is running here, so the Flux kind is not served. */
static void source_kind_not_served(void **state)
{
	struct stack_pass *p = fake_pass_new("{'stack': 'dev', " FLUX "}", NULL, NULL);
	(void)state;

	fake_reset();
	assert_int_equal(run(p), 0);
	assert_stalled_written("SourceKindNotServed");
	fake_pass_free(p);
}

static void finalizer_follows_the_spec(void **state)
{
	struct stack_pass *p = fake_pass_new("{'stack': 'dev', 'destroyOnFinalize': true, " FLUX "}", NULL, NULL);
	(void)state;

	/* destroyOnFinalize: the finalizer is added before anything else happens. */
	fake_reset();
	fake_route(STACK_PATH, 200, "{'metadata': {'name': 'web', 'namespace': 'apps', 'uid': 'u-1', "
	    "'resourceVersion': '42', 'generation': 2, 'finalizers': ['finalizer.stack.pulumi.com']}, "
	    "'spec': {'stack': 'dev', 'destroyOnFinalize': true, " FLUX "}}");
	run(p);
	assert_int_equal(fake_count("PATCH", STACK_PATH), 1);
	assert_int_equal(fake_count("PUT", STATUS_PATH), 1);
	assert_true(stack_has_finalizer(p->obj));
	fake_pass_free(p);

	/* A preview never destroys: its finalizer goes. */
	p = fake_pass_new("{'stack': 'dev', 'destroyOnDelete': true, 'preview': true, " FLUX "}",
	    "'finalizers': ['finalizer.stack.pulumi.com', 'other.io/keep']", NULL);
	fake_reset();
	fake_route(STACK_PATH, 200, "{'metadata': {'name': 'web', 'namespace': 'apps', 'resourceVersion': '42', "
	    "'finalizers': ['other.io/keep']}, 'spec': {'stack': 'dev'}}");
	run(p);
	assert_int_equal(fake_count("PATCH", STACK_PATH), 1);
	assert_false(stack_has_finalizer(p->obj));
	fake_pass_free(p);

	/* Already as it should be: no patch. */
	p = fake_pass_new("{'stack': 'dev', " FLUX "}", NULL, NULL);
	fake_reset();
	run(p);
	assert_int_equal(fake_count("PATCH", STACK_PATH), 0);
	fake_pass_free(p);
}

#define DELETING "'deletionTimestamp': '2024-01-01T00:00:00Z'"
#define OURS DELETING ", 'finalizers': ['finalizer.stack.pulumi.com']"
#define RELEASED "{'metadata': {'name': 'web', 'namespace': 'apps', 'resourceVersion': '42', " \
	"'deletionTimestamp': '2024-01-01T00:00:00Z', 'finalizers': []}, 'spec': {'stack': 'dev'}}"

static void deleting_without_our_finalizer_is_left_alone(void **state)
{
	struct stack_pass *p = fake_pass_new("{'stack': 'dev', " FLUX "}", DELETING ", 'finalizers': ['other.io/x']", NULL);
	(void)state;

	fake_reset();
	assert_int_equal(run(p), 0);
	assert_int_equal(p->gone, 1);
	assert_int_equal(fake_count(NULL, NULL), 0);
	fake_pass_free(p);
}

/* What must be true after a release: the finalizer patched away, the
 * workspace gone, no status written (the Stack is going). */
static void assert_released(struct stack_pass *p, const char *root)
{
	cJSON *patch;

	assert_int_equal(p->gone, 1);
	assert_int_equal(fake_count("PATCH", STACK_PATH), 1);
	assert_int_equal(fake_count("PUT", STATUS_PATH), 0);
	patch = fake_put_json();
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(patch, "metadata"), "finalizers")), 0);
	cJSON_Delete(patch);
	assert_false(fs_exists(root));
}

static void deleting_with_nothing_to_destroy_releases(void **state)
{
	static const char *specs[] = {
	    "{'stack': 'dev'}",                                          /* invalid: still deletable */
	    "{'stack': 'dev', " FLUX "}",                                /* no destroyOnFinalize */
	    "{'stack': 'dev', 'destroyOnFinalize': true, 'preview': true, " FLUX "}",
	    "{'stack': 'dev', 'destroyOnFinalize': true, " FLUX "}",     /* never deployed, no program */
	};
	char root[PATH_MAX];
	(void)state;

	stack_workspace_paths(&sc, "apps", "web", root, sizeof(root));
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		struct stack_pass *p = fake_pass_new(specs[i], OURS, NULL);
		assert_int_equal(fs_mkdir_p(root, 0700, &(struct err){0}), 0);
		fake_reset();
		fake_route(STACK_PATH, 200, RELEASED);
		assert_int_equal(run(p), 0);
		assert_released(p, root);
		fake_pass_free(p);
	}
}

/* Something was deployed but no program is left to destroy it with: the
 * finalizer stays, and the Stack says why. */
static void deployed_without_a_program_keeps_the_finalizer(void **state)
{
	struct stack_pass *p = fake_pass_new("{'stack': 'dev', 'destroyOnFinalize': true, " FLUX "}", OURS,
	    "{'lastAppliedRevision': 'main@sha1:aaaa'}");
	cJSON *body;
	const cJSON *ready;
	(void)state;

	fake_reset();
	assert_int_equal(run(p), (int)sc.o.requeue_dependency_ms);
	assert_int_equal(p->gone, 0);
	assert_int_equal(fake_count("PATCH", STACK_PATH), 0);
	assert_int_equal(fake_count("POST", EVENTS_PATH), 1);
	body = fake_put_json();
	fake_assert_write("PUT", STATUS_PATH, NULL);
	ready = written_condition(body, "Ready");
	assert_string_equal(kube_obj_str(ready, "reason"), "DestroyFailed");
	assert_non_null(written_condition(body, "Reconciling"));
	assert_null(written_condition(body, "Stalled"));
	assert_non_null(strstr(kube_obj_str(ready, "message"), "program is not available"));
	cJSON_Delete(body);
	fake_pass_free(p);
}

/* The last pass destroyed the stack and recorded it, then died before the
 * release: the next one lets the Stack go, though no program is left. */
static void a_recorded_destroy_releases_without_a_program(void **state)
{
	char root[PATH_MAX];
	struct stack_pass *p = fake_pass_new("{'stack': 'dev', 'destroyOnFinalize': true, " FLUX "}", OURS,
	    "{'lastAppliedRevision': 'main@sha1:aaaa', 'lastUpdate': {'type': 'destroy', 'state': 'succeeded'}}");
	(void)state;

	stack_workspace_paths(&sc, "apps", "web", root, sizeof(root));
	assert_int_equal(fs_mkdir_p(root, 0700, &(struct err){0}), 0);
	fake_reset();
	fake_route(STACK_PATH, 200, RELEASED);
	assert_int_equal(run(p), 0);
	assert_released(p, root);
	assert_int_equal(fake_count("POST", EVENTS_PATH), 0);
	fake_pass_free(p);
}

/* ------------------------------------------------------------ programRef */

#define GITREPO_PATH "/apis/source.toolkit.fluxcd.io/v1/namespaces/apps/gitrepositories/web-program"

/* GitRepository served, with an informer that never lists: its cache is
 * empty, as before the first list of a new object. */
static void serve_git_repositories(int on)
{
	static const struct kube_resource git = { "source.toolkit.fluxcd.io", "v1", "gitrepositories",
	    "GitRepository", 1 };
	struct stack_kind *k = &sc.sources[0];

	if (on) {
		struct kube_informer_opts o = { 0 };
		k->res[0] = git;
		k->nres = 1;
		k->served = &k->res[0];
		k->inf = kube_informer_new(sc.client, k->served, &o);
		assert_non_null(k->inf);
		atomic_store(&k->live, 1);
	} else {
		kube_informer_free(k->inf);
		memset(k, 0, sizeof(*k));
	}
}

/* The GitRepository spec.ref the last apply asked for, as "key=value". */
static void applied_ref(char *out, size_t n)
{
	cJSON *doc = fake_put_json();
	const cJSON *ref = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "spec"), "ref");

	assert_non_null(ref);
	assert_int_equal(cJSON_GetArraySize(ref), 1);
	snprintf(out, n, "%s=%s", ref->child->string, ref->child->valuestring);
	cJSON_Delete(doc);
}

static void program_ref_applies_its_git_repository(void **state)
{
	static const struct { const char *ref, *want; } refs[] = {
		{ "refs/tags/v2.1.0", "tag=v2.1.0" },
		{ "refs/heads/release/1.x", "branch=release/1.x" },
		{ "0123456789abcdef0123456789abcdef01234567", "commit=0123456789abcdef0123456789abcdef01234567" },
		{ "refs/pull/42/head", "name=refs/pull/42/head" },
	};
	char spec[400], have[200];
	(void)state;

	serve_git_repositories(1);
	for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) {
		struct stack_pass *p;
		cJSON *doc;
		const cJSON *owner;

		snprintf(spec, sizeof(spec), "{'programRef': {'repo': 'https://github.com/acme/net.git', "
		    "'ref': '%s'}, 'resyncFrequencySeconds': 300}", refs[i].ref);
		p = fake_pass_new(spec, NULL, NULL);
		fake_reset();
		fake_route(GITREPO_PATH, 200, "{'kind': 'GitRepository', 'metadata': {'name': 'web-program'}}");
		assert_int_equal(run(p), (int)sc.o.requeue_dependency_ms);
		fake_assert_write("PUT", STATUS_PATH, NULL);
		assert_true(fake_put_contains("SourceNotFound"));
		assert_true(fake_put_contains("GitRepository apps/web-program not found"));
		assert_int_equal(fake_count("PATCH", GITREPO_PATH), 1);

		/* Re-run the apply alone to look at what was sent. */
		fake_reset();
		fake_route(GITREPO_PATH, 200, "{'kind': 'GitRepository', 'metadata': {'name': 'web-program'}}");
		memset(&p->v, 0, sizeof(p->v));
		assert_int_equal(stack_source_resolve(p), 1);
		fake_assert_write("PATCH", GITREPO_PATH, "application/apply-patch+yaml");
		applied_ref(have, sizeof(have));
		assert_string_equal(have, refs[i].want);
		doc = fake_put_json();
		assert_string_equal(kube_obj_str(doc, "apiVersion"), "source.toolkit.fluxcd.io/v1");
		assert_string_equal(kube_obj_str(doc, "spec.url"), "https://github.com/acme/net.git");
		assert_string_equal(kube_obj_str(doc, "spec.interval"), "300s");
		assert_string_equal(kube_obj_str(doc, "metadata.namespace"), "apps");
		owner = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(doc, "metadata"), "ownerReferences"), 0);
		assert_string_equal(kube_obj_str(owner, "kind"), "Stack");
		assert_string_equal(kube_obj_str(owner, "uid"), "u-1");
		assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(owner, "controller")));
		cJSON_Delete(doc);
		fake_pass_free(p);
	}

	/* The apply refused (RBAC): the Stack waits and says why. */
	{
		struct stack_pass *p = fake_pass_new("{'programRef': {'repo': 'https://github.com/acme/net.git'}}", NULL, NULL);
		fake_reset();
		fake_route(GITREPO_PATH, 403, FAKE_STATUS(403, "Forbidden", "gitrepositories is forbidden"));
		assert_int_equal(run(p), (int)sc.o.requeue_dependency_ms);
		assert_int_equal(p->v.state, STACK_WAITING);
		assert_string_equal(p->v.reason, "SourceNotFound");
		assert_non_null(strstr(p->v.message, "cannot create or update GitRepository apps/web-program"));
		assert_non_null(strstr(p->v.message, "forbidden"));
		fake_pass_free(p);
	}
	serve_git_repositories(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(suspended_reads_and_writes_nothing),
		cmocka_unit_test(invalid_spec_stalls_once),
		cmocka_unit_test(source_kind_not_served),
		cmocka_unit_test(finalizer_follows_the_spec),
		cmocka_unit_test(deleting_without_our_finalizer_is_left_alone),
		cmocka_unit_test(deleting_with_nothing_to_destroy_releases),
		cmocka_unit_test(deployed_without_a_program_keeps_the_finalizer),
		cmocka_unit_test(a_recorded_destroy_releases_without_a_program),
		cmocka_unit_test(program_ref_applies_its_git_repository),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
