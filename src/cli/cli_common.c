/*
 * cli_common.c - small helpers shared by the subcommands (see cli.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "cli/cli.h"

int cli_setup_logging(const char *level, const char *format)
{
	enum log_level lv = LOG_INFO;
	enum log_format fmt = LOG_JSON;

	if (level != NULL && log_parse_level(level, &lv) < 0) {
		cli_errorf("invalid --log-level \"%s\" (debug, info, warn, error, off)", level);
		return -1;
	}
	if (format != NULL && log_parse_format(format, &fmt) < 0) {
		cli_errorf("invalid --log-format \"%s\" (json, text)", format);
		return -1;
	}
	log_setup(lv, fmt, stderr);
	return 0;
}

int cli_parse_bytes(const char *s, long long *out)
{
	static const struct { const char *suffix; long long mult; } units[] = {
		{ "", 1 }, { "K", 1000LL }, { "M", 1000000LL }, { "G", 1000000000LL },
		{ "Ki", 1LL << 10 }, { "Mi", 1LL << 20 }, { "Gi", 1LL << 30 },
	};
	char *end;
	long long v;

	if (strcmp(s, "-1") == 0) {
		*out = -1;
		return 0;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || v < 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) == 0) {
			if (v > __LONG_LONG_MAX__ / units[i].mult)
				return -1;
			*out = v * units[i].mult;
			return 0;
		}
	}
	return -1;
}

/* The signal that asked us to stop (0: none); the cancel flag is its
 * non-zero-ness, read by the library through a const volatile int *. */
static volatile sig_atomic_t stop_signal;
static volatile int stop_flag;

static void on_stop_signal(int sig)
{
	stop_signal = sig;
	stop_flag = 1;
	/* A second signal is not ours to soften: the default kills. */
	signal(sig, SIG_DFL);
}

const volatile int *cli_cancel_on_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: a read blocked on a pipe must return (EINTR) so the
	 * reader sees the flag; every loop that retries EINTR checks it. */
	sa.sa_flags = 0;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	return &stop_flag;
}

int cli_exit(int rc)
{
	int sig = stop_signal;

	/* A signal that came too late to stop anything (the work was done)
	 * does not turn success into "killed". */
	if (sig == 0 || rc == 0)
		return rc;
	fflush(NULL);
	signal(sig, SIG_DFL);
	raise(sig);
	return 128 + sig;
}

void cli_print_error(const char *cmd, const char *msg)
{
	char head[ERR_MSG_MAX], line[ERR_MSG_MAX * 4];

	/* The prefix may hold an operand too ("unpack <archive>"). */
	fprintf(stderr, "%s: %s\n", log_printable(cmd, head, sizeof(head)), log_printable(msg, line, sizeof(line)));
}

void cli_errorf(const char *fmt, ...)
{
	char msg[ERR_MSG_MAX], line[ERR_MSG_MAX * 4];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", log_printable(msg, line, sizeof(line)));
}
