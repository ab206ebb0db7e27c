/*
 * test_pulumi_driver.c - unit tests for the driver's operations (src/pulumi/pl_*.c) with a fake
 * `pulumi` written in sh: spec validation in pl_open, the argv of config
 * calls (flattened --path keys, secrets on stdin only, removal of
 * undeclared keys), the refusal to put a secret on a command line, the
 * version check, and masking in results.  The e2e suite runs the same
 * operations against the Python stand-in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "pulumi/pulumi.h"
#include "tests/unit/fake_poll.h"   /* poll() fails on demand while the CLI runs */

/* Records each call as "ARGS: ..." and, when stdin is not empty,
 * "STDIN: ..." in $PULUMI_HOME/calls; answers version. */
static const char FAKE[] =
	"#!/bin/sh\n"
	"log=\"$PULUMI_HOME/calls\"\n"
	"echo \"ARGS: $*\" >> \"$log\"\n"
	"in=$(cat)\n"
	"[ -n \"$in\" ] && echo \"STDIN: $in\" >> \"$log\"\n"
	"case \"$*\" in\n"
	"  version) echo \"${FAKE_VERSION:-v3.200.1}\" ;;\n"
	"  *'up '*) echo \"error: boom with $FAKE_SECRET inside\" >&2; exit 1 ;;\n"
	"  *'preview '*) echo \"error: backend $PULUMI_BACKEND_URL refused ${FAKE_PART:-}\" >&2; exit 1 ;;\n"
	"  *'stack select'*) [ -e \"$PULUMI_HOME/exists\" ] && exit 0;"
	" echo \"error: no stack named 'dev' found\" >&2; exit 6 ;;\n"
	"  *'stack init'*) touch \"$PULUMI_HOME/exists\";"
	" echo \"error: stack 'organization/demo/dev' already exists\" >&2; exit 1 ;;\n"
	"esac\n"
	"exit 0\n";

struct fixture {
	char dir[256], bin[300], home[300], work[300], scratch[300], calls[320];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct err e = { 0 };
	FILE *fp;

	snprintf(f->dir, sizeof(f->dir), "/tmp/test_pulumi_driver.XXXXXX");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	snprintf(f->bin, sizeof(f->bin), "%s/pulumi", f->dir);
	snprintf(f->home, sizeof(f->home), "%s/home", f->dir);
	snprintf(f->work, sizeof(f->work), "%s/work", f->dir);
	snprintf(f->scratch, sizeof(f->scratch), "%s/scratch", f->dir);
	snprintf(f->calls, sizeof(f->calls), "%s/calls", f->home);
	fs_mkdir_p(f->home, 0700, &e);
	fs_mkdir_p(f->work, 0700, &e);
	fp = fopen(f->bin, "w");
	fputs(FAKE, fp);
	fclose(fp);
	chmod(f->bin, 0755);
	{
		char p[400];

		/* A nested "name:" must not be taken for the project's. */
		snprintf(p, sizeof(p), "%s/Pulumi.yaml", f->work);
		fp = fopen(p, "w");
		fputs("# demo\nconfig:\n  name: not-this\nname: demo\nruntime: yaml\n", fp);
		fclose(fp);
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	struct err e = { 0 };

	fs_rm_rf(f->dir, &e);
	free(f);
	return 0;
}

static struct pl_spec base_spec(struct fixture *f)
{
	struct pl_spec s = { 0 };

	s.pulumi_bin = f->bin;
	s.pulumi_home = f->home;
	s.workdir = f->work;
	s.scratch_dir = f->scratch;
	s.stack = "dev";
	s.passphrase = "pass-Phrase-1";
	s.timeout_ms = 20000;
	return s;
}

static char *calls(struct fixture *f)
{
	struct err e = { 0 };
	char *text = NULL;
	size_t len;

	if (fs_read_file(f->calls, 1 << 20, &text, &len, &e) < 0)
		return strdup("");
	return text;
}

/* 1 when needle appears on an "ARGS:" line of the call log. */
static int on_argv(const char *log, const char *needle)
{
	for (const char *line = log; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *hit = strstr(line, needle);

		if (strncmp(line, "ARGS: ", 6) == 0 && hit && hit < line + len)
			return 1;
		line = end ? end + 1 : NULL;
	}
	return 0;
}

static void test_open_validates_the_spec(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_env_var bad_env[] = { { "PULUMI_HOME", "/x", 0 } };
	struct pl_env_var bad_name[] = { { "1BAD", "v", 0 } };
	struct pl_config_item bad_key[] = { { "a=b", "v", 0, 0 } };
	struct pl_config_item bad_json[] = { { "k", "{nope", 0, 1 } };
	struct err e = { 0 };

	s.stack = "bad name";
	assert_null(pl_open(&s, &e));
	assert_non_null(strstr(e.msg, "invalid stack name"));
	s = base_spec(f);
	s.workdir = NULL;
	assert_null(pl_open(&s, &e));
	s = base_spec(f);
	s.env = bad_env;
	s.n_env = 1;
	assert_null(pl_open(&s, &e));
	assert_non_null(strstr(e.msg, "PULUMI_HOME is set by the driver"));
	s.env = bad_name;
	assert_null(pl_open(&s, &e));
	s = base_spec(f);
	s.config = bad_key;
	s.n_config = 1;
	assert_null(pl_open(&s, &e));
	s.config = bad_json;
	assert_null(pl_open(&s, &e));
	assert_non_null(strstr(e.msg, "not JSON"));
}

/* Writes (mode "w") or appends ("a") text to the stack's settings file. */
static void write_settings(struct fixture *f, const char *mode, const char *text)
{
	char p[400];
	FILE *fp;

	snprintf(p, sizeof(p), "%s/Pulumi.dev.yaml", f->work);
	fp = fopen(p, mode);
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

/* The stack settings file as the CLI would have left it. */
static void write_stack_settings(struct fixture *f)
{
	write_settings(f, "w", "encryptionsalt: v1:AQIDBAUGBwg=:v1:AAECAwQFBgcICQoL:yX1+BiKJUW+guDZbiQRMUnobuD6cFg==\n"
	      "config:\n"
	      "  demo:greeting: hi\n"
	      "  demo:stale:\n"
	      "    nested:\n"
	      "      - config: not-a-key\n"
	      "  aws:region: r\n"
	      "  demo:pw:\n"
	      "    secure: v1:AQIDBAUGBwgJCgsM:IwVgbMOqTBUsDtDU+dZ6OCuyyKAw6lA=\n"
	      "  demo:db:\n"
	      "    port: 1\n"
	      "other:\n"
	      "  demo:outside: 1\n");
}

static void test_config_calls(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_config_item cfg[] = {
		{ "greeting", "hi", 0, 0 },
		{ "aws:region", "r", 0, 0 },
		{ "db", "{\"hosts\":[\"a\",\"b\"],\"x.y\":{\"port\":5432},\"n\":null}", 0, 1 },
		{ "pw", "sekrit-Value-9", 1, 0 },
		{ "creds", "{\"token\":\"tok-Value-8\"}", 1, 1 },
	};
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;
	char *log;

	s.config = cfg;
	s.n_config = 5;
	write_stack_settings(f);
	st = pl_open(&s, &e);
	assert_non_null(st);
	assert_int_equal(pl_apply_config(st, &r), 0);
	assert_int_equal(r.status, PL_OK);
	pl_result_free(&r);
	log = calls(f);
	assert_non_null(strstr(log, "ARGS: version\n"));
	assert_non_null(strstr(log, "ARGS: --non-interactive config set-all --stack dev --plaintext "
				    "greeting=hi --plaintext aws:region=r\n"));
	assert_non_null(strstr(log, "ARGS: --non-interactive config set-all --stack dev --path "
				    "--plaintext db.hosts[0]=a --plaintext db.hosts[1]=b --plaintext "
				    "db[\"x.y\"].port=5432\n"));
	assert_non_null(strstr(log, "ARGS: --non-interactive config set --stack dev --secret -- pw\n"
				    "STDIN: sekrit-Value-9\n"));
	assert_non_null(strstr(log, "config set --stack dev --path --secret -- creds.token\n"
				    "STDIN: tok-Value-8\n"));
	assert_non_null(strstr(log, "ARGS: --non-interactive config rm --stack dev -- demo:stale\n"));
	assert_null(strstr(log, "-- demo:greeting"));
	assert_null(strstr(log, "-- aws:region"));
	assert_null(strstr(log, "-- demo:pw"));        /* declared as "pw" */
	assert_null(strstr(log, "-- demo:db"));        /* structured, declared as "db" */
	assert_null(strstr(log, "not-a-key"));
	assert_null(strstr(log, "demo:outside"));      /* not under config: */
	assert_null(strstr(log, "config --json"));     /* the file is read, not the CLI */
	/* Secrets only ever on stdin. */
	assert_false(on_argv(log, "sekrit-Value-9"));
	assert_false(on_argv(log, "tok-Value-8"));
	assert_false(on_argv(log, "pass-Phrase-1"));
	free(log);
	pl_close(st);
}

/* Anchors and aliases in Pulumi.dev.yaml, as a user may write them: an
 * alias as a value must not shift keys and values (`config rm` of a
 * value), and a merge key's keys are the stack's keys too. */
static void test_config_rm_reads_aliases_as_the_cli_does(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_config_item cfg[] = { { "greeting", "hi", 0, 0 }, { "alias", "hi", 0, 0 } };
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;
	char *log;

	write_settings(f, "w", "defaults: &base\n"
	      "  demo:merged: m\n"
	      "config:\n"
	      "  <<: *base\n"
	      "  demo:greeting: &g hi\n"
	      "  demo:alias: *g\n"
	      "  demo:old: value-Not-A-Key\n"
	      "  aws:region: *g\n");
	s.config = cfg;
	s.n_config = 2;
	st = pl_open(&s, &e);
	assert_non_null(st);
	assert_int_equal(pl_apply_config(st, &r), 0);
	pl_result_free(&r);
	log = calls(f);
	assert_non_null(strstr(log, "config rm --stack dev -- demo:old\n"));
	assert_non_null(strstr(log, "config rm --stack dev -- aws:region\n"));
	assert_non_null(strstr(log, "config rm --stack dev -- demo:merged\n"));
	assert_null(strstr(log, "value-Not-A-Key"));
	assert_null(strstr(log, "-- hi\n"));
	assert_null(strstr(log, "-- <<"));
	assert_null(strstr(log, "-- demo:greeting"));
	assert_null(strstr(log, "-- demo:alias"));
	free(log);
	pl_close(st);
}

/* Number of lines of the call log that contain needle. */
static int count_calls(struct fixture *f, const char *needle)
{
	char *log = calls(f);
	int n = 0;

	for (const char *p = strstr(log, needle); p; p = strstr(p + 1, needle))
		n++;
	free(log);
	return n;
}

static int apply(struct fixture *f, struct pl_spec *s)
{
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st = pl_open(s, &e);
	int rc;

	assert_non_null(st);
	rc = pl_apply_secret_config(st, &r);
	assert_int_equal(r.status, PL_OK);
	pl_result_free(&r);
	pl_close(st);
	return rc;
}

/* `config set --secret` is a CLI call per key on every reconcile unless
 * the driver knows the settings file already holds that value. */
static void test_secret_config_is_set_only_when_it_changed(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_config_item cfg[] = { { "pw", "sekrit-Value-9", 1, 0 }, { "greeting", "hi", 0, 0 },
					{ "creds", "{\"token\":\"tok-Value-8\"}", 1, 1 } };
	char p[400], *state_text = NULL;
	struct err e = { 0 };
	size_t len;

	s.config = cfg;
	s.n_config = 3;
	write_stack_settings(f);
	apply(f, &s);
	assert_int_equal(count_calls(f, "--secret -- pw\n"), 1);
	assert_int_equal(count_calls(f, "--secret -- creds.token\n"), 1);
	assert_int_equal(count_calls(f, "config set-all"), 0);   /* plaintext goes with up */
	/* Nothing changed: no call at all. */
	apply(f, &s);
	assert_int_equal(count_calls(f, "--secret -- pw\n"), 1);
	assert_int_equal(count_calls(f, "--secret -- creds.token\n"), 1);
	/* The state vouches without telling: no value in it. */
	snprintf(p, sizeof(p), "%s/secret-config.json", f->scratch);
	assert_int_equal(fs_read_file(p, 1 << 20, &state_text, &len, &e), 0);
	assert_null(strstr(state_text, "sekrit"));
	assert_null(strstr(state_text, "tok-Value"));
	free(state_text);
	/* A new value: set again, that key only. */
	cfg[0].value = "sekrit-Value-10";
	apply(f, &s);
	assert_int_equal(count_calls(f, "--secret -- pw\n"), 2);
	assert_int_equal(count_calls(f, "--secret -- creds.token\n"), 1);
	/* A new passphrase: every secret again. */
	s.passphrase = "pass-Phrase-2";
	apply(f, &s);
	assert_int_equal(count_calls(f, "--secret -- pw\n"), 3);
	assert_int_equal(count_calls(f, "--secret -- creds.token\n"), 2);
	/* The settings file is not the one the driver left: all again. */
	write_settings(f, "a", "# edited\n");
	apply(f, &s);
	assert_int_equal(count_calls(f, "--secret -- pw\n"), 4);
	assert_int_equal(count_calls(f, "--secret -- creds.token\n"), 3);
	apply(f, &s);
	assert_int_equal(count_calls(f, "--secret -- pw\n"), 4);
	/* Gone (a new revision without it): set again. */
	snprintf(p, sizeof(p), "%s/Pulumi.dev.yaml", f->work);
	unlink(p);
	apply(f, &s);
	assert_int_equal(count_calls(f, "--secret -- pw\n"), 5);
}

static void test_up_with_config_passes_plain_config_on_up(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_config_item cfg[] = {
		{ "greeting", "hi there", 0, 0 }, { "aws:region", "r", 0, 0 },
		{ "db", "{\"port\":5432}", 0, 1 }, { "pw", "sekrit-Value-9", 1, 0 },
	};
	struct pl_op_opts o = { .with_config = 1 };
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;
	char *log;

	s.config = cfg;
	s.n_config = 4;
	st = pl_open(&s, &e);
	assert_non_null(st);
	pl_up(st, &o, &r);   /* the fake fails every up; the argv is what counts */
	pl_result_free(&r);
	log = calls(f);
	assert_non_null(strstr(log, "ARGS: --non-interactive config set-all --stack dev --path "
				    "--plaintext db.port=5432\n"));
	assert_non_null(strstr(log, " --config greeting=hi there --config aws:region=r"));
	assert_null(strstr(log, "--plaintext greeting"));
	assert_false(on_argv(log, "sekrit-Value-9"));
	free(log);
	pl_close(st);
}

static void test_secret_never_on_argv(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	/* A plaintext value equal to a secret one would put the secret on argv. */
	struct pl_config_item cfg[] = {
		{ "visible", "same-Value-7", 0, 0 },
		{ "hidden", "same-Value-7", 1, 0 },
	};
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;
	char *log;

	s.config = cfg;
	s.n_config = 2;
	st = pl_open(&s, &e);
	assert_int_equal(pl_apply_config(st, &r), -1);
	assert_int_equal(r.status, PL_INTERNAL);
	assert_non_null(strstr(r.message, "refusing to pass a secret"));
	pl_result_free(&r);
	log = calls(f);
	assert_null(strstr(log, "same-Value-7"));
	free(log);
	pl_close(st);
}

/* A secret that says nothing ("true", a short one, the stack's own name)
 * does not stop the driver's own arguments (--run-program=true, --stack dev). */
static void test_secrets_that_say_nothing_do_not_stop_calls(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_config_item cfg[] = {
		{ "visible", "true", 0, 0 },
		{ "hidden", "true", 1, 0 },
		{ "name", "dev", 1, 0 },
	};
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;
	char *log;

	s.config = cfg;
	s.n_config = 3;
	st = pl_open(&s, &e);
	assert_int_equal(pl_apply_config(st, &r), 0);
	pl_result_free(&r);
	log = calls(f);
	assert_non_null(strstr(log, "--stack dev"));
	assert_non_null(strstr(log, "visible=true"));
	free(log);
	pl_close(st);
}

static void test_failure_message_is_masked(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_env_var env[] = { { "FAKE_SECRET", "env-Secret-5", 1 } };
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;

	s.env = env;
	s.n_env = 1;
	st = pl_open(&s, &e);
	assert_int_equal(pl_up(st, NULL, &r), -1);
	assert_int_equal(r.status, PL_FAILED);
	assert_string_equal(r.message, "up: boom with [secret] inside");
	assert_null(strstr(r.err_tail, "env-Secret-5"));
	assert_false(r.summary.present);
	pl_result_free(&r);
	pl_close(st);
}

/* Runs a preview whose error prints the backend URL and `part`; returns
 * the message (caller frees) after checking the tails too. */
static char *backend_error(struct fixture *f, const char *spec_url, const char *env_url,
			   const char *part)
{
	struct pl_spec s = base_spec(f);
	struct pl_env_var env[2] = { { "FAKE_PART", part, 0 }, { "PULUMI_BACKEND_URL", env_url, 0 } };
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;
	char *msg;

	s.backend_url = spec_url;
	s.env = env;
	s.n_env = env_url ? 2 : 1;
	st = pl_open(&s, &e);
	assert_non_null(st);
	assert_int_equal(pl_preview(st, NULL, &r), -1);
	msg = strdup(r.message);
	if (part[0])
		assert_null(strstr(r.err_tail, part));
	pl_result_free(&r);
	pl_close(st);
	return msg;
}

static void test_backend_url_with_credentials_is_masked(void **state)
{
	struct fixture *f = *state;
	char *m;

	/* userinfo: the whole URL and the password, raw and decoded. */
	m = backend_error(f, "postgres://admin:Pg-Pass%2F123@db.local:5432/pulumi?sslmode=disable", NULL,
			  "Pg-Pass/123");
	assert_string_equal(m, "preview: backend [secret] refused [secret]");
	free(m);
	m = backend_error(f, "postgres://admin:Pg-Pass%2F123@db.local:5432/pulumi", NULL, "Pg-Pass%2F123");
	assert_string_equal(m, "preview: backend [secret] refused [secret]");
	free(m);
	/* A query token, given as the environment variable. */
	m = backend_error(f, NULL, "https://state.example/x?region=eu&access_token=tok-Query-55",
			  "tok-Query-55");
	assert_string_equal(m, "preview: backend [secret] refused [secret]");
	free(m);
	/* An Azure SAS signature. */
	m = backend_error(f, "azblob://state?sv=2022-11-02&sig=SaS-Sig-Value%3D", NULL, "SaS-Sig-Value=");
	assert_string_equal(m, "preview: backend [secret] refused [secret]");
	free(m);
	/* Without credentials the URL stays visible: it names the backend. */
	m = backend_error(f, "s3://bucket/state?region=eu-west-1", NULL, "");
	assert_string_equal(m, "preview: backend s3://bucket/state?region=eu-west-1 refused ");
	free(m);
}

/* A secrets provider with a credential would put it on argv (`stack init
 * --secrets-provider`): refused, the message without it; one without any
 * opens (the CLI's KMS providers take theirs from the environment). */
static void test_secrets_provider_with_credentials_is_refused(void **state)
{
	static const char *const bad[] = {
		"hashivault://ops:Vault-Tok-9@vault.example/transit/keys/k",
		"awskms://alias/k?region=eu-west-1&token=Kms-Tok-7",
		"hashivault://Vault-Tok-9@vault.example/k",
	};
	static const char *const good[] = {
		"passphrase",
		"awskms://alias/k?region=eu-west-1",
		"awskms:///arn:aws:kms:us-east-1:111122223333:key/abcd?region=us-east-1",
		"gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k",
	};
	struct fixture *f = *state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct pl_spec s = base_spec(f);
		struct err e = { 0 };
		s.secrets_provider = bad[i];
		assert_null(pl_open(&s, &e));
		assert_int_equal(e.code, ERR_INVALID);
		assert_non_null(strstr(e.msg, "carries a credential"));
		assert_null(strstr(e.msg, "Tok"));
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct pl_spec s = base_spec(f);
		struct err e = { 0 };
		struct pl_stack *st;
		s.secrets_provider = good[i];
		st = pl_open(&s, &e);
		if (st == NULL)
			fail_msg("%s: %s", good[i], e.msg);
		pl_close(st);
	}
}

/* A call whose child the driver lost track of is the driver's failure,
 * not the CLI's, whatever the CLI printed before it was killed. */
static void test_poll_failure_is_an_internal_failure(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;

	s.skip_version_check = 1;
	st = pl_open(&s, &e);
	assert_non_null(st);
	fake_poll_errno = EINVAL;
	fake_poll_fail = 1;
	assert_int_equal(pl_up(st, NULL, &r), -1);
	fake_poll_fail = 0;
	assert_int_equal(r.status, PL_INTERNAL);
	assert_non_null(strstr(r.message, "up: poll:"));
	pl_result_free(&r);
	pl_close(st);
}

static void test_version_minimum(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st;

	s.min_version = "9.0.0";
	st = pl_open(&s, &e);
	assert_int_equal(pl_check_version(st, &r), -1);
	assert_int_equal(r.status, PL_CLI_TOO_OLD);
	assert_non_null(strstr(r.message, "v3.200.1 is older than the minimum supported v9.0.0"));
	pl_result_free(&r);
	/* Every operation checks first. */
	assert_int_equal(pl_ensure_stack(st, &r), -1);
	assert_int_equal(r.status, PL_CLI_TOO_OLD);
	pl_result_free(&r);
	pl_close(st);

	/* A build that prints no usable version passes only when told to trust it. */
	s = base_spec(f);
	s.min_version = "9.0.0";
	s.skip_version_check = 1;
	st = pl_open(&s, &e);
	assert_int_equal(pl_check_version(st, &r), 0);
	assert_string_equal(r.message, "version: check skipped");
	pl_result_free(&r);
	pl_close(st);

	s = base_spec(f);
	s.pulumi_bin = "/nonexistent/pulumi";
	st = pl_open(&s, &e);
	assert_int_equal(pl_up(st, NULL, &r), -1);
	assert_int_equal(r.status, PL_CLI_MISSING);
	assert_non_null(strstr(r.message, "/nonexistent/pulumi"));
	pl_result_free(&r);
	pl_close(st);

	/* A workdir that is gone is the caller's problem, not a missing CLI. */
	s = base_spec(f);
	s.workdir = "/nonexistent/work";
	st = pl_open(&s, &e);
	assert_int_equal(pl_up(st, NULL, &r), -1);
	assert_int_equal(r.status, PL_INTERNAL);
	assert_non_null(strstr(r.message, "/nonexistent/work"));
	pl_result_free(&r);
	pl_close(st);
}

static void test_install_once_per_revision(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st = pl_open(&s, &e);
	char *log, *p;
	int n = 0;

	assert_int_equal(pl_install(st, "rev-1", &r), 0);
	pl_result_free(&r);
	assert_int_equal(pl_install(st, "rev-1", &r), 0);
	pl_result_free(&r);
	assert_int_equal(pl_install(st, "rev-2", &r), 0);
	pl_result_free(&r);
	log = calls(f);
	for (p = strstr(log, "ARGS: --non-interactive install\n"); p;
	     p = strstr(p + 1, "ARGS: --non-interactive install\n"))
		n++;
	assert_int_equal(n, 2);
	free(log);
	pl_close(st);
}

/* A Go program's install skips the plugins the CLI would guess from its
 * module graph (pl_install); every other runtime's install is unchanged. */
static void test_install_of_a_go_program_fetches_no_plugins(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st = pl_open(&s, &e);
	char path[400], *log;
	FILE *fp;

	assert_int_equal(pl_install(st, NULL, &r), 0);
	pl_result_free(&r);
	snprintf(path, sizeof(path), "%s/Pulumi.yaml", f->work);
	fp = fopen(path, "w");
	fputs("name: demo\nruntime:\n  name: go\n  options:\n    buildTarget: out\n", fp);
	fclose(fp);
	assert_int_equal(pl_install(st, NULL, &r), 0);
	pl_result_free(&r);
	log = calls(f);
	/* the YAML program's first, as before; then the Go program's */
	assert_non_null(strstr(log, "ARGS: --non-interactive install\n"));
	assert_non_null(strstr(log, "ARGS: --non-interactive install --no-plugins\n"));
	assert_true(strstr(log, "install\n") < strstr(log, "install --no-plugins\n"));
	free(log);
	pl_close(st);
}

static void test_stack_created_meanwhile_is_selected(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st = pl_open(&s, &e);
	char *log;

	assert_int_equal(pl_ensure_stack(st, &r), 0);
	assert_int_equal(r.status, PL_OK);
	pl_result_free(&r);
	log = calls(f);
	assert_non_null(strstr(log, "ARGS: --non-interactive stack select --stack dev\n"
				    "ARGS: --non-interactive stack init dev\n"
				    "ARGS: --non-interactive stack select --stack dev\n"));
	free(log);
	pl_close(st);
}

static void test_interrupt_is_sticky(void **state)
{
	struct fixture *f = *state;
	struct pl_spec s = base_spec(f);
	struct pl_result r = { 0 };
	struct err e = { 0 };
	struct pl_stack *st = pl_open(&s, &e);
	char *log;

	pl_interrupt(st);
	assert_int_equal(pl_up(st, NULL, &r), -1);
	assert_int_equal(r.status, PL_CANCELED);
	assert_non_null(strstr(r.message, "not started"));
	pl_result_free(&r);
	log = calls(f);
	assert_null(strstr(log, " up "));
	free(log);
	pl_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_open_validates_the_spec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_config_calls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_config_rm_reads_aliases_as_the_cli_does, setup, teardown),
		cmocka_unit_test_setup_teardown(test_secret_config_is_set_only_when_it_changed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_up_with_config_passes_plain_config_on_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_secret_never_on_argv, setup, teardown),
		cmocka_unit_test_setup_teardown(test_secrets_that_say_nothing_do_not_stop_calls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failure_message_is_masked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backend_url_with_credentials_is_masked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_secrets_provider_with_credentials_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_version_minimum, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_failure_is_an_internal_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_install_once_per_revision, setup, teardown),
		cmocka_unit_test_setup_teardown(test_install_of_a_go_program_fetches_no_plugins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_interrupt_is_sticky, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stack_created_meanwhile_is_selected, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
