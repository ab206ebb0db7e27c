/*
 * pl_call.c - one CLI call of the pulumi driver, made by every operation
 * through pl_call(): it builds the child's environment from nothing (scope
 * decides which Automation API variables are present,
 * reference/pulumi-cli.md §1.3/§1.6), prepends --non-interactive as the Go
 * SDK does, refuses to put a known secret on the command line, runs the CLI
 * under proc_run with the stack's timeout, tails the --event-log file for
 * progress while it runs, classifies the outcome (pl_classify.c), masks the
 * output tails, logs the call, counts it (pulumi_controller_pulumi_cli_*
 * metrics, by command and outcome; commands are the driver's own fixed
 * names) and prunes the CLI's own log files.
 */
#include "pulumi/pl_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/metrics.h"

/* The CLI writes a log file into $PULUMI_HOME/logs for every command
 * (v3.274.1: `pulumi-<time>-<command>.log`, `<org>+<project>+<stack>-<time>.log`)
 * and never removes one; PULUMI_HOME is shared by every stack, so a controller
 * would fill its disk.  After each call only this many, the newest, are kept. */
#define CLI_LOGS_KEEP    64

/* One CLI call: a few seconds for a select, up to the update timeout. */
static const double CLI_BUCKETS[] = { 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600 };

static struct metric_desc m_calls = { "pulumi_controller_pulumi_cli_invocations_total",
	"pulumi CLI processes run, by command and outcome (ok, failed, conflict, timeout...).",
	METRIC_COUNTER, { "command", "result" }, NULL, 0, 0, NULL };
static struct metric_desc m_call_time = { "pulumi_controller_pulumi_cli_duration_seconds",
	"How long each pulumi CLI process ran, by command.", METRIC_HISTOGRAM, { "command" }, CLI_BUCKETS,
	sizeof(CLI_BUCKETS) / sizeof(CLI_BUCKETS[0]), 0, NULL };

/* ---- results ---- */

void pl_result_free(struct pl_result *r)
{
	if (r == NULL)
		return;
	mem_release_all(cJSON, cJSON_Delete, r->summary.changes, r->outputs, r->outputs_plain, r->history);
	mem_free_all(r->out_tail, r->err_tail);
	memset(r, 0, sizeof(*r));
}

void pl_result_reset(struct pl_result *r)
{
	memset(r, 0, sizeof(*r));
	r->exit_code = -1;
}

/* Keeps the redacted tails of the latest call only. */
static void set_tails(struct pl_stack *st, struct pl_result *r, const struct proc_result *pr)
{
	free(r->out_tail);
	free(r->err_tail);
	r->out_tail = pl_redact_tail(pr->out, pr->out_total > pr->out_len,
				     (const char *const *)st->secrets.v, st->secrets.n);
	r->err_tail = pl_redact_tail(pr->errout, pr->err_total > pr->err_len,
				     (const char *const *)st->secrets.v, st->secrets.n);
}

int pl_fail_internal(struct pl_stack *st, struct pl_result *r, const char *op, const char *msg)
{
	r->status = PL_INTERNAL;
	pl_set_message(r, op, msg, (const char *const *)st->secrets.v, st->secrets.n);
	log_error("pulumi driver failure", "stack", st->stack, "op", op, "message", r->message, NULL);
	return -1;
}

/* ---- environment and argv ---- */

static void build_env(struct pl_stack *st, enum pl_scope scope, int experimental, struct pl_strv *env)
{
	/* As the SDK does for an absolute binary: its directory goes first on
	 * PATH so the language hosts shipped beside it are found. */
	const char *slash = strrchr(st->bin, '/');

	if (slash && slash != st->bin)
		pl_strv_addf(env, "PATH=%.*s:%s", (int)(slash - st->bin), st->bin, st->search_path);
	else
		pl_strv_addf(env, "PATH=%s", st->search_path);
	pl_strv_addf(env, "HOME=%s", st->home);
	pl_strv_addf(env, "PULUMI_HOME=%s", st->pulumi_home);
	pl_strv_add(env, "PULUMI_SKIP_UPDATE_CHECK=true");
	if (scope == PL_SCOPE_PROBE)
		return;
	pl_strv_add(env, "PULUMI_AUTOMATION_API=true");
	if (scope == PL_SCOPE_STACK)
		pl_strv_add(env, "PULUMI_DEBUG_COMMANDS=true");
	if (experimental)
		pl_strv_add(env, "PULUMI_EXPERIMENTAL=true");
	if (st->backend)
		pl_strv_addf(env, "PULUMI_BACKEND_URL=%s", st->backend);
	if (st->passphrase)
		pl_strv_addf(env, "PULUMI_CONFIG_PASSPHRASE=%s", st->passphrase);
	for (size_t i = 0; i < st->n_env; i++)
		pl_strv_addf(env, "%s=%s", st->env[i].name, st->env[i].value);
}

/* Values that are secret by where they came from (every key of an
 * envSecrets Secret is) but tell nobody anything: "true", "1", or the stack's
 * own name, which the Stack's spec shows.  The driver's own arguments hold
 * them (--run-program=true, --page 1, --stack dev), so refusing them would
 * stop every call of such a Stack, its destroy on deletion too. */
static int says_nothing(const struct pl_stack *st, const char *v)
{
	return strlen(v) < 4 || strcmp(v, "true") == 0 || strcmp(v, "false") == 0 ||
	    (st->stack != NULL && strcmp(v, st->stack) == 0);
}

/* A secret must never reach argv, where any process can read it from
 * /proc: refuse an argument equal to a secret or ending in "=<secret>". */
static const char *secret_in_argv(struct pl_stack *st, char *const *argv)
{
	for (; *argv; argv++) {
		const char *eq = strchr(*argv, '=');

		for (size_t i = 0; i < st->secrets.n; i++) {
			if (says_nothing(st, st->secrets.v[i]))
				continue;
			if (strcmp(*argv, st->secrets.v[i]) == 0 || (eq && strcmp(eq + 1, st->secrets.v[i]) == 0))
				return *argv;
		}
	}
	return NULL;
}

static char *join_args(char *const *argv)
{
	size_t len = 1;
	char *s, *w;

	for (char *const *a = argv; *a; a++)
		len += strlen(*a) + 1;
	s = malloc(len);
	if (s == NULL)
		return NULL;
	w = s;
	for (char *const *a = argv; *a; a++) {
		size_t l = strlen(*a);

		if (w != s)
			*w++ = ' ';
		memcpy(w, *a, l);
		w += l;
	}
	*w = '\0';
	return s;
}

/* ---- the event log, read while the CLI runs ---- */

struct evtail {
	const char *path;
	int fd;
	struct pl_events *ev;
};

static void evtail_pump(void *arg)
{
	struct evtail *t = arg;
	char buf[16384];
	ssize_t n;

	if (t->fd < 0)
		t->fd = open(t->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (t->fd < 0)
		return;
	while ((n = read(t->fd, buf, sizeof(buf))) > 0)
		pl_events_feed(t->ev, buf, (size_t)n);
}

/* ---- one CLI call ---- */

static void log_call(struct pl_stack *st, const struct pl_cmd *c, char *const *argv,
		     const struct pl_result *r, long ms)
{
	char *args = join_args(argv);
	char *masked = args ? pl_redact(args, (const char *const *)st->secrets.v, st->secrets.n) : NULL;
	char code[16], dur[24];

	snprintf(code, sizeof(code), "%d", r->exit_code);
	snprintf(dur, sizeof(dur), "%ld", ms);
	if (r->status == PL_OK || c->quiet_ok)
		log_debug("pulumi command", "stack", st->stack, "op", c->op, "args", masked ? masked : "",
			  "status", pl_status_name(r->status), "exit", code, "ms", dur, NULL);
	else
		log_warn("pulumi command failed", "stack", st->stack, "op", c->op, "args",
			 masked ? masked : "", "status", pl_status_name(r->status), "exit", code, "ms", dur,
			 "message", r->message, NULL);
	free(args);
	free(masked);
}

struct log_file {
	char *name;
	struct timespec mtime;
};

static int newest_first(const void *a, const void *b)
{
	const struct log_file *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
	return strcmp(y->name, x->name);
}

/* Removes all but the CLI_LOGS_KEEP newest *.log files of <pulumi_home>/logs.
 * Best effort: another stack's call may be pruning the same directory, so a
 * file already gone is fine, and a failure here never fails the call (a CLI
 * still writing to a removed file keeps writing to its open inode). */
static void prune_cli_logs(const char *pulumi_home)
{
	struct log_file *files = NULL;
	size_t n = 0, cap = 0;
	char dir[PATH_MAX];
	struct dirent *de;
	struct err e;
	DIR *d;
	int fd;

	if (fs_join(dir, sizeof(dir), pulumi_home, "logs", &e) < 0 || (d = opendir(dir)) == NULL)
		return;
	fd = dirfd(d);
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		struct stat sb;

		if (len < 5 || strcmp(de->d_name + len - 4, ".log") != 0 ||
		    fstatat(fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 128;
			struct log_file *nf = realloc(files, ncap * sizeof(*files));

			if (nf == NULL)
				break;
			files = nf;
			cap = ncap;
		}
		files[n].name = strdup(de->d_name);
		if (files[n].name == NULL)
			break;
		files[n++].mtime = sb.st_mtim;
	}
	if (n > CLI_LOGS_KEEP) {
		qsort(files, n, sizeof(*files), newest_first);
		for (size_t i = CLI_LOGS_KEEP; i < n; i++)
			unlinkat(fd, files[i].name, 0);
	}
	for (size_t i = 0; i < n; i++)
		free(files[i].name);
	free(files);
	closedir(d);
}

/* 0 when the call may start; else r says why not (-1): argv or env ran out
 * of memory, a known secret would show on the command line, or the driver
 * was interrupted. */
static int may_start(struct pl_stack *st, const struct pl_cmd *c, const struct pl_strv *argv,
		     const struct pl_strv *env, struct pl_result *r)
{
	if (argv->oom || env->oom || st->oom)
		return pl_fail_internal(st, r, c->op, "out of memory");
	if (secret_in_argv(st, argv->v) != NULL)
		return pl_fail_internal(st, r, c->op, "refusing to pass a secret value on the command line");
	if (atomic_load(&st->interrupt)) {
		r->status = PL_CANCELED;
		pl_set_message(r, c->op, "not started: the driver was interrupted", NULL, 0);
		return -1;
	}
	return 0;
}

static void fill_proc_spec(struct proc_spec *ps, struct pl_stack *st, const struct pl_cmd *c,
			   const struct pl_strv *argv, const struct pl_strv *env, struct evtail *tail)
{
	ps->file = st->bin;
	ps->argv = argv->v;
	ps->envp = env->v;
	ps->cwd = st->workdir;
	ps->stdin_data = c->stdin_data;
	ps->stdin_len = c->stdin_data ? strlen(c->stdin_data) : 0;
	ps->tail_max = c->tail_max ? c->tail_max : st->tail_max;
	ps->timeout_ms = st->timeout_ms;
	ps->grace_ms = st->grace_ms;
	ps->interrupt = &st->interrupt;
	if (c->ev) {
		ps->on_tick = evtail_pump;
		ps->tick_arg = tail;
	}
}

/* The event log's last lines into c->ev, then the log is removed. */
static void finish_event_log(const struct pl_cmd *c, struct evtail *tail)
{
	evtail_pump(tail);
	pl_events_finish(c->ev);
	if (tail->fd >= 0)
		close(tail->fd);
	/* Read whole: a diagnostic in it may hold a secret in clear. */
	unlink(c->evlog);
}

/* r from what the process did (pr, run_rc and e from proc_run) and, for an
 * operation with an event log, from its events. */
static void record_outcome(struct pl_stack *st, const struct pl_cmd *c, struct proc_result *pr,
			   int run_rc, const struct err *e, struct pl_result *r)
{
	pl_classify(c->op, pr, c->ev, (const char *const *)st->secrets.v, st->secrets.n, r);
	if (!pr->started) {
		/* Only a missing program is a missing CLI; a bad workdir is ours. */
		r->status = e->code == ERR_NOTFOUND ? PL_CLI_MISSING : PL_INTERNAL;
		pl_set_message(r, c->op, e->msg, (const char *const *)st->secrets.v, st->secrets.n);
	} else if (run_rc < 0) {
		/* Started, then the driver lost track of it (poll failed): the
		 * CLI was killed, whatever its output says. */
		r->status = PL_INTERNAL;
		pl_set_message(r, c->op, e->msg, (const char *const *)st->secrets.v, st->secrets.n);
	}
	set_tails(st, r, pr);
	if (c->ev) {
		cJSON_Delete(r->summary.changes);
		r->summary = c->ev->summary;
		c->ev->summary.changes = NULL;
		r->steps = c->ev->steps;
		r->failed_steps = c->ev->failed_steps;
		r->policy_violations = c->ev->policy_violations;
	}
}

static void warn_strays(const struct pl_cmd *c, const struct proc_result *pr)
{
	char n[16];

	if (pr->strays_killed <= 0)
		return;
	/* Plugins of a CLI that was killed (or that did not close them). */
	snprintf(n, sizeof(n), "%d", pr->strays_killed);
	log_warn("pulumi: killed processes the CLI left behind", "command", c->op, "count", n, NULL);
}

int pl_call(struct pl_stack *st, const struct pl_cmd *c, struct pl_strv *args,
		struct pl_result *r, char **out)
{
	struct pl_strv argv = { 0 }, env = { 0 };
	struct proc_result pr;
	struct evtail tail = { .path = c->evlog, .fd = -1, .ev = c->ev };
	struct proc_spec ps = { 0 };
	struct err e = { 0 };
	long t0 = clock_mono_ms();
	int run_rc;

	if (out)
		*out = NULL;
	pl_strv_add(&argv, st->bin);
	if (c->scope != PL_SCOPE_PROBE)
		pl_strv_add(&argv, "--non-interactive");
	for (size_t i = 0; i < args->n; i++)
		pl_strv_add(&argv, args->v[i]);
	build_env(st, c->scope, c->experimental, &env);
	if (may_start(st, c, &argv, &env, r) < 0) {
		pl_strv_free(&argv);
		pl_strv_free(&env);
		return -1;
	}
	if (c->evlog)
		unlink(c->evlog);
	fill_proc_spec(&ps, st, c, &argv, &env, &tail);
	run_rc = proc_run(&ps, &pr, &e);
	prune_cli_logs(st->pulumi_home);
	warn_strays(c, &pr);
	if (c->ev)
		finish_event_log(c, &tail);
	record_outcome(st, c, &pr, run_rc, &e, r);
	log_call(st, c, argv.v, r, clock_mono_ms() - t0);
	if (pr.started) {
		metric_add(metric_d(&m_calls), (const char *[]){ c->op, pl_status_name(r->status) }, 1);
		metric_observe(metric_d(&m_call_time), (const char *[]){ c->op }, (double)(clock_mono_ms() - t0) / 1000.0);
	}
	if (out && pr.started) {
		*out = pr.out;
		pr.out = NULL;
	}
	proc_result_free(&pr);
	pl_strv_free(&argv);
	pl_strv_free(&env);
	return r->status == PL_OK ? 0 : -1;
}
