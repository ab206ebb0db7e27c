/*
 * main.c - the command line: `pulumi-controller <command> [flags]`.
 *
 * main only picks the subcommand; each one lives in src/cli/cmd_<name>.c.
 */
#include <stdio.h>
#include <string.h>

#include "base/http.h"
#include "cli/cli.h"

struct command {
	const char *name;
	cli_command *run;
	const char *summary;
};

static const struct command commands[] = {
	{ "get",       cmd_get,       "show Stacks: ready, revision, last update, message" },
	{ "reconcile", cmd_reconcile, "reconcile a Stack now and wait for the outcome" },
	{ "suspend",   cmd_suspend,   "suspend a Stack's reconciliation" },
	{ "resume",    cmd_resume,    "resume a suspended Stack and wait for its reconcile" },
	{ "outputs",   cmd_outputs,   "show a Stack's outputs (secret ones masked)" },
	{ "history",   cmd_history,   "show a Stack's last updates" },
	{ "preview",   cmd_preview,   "print the plan a Stack awaits approval for" },
	{ "approve",   cmd_approve,   "approve the plan a Stack awaits (spec.approvedPlan)" },
	{ "migrate",   cmd_migrate,   "say what moving from the Pulumi Kubernetes Operator changes" },
	{ "run",       cmd_run,       "run the controller (watch Stacks and Flux sources, reconcile)" },
	{ "run-update", cmd_run_update, "run one update inside a Job's pod (started by the controller)" },
	{ "fetch",     cmd_fetch,     "download a Flux artifact, verify its digest and unpack it" },
	{ "pull",      cmd_pull,      "pull an OCI artifact, verify it and unpack it" },
	{ "push",      cmd_push,      "push a directory as a Flux OCI artifact" },
	{ "verify",    cmd_verify,    "verify an OCI artifact's cosign signature with public keys" },
	{ "unpack",    cmd_unpack,    "safely unpack a tar, tar.gz or tar.zst archive" },
	{ "version",   cmd_version,   "print the version" },
};

static void usage(FILE *out)
{
	fprintf(out,
	    "pulumi-controller keeps Pulumi stacks in the state their programs declare,\n"
	    "from Flux sources or OCI artifacts.\n\n"
	    "Usage: pulumi-controller <command> [flags]\n\n"
	    "Commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nRun 'pulumi-controller <command> --help' for a command's flags.\n"
	    "Documentation: docs/README.md\n");
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(name, commands[i].name) == 0)
			return &commands[i];
	return NULL;
}

/* Every command may talk HTTP (libcurl's global state is set up once, on
 * this thread, before any other starts). */
static int run_command(const struct command *c, int argc, char **argv)
{
	struct err e;
	int rc;

	if (http_global_init(&e) < 0) {
		fprintf(stderr, "pulumi-controller: %s\n", e.msg);
		return 1;
	}
	rc = c->run(argc, argv);
	http_global_cleanup();
	return rc;
}

int main(int argc, char **argv)
{
	const struct command *c;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0)
		return cmd_version(1, argv + 1);
	if ((c = find_command(argv[1])) == NULL) {
		fprintf(stderr, "pulumi-controller: unknown command \"%s\"\n\n", argv[1]);
		usage(stderr);
		return EXIT_USAGE;
	}
	return run_command(c, argc - 1, argv + 1);
}
