/*
 * pl_driver.c - a test-only command line over the pulumi driver
 * (src/pulumi/pulumi.h), so the e2e tests and the benchmark can exercise
 * every operation against the stand-in CLI.
 *
 *   pl_driver --spec SPEC.json [--log-level L] OP [op flags]
 *
 * SPEC.json describes the stack (the fields of struct pl_spec, plus
 * "env": [{"name","value","secret"}], "config": [{"key","value","secret",
 * "structured"}]).  Secrets travel in that file, never on this command line.
 * "-" reads the spec from stdin.  OP is one of: version, ensure, config,
 * install [--revision R], preview, up, refresh, destroy, cancel,
 * outputs [--show-secrets], history, or serve (operation names read one per
 * line from stdin, results printed one JSON line each; the spec must then
 * come from a file), config-secrets (pl_apply_secret_config), and in serve
 * outputs-shown (pl_outputs_shown with the last up's outputs).
 * preview/up/refresh/destroy take --plan F, --refresh, --expect-no-changes,
 * --preview-only, --target U, --policy-pack DIR; up also --with-config.  The result is printed as one JSON object on stdout;
 * the exit status is 0 for PL_OK, 1 otherwise, 2 for bad usage.  The result
 * includes self_maxrss_kb, this process's own peak RSS (the benchmark's
 * figure for the driver without the CLI it ran), and zombie_child, whether
 * a child of this process is left unreaped (--subreaper makes it a child
 * subreaper first, as the controller is).  SIGTERM interrupts the
 * running operation (pl_interrupt), as the controller's shutdown would.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/proc.h"
#include "pulumi/pulumi.h"

#define MAX_LIST 32

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static long jnum(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsNumber(v) ? (long)v->valuedouble : 0;
}

static int jbool(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsTrue(v) || (cJSON_IsNumber(v) && v->valuedouble != 0);
}

static char *read_spec_text(const char *path)
{
	struct err e = { 0 };
	char *text = NULL;
	size_t len = 0, cap = 0;

	if (strcmp(path, "-") != 0) {
		if (fs_read_file(path, 16 << 20, &text, &len, &e) < 0)
			fprintf(stderr, "pl_driver: %s\n", e.msg);
		return text;
	}
	for (;;) {
		if (len + 4096 + 1 > cap) {
			char *n = realloc(text, cap = cap ? cap * 2 : 8192);
			if (n == NULL) {
				free(text);
				return NULL;
			}
			text = n;
		}
		size_t got = fread(text + len, 1, cap - len - 1, stdin);
		len += got;
		if (got == 0)
			break;
	}
	text[len] = '\0';
	return text;
}

/* Fills spec from the JSON (strings stay owned by the cJSON tree). */
static int spec_from_json(const cJSON *j, struct pl_spec *s, struct pl_env_var *env,
			  struct pl_config_item *cfg)
{
	const cJSON *a;
	size_t n;

	s->pulumi_bin = jstr(j, "pulumi_bin");
	s->search_path = jstr(j, "search_path");
	s->home = jstr(j, "home");
	s->pulumi_home = jstr(j, "pulumi_home");
	s->workdir = jstr(j, "workdir");
	s->scratch_dir = jstr(j, "scratch_dir");
	s->stack = jstr(j, "stack");
	s->backend_url = jstr(j, "backend_url");
	s->secrets_provider = jstr(j, "secrets_provider");
	s->passphrase = jstr(j, "passphrase");
	s->min_version = jstr(j, "min_version");
	s->timeout_ms = jnum(j, "timeout_ms");
	s->grace_ms = jnum(j, "grace_ms");
	s->tail_max = (size_t)jnum(j, "tail_max");
	s->skip_version_check = jbool(j, "skip_version_check");
	n = 0;
	cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(j, "env")) {
		if (n == MAX_LIST)
			return -1;
		env[n].name = jstr(a, "name");
		env[n].value = jstr(a, "value");
		env[n].secret = jbool(a, "secret");
		n++;
	}
	s->env = env;
	s->n_env = n;
	n = 0;
	cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(j, "config")) {
		if (n == MAX_LIST)
			return -1;
		cfg[n].key = jstr(a, "key");
		cfg[n].value = jstr(a, "value");
		cfg[n].secret = jbool(a, "secret");
		cfg[n].structured = jbool(a, "structured");
		n++;
	}
	s->config = cfg;
	s->n_config = n;
	return 0;
}

static void on_progress(void *arg, const struct pl_step *step)
{
	cJSON *list = arg;
	char line[1024];

	snprintf(line, sizeof(line), "%s%s %s", step->failed ? "failed " : step->done ? "done " : "",
		 step->op, step->urn);
	cJSON_AddItemToArray(list, cJSON_CreateString(line));
}

static void print_result(const struct pl_result *r, cJSON *progress, int compact)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *s = cJSON_AddObjectToObject(o, "summary");
	char *text;

	cJSON_AddStringToObject(o, "status", pl_status_name(r->status));
	cJSON_AddNumberToObject(o, "exit_code", r->exit_code);
	cJSON_AddStringToObject(o, "message", r->message);
	cJSON_AddBoolToObject(s, "present", r->summary.present);
	cJSON_AddNumberToObject(s, "count", r->summary.count);
	cJSON_AddBoolToObject(s, "is_preview", r->summary.is_preview);
	cJSON_AddStringToObject(s, "result", r->summary.result);
	cJSON_AddNumberToObject(s, "duration_seconds", (double)r->summary.duration_seconds);
	if (r->summary.changes)
		cJSON_AddItemToObject(s, "changes", cJSON_Duplicate(r->summary.changes, 1));
	cJSON_AddNumberToObject(o, "steps", r->steps);
	cJSON_AddNumberToObject(o, "failed_steps", r->failed_steps);
	cJSON_AddNumberToObject(o, "policy_violations", r->policy_violations);
	if (r->lock.present) {
		cJSON *l = cJSON_AddObjectToObject(o, "lock");

		cJSON_AddStringToObject(l, "owner", r->lock.owner);
		cJSON_AddNumberToObject(l, "pid", (double)r->lock.pid);
		cJSON_AddStringToObject(l, "created", r->lock.created);
	}
	if (r->outputs)
		cJSON_AddItemToObject(o, "outputs", cJSON_Duplicate(r->outputs, 1));
	cJSON_AddBoolToObject(o, "has_secret_outputs", r->has_secret_outputs);
	if (r->outputs_plain)
		cJSON_AddItemToObject(o, "outputs_plain", cJSON_Duplicate(r->outputs_plain, 1));
	if (r->history)
		cJSON_AddItemToObject(o, "history", cJSON_Duplicate(r->history, 1));
	cJSON_AddStringToObject(o, "stdout_tail", r->out_tail ? r->out_tail : "");
	cJSON_AddStringToObject(o, "stderr_tail", r->err_tail ? r->err_tail : "");
	cJSON_AddItemToObject(o, "progress", progress);
	/* Whether a child of this process is a zombie nobody reaped (WNOWAIT:
	 * looking does not reap it). */
	{
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		cJSON_AddBoolToObject(o, "zombie_child",
				      waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0);
	}
	/* This process only, children excluded: the driver's own footprint. */
	{
		struct rusage ru;

		if (getrusage(RUSAGE_SELF, &ru) == 0)
			cJSON_AddNumberToObject(o, "self_maxrss_kb", (double)ru.ru_maxrss);
	}
	text = compact ? cJSON_PrintUnformatted(o) : cJSON_Print(o);
	if (text)
		puts(text);
	fflush(stdout);
	free(text);
	cJSON_Delete(o);
}

static int usage(void)
{
	fprintf(stderr, "usage: pl_driver --spec FILE|- [--log-level L] OP [--plan F] [--refresh]\n"
		"       [--expect-no-changes] [--preview-only] [--target U]... [--policy-pack D]...\n"
		"       [--show-secrets] [--revision R] [--with-config] [--subreaper]\n"
		"OP: version ensure config config-secrets install preview up refresh destroy cancel\n"
		"    outputs history serve\n");
	return 2;
}

struct args {
	const char *spec, *level, *op, *revision;
	struct pl_op_opts o;
	const char *targets[MAX_LIST], *packs[MAX_LIST];
	int show_secrets;
	int subreaper;                 /* --subreaper: as the controller (PID 1, or run's subreaper) */
	cJSON *last_up_outputs;        /* serve: the last up's r.outputs, for outputs-shown */
};

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{ "spec", required_argument, NULL, 's' }, { "log-level", required_argument, NULL, 'l' },
		{ "plan", required_argument, NULL, 'p' }, { "refresh", no_argument, NULL, 'r' },
		{ "expect-no-changes", no_argument, NULL, 'e' },
		{ "preview-only", no_argument, NULL, 'P' }, { "target", required_argument, NULL, 't' },
		{ "policy-pack", required_argument, NULL, 'k' },
		{ "show-secrets", no_argument, NULL, 'S' }, { "revision", required_argument, NULL, 'R' },
		{ "with-config", no_argument, NULL, 'C' }, { "subreaper", no_argument, NULL, 'Z' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': a->spec = optarg; break;
		case 'l': a->level = optarg; break;
		case 'p': a->o.plan_file = optarg; break;
		case 'r': a->o.refresh = 1; break;
		case 'e': a->o.expect_no_changes = 1; break;
		case 'P': a->o.preview_only = 1; break;
		case 'S': a->show_secrets = 1; break;
		case 'C': a->o.with_config = 1; break;
		case 'Z': a->subreaper = 1; break;
		case 'R': a->revision = optarg; break;
		case 't':
			if (a->o.n_targets == MAX_LIST)
				return -1;
			a->targets[a->o.n_targets++] = optarg;
			break;
		case 'k':
			if (a->o.n_policy_packs == MAX_LIST)
				return -1;
			a->packs[a->o.n_policy_packs++] = optarg;
			break;
		default:
			return -1;
		}
	}
	if (a->spec == NULL || optind != argc - 1)
		return -1;
	a->op = argv[optind];
	a->o.targets = a->targets;
	a->o.policy_packs = a->packs;
	return 0;
}

static int dispatch(struct pl_stack *st, struct args *a, struct pl_result *r)
{
	const char *op = a->op;

	if (strcmp(op, "version") == 0) return pl_check_version(st, r);
	if (strcmp(op, "ensure") == 0) return pl_ensure_stack(st, r);
	if (strcmp(op, "config") == 0) return pl_apply_config(st, r);
	if (strcmp(op, "config-secrets") == 0) return pl_apply_secret_config(st, r);
	if (strcmp(op, "install") == 0) return pl_install(st, a->revision, r);
	if (strcmp(op, "preview") == 0) return pl_preview(st, &a->o, r);
	if (strcmp(op, "up") == 0) return pl_up(st, &a->o, r);
	if (strcmp(op, "refresh") == 0) return pl_refresh(st, &a->o, r);
	if (strcmp(op, "destroy") == 0) return pl_destroy(st, &a->o, r);
	if (strcmp(op, "cancel") == 0) return pl_cancel(st, r);
	if (strcmp(op, "outputs") == 0) return pl_outputs(st, a->show_secrets, r);
	if (strcmp(op, "outputs-shown") == 0) return pl_outputs_shown(st, a->last_up_outputs, r);
	if (strcmp(op, "history") == 0) return pl_last_history(st, r);
	return -2;
}

/* "serve": one operation name per stdin line, one compact JSON result per
 * stdout line, on the same open stack, the way the controller keeps a
 * driver handle across reconciliations (so `pulumi version` runs once). */
static int serve(struct pl_stack *st, struct args *a)
{
	char line[256];
	int rc = 0;

	while (fgets(line, sizeof(line), stdin) != NULL) {
		struct pl_result r = { 0 };
		cJSON *progress = cJSON_CreateArray();

		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '\0')
			continue;
		a->op = line;
		a->o.progress = on_progress;
		a->o.progress_arg = progress;
		if (dispatch(st, a, &r) == -2) {
			cJSON_Delete(progress);
			fprintf(stderr, "pl_driver: unknown operation %s\n", line);
			rc = -1;
			continue;
		}
		print_result(&r, progress, 1);
		if (strcmp(line, "up") == 0) {
			cJSON_Delete(a->last_up_outputs);
			a->last_up_outputs = cJSON_Duplicate(r.outputs, 1);
		}
		pl_result_free(&r);
	}
	cJSON_Delete(a->last_up_outputs);
	a->last_up_outputs = NULL;
	return rc;
}

/* SIGTERM interrupts the running operation, as the controller's shutdown
 * does (pl_interrupt is an atomic store: async-signal-safe). */
static struct pl_stack *running;

static void on_sigterm(int sig)
{
	(void)sig;
	if (running)
		pl_interrupt(running);
}

int main(int argc, char **argv)
{
	struct args a = { 0 };
	struct pl_env_var env[MAX_LIST];
	struct pl_config_item cfg[MAX_LIST];
	struct pl_spec spec = { 0 };
	struct pl_result r = { 0 };
	struct err e = { 0 };
	enum log_level lvl = LOG_INFO;
	struct pl_stack *st;
	cJSON *j, *progress;
	char *text;
	int rc;

	if (parse_args(argc, argv, &a) < 0)
		return usage();
	if (a.subreaper && proc_become_subreaper(&e) < 0) {
		fprintf(stderr, "pl_driver: %s\n", e.msg);
		return 1;
	}
	if (a.level && log_parse_level(a.level, &lvl) < 0)
		return usage();
	log_setup(lvl, LOG_JSON, stderr);
	text = read_spec_text(a.spec);
	j = text ? cJSON_Parse(text) : NULL;
	free(text);
	if (!cJSON_IsObject(j) || spec_from_json(j, &spec, env, cfg) < 0) {
		fprintf(stderr, "pl_driver: %s: not a valid spec\n", a.spec);
		cJSON_Delete(j);
		return 2;
	}
	st = pl_open(&spec, &e);
	if (st == NULL) {
		fprintf(stderr, "pl_driver: %s\n", e.msg);
		cJSON_Delete(j);
		return 1;
	}
	running = st;
	signal(SIGTERM, on_sigterm);
	if (strcmp(a.op, "serve") == 0) {
		rc = serve(st, &a);
	} else {
		progress = cJSON_CreateArray();
		a.o.progress = on_progress;
		a.o.progress_arg = progress;
		rc = dispatch(st, &a, &r);
		if (rc == -2) {
			cJSON_Delete(progress);
			pl_close(st);
			cJSON_Delete(j);
			return usage();
		}
		print_result(&r, progress, 0);
		pl_result_free(&r);
	}
	signal(SIGTERM, SIG_DFL);
	running = NULL;
	pl_close(st);
	cJSON_Delete(j);
	return rc == 0 ? 0 : 1;
}
