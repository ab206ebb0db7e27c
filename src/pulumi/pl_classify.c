/*
 * pl_classify.c - turning a finished CLI call into a pl_status and a short
 * message fit for a Kubernetes status field.
 *
 * The CLI's exit codes changed meaning over versions (always 255 up to
 * v3.225, a taxonomy after; reference/pulumi-cli.md §3.3), so the texts the
 * SDKs match on (§3.1, §3.2) decide, with the event log for what texts
 * cannot say reliably (mandatory policy events).  Texts are masked with
 * pl_redact before any line is cut from them (a cut multi-line or long
 * secret would no longer match), and every message again before it leaves
 * this file.
 */
#include "pulumi/pl_internal.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_MAX 300

const char *pl_status_name(enum pl_status s)
{
	switch (s) {
	case PL_OK: return "ok";
	case PL_FAILED: return "failed";
	case PL_CONFLICT: return "conflict";
	case PL_NOT_FOUND: return "not-found";
	case PL_PROGRAM_ERROR: return "program-error";
	case PL_POLICY_VIOLATION: return "policy-violation";
	case PL_CHANGES_NOT_EXPECTED: return "changes-not-expected";
	case PL_PLAN_VIOLATION: return "plan-violation";
	case PL_TIMEOUT: return "timeout";
	case PL_CANCELED: return "canceled";
	case PL_CLI_MISSING: return "cli-missing";
	case PL_CLI_TOO_OLD: return "cli-too-old";
	case PL_INTERNAL: return "internal";
	}
	return "unknown";
}

static int contains(const char *hay, const char *needle)
{
	return hay != NULL && strstr(hay, needle) != NULL;
}

int pl_text_matches(const char *hay, const char *pattern)
{
	regex_t re;
	int ok;

	if (hay == NULL || regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		return 0;
	ok = regexec(&re, hay, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

/* Texts of a program that failed to compile or run: the SDKs' patterns
 * (§3.1) plus what Pulumi YAML may print ("an unhandled error occurred:
 * failed to evaluate template", "failed to discover plugin requirements").
 * Current Pulumi YAML mostly reports errors as diagnostics on the stack,
 * which the event log tells (pl_events.program_errors). */
static int program_error(const char *out, const char *err)
{
	static const char *const pats[] = {
		"Build FAILED.", ": syntax error:", ": undefined:", "Unable to compile TypeScript",
		"failed with an unhandled exception", "panic: runtime error",
		"an unhandled error occurred:", "go inline source runtime error",
		"failed to discover plugin requirements", "failed to evaluate template",
	};

	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
		if (contains(out, pats[i]) || contains(err, pats[i]))
			return 1;
	return 0;
}

/* Removes ANSI escape sequences (ESC [ ... final byte) in place. */
static void strip_ansi(char *s)
{
	char *w = s;

	if (s == NULL)
		return;
	for (char *r = s; *r; ) {
		if (r[0] == '\033' && r[1] == '[') {
			r += 2;
			while (*r && !(*r >= 0x40 && *r <= 0x7e))
				r++;
			if (*r)
				r++;
			continue;
		}
		*w++ = *r++;
	}
	*w = '\0';
}

/* The first "error: ..." line of a text, without the prefix. */
static int error_line(const char *text, char *out, size_t outlen)
{
	const char *p = text;

	while (p && *p) {
		const char *q = p;
		size_t len;

		while (*q == ' ' || *q == '\t')
			q++;
		len = strcspn(q, "\n");
		/* "error: " from the engine; "Error: " from Pulumi YAML's diagnostics,
		 * which the CLI prints under the stack's row. */
		if ((strncmp(q, "error: ", 7) == 0 || strncmp(q, "Error: ", 7) == 0) && len > 7) {
			snprintf(out, outlen, "%.*s", (int)(len - 7), q + 7);
			return 1;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

static int last_line(const char *text, char *out, size_t outlen)
{
	const char *end = text ? text + strlen(text) : NULL;

	while (end && end > text) {
		const char *start = end;

		while (start > text && start[-1] != '\n')
			start--;
		size_t len = (size_t)(end - start);
		while (len > 0 && (start[len - 1] == '\n' || start[len - 1] == '\r' ||
				   start[len - 1] == ' '))
			len--;
		if (len > 0) {
			snprintf(out, outlen, "%.*s", (int)len, start);
			return 1;
		}
		end = start > text ? start - 1 : text;
	}
	return 0;
}

/* One line, control characters as spaces, cut at a UTF-8 boundary. */
static void tidy(char *s, size_t max)
{
	size_t len;

	for (char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	len = strlen(s);
	if (len > max) {
		len = max;
		while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
			len--;
		s[len] = '\0';
	}
}

void pl_set_message(struct pl_result *r, const char *op, const char *text,
		    const char *const *secrets, size_t n_secrets)
{
	char *masked = pl_redact(text, secrets, n_secrets);

	if (masked == NULL) {
		snprintf(r->message, sizeof(r->message), "%s: (message withheld: out of memory)", op);
		return;
	}
	tidy(masked, MSG_MAX);
	snprintf(r->message, sizeof(r->message), "%s: %s", op, masked);
	free(masked);
}

/*
 * A toolchain the CLI or a language host runs from PATH is missing (`go` for
 * the Go host and `pulumi install`, `python3`, `node`): the program's name
 * as the text names it, in name.  The texts are the ones those programs
 * print: the SDK's executable.FindExecutable ("unable to find program: go"),
 * the Python host ("Failed to locate any of [python3 python] on your PATH")
 * and Go's exec.LookPath (`exec: "node": executable file not found in $PATH`).
 */
static int missing_toolchain(const char *text, char *name, size_t len)
{
	static const struct { const char *before, *stop; } pats[] = {
		{ "unable to find program: ", " \t\r\n'\"," },
		{ "Failed to locate any of [", "]\n" },
		{ "exec: \"", "\"\n" },
	};
	static const char lookpath_tail[] = "\": executable file not found";

	for (size_t i = 0; text && i < sizeof(pats) / sizeof(pats[0]); i++) {
		const char *p = strstr(text, pats[i].before);
		size_t n;

		if (p == NULL)
			continue;
		p += strlen(pats[i].before);
		n = strcspn(p, pats[i].stop);
		/* exec.LookPath's text names any command; only "not found" is ours. */
		if (i == 2 && strncmp(p + n, lookpath_tail, strlen(lookpath_tail)) != 0)
			continue;
		if (n == 0 || n > 64)
			continue;
		snprintf(name, len, "%.*s", (int)n, p);
		return 1;
	}
	return 0;
}

static enum pl_status status_from_texts(const struct proc_result *pr, const struct pl_events *ev)
{
	const char *out = pr->out, *err = pr->errout;

	/* The CLI runs but its language host for the program's runtime is not
	 * installed: an installation problem, like a missing CLI. */
	if (contains(err, "failed to load language plugin"))
		return PL_CLI_MISSING;
	/* Likewise a toolchain the program's language needs: no retry helps
	 * until the image has it, and the message names it (pl_classify). */
	char tool[72];
	if (missing_toolchain(err, tool, sizeof(tool)) || missing_toolchain(out, tool, sizeof(tool)))
		return PL_CLI_MISSING;
	if (contains(err, "the stack is currently locked by") ||
	    contains(err, "[409] Conflict: Another update is currently in progress."))
		return PL_CONFLICT;
	if (pl_text_matches(err, "no stack named.*found"))
		return PL_NOT_FOUND;
	if (ev && ev->policy_violations > 0)
		return PL_POLICY_VIOLATION;
	if (contains(err, "no changes were expected") || (pr->exited && pr->exit_code == 7))
		return PL_CHANGES_NOT_EXPECTED;
	if (contains(err, "violates plan") || contains(out, "violates plan"))
		return PL_PLAN_VIOLATION;
	if (program_error(out, err) || (ev && ev->program_errors > 0 && ev->failed_steps == 0))
		return PL_PROGRAM_ERROR;
	if ((pr->exited && pr->exit_code == 8) || (ev && strcmp(ev->summary.result, "canceled") == 0))
		return PL_CANCELED;
	return PL_FAILED;
}

/* out and err are the call's stdout and stderr with the secrets already
 * masked: every line cut from them below must be cut from masked text. */
static void reason(enum pl_status st, const struct proc_result *pr, const char *out,
		   const char *err, const struct pl_events *ev, char *buf, size_t len)
{
	if (st == PL_POLICY_VIOLATION && ev && ev->first_policy[0]) {
		snprintf(buf, len, "policy violation: %s", ev->first_policy);
		return;
	}
	if (st == PL_PROGRAM_ERROR && ev && ev->first_error[0]) {
		snprintf(buf, len, "%s", ev->first_error);
		return;
	}
	if (error_line(err, buf, len) || (ev && ev->first_error[0] &&
					  snprintf(buf, len, "%s", ev->first_error) > 0))
		return;
	/* The last line of stdout is progress ("Duration: 1s"), not a reason. */
	if (error_line(out, buf, len) || last_line(err, buf, len))
		return;
	if (pr->exited)
		snprintf(buf, len, "failed without a diagnostic (exit code %d)", pr->exit_code);
	else
		snprintf(buf, len, "killed by signal %d", pr->term_signal);
}

/* Reads the first "created by USER@HOST (pid N) at TIME" of a DIY lock
 * conflict (reference §3.2); the lock's URL before it is not kept. */
static void parse_lock(const char *err, struct pl_lock *l)
{
	const char *p = err ? strstr(err, ": created by ") : NULL;
	const char *pid, *at, *eol;

	memset(l, 0, sizeof(*l));
	if (p == NULL)
		return;
	p += strlen(": created by ");
	eol = p + strcspn(p, "\n");
	pid = strstr(p, " (pid ");
	if (pid == NULL || pid > eol)
		return;
	snprintf(l->owner, sizeof(l->owner), "%.*s", (int)(pid - p), p);
	l->pid = strtol(pid + 6, NULL, 10);
	at = strstr(pid, ") at ");
	if (at && at < eol)
		snprintf(l->created, sizeof(l->created), "%.*s", (int)(eol - at - 5), at + 5);
	l->present = 1;
}

void pl_classify(const char *op, const struct proc_result *pr, const struct pl_events *ev,
		 const char *const *secrets, size_t n_secrets, struct pl_result *r)
{
	char text[1024], *out, *err;

	r->exit_code = pr->exited ? pr->exit_code : -1;
	if (!pr->started) {
		r->status = PL_CLI_MISSING;
		pl_set_message(r, op, "the pulumi CLI could not be started", secrets, n_secrets);
		return;
	}
	if (pr->exited && pr->exit_code == 0 && !pr->timed_out) {
		r->status = PL_OK;
		pl_set_message(r, op, "succeeded", secrets, n_secrets);
		return;
	}
	if (pr->timed_out || pr->interrupted) {
		static const char *const names[] = { "", "SIGINT", "SIGTERM", "SIGKILL" };
		int step = pr->last_signal == 2 ? 1 : pr->last_signal == 15 ? 2 : 3;

		r->status = pr->timed_out ? PL_TIMEOUT : PL_CANCELED;
		snprintf(text, sizeof(text), "%s; the CLI's process group was stopped with %s",
			 pr->timed_out ? "timed out" : "interrupted on request", names[step]);
		pl_set_message(r, op, text, secrets, n_secrets);
		return;
	}
	r->status = status_from_texts(pr, ev);
	out = pl_redact(pr->out, secrets, n_secrets);
	err = pl_redact(pr->errout, secrets, n_secrets);
	/* The CLI colours its diagnostics even without a terminal. */
	strip_ansi(out);
	strip_ansi(err);
	if (out == NULL || err == NULL) {
		snprintf(r->message, sizeof(r->message), "%s: (message withheld: out of memory)", op);
	} else {
		if (r->status == PL_CONFLICT)
			parse_lock(err, &r->lock);
		char tool[72];
		size_t n = 0;

		/* The toolchain's name first: the CLI's own line ("installing
		 * dependencies: unable to find program: go") buries it. */
		if (r->status == PL_CLI_MISSING &&
		    (missing_toolchain(err, tool, sizeof(tool)) || missing_toolchain(out, tool, sizeof(tool))))
			n = (size_t)snprintf(text, sizeof(text), "the program's toolchain `%s` is not on the "
					     "controller's PATH (docs/run.md, Toolchains); ", tool);
		reason(r->status, pr, out, err, ev, text + n, sizeof(text) - n);
		pl_set_message(r, op, text, secrets, n_secrets);
	}
	free(out);
	free(err);
}
