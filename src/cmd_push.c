/*
 * cmd_push.c - `pulumi-controller push oci://HOST/REPO:TAG --path DIR`:
 * publishes a directory as an OCI artifact in the format of
 * `flux push artifact`, so Flux's OCIRepository (and `pull`) can consume
 * it.  Prints the manifest digest.  Shared registry flags: src/cmd_oci.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cmd.h"
#include "cmd_oci.h"

#define MAX_ANNOTATION_FLAGS 128

static void push_usage(FILE *out)
{
	fprintf(out,
	    "Usage: pulumi-controller push oci://HOST[:PORT]/REPO:TAG --path DIR [flags]\n"
	    "\n"
	    "Packs DIR as tar+gzip (entries relative to DIR, sorted, owners and times\n"
	    "zeroed, modes kept; only directories and regular files) and pushes it as a\n"
	    "Flux artifact: config application/vnd.cncf.flux.config.v1+json, one layer\n"
	    "application/vnd.cncf.flux.content.v1.tar+gzip.  Blobs the registry already\n"
	    "has are not uploaded again.  Prints the manifest digest.\n"
	    "\n"
	    "Flags:\n"
	    "  --path DIR             the directory to push (required)\n"
	    "  --source URL           annotation org.opencontainers.image.source\n"
	    "  --revision REV         annotation org.opencontainers.image.revision\n"
	    "                         (e.g. main@sha1:<commit>)\n"
	    "  --annotation K=V       an extra manifest annotation (repeatable)\n"
	    "  --reproducible         created = 1970-01-01T00:00:00Z, so the same tree and\n"
	    "                         flags always give the same manifest digest\n"
	    "  --ignore-paths LIST    comma-separated gitignore-style patterns to leave out\n"
	    "                         (default: " OCI_DEFAULT_IGNORE ")\n"
	    CMD_OCI_HELP
	    "  -h, --help             show this help\n"
	    "\n"
	    "A progress line is shown when standard error is a terminal.\n"
	    "Exit status: 0 success, 1 failure, 2 bad usage.\n");
}

enum { PUSH_PATH = 1, PUSH_SOURCE, PUSH_REVISION, PUSH_ANNOTATION, PUSH_REPRODUCIBLE, PUSH_IGNORE };

int cmd_push(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "path", required_argument, NULL, PUSH_PATH },
		{ "source", required_argument, NULL, PUSH_SOURCE },
		{ "revision", required_argument, NULL, PUSH_REVISION },
		{ "annotation", required_argument, NULL, PUSH_ANNOTATION },
		{ "reproducible", no_argument, NULL, PUSH_REPRODUCIBLE },
		{ "ignore-paths", required_argument, NULL, PUSH_IGNORE },
		CMD_OCI_LONG_OPTIONS,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *annotations[MAX_ANNOTATION_FLAGS + 1] = { NULL };
	size_t nann = 0;
	struct oci_push_opts po = { .annotations = annotations };
	struct cmd_oci_flags f;
	struct oci_push_result res;
	struct oci_ref ref;
	struct oci_client *client;
	struct err e = { 0 };
	int c, rc, usage;

	cmd_oci_flags_init(&f);
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			push_usage(stdout);
			cmd_oci_flags_free(&f);
			return 0;
		case PUSH_PATH: po.path = optarg; break;
		case PUSH_SOURCE: po.source = optarg; break;
		case PUSH_REVISION: po.revision = optarg; break;
		case PUSH_REPRODUCIBLE: po.reproducible = 1; break;
		case PUSH_IGNORE: po.ignore = optarg; break;
		case PUSH_ANNOTATION:
			if (strchr(optarg, '=') == NULL || optarg[0] == '=') {
				cmd_errorf("push: --annotation \"%s\" is not KEY=VALUE", optarg);
				goto usage;
			}
			if (nann >= MAX_ANNOTATION_FLAGS) {
				fprintf(stderr, "push: more than %d --annotation flags\n", MAX_ANNOTATION_FLAGS);
				goto usage;
			}
			annotations[nann++] = optarg;
			break;
		default:
			if (cmd_oci_flag(&f, c, optarg, "push") != 0)
				goto usage;
		}
	}
	if (optind != argc - 1 || po.path == NULL) {
		fprintf(stderr, "push: need exactly one reference and --path DIR\n");
		goto usage;
	}
	if (oci_ref_parse(argv[optind], &ref, &e) < 0) {
		cmd_errorf("push: %s", e.msg);
		goto usage;
	}
	if (ref.digest != NULL) {
		fprintf(stderr, "push: push to a tag (oci://HOST/REPO:TAG), not to a digest\n");
		oci_ref_free(&ref);
		goto usage;
	}
	client = cmd_oci_client(&f, &ref, "push", NULL, &usage);
	cmd_oci_flags_free(&f);
	if (client == NULL) {
		oci_ref_free(&ref);
		return usage ? EXIT_USAGE : 1;
	}
	rc = oci_push(client, &ref, &po, &res, &e);
	if (rc < 0) {
		cmd_errorf("push: %s", e.msg);
	} else {
		printf("%s\n", res.manifest_digest);
		log_info("pushed", "manifest", res.manifest_digest, "layer", res.layer_digest,
		    "layer_uploaded", res.layer_uploaded ? "true" : "false", NULL);
		oci_push_result_free(&res);
	}
	oci_client_free(client);
	oci_ref_free(&ref);
	return rc < 0 ? 1 : 0;
usage:
	cmd_oci_flags_free(&f);
	return EXIT_USAGE;
}
