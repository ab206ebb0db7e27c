/*
 * cmd_run_update.c - `pulumi-controller run-update`: the command a Job's
 * pod runs when the controller runs updates as Jobs (--runner=job).  It is
 * not for people: its input is the JSON the controller puts into the pod's
 * environment, its output the termination message, the outputs Secret and
 * the exit status.  This file reads the flags and the environment; the
 * update itself is stack_run (src/stack/stack_runner.c).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "cli/cli.h"
#include "stack/stack.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* The one run-update of this process: the flags' table points into it. */
static struct run_update_flags {
	struct stack_run_opts o;
	const char *term, *level, *format;
} flags;

static const char run_update_usage[] =
	    "Usage: pulumi-controller run-update --work-dir DIR --termination-log FILE [flags]\n"
	    "\n"
	    "Runs one Stack update inside a Job's pod (the controller's --runner=job): reads the\n"
	    "update from $PULUMI_CONTROLLER_UPDATE (JSON, no secret values: those come in the\n"
	    "environment variables it names), fetches and verifies the artifact, builds the\n"
	    "workspace, runs pulumi as the controller would, writes the outputs Secret, and\n"
	    "writes the result as JSON to the termination log.  The controller starts it; it\n"
	    "is not meant to be run by hand.  docs/cli.md describes the input and the output.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Environment: PULUMI_CONTROLLER_UPDATE (required), KUBERNETES_SERVICE_HOST and\n"
	    "KUBERNETES_SERVICE_PORT (for the outputs Secret).\n"
	    "\n"
	    "Exit status: 0 the operation succeeded, 1 it failed, 2 bad flags or input.\n";

static const struct cli_opt run_update_opts[] = {
	CLI_STRING(0, "work-dir", &flags.o.work_dir, "DIR", "artifact store, workspace and PULUMI_HOME (required)"),
	CLI_STRING(0, "termination-log", &flags.term, "FILE", "where the result goes (required; the pod's\n"
	    "terminationMessagePath)"),
	CLI_STRING(0, "oci-secret-dir", &flags.o.oci_secret_dir, "DIR",
	    "registry credentials (.dockerconfigjson) and CA (ca.crt)"),
	CLI_STRING(0, "verify-keys-dir", &flags.o.verify_keys_dir, "DIR", "public keys for an OCI source with verify"),
	CLI_STRING(0, "plan-dir", &flags.o.plan_dir, "DIR", "the approved plan (plan.json) an up with a planId applies"),
	CLI_STRING(0, "service-account-dir", &flags.o.service_account_dir, "DIR",
	    "token and ca.crt for the API server (default\n" SA_DIR ")"),
	CLI_STRING(0, "pulumi", &flags.o.pulumi_bin, "PATH", "the pulumi CLI (default: pulumi from the pod's PATH)"),
	CLI_STRING(0, "plugins-dir", &flags.o.plugins_dir, "DIR", "plugins the image carries, linked as PULUMI_HOME/plugins"),
	CLI_BYTES("max-artifact-size", &flags.o.max_artifact_bytes, "BYTES",
	    "one artifact download (default 512Mi; -1: none); the\ncontroller passes its own --max-artifact-size",
	    "--max-artifact-size: \"%s\" is not a size (e.g. 512Mi, -1)"),
	CLI_LOG_OPTS(&flags.level, &flags.format, "info", "json"),
	CLI_HELP("show this help"),
	CLI_END,
};

static const struct cli_cmd run_update_cmd = {
	"run-update", run_update_usage, run_update_opts, 29, CLI_UNKNOWN_USAGE
};

/* The image's pulumi: the first on the pod's PATH, so that the driver
 * runs the one the image provides, its directory first on the CLI's PATH
 * (then the pod's own, which has the image's toolchains), with its
 * language hosts beside it.  NULL leaves the lookup
 * to the driver (and its error to the result). */
static const char *image_pulumi(char *buf, size_t n)
{
	const char *path = getenv("PATH");
	struct err e;

	if (path == NULL || proc_find_exe("pulumi", path, buf, n, &e) < 0)
		return NULL;
	return buf;
}

/* The result as the termination message; a failure to write it is logged
 * (the exit status still tells success from failure). */
static void write_termination(const char *path, const struct stack_run_result *r)
{
	char *msg = stack_run_termination(r, STACK_RUN_TERMINATION_MAX);
	FILE *f = fopen(path, "we");

	if (f == NULL || fputs(msg, f) < 0 || fclose(f) != 0)
		log_error("cannot write the termination log", "path", path, NULL);
	free(msg);
}

/* The flags into `flags`, checked: CLI_GO_ON, or the exit status. */
static int parse_args(int argc, char **argv)
{
	int operand, rc;

	memset(&flags, 0, sizeof(flags));
	flags.o.service_account_dir = SA_DIR;
	flags.level = "info";
	flags.format = "json";
	if ((rc = cli_parse(&run_update_cmd, argc, argv, &operand)) != CLI_GO_ON)
		return rc;
	if (operand < argc) {
		cli_errorf("run-update: unexpected argument \"%s\"", argv[operand]);
		return EXIT_USAGE;
	}
	if (flags.o.work_dir == NULL || flags.term == NULL) {
		cli_errorf("run-update: --work-dir and --termination-log are required");
		return EXIT_USAGE;
	}
	if (cli_setup_logging(flags.level, flags.format) < 0)
		return EXIT_USAGE;
	return CLI_GO_ON;
}

int cmd_run_update(int argc, char **argv)
{
	struct stack_run_opts *o = &flags.o;
	struct stack_run_input *in;
	struct stack_run_result r;
	struct err e;
	char found[PATH_MAX];
	int rc = parse_args(argc, argv);

	if (rc != CLI_GO_ON)
		return rc;
	if ((in = stack_run_input_parse(getenv("PULUMI_CONTROLLER_UPDATE"), &e)) == NULL) {
		cli_print_error("run-update", e.msg);
		stack_run_result_usage(&r, &e);
		write_termination(flags.term, &r);
		return EXIT_USAGE;
	}
	if (o->pulumi_bin == NULL)
		o->pulumi_bin = image_pulumi(found, sizeof(found));
	o->kube_host = getenv("KUBERNETES_SERVICE_HOST");
	o->kube_port = getenv("KUBERNETES_SERVICE_PORT");
	o->cancel = cli_cancel_on_signals();
	stack_run(in, o, &r);
	write_termination(flags.term, &r);
	if (r.status != 0)
		cli_print_error("run-update", r.message);
	rc = stack_run_exit_code(&r);
	stack_run_result_free(&r);
	stack_run_input_free(in);
	/* Stopped by SIGTERM: the CLI was interrupted and the result says
	 * so; the exit status stays 0/1/2 for the controller. */
	return rc;
}
