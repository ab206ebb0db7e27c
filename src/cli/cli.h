/*
 * cli.h - the command line of pulumi-controller: its subcommands and the
 * helpers they share.  Each command lives in its own src/cli/cmd_<name>.c,
 * declares its flags as a table (cli_opt, below) from which its parsing,
 * its --help and its per-flag checks come, and returns the process exit
 * status: 0 success, 1 the operation failed, 2 bad usage.  main.c only
 * picks the command.
 */
#ifndef PC_CLI_H
#define PC_CLI_H

#include <stddef.h>
#include <stdio.h>

#define EXIT_USAGE 2

/* A command: argv[0] is its name; it returns the process exit status. */
typedef int cli_command(int argc, char **argv);

/* The one-shot commands and the controller, each in cmd_<name>.c; verify
 * exits 3 when the registry could not be asked. */
cli_command cmd_version, cmd_unpack, cmd_fetch, cmd_run, cmd_pull, cmd_push, cmd_verify;
/* The command a Job's pod runs (src/cli/cmd_run_update.c). */
cli_command cmd_run_update;
/* The operator's commands (docs/cli.md): cmd_get.c; reconcile, suspend and
 * resume in cmd_reconcile.c; outputs and history in cmd_outputs.c;
 * preview and approve in cmd_approve.c. */
cli_command cmd_get, cmd_reconcile, cmd_suspend, cmd_resume, cmd_outputs, cmd_history, cmd_preview, cmd_approve;
/* cmd_migrate.c: what moving from the Pulumi Kubernetes Operator changes (read only). */
cli_command cmd_migrate;

/* Shared by the commands: applies --log-level / --log-format values.
 * Returns 0, or -1 after printing what was wrong. */
int cli_setup_logging(const char *level, const char *format);

/* Parses a byte count: plain digits, or with a K/M/G/Ki/Mi/Gi suffix;
 * "-1" means unlimited.  -1 on bad input. */
int cli_parse_bytes(const char *s, long long *out);

/*
 * SIGTERM and SIGINT, for the one-shot commands (fetch, pull, unpack): the
 * first one sets the flag cli_cancel_flag() points to, which the command
 * passes to the library as its cancel flag, so the download or extraction
 * stops within ~100 ms and its staging directory is removed on the normal
 * failure path.  cli_exit(rc) then ends the process by that same signal
 * (so the caller sees "killed by SIGTERM") instead of returning rc; when
 * rc is 0 the work was done before the signal mattered, and rc stands.
 * A second signal while cleaning up is left to its default action.
 */
const volatile int *cli_cancel_on_signals(void);
int cli_exit(int rc);

/* Prints "<cmd>: <msg>" as one line on stderr: control characters in
 * the message (a hostile server's text, a value echoed back) are escaped. */
void cli_print_error(const char *cmd, const char *msg);

/* printf-style, then the same escaping, for usage errors that echo a
 * flag's value; the newline is added. */
void cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------ flag tables (cli_opt.c)
 *
 * A command declares its flags once, as an array of struct cli_opt ending
 * in CLI_END, the way git's parse-options does: the flag's names, what kind
 * of value it takes, where the value goes, and its line in --help.
 * cli_parse reads argv with getopt_long from that table (so abbreviations,
 * "--flag=value" and flags after operands work as before), checks each
 * value as its kind says, and prints --help from the same table.  Checks
 * that involve more than one flag stay with the command, after cli_parse.
 */

enum cli_opt_kind {
	CLI_OPT_END,
	CLI_OPT_GROUP,      /* no flag: a heading line (help) in --help */
	CLI_OPT_HELP,       /* -h, --help: the usage on stdout, exit 0 */
	CLI_OPT_BOOL,       /* int *: set to 1 */
	CLI_OPT_STRING,     /* const char **: the argument itself */
	CLI_OPT_NUMBER,     /* int, long or 64-bit *: a whole number in [lo, hi] */
	CLI_OPT_BYTES,      /* 64-bit *: cli_parse_bytes (K, Mi, ..., -1) */
	CLI_OPT_DURATION,   /* long *: Go-style, in ms, within [lo, hi] */
	CLI_OPT_STRINGS,    /* struct cli_strings *: repeatable, each one kept */
	CLI_OPT_CALLBACK,   /* cb decides (and says what is wrong) */
};

/* cli_opt.flags */
#define CLI_EMPTY_IS_UNSET 0x1   /* STRING: "" leaves the target NULL */
#define CLI_BARE_SECONDS   0x2   /* DURATION: a bare number is seconds */
#define CLI_HIDDEN         0x4   /* not listed in --help (another line covers it) */
#define CLI_NO_ARG         0x8   /* CALLBACK: takes no argument (arg is NULL) */
#define CLI_OPTIONAL_ARG   0x10  /* CALLBACK: "--flag" or "--flag=value" */
#define CLI_REFUSED        0x20  /* a sibling command's flag: known, refused as the
                                  * command's unknown flags are, but without getopt's
                                  * "unrecognized option" (not listed in --help) */

struct cli_opt;
/* 0, or -1 after printing why the value is bad (a usage error). */
typedef int cli_opt_cb(const struct cli_opt *o, const char *arg, const char *cmd);

struct cli_opt {
	enum cli_opt_kind kind;
	int short_name;           /* 'n' for -n, or 0 */
	const char *name;         /* the long name, without "--" */
	void *target;
	size_t size;              /* sizeof *target, for NUMBER, BYTES, DURATION */
	const char *argh;         /* the value's name in --help ("DIR"), or NULL */
	const char *help;         /* its text; lines after the first go under it */
	/* The message for a bad value, after "<cmd>: ": a printf format
	 * given the value (which it may leave out). */
	const char *bad;
	long long lo, hi;         /* NUMBER, DURATION, BYTES: the accepted range */
	cli_opt_cb *cb;
	unsigned flags;
	const char *label;        /* replaces "--name ARGH" in --help */
};

/* Repeated values of a CLI_OPT_STRINGS flag: v has room for max. */
struct cli_strings {
	const char **v;
	size_t n, max;
};
/* Appends arg; -1 after printing "<cmd>: more than <max> --<name> flags". */
int cli_strings_add(struct cli_strings *s, const char *arg, const char *cmd, const char *name);

/* The declarations, in the order --help lists them.  The casts check the
 * target's type where one type is right. */
#define CLI_END { .kind = CLI_OPT_END }
#define CLI_GROUP(h) { .kind = CLI_OPT_GROUP, .help = (h) }
#define CLI_HELP(h) { .kind = CLI_OPT_HELP, .short_name = 'h', .name = "help", .help = (h) }
#define CLI_BOOL(s, l, v, h) \
	{ .kind = CLI_OPT_BOOL, .short_name = (s), .name = (l), .target = (1 ? (v) : (int *)0), .help = (h) }
#define CLI_STRING(s, l, v, a, h) { .kind = CLI_OPT_STRING, .short_name = (s), .name = (l), \
	.target = (1 ? (v) : (const char **)0), .argh = (a), .help = (h) }
#define CLI_NUMBER(l, v, lo_, hi_, a, h, msg) { .kind = CLI_OPT_NUMBER, .name = (l), .target = (v), \
	.size = sizeof(*(v)), .argh = (a), .help = (h), .bad = (msg), .lo = (lo_), .hi = (hi_) }
#define CLI_BYTES(l, v, a, h, msg) { .kind = CLI_OPT_BYTES, .name = (l), .target = (v), \
	.size = sizeof(*(v)), .argh = (a), .help = (h), .bad = (msg), .lo = -1, .hi = __LONG_LONG_MAX__ }
#define CLI_DURATION(l, v, lo_, hi_, a, h, msg) { .kind = CLI_OPT_DURATION, .name = (l), \
	.target = (1 ? (v) : (long *)0), .size = sizeof(long), .argh = (a), .help = (h), .bad = (msg), \
	.lo = (lo_), .hi = (hi_) }
#define CLI_STRINGS(l, v, a, h) { .kind = CLI_OPT_STRINGS, .name = (l), \
	.target = (1 ? (v) : (struct cli_strings *)0), .argh = (a), .help = (h) }
#define CLI_CALLBACK(s, l, v, a, h, fn) { .kind = CLI_OPT_CALLBACK, .short_name = (s), .name = (l), \
	.target = (v), .argh = (a), .help = (h), .cb = (fn) }

/* A flag of a sibling command (one that shares this command's file and
 * usage), named so that it is refused with a pointer to --help; k is its
 * kind there (for whether it takes a value), fl its flags. */
#define CLI_REFUSE(k, l, fl) { .kind = (k), .name = (l), .flags = CLI_REFUSED | (fl) }

/* --log-level and --log-format as run, run-update and fetch take them (for
 * cli_setup_logging), with the command's defaults in their help. */
#define CLI_LOG_OPTS(level, format, default_level, default_format) \
	CLI_STRING(0, "log-level", (level), "L", "debug, info, warn, error (default " default_level ")"), \
	CLI_STRING(0, "log-format", (format), "F", "json or text (default " default_format ")")

/* What follows getopt's own message about a flag it does not know (or one
 * missing its value): commands differ, and their tests read it. */
enum cli_unknown {
	CLI_UNKNOWN_QUIET,      /* nothing more */
	CLI_UNKNOWN_USAGE,      /* the whole usage, on stderr */
	CLI_UNKNOWN_SEE_HELP,   /* "<cmd>: see pulumi-controller <cmd> --help" */
};

/* A command: its name, its --help, its flags. */
struct cli_cmd {
	const char *name;         /* "push": begins every message */
	const char *usage;        /* --help's text; CLI_FLAGS in it is where the flags' lines go */
	const struct cli_opt *opts;
	int width;                /* the column where the flags' help text starts */
	enum cli_unknown unknown;
};

/* In cli_cmd.usage: the place of the flags' lines. */
#define CLI_FLAGS "\001"

/* cli_parse's "go on": anything else is the exit status. */
#define CLI_GO_ON (-1)

/*
 * Parses argv[1..argc-1] by the command's table: each value is checked and stored as
 * it comes, as getopt_long reads it.  Returns CLI_GO_ON with *operand the
 * index of the first operand (getopt_long moves them to the end), 0 after
 * --help was printed, or EXIT_USAGE after saying what was wrong.
 */
int cli_parse(const struct cli_cmd *cmd, int argc, char **argv, int *operand);

/* The command's --help text, its flags' lines in it. */
void cli_usage(const struct cli_cmd *cmd, FILE *out);

#endif
