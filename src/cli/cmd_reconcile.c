/*
 * cmd_reconcile.c - `pulumi-controller reconcile`, `suspend` and
 * `resume`: the Flux reconcile-request protocol from the command line.
 *
 * reconcile writes a fresh token (the time, RFC 3339 with nanoseconds, as
 * `flux reconcile` does) into the annotation reconcile.fluxcd.io/requestedAt
 * with a merge patch; the controller runs a pass for a new token and copies
 * it into status.lastHandledReconcileAt in the status write that ends the
 * pass, with that pass's conditions.  So once the token is handled, the Ready
 * condition beside it is the outcome.  With --with-source the Flux source is
 * asked first, the same way, and source-controller answers the same way.
 * Waiting is a GET a second: it costs the server nothing a watch would not,
 * and a dropped connection costs nothing either.  SIGINT/SIGTERM end the
 * wait (the request stays on the object) and then the process, by that
 * signal (cli_exit).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/stackctl.h"

#define POLL_MS 1000L
#define DEFAULT_TIMEOUT_MS (5L * 60 * 1000)

/* ------------------------------------------------------------ waiting */

/* The terminal's width, for a progress line that must not wrap. */
static size_t terminal_width(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10)
		return ws.ws_col;
	return 80;
}

/* One progress line, rewritten in place: what the object says now. */
static void show_progress(const char *kind, const char *ns, const char *name, int64_t waited_ms,
    const cJSON *obj, const char *problem)
{
	const cJSON *ready = stackctl_condition(obj, "Ready");
	const char *reason = stackctl_str(ready, "reason"), *msg = stackctl_str(ready, "message");
	char age[16], line[1200], shown[1200 * 4];
	size_t width = terminal_width() - 1, w = 0, i = 0;

	stackctl_human_duration(waited_ms / 1000, age, sizeof(age));
	snprintf(line, sizeof(line), "◎ waiting for %s %s/%s (%s): %s%s%s", kind, ns, name, age,
	    problem ? problem : reason ? reason : "not handled yet", !problem && msg ? ": " : "",
	    !problem && msg ? msg : "");
	log_printable(line, shown, sizeof(shown));
	/* Cut at the terminal's width, counted in characters, not bytes. */
	for (; shown[i] && w < width; i++)
		if (((unsigned char)shown[i] & 0xC0) != 0x80)
			w++;
	while (shown[i] && ((unsigned char)shown[i] & 0xC0) == 0x80)
		i++;
	shown[i] = '\0';
	printf("\r\033[K%s", shown);
	fflush(stdout);
}

static void clear_progress(void)
{
	printf("\r\033[K");
	fflush(stdout);
}

/* Failures the wait cannot outlast: the object is gone, or we may not read it. */
static int hopeless(const struct err *e)
{
	return e->code == ERR_NOTFOUND || e->code == ERR_AUTH;
}

/* One line of the command's report, escaped: results on stdout, "✗ ..."
 * failures on stderr (after what stdout holds so far). */
static void say(FILE *out, const char *prefix, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(FILE *out, const char *prefix, const char *fmt, ...)
{
	char msg[ERR_MSG_MAX * 2], shown[ERR_MSG_MAX * 8];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fflush(stdout);
	fprintf(out, "%s%s\n", prefix, log_printable(msg, shown, sizeof(shown)));
	fflush(out);
}

#define fail_line(...) say(stderr, "✗ ", __VA_ARGS__)
#define ok_line(...) say(stdout, "", __VA_ARGS__)

/*
 * Waits until the object's status.lastHandledReconcileAt equals token,
 * GETting it every second for at most timeout_ms, with a progress line
 * when stdout is a terminal.  Returns 0 with *out set (the object then;
 * caller frees), -1 on timeout (ERR_TIMEOUT, the message says where the
 * object stands) or an API failure that cannot get better (not found, not
 * allowed), e set.
 */
static int wait_handled(struct stackctl *sc, const struct kube_resource *r, const char *ns,
    const char *name, const char *token, long timeout_ms, cJSON **out, struct err *e)
{
	int64_t start = clock_mono_ms(), deadline = start + timeout_ms;
	int tty = isatty(STDOUT_FILENO), rc = -1;
	char problem[ERR_MSG_MAX] = "";
	cJSON *last = NULL;
	/* Ctrl-C ends the wait at once, with the terminal line cleaned up. */
	const volatile int *stop = cli_cancel_on_signals();

	/* Only now, with the handler in place: a script that reads this line
	 * and sends SIGINT must see the wait end, not the default kill. */
	if (!tty)
		ok_line("◎ waiting for %s %s/%s to be reconciled", r->kind, ns, name);
	*out = NULL;
	for (;;) {
		int64_t now = clock_mono_ms(), left = deadline - now;
		struct err ge = { 0 };
		cJSON *obj;
		const char *handled;

		if (*stop) {
			err_set(e, ERR_CANCELED, "interrupted");
			break;
		}
		if (left <= 0) {
			err_set(e, ERR_TIMEOUT, "%s%s", problem[0] ? "the last request failed: " : "", problem);
			break;
		}
		/* No request may outlast the deadline, and none is retried: the
		 * next poll is the retry. */
		kube_request_limits(left < sc->request_timeout_ms ? (long)left : sc->request_timeout_ms, 0);
		obj = kube_get(sc->client, r, ns, name, NULL, &ge);
		kube_request_limits(0, -1);
		if (obj == NULL && hopeless(&ge)) {
			*e = ge;
			break;
		}
		if (obj == NULL || !cJSON_IsObject(obj)) {
			snprintf(problem, sizeof(problem), "%s", obj ? "the answer is not an object" : ge.msg);
			cJSON_Delete(obj);
		} else {
			problem[0] = '\0';
			cJSON_Delete(last);
			last = obj;
			handled = stackctl_str(obj, "status.lastHandledReconcileAt");
			if (str_eq(handled, token)) {
				*out = last;
				last = NULL;
				rc = 0;
				break;
			}
		}
		if (tty)
			show_progress(r->kind, ns, name, clock_mono_ms() - start, last, problem[0] ? problem : NULL);
		left = deadline - clock_mono_ms();
		clock_sleep_cancelable_ms(left < POLL_MS ? (long)(left > 0 ? left : 0) : POLL_MS, stop);
	}
	if (tty)
		clear_progress();
	if (rc < 0 && e->code == ERR_TIMEOUT && last != NULL) {
		/* Say where it stands: the condition the controller last wrote. */
		const cJSON *ready = stackctl_condition(last, "Ready");
		const char *prev = stackctl_str(last, "status.lastHandledReconcileAt");
		char msg[ERR_MSG_MAX];
		snprintf(msg, sizeof(msg), "last handled request: %s; Ready: %s %s: %s%s%s", prev ? prev : "none",
		    stackctl_str(ready, "status") ? stackctl_str(ready, "status") : "(none)",
		    stackctl_str(ready, "reason") ? stackctl_str(ready, "reason") : "",
		    stackctl_str(ready, "message") ? stackctl_str(ready, "message") : "",
		    problem[0] ? "; then the reads failed: " : "", problem);
		snprintf(e->msg, sizeof(e->msg), "%s", msg);
	}
	cJSON_Delete(last);
	return rc;
}

static const char *or_dash(const char *s)
{
	return s && *s ? s : "-";
}

/* Reports a failed wait; the exit status. */
static int wait_failed(const char *cmd, const char *kind, const char *ns, const char *name,
    const char *timeout_text, const struct err *e)
{
	if (e->code == ERR_CANCELED)
		fail_line("interrupted: %s %s/%s keeps the reconcile request; the controller handles it all the "
		    "same", kind, ns, name);
	else if (e->code == ERR_TIMEOUT)
		fail_line("timed out after %s waiting for %s %s/%s to handle the reconcile request; is the "
		    "controller running and watching namespace %s? (%s)", timeout_text, kind, ns, name, ns, e->msg);
	else
		stackctl_print_object_error(cmd, "get", kind, ns, name, e);
	return 1;
}

/* What the Stack's status says once the request is handled. */
static int stack_outcome(const cJSON *st, const char *ns, const char *name)
{
	const cJSON *ready = stackctl_condition(st, "Ready"), *stalled = stackctl_condition(st, "Stalled");
	const char *rs = stackctl_str(ready, "status");
	char changes[256];

	if (str_eq(rs, "True")) {
		stackctl_changes(stackctl_obj(st, "status.lastUpdate.resourceChanges"), changes, sizeof(changes));
		ok_line("✔ Stack %s/%s reconciled: Ready at revision %s (last update: %s %s, %s)", ns, name,
		    or_dash(stackctl_str(st, "status.lastAppliedRevision")),
		    or_dash(stackctl_str(st, "status.lastUpdate.type")),
		    or_dash(stackctl_str(st, "status.lastUpdate.state")), changes);
		return 0;
	}
	if (ready == NULL) {
		fail_line("Stack %s/%s reconciliation failed: the controller wrote no Ready condition", ns, name);
		return 1;
	}
	fail_line("Stack %s/%s reconciliation failed%s: %s: %s", ns, name,
	    str_eq(stackctl_str(stalled, "status"), "True") ?
	    " (Stalled: it is not retried until something changes)" : "",
	    or_dash(stackctl_str(ready, "reason")), or_dash(stackctl_str(ready, "message")));
	return 1;
}

/* After the annotation: waits and prints the outcome; the exit status. */
static int wait_outcome(struct stackctl *sc, const char *cmd, const struct stackctl_ref *ref,
    const char *token, long timeout_ms, const char *timeout_text)
{
	struct err e = { 0 };
	cJSON *st = NULL;
	int rc;

	if (wait_handled(sc, &stackctl_stack_res, ref->ns, ref->name, token, timeout_ms, &st, &e) < 0)
		return wait_failed(cmd, "Stack", ref->ns, ref->name, timeout_text, &e);
	rc = stack_outcome(st, ref->ns, ref->name);
	cJSON_Delete(st);
	return rc;
}

/* ------------------------------------------------------------ the source */

struct source {
	struct kube_resource res;
	char group[64], version[32], plural[32], kind[32], name[STACKCTL_NAME_MAX + 1];
};

/* The Flux source object of a Stack: fluxSource.sourceRef, or the
 * GitRepository <name>-program the controller keeps for programRef and
 * projectRepo.
 * 1 found, 0 none (ociSource), -1 after printing why not. */
static int stack_source(const cJSON *st, const struct stackctl_ref *ref, struct source *s)
{
	static const struct { const char *kind, *plural; } kinds[] = {
		{ "GitRepository", "gitrepositories" }, { "OCIRepository", "ocirepositories" },
		{ "Bucket", "buckets" },
	};
	const char *api = stackctl_str(st, "spec.fluxSource.sourceRef.apiVersion");
	const char *kind = stackctl_str(st, "spec.fluxSource.sourceRef.kind");
	const char *name = stackctl_str(st, "spec.fluxSource.sourceRef.name");
	const char *slash;

	memset(s, 0, sizeof(*s));
	if (stackctl_obj(st, "spec.fluxSource") == NULL) {
		if (stackctl_obj(st, "spec.programRef") == NULL && stackctl_str(st, "spec.projectRepo") == NULL)
			return 0;
		api = "source.toolkit.fluxcd.io/v1";
		kind = "GitRepository";
		snprintf(s->name, sizeof(s->name), "%.*s-program", STACKCTL_NAME_MAX - 8, ref->name);
		name = s->name;
	}
	slash = api ? strchr(api, '/') : NULL;
	if (slash == NULL || kind == NULL || name == NULL || !stackctl_valid_name(name, STACKCTL_NAME_MAX) ||
	    (size_t)(slash - api) >= sizeof(s->group) || strlen(slash + 1) >= sizeof(s->version)) {
		fail_line("Stack %s/%s: spec.fluxSource.sourceRef does not name a source (apiVersion, kind, name)",
		    ref->ns, ref->name);
		return -1;
	}
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strcmp(kind, kinds[i].kind) == 0) {
			snprintf(s->group, sizeof(s->group), "%.*s", (int)(slash - api), api);
			snprintf(s->version, sizeof(s->version), "%s", slash + 1);
			snprintf(s->plural, sizeof(s->plural), "%s", kinds[i].plural);
			snprintf(s->kind, sizeof(s->kind), "%s", kinds[i].kind);
			if (name != s->name)
				snprintf(s->name, sizeof(s->name), "%s", name);
			s->res = (struct kube_resource){ s->group, s->version, s->plural, s->kind, 1 };
			return 1;
		}
	fail_line("Stack %s/%s: --with-source: the source kind \"%s\" is not a Flux source", ref->ns, ref->name,
	    kind);
	return -1;
}

/* A merge patch setting the request annotation (and, for resume, suspend). */
static char *request_patch(const char *token, int unsuspend)
{
	cJSON *p = cJSON_CreateObject();
	char *text;

	cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"), "annotations"),
	    STACKCTL_ANN_REQUESTED, token);
	if (unsuspend)
		cJSON_AddBoolToObject(cJSON_AddObjectToObject(p, "spec"), "suspend", 0);
	text = cJSON_PrintUnformatted(p);
	cJSON_Delete(p);
	return text;
}

/* Asks the source to reconcile and waits for its answer; the exit status
 * (0 when it is Ready afterwards). */
static int reconcile_source(struct stackctl *sc, const char *ns, const struct source *s,
    int64_t deadline, const char *timeout_text)
{
	char token[64], *patch;
	struct err e = { 0 };
	cJSON *obj, *res;
	const cJSON *ready;
	int64_t left;

	if ((obj = kube_get(sc->client, &s->res, ns, s->name, NULL, &e)) == NULL) {
		stackctl_print_object_error("reconcile", "get", s->kind, ns, s->name, &e);
		return 1;
	}
	if (stackctl_true(obj, "spec.suspend")) {
		fail_line("%s %s/%s is suspended: resume it first (flux resume source)", s->kind, ns, s->name);
		cJSON_Delete(obj);
		return 1;
	}
	cJSON_Delete(obj);
	ok_line("► annotating %s %s/%s", s->kind, ns, s->name);
	stackctl_request_token(token, sizeof(token));
	if ((patch = request_patch(token, 0)) == NULL)
		return 1;
	res = kube_patch(sc->client, &s->res, ns, s->name, NULL, KUBE_PATCH_MERGE, patch, STACKCTL_FIELD_MANAGER,
	    0, &e);
	free(patch);
	if (res == NULL) {
		stackctl_print_object_error("reconcile", "patch", s->kind, ns, s->name, &e);
		return 1;
	}
	cJSON_Delete(res);
	left = deadline - clock_mono_ms();
	if (wait_handled(sc, &s->res, ns, s->name, token, left > 0 ? (long)left : 1, &obj, &e) < 0)
		return wait_failed("reconcile", s->kind, ns, s->name, timeout_text, &e);
	ready = stackctl_condition(obj, "Ready");
	if (!str_eq(stackctl_str(ready, "status"), "True")) {
		fail_line("%s %s/%s reconciliation failed: %s: %s", s->kind, ns, s->name,
		    or_dash(stackctl_str(ready, "reason")), or_dash(stackctl_str(ready, "message")));
		cJSON_Delete(obj);
		return 1;
	}
	ok_line("✔ %s %s/%s: fetched revision %s", s->kind, ns, s->name,
	    or_dash(stackctl_str(obj, "status.artifact.revision")));
	cJSON_Delete(obj);
	return 0;
}

/* ------------------------------------------------------------ commands */

/* The one reconcile, suspend or resume of this process: the tables point
 * into it. */
static struct ctl_args {
	struct stackctl_flags f;
	struct stackctl_ref ref;
	int with_source, wait;
	long timeout_ms;
	const char *timeout_text;  /* the flag as given, for messages */
} args;

static int timeout_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (duration_parse_ms(arg, &args.timeout_ms) < 0 || args.timeout_ms <= 0) {
		cli_errorf("%s: invalid --timeout \"%s\" (a duration such as 90s or 5m)", cmd, arg);
		return -1;
	}
	args.timeout_text = arg;
	return 0;
}

/* --wait, --wait=true, --wait=false. */
static int wait_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (arg != NULL && strcmp(arg, "true") && strcmp(arg, "false")) {
		cli_errorf("%s: invalid --wait \"%s\" (true or false)", cmd, arg);
		return -1;
	}
	args.wait = arg == NULL || strcmp(arg, "true") == 0;
	return 0;
}

static int no_wait_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	args.wait = 0;
	return 0;
}

/* The three commands' flags are refused by the others with a pointer to
 * their --help, not as unknown. */
#define REFUSE_WITH_SOURCE CLI_REFUSE(CLI_OPT_BOOL, "with-source", 0)
#define REFUSE_WAIT CLI_REFUSE(CLI_OPT_CALLBACK, "wait", CLI_OPTIONAL_ARG), \
	CLI_REFUSE(CLI_OPT_BOOL, "no-wait", 0)

static const char reconcile_usage[] =
	    "Usage: pulumi-controller reconcile [NAMESPACE/]NAME [flags]\n"
	    "\n"
	    "Asks the controller to reconcile the Stack now (the annotation\n"
	    "reconcile.fluxcd.io/requestedAt, as `flux reconcile` sets it), waits until\n"
	    "the controller has handled the request (status.lastHandledReconcileAt), and\n"
	    "prints the outcome: the revision applied, or why the Stack is not Ready.\n"
	    "A live progress line is shown when stdout is a terminal.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 the Stack is Ready after the reconcile, 1 it is not (its reason\n"
	    "and message are printed), the wait timed out, the Stack is suspended or does\n"
	    "not exist, or an API request failed; 2 bad usage.\n";

static const struct cli_opt reconcile_opts[] = {
	CLI_BOOL(0, "with-source", &args.with_source, "first ask the Stack's Flux source (GitRepository,\n"
	    "OCIRepository, Bucket; for programRef its GitRepository)\nto reconcile, and wait for its new artifact"),
	CLI_CALLBACK(0, "timeout", NULL, "D", "how long to wait for it all (default 5m)", timeout_flag),
	REFUSE_WAIT,
	STACKCTL_COMMON_OPTS(&args.f),
	CLI_END,
};

static const struct cli_cmd reconcile_cmd = STACKCTL_CMD("reconcile", reconcile_usage, reconcile_opts);

static const char suspend_usage[] =
	    "Usage: pulumi-controller suspend [NAMESPACE/]NAME [flags]\n"
	    "\n"
	    "Sets spec.suspend: the controller runs nothing for the Stack and leaves its\n"
	    "status as it was, until `pulumi-controller resume`.  A running update is not\n"
	    "interrupted.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 suspended, 1 the Stack does not exist or the request failed,\n"
	    "2 bad usage.\n";

static const struct cli_opt suspend_opts[] = {
	REFUSE_WITH_SOURCE,
	CLI_REFUSE(CLI_OPT_STRING, "timeout", 0),
	REFUSE_WAIT,
	STACKCTL_COMMON_OPTS(&args.f),
	CLI_END,
};

static const struct cli_cmd suspend_cmd = STACKCTL_CMD("suspend", suspend_usage, suspend_opts);

static const char resume_usage[] =
	    "Usage: pulumi-controller resume [NAMESPACE/]NAME [flags]\n"
	    "\n"
	    "Clears spec.suspend and requests a reconcile in the same write, then waits\n"
	    "for it as `pulumi-controller reconcile` does.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 resumed (and, when waiting, Ready), 1 not Ready after the\n"
	    "reconcile, the wait timed out, the Stack does not exist or a request failed,\n"
	    "2 bad usage.\n";

static const struct cli_opt resume_opts[] = {
	{ .kind = CLI_OPT_CALLBACK, .name = "wait", .cb = wait_flag, .flags = CLI_OPTIONAL_ARG | CLI_HIDDEN },
	{ .kind = CLI_OPT_CALLBACK, .name = "no-wait", .cb = no_wait_flag, .flags = CLI_NO_ARG,
	  .label = "--wait=false, --no-wait", .help = "do not wait for the reconcile" },
	CLI_CALLBACK(0, "timeout", NULL, "D", "how long to wait (default 5m)", timeout_flag),
	REFUSE_WITH_SOURCE,
	STACKCTL_COMMON_OPTS(&args.f),
	CLI_END,
};

static const struct cli_cmd resume_cmd = STACKCTL_CMD("resume", resume_usage, resume_opts);

/* The flags and the one NAME of reconcile, suspend or resume into `args`,
 * and the connection: CLI_GO_ON with sc open, or the exit status. */
static int open_ctl(const struct cli_cmd *cmd, int argc, char **argv, struct stackctl *sc)
{
	args.wait = 1;
	args.timeout_ms = DEFAULT_TIMEOUT_MS;
	args.timeout_text = "5m";
	return stackctl_open(cmd, argc, argv, &args.f, 1, &args.ref, sc);
}

int cmd_reconcile(int argc, char **argv)
{
	struct ctl_args *a = &args;
	struct stackctl sc;
	struct source src;
	char token[64], *patch;
	int64_t deadline;
	cJSON *st;
	int rc = open_ctl(&reconcile_cmd, argc, argv, &sc), has_source;

	if (rc != CLI_GO_ON)
		return rc;
	deadline = clock_mono_ms() + a->timeout_ms;
	rc = 1;
	if ((st = stackctl_get_stack(&sc, "reconcile", &a->ref)) == NULL)
		goto out;
	if (stackctl_true(st, "spec.suspend")) {
		/* As flux: a suspended object would never answer. */
		fail_line("Stack %s/%s is suspended: resume it first (pulumi-controller resume %s/%s)", a->ref.ns,
		    a->ref.name, a->ref.ns, a->ref.name);
		goto out;
	}
	if (a->with_source) {
		has_source = stack_source(st, &a->ref, &src);
		if (has_source < 0)
			goto out;
		if (has_source == 0)
			ok_line("► Stack %s/%s has an ociSource: no source object; the controller resolves the "
			    "reference itself (every ociSource.interval)", a->ref.ns, a->ref.name);
		else if (reconcile_source(&sc, a->ref.ns, &src, deadline, a->timeout_text) != 0)
			goto out;
	}
	ok_line("► annotating Stack %s/%s", a->ref.ns, a->ref.name);
	stackctl_request_token(token, sizeof(token));
	if ((patch = request_patch(token, 0)) == NULL)
		goto out;
	rc = stackctl_patch_stack(&sc, "reconcile", &a->ref, patch) < 0;
	free(patch);
	if (rc == 0) {
		int64_t left = deadline - clock_mono_ms();
		rc = wait_outcome(&sc, "reconcile", &a->ref, token, left > 0 ? (long)left : 1, a->timeout_text);
	}
out:
	cJSON_Delete(st);
	stackctl_close(&sc);
	return cli_exit(rc);
}

int cmd_suspend(int argc, char **argv)
{
	struct ctl_args *a = &args;
	struct stackctl sc;
	int rc = open_ctl(&suspend_cmd, argc, argv, &sc);

	if (rc != CLI_GO_ON)
		return rc;
	rc = stackctl_patch_stack(&sc, "suspend", &a->ref, "{\"spec\":{\"suspend\":true}}") < 0;
	if (rc == 0)
		ok_line("✔ Stack %s/%s suspended", a->ref.ns, a->ref.name);
	stackctl_close(&sc);
	return rc;
}

int cmd_resume(int argc, char **argv)
{
	struct ctl_args *a = &args;
	struct stackctl sc;
	char token[64], *patch;
	int rc = open_ctl(&resume_cmd, argc, argv, &sc);

	if (rc != CLI_GO_ON)
		return rc;
	stackctl_request_token(token, sizeof(token));
	rc = 1;
	if ((patch = request_patch(token, 1)) != NULL) {
		rc = stackctl_patch_stack(&sc, "resume", &a->ref, patch) < 0;
		free(patch);
	}
	if (rc == 0) {
		ok_line("✔ Stack %s/%s resumed", a->ref.ns, a->ref.name);
		if (a->wait)
			rc = wait_outcome(&sc, "resume", &a->ref, token, a->timeout_ms, a->timeout_text);
	}
	stackctl_close(&sc);
	return cli_exit(rc);
}
