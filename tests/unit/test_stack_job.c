/*
 * test_stack_job.c - the Job runner's pure parts: spec.runner validation
 * (stack_spec_runner.c: what a pod template may carry, hostile specs refused
 * with the field named, bounds) and the Job builder (stack_job_build.c: the
 * name and its truncation, labels, owner, the restricted security context,
 * the update document, values by reference only).  The API side is in
 * tests/e2e/test_stack_jobs.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/base64.h"
#include "stack/stack_machine.h"

#define FLUX "'fluxSource': {'sourceRef': {'apiVersion': 'source.toolkit.fluxcd.io/v1', " \
	"'kind': 'GitRepository', 'name': 'infra'}}"
#define FP "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static struct stack_opts opts;

/* Single quotes become double ones; caller frees. */
static cJSON *stack_obj(const char *name, const char *spec)
{
	char *text = malloc(strlen(spec) + strlen(name) + 200);
	cJSON *obj;

	assert_non_null(text);
	sprintf(text, "{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', 'metadata': {'name': '%s', "
	    "'namespace': 'apps', 'uid': 'u-1', 'generation': 1}, 'spec': %s}", name, spec);
	for (char *c = text; *c; c++)
		if (*c == '\'')
			*c = '"';
	obj = cJSON_Parse(text);
	if (obj == NULL)
		fail_msg("test spec is not JSON: %s", text);
	free(text);
	return obj;
}

static int parse(const char *spec, struct stack_spec *s, struct err *e)
{
	cJSON *obj = stack_obj("web", spec);
	int rc = stack_spec_parse(obj, &opts, s, e);

	cJSON_Delete(obj);
	return rc;
}

/* spec must be refused with a message containing want. */
static void refused(const char *spec, const char *want)
{
	struct stack_spec s;
	struct err e;

	if (parse(spec, &s, &e) == 0)
		fail_msg("accepted: %s", spec);
	if (strstr(e.msg, want) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", e.msg, want);
	stack_spec_free(&s);
}

static void setup_opts(void)
{
	stack_opts_default(&opts);
	opts.job_image = "ghcr.io/x/pulumi-controller:1";
}

/* ------------------------------------------------------------ names */

static void test_name_is_stack_op_and_ten_hex(void **state)
{
	char out[64];

	(void)state;
	assert_int_equal(stack_job_name("web", "up", FP, out, sizeof(out)), 0);
	assert_string_equal(out, "web-up-0123456789");
	assert_int_equal(stack_job_name("web", "preview", "abc", out, sizeof(out)), -1);
}

static void test_long_names_are_cut_in_the_stack_part(void **state)
{
	char stack[254], out[64];

	(void)state;
	memset(stack, 'a', 200);
	stack[200] = '\0';
	/* 63 - strlen("-destroy-") - 10 = 44 kept, but the cut would end in
	 * "--": it ends before them. */
	stack[42] = '-';
	stack[43] = '-';
	assert_int_equal(stack_job_name(stack, "destroy", FP, out, sizeof(out)), 0);
	assert_true(strlen(out) <= 63);
	assert_non_null(strstr(out, "-destroy-0123456789"));
	assert_int_equal(strlen(out), 42 + strlen("-destroy-0123456789"));
	assert_int_equal(out[41], 'a');
}

/* ------------------------------------------------------------ runner spec */

static void test_runner_types_and_the_default(void **state)
{
	struct stack_spec s;
	struct err e;

	(void)state;
	assert_int_equal(parse("{'stack': 'dev', " FLUX "}", &s, &e), 0);
	assert_false(s.job_mode);
	stack_spec_free(&s);
	opts.runner_job = 1;
	assert_int_equal(parse("{'stack': 'dev', " FLUX "}", &s, &e), 0);
	assert_true(s.job_mode);
	stack_spec_free(&s);
	assert_int_equal(parse("{'stack': 'dev', " FLUX ", 'runner': {'type': 'Local'}}", &s, &e), 0);
	assert_false(s.job_mode);
	stack_spec_free(&s);
	opts.runner_job = 0;
	refused("{'stack': 'dev', " FLUX ", 'runner': {'type': 'Pod'}}", "spec.runner.type: must be Local or Job");
	opts.job_image = NULL;
	refused("{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job'}}", "--job-image");
	setup_opts();
}

static void test_hostile_pod_templates_are_refused_naming_the_field(void **state)
{
	(void)state;
#define R "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job', 'podTemplate': "
	refused(R "{'spec': {'securityContext': {'privileged': true}}}}}", "podTemplate.spec.securityContext");
	refused(R "{'spec': {'hostNetwork': true}}}}", "hostNetwork");
	refused(R "{'spec': {'volumes': [{'name': 'r', 'hostPath': {'path': '/'}}]}}}}",
	    "spec.runner.podTemplate.spec.volumes[0].hostPath: not allowed");
	refused(R "{'spec': {'volumes': [{'name': 'r', 'nfs': {'server': 'x'}}]}}}}",
	    "spec.runner.podTemplate.spec.volumes.nfs: not allowed");
	refused(R "{'spec': {'containers': [{'name': 'x'}]}}}}", "podTemplate.spec.containers: not allowed");
	refused(R "{'spec': {'serviceAccountName': 'admin'}}}}", "podTemplate.spec.serviceAccountName");
	refused(R "{'metadata': {'labels': {'pulumi.com/stack-name': 'other'}}}}}", "reserved");
	refused(R "{'spec': {'env': [{'name': 'PULUMI_CONTROLLER_UPDATE', 'value': '{}'}]}}}}", "reserved");
	refused(R "{'spec': {'volumes': [{'name': 'tmp', 'emptyDir': {}}]}}}}", "reserved");
	refused(R "{'spec': {'volumes': [{'name': 'v', 'emptyDir': {}}], 'volumeMounts': "
	    "[{'name': 'v', 'mountPath': '/work/x'}]}}}}", "volumeMounts[0].mountPath");
	refused(R "{'spec': {'volumeMounts': [{'name': 'nope', 'mountPath': '/data'}]}}}}",
	    "volumeMounts[0].name");
	refused(R "{'spec': {'volumes': [{'name': 'v', 'emptyDir': {}}], 'volumeMounts': "
	    "[{'name': 'v', 'mountPath': '/data', 'subPath': '../etc'}]}}}}", "subPath");
	refused(R "{'spec': {'tolerations': [{'key': 'k', 'privileged': true}]}}}}", "tolerations.privileged");
	refused("{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job', 'serviceAccountName': 'Bad_Name'}}",
	    "spec.runner.serviceAccountName");
	/* The namespace's shared identity is never granted the Stack's Secrets. */
	refused("{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job', 'serviceAccountName': 'default'}}",
	    "needs a ServiceAccount of its own");
	refused("{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job', 'image': 'evil'}}", "spec.runner.image");
#undef R
}

static void test_sizes_are_bounded(void **state)
{
	char *spec = malloc(64 * 1024), *p;

	(void)state;
	assert_non_null(spec);
	p = spec + sprintf(spec, "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job', 'podTemplate': "
	    "{'metadata': {'labels': {");
	for (int i = 0; i < 33; i++)
		p += sprintf(p, "%s'l%d': 'v'", i ? ", " : "", i);
	sprintf(p, "}}}}}");
	refused(spec, "labels: at most 32 entries");
	p = spec + sprintf(spec, "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job', 'podTemplate': "
	    "{'spec': {'env': [");
	for (int i = 0; i < 65; i++)
		p += sprintf(p, "%s{'name': 'E%d', 'value': 'v'}", i ? ", " : "", i);
	sprintf(p, "]}}}}");
	refused(spec, "env: at most 64 items");
	p = spec + sprintf(spec, "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job', 'podTemplate': "
	    "{'metadata': {'labels': {'team': '");
	memset(p, 'x', 64);
	sprintf(p + 64, "'}}}}}");
	refused(spec, "at most 63 characters");
	free(spec);
}

/* ------------------------------------------------------------ the Job */

static const cJSON *at(const cJSON *o, const char *path)
{
	char buf[256], *save = NULL, *k;

	snprintf(buf, sizeof(buf), "%s", path);
	for (k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
		o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(k)) : cJSON_GetObjectItemCaseSensitive(o, k);
	return o;
}

static const char *str_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *label(const cJSON *obj, const char *where, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(at(obj, where), key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const cJSON *env_named(const cJSON *job, const char *name)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, at(job, "spec.template.spec.containers.0.env"))
		if (strcmp(str_at(e, "name"), name) == 0)
			return e;
	return NULL;
}

/* The pod has volume vol of Secret secret, mounted read-only at path. */
static int mounts_secret(const cJSON *job, const char *vol, const char *secret, const char *path)
{
	const cJSON *v;
	int volume = 0, mounted = 0;

	cJSON_ArrayForEach(v, at(job, "spec.template.spec.volumes"))
		if (str_at(v, "secret.secretName") && strcmp(str_at(v, "secret.secretName"), secret) == 0)
			volume = strcmp(str_at(v, "name"), vol) == 0;
	cJSON_ArrayForEach(v, at(job, "spec.template.spec.containers.0.volumeMounts"))
		if (strcmp(str_at(v, "name"), vol) == 0)
			mounted = cJSON_IsTrue(at(v, "readOnly")) && strcmp(str_at(v, "mountPath"), path) == 0;
	return volume && mounted;
}

static cJSON *build(const char *name, const char *spec, struct stack_spec *s)
{
	cJSON *obj = stack_obj(name, spec), *job;
	struct stack_artifact art = { "main@sha1:abc", "sha256:d1", "http://src/x.tar.gz", NULL, NULL };
	struct stack_job_in in = { "apps", name, "u-1", "pulumi.com/v1", "up", FP, s, &art, opts.job_image, 600,
		"/opt/plugins", 0, NULL, NULL, 1LL << 20, NULL };
	struct err e;

	if (stack_spec_parse(obj, &opts, s, &e) != 0)
		fail_msg("refused: %s", e.msg);
	cJSON_Delete(obj);
	job = stack_job_build(&in, &e);
	assert_non_null(job);
	return job;
}

/* Two Stacks whose names share the part a Job's name keeps, at the same
 * inputs, never share a Job (each would delete or adopt the other's); one
 * Stack at the same inputs keeps its name (a restart adopts its Job). */
static void test_job_names_differ_per_stack_and_stay_per_inputs(void **state)
{
	char a[80], b[80], j1[64], j2[64], again[64];

	(void)state;
	memset(a, 'w', 60);
	a[60] = '\0';
	memcpy(b, a, sizeof(a));
	b[55] = 'x';   /* the first 49 characters are a's */
	assert_int_equal(stack_job_name_of(a, "uid-a", "up", FP, j1, sizeof(j1)), 0);
	assert_int_equal(stack_job_name_of(b, "uid-b", "up", FP, j2, sizeof(j2)), 0);
	assert_int_equal(strlen(j1), 63);
	assert_memory_equal(j1, j2, 49);
	assert_string_not_equal(j1, j2);
	assert_int_equal(stack_job_name_of(a, "uid-a", "up", FP, again, sizeof(again)), 0);
	assert_string_equal(j1, again);
	/* The same Stack name with another uid (deleted and made again). */
	assert_int_equal(stack_job_name_of(a, "uid-a2", "up", FP, again, sizeof(again)), 0);
	assert_string_not_equal(j1, again);
	/* Other inputs, another Job. */
	assert_int_equal(stack_job_name_of(a, "uid-a", "up", "abcdef0123456789", again, sizeof(again)), 0);
	assert_string_not_equal(j1, again);
	assert_int_equal(stack_job_name_of(a, "uid-a", "up", "abc", again, sizeof(again)), -1);
	/* A pod of it is still recognised as this Stack's (stack_job_lock.c). */
	assert_int_equal(stack_job_name_of("demo", "uid-a", "up", FP, j1, sizeof(j1)), 0);
	snprintf(again, sizeof(again), "%s-x7k2p", j1);
	assert_true(stack_job_pod_host("demo", again));
}

/* The names the controller gives a Stack's Jobs, and only those, have
 * their shape (the Job slots count no other: stack_job_slots.c). */
static void test_the_shape_of_a_stacks_job_names(void **state)
{
	char job[80], stack[80];

	(void)state;
	assert_int_equal(stack_job_name_of("demo", "uid-a", "up", FP, job, sizeof(job)), 0);
	assert_true(stack_job_is_named("demo", job));
	assert_true(stack_job_is_named("demo", "demo-destroy-abcdef0123"));
	assert_false(stack_job_is_named("demo", "hog"));
	assert_false(stack_job_is_named("demo", "demo-up-0123456789-x"));   /* a pod of it */
	assert_false(stack_job_is_named("demo", "demo-up-012345678"));      /* 9 hex */
	assert_false(stack_job_is_named("demo", "demo-up-012345678G"));
	assert_false(stack_job_is_named("demo", "demo2-up-0123456789"));    /* another Stack */
	assert_false(stack_job_is_named("demo", "demo-Up-0123456789"));
	/* A long name is cut as stack_job_name cuts it, not otherwise. */
	memset(stack, 'w', 60);
	stack[60] = '\0';
	assert_int_equal(stack_job_name_of(stack, "uid-a", "destroy", FP, job, sizeof(job)), 0);
	assert_true(stack_job_is_named(stack, job));
	job[0] = 'v';
	assert_false(stack_job_is_named(stack, job));
}

/* A Job's pods are those its controller-uid label names, not any pod with
 * its job-name label (anyone may give a pod that label). */
static void test_a_jobs_pods_are_selected_by_its_uid(void **state)
{
	char sel[256];

	(void)state;
	assert_int_equal(stack_job_pod_selector("demo-up-0123456789", "5f1c", sel, sizeof(sel)), 0);
	assert_string_equal(sel, "batch.kubernetes.io/job-name=demo-up-0123456789,"
	    "batch.kubernetes.io/controller-uid=5f1c");
	assert_int_equal(stack_job_pod_selector("demo-up-0123456789", NULL, sel, sizeof(sel)), -1);
	assert_int_equal(stack_job_pod_selector("demo-up-0123456789", "", sel, sizeof(sel)), -1);
}

/* The hostnames of this Stack's Job pods, and only those, are recognised
 * (a lock they left may be cancelled once the pod is gone). */
static void test_pod_hosts_of_the_stacks_jobs(void **state)
{
	char job[80], host[80], longname[80];

	(void)state;
	assert_int_equal(stack_job_name("demo", "up", FP, job, sizeof(job)), 0);
	snprintf(host, sizeof(host), "%s-x7k2p", job);
	assert_true(stack_job_pod_host("demo", host));
	assert_true(stack_job_pod_host("demo", "demo-destroy-0123456789-abcde"));
	assert_true(stack_job_pod_host("demo", "demo-refresh-abcdef0123-zz9zz"));
	assert_false(stack_job_pod_host("demo", job));                      /* no pod suffix */
	assert_false(stack_job_pod_host("demo", "another-controller"));
	assert_false(stack_job_pod_host("demo", "demo2-up-0123456789-abcde"));   /* another Stack */
	assert_false(stack_job_pod_host("dem", "demo-up-0123456789-abcde"));
	assert_false(stack_job_pod_host("demo", "demo-up-012345678g-abcde"));    /* not hex */
	assert_false(stack_job_pod_host("demo", "demo-up-0123456789-ABCDE"));
	assert_false(stack_job_pod_host("demo", "demo-up-0123456789-abcdef"));   /* too long */
	assert_false(stack_job_pod_host("demo", "demo-Up-0123456789-abcde"));
	assert_false(stack_job_pod_host("demo", ""));
	/* A long Stack name: the Job's name is cut, and the hostname to 63. */
	memset(longname, 'n', 60);
	longname[60] = '\0';
	assert_int_equal(stack_job_name(longname, "up", FP, job, sizeof(job)), 0);
	assert_int_equal(strlen(job), 63);
	assert_true(stack_job_pod_host(longname, job));                     /* cut to 63 */
	snprintf(host, sizeof(host), "%s-abcde", job);
	assert_false(stack_job_pod_host(longname, host));                   /* longer than a hostname */
}

static void test_the_job_shape_security_and_owner(void **state)
{
	struct stack_spec s;
	cJSON *job;

	(void)state;
	job = build("web", "{'stack': 'dev', " FLUX ", 'timeout': '90s', 'runner': {'type': 'Job', "
	    "'serviceAccountName': 'deployer', 'podTemplate': {'metadata': {'labels': {'team': 'a'}, "
	    "'annotations': {'note': 'n'}}, 'spec': {'nodeSelector': {'pool': 'infra'}, "
	    "'resources': {'limits': {'memory': '1Gi'}}, 'volumes': [{'name': 'ca', 'configMap': "
	    "{'name': 'ca'}}], 'volumeMounts': [{'name': 'ca', 'mountPath': '/etc-ca'}]}}}}", &s);
	{
		char want[64];
		assert_int_equal(stack_job_name_of("web", "u-1", "up", FP, want, sizeof(want)), 0);
		assert_string_equal(str_at(job, "metadata.name"), want);
		assert_int_equal(strncmp(want, "web-up-", 7), 0);
	}
	assert_string_equal(label(job, "metadata.labels", "app.kubernetes.io/managed-by"), "pulumi-controller");
	assert_string_equal(str_at(job, "metadata.labels.team"), "a");
	assert_string_equal(label(job, "spec.template.metadata.labels", "pulumi.com/fingerprint"), "0123456789");
	assert_string_equal(str_at(job, "spec.template.metadata.annotations.note"), "n");
	assert_null(at(job, "metadata.annotations"));
	assert_string_equal(str_at(job, "metadata.ownerReferences.0.uid"), "u-1");
	assert_true(cJSON_IsTrue(at(job, "metadata.ownerReferences.0.controller")));
	assert_true(cJSON_IsTrue(at(job, "metadata.ownerReferences.0.blockOwnerDeletion")));
	assert_int_equal(at(job, "spec.backoffLimit")->valueint, 0);
	assert_int_equal(at(job, "spec.activeDeadlineSeconds")->valueint, 90);
	assert_int_equal(at(job, "spec.ttlSecondsAfterFinished")->valueint, 600);
	assert_string_equal(str_at(job, "spec.template.spec.serviceAccountName"), "deployer");
	assert_string_equal(str_at(job, "spec.template.spec.restartPolicy"), "Never");
	assert_string_equal(str_at(job, "spec.template.spec.nodeSelector.pool"), "infra");
	assert_true(cJSON_IsTrue(at(job, "spec.template.spec.securityContext.runAsNonRoot")));
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.securityContext.seccompProfile.type"),
	    "RuntimeDefault");
	assert_false(cJSON_IsTrue(at(job, "spec.template.spec.containers.0.securityContext.allowPrivilegeEscalation")));
	assert_true(cJSON_IsTrue(at(job, "spec.template.spec.containers.0.securityContext.readOnlyRootFilesystem")));
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.securityContext.capabilities.drop.0"), "ALL");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.resources.limits.memory"), "1Gi");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.volumeMounts.2.mountPath"), "/etc-ca");
	assert_string_equal(str_at(job, "spec.template.spec.volumes.2.name"), "ca");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.command.1"), "run-update");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.args.6"), "--plugins-dir");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.args.7"), "/opt/plugins");
	/* The pod downloads under the controller's --max-artifact-size. */
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.args.8"), "--max-artifact-size");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.args.9"), "1048576");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.terminationMessagePath"),
	    "/tmp/termination-log");
	cJSON_Delete(job);
	stack_spec_free(&s);
}

/* driftDetection runs in Jobs: accepted; the check is op "refresh", and
 * the update that repairs drift asks the pod for --refresh. */
static void test_drift_checks_and_their_repair_are_jobs(void **state)
{
	cJSON *obj = stack_obj("web", "{'stack': 'dev', " FLUX ", 'driftDetection': {'interval': '5m', "
	    "'remediate': true}, 'runner': {'type': 'Job'}}");
	struct stack_artifact art = { "main@sha1:abc", "sha256:d1", "http://src/x.tar.gz", NULL, NULL };
	struct stack_spec s;
	struct stack_job_in in = { "apps", "web", "u-1", "pulumi.com/v1", "refresh", FP, &s, &art, opts.job_image,
		600, NULL, 0, NULL, NULL, 0, NULL };
	struct err e;
	char *doc;

	(void)state;
	if (stack_spec_parse(obj, &opts, &s, &e) != 0)
		fail_msg("refused: %s", e.msg);
	cJSON_Delete(obj);
	doc = stack_job_update_json(&in);
	assert_non_null(strstr(doc, "\"operation\":\"refresh\""));
	assert_non_null(strstr(doc, "\"refresh\":false"));
	free(doc);
	in.op = "up";
	in.refresh = 1;
	doc = stack_job_update_json(&in);
	assert_non_null(strstr(doc, "\"refresh\":true"));
	free(doc);
	stack_spec_free(&s);
}

static void test_values_reach_the_pod_by_reference_only(void **state)
{
	struct stack_spec s;
	cJSON *job, *doc;
	const cJSON *e;

	(void)state;
	job = build("web", "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job'}, 'config': {'region': "
	    "'eu-1'}, 'secretsRef': {'token': {'type': 'Secret', 'secret': {'name': 'creds', 'key': "
	    "'tok'}}}, 'envRefs': {'AWS_KEY': {'type': 'Secret', 'secret': {'name': 'aws', 'key': 'id'}}}}", &s);
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_non_null(doc);
	assert_string_equal(str_at(doc, "source.kind"), "artifact");
	assert_string_equal(str_at(doc, "source.url"), "http://src/x.tar.gz");
	assert_string_equal(str_at(doc, "source.digest"), "sha256:d1");
	assert_string_equal(str_at(doc, "config.region"), "eu-1");
	assert_string_equal(str_at(doc, "outputsSecret"), "web-outputs");
	assert_string_equal(str_at(doc, "env.0"), "AWS_KEY");
	{
		const char *envname = str_at(doc, "secretConfig.token");
		assert_non_null(envname);
		e = env_named(job, envname);
		assert_string_equal(str_at(e, "valueFrom.secretKeyRef.name"), "creds");
		assert_string_equal(str_at(e, "valueFrom.secretKeyRef.key"), "tok");
		assert_null(at(e, "value"));
	}
	e = env_named(job, "AWS_KEY");
	assert_string_equal(str_at(e, "valueFrom.secretKeyRef.name"), "aws");
	assert_null(at(e, "value"));
	cJSON_Delete(doc);
	cJSON_Delete(job);
	stack_spec_free(&s);
}

/* backend and secretsProvider may carry credentials: the Job names the
 * keys of <stack>-job-inputs, never the values. */
static void test_backend_and_secrets_provider_come_from_the_inputs_secret(void **state)
{
	const char *vars[] = { "PULUMI_CONTROLLER_BACKEND", "PULUMI_CONTROLLER_SECRETS_PROVIDER" };
	const char *keys[] = { "backend", "secretsProvider" };
	struct stack_spec s;
	cJSON *job, *doc;
	char *text;

	(void)state;
	job = build("web", "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job'}, 'backend': "
	    "'s3://AKID:s3cr3tkey@minio.example/state', 'secretsProvider': 'azurekeyvault://vault.example/keys/k'}", &s);
	text = cJSON_PrintUnformatted(job);
	assert_null(strstr(text, "s3cr3tkey"));
	assert_null(strstr(text, "vault.example"));
	free(text);
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_non_null(doc);
	assert_null(at(doc, "backend"));
	assert_null(at(doc, "secretsProvider"));
	assert_string_equal(str_at(doc, "backendFromEnv"), vars[0]);
	assert_string_equal(str_at(doc, "secretsProviderFromEnv"), vars[1]);
	for (size_t i = 0; i < 2; i++) {
		const cJSON *e = env_named(job, vars[i]);
		assert_string_equal(str_at(e, "valueFrom.secretKeyRef.name"), "web-job-inputs");
		assert_string_equal(str_at(e, "valueFrom.secretKeyRef.key"), keys[i]);
		assert_null(at(e, "value"));
	}
	cJSON_Delete(doc);
	cJSON_Delete(job);
	stack_spec_free(&s);
	/* Neither set: nothing named. */
	job = build("web", "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job'}}", &s);
	assert_null(env_named(job, vars[0]));
	cJSON_Delete(job);
	stack_spec_free(&s);
}

/* data[key] of <stack>-job-inputs, decoded (the caller frees). */
static char *inputs_value(const cJSON *data, const char *key)
{
	const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(data, key));
	unsigned char *v = NULL;
	size_t n;
	struct err e;

	if (b64 == NULL || base64_decode(b64, strlen(b64), &v, &n, &e) < 0)
		return NULL;
	return (char *)v;
}

/* Issue 21: a secretsRef Literal value was the literal value of its
 * PULUMI_CONTROLLER_CONFIG_<n>, in the Job and its pod.  It is a key of
 * <stack>-job-inputs by the config's index, so a value that reads like a
 * key ("backend", "config.0") names and overwrites nothing. */
static void test_literal_secret_config_comes_from_the_inputs_secret(void **state)
{
	struct stack_spec s;
	const char *want[][2] = { { "backend", "s3://b" }, { "config.1", "hunter2-lit" }, { "config.2", "backend" },
		{ "config.3", "config.0" } };
	cJSON *job, *doc, *data;
	const cJSON *e;
	char *text, *v;

	(void)state;
	job = build("web", "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job'}, 'backend': 's3://b', "
	    "'config': {'region': 'eu-1'}, 'secretsRef': {'pw': {'type': 'Literal', 'literal': {'value': "
	    "'hunter2-lit'}}, 'odd': {'type': 'Literal', 'literal': {'value': 'backend'}}, 'odd2': {'type': "
	    "'Literal', 'literal': {'value': 'config.0'}}, 'tok': {'type': 'Secret', 'secret': {'name': 'creds', "
	    "'key': 'tok'}}}}", &s);
	text = cJSON_PrintUnformatted(job);
	assert_null(strstr(text, "hunter2-lit"));
	free(text);
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_non_null(doc);
	assert_null(at(doc, "config.pw"));
	/* config is index 0: pw 1, odd 2, odd2 3; tok (another Secret) stays its reference. */
	assert_string_equal(str_at(doc, "secretConfig.pw"), "PULUMI_CONTROLLER_CONFIG_1");
	e = env_named(job, "PULUMI_CONTROLLER_CONFIG_1");
	assert_string_equal(str_at(e, "valueFrom.secretKeyRef.name"), "web-job-inputs");
	assert_string_equal(str_at(e, "valueFrom.secretKeyRef.key"), "config.1");
	assert_null(at(e, "value"));
	assert_string_equal(str_at(env_named(job, "PULUMI_CONTROLLER_CONFIG_3"), "valueFrom.secretKeyRef.key"),
	    "config.3");
	e = env_named(job, str_at(doc, "secretConfig.tok"));
	assert_string_equal(str_at(e, "valueFrom.secretKeyRef.name"), "creds");
	assert_string_equal(str_at(e, "valueFrom.secretKeyRef.key"), "tok");
	/* The Secret's data: exactly the backend and the three literals. */
	data = stack_job_inputs_data(&s);
	assert_int_equal(cJSON_GetArraySize(data), 4);
	for (size_t i = 0; i < 4; i++) {
		assert_non_null(v = inputs_value(data, want[i][0]));
		assert_string_equal(v, want[i][1]);
		free(v);
	}
	cJSON_Delete(data);
	cJSON_Delete(doc);
	cJSON_Delete(job);
	stack_spec_free(&s);
	/* Nothing secret: empty data (the Secret, if any, is emptied). */
	job = build("web", "{'stack': 'dev', " FLUX ", 'runner': {'type': 'Job'}, 'config': {'a': 'b'}}", &s);
	data = stack_job_inputs_data(&s);
	assert_int_equal(cJSON_GetArraySize(data), 0);
	cJSON_Delete(data);
	cJSON_Delete(job);
	stack_spec_free(&s);
}

static void test_an_oci_source_mounts_its_credentials(void **state)
{
	struct stack_spec s;
	cJSON *job, *doc;

	(void)state;
	job = build("web", "{'stack': 'dev', 'ociSource': {'url': 'oci://reg.test/app', 'tag': 'v1', "
	    "'secretRef': {'name': 'regcred'}}, 'runner': {'type': 'Job'}}", &s);
	assert_string_equal(str_at(job, "spec.template.spec.volumes.2.projected.sources.0.secret.name"), "regcred");
	assert_string_equal(str_at(job, "spec.template.spec.containers.0.args.6"), "--oci-secret-dir");
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_string_equal(str_at(doc, "source.kind"), "oci");
	assert_string_equal(str_at(doc, "source.layerDigest"), "sha256:d1");
	assert_null(at(doc, "source.indexDigest"));   /* the resolution named no index */
	cJSON_Delete(doc);
	cJSON_Delete(job);
	stack_spec_free(&s);
}

/* The index the controller resolved goes to the pod, whose verification
 * falls back to its signature as the controller's did. */
static void test_an_oci_update_carries_the_index_digest(void **state)
{
	cJSON *obj = stack_obj("web", "{'stack': 'dev', 'ociSource': {'url': 'oci://reg.test/app', 'tag': 'v1', "
	    "'verify': {'provider': 'cosign', 'secretRef': {'name': 'keys'}}}, 'runner': {'type': 'Job'}}");
	struct stack_artifact art = { "v1@sha256:m1", "sha256:d1", NULL, "sha256:i1", NULL };
	struct stack_spec s;
	struct stack_job_in in = { "apps", "web", "u-1", "pulumi.com/v1", "up", FP, &s, &art, opts.job_image,
		600, NULL, 0, NULL, NULL, 0, NULL };
	struct err e;
	char *text;
	cJSON *doc;

	(void)state;
	if (stack_spec_parse(obj, &opts, &s, &e) != 0)
		fail_msg("refused: %s", e.msg);
	cJSON_Delete(obj);
	text = stack_job_update_json(&in);
	doc = cJSON_Parse(text);
	assert_string_equal(str_at(doc, "source.manifestDigest"), "sha256:m1");
	assert_string_equal(str_at(doc, "source.indexDigest"), "sha256:i1");
	cJSON_Delete(doc);
	free(text);
	stack_spec_free(&s);
}

/* The arg after `flag` in the container's args, or NULL. */
static const char *arg_after(const cJSON *job, const char *flag)
{
	const cJSON *a, *args = at(job, "spec.template.spec.containers.0.args");

	cJSON_ArrayForEach(a, args)
		if (cJSON_IsString(a) && strcmp(a->valuestring, flag) == 0)
			return a->next && cJSON_IsString(a->next) ? a->next->valuestring : NULL;
	return NULL;
}

static void test_a_verified_oci_source_mounts_its_keys(void **state)
{
	struct stack_spec s;
	cJSON *job, *doc;

	(void)state;
	job = build("web", "{'stack': 'dev', 'ociSource': {'url': 'oci://reg.test/app', 'tag': 'v1', "
	    "'verify': {'provider': 'cosign', 'secretRef': {'name': 'cosign-keys'}}}, 'runner': {'type': 'Job'}}",
	    &s);
	assert_string_equal(arg_after(job, "--verify-keys-dir"), "/var/run/pulumi-controller/keys");
	assert_true(mounts_secret(job, "pulumi-controller-keys", "cosign-keys", "/var/run/pulumi-controller/keys"));
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_true(cJSON_IsTrue(at(doc, "source.verify")));
	cJSON_Delete(doc);
	cJSON_Delete(job);
	stack_spec_free(&s);
	/* Without verify: no keys, and the pod is told not to check. */
	job = build("web", "{'stack': 'dev', 'ociSource': {'url': 'oci://reg.test/app', 'tag': 'v1'}, "
	    "'runner': {'type': 'Job'}}", &s);
	assert_null(arg_after(job, "--verify-keys-dir"));
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_true(cJSON_IsFalse(at(doc, "source.verify")));
	cJSON_Delete(doc);
	cJSON_Delete(job);
	stack_spec_free(&s);
}

/* approval: Manual: the plan Job is told its Secret; the up Job mounts that
 * Secret and carries the approved id, never the plan. */
static void test_a_plan_job_and_the_up_job_of_its_plan(void **state)
{
	struct stack_spec s;
	struct stack_artifact art = { "main@sha1:abc", "sha256:d1", "http://src/x.tar.gz", NULL, NULL };
	const char *id = "0123456789abcdef0123456789abcdef";
	struct stack_job_in in = { "apps", "web", "u-1", "pulumi.com/v1", "plan", FP, &s, &art, opts.job_image, 600,
		NULL, 0, NULL, NULL, 0, NULL };
	cJSON *obj = stack_obj("web", "{'stack': 'dev', " FLUX ", 'approval': 'Manual', 'runner': {'type': 'Job'}}");
	cJSON *job, *doc;
	struct err e;

	(void)state;
	assert_int_equal(stack_spec_parse(obj, &opts, &s, &e), 0);
	cJSON_Delete(obj);
	job = stack_job_build(&in, &e);
	assert_non_null(job);
	{
		char want[64];
		assert_int_equal(stack_job_name_of("web", "u-1", "plan", FP, want, sizeof(want)), 0);
		assert_string_equal(str_at(job, "metadata.name"), want);
	}
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_string_equal(str_at(doc, "operation"), "plan");
	/* The pod hands the plan back in a Secret of its own, never in the
	 * one up Jobs mount. */
	assert_string_equal(str_at(doc, "planSecret"), "web-plan-result");
	assert_null(at(doc, "planId"));
	/* The program under review runs as a ServiceAccount that no Role lets
	 * write <name>-outputs. */
	assert_string_equal(str_at(job, "spec.template.spec.serviceAccountName"), "web-planner");
	assert_null(arg_after(job, "--plan-dir"));
	cJSON_Delete(doc);
	cJSON_Delete(job);

	in.op = "up";
	in.plan_id = id;
	job = stack_job_build(&in, &e);
	assert_non_null(job);
	doc = cJSON_Parse(str_at(env_named(job, "PULUMI_CONTROLLER_UPDATE"), "value"));
	assert_string_equal(str_at(doc, "planId"), id);
	assert_null(at(doc, "planSecret"));
	assert_null(at(doc, "planAfter"));
	assert_string_equal(arg_after(job, "--plan-dir"), "/var/run/pulumi-controller/plan");
	assert_true(mounts_secret(job, "pulumi-controller-plan", "web-plan", "/var/run/pulumi-controller/plan"));
	assert_string_equal(str_at(job, "spec.template.spec.serviceAccountName"), "web-runner");
	cJSON_Delete(doc);
	cJSON_Delete(job);
	/* One the user names: both ops run as it (docs/job-runner.md). */
	s.runner.service_account = "mine";
	assert_string_equal(stack_job_runner_sa(&s, "web", "plan", NULL, 0), "mine");
	assert_string_equal(stack_job_runner_sa(&s, "web", "up", NULL, 0), "mine");
	s.runner.service_account = NULL;
	stack_spec_free(&s);
}

static int setup(void **state)
{
	(void)state;
	setup_opts();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_name_is_stack_op_and_ten_hex, setup),
		cmocka_unit_test_setup(test_long_names_are_cut_in_the_stack_part, setup),
		cmocka_unit_test_setup(test_job_names_differ_per_stack_and_stay_per_inputs, setup),
		cmocka_unit_test_setup(test_the_shape_of_a_stacks_job_names, setup),
		cmocka_unit_test_setup(test_a_jobs_pods_are_selected_by_its_uid, setup),
		cmocka_unit_test_setup(test_runner_types_and_the_default, setup),
		cmocka_unit_test_setup(test_hostile_pod_templates_are_refused_naming_the_field, setup),
		cmocka_unit_test_setup(test_sizes_are_bounded, setup),
		cmocka_unit_test_setup(test_the_job_shape_security_and_owner, setup),
		cmocka_unit_test_setup(test_pod_hosts_of_the_stacks_jobs, setup),
		cmocka_unit_test_setup(test_drift_checks_and_their_repair_are_jobs, setup),
		cmocka_unit_test_setup(test_values_reach_the_pod_by_reference_only, setup),
		cmocka_unit_test_setup(test_backend_and_secrets_provider_come_from_the_inputs_secret, setup),
		cmocka_unit_test_setup(test_literal_secret_config_comes_from_the_inputs_secret, setup),
		cmocka_unit_test_setup(test_an_oci_source_mounts_its_credentials, setup),
		cmocka_unit_test_setup(test_an_oci_update_carries_the_index_digest, setup),
		cmocka_unit_test_setup(test_a_verified_oci_source_mounts_its_keys, setup),
		cmocka_unit_test_setup(test_a_plan_job_and_the_up_job_of_its_plan, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
