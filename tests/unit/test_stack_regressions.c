/*
 * test_stack_regressions.c - defects the first unit tests of src/stack/ found
 * (each failed on the reconciler's first commit): refusals of fields that
 * were silently taken as absent, messages naming the wrong field, dir rules,
 * the fingerprint's fields, outputs Secret keys, conditions of other owners.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fs.h"
#include "stack/stack_machine.h"
#include "stack_fake_api.h"

#define FLUX "'fluxSource': {'sourceRef': {'kind': 'GitRepository', 'name': 'infra'}}"

static struct stack_opts opts;

static cJSON *stack_obj(const char *spec)
{
	char text[4096];
	snprintf(text, sizeof(text), "{'metadata': {'name': 'web', 'namespace': 'apps'}, 'spec': %s}", spec);
	for (char *c = text; *c; c++)
		if (*c == '\'')
			*c = '"';
	return cJSON_Parse(text);
}

/* rc of the parse; msg gets the message. */
static int parse(const char *spec, char *msg, size_t n)
{
	cJSON *obj = stack_obj(spec);
	struct stack_spec s;
	struct err e;
	int rc;

	assert_non_null(obj);
	stack_opts_default(&opts);
	rc = stack_spec_parse(obj, &opts, &s, &e);
	snprintf(msg, n, "%s", rc ? e.msg : "");
	stack_spec_free(&s);
	cJSON_Delete(obj);
	return rc;
}

/* Prints every wrong case; the test fails at its end (check_all). */
static int wrong;

static void expect_refused(const char *spec, const char *field)
{
	char msg[1100];
	if (parse(spec, msg, sizeof(msg)) == 0) {
		print_error("accepted, expected refused naming %s: %s\n", field, spec);
		wrong++;
	} else if (strstr(msg, field) == NULL) {
		print_error("message \"%s\" does not name %s\n", msg, field);
		wrong++;
	}
}

static int check_all(void **state)
{
	int n = wrong;
	(void)state;
	wrong = 0;
	if (n)
		print_error("%d wrong\n", n);
	return n ? -1 : 0;
}

/* The operator's Git fields beside another source, or of the wrong type:
 * refused naming the field, never ignored. */
static void operator_git_fields_refused(void **state)
{
	(void)state;
	expect_refused("{'stack': 'dev', " FLUX ", 'branch': 'main'}", "spec.branch");
	expect_refused("{'stack': 'dev', " FLUX ", 'commit': '0123456789abcdef0123456789abcdef01234567'}", "spec.commit");
	expect_refused("{'stack': 'dev', " FLUX ", 'repoDir': 'infra'}", "spec.repoDir");
	expect_refused("{'stack': 'dev', " FLUX ", 'projectRepo': {}}", "spec.projectRepo");
}

/* A wrong JSON type for an object-valued field is silently read as absent. */
static void oci_objects_of_the_wrong_type(void **state)
{
	(void)state;
	/* today: tag "latest" is pulled instead of v1 */
	expect_refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': 'v1'}}", "spec.ociSource.ref");
	/* today: anonymous pull, the credentials are ignored */
	expect_refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'secretRef': 'creds'}}",
	    "spec.ociSource.secretRef");
	expect_refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'certSecretRef': 'ca'}}",
	    "spec.ociSource.certSecretRef");
	expect_refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'layerSelector': 'x'}}",
	    "spec.ociSource.layerSelector");
}

/* docs: layerSelector.operation "copy keeps it as one file"; the parser
 * never reads operation, so copy is silently an extract. */
static void layer_operation_copy_not_silently_extract(void **state)
{
	(void)state;
	expect_refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', "
	    "'layerSelector': {'mediaType': 'm', 'operation': 'copy'}}}", "spec.ociSource.layerSelector.operation");
}

/* Messages that name the wrong field. */
static void messages_name_the_exact_field(void **state)
{
	(void)state;
	/* today: "spec.configRef.size: must be true or false" */
	expect_refused("{'stack': 'dev', " FLUX ", 'configRef': {'size': {'name': 'c', 'key': 'k', 'json': 'yes'}}}",
	    "spec.configRef.size.json");
	/* today: "spec.envRefs: \"A=B\" is not ..." for a key of envs */
	expect_refused("{'stack': 'dev', " FLUX ", 'envs': {'A=B': {'value': 'x'}}}", "spec.envs");
	/* today: "spec.envs and spec.envRefs both set A" with no envRefs at all */
	{
		char msg[1100];
		assert_int_equal(parse("{'stack': 'dev', " FLUX ", 'envs': {'A': {'value': '1'}, 'A': {'value': '2'}}}",
		    msg, sizeof(msg)), -1);
		assert_null(strstr(msg, "envRefs"));
	}
}

/* ".." is refused anywhere in dir, not only as a path component. */
static void dots_inside_a_name_are_fine(void **state)
{
	char msg[1100];
	(void)state;
	if (parse("{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'Bucket', 'name': 'b'}, "
	    "'dir': 'releases/2024..2025'}}", msg, sizeof(msg)) != 0)
		fail_msg("refused: %s", msg);
}

/* pl_driver passes config as `--plaintext KEY=VALUE`: a key with '=' or an
 * empty key is another key by the time pulumi reads it. */
static void config_keys_that_cannot_be_set(void **state)
{
	(void)state;
	expect_refused("{'stack': 'dev', " FLUX ", 'config': {'': 'x'}}", "spec.config");
	expect_refused("{'stack': 'dev', " FLUX ", 'config': {'a=b': 'x'}}", "spec.config");
}

/* CONTRACT/docs: the fingerprint covers generation, revision, digest,
 * dir and resourceVersions; dir is not hashed. */
static void fingerprint_covers_dir(void **state)
{
	struct stack_pass *p = calloc(1, sizeof(*p));
	char a[65], b[65];
	(void)state;

	p->generation = 3;
	p->art.revision = strdup("main@sha1:aa");
	p->art.digest = strdup("sha256:11");
	stack_fingerprint(p, a);
	p->spec.dir = strdup("other");
	stack_fingerprint(p, b);
	free(p->spec.dir);
	stack_artifact_free(&p->art);
	free(p);
	assert_string_not_equal(a, b);
}

/* spec.dir naming a symlink to a directory inside the artifact (the
 * extractor keeps links inside the tree) is a program dir like any other;
 * fs_is_dir uses lstat, so it is ProgramNotFound, while the same link as a
 * middle component ("current/sub") is followed. */
static void dir_through_a_symlink(void **state)
{
	static struct stack_ctl ctl;
	struct stack_pass *p = calloc(1, sizeof(*p));
	char tmp[] = "/tmp/test_stack_regressions.XXXXXX", path[PATH_MAX], store[PATH_MAX];
	struct err e;
	FILE *f;
	int rc;
	(void)state;

	assert_non_null(mkdtemp(tmp));
	snprintf(path, sizeof(path), "%s/tree/v2", tmp);
	assert_int_equal(fs_mkdir_p(path, 0755, &e), 0);
	snprintf(path, sizeof(path), "%s/tree/v2/Pulumi.yaml", tmp);
	f = fopen(path, "w");
	fputs("name: x\nruntime: yaml\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/tree/current", tmp);
	assert_int_equal(symlink("v2", path), 0);
	snprintf(store, sizeof(store), "%s/store", tmp);
	ctl.o.storage_path = store;
	p->sc = &ctl;
	snprintf(p->ns, sizeof(p->ns), "apps");
	snprintf(p->name, sizeof(p->name), "web");
	p->art.digest = strdup("sha256:1");
	p->art.revision = strdup("main@sha1:1");
	p->spec.dir = strdup("current");
	snprintf(p->tree, sizeof(p->tree), "%s/tree", tmp);
	rc = stack_workspace_prepare(p);
	if (rc != 0)
		fprintf(stderr, "verdict: %s %s\n", p->v.reason, p->v.message);
	free(p->spec.dir);
	stack_artifact_free(&p->art);
	free(p);
	fs_rm_rf(tmp, &e);
	assert_int_equal(rc, 0);
}

/* CONTRACT: annotation pulumi.com/secrets = JSON array of secret keys
 * (sorted); today they come in the order of the outputs object.  And two
 * output names that map to one Secret key ("a b", "a_b") both land in data
 * under "a_b" (a JSON object with a duplicate key: one output is lost). */
static void outputs_secret_keys(void **state)
{
	struct stack_pass *p = calloc(1, sizeof(*p));
	cJSON *secret;
	const cJSON *ann, *it;
	struct err e;
	int n_ab = 0;
	(void)state;

	p->obj = cJSON_Parse("{\"apiVersion\": \"pulumi.com/v1\", \"kind\": \"Stack\", \"metadata\": "
	    "{\"name\": \"web\", \"namespace\": \"apps\", \"uid\": \"u-1\", \"resourceVersion\": \"41\"}}");
	p->sc = &sc;
	snprintf(p->ns, sizeof(p->ns), "apps");
	snprintf(p->name, sizeof(p->name), "web");
	p->out.outputs = cJSON_Parse("{\"zeta\": \"[secret]\", \"alpha\": \"[secret]\", \"a b\": \"1\", \"a_b\": \"2\"}");
	p->out.outputs_plain = cJSON_Parse("{\"zeta\": \"z\", \"alpha\": \"a\", \"a b\": \"1\", \"a_b\": \"2\"}");
	fake_reset();
	assert_int_equal(stack_outputs_write(p, &e), 0);
	secret = fake_put_json();
	ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(secret, "metadata"), "annotations"), "pulumi.com/secrets");
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(secret, "data"))
		n_ab += strcmp(it->string, "a_b") == 0;
	if (strcmp(ann->valuestring, "[\"alpha\",\"zeta\"]") != 0) {
		print_error("pulumi.com/secrets is %s, want [\"alpha\",\"zeta\"]\n", ann->valuestring);
		wrong++;
	}
	if (n_ab != 1) {
		print_error("data has %d keys \"a_b\" (outputs \"a b\" and \"a_b\")\n", n_ab);
		wrong++;
	}
	cJSON_Delete(secret);
	cJSON_Delete(p->obj);
	cJSON_Delete(p->out.outputs);
	cJSON_Delete(p->out.outputs_plain);
	free(p);
}

/* build_conditions keeps conditions other owners wrote; the "update is
 * running" write replaces them with Ready+Reconciling, so they are lost
 * for good (the final write starts from the running one). */
static void running_write_keeps_foreign_conditions(void **state)
{
	struct stack_pass *p = fake_pass_new("{'stack': 'dev'}", NULL, "{'conditions': ["
	    "{'type': 'Ready', 'status': 'True', 'reason': 'Succeeded', 'message': 'm'}, "
	    "{'type': 'Healthy', 'status': 'True', 'reason': 'Probe', 'message': 'someone else'}]}");
	cJSON *body;
	const cJSON *c;
	struct err e;
	int found = 0;
	(void)state;

	fake_reset();
	assert_int_equal(stack_status_write_running(p, &e), 0);
	body = fake_put_json();
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(body, "status"),
	    "conditions"))
		found |= strcmp(kube_obj_str(c, "type"), "Healthy") == 0;
	cJSON_Delete(body);
	fake_pass_free(p);
	if (!found) {
		print_error("the running status dropped condition Healthy\n");
		wrong++;
	}
}

/* cloud: a URL while backend is also set lands in cloud_ignored, and the
 * Ready note then says it "is not a backend URL"; it is one (the message
 * should say backend wins, or the spec be refused as two backends). */
static void cloud_url_beside_backend(void **state)
{
	cJSON *obj = stack_obj("{'stack': 'dev', " FLUX ", 'backend': 's3://a', 'cloud': 's3://b'}");
	struct stack_spec s;
	struct err e;
	(void)state;

	stack_opts_default(&opts);
	assert_int_equal(stack_spec_parse(obj, &opts, &s, &e), 0);
	if (s.cloud_ignored != NULL) {
		print_error("cloud_ignored = %s: the note will call a URL \"not a backend URL\"\n", s.cloud_ignored);
		wrong++;
	}
	stack_spec_free(&s);
	cJSON_Delete(obj);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(operator_git_fields_refused, check_all),
		cmocka_unit_test_teardown(oci_objects_of_the_wrong_type, check_all),
		cmocka_unit_test_teardown(layer_operation_copy_not_silently_extract, check_all),
		cmocka_unit_test_teardown(messages_name_the_exact_field, check_all),
		cmocka_unit_test_teardown(dots_inside_a_name_are_fine, check_all),
		cmocka_unit_test_teardown(config_keys_that_cannot_be_set, check_all),
		cmocka_unit_test_teardown(fingerprint_covers_dir, check_all),
		cmocka_unit_test_teardown(dir_through_a_symlink, check_all),
		cmocka_unit_test_teardown(outputs_secret_keys, check_all),
		cmocka_unit_test_teardown(running_write_keeps_foreign_conditions, check_all),
		cmocka_unit_test_teardown(cloud_url_beside_backend, check_all),
	};
	return cmocka_run_group_tests(tests, fake_setup, fake_teardown);
}
