/*
 * test_stack_spec.c - stack_spec_parse, the controller's own check of a
 * Stack's spec (stack_spec.c): every source shape, the classic manifest and
 * its aliases, config and value references, durations and bounds, and
 * hostile input (wrong JSON types for every field, paths out of the
 * artifact, keys set twice).  A refused spec must say which field is at
 * fault, since that message becomes the Stalled condition a person reads.
 * Every parse, accepted or refused, is released with stack_spec_free, so
 * ASan's leak check at exit proves nothing a half-parsed spec holds leaks.
 *
 * Specs are written with single quotes for readability; spec_json() turns
 * them into JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "stack/stack_machine.h"

#define FLUX "'fluxSource': {'sourceRef': {'apiVersion': 'source.toolkit.fluxcd.io/v1', " \
	"'kind': 'GitRepository', 'name': 'infra'}}"
#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static struct stack_opts opts;

/* The Stack apps/web with the given spec (single-quoted JSON, or NULL for
 * none); the caller frees it with cJSON_Delete. */
static cJSON *stack_obj(const char *spec)
{
	char *text = malloc(strlen(spec ? spec : "") + 200);
	cJSON *obj;

	assert_non_null(text);
	sprintf(text, "{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', 'metadata': {'name': 'web', "
	    "'namespace': 'apps', 'generation': 1}%s%s}", spec ? ", 'spec': " : "", spec ? spec : "");
	for (char *c = text; *c; c++)
		if (*c == '\'')
			*c = '"';
	obj = cJSON_Parse(text);
	if (obj == NULL)
		fail_msg("test spec is not JSON: %s", text);
	free(text);
	return obj;
}

/* Parses spec, which must be accepted; the caller frees s. */
static void accepted(const char *spec, struct stack_spec *s)
{
	cJSON *obj = stack_obj(spec);
	struct err e;

	if (stack_spec_parse(obj, &opts, s, &e) != 0)
		fail_msg("refused: %s\nspec: %s", e.msg, spec);
	cJSON_Delete(obj);
}

/* Parses spec, which must be refused with a message containing each of the
 * NULL-terminated fragments (the field at fault first). */
static void refused_v(const char *spec, ...)
{
	cJSON *obj = stack_obj(spec);
	struct stack_spec s;
	struct err e;
	const char *want;
	va_list ap;

	if (stack_spec_parse(obj, &opts, &s, &e) == 0) {
		stack_spec_free(&s);
		cJSON_Delete(obj);
		fail_msg("accepted: %s", spec);
	}
	assert_int_equal(e.code, ERR_INVALID);
	va_start(ap, spec);
	while ((want = va_arg(ap, const char *)) != NULL)
		if (strstr(e.msg, want) == NULL)
			fail_msg("message \"%s\" does not contain \"%s\"\nspec: %s", e.msg, want, spec);
	va_end(ap);
	stack_spec_free(&s);
	cJSON_Delete(obj);
}
#define refused(spec, ...) refused_v(spec, __VA_ARGS__, (const char *)NULL)

static int setup(void **state)
{
	(void)state;
	stack_opts_default(&opts);
	opts.max_failures = 7;
	opts.update_timeout_ms = 12345;
	return 0;
}

/* ------------------------------------------------------------ sources */

static void flux_source_of_every_kind(void **state)
{
	static const char *kinds[] = { "GitRepository", "OCIRepository", "Bucket" };
	struct stack_spec s;
	char spec[300];
	(void)state;

	for (size_t i = 0; i < 3; i++) {
		snprintf(spec, sizeof(spec), "{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': '%s', "
		    "'name': 'src'}, 'dir': 'pulumi/infra'}}", kinds[i]);
		accepted(spec, &s);
		assert_int_equal(s.source, STACK_SRC_FLUX);
		assert_string_equal(s.stack, "dev");
		assert_string_equal(s.src_kind, kinds[i]);
		assert_string_equal(s.src_name, "src");
		assert_string_equal(s.dir, "pulumi/infra");
		stack_spec_free(&s);
	}
	accepted("{'stack': 'dev', " FLUX "}", &s);
	assert_null(s.dir);              /* the artifact's root */
	assert_null(s.backend);
	assert_null(s.cloud_ignored);
	stack_spec_free(&s);
}

static void flux_source_refusals(void **state)
{
	(void)state;
	refused("{'stack': 'dev', 'fluxSource': {}}", "spec.fluxSource.sourceRef");
	refused("{'stack': 'dev', 'fluxSource': {'sourceRef': {'name': 'x'}}}",
	    "spec.fluxSource.sourceRef.kind", "GitRepository");
	refused("{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'HelmRepository', 'name': 'x'}}}",
	    "spec.fluxSource.sourceRef.kind");
	refused("{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'GitRepository'}}}",
	    "spec.fluxSource.sourceRef.name");
	refused("{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'GitRepository', 'name': ''}}}",
	    "spec.fluxSource.sourceRef.name");
	refused("{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'GitRepository', 'name': 'x', "
	    "'namespace': 'flux-system'}}}", "spec.fluxSource.sourceRef.namespace");
}

static void oci_source_refs(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', 'ociSource': {'url': 'oci://ghcr.io/acme/infra', 'ref': {'tag': 'v1'}}}", &s);
	assert_int_equal(s.source, STACK_SRC_OCI);
	assert_string_equal(s.oci_url, "oci://ghcr.io/acme/infra");
	assert_string_equal(s.oci_tag, "v1");
	assert_null(s.oci_digest);
	assert_null(s.oci_semver);
	assert_int_equal(s.oci_insecure, 0);
	assert_int_equal(s.oci_interval_ms, 5L * 60 * 1000);
	stack_spec_free(&s);

	accepted("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'digest': 'sha256:" HEX64 "'}}}",
	    &s);
	assert_null(s.oci_tag);
	assert_string_equal(s.oci_digest, "sha256:" HEX64);
	stack_spec_free(&s);

	accepted("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'semver': '>=1.0.0 <2.0.0'}}}", &s);
	assert_null(s.oci_tag);
	assert_string_equal(s.oci_semver, ">=1.0.0 <2.0.0");
	stack_spec_free(&s);

	/* No ref at all: the tag latest, as docker pull does. */
	accepted("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a'}}", &s);
	assert_string_equal(s.oci_tag, "latest");
	stack_spec_free(&s);
	accepted("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {}}}", &s);
	assert_string_equal(s.oci_tag, "latest");
	stack_spec_free(&s);

	refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'tag': 'v1', 'digest': 'sha256:"
	    HEX64 "'}}}", "spec.ociSource.ref");
	refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'tag': 'v1', 'semver': '1.x'}}}",
	    "spec.ociSource.ref");
}

static void oci_source_options(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', 'ociSource': {'url': 'oci://localhost:5000/a/b', 'ref': {'tag': 'v1'}, "
	    "'layerSelector': {'mediaType': 'application/vnd.acme.tar+gzip', 'operation': 'extract'}, "
	    "'secretRef': {'name': 'creds'}, 'certSecretRef': {'name': 'ca'}, 'insecure': true, "
	    "'interval': '90s', 'dir': 'prog'}}", &s);
	assert_string_equal(s.oci_media_type, "application/vnd.acme.tar+gzip");
	assert_string_equal(s.oci_secret, "creds");
	assert_string_equal(s.oci_cert_secret, "ca");
	assert_int_equal(s.oci_insecure, 1);
	assert_int_equal(s.oci_interval_ms, 90000);
	assert_string_equal(s.dir, "prog");
	stack_spec_free(&s);

	refused("{'stack': 'dev', 'ociSource': {}}", "spec.ociSource.url");
	refused("{'stack': 'dev', 'ociSource': {'url': 'https://r.io/a'}}", "spec.ociSource.url", "oci://");
	refused("{'stack': 'dev', 'ociSource': {'url': 'oci://'}}", "spec.ociSource.url");
	refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'interval': '5'}}", "spec.ociSource.interval");
	refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'interval': '0s'}}", "spec.ociSource.interval");
}

#define OCI_VERIFY(v) "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'tag': 'v1'}, " \
	"'verify': " v "}}"

static void oci_source_verify(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted(OCI_VERIFY("{'provider': 'cosign', 'secretRef': {'name': 'keys'}}"), &s);
	assert_int_equal(s.oci_verify, 1);
	assert_string_equal(s.oci_verify_secret, "keys");
	stack_spec_free(&s);
	/* provider defaults to cosign, as Flux's OCIRepository.spec.verify */
	accepted(OCI_VERIFY("{'secretRef': {'name': 'keys'}}"), &s);
	assert_int_equal(s.oci_verify, 1);
	stack_spec_free(&s);
	accepted(OCI_VERIFY("null"), &s);
	assert_int_equal(s.oci_verify, 0);
	assert_null(s.oci_verify_secret);
	stack_spec_free(&s);

	refused(OCI_VERIFY("{'provider': 'notation', 'secretRef': {'name': 'keys'}}"),
	    "spec.ociSource.verify.provider", "notation", "cosign");
	refused(OCI_VERIFY("{'provider': 7, 'secretRef': {'name': 'keys'}}"), "spec.ociSource.verify.provider");
	refused(OCI_VERIFY("{'provider': 'cosign'}"), "spec.ociSource.verify.secretRef.name", "required");
	refused(OCI_VERIFY("{'secretRef': {}}"), "spec.ociSource.verify.secretRef.name", "required");
	refused(OCI_VERIFY("{'secretRef': {'name': ''}}"), "spec.ociSource.verify.secretRef.name");
	refused(OCI_VERIFY("{'secretRef': 'keys'}"), "spec.ociSource.verify.secretRef", "object");
	refused(OCI_VERIFY("{'secretRef': {'name': 3}}"), "spec.ociSource.verify.secretRef.name", "string");
	refused(OCI_VERIFY("'cosign'"), "spec.ociSource.verify", "object");
	refused(OCI_VERIFY("true"), "spec.ociSource.verify", "object");
	/* Keyless fields would be ignored otherwise: refused by name. */
	refused(OCI_VERIFY("{'secretRef': {'name': 'k'}, 'matchOIDCIdentity': [{'issuer': 'x', 'subject': 'y'}]}"),
	    "spec.ociSource.verify.matchOIDCIdentity", "keyless");
	refused(OCI_VERIFY("{'secretRef': {'name': 'k'}, 'trustedRootSecretRef': {'name': 'r'}}"),
	    "spec.ociSource.verify.trustedRootSecretRef", "keyless");
}

static void program_ref_makes_its_git_repository(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'acme/net/prod', 'programRef': {'repo': 'https://github.com/acme/net.git', "
	    "'ref': 'refs/heads/main', 'dir': 'infra'}}", &s);
	assert_int_equal(s.source, STACK_SRC_PROGRAM);
	assert_string_equal(s.stack, "acme/net/prod");
	assert_string_equal(s.prog_repo, "https://github.com/acme/net.git");
	assert_string_equal(s.prog_ref, "refs/heads/main");
	assert_string_equal(s.src_kind, "GitRepository");
	assert_string_equal(s.src_name, "web-program");
	assert_string_equal(s.dir, "infra");
	stack_spec_free(&s);

	/* No ref: left unset here (stack_source.c chooses the GitRepository's ref). */
	accepted("{'programRef': {'repo': 'https://github.com/acme/net.git'}}", &s);
	assert_null(s.prog_ref);
	assert_string_equal(s.stack, "web");
	stack_spec_free(&s);
}

/* The operator's programRef {name}: a Program of the Stack's namespace,
 * never of another, and never in a Job (the pod cannot fetch it). */
static void program_ref_names_a_program(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', 'programRef': {'name': 'my-program'}}", &s);
	assert_int_equal(s.source, STACK_SRC_PROGRAM_OBJECT);
	assert_string_equal(s.src_kind, "Program");
	assert_string_equal(s.src_name, "my-program");
	assert_null(s.prog_repo);
	assert_null(s.dir);
	stack_spec_free(&s);

	refused("{'stack': 'dev', 'programRef': {'name': 'p', 'namespace': 'other'}}",
	    "spec.programRef.namespace", "Stack's namespace");
	refused("{'stack': 'dev', 'programRef': {'name': 'p', 'repo': 'https://x/y.git'}}",
	    "spec.programRef.repo", "not with programRef.name");
	refused("{'stack': 'dev', 'programRef': {'name': 'p', 'dir': 'sub'}}", "spec.programRef.dir");
	refused("{'stack': 'dev', 'programRef': {'name': ''}}", "spec.programRef.name", "DNS");
	refused("{'stack': 'dev', 'programRef': {'name': '../secrets'}}", "spec.programRef.name", "DNS");
	refused("{'stack': 'dev', 'programRef': {'name': 'My_Program'}}", "spec.programRef.name", "DNS");
	refused("{'stack': 'dev', 'programRef': {'name': '-p'}}", "spec.programRef.name", "DNS");
	refused("{'stack': 'dev', 'programRef': {'name': 'p.'}}", "spec.programRef.name", "DNS");
	refused("{'stack': 'dev', 'programRef': {'name': 7}}", "spec.programRef.name", "string");
	refused("{'stack': 'dev', 'programRef': {'name': 'p'}, 'runner': {'type': 'Job'}}",
	    "spec.programRef.name", "local runner");
}

static void program_ref_refusals(void **state)
{
	(void)state;
	refused("{'stack': 'dev', 'programRef': {}}", "spec.programRef.repo");
	refused("{'stack': 'dev', 'programRef': {'repo': ''}}", "spec.programRef.repo");
}

static void exactly_one_source(void **state)
{
	struct stack_spec s;
	(void)state;
	refused("{'stack': 'dev'}", "spec", "exactly one", "found 0");
	refused("{'stack': 'dev', " FLUX ", 'ociSource': {'url': 'oci://r.io/a'}}", "exactly one", "found 2");
	refused("{'stack': 'dev', " FLUX ", 'programRef': {'repo': 'https://x/y.git'}}", "exactly one");
	refused("{'stack': 'dev', " FLUX ", 'ociSource': {'url': 'oci://r.io/a'}, "
	    "'programRef': {'repo': 'https://x/y.git'}}", "found 3");
	/* The operator's Git source is one of them. */
	refused("{'stack': 'dev', 'projectRepo': 'https://github.com/acme/net.git', 'branch': 'main', " FLUX "}",
	    "exactly one", "projectRepo", "found 2");
	/* A second source of the wrong type is refused, not ignored (found by fuzz_stack_spec). */
	refused("{'stack': 'dev', " FLUX ", 'ociSource': 'oci://r.io/a'}", "spec.ociSource", "object");
	refused("{'stack': 'dev', " FLUX ", 'programRef': ['https://x/y.git']}", "spec.programRef", "object");
	accepted("{'stack': 'dev', " FLUX ", 'ociSource': null}", &s);
	stack_spec_free(&s);
}

/* ------------------------------------------------------------ the operator's Git source */

#define REPO "'projectRepo': 'https://git.example.com/acme/infra.git'"
#define SHA40 "3f7c2a9e1b5d4c8f0a6e2d9b7c1f4a3e5d8b0c2a"

/* projectRepo with branch or commit: the GitRepository web-program, as for
 * the classic programRef; repoDir is the artifact's directory. */
static void project_repo_makes_its_git_repository(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'repoDir': 'network', 'shallow': true}", &s);
	assert_int_equal(s.source, STACK_SRC_PROGRAM);
	assert_true(s.project_repo);
	assert_string_equal(s.src_kind, "GitRepository");
	assert_string_equal(s.src_name, "web-program");
	assert_string_equal(s.prog_repo, "https://git.example.com/acme/infra.git");
	assert_string_equal(s.prog_ref, "refs/heads/main");
	assert_string_equal(s.dir, "network");
	assert_int_equal(s.git_auth.kind, STACK_GIT_NONE);
	stack_spec_free(&s);

	/* A fully qualified branch stays as it is; a commit (upper case too) is pinned. */
	accepted("{'stack': 'dev', " REPO ", 'branch': 'refs/heads/release'}", &s);
	assert_string_equal(s.prog_ref, "refs/heads/release");
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " REPO ", 'commit': '3F7C2A9E1B5D4C8F0A6E2D9B7C1F4A3E5D8B0C2A'}", &s);
	assert_string_equal(s.prog_ref, SHA40);
	assert_null(s.dir);
	stack_spec_free(&s);
	/* repoDir is joined to the clone's root, as the operator does: a leading
	 * slash names the same directory, and "/" the root. */
	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'repoDir': '//kubernetes-ts-nginx'}", &s);
	assert_string_equal(s.dir, "kubernetes-ts-nginx");
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'repoDir': '/'}", &s);
	assert_null(s.dir);
	stack_spec_free(&s);
	/* An empty branch beside a commit is no branch (the operator's omitempty). */
	accepted("{'stack': 'dev', " REPO ", 'branch': '', 'commit': '" SHA40 "'}", &s);
	assert_string_equal(s.prog_ref, SHA40);
	stack_spec_free(&s);
}

static void project_repo_refusals(void **state)
{
	(void)state;
	/* As the operator: exactly one of branch and commit. */
	refused("{'stack': 'dev', " REPO "}", "spec.branch", "commit");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'commit': '" SHA40 "'}", "spec.branch",
	    "spec.commit", "not both");
	refused("{'stack': 'dev', " REPO ", 'commit': '3f7c2a9'}", "spec.commit", "40");
	refused("{'stack': 'dev', " REPO ", 'commit': '" SHA40 "0'}", "spec.commit", "40");
	refused("{'stack': 'dev', " REPO ", 'commit': 'zzzc2a9e1b5d4c8f0a6e2d9b7c1f4a3e5d8b0c2a'}", "spec.commit");
	refused("{'stack': 'dev', 'projectRepo': '', 'branch': 'main'}", "spec.projectRepo");
	refused("{'stack': 'dev', 'projectRepo': {'url': 'x'}, 'branch': 'main'}", "spec.projectRepo", "string");
	refused("{'stack': 'dev', " REPO ", 'branch': 7}", "spec.branch", "string");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'shallow': 'yes'}", "spec.shallow");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'repoDir': '../etc'}", "dir", "..");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'repoDir': '/../etc'}", "dir", "..");
	/* Without projectRepo the Git fields would be ignored: refused, as the operator does. */
	refused("{'stack': 'dev', " FLUX ", 'gitAuthSecret': 'creds'}", "spec.gitAuthSecret", "projectRepo");
	refused("{'stack': 'dev', " FLUX ", 'gitAuth': {'accessToken': {'type': 'Secret', "
	    "'secret': {'name': 't', 'key': 'k'}}}}", "spec.gitAuth", "projectRepo");
}

#define SECRET_REF(n, k) "{'type': 'Secret', 'secret': {'name': '" n "', 'key': '" k "'}}"

static void git_auth_kinds(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'basicAuth': {"
	    "'userName': {'type': 'Literal', 'literal': {'value': 'ci'}}, 'password': " SECRET_REF("git", "pw") "}}}",
	    &s);
	assert_int_equal(s.git_auth.kind, STACK_GIT_BASIC);
	assert_int_equal(s.git_auth.n, 2);
	assert_int_equal(s.git_auth.v[0].kind, STACK_VAL_LITERAL);
	assert_string_equal(s.git_auth.v[0].literal, "ci");
	assert_int_equal(s.git_auth.v[1].kind, STACK_VAL_SECRET);
	assert_string_equal(s.git_auth.v[1].object, "git");
	assert_string_equal(s.git_auth.v[1].key, "pw");
	stack_spec_free(&s);

	/* The operator's order: SSH before a token before basic auth. */
	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {"
	    "'accessToken': " SECRET_REF("tok", "token") ", "
	    "'basicAuth': {'userName': " SECRET_REF("b", "u") ", 'password': " SECRET_REF("b", "p") "}, "
	    "'sshAuth': {'sshPrivateKey': " SECRET_REF("deploy-key", "id_ed25519") "}}}", &s);
	assert_int_equal(s.git_auth.kind, STACK_GIT_SSH);
	assert_int_equal(s.git_auth.n, 1);
	assert_string_equal(s.git_auth.v[0].object, "deploy-key");
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {"
	    "'basicAuth': {'userName': " SECRET_REF("b", "u") ", 'password': " SECRET_REF("b", "p") "}, "
	    "'accessToken': " SECRET_REF("tok", "token") "}}", &s);
	assert_int_equal(s.git_auth.kind, STACK_GIT_TOKEN);
	assert_string_equal(s.git_auth.v[0].key, "token");
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'sshAuth': {"
	    "'sshPrivateKey': " SECRET_REF("k", "id") ", 'password': " SECRET_REF("k", "pass") "}}}", &s);
	assert_int_equal(s.git_auth.n, 2);
	assert_string_equal(s.git_auth.v[1].key, "pass");
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'githubApp': {"
	    "'appID': {'type': 'Literal', 'literal': {'value': '123'}}, "
	    "'installationID': {'type': 'Literal', 'literal': {'value': '456'}}, "
	    "'privateKey': " SECRET_REF("app", "key.pem") "}}}", &s);
	assert_int_equal(s.git_auth.kind, STACK_GIT_APP);
	assert_int_equal(s.git_auth.n, 3);
	stack_spec_free(&s);

	/* gitAuthSecret is read as the operator reads it, and wins over gitAuth. */
	accepted("{'stack': 'dev', " REPO ", 'commit': '" SHA40 "', 'gitAuthSecret': 'git-credentials', "
	    "'gitAuth': {'accessToken': " SECRET_REF("tok", "token") "}}", &s);
	assert_int_equal(s.git_auth.kind, STACK_GIT_SECRET);
	assert_string_equal(s.git_auth.secret, "git-credentials");
	assert_int_equal(s.git_auth.n, 0);
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuthSecret': ''}", &s);
	assert_int_equal(s.git_auth.kind, STACK_GIT_NONE);
	stack_spec_free(&s);
}

static void git_auth_refusals(void **state)
{
	(void)state;
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {}}", "spec.gitAuth", "sshAuth");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': 'token'}", "spec.gitAuth", "object");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'basicAuth': {"
	    "'userName': " SECRET_REF("b", "u") "}}}", "spec.gitAuth.basicAuth.password", "required");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'sshAuth': {}}}",
	    "spec.gitAuth.sshAuth.sshPrivateKey");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'sshAuth': 'key'}}",
	    "spec.gitAuth.sshAuth", "object");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'sshAuth': {'sshPrivateKey': "
	    "{'type': 'Literal', 'literal': {'value': 'k'}}}}}", "spec.gitAuth.sshAuth.sshPrivateKey", "Secret",
	    "known_hosts");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'accessToken': "
	    "{'type': 'Env', 'env': {'name': 'TOKEN'}}}}", "spec.gitAuth.accessToken.type", "Env");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'accessToken': "
	    "{'type': 'Secret', 'secret': {'name': 't'}}}}", "spec.gitAuth.accessToken.secret");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuth': {'githubApp': {"
	    "'appID': " SECRET_REF("a", "id") ", 'installationID': " SECRET_REF("a", "inst") "}}}",
	    "spec.gitAuth.githubApp.privateKey");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuthSecret': '../x'}", "spec.gitAuthSecret");
	refused("{'stack': 'dev', " REPO ", 'branch': 'main', 'gitAuthSecret': 5}", "spec.gitAuthSecret");
}

/* ------------------------------------------------------------ the classic shape */

/* /work/shared/reference/classic-stack.yaml (deploy/samples/classic-stack.yaml) as the API server
 * hands it over. */
static void classic_manifest(void **state)
{
	const char *text =
	    "{\"apiVersion\": \"pulumi.com/v1alpha1\", \"kind\": \"Stack\","
	    " \"metadata\": {\"name\": \"production-network\", \"namespace\": \"default\"},"
	    " \"spec\": {"
	    "  \"programRef\": {\"repo\": \"git@github.com:acme/pulumi-network.git\", \"ref\": \"refs/tags/v2.1.0\"},"
	    "  \"cloud\": \"secretsmanager\","
	    "  \"config\": {\"region\": \"us-east-1\"},"
	    "  \"envs\": {"
	    "   \"AWS_ACCESS_KEY_ID\": {\"valueFrom\": {\"secretKeyRef\": {\"name\": \"aws-creds\", \"key\": \"access-key-id\"}}},"
	    "   \"AWS_SECRET_ACCESS_KEY\": {\"valueFrom\": {\"secretKeyRef\": {\"name\": \"aws-creds\", \"key\": \"secret-access-key\"}}}"
	    "  },"
	    "  \"destroyOnDelete\": true}}";
	cJSON *obj = cJSON_Parse(text);
	struct stack_spec s;
	struct err e;
	(void)state;

	assert_non_null(obj);
	if (stack_spec_parse(obj, &opts, &s, &e) != 0)
		fail_msg("the classic manifest was refused: %s", e.msg);
	assert_int_equal(s.source, STACK_SRC_PROGRAM);
	assert_string_equal(s.stack, "production-network");     /* no spec.stack: the object's name */
	assert_string_equal(s.prog_repo, "git@github.com:acme/pulumi-network.git");
	assert_string_equal(s.prog_ref, "refs/tags/v2.1.0");
	assert_string_equal(s.src_kind, "GitRepository");
	assert_string_equal(s.src_name, "production-network-program");
	assert_null(s.backend);
	assert_string_equal(s.cloud_ignored, "secretsmanager");
	assert_int_equal(s.n_config, 1);
	assert_string_equal(s.config[0].key, "region");
	assert_int_equal(s.config[0].v.kind, STACK_VAL_LITERAL);
	assert_string_equal(s.config[0].v.literal, "us-east-1");
	assert_int_equal(s.config[0].v.structured, 0);
	assert_int_equal(s.config[0].secret, 0);
	assert_int_equal(s.n_env, 2);
	assert_string_equal(s.env[0].name, "AWS_ACCESS_KEY_ID");
	assert_int_equal(s.env[0].v.kind, STACK_VAL_SECRET);
	assert_string_equal(s.env[0].v.object, "aws-creds");
	assert_string_equal(s.env[0].v.key, "access-key-id");
	assert_string_equal(s.env[1].name, "AWS_SECRET_ACCESS_KEY");
	assert_string_equal(s.env[1].v.key, "secret-access-key");
	assert_null(s.env[1].v.literal);
	assert_int_equal(s.destroy_on_finalize, 1);
	assert_int_equal(s.resync_ms, 60000);
	assert_int_equal(s.max_failures, 7);
	assert_int_equal(s.timeout_ms, 12345);
	stack_spec_free(&s);
	cJSON_Delete(obj);
}

static void cloud_and_backend(void **state)
{
	static const char *urls[] = { "s3://bucket/state", "gs://b", "azblob://c", "file:///var/state",
	    "https://api.pulumi.com" };
	struct stack_spec s;
	char spec[300];
	(void)state;

	for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		snprintf(spec, sizeof(spec), "{'stack': 'dev', " FLUX ", 'cloud': '%s'}", urls[i]);
		accepted(spec, &s);
		assert_string_equal(s.backend, urls[i]);
		assert_null(s.cloud_ignored);
		stack_spec_free(&s);
	}
	accepted("{'stack': 'dev', " FLUX ", 'backend': 's3://b', 'secretsProvider': 'awskms://alias/x', "
	    "'cloud': 'aws'}", &s);
	assert_string_equal(s.backend, "s3://b");
	assert_string_equal(s.secrets_provider, "awskms://alias/x");
	assert_string_equal(s.cloud_ignored, "aws");
	stack_spec_free(&s);
	/* destroyOnFinalize is the new name of destroyOnDelete. */
	accepted("{'stack': 'dev', " FLUX ", 'destroyOnFinalize': true}", &s);
	assert_int_equal(s.destroy_on_finalize, 1);
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " FLUX ", 'destroyOnFinalize': false, 'destroyOnDelete': false}", &s);
	assert_int_equal(s.destroy_on_finalize, 0);
	stack_spec_free(&s);
}

static void stack_name_required(void **state)
{
	(void)state;
	refused("{" FLUX "}", "spec.stack");
	refused("{'stack': '', " FLUX "}", "spec.stack");
	refused("{'stack': '', 'programRef': {'repo': 'https://x/y.git'}}", "spec.stack");
}

/* ------------------------------------------------------------ config and values */

static const struct stack_config *config_of(const struct stack_spec *s, const char *key)
{
	for (size_t i = 0; i < s->n_config; i++)
		if (strcmp(s->config[i].key, key) == 0)
			return &s->config[i];
	fail_msg("no config key %s", key);
	return NULL;
}

static void config_structured_values(void **state)
{
	struct stack_spec s;
	const struct stack_config *c;
	(void)state;

	accepted("{'stack': 'dev', " FLUX ", 'config': {'aws:region': 'us-east-1', 'n': 3, 'f': 1.5, "
	    "'on': true, 'off': false, 'tags': {'team': 'net', 'cost': [1, 2]}, 'zones': ['a', 'b'], "
	    "'quoted': '{\\'not\\': \\'json\\'}', 'empty': ''}}", &s);
	assert_int_equal(s.n_config, 9);
	c = config_of(&s, "aws:region");
	assert_string_equal(c->v.literal, "us-east-1");
	assert_int_equal(c->v.structured, 0);
	c = config_of(&s, "n");
	assert_string_equal(c->v.literal, "3");
	assert_int_equal(c->v.structured, 1);
	assert_string_equal(config_of(&s, "f")->v.literal, "1.5");
	c = config_of(&s, "on");
	assert_string_equal(c->v.literal, "true");
	assert_int_equal(c->v.structured, 1);
	assert_string_equal(config_of(&s, "off")->v.literal, "false");
	c = config_of(&s, "tags");
	assert_string_equal(c->v.literal, "{\"team\":\"net\",\"cost\":[1,2]}");
	assert_int_equal(c->v.structured, 1);
	assert_string_equal(config_of(&s, "zones")->v.literal, "[\"a\",\"b\"]");
	/* A string that looks like JSON is still a string. */
	c = config_of(&s, "quoted");
	assert_string_equal(c->v.literal, "{\"not\": \"json\"}");
	assert_int_equal(c->v.structured, 0);
	assert_string_equal(config_of(&s, "empty")->v.literal, "");
	for (size_t i = 0; i < s.n_config; i++) {
		assert_int_equal(s.config[i].v.kind, STACK_VAL_LITERAL);
		assert_int_equal(s.config[i].secret, 0);
	}
	stack_spec_free(&s);

	refused("{'stack': 'dev', " FLUX ", 'config': {'a': null}}", "spec.config.a");
	refused("{'stack': 'dev', " FLUX ", 'config': 'a=b'}", "spec.config");
	refused("{'stack': 'dev', " FLUX ", 'config': ['a']}", "spec.config");
}

static void config_refs_and_secret_refs(void **state)
{
	struct stack_spec s;
	const struct stack_config *c;
	(void)state;

	accepted("{'stack': 'dev', " FLUX ", "
	    "'configRef': {'size': {'name': 'sizes', 'key': 'web'}, 'tags': {'name': 'meta', 'key': 'tags', 'json': true}}, "
	    "'secretsRef': {'token': {'type': 'Secret', 'secret': {'name': 'api', 'key': 'token'}}, "
	    "  'pin': {'type': 'Literal', 'literal': {'value': '1234'}}}}", &s);
	assert_int_equal(s.n_config, 4);
	c = config_of(&s, "size");
	assert_int_equal(c->v.kind, STACK_VAL_CONFIGMAP);
	assert_string_equal(c->v.object, "sizes");
	assert_string_equal(c->v.key, "web");
	assert_int_equal(c->v.structured, 0);
	assert_int_equal(c->secret, 0);
	c = config_of(&s, "tags");
	assert_int_equal(c->v.kind, STACK_VAL_CONFIGMAP);
	assert_int_equal(c->v.structured, 1);
	c = config_of(&s, "token");
	assert_int_equal(c->v.kind, STACK_VAL_SECRET);
	assert_string_equal(c->v.object, "api");
	assert_string_equal(c->v.key, "token");
	assert_int_equal(c->secret, 1);
	c = config_of(&s, "pin");
	assert_int_equal(c->v.kind, STACK_VAL_LITERAL);
	assert_string_equal(c->v.literal, "1234");
	assert_int_equal(c->secret, 1);
	stack_spec_free(&s);

	refused("{'stack': 'dev', " FLUX ", 'configRef': {'size': {'name': 'sizes'}}}", "spec.configRef.size");
	refused("{'stack': 'dev', " FLUX ", 'configRef': {'size': {'key': 'k'}}}", "spec.configRef.size");
	refused("{'stack': 'dev', " FLUX ", 'configRef': {'size': {'name': '', 'key': 'k'}}}", "spec.configRef.size");
	refused("{'stack': 'dev', " FLUX ", 'configRef': {'size': {'name': 'c', 'key': 'k', 'namespace': 'other'}}}",
	    "spec.configRef.size.namespace", "cross-namespace");
	refused("{'stack': 'dev', " FLUX ", 'configRef': {'size': {'name': 'c', 'key': 'k', 'json': 'yes'}}}",
	    "spec.configRef.size");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'api', "
	    "'key': 'token', 'namespace': 'kube-system'}}}}", "spec.secretsRef.t.secret.namespace", "cross-namespace");
	refused("{'stack': 'dev', " FLUX ", 'envRefs': {'T': {'type': 'Secret', 'secret': {'name': 'api', "
	    "'key': 'token', 'namespace': 'app'}}}}", "spec.envRefs.T.secret.namespace", "cross-namespace");
	refused("{'stack': 'dev', " FLUX ", 'envRefs': {'T': {'type': 'Secret', 'secret': {'name': 'api', "
	    "'key': 'token', 'namespace': 7}}}}", "spec.envRefs.T.secret.namespace");
	/* The Stack's own namespace (apps), as the operator's manifests write it. */
	accepted("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'api', "
	    "'key': 'token', 'namespace': 'apps'}}}, 'envRefs': {'T': {'type': 'Secret', 'secret': "
	    "{'name': 'tok', 'key': 'k', 'namespace': 'apps'}}}, 'configRef': {'c': {'name': 'cm', 'key': 'k', "
	    "'namespace': 'apps'}}}", &s);
	assert_string_equal(config_of(&s, "t")->v.object, "api");
	assert_int_equal(config_of(&s, "t")->v.kind, STACK_VAL_SECRET);
	assert_string_equal(s.env[0].v.object, "tok");
	assert_string_equal(config_of(&s, "c")->v.object, "cm");
	stack_spec_free(&s);
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Secret', 'secret': {'name': 'api'}}}}",
	    "spec.secretsRef.t.secret");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Secret'}}}", "spec.secretsRef.t.secret");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Literal'}}}",
	    "spec.secretsRef.t.literal.value");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Literal', 'literal': {}}}}",
	    "spec.secretsRef.t.literal.value");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'secret': {'name': 'a', 'key': 'b'}}}}",
	    "spec.secretsRef.t.type");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Vault'}}}", "spec.secretsRef.t.type",
	    "Vault");
}

/* The operator's Env and FS references read a workspace pod's environment
 * or files; this controller runs no such pod. */
static void env_and_fs_refs_refused(void **state)
{
	(void)state;
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'Env', 'env': {'name': 'TOKEN'}}}}",
	    "spec.secretsRef.t.type", "Env", "Secret or Literal");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'t': {'type': 'FS', 'filesystem': {'path': '/x'}}}}",
	    "spec.secretsRef.t.type", "FS");
	refused("{'stack': 'dev', " FLUX ", 'envRefs': {'TOKEN': {'type': 'Env', 'env': {'name': 'T'}}}}",
	    "spec.envRefs.TOKEN.type", "Env");
	refused("{'stack': 'dev', " FLUX ", 'envRefs': {'KEY': {'type': 'FS', 'filesystem': {'path': '/k'}}}}",
	    "spec.envRefs.KEY.type", "FS");
}

/* Issue 21 review: in a Job's pod a Stack's variables come after the
 * controller's, and the last of a name wins. */
static void reserved_env_names_refused(void **state)
{
	(void)state;
	refused("{'stack': 'dev', " FLUX ", 'envRefs': {'PULUMI_CONTROLLER_UPDATE': {'type': 'Literal', "
	    "'literal': {'value': '{}'}}}}", "spec.envRefs.PULUMI_CONTROLLER_UPDATE", "reserved");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'KUBERNETES_SERVICE_HOST': {'value': 'evil'}}}",
	    "spec.envs.KUBERNETES_SERVICE_HOST", "reserved");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'HOME': {'value': '/'}}}", "spec.envs.HOME", "reserved");
}

static void operators_unserved_fields_are_refused_by_name(void **state)
{
	struct stack_spec s;
	(void)state;

	refused("{'stack': 'dev', " FLUX ", 'workspaceTemplate': {'spec': {'image': 'pulumi/pulumi'}}}",
	    "spec.workspaceTemplate", "not acted on");
	/* Empty, false or the operator's no-ops: nothing to act on. */
	accepted("{'stack': 'dev', " FLUX ", 'envSecrets': [], 'targetDependents': false, "
	    "'serviceAccountName': '', 'expectNoRefreshChanges': true, 'retryOnUpdateConflict': true, "
	    "'workspaceReclaimPolicy': 'Delete', 'updateTemplate': {'spec': {'ttlAfterCompleted': '1h'}}}", &s);
	stack_spec_free(&s);
}

static void env_refs_and_classic_envs(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', " FLUX ", "
	    "'envRefs': {'PULUMI_ACCESS_TOKEN': {'type': 'Secret', 'secret': {'name': 'pulumi', 'key': 'token'}}, "
	    "  'AWS_REGION': {'type': 'Literal', 'literal': {'value': 'eu-west-1'}}}, "
	    "'envs': {'LOG': {'value': 'debug'}, "
	    "  'CFG': {'valueFrom': {'configMapKeyRef': {'name': 'settings', 'key': 'cfg'}}}}}", &s);
	assert_int_equal(s.n_env, 4);
	assert_string_equal(s.env[0].name, "PULUMI_ACCESS_TOKEN");
	assert_int_equal(s.env[0].v.kind, STACK_VAL_SECRET);
	assert_string_equal(s.env[0].v.object, "pulumi");
	assert_string_equal(s.env[1].name, "AWS_REGION");
	assert_int_equal(s.env[1].v.kind, STACK_VAL_LITERAL);
	assert_string_equal(s.env[1].v.literal, "eu-west-1");
	assert_string_equal(s.env[2].name, "LOG");
	assert_string_equal(s.env[2].v.literal, "debug");
	assert_string_equal(s.env[3].name, "CFG");
	assert_int_equal(s.env[3].v.kind, STACK_VAL_CONFIGMAP);
	assert_string_equal(s.env[3].v.object, "settings");
	assert_string_equal(s.env[3].v.key, "cfg");
	stack_spec_free(&s);

	/* The operator's deprecated list of ConfigMap names, told apart by type. */
	accepted("{'stack': 'dev', " FLUX ", 'envs': ['settings', 'more'], "
	    "'envRefs': {'A': {'type': 'Literal', 'literal': {'value': 'x'}}}}", &s);
	assert_int_equal(s.n_env, 1);
	assert_int_equal(s.n_env_spec, 1);
	assert_int_equal(s.n_env_from, 2);
	assert_int_equal(s.env_from[0].kind, STACK_VAL_CONFIGMAP);
	assert_string_equal(s.env_from[0].object, "settings");
	assert_string_equal(s.env_from[1].object, "more");
	stack_spec_free(&s);
	/* Named again, an object counts where it is named last (the kubelet's order). */
	accepted("{'stack': 'dev', " FLUX ", 'envs': ['a', 'b', 'a', 'a']}", &s);
	assert_int_equal(s.n_env_from, 2);
	assert_string_equal(s.env_from[0].object, "b");
	assert_string_equal(s.env_from[1].object, "a");
	stack_spec_free(&s);
	{
		char big[1200] = "{'stack': 'dev', " FLUX ", 'envs': [";
		for (int i = 0; i <= STACK_ENV_FROM_MAX; i++)
			snprintf(big + strlen(big), sizeof(big) - strlen(big), "%s'cm%d'", i ? ", " : "", i);
		strcat(big, "]}");
		refused(big, "spec.envs", "more than 32");
	}
	refused("{'stack': 'dev', " FLUX ", 'envs': ['settings', 3]}", "spec.envs[1]", "ConfigMap");
	refused("{'stack': 'dev', " FLUX ", 'envs': ['']}", "spec.envs[0]");
	refused("{'stack': 'dev', " FLUX ", 'envs': ['other/cm']}", "spec.envs[0]", "namespace");
	refused("{'stack': 'dev', " FLUX ", 'envs': ['Not_A_Name']}", "spec.envs[0]", "namespace");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'A': {}}}", "spec.envs.A");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'A': {'valueFrom': {'secretKeyRef': {'name': 's'}}}}}",
	    "spec.envs.A.valueFrom.secretKeyRef");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'A': {'valueFrom': {'configMapKeyRef': {'name': 'c', "
	    "'key': 'k', 'namespace': 'x'}}}}}", "spec.envs.A.valueFrom.configMapKeyRef.namespace");
	refused("{'stack': 'dev', " FLUX ", 'envRefs': {'A=B': {'type': 'Literal', 'literal': {'value': 'x'}}}}",
	    "A=B", "environment variable");
	refused("{'stack': 'dev', " FLUX ", 'envRefs': {'': {'type': 'Literal', 'literal': {'value': 'x'}}}}",
	    "environment variable");
}

/* The operator's envSecrets, accessTokenSecret and inline secrets. */
static void operators_secret_inputs(void **state)
{
	struct stack_spec s;
	const struct stack_config *c;
	(void)state;

	accepted("{'stack': 'dev', " FLUX ", 'envs': ['settings'], 'envSecrets': ['aws', 'gcp'], "
	    "'accessTokenSecret': 'pulumi-api', 'secrets': {'dbPassword': 'hunter2', 'aws:secretKey': 'k'}}", &s);
	assert_int_equal(s.n_env_from, 3);
	assert_int_equal(s.env_from[0].kind, STACK_VAL_CONFIGMAP);
	assert_int_equal(s.env_from[1].kind, STACK_VAL_SECRET);
	assert_string_equal(s.env_from[1].object, "aws");
	assert_string_equal(s.env_from[2].object, "gcp");
	assert_string_equal(s.env_from[2].field, "spec.envSecrets");
	assert_int_equal(s.n_env_spec, 1);
	assert_string_equal(s.env[0].name, "PULUMI_ACCESS_TOKEN");
	assert_int_equal(s.env[0].v.kind, STACK_VAL_SECRET);
	assert_string_equal(s.env[0].v.object, "pulumi-api");
	assert_string_equal(s.env[0].v.key, "accessToken");
	c = config_of(&s, "dbPassword");
	assert_int_equal(c->v.kind, STACK_VAL_LITERAL);
	assert_string_equal(c->v.literal, "hunter2");
	assert_int_equal(c->secret, 1);
	assert_int_equal(config_of(&s, "aws:secretKey")->secret, 1);
	stack_spec_free(&s);

	refused("{'stack': 'dev', " FLUX ", 'envSecrets': 'aws'}", "spec.envSecrets", "list of Secret names");
	refused("{'stack': 'dev', " FLUX ", 'envSecrets': ['aws', '']}", "spec.envSecrets[1]");
	refused("{'stack': 'dev', " FLUX ", 'accessTokenSecret': 5}", "spec.accessTokenSecret");
	refused("{'stack': 'dev', " FLUX ", 'accessTokenSecret': '../tok'}", "spec.accessTokenSecret");
	refused("{'stack': 'dev', " FLUX ", 'envSecrets': ['a b']}", "spec.envSecrets[0]");
	refused("{'stack': 'dev', " FLUX ", 'accessTokenSecret': 'tok', 'envRefs': {'PULUMI_ACCESS_TOKEN': "
	    "{'type': 'Literal', 'literal': {'value': 'x'}}}}", "spec.accessTokenSecret.PULUMI_ACCESS_TOKEN", "twice");
	refused("{'stack': 'dev', " FLUX ", 'secrets': ['a']}", "spec.secrets", "map");
	refused("{'stack': 'dev', " FLUX ", 'secrets': {'a': 1}}", "spec.secrets.a", "string");
	refused("{'stack': 'dev', " FLUX ", 'secrets': {'a': 'x'}, 'config': {'a': 'y'}}", "config key a", "twice");
	/* Empty: nothing set. */
	accepted("{'stack': 'dev', " FLUX ", 'envSecrets': [], 'accessTokenSecret': '', 'secrets': {}}", &s);
	assert_int_equal(s.n_env, 0);
	assert_int_equal(s.n_config, 0);
	assert_int_equal(s.n_env_from, 0);
	stack_spec_free(&s);
}

/* targetDependents, runProgram, useLocalStackOnly and environment. */
static void operators_operation_flags(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', " FLUX ", 'targets': ['urn:a'], 'targetDependents': true, 'runProgram': true, "
	    "'useLocalStackOnly': true, 'environment': ['proj/base', 'prod']}", &s);
	assert_int_equal(s.target_dependents, 1);
	assert_int_equal(s.run_program, 1);
	assert_int_equal(s.local_stack_only, 1);
	assert_int_equal(s.n_environments, 2);
	assert_string_equal(s.environments[0], "proj/base");
	assert_string_equal(s.environments[1], "prod");
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " FLUX ", 'backend': 'https://api.pulumi.com', 'environment': ['e']}", &s);
	assert_int_equal(s.n_environments, 1);
	stack_spec_free(&s);
	/* Only Pulumi Cloud has environments; the scheme is named, never the URL. */
	refused("{'stack': 'dev', " FLUX ", 'backend': 's3://bucket?token=t0ps3cret', 'environment': ['e']}",
	    "spec.environment", "Pulumi Cloud", "s3://");
	refused("{'stack': 'dev', " FLUX ", 'cloud': 'file:///state', 'environment': ['e']}", "spec.environment");
	refused("{'stack': 'dev', " FLUX ", 'environment': ['--yes']}", "spec.environment[0]");
	refused("{'stack': 'dev', " FLUX ", 'environment': 'e'}", "spec.environment", "list");
	/* One `config env add` each, in every update: bounded. */
	refused("{'stack': 'dev', " FLUX ", 'environment': ['e0', 'e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7', 'e8', 'e9', 'e10', 'e11', 'e12', 'e13', 'e14', 'e15', 'e16', 'e17', 'e18', 'e19', 'e20', 'e21', 'e22', 'e23', 'e24', 'e25', 'e26', 'e27', 'e28', 'e29', 'e30', 'e31', 'e32']}",
	    "spec.environment", "more than 32");
	refused("{'stack': 'dev', " FLUX ", 'runProgram': 'yes'}", "spec.runProgram", "true or false");
	refused("{'stack': 'dev', " FLUX ", 'useLocalStackOnly': 1}", "spec.useLocalStackOnly");
	accepted("{'stack': 'dev', " FLUX ", 'backend': 'file:///x', 'environment': []}", &s);
	assert_int_equal(s.n_environments, 0);
	stack_spec_free(&s);
}

static void key_set_twice(void **state)
{
	(void)state;
	refused("{'stack': 'dev', " FLUX ", 'config': {'a': '1'}, 'configRef': {'a': {'name': 'c', 'key': 'k'}}}",
	    "config key a", "twice");
	refused("{'stack': 'dev', " FLUX ", 'config': {'a': '1'}, "
	    "'secretsRef': {'a': {'type': 'Literal', 'literal': {'value': 'x'}}}}", "config key a", "twice");
	refused("{'stack': 'dev', " FLUX ", 'configRef': {'a': {'name': 'c', 'key': 'k'}}, "
	    "'secretsRef': {'a': {'type': 'Secret', 'secret': {'name': 's', 'key': 'k'}}}}", "config key a");
	/* The same key twice in one JSON object (cJSON keeps both). */
	refused("{'stack': 'dev', " FLUX ", 'config': {'a': '1', 'a': '2'}}", "config key a", "twice");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'A': {'value': '1'}}, "
	    "'envRefs': {'A': {'type': 'Literal', 'literal': {'value': '2'}}}}", "A");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'A': {'value': '1'}, 'A': {'value': '2'}}}", "A");
}

/* ------------------------------------------------------------ durations and bounds */

static long resync_of(const char *extra)
{
	struct stack_spec s;
	char spec[400];
	long ms;

	snprintf(spec, sizeof(spec), "{'stack': 'dev', " FLUX "%s%s}", extra[0] ? ", " : "", extra);
	accepted(spec, &s);
	ms = s.resync_ms;
	stack_spec_free(&s);
	return ms;
}

static void resync_period(void **state)
{
	(void)state;
	assert_int_equal(resync_of(""), 60000);
	assert_int_equal(resync_of("'resyncFrequencySeconds': 120"), 120000);
	assert_int_equal(resync_of("'resyncFrequencySeconds': 10"), 60000);    /* at least 60 s */
	assert_int_equal(resync_of("'resyncFrequencySeconds': 0"), 60000);
	assert_int_equal(resync_of("'interval': '10m'"), 600000);
	assert_int_equal(resync_of("'interval': '1h30m'"), 5400000);
	assert_int_equal(resync_of("'interval': '30s'"), 60000);
	assert_int_equal(resync_of("'interval': '500ms'"), 60000);
	/* interval is the alias that wins when both are written. */
	assert_int_equal(resync_of("'resyncFrequencySeconds': 120, 'interval': '5m'"), 300000);

	refused("{'stack': 'dev', " FLUX ", 'resyncFrequencySeconds': -1}", "spec.resyncFrequencySeconds");
	refused("{'stack': 'dev', " FLUX ", 'resyncFrequencySeconds': '60'}", "spec.resyncFrequencySeconds");
	refused("{'stack': 'dev', " FLUX ", 'resyncFrequencySeconds': 1e300}", "spec.resyncFrequencySeconds");
}

static void bad_durations_refused(void **state)
{
	static const char *bad[] = { "5", "", "5x", "-5m", "m", "0s", "0", "1d", "5m-", "1e400s", "nan",
	    "99999999999999999999999h", "1..s", " 5m" };
	char spec[300];
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(spec, sizeof(spec), "{'stack': 'dev', " FLUX ", 'interval': '%s'}", bad[i]);
		refused(spec, "spec.interval", "duration");
		snprintf(spec, sizeof(spec), "{'stack': 'dev', " FLUX ", 'timeout': '%s'}", bad[i]);
		refused(spec, "spec.timeout");
	}
	refused("{'stack': 'dev', " FLUX ", 'timeout': 600}", "spec.timeout");
	refused("{'stack': 'dev', " FLUX ", 'interval': 600}", "spec.interval");
}

static void timeout_and_backoff(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', " FLUX "}", &s);
	assert_int_equal(s.timeout_ms, 12345);               /* --update-timeout */
	assert_int_equal(s.retry_max_ms, 86400L * 1000);
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " FLUX ", 'timeout': '1h', 'retryMaxBackoffDurationSeconds': 300}", &s);
	assert_int_equal(s.timeout_ms, 3600000);
	assert_int_equal(s.retry_max_ms, 300000);
	stack_spec_free(&s);
	refused("{'stack': 'dev', " FLUX ", 'retryMaxBackoffDurationSeconds': '5m'}",
	    "spec.retryMaxBackoffDurationSeconds");
	refused("{'stack': 'dev', " FLUX ", 'retryMaxBackoffDurationSeconds': -5}",
	    "spec.retryMaxBackoffDurationSeconds");
}

static int max_failures_of(const char *value)
{
	struct stack_spec s;
	char spec[300];
	int n;

	snprintf(spec, sizeof(spec), "{'stack': 'dev', " FLUX ", 'maxUpdateFailures': %s}", value);
	accepted(spec, &s);
	n = s.max_failures;
	stack_spec_free(&s);
	return n;
}

static void max_update_failures_bounds(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', " FLUX "}", &s);
	assert_int_equal(s.max_failures, 7);                 /* --max-update-failures */
	stack_spec_free(&s);
	assert_int_equal(max_failures_of("null"), 7);
	assert_int_equal(max_failures_of("1"), 1);
	assert_int_equal(max_failures_of("1000"), 1000);
	refused("{'stack': 'dev', " FLUX ", 'maxUpdateFailures': 0}", "spec.maxUpdateFailures");
	refused("{'stack': 'dev', " FLUX ", 'maxUpdateFailures': -3}", "spec.maxUpdateFailures");
	refused("{'stack': 'dev', " FLUX ", 'maxUpdateFailures': 1001}", "spec.maxUpdateFailures");
	refused("{'stack': 'dev', " FLUX ", 'maxUpdateFailures': 1e300}", "spec.maxUpdateFailures");
	refused("{'stack': 'dev', " FLUX ", 'maxUpdateFailures': '5'}", "spec.maxUpdateFailures");
}

/* ------------------------------------------------------------ dir */

static void dir_stays_inside_the_artifact(void **state)
{
	static const char *bad[] = { "/etc", "/", "..", "../x", "a/../../b", "a/..", "./../x" };
	static const char *where[] = {
	    "'fluxSource': {'sourceRef': {'kind': 'Bucket', 'name': 'b'}, 'dir': '%s'}",
	    "'ociSource': {'url': 'oci://r.io/a', 'dir': '%s'}",
	    "'programRef': {'repo': 'https://x/y.git', 'dir': '%s'}",
	};
	struct stack_spec s;
	char src[200], spec[400];
	(void)state;

	for (size_t w = 0; w < 3; w++)
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(src, sizeof(src), where[w], bad[i]);
			snprintf(spec, sizeof(spec), "{'stack': 'dev', %s}", src);
			refused(spec, "dir", "relative");
		}
	accepted("{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'Bucket', 'name': 'b'}, "
	    "'dir': './stacks/web'}}", &s);
	assert_string_equal(s.dir, "./stacks/web");
	stack_spec_free(&s);
	/* Names that merely start or end with dots are ordinary names. */
	accepted("{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'Bucket', 'name': 'b'}, "
	    "'dir': '..x/y../.z'}}", &s);
	assert_string_equal(s.dir, "..x/y../.z");
	stack_spec_free(&s);
}

/* ------------------------------------------------------------ hostile types */

/* Every field with a JSON type it must not have: refused with the field
 * named, never a crash or a silently different meaning. */
static void wrong_types_name_the_field(void **state)
{
	static const struct { const char *spec, *field; } cases[] = {
		{ "{'stack': 5, " FLUX "}", "spec.stack" },
		{ "{'stack': ['dev'], " FLUX "}", "spec.stack" },
		{ "{'stack': 'dev', " FLUX ", 'backend': 5}", "spec.backend" },
		{ "{'stack': 'dev', " FLUX ", 'cloud': ['s3://x']}", "spec.cloud" },
		{ "{'stack': 'dev', " FLUX ", 'secretsProvider': {}}", "spec.secretsProvider" },
		{ "{'stack': 'dev', " FLUX ", 'refresh': 'yes'}", "spec.refresh" },
		{ "{'stack': 'dev', " FLUX ", 'preview': 1}", "spec.preview" },
		{ "{'stack': 'dev', " FLUX ", 'suspend': 'true'}", "spec.suspend" },
		{ "{'stack': 'dev', " FLUX ", 'destroyOnFinalize': 'true'}", "spec.destroyOnFinalize" },
		{ "{'stack': 'dev', " FLUX ", 'destroyOnDelete': 0}", "spec.destroyOnDelete" },
		{ "{'stack': 'dev', " FLUX ", 'continueResyncOnCommitMatch': []}", "spec.continueResyncOnCommitMatch" },
		{ "{'stack': 'dev', " FLUX ", 'targets': 'urn:pulumi:dev::p::t::n'}", "spec.targets" },
		{ "{'stack': 'dev', " FLUX ", 'targets': ['urn:a', 5]}", "spec.targets[1]" },
		{ "{'stack': 'dev', " FLUX ", 'targets': ['']}", "spec.targets[0]" },
		{ "{'stack': 'dev', " FLUX ", 'policyPacks': {'a': 'b'}}", "spec.policyPacks" },
		{ "{'stack': 'dev', " FLUX ", 'policyPacks': [null]}", "spec.policyPacks[0]" },
		{ "{'stack': 'dev', " FLUX ", 'resyncFrequencySeconds': true}", "spec.resyncFrequencySeconds" },
		{ "{'stack': 'dev', " FLUX ", 'retryMaxBackoffDurationSeconds': {}}", "spec.retryMaxBackoffDurationSeconds" },
		{ "{'stack': 'dev', " FLUX ", 'timeout': ['1h']}", "spec.timeout" },
		{ "{'stack': 'dev', " FLUX ", 'interval': false}", "spec.interval" },
		{ "{'stack': 'dev', " FLUX ", 'maxUpdateFailures': [5]}", "spec.maxUpdateFailures" },
		{ "{'stack': 'dev', " FLUX ", 'config': 5}", "spec.config" },
		{ "{'stack': 'dev', " FLUX ", 'configRef': 'a'}", "spec.configRef" },
		{ "{'stack': 'dev', " FLUX ", 'configRef': {'k': 'cm/key'}}", "spec.configRef.k" },
		{ "{'stack': 'dev', " FLUX ", 'configRef': {'k': {'name': 5, 'key': 'x'}}}", "spec.configRef.k.name" },
		{ "{'stack': 'dev', " FLUX ", 'configRef': {'k': {'name': 'c', 'key': []}}}", "spec.configRef.k.key" },
		{ "{'stack': 'dev', " FLUX ", 'secretsRef': ['a']}", "spec.secretsRef" },
		{ "{'stack': 'dev', " FLUX ", 'secretsRef': {'k': 'secret'}}", "spec.secretsRef.k" },
		{ "{'stack': 'dev', " FLUX ", 'secretsRef': {'k': {'type': 5}}}", "spec.secretsRef.k.type" },
		{ "{'stack': 'dev', " FLUX ", 'secretsRef': {'k': {'type': 'Secret', 'secret': 'api'}}}", "spec.secretsRef.k.secret" },
		{ "{'stack': 'dev', " FLUX ", 'secretsRef': {'k': {'type': 'Literal', 'literal': 'v'}}}", "spec.secretsRef.k.literal.value" },
		{ "{'stack': 'dev', " FLUX ", 'secretsRef': {'k': {'type': 'Literal', 'literal': {'value': 5}}}}", "spec.secretsRef.k.literal.value" },
		{ "{'stack': 'dev', " FLUX ", 'envRefs': 'A=b'}", "spec.envRefs" },
		{ "{'stack': 'dev', " FLUX ", 'envRefs': {'A': null}}", "spec.envRefs.A" },
		{ "{'stack': 'dev', " FLUX ", 'envs': 'A=b'}", "spec.envs" },
		{ "{'stack': 'dev', " FLUX ", 'envs': {'A': 'b'}}", "spec.envs.A" },
		{ "{'stack': 'dev', " FLUX ", 'envs': {'A': {'value': 5}}}", "spec.envs.A" },
		{ "{'stack': 'dev', " FLUX ", 'envs': {'A': {'valueFrom': {'secretKeyRef': 'x'}}}}", "spec.envs.A.valueFrom.secretKeyRef" },
		{ "{'stack': 'dev', 'fluxSource': {'sourceRef': 'GitRepository/x'}}", "spec.fluxSource.sourceRef" },
		{ "{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 5, 'name': 'x'}}}", "spec.fluxSource.sourceRef.kind" },
		{ "{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'Bucket', 'name': {}}}}", "spec.fluxSource.sourceRef.name" },
		{ "{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'Bucket', 'name': 'b'}, 'dir': 5}}", "spec.fluxSource.dir" },
		{ "{'stack': 'dev', 'ociSource': {'url': 5}}", "spec.ociSource.url" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'tag': 1}}}", "spec.ociSource.ref.tag" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'digest': []}}}", "spec.ociSource.ref.digest" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'semver': 1}}}", "spec.ociSource.ref.semver" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'layerSelector': {'mediaType': 1}}}", "spec.ociSource.layerSelector.mediaType" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'secretRef': {'name': 1}}}", "spec.ociSource.secretRef.name" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'certSecretRef': {'name': 1}}}", "spec.ociSource.certSecretRef.name" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'insecure': 'true'}}", "spec.ociSource.insecure" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'interval': 300}}", "spec.ociSource.interval" },
		{ "{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'dir': false}}", "spec.ociSource.dir" },
		{ "{'stack': 'dev', 'programRef': {'repo': 5}}", "spec.programRef.repo" },
		{ "{'stack': 'dev', 'programRef': {'repo': 'https://x/y.git', 'ref': 5}}", "spec.programRef.ref" },
		{ "{'stack': 'dev', 'programRef': {'repo': 'https://x/y.git', 'dir': {}}}", "spec.programRef.dir" },
		{ "{'stack': 'dev', 'fluxSource': 'GitRepository/x'}", "fluxSource" },
		{ "{'stack': 'dev', 'ociSource': 'oci://r.io/a'}", "ociSource" },
		{ "{'stack': 'dev', 'programRef': 'https://x/y.git'}", "programRef" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		refused(cases[i].spec, cases[i].field);
}

static void not_a_spec(void **state)
{
	const char *texts[] = {
	    "{'metadata': {'name': 'web'}}",
	    "{'metadata': {'name': 'web'}, 'spec': null}",
	    "{'metadata': {'name': 'web'}, 'spec': 'stack: dev'}",
	    "{'metadata': {'name': 'web'}, 'spec': [1, 2]}",
	    "{'metadata': {'name': 'web'}, 'spec': 5}",
	    "[]",
	    "null",
	};
	struct stack_spec s;
	struct err e;
	char buf[200];
	(void)state;

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		cJSON *obj;
		snprintf(buf, sizeof(buf), "%s", texts[i]);
		for (char *c = buf; *c; c++)
			if (*c == '\'')
				*c = '"';
		obj = cJSON_Parse(buf);
		assert_non_null(obj);
		assert_int_equal(stack_spec_parse(obj, &opts, &s, &e), -1);
		assert_int_equal(e.code, ERR_INVALID);
		assert_non_null(strstr(e.msg, "spec"));
		stack_spec_free(&s);
		cJSON_Delete(obj);
	}
	assert_int_equal(stack_spec_parse(NULL, &opts, &s, &e), -1);
	stack_spec_free(&s);
}

/* Long keys and values do not overflow the field-name buffers; the message
 * is cut, not the stack. */
static void long_names_are_cut_not_overflowed(void **state)
{
	size_t n = 20000;
	char *key = malloc(n + 1), *spec = malloc(2 * n + 400);
	(void)state;

	assert_non_null(key);
	assert_non_null(spec);
	memset(key, 'k', n);
	key[n] = '\0';
	sprintf(spec, "{'stack': 'dev', " FLUX ", 'configRef': {'%s': {'name': 5, 'key': 'x'}}}", key);
	refused(spec, "spec.configRef.kkkk");
	sprintf(spec, "{'stack': 'dev', " FLUX ", 'envs': {'%s': {'valueFrom': {'secretKeyRef': {'name': 's'}}}}}", key);
	refused(spec, "spec.envs.kkkk");
	sprintf(spec, "{'stack': 'dev', " FLUX ", 'secretsRef': {'%s': {'type': 'FS'}}}", key);
	refused(spec, "spec.secretsRef.kkkk");
	sprintf(spec, "{'stack': 'dev', 'fluxSource': {'sourceRef': {'kind': 'Bucket', 'name': 'b'}, 'dir': '../%s'}}", key);
	refused(spec, "dir");
	free(key);
	free(spec);
}

/* ------------------------------------------------------------ freeing */

/* Every field set at once: stack_spec_free releases all of it (ASan's
 * leak check at exit), and a freed spec can be freed again. */
static void free_releases_everything(void **state)
{
	struct stack_spec s;
	(void)state;

	accepted("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'ref': {'semver': '1.x'}, "
	    "'layerSelector': {'mediaType': 'm'}, 'secretRef': {'name': 's'}, 'certSecretRef': {'name': 'c'}, "
	    "'dir': 'd'}, 'backend': 's3://b', 'cloud': 'x', 'secretsProvider': 'passphrase', "
	    "'config': {'a': 1, 'b': 'two'}, 'configRef': {'c': {'name': 'cm', 'key': 'k', 'json': true}}, "
	    "'secretsRef': {'d': {'type': 'Secret', 'secret': {'name': 's', 'key': 'k'}}, "
	    "  'e': {'type': 'Literal', 'literal': {'value': 'v'}}}, "
	    "'envRefs': {'F': {'type': 'Literal', 'literal': {'value': 'v'}}}, "
	    "'envs': {'G': {'value': 'g'}, 'H': {'valueFrom': {'secretKeyRef': {'name': 's', 'key': 'k'}}}}, "
	    "'refresh': true, 'preview': true, 'suspend': false, 'destroyOnFinalize': true, "
	    "'continueResyncOnCommitMatch': true, 'targets': ['urn:a', 'urn:b'], 'policyPacks': ['p'], "
	    "'resyncFrequencySeconds': 300, 'retryMaxBackoffDurationSeconds': 600, 'timeout': '10m', "
	    "'maxUpdateFailures': 3}", &s);
	assert_int_equal(s.n_config, 5);
	assert_int_equal(s.n_env, 3);
	assert_int_equal(s.n_targets, 2);
	assert_string_equal(s.targets[1], "urn:b");
	assert_int_equal(s.n_policy_packs, 1);
	assert_int_equal(s.refresh, 1);
	assert_int_equal(s.preview, 1);
	assert_int_equal(s.continue_resync, 1);
	assert_int_equal(s.resync_ms, 300000);
	assert_int_equal(s.max_failures, 3);
	stack_spec_free(&s);
	assert_null(s.stack);
	assert_int_equal(s.n_config, 0);
	stack_spec_free(&s);
}

/* A refusal late in the spec (after every list and map was filled) leaves
 * nothing behind once freed. */
static void late_refusal_frees_what_was_parsed(void **state)
{
	(void)state;
	refused("{'stack': 'dev', 'ociSource': {'url': 'oci://r.io/a', 'secretRef': {'name': 's'}, 'dir': '../x'}, "
	    "'backend': 's3://b', 'cloud': 'x', 'secretsProvider': 'p', 'config': {'a': [1]}, "
	    "'configRef': {'c': {'name': 'cm', 'key': 'k'}}, "
	    "'envRefs': {'F': {'type': 'Literal', 'literal': {'value': 'v'}}}, 'envs': {'G': {'value': 'g'}}, "
	    "'targets': ['urn:a'], 'policyPacks': ['p']}", "dir");
	refused("{'stack': 'dev', " FLUX ", 'targets': ['urn:a', 'urn:b', 7]}", "spec.targets[2]");
	refused("{'stack': 'dev', " FLUX ", 'config': {'a': 'x'}, 'secretsProvider': 5, 'cloud': 'y'}",
	    "spec.secretsProvider");
	refused("{'stack': 'dev', " FLUX ", 'config': {'a': 'x', 'b': null}}", "spec.config.b");
	refused("{'stack': 'dev', " FLUX ", 'envs': {'G': {'value': 'g'}, 'H': {}}}", "spec.envs.H");
	refused("{'stack': 'dev', " FLUX ", 'secretsRef': {'a': {'type': 'Secret', 'secret': {'name': 's', 'key': 1}}}}",
	    "spec.secretsRef.a.secret.key");
}

/* ------------------------------------------------------------ safety (issue 14) */

static void approval_fields(void **state)
{
	struct stack_spec s;

	(void)state;
	accepted("{'stack': 'dev', " FLUX "}", &s);
	assert_false(s.approval_manual);
	assert_null(s.approved_plan);
	assert_false(s.continue_approval);
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " FLUX ", 'approval': 'Manual', 'approvedPlan': 'abc', 'continue': true}", &s);
	assert_true(s.approval_manual);
	assert_string_equal(s.approved_plan, "abc");
	assert_true(s.continue_approval);
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " FLUX ", 'approval': 'Auto'}", &s);
	assert_false(s.approval_manual);
	stack_spec_free(&s);
	refused("{'stack': 'dev', " FLUX ", 'approval': 'manual'}", "spec.approval", "Auto or Manual");
	refused("{'stack': 'dev', " FLUX ", 'approval': true}", "spec.approval");
	refused("{'stack': 'dev', " FLUX ", 'approvedPlan': 12}", "spec.approvedPlan");
	refused("{'stack': 'dev', " FLUX ", 'continue': 'yes'}", "spec.continue");
}

static void drift_detection(void **state)
{
	struct stack_spec s;

	(void)state;
	accepted("{'stack': 'dev', " FLUX ", 'driftDetection': {'interval': '10m', 'remediate': true}}", &s);
	assert_int_equal(s.drift_interval_ms, 600000);
	assert_true(s.drift_remediate);
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " FLUX ", 'driftDetection': {'interval': '1ms'}}", &s);
	assert_int_equal(s.drift_interval_ms, 1000);   /* raised to the minimum */
	assert_false(s.drift_remediate);
	stack_spec_free(&s);
	accepted("{'stack': 'dev', " FLUX ", 'driftDetection': null}", &s);
	assert_int_equal(s.drift_interval_ms, 0);
	stack_spec_free(&s);
	refused("{'stack': 'dev', " FLUX ", 'driftDetection': {}}", "spec.driftDetection.interval", "required");
	refused("{'stack': 'dev', " FLUX ", 'driftDetection': {'interval': 'soon'}}", "spec.driftDetection.interval");
	refused("{'stack': 'dev', " FLUX ", 'driftDetection': {'interval': '1m', 'remediate': 1}}",
	    "spec.driftDetection.remediate");
	refused("{'stack': 'dev', " FLUX ", 'driftDetection': '10m'}", "spec.driftDetection");
}

static void prerequisites_and_depends_on(void **state)
{
	struct stack_spec s;

	(void)state;
	accepted("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'net', 'requirement': "
	    "{'succeededWithinDuration': '1h'}}, {'name': 'db'}], 'dependsOn': [{'name': 'dns', "
	    "'namespace': 'infra'}]}", &s);
	assert_int_equal(s.n_prereqs, 3);
	assert_string_equal(s.prereqs[0].name, "net");
	assert_int_equal(s.prereqs[0].within_ms, 3600000);
	assert_null(s.prereqs[0].namespace);
	assert_string_equal(s.prereqs[1].name, "db");
	assert_int_equal(s.prereqs[1].within_ms, 0);
	assert_string_equal(s.prereqs[2].name, "dns");
	assert_string_equal(s.prereqs[2].namespace, "infra");
	stack_spec_free(&s);
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': {'name': 'x'}}", "spec.prerequisites", "list");
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': ['net']}", "spec.prerequisites[0]", "object");
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': [{}]}", "spec.prerequisites[0].name");
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'a/b'}]}", "spec.prerequisites[0].name");
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'Net'}]}", "spec.prerequisites[0].name");
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'a', 'requirement': "
	    "{'succeededWithinDuration': 'x'}}]}", "spec.prerequisites[0].requirement.succeededWithinDuration");
	/* Below a minute the prerequisite would be updated again and again. */
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'a', 'requirement': "
	    "{'succeededWithinDuration': '1ms'}}]}", "spec.prerequisites[0].requirement.succeededWithinDuration",
	    "at least 1m");
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'a', 'requirement': "
	    "{'succeededWithinDuration': '59s'}}]}", "spec.prerequisites[0].requirement.succeededWithinDuration");
	accepted("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'a', 'requirement': "
	    "{'succeededWithinDuration': '1m'}}]}", &s);
	assert_int_equal(s.prereqs[0].within_ms, 60000);
	stack_spec_free(&s);
	refused("{'stack': 'dev', " FLUX ", 'prerequisites': [{'name': 'a', 'requirement': 3}]}",
	    "spec.prerequisites[0].requirement");
	refused("{'stack': 'dev', " FLUX ", 'dependsOn': [{'name': 'a'}, {'name': 'b', 'namespace': '../x'}]}",
	    "spec.dependsOn[1].namespace");
	refused("{'stack': 'dev', " FLUX ", 'dependsOn': [{'name': 7}]}", "spec.dependsOn[0].name");
}

static void policy_packs_stay_inside_the_artifact(void **state)
{
	struct stack_spec s;

	(void)state;
	accepted("{'stack': 'dev', " FLUX ", 'policyPacks': ['policies/base', '..x/y']}", &s);
	assert_int_equal(s.n_policy_packs, 2);
	stack_spec_free(&s);
	refused("{'stack': 'dev', " FLUX ", 'policyPacks': ['/etc']}", "spec.policyPacks[0]", "relative");
	refused("{'stack': 'dev', " FLUX ", 'policyPacks': ['ok', 'a/../../b']}", "spec.policyPacks[1]");
	refused("{'stack': 'dev', " FLUX ", 'policyPacks': ['']}", "spec.policyPacks[0]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(flux_source_of_every_kind),
		cmocka_unit_test(reserved_env_names_refused),
		cmocka_unit_test(operators_unserved_fields_are_refused_by_name),
		cmocka_unit_test(flux_source_refusals),
		cmocka_unit_test(oci_source_refs),
		cmocka_unit_test(oci_source_options),
		cmocka_unit_test(oci_source_verify),
		cmocka_unit_test(program_ref_makes_its_git_repository),
		cmocka_unit_test(program_ref_names_a_program),
		cmocka_unit_test(program_ref_refusals),
		cmocka_unit_test(exactly_one_source),
		cmocka_unit_test(project_repo_makes_its_git_repository),
		cmocka_unit_test(project_repo_refusals),
		cmocka_unit_test(git_auth_kinds),
		cmocka_unit_test(git_auth_refusals),
		cmocka_unit_test(classic_manifest),
		cmocka_unit_test(cloud_and_backend),
		cmocka_unit_test(stack_name_required),
		cmocka_unit_test(config_structured_values),
		cmocka_unit_test(config_refs_and_secret_refs),
		cmocka_unit_test(env_and_fs_refs_refused),
		cmocka_unit_test(env_refs_and_classic_envs),
		cmocka_unit_test(operators_secret_inputs),
		cmocka_unit_test(operators_operation_flags),
		cmocka_unit_test(key_set_twice),
		cmocka_unit_test(resync_period),
		cmocka_unit_test(bad_durations_refused),
		cmocka_unit_test(timeout_and_backoff),
		cmocka_unit_test(max_update_failures_bounds),
		cmocka_unit_test(dir_stays_inside_the_artifact),
		cmocka_unit_test(wrong_types_name_the_field),
		cmocka_unit_test(not_a_spec),
		cmocka_unit_test(long_names_are_cut_not_overflowed),
		cmocka_unit_test(free_releases_everything),
		cmocka_unit_test(late_refusal_frees_what_was_parsed),
		cmocka_unit_test_setup(approval_fields, setup),
		cmocka_unit_test_setup(drift_detection, setup),
		cmocka_unit_test_setup(prerequisites_and_depends_on, setup),
		cmocka_unit_test_setup(policy_packs_stay_inside_the_artifact, setup),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
