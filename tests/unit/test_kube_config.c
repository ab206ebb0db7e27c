/*
 * test_kube_config.c - kubeconfig and in-cluster parsing: contexts and
 * overrides, CA file vs data, tokens vs token files, client certificates,
 * exec plugins, relative paths, merging of a KUBECONFIG list, IPv6 hosts,
 * and errors that name the file and the key without quoting values.
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
#include "base/url.h"
#include "kube/kube.h"

static char tmpdir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_kube_config.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	struct err e;
	(void)state;
	return fs_rm_rf(tmpdir, &e);
}

static void write_file(const char *name, const char *text, char *path_out, size_t n)
{
	FILE *f;

	snprintf(path_out, n, "%s/%s", tmpdir, name);
	f = fopen(path_out, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static struct kube_config *parse_ok(const char *text, const char *ctx)
{
	struct kube_config *c = NULL;
	struct err e;
	char name[512];

	snprintf(name, sizeof(name), "%s/config", tmpdir);
	if (kube_config_parse(name, text, strlen(text), ctx, &c, &e) < 0)
		fail_msg("parse failed: %s", e.msg);
	return c;
}

static void parse_fails(const char *text, const char *expect_in_msg, const char *secret)
{
	struct kube_config *c = NULL;
	struct err e;

	assert_int_equal(kube_config_parse("/cfg/kc.yaml", text, strlen(text), NULL, &c, &e), -1);
	assert_null(c);
	if (strstr(e.msg, expect_in_msg) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", e.msg, expect_in_msg);
	assert_non_null(strstr(e.msg, "/cfg/kc.yaml"));
	if (secret != NULL)
		assert_null(strstr(e.msg, secret));
}

#define BASE_CLUSTERS \
	"clusters:\n" \
	"- name: c1\n" \
	"  cluster:\n" \
	"    server: https://10.0.0.1:6443/\n" \
	"    certificate-authority: ca.pem\n" \
	"- name: c2\n" \
	"  cluster:\n" \
	"    server: https://c2.example:443\n" \
	"    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n" \
	"    insecure-skip-tls-verify: false\n"

static void current_context_and_relative_paths(void **state)
{
	(void)state;
	struct kube_config *c = parse_ok(
	    "apiVersion: v1\nkind: Config\ncurrent-context: a\n" BASE_CLUSTERS
	    "contexts:\n"
	    "- name: a\n  context: {cluster: c1, user: u1, namespace: team-a}\n"
	    "- name: b\n  context: {cluster: c2, user: u2}\n"
	    "users:\n"
	    "- name: u1\n  user:\n    tokenFile: /var/run/tok\n    client-certificate: certs/c.pem\n    client-key: /abs/k.pem\n"
	    "- name: u2\n  user:\n    token: s3cret-token\n", NULL);
	char want[512];

	assert_string_equal(c->server, "https://10.0.0.1:6443");
	assert_string_equal(c->namespace, "team-a");
	snprintf(want, sizeof(want), "%s/ca.pem", tmpdir);
	assert_string_equal(c->ca_file, want);
	assert_null(c->ca_pem);
	assert_int_equal(c->insecure_skip_tls_verify, 0);
	assert_string_equal(c->token_file, "/var/run/tok");
	assert_null(c->token);
	snprintf(want, sizeof(want), "%s/certs/c.pem", tmpdir);
	assert_string_equal(c->client_cert_file, want);
	assert_string_equal(c->client_key_file, "/abs/k.pem");
	kube_config_free(c);
}

static void context_override_and_data_fields(void **state)
{
	(void)state;
	struct kube_config *c = parse_ok(
	    "current-context: a\n" BASE_CLUSTERS
	    "contexts:\n"
	    "- name: a\n  context: {cluster: c1, user: u1}\n"
	    "- name: b\n  context: {cluster: c2, user: u2}\n"
	    "users:\n"
	    "- name: u1\n  user: {token: x}\n"
	    "- name: u2\n  user:\n    token: s3cret-token\n"
	    "    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n", "b");

	assert_string_equal(c->server, "https://c2.example:443");
	assert_string_equal(c->namespace, "default");
	assert_string_equal(c->ca_pem, "-----BEGIN CERTIFICATE-----\n");
	assert_null(c->ca_file);
	assert_int_equal(c->insecure_skip_tls_verify, 0);
	assert_string_equal(c->token, "s3cret-token");
	assert_string_equal(c->client_cert_pem, "CERT");
	assert_string_equal(c->client_key_pem, "KEY");
	kube_config_free(c);
}

static void exec_plugin(void **state)
{
	(void)state;
	struct kube_config *c = parse_ok(
	    "current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: e}\n"
	    "users:\n- name: e\n  user:\n    exec:\n"
	    "      apiVersion: client.authentication.k8s.io/v1\n"
	    "      command: aws\n      args: [eks, get-token, --cluster-name, x]\n"
	    "      env:\n      - {name: AWS_PROFILE, value: prod}\n"
	    "      interactiveMode: Never\n      provideClusterInfo: true\n", NULL);

	assert_non_null(c->exec);
	assert_string_equal(c->exec->command, "aws");
	assert_string_equal(c->exec->args[0], "eks");
	assert_string_equal(c->exec->args[3], "x");
	assert_null(c->exec->args[4]);
	assert_string_equal(c->exec->env[0], "AWS_PROFILE=prod");
	assert_null(c->exec->env[1]);
	assert_int_equal(c->exec->provide_cluster_info, 1);
	kube_config_free(c);
}

static void errors_name_file_and_key(void **state)
{
	(void)state;
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user:\n    client-key-data: 'not base64 !!'\n    client-certificate-data: Q0VSVA==\n",
	    "users[\"u\"].user.client-key-data: not valid base64", "not base64 !!");
	parse_fails("current-context: missing\n" BASE_CLUSTERS "contexts: []\n", "contexts: no entry named \"missing\"", NULL);
	parse_fails("clusters: []\n", "current-context: not set", NULL);
	parse_fails("current-context: a\ncontexts:\n- name: a\n  context: {cluster: nope}\n",
	    "clusters: no entry named \"nope\"", NULL);
	parse_fails("current-context: a\nclusters:\n- name: c\n  cluster: {certificate-authority: x}\n"
	    "contexts:\n- name: a\n  context: {cluster: c}\n", "clusters[\"c\"].cluster.server: missing", NULL);
	parse_fails("current-context: a\nclusters:\n- name: c\n  cluster: {server: ftp://x}\n"
	    "contexts:\n- name: a\n  context: {cluster: c}\n", "cluster.server: must be an http(s) URL", NULL);
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: x}\n",
	    "exec.apiVersion: must be client.authentication.k8s.io/v1", NULL);
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user: {auth-provider: {name: gcp}}\n", "user.auth-provider: not supported", NULL);
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: Always}\n",
	    "exec.interactiveMode: Always needs a terminal", NULL);
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user: {client-certificate: c.pem}\n", "must be given together", NULL);
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1}\n"
	    "  insecure: [unterminated\n", "line", NULL);
	parse_fails("- just\n- a list\n", "not a mapping", NULL);
	/* lists that are not lists, named with their place */
	parse_fails("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters: {c: 1}\n",
	    "kc.yaml: clusters: expected a list", NULL);
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: x, args: -v}\n",
	    "users[\"u\"].user.exec.args: expected a list", NULL);
	parse_fails("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: x, env: {A: b}}\n",
	    "user.exec.env: expected a list", NULL);
	parse_fails("current-context: a\nclusters:\n- name: c\n  cluster: {server: https://x, insecure-skip-tls-verify: maybe}\n"
	    "contexts:\n- name: a\n  context: {cluster: c}\n", "insecure-skip-tls-verify: expected true or false", NULL);
}

static void kubeconfig_list_merges_first_wins(void **state)
{
	(void)state;
	char p1[512], p2[512], list[1100];
	struct kube_config *c = NULL;
	struct err e;

	write_file("one", "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\n"
	    "users:\n- name: u\n  user: {token: first}\n", p1, sizeof(p1));
	write_file("two", "current-context: b\nclusters:\n- name: c\n  cluster: {server: 'https://[::1]:6443'}\n"
	    "users:\n- name: u\n  user: {token: second}\n", p2, sizeof(p2));
	snprintf(list, sizeof(list), "%s:%s/missing:%s", p1, tmpdir, p2);
	if (kube_config_kubeconfig(list, NULL, &c, &e) < 0)
		fail_msg("%s", e.msg);
	assert_string_equal(c->server, "https://[::1]:6443");
	assert_string_equal(c->token, "first");
	kube_config_free(c);

	/* A single missing file is an error naming it. */
	snprintf(list, sizeof(list), "%s/nope", tmpdir);
	assert_int_equal(kube_config_kubeconfig(list, NULL, &c, &e), -1);
	assert_non_null(strstr(e.msg, "nope"));
}

static void incluster(void **state)
{
	(void)state;
	char p[512], sa[400];
	struct kube_config *c = NULL;
	struct err e;

	snprintf(sa, sizeof(sa), "%s/sa", tmpdir);
	assert_int_equal(mkdir(sa, 0700), 0);
	/* not in a cluster */
	assert_int_equal(kube_config_incluster(NULL, "443", sa, &c, &e), -1);
	assert_int_equal(e.code, ERR_NOTFOUND);
	/* token missing */
	assert_int_equal(kube_config_incluster("10.96.0.1", "443", sa, &c, &e), -1);
	assert_non_null(strstr(e.msg, "token"));
	write_file("sa/token", "tok-1\n", p, sizeof(p));
	write_file("sa/ca.crt", "PEM", p, sizeof(p));
	if (kube_config_incluster("10.96.0.1", "443", sa, &c, &e) < 0)
		fail_msg("%s", e.msg);
	assert_string_equal(c->server, "https://10.96.0.1:443");
	assert_string_equal(c->namespace, "default");
	assert_int_equal(c->in_cluster, 1);
	assert_string_equal(c->ca_file, p);
	assert_null(c->token);   /* read from the file on use, so rotation works */
	assert_non_null(strstr(c->token_file, "/sa/token"));
	kube_config_free(c);

	write_file("sa/namespace", "pulumi-system\n", p, sizeof(p));
	if (kube_config_incluster("fd00::1", "6443", sa, &c, &e) < 0)
		fail_msg("%s", e.msg);
	assert_string_equal(c->server, "https://[fd00::1]:6443");
	assert_string_equal(c->namespace, "pulumi-system");
	kube_config_free(c);

	assert_int_equal(kube_config_incluster("h", "44x3", sa, &c, &e), -1);
	/* a directory path too long for its file names: refused, not cut */
	{
		char longdir[5000];
		memset(longdir, 'd', sizeof(longdir) - 1);
		longdir[0] = '/';
		longdir[sizeof(longdir) - 1] = '\0';
		assert_int_equal(kube_config_incluster("10.96.0.1", "443", longdir, &c, &e), -1);
		assert_non_null(strstr(e.msg, "too long"));
	}
	/* a host that would change the URL's shape */
	assert_int_equal(kube_config_incluster("user:pw@evil.example", "443", sa, &c, &e), -1);
	assert_non_null(strstr(e.msg, "KUBERNETES_SERVICE_HOST: not a host name"));
	assert_null(strstr(e.msg, "pw"));
	assert_int_equal(kube_config_incluster("evil.example/x?", "443", sa, &c, &e), -1);
}

/* A token is copied into the Authorization header: CR/LF (or any control
 * byte) in it would add headers of its author's choosing.  Refused from
 * each source, naming the source and never quoting the token. */
static void tokens_with_control_characters_are_refused(void **state)
{
	(void)state;
	static const char *bad[] = { "abc\\r\\nX-Injected: 1", "abc\\nX: 1", "a\\tb", "a\\x7fb",
		"a\\x01b" };
	char text[1024], p[512], sa[400];
	struct kube_config *c = NULL;
	struct err e;
	char *tok = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "current-context: a\n" BASE_CLUSTERS
		    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
		    "users:\n- name: u\n  user:\n    token: \"%s\"\n", bad[i]);
		parse_fails(text, "users[\"u\"].user.token: the token contains a control character", "abc");
	}
	/* printable tokens of every kind still pass */
	c = parse_ok("current-context: a\n" BASE_CLUSTERS
	    "contexts:\n- name: a\n  context: {cluster: c1, user: u}\n"
	    "users:\n- name: u\n  user:\n    token: \"eyJh.b-c_d~e+f/g=: ok\"\n", NULL);
	assert_string_equal(c->token, "eyJh.b-c_d~e+f/g=: ok");
	kube_config_free(c);

	/* token files: trimmed like client-go, then checked */
	write_file("tok-ok", "  tok-1\r\n", p, sizeof(p));
	assert_int_equal(kube_read_token_file(p, &tok, &e), 0);
	assert_string_equal(tok, "tok-1");
	free(tok);
	write_file("tok-bad", "tok-1\r\nX-Injected: 1\n", p, sizeof(p));
	assert_int_equal(kube_read_token_file(p, &tok, &e), -1);
	assert_null(tok);
	assert_int_equal(e.code, ERR_AUTH);
	assert_non_null(strstr(e.msg, p));
	assert_non_null(strstr(e.msg, "control character"));
	assert_null(strstr(e.msg, "tok-1"));
	assert_null(strstr(e.msg, "Injected"));
	write_file("tok-empty", " \n\n", p, sizeof(p));
	assert_int_equal(kube_read_token_file(p, &tok, &e), -1);
	assert_int_equal(e.code, ERR_AUTH);
	assert_non_null(strstr(e.msg, "empty"));
	assert_non_null(strstr(e.msg, p));

	/* the in-cluster token file, read at start */
	snprintf(sa, sizeof(sa), "%s/sa-bad", tmpdir);
	assert_int_equal(mkdir(sa, 0700), 0);
	write_file("sa-bad/token", "tok\rX-Injected: 1", p, sizeof(p));
	write_file("sa-bad/ca.crt", "PEM", p, sizeof(p));
	c = NULL;
	assert_int_equal(kube_config_incluster("10.96.0.1", "443", sa, &c, &e), -1);
	assert_null(c);
	assert_non_null(strstr(e.msg, "in-cluster config"));
	assert_non_null(strstr(e.msg, "sa-bad/token"));
	assert_null(strstr(e.msg, "Injected"));
}

#define ONE_CONTEXT "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\n"

/* client-go refuses a CA together with insecure-skip-tls-verify; so do we,
 * for a CA file and for CA data.  Verification off alone is allowed (and
 * warned about by the client). */
static void insecure_with_a_ca_is_refused(void **state)
{
	(void)state;
	struct kube_config *c;

	parse_fails(ONE_CONTEXT "clusters:\n- name: c\n  cluster:\n    server: https://x\n"
	    "    certificate-authority: ca.pem\n    insecure-skip-tls-verify: true\n",
	    "clusters[\"c\"].cluster: specifying a root certificates file with the insecure flag is not allowed",
	    NULL);
	parse_fails(ONE_CONTEXT "clusters:\n- name: c\n  cluster:\n    server: https://x\n"
	    "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n"
	    "    insecure-skip-tls-verify: true\n",
	    "specifying a root certificates file with the insecure flag is not allowed", NULL);
	c = parse_ok(ONE_CONTEXT "clusters:\n- name: c\n  cluster:\n    server: https://x\n"
	    "    insecure-skip-tls-verify: true\n", NULL);
	assert_int_equal(c->insecure_skip_tls_verify, 1);
	assert_null(c->ca_file);
	assert_null(c->ca_pem);
	kube_config_free(c);
}

/* A server URL's user information would be sent as basic auth and logged
 * with the server; a query or fragment makes no sense under the paths
 * appended to it.  All refused without quoting the URL. */
static void server_url_with_credentials_or_query_is_refused(void **state)
{
	(void)state;
	char buf[256];
	struct kube_config *c;

	parse_fails(ONE_CONTEXT "clusters:\n- name: c\n  cluster: {server: 'https://admin:hunter2@10.0.0.1:6443'}\n",
	    "clusters[\"c\"].cluster.server: must not carry user information", "hunter2");
	parse_fails(ONE_CONTEXT "clusters:\n- name: c\n  cluster: {server: 'https://tok3n@10.0.0.1:6443'}\n",
	    "must not carry user information", "tok3n");
	parse_fails(ONE_CONTEXT "clusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443/?token=s3cret'}\n",
	    "cluster.server: must not carry a query", "s3cret");
	parse_fails(ONE_CONTEXT "clusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443/#s3cret'}\n",
	    "cluster.server: must not carry a fragment", "s3cret");
	/* a path prefix (Rancher, a proxy) is fine */
	c = parse_ok(ONE_CONTEXT "clusters:\n- name: c\n  cluster: {server: 'https://rancher.example/k8s/clusters/c-1'}\n",
	    NULL);
	assert_string_equal(c->server, "https://rancher.example/k8s/clusters/c-1");
	assert_string_equal(kube_config_server_for_log(c, buf, sizeof(buf)),
	    "https://rancher.example/k8s/clusters/c-1");
	/* a config built by code is printed safely anyway, and refused by
	 * kube_config_validate (which kube_client_new runs) */
	free(c->server);
	c->server = strdup("https://admin:hunter2@[fd00::1]:6443/p?token=s3cret#frag");
	assert_string_equal(kube_config_server_for_log(c, buf, sizeof(buf)), "https://[fd00::1]:6443/p");
	{
		struct err e;
		assert_int_equal(kube_config_validate(c, &e), -1);
		assert_null(strstr(e.msg, "hunter2"));
		assert_non_null(strstr(e.msg, "user information"));
	}
	kube_config_free(c);
	assert_string_equal(url_for_log("http://u:p@h/a/b?x=1", buf, sizeof(buf)), "http://h/a/b");
}

static void load_order(void **state)
{
	(void)state;
	char flag[512], env[512], home_cfg[512], dir[400];
	struct kube_config *c = NULL;
	struct err e;
	const char *doc = "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\n"
	    "clusters:\n- name: c\n  cluster: {server: https://%s}\n";
	char text[512];

	snprintf(text, sizeof(text), doc, "flag");
	write_file("flag.yaml", text, flag, sizeof(flag));
	snprintf(text, sizeof(text), doc, "env");
	write_file("env.yaml", text, env, sizeof(env));
	snprintf(dir, sizeof(dir), "%s/.kube", tmpdir);
	mkdir(dir, 0700);
	snprintf(text, sizeof(text), doc, "home");
	write_file(".kube/config", text, home_cfg, sizeof(home_cfg));

	setenv("HOME", tmpdir, 1);
	setenv("KUBECONFIG", env, 1);
	unsetenv("KUBERNETES_SERVICE_HOST");
	assert_int_equal(kube_config_load(flag, &c, &e), 0);   /* the flag first */
	assert_string_equal(c->server, "https://flag");
	kube_config_free(c);
	assert_int_equal(kube_config_load(NULL, &c, &e), 0);   /* then $KUBECONFIG */
	assert_string_equal(c->server, "https://env");
	kube_config_free(c);
	unsetenv("KUBECONFIG");
	assert_int_equal(kube_config_load(NULL, &c, &e), 0);   /* then ~/.kube/config */
	assert_string_equal(c->server, "https://home");
	kube_config_free(c);
	/* in a pod (service env set) the service account wins over ~/.kube */
	setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
	setenv("KUBERNETES_SERVICE_PORT", "443", 1);
	if (access(KUBE_SA_DIR "/token", R_OK) != 0) {
		assert_int_equal(kube_config_load(NULL, &c, &e), -1);
		assert_non_null(strstr(e.msg, "in-cluster"));
	}
	unsetenv("KUBERNETES_SERVICE_HOST");
	unsetenv("KUBERNETES_SERVICE_PORT");
	setenv("HOME", "/nonexistent-home", 1);
	assert_int_equal(kube_config_load(NULL, &c, &e), -1);
	assert_non_null(strstr(e.msg, "--kubeconfig"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(current_context_and_relative_paths),
		cmocka_unit_test(context_override_and_data_fields),
		cmocka_unit_test(exec_plugin),
		cmocka_unit_test(errors_name_file_and_key),
		cmocka_unit_test(kubeconfig_list_merges_first_wins),
		cmocka_unit_test(incluster),
		cmocka_unit_test(load_order),
		cmocka_unit_test(tokens_with_control_characters_are_refused),
		cmocka_unit_test(insecure_with_a_ca_is_refused),
		cmocka_unit_test(server_url_with_credentials_or_query_is_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
