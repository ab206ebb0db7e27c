/*
 * cli_oci.c - what `pull` and `push` share (src/cli/cli_oci.h): the registry
 * flags, credentials from flags or a docker config, the client, and the
 * terminal progress line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/secret.h"
#include "cli/cli.h"
#include "cli/cli_oci.h"

void cli_oci_flags_init(struct cli_oci_flags *f)
{
	memset(f, 0, sizeof(*f));
	f->retries = -1;
	f->log_level = "warn";
	f->log_format = "text";
}

void cli_oci_flags_free(struct cli_oci_flags *f)
{
	secret_free(f->creds);
	f->creds = NULL;
}

int cli_oci_creds_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	struct cli_oci_flags *f = o->target;

	cli_oci_flags_free(f);
	f->creds = strdup(arg);
	/* Blank the argv copy so the password does not linger in ps. */
	memset((char *)arg, 'x', strlen(arg));
	return f->creds ? 0 : -1;
}

/* Reads one line (the password) from stdin. */
static char *read_password_stdin(void)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, stdin);

	if (n < 0) {
		free(line);
		return NULL;
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	return line;
}

static int creds_from_flags(struct cli_oci_flags *f, struct oci_creds *out, const char *cmd)
{
	char *colon;

	memset(out, 0, sizeof(*out));
	colon = strchr(f->creds, ':');
	if (colon == f->creds) {
		cli_errorf("%s: --creds needs a user name (USER[:PASS])", cmd);
		return -1;
	}
	if (colon != NULL && f->password_stdin) {
		cli_errorf("%s: --creds USER:PASS and --password-stdin exclude each other", cmd);
		return -1;
	}
	out->username = colon ? strndup(f->creds, (size_t)(colon - f->creds)) : strdup(f->creds);
	if (colon != NULL) {
		out->password = strdup(colon + 1);
	} else if (f->password_stdin) {
		out->password = read_password_stdin();
		if (out->password == NULL) {
			cli_errorf("%s: --password-stdin: nothing to read on standard input", cmd);
			oci_creds_free(out);
			return -1;
		}
	} else {
		out->password = strdup("");
	}
	return 0;
}

/* ---- the progress line (only on a terminal) ---- */

struct progress {
	int64_t start_ms, last_ms;   /* clock_mono_ms() */
	int active;
};

static double secs_since(int64_t t_ms)
{
	return (double)(clock_mono_ms() - t_ms) / 1000.0;
}

static void show_progress(void *ud, const char *what, int64_t done, int64_t total)
{
	struct progress *p = ud;
	double mib = 1024.0 * 1024.0, el;

	if (!p->active || done == 0) {
		p->start_ms = clock_mono_ms();
		p->last_ms = p->start_ms;
		p->active = 1;
	}
	if (done != total && secs_since(p->last_ms) < 0.1)
		return;
	p->last_ms = clock_mono_ms();
	el = secs_since(p->start_ms);
	fprintf(stderr, "\r\033[K%s  %.1f / %.1f MiB  %.1f MiB/s", what, (double)done / mib,
	    total >= 0 ? (double)total / mib : 0.0, el > 0 ? (double)done / mib / el : 0.0);
	if (done == total) {
		fputc('\n', stderr);
		p->active = 0;
	}
	fflush(stderr);
}

static struct progress progress_state;

struct oci_client *cli_oci_client(struct cli_oci_flags *f, const struct oci_ref *ref,
    const char *cmd, const volatile int *cancel, int *usage)
{
	struct oci_client_opts o = { .retries = -1 };
	struct oci_creds creds = { 0 };
	struct oci_client *c;
	struct err e = { 0 };

	*usage = 0;
	if (cli_setup_logging(f->log_level, f->log_format) < 0) {
		*usage = 1;
		return NULL;
	}
	if (f->password_stdin && f->creds == NULL) {
		cli_errorf("%s: --password-stdin needs --creds USER", cmd);
		*usage = 1;
		return NULL;
	}
	if (f->plain_http && f->insecure_skip_tls_verify) {
		cli_errorf("%s: --plain-http (no TLS) and --insecure-skip-tls-verify (TLS without "
		    "verification) exclude each other", cmd);
		*usage = 1;
		return NULL;
	}
	if (f->creds != NULL && f->docker_config != NULL) {
		cli_errorf("%s: --creds and --docker-config exclude each other", cmd);
		*usage = 1;
		return NULL;
	}
	if (f->creds != NULL) {
		if (creds_from_flags(f, &creds, cmd) < 0) {
			*usage = 1;
			return NULL;
		}
	} else if (oci_docker_config_load(f->docker_config, ref->registry, &creds, &e) < 0) {
		cli_errorf("%s: %s", cmd, e.msg);
		return NULL;
	}
	o.plain_http = f->plain_http;
	o.insecure_skip_tls_verify = f->insecure_skip_tls_verify;
	o.cancel = cancel;
	o.ca_file = f->ca_file;
	o.creds = creds;
	o.timeout_ms = f->timeout_ms;
	o.retries = f->retries;
	if (isatty(STDERR_FILENO)) {
		o.progress = show_progress;
		o.progress_ud = &progress_state;
	}
	c = oci_client_new(ref->registry, &o, &e);
	oci_creds_free(&creds);
	if (c == NULL)
		cli_errorf("%s: %s", cmd, e.msg);
	return c;
}
