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

#define EXIT_USAGE 2

int cmd_version(int argc, char **argv);
int cmd_unpack(int argc, char **argv);
int cmd_fetch(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* The command a Job's pod runs (src/cli/cmd_run_update.c). */
int cmd_run_update(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_push(int argc, char **argv);
int cmd_verify(int argc, char **argv);    /* cmd_verify.c; exit 3: registry unreachable */
/* The operator's commands (src/cli/cmd_get.c, cmd_reconcile.c,
 * cmd_outputs.c, cmd_approve.c; docs/cli.md). */
int cmd_get(int argc, char **argv);
int cmd_reconcile(int argc, char **argv);
int cmd_suspend(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_outputs(int argc, char **argv);
int cmd_history(int argc, char **argv);
int cmd_preview(int argc, char **argv);   /* cmd_approve.c */
int cmd_approve(int argc, char **argv);

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

#endif
