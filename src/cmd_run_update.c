/*
 * cmd_run_update.c - `pulumi-controller run-update`: the command a Job's
 * pod runs when the controller runs updates as Jobs (--runner=job).  It is
 * not for people: its input is the JSON the controller puts into the pod's
 * environment, its output the termination message, the outputs Secret and
 * the exit status.  This file reads the flags and the environment; the
 * update itself is stack_run (src/stack/stack_runner.c).
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "cmd.h"
#include "stack/stack.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

static void run_update_usage(FILE *out)
{
	fprintf(out,
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
	    "  --work-dir DIR             artifact store, workspace and PULUMI_HOME (required)\n"
	    "  --termination-log FILE     where the result goes (required; the pod's\n"
	    "                             terminationMessagePath)\n"
	    "  --oci-secret-dir DIR       registry credentials (.dockerconfigjson) and CA (ca.crt)\n"
	    "  --verify-keys-dir DIR      public keys for an OCI source with verify\n"
	    "  --plan-dir DIR             the approved plan (plan.json) an up with a planId applies\n"
	    "  --service-account-dir DIR  token and ca.crt for the API server (default\n"
	    "                             " SA_DIR ")\n"
	    "  --pulumi PATH              the pulumi CLI (default: pulumi from the pod's PATH)\n"
	    "  --plugins-dir DIR          plugins the image carries, linked as PULUMI_HOME/plugins\n"
	    "  --max-artifact-size BYTES  one artifact download (default 512Mi; -1: none); the\n"
	    "                             controller passes its own --max-artifact-size\n"
	    "  --log-level L              debug, info, warn, error (default info)\n"
	    "  --log-format F             json or text (default json)\n"
	    "  -h, --help                 show this help\n"
	    "\n"
	    "Environment: PULUMI_CONTROLLER_UPDATE (required), KUBERNETES_SERVICE_HOST and\n"
	    "KUBERNETES_SERVICE_PORT (for the outputs Secret).\n"
	    "\n"
	    "Exit status: 0 the operation succeeded, 1 it failed, 2 bad flags or input.\n");
}

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

int cmd_run_update(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "work-dir", required_argument, NULL, 'w' },
		{ "termination-log", required_argument, NULL, 't' },
		{ "oci-secret-dir", required_argument, NULL, 'o' },
		{ "verify-keys-dir", required_argument, NULL, 'k' },
		{ "plan-dir", required_argument, NULL, 'l' },
		{ "service-account-dir", required_argument, NULL, 's' },
		{ "pulumi", required_argument, NULL, 'p' },
		{ "plugins-dir", required_argument, NULL, 'P' },
		{ "max-artifact-size", required_argument, NULL, 'z' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "log-format", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct stack_run_opts o;
	struct stack_run_input *in;
	struct stack_run_result r;
	const char *term = NULL, *level = "info", *format = "json";
	struct err e;
	char found[PATH_MAX];
	int c, rc;

	memset(&o, 0, sizeof(o));
	o.service_account_dir = SA_DIR;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'w': o.work_dir = optarg; break;
		case 't': term = optarg; break;
		case 'o': o.oci_secret_dir = optarg; break;
		case 'k': o.verify_keys_dir = optarg; break;
		case 'l': o.plan_dir = optarg; break;
		case 's': o.service_account_dir = optarg; break;
		case 'p': o.pulumi_bin = optarg; break;
		case 'P': o.plugins_dir = optarg; break;
		case 'z':
			if (cmd_parse_bytes(optarg, &o.max_artifact_bytes) < 0) {
				cmd_errorf("run-update: --max-artifact-size: \"%s\" is not a size (e.g. 512Mi, -1)", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'L': level = optarg; break;
		case 'F': format = optarg; break;
		case 'h': run_update_usage(stdout); return 0;
		default: run_update_usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		cmd_errorf("run-update: unexpected argument \"%s\"", argv[optind]);
		return EXIT_USAGE;
	}
	if (o.work_dir == NULL || term == NULL) {
		cmd_errorf("run-update: --work-dir and --termination-log are required");
		return EXIT_USAGE;
	}
	if (cmd_setup_logging(level, format) < 0)
		return EXIT_USAGE;
	if ((in = stack_run_input_parse(getenv("PULUMI_CONTROLLER_UPDATE"), &e)) == NULL) {
		cmd_print_error("run-update", e.msg);
		stack_run_result_usage(&r, &e);
		write_termination(term, &r);
		return EXIT_USAGE;
	}
	if (o.pulumi_bin == NULL)
		o.pulumi_bin = image_pulumi(found, sizeof(found));
	o.kube_host = getenv("KUBERNETES_SERVICE_HOST");
	o.kube_port = getenv("KUBERNETES_SERVICE_PORT");
	o.cancel = cmd_cancel_on_signals();
	stack_run(in, &o, &r);
	write_termination(term, &r);
	if (r.status != 0)
		cmd_print_error("run-update", r.message);
	rc = stack_run_exit_code(&r);
	stack_run_result_free(&r);
	stack_run_input_free(in);
	/* Stopped by SIGTERM: the CLI was interrupted and the result says
	 * so; the exit status stays 0/1/2 for the controller. */
	return rc;
}
