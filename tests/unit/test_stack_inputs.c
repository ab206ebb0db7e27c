/*
 * test_stack_inputs.c - the values an update runs with and the fingerprint
 * of what it depends on (stack_inputs.c):
 *
 *   - stack_inputs_resolve / _lenient against the scripted API server of
 *     stack_fake_api.h: config, secret config and environment from
 *     literals, ConfigMaps (data and binaryData) and Secrets (base64), each
 *     object read once, secret flags, the sorted "Kind/name@rv" references;
 *     a missing object or key, a value with a NUL, a refused read: the
 *     ReferenceNotFound verdict, which never holds a value;
 *   - stack_fingerprint: a hex digest that changes with the generation,
 *     revision, digest and every referenced object's resourceVersion, and
 *     with nothing else.
 *
 * Specs are parsed with stack_spec_parse, single quotes for readability.
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

#define FLUX "'fluxSource': {'sourceRef': {'kind': 'GitRepository', 'name': 'infra'}}"
#define CM_PATH "/api/v1/namespaces/apps/configmaps/settings"
#define SECRET_PATH "/api/v1/namespaces/apps/secrets/creds"
/* settings: size=large, tags={"a":1}, log=debug, blob=bin-value (binaryData) */
#define SETTINGS(rv) "{'kind': 'ConfigMap', 'metadata': {'name': 'settings', 'namespace': 'apps', " \
	"'resourceVersion': '" rv "'}, 'data': {'size': 'large', 'tags': '{\\'a\\':1}', 'log': 'debug'}, " \
	"'binaryData': {'blob': 'YmluLXZhbHVl'}}"
/* creds: token=s3cret-token, nul=a\0b, bad=not base64 */
#define CREDS(rv) "{'kind': 'Secret', 'metadata': {'name': 'creds', 'namespace': 'apps', " \
	"'resourceVersion': '" rv "'}, 'type': 'Opaque', 'data': {'token': 'czNjcmV0LXRva2Vu', " \
	"'nul': 'YQBi', 'bad': '!!!'}}"

/* A pass over apps/web at generation 3 whose spec is spec_json (single
 * quotes; NULL: no spec parsed) and whose source offered rev/digest
 * (NULL: none yet); pass_free. */
static struct stack_pass *pass_new(const char *spec_json, const char *rev)
{
	struct stack_pass *p = calloc(1, sizeof(*p));
	char text[8192];
	struct err e;

	assert_non_null(p);
	snprintf(text, sizeof(text), "{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', 'metadata': "
	    "{'name': 'web', 'namespace': 'apps', 'generation': 3, 'resourceVersion': '41'}, 'spec': %s}",
	    spec_json ? spec_json : "{}");
	for (char *c = text; *c; c++)
		if (*c == '\'')
			*c = '"';
	p->obj = cJSON_Parse(text);
	assert_non_null(p->obj);
	p->sc = &sc;
	snprintf(p->ns, sizeof(p->ns), "apps");
	snprintf(p->name, sizeof(p->name), "web");
	p->generation = 3;
	if (spec_json && stack_spec_parse(p->obj, &sc.o, &p->spec, &e) != 0)
		fail_msg("spec refused: %s", e.msg);
	if (rev) {
		p->art.revision = strdup(rev);
		p->art.digest = strdup("sha256:1111");
	}
	return p;
}

static void pass_free(struct stack_pass *p)
{
	stack_inputs_free(&p->in);
	stack_spec_free(&p->spec);
	stack_artifact_free(&p->art);
	cJSON_Delete(p->obj);
	free(p);
}

static void set_artifact(struct stack_pass *p, const char *rev, const char *digest)
{
	stack_artifact_free(&p->art);
	p->art.revision = strdup(rev);
	p->art.digest = strdup(digest);
}

static const struct pl_config_item *config_item(const struct stack_pass *p, const char *key)
{
	for (size_t i = 0; i < p->in.n_config; i++)
		if (strcmp(p->in.config[i].key, key) == 0)
			return &p->in.config[i];
	return NULL;
}

static const struct pl_env_var *env_var(const struct stack_pass *p, const char *name)
{
	for (size_t i = 0; i < p->in.n_env; i++)
		if (strcmp(p->in.env[i].name, name) == 0)
			return &p->in.env[i];
	return NULL;
}

static void assert_config(const struct stack_pass *p, const char *key, const char *value, int secret,
    int structured)
{
	const struct pl_config_item *c = config_item(p, key);

	if (c == NULL)
		fail_msg("no config %s", key);
	assert_string_equal(c->value, value);
	assert_int_equal(c->secret, secret);
	assert_int_equal(c->structured, structured);
}

static void assert_env(const struct stack_pass *p, const char *name, const char *value, int secret)
{
	const struct pl_env_var *v = env_var(p, name);

	if (v == NULL)
		fail_msg("no env %s", name);
	assert_string_equal(v->value, value);
	assert_int_equal(v->secret, secret);
}

/* ------------------------------------------------------------ resolution */

static void resolves_every_kind_of_value(void **state)
{
	struct stack_pass *p;
	(void)state;

	fake_reset();
	fake_route(CM_PATH, 200, SETTINGS("100"));
	fake_route(SECRET_PATH, 200, CREDS("200"));
	p = pass_new("{'stack': 'dev', " FLUX ", "
	    "'config': {'region': 'eu-west-1', 'n': 3}, "
	    "'configRef': {'size': {'name': 'settings', 'key': 'size'}, "
	    "  'tags': {'name': 'settings', 'key': 'tags', 'json': true}, "
	    "  'blob': {'name': 'settings', 'key': 'blob'}}, "
	    "'secretsRef': {'token': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'token'}}, "
	    "  'pin': {'type': 'Literal', 'literal': {'value': '1234'}}}, "
	    "'envRefs': {'TOKEN': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'token'}}, "
	    "  'MODE': {'type': 'Literal', 'literal': {'value': 'fast'}}}, "
	    "'envs': {'LOG': {'valueFrom': {'configMapKeyRef': {'name': 'settings', 'key': 'log'}}}, "
	    "  'PLAIN': {'value': 'p'}}}", "main@sha1:aaaa");

	assert_int_equal(stack_inputs_resolve(p), 0);
	assert_int_equal(p->v.set, 0);
	assert_int_equal(p->in.n_config, 7);
	assert_config(p, "region", "eu-west-1", 0, 0);
	assert_config(p, "n", "3", 0, 1);
	assert_config(p, "size", "large", 0, 0);
	assert_config(p, "tags", "{\"a\":1}", 0, 1);
	assert_config(p, "blob", "bin-value", 0, 0);
	assert_config(p, "token", "s3cret-token", 1, 0);
	assert_config(p, "pin", "1234", 1, 0);
	assert_int_equal(p->in.n_env, 4);
	assert_env(p, "TOKEN", "s3cret-token", 1);
	assert_env(p, "MODE", "fast", 0);
	assert_env(p, "LOG", "debug", 0);     /* a ConfigMap value is not secret */
	assert_env(p, "PLAIN", "p", 0);

	/* Each object read once, however many values it gives. */
	assert_int_equal(fake_count("GET", CM_PATH), 1);
	assert_int_equal(fake_count("GET", SECRET_PATH), 1);
	assert_int_equal(fake_count(NULL, NULL), 2);

	/* The references, sorted, with their resourceVersions. */
	assert_int_equal(p->in.n_refs, 2);
	assert_string_equal(p->in.refs[0], "ConfigMap/settings@100");
	assert_string_equal(p->in.refs[1], "Secret/creds@200");

	/* Resolving again starts afresh (no leak, no duplicates). */
	assert_int_equal(stack_inputs_resolve(p), 0);
	assert_int_equal(p->in.n_config, 7);
	assert_int_equal(p->in.n_refs, 2);
	pass_free(p);
}

/* No reference, no request. */
static void literals_only_read_nothing(void **state)
{
	struct stack_pass *p;
	(void)state;

	fake_reset();
	p = pass_new("{'stack': 'dev', " FLUX ", 'config': {'a': 'b'}, "
	    "'envRefs': {'X': {'type': 'Literal', 'literal': {'value': 'y'}}}}", "main@sha1:aaaa");
	assert_int_equal(stack_inputs_resolve(p), 0);
	assert_int_equal(fake_count(NULL, NULL), 0);
	assert_int_equal(p->in.n_refs, 0);
	assert_config(p, "a", "b", 0, 0);
	assert_env(p, "X", "y", 0);
	pass_free(p);
}

/* What a missing reference says; never the value of one that was read. */
static void assert_waits_for(const char *spec, const char *message)
{
	struct stack_pass *p = pass_new(spec, "main@sha1:aaaa");

	assert_int_equal(stack_inputs_resolve(p), 1);
	assert_int_equal(p->v.set, 1);
	assert_int_equal(p->v.state, STACK_WAITING);
	assert_string_equal(p->v.reason, "ReferenceNotFound");
	assert_int_equal(p->v.requeue_ms, sc.o.requeue_dependency_ms);
	if (strstr(p->v.message, message) == NULL)
		fail_msg("\"%s\" does not say \"%s\"", p->v.message, message);
	assert_null(strstr(p->v.message, "s3cret"));
	assert_null(strstr(p->v.message, "czNjcmV0"));
	pass_free(p);
}

static void missing_references_wait(void **state)
{
	(void)state;
	fake_reset();
	fake_route(CM_PATH, 200, SETTINGS("100"));
	fake_route(SECRET_PATH, 200, CREDS("200"));
	assert_waits_for("{'stack': 'dev', " FLUX ", "
	    "'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'token'}}, "
	    "  'u': {'type': 'Secret', 'secret': {'name': 'gone', 'key': 'token'}}}}", "Secret apps/gone not found");
	assert_waits_for("{'stack': 'dev', " FLUX ", 'configRef': {'c': {'name': 'nothing', 'key': 'k'}}}",
	    "ConfigMap apps/nothing not found");
	assert_waits_for("{'stack': 'dev', " FLUX ", "
	    "'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'other'}}}}",
	    "Secret apps/creds has no key \"other\"");
	assert_waits_for("{'stack': 'dev', " FLUX ", "
	    "'envs': {'E': {'valueFrom': {'configMapKeyRef': {'name': 'settings', 'key': 'nope'}}}}}",
	    "ConfigMap apps/settings has no key \"nope\"");
	/* A value with a NUL in it cannot be passed to a CLI; bad base64 is no value. */
	assert_waits_for("{'stack': 'dev', " FLUX ", "
	    "'envRefs': {'E': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'nul'}}}}", "creds");
	assert_waits_for("{'stack': 'dev', " FLUX ", "
	    "'envRefs': {'E': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'bad'}}}}", "creds");
	/* A ConfigMap key of a Secret's name is not looked up in the Secret. */
	assert_waits_for("{'stack': 'dev', " FLUX ", 'configRef': {'c': {'name': 'creds', 'key': 'token'}}}",
	    "ConfigMap apps/creds not found");
}

/* A read the server refuses (RBAC) waits as well, saying why. */
static void refused_read_waits(void **state)
{
	(void)state;
	fake_reset();
	fake_route(SECRET_PATH, 403, FAKE_STATUS(403, "Forbidden", "secrets \\\"creds\\\" is forbidden"));
	assert_waits_for("{'stack': 'dev', " FLUX ", "
	    "'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'token'}}}}",
	    "cannot read the Stack's ConfigMaps and Secrets");
}

/* For a destroy: what can be read is used, what is missing is left out. */
static void lenient_skips_what_is_missing(void **state)
{
	struct stack_pass *p;
	(void)state;

	fake_reset();
	fake_route(SECRET_PATH, 200, CREDS("200"));
	p = pass_new("{'stack': 'dev', " FLUX ", 'config': {'a': 'b'}, "
	    "'configRef': {'c': {'name': 'settings', 'key': 'size'}}, "
	    "'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'token'}}, "
	    "  'u': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'other'}}}, "
	    "'envRefs': {'TOKEN': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'token'}}, "
	    "  'GONE': {'type': 'Secret', 'secret': {'name': 'gone', 'key': 'k'}}}}", "main@sha1:aaaa");
	stack_inputs_resolve_lenient(p);
	assert_int_equal(p->v.set, 0);
	assert_int_equal(p->in.n_config, 2);
	assert_config(p, "a", "b", 0, 0);
	assert_config(p, "t", "s3cret-token", 1, 0);
	assert_null(config_item(p, "c"));
	assert_null(config_item(p, "u"));
	assert_int_equal(p->in.n_env, 1);
	assert_env(p, "TOKEN", "s3cret-token", 1);
	assert_int_equal(p->in.n_refs, 1);
	assert_string_equal(p->in.refs[0], "Secret/creds@200");
	pass_free(p);
}

#define MORE_PATH "/api/v1/namespaces/apps/configmaps/more"
/* more: size=small, log=from-more; left out: 1bad, log.level and my-key (no
 * variable name the CLI takes), HOME and PATH (reserved), LD_PRELOAD and
 * NODE_OPTIONS (they run other code). */
#define MORE(rv) "{'kind': 'ConfigMap', 'metadata': {'name': 'more', 'namespace': 'apps', " \
	"'resourceVersion': '" rv "'}, 'data': {'size': 'small', '1bad': 'x', 'HOME': '/evil', 'log': 'from-more', " \
	"'log.level': 'debug', 'my-key': 'v', 'PATH': '/evil', 'LD_PRELOAD': '/evil.so', " \
	"'NODE_OPTIONS': '--require /evil.js'}}"

/* The operator's envs list: every key of each ConfigMap is a variable, a
 * later ConfigMap's key wins, a variable the spec names wins over both;
 * keys that are no variable name, reserved or unusable are left out. */
static void env_from_lists_expand_to_variables(void **state)
{
	struct stack_pass *p;
	char fp1[65], fp2[65];
	(void)state;

	fake_reset();
	fake_route(CM_PATH, 200, SETTINGS("100"));
	fake_route(MORE_PATH, 200, MORE("300"));
	p = pass_new("{'stack': 'dev', " FLUX ", 'envs': ['settings', 'more'], "
	    "'envRefs': {'log': {'type': 'Literal', 'literal': {'value': 'explicit'}}}}", "main@sha1:aaaa");
	assert_int_equal(p->spec.n_env_spec, 1);
	assert_int_equal(stack_inputs_resolve(p), 0);
	assert_int_equal(p->v.set, 0);
	assert_env(p, "log", "explicit", 0);
	assert_env(p, "size", "small", 0);
	assert_env(p, "tags", "{\"a\":1}", 0);
	assert_env(p, "blob", "bin-value", 0);
	assert_null(env_var(p, "1bad"));
	assert_null(env_var(p, "HOME"));
	assert_null(env_var(p, "log.level"));
	assert_null(env_var(p, "my-key"));
	assert_null(env_var(p, "PATH"));
	assert_null(env_var(p, "LD_PRELOAD"));
	assert_null(env_var(p, "NODE_OPTIONS"));
	assert_int_equal(p->in.n_env, 4);
	/* Named in the spec as the others are, for a Job's configMapKeyRef. */
	assert_int_equal(p->spec.n_env, 4);
	assert_int_equal(p->spec.env[1].v.kind, STACK_VAL_CONFIGMAP);
	assert_int_equal(fake_count(NULL, NULL), 2);
	assert_int_equal(p->in.n_refs, 2);
	assert_string_equal(p->in.refs[1], "ConfigMap/settings@100");
	stack_fingerprint(p, fp1);

	/* Again: the same variables, not twice; a new resourceVersion is a new fingerprint. */
	fake_reset();
	fake_route(CM_PATH, 200, SETTINGS("100"));
	fake_route(MORE_PATH, 200, MORE("301"));
	assert_int_equal(stack_inputs_resolve(p), 0);
	assert_int_equal(p->in.n_env, 4);
	assert_int_equal(p->spec.n_env, 4);
	stack_fingerprint(p, fp2);
	assert_string_not_equal(fp1, fp2);
	pass_free(p);

	/* A missing ConfigMap waits, naming the field; a destroy goes on without it. */
	assert_waits_for("{'stack': 'dev', " FLUX ", 'envs': ['settings', 'gone']}",
	    "ConfigMap apps/gone (spec.envs) not found");
	p = pass_new("{'stack': 'dev', " FLUX ", 'envs': ['gone', 'more']}", "main@sha1:aaaa");
	stack_inputs_resolve_lenient(p);
	assert_int_equal(p->v.set, 0);
	assert_env(p, "size", "small", 0);
	pass_free(p);

	/* envSecrets come after the ConfigMaps, as secret values; a key whose
	 * value has a NUL or is no base64 is left out, not waited for.  The
	 * access token is a named variable. */
	fake_route(SECRET_PATH, 200, CREDS("200"));
	p = pass_new("{'stack': 'dev', " FLUX ", 'envs': ['more'], 'envSecrets': ['creds'], "
	    "'accessTokenSecret': 'creds'}", "main@sha1:aaaa");
	assert_int_equal(stack_inputs_resolve(p), 1);      /* creds has no key accessToken */
	assert_non_null(strstr(p->v.message, "Secret apps/creds has no key \"accessToken\""));
	pass_free(p);
	p = pass_new("{'stack': 'dev', " FLUX ", 'envs': ['more'], 'envSecrets': ['creds']}", "main@sha1:aaaa");
	assert_int_equal(stack_inputs_resolve(p), 0);
	assert_env(p, "token", "s3cret-token", 1);
	assert_env(p, "size", "small", 0);
	assert_null(env_var(p, "nul"));
	assert_null(env_var(p, "bad"));
	assert_int_equal(p->in.n_refs, 2);
	assert_string_equal(p->in.refs[1], "Secret/creds@200");
	pass_free(p);
}

/* The fingerprint of a pass whose spec refers to creds and settings, with
 * creds at resourceVersion rv. */
static void fingerprint_with_creds_at(const char *rv, char out[65])
{
	char creds[512];
	struct stack_pass *p;

	snprintf(creds, sizeof(creds), CREDS("%s"), rv);
	fake_reset();
	fake_route(CM_PATH, 200, SETTINGS("100"));
	fake_route(SECRET_PATH, 200, creds);
	p = pass_new("{'stack': 'dev', " FLUX ", "
	    "'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'creds', 'key': 'token'}}}, "
	    "'configRef': {'c': {'name': 'settings', 'key': 'size'}}}", "main@sha1:aaaa");
	assert_int_equal(stack_inputs_resolve(p), 0);
	stack_fingerprint(p, out);
	pass_free(p);
}

/* A changed Secret is a new fingerprint (so a new update); the same one
 * read again is not. */
static void fingerprint_follows_the_objects(void **state)
{
	char a[65], b[65];
	(void)state;

	fingerprint_with_creds_at("200", a);
	fingerprint_with_creds_at("200", b);
	assert_string_equal(a, b);
	fingerprint_with_creds_at("201", b);
	assert_string_not_equal(a, b);
}

/* ------------------------------------------------------------ fingerprint */

static void fingerprint_of(struct stack_pass *p, char out[65])
{
	stack_fingerprint(p, out);
	assert_int_equal(strlen(out), 64);
	for (const char *c = out; *c; c++)
		assert_non_null(strchr("0123456789abcdef", *c));
}

static void add_ref_line(struct stack_pass *p, const char *ref)
{
	p->in.refs = realloc(p->in.refs, (p->in.n_refs + 1) * sizeof(char *));
	assert_non_null(p->in.refs);
	p->in.refs[p->in.n_refs++] = strdup(ref);
}

static void fingerprint_changes_with_each_input(void **state)
{
	struct stack_pass *p = pass_new(NULL, NULL);
	char base[65], again[65], fp[65];
	(void)state;

	set_artifact(p, "main@sha1:aaaa", "sha256:1111");
	add_ref_line(p, "ConfigMap/settings@100");
	add_ref_line(p, "Secret/creds@200");
	fingerprint_of(p, base);
	fingerprint_of(p, again);
	assert_string_equal(base, again);

	/* What is not an input leaves it alone: verdicts, notes, outcomes,
	 * annotations, and the status a pass read. */
	stack_verdict(p, STACK_STALLED, "UpdateFailed", 0, "x");
	snprintf(p->note, sizeof(p->note), "note");
	p->out.ran = 1;
	p->out.type = "up";
	p->failures = 4;
	p->request = "req";
	fingerprint_of(p, fp);
	assert_string_equal(fp, base);

	p->generation = 4;
	fingerprint_of(p, fp);
	assert_string_not_equal(fp, base);
	p->generation = 3;

	set_artifact(p, "main@sha1:bbbb", "sha256:1111");
	fingerprint_of(p, fp);
	assert_string_not_equal(fp, base);
	set_artifact(p, "main@sha1:aaaa", "sha256:2222");
	fingerprint_of(p, fp);
	assert_string_not_equal(fp, base);
	set_artifact(p, "main@sha1:aaaa", "sha256:1111");
	fingerprint_of(p, fp);
	assert_string_equal(fp, base);

	/* Each reference's resourceVersion, and the set of references. */
	free(p->in.refs[1]);
	p->in.refs[1] = strdup("Secret/creds@201");
	fingerprint_of(p, fp);
	assert_string_not_equal(fp, base);
	free(p->in.refs[1]);
	p->in.refs[1] = strdup("Secret/creds@200");
	free(p->in.refs[0]);
	p->in.refs[0] = strdup("ConfigMap/settings@101");
	fingerprint_of(p, fp);
	assert_string_not_equal(fp, base);
	free(p->in.refs[0]);
	p->in.refs[0] = strdup("ConfigMap/settings@100");
	add_ref_line(p, "Secret/extra@1");
	fingerprint_of(p, fp);
	assert_string_not_equal(fp, base);
	free(p->in.refs[--p->in.n_refs]);
	fingerprint_of(p, fp);
	assert_string_equal(fp, base);
	pass_free(p);
}

/* Values are never part of it, and it shows nothing of what went in. */
static void fingerprint_holds_no_value(void **state)
{
	struct stack_pass *p = pass_new(NULL, NULL);
	char fp[65], fp2[65];
	(void)state;

	set_artifact(p, "main@sha1:aaaa", "sha256:1111");
	add_ref_line(p, "Secret/creds@200");
	fingerprint_of(p, fp);
	/* Resolved values differ; the fingerprint does not. */
	p->in.config = calloc(1, sizeof(*p->in.config));
	p->in.n_config = 1;
	fingerprint_of(p, fp2);
	assert_string_equal(fp, fp2);
	free(p->in.config);
	p->in.config = NULL;
	p->in.n_config = 0;
	assert_null(strstr(fp, "creds"));
	assert_null(strstr(fp, "main"));

	/* No artifact yet: still a digest, and not that of an artifact. */
	stack_artifact_free(&p->art);
	fingerprint_of(p, fp2);
	assert_string_not_equal(fp, fp2);
	pass_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(resolves_every_kind_of_value),
		cmocka_unit_test(literals_only_read_nothing),
		cmocka_unit_test(missing_references_wait),
		cmocka_unit_test(refused_read_waits),
		cmocka_unit_test(lenient_skips_what_is_missing),
		cmocka_unit_test(env_from_lists_expand_to_variables),
		cmocka_unit_test(fingerprint_follows_the_objects),
		cmocka_unit_test(fingerprint_changes_with_each_input),
		cmocka_unit_test(fingerprint_holds_no_value),
	};
	return cmocka_run_group_tests(tests, fake_setup, fake_teardown);
}
