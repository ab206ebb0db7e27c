/*
 * cmd_pull.c - `pulumi-controller pull oci://HOST/REPO[:TAG|@DIGEST] --out DIR`:
 * resolves the reference (optionally through a semver range), verifies the
 * manifest and the layer digest while streaming, and unpacks with the safe
 * extractor.  Prints the revision (<tag>@sha256:<manifest digest>, as Flux
 * writes it) and the layer digest.  On any failure: exit 1, a message
 * naming the cause, nothing at DIR.
 *
 * What pull and push share (flags, credentials, the client) is in
 * src/cli/cli_oci.c; the store logic is the library's (oci_store_pull).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/log.h"
#include "cli/cli.h"
#include "cli/cli_oci.h"
#include "fluxsource/fluxsource.h"

/* The one pull of this process: the flags' table points into it. */
static struct pull_flags {
	struct oci_pull_opts po;
	const char *out, *store;
	struct cli_oci_flags oci;
} flags;

#define PULL_BAD_NUMBER "invalid number \"%s\""

static const char pull_usage[] =
	    "Usage: pulumi-controller pull oci://HOST[:PORT]/REPO[:TAG|@DIGEST] (--out DIR | --store DIR)\n"
	    "           [flags]\n"
	    "\n"
	    "Pulls an OCI artifact (such as one made by `flux push artifact` or\n"
	    "`pulumi-controller push`), verifies the manifest and layer digests while\n"
	    "streaming, and unpacks the layer with the safe extractor into DIR.\n"
	    "DIR must not exist or be empty; on failure nothing is left there, nor when\n"
	    "stopped by SIGTERM or SIGINT.\n"
	    "Prints the revision (<tag>@sha256:<manifest digest>) and the layer digest.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "A progress line is shown when standard error is a terminal.\n"
	    "Exit status: 0 success, 1 failure, 2 bad usage (a malformed reference or\n"
	    "--semver range included).\n";

static const struct cli_opt pull_opts[] = {
	CLI_STRING(0, "out", &flags.out, "DIR", "where to unpack"),
	CLI_STRING(0, "store", &flags.store, "DIR", "instead of --out: keep the layer's tree in the artifact\n"
	    "store DIR/artifacts/<algo>/<hex>/ (shared with `fetch`;\n"
	    "no download when present; one download per layer digest\n"
	    "however many pulls run at once) and print its path;\n"
	    "staging a killed fetch or pull left there is removed first"),
	CLI_STRING(0, "semver", &flags.po.semver, "RANGE", "pick the highest tag matching RANGE (\">=1.2.0 <2.0.0\",\n"
	    "\"~1.2\", \"^1\", \"1.x\"); pre-releases only when RANGE names one"),
	CLI_STRING(0, "media-type", &flags.po.media_type, "TYPE", "unpack the first layer of this media type (default: Flux\n"
	    "content, then OCI tar+gzip, tar, tar+zstd)"),
	CLI_BYTES("max-size", &flags.po.limits.max_total_bytes, "BYTES",
	    "limit on unpacked bytes (default 100Mi; -1 unlimited)", PULL_BAD_NUMBER),
	CLI_BYTES("max-entries", &flags.po.limits.max_entries, "N", "limit on archive entries (default 100000)",
	    PULL_BAD_NUMBER),
	CLI_BYTES("max-download-size", &flags.po.max_layer_bytes, "BYTES",
	    "limit on the (compressed) layer size (default 512Mi;\n-1 none); at most 1 MiB may follow the archive's end",
	    PULL_BAD_NUMBER),
	CLI_DURATION("max-time", &flags.po.layer_timeout_ms, 0, LONG_MAX, "DURATION",
	    "limit on the layer download, start to end (default 5m;\n0 none); the store lock wait is limited to 5m too",
	    "invalid --max-time \"%s\" (e.g. 5m, 90s)"),
	CLI_OCI_OPTS(&flags.oci),
	CLI_HELP("show this help"),
	CLI_END,
};

static const struct cli_cmd pull_cmd = { "pull", pull_usage, pull_opts, CLI_OCI_WIDTH, CLI_UNKNOWN_QUIET };

static void print_result(const struct oci_pull_result *r)
{
	printf("revision: %s\n", r->revision);
	printf("digest: %s\n", r->layer_digest);
	if (r->platform != NULL)
		cli_errorf("pull: %s is an index; picked the %s manifest %s", r->index_digest,
		    r->platform, r->manifest_digest);
}

/* --store: the shared artifact store (oci_store_pull), after sweeping
 * the staging killed pulls and fetches left there. */
static int pull_into_store(struct oci_client *c, const struct oci_ref *ref,
    const struct oci_pull_opts *po, const char *store, struct oci_pull_result *res, struct err *e)
{
	char path[PATH_MAX];
	struct err se;
	int cached = 0;

	if (flux_store_sweep(store, &se) < 0)
		log_warn("could not sweep the artifact store", "store", store, "error", se.msg, NULL);
	if (oci_store_pull(store, c, ref, po, res, path, sizeof(path), &cached, e) < 0)
		return -1;
	printf("path: %s\n", path);
	printf("cached: %s\n", cached ? "true" : "false");
	return 0;
}

/* A range that cannot be parsed is bad usage, found before any request. */
static int semver_usable(const char *range)
{
	struct err e = { 0 };
	struct oci_semver_range *r = oci_semver_range_parse(range, &e);

	if (r == NULL) {
		cli_print_error("pull: --semver", e.msg);
		return 0;
	}
	oci_semver_range_free(r);
	return 1;
}

/* The flags into `flags`: CLI_GO_ON with *operand at the reference, or
 * the exit status. */
static int parse_flags(int argc, char **argv, int *operand)
{
	memset(&flags, 0, sizeof(flags));
	oci_pull_opts_default(&flags.po);
	cli_oci_flags_init(&flags.oci);
	return cli_parse(&pull_cmd, argc, argv, operand);
}

/* The reference and what only the flags together say: 0, or -1 after
 * saying what is wrong (a usage error, found before any request). */
static int check_args(int argc, char **argv, int operand, struct oci_ref *ref)
{
	struct err e = { 0 };

	if (operand != argc - 1 || (flags.out == NULL) == (flags.store == NULL)) {
		fprintf(stderr, "pull: need exactly one reference and one of --out DIR or --store DIR\n");
		return -1;
	}
	if (oci_ref_parse(argv[operand], ref, &e) < 0) {
		cli_errorf("pull: %s", e.msg);
		return -1;
	}
	if (flags.po.semver != NULL && !semver_usable(flags.po.semver)) {
		oci_ref_free(ref);
		return -1;
	}
	if (flags.po.semver != NULL && ref->digest != NULL) {
		fprintf(stderr, "pull: --semver and a @digest reference exclude each other\n");
		oci_ref_free(ref);
		return -1;
	}
	return 0;
}

/* Pulls into --out or the --store and prints the result: 0 or 1. */
static int pull_and_print(struct oci_client *client, const struct oci_ref *ref)
{
	struct oci_pull_result res;
	struct err e = { 0 };
	int rc;

	if (flags.store != NULL)
		rc = pull_into_store(client, ref, &flags.po, flags.store, &res, &e);
	else
		rc = oci_pull(client, ref, &flags.po, flags.out, &res, &e);
	if (rc < 0) {
		cli_print_error("pull", e.msg);
		return 1;
	}
	print_result(&res);
	log_info("pulled", "revision", res.revision, "layer", res.layer_digest, NULL);
	oci_pull_result_free(&res);
	return 0;
}

int cmd_pull(int argc, char **argv)
{
	struct oci_ref ref;
	struct oci_client *client;
	const volatile int *cancel;
	int operand, rc, usage;

	rc = parse_flags(argc, argv, &operand);
	if (rc == CLI_GO_ON && check_args(argc, argv, operand, &ref) < 0)
		rc = EXIT_USAGE;
	if (rc != CLI_GO_ON) {
		cli_oci_flags_free(&flags.oci);
		return rc;
	}
	cancel = cli_cancel_on_signals();
	flags.po.limits.cancel = cancel;
	client = cli_oci_client(&flags.oci, &ref, "pull", cancel, &usage);
	cli_oci_flags_free(&flags.oci);
	if (client == NULL) {
		oci_ref_free(&ref);
		return usage ? EXIT_USAGE : 1;
	}
	rc = pull_and_print(client, &ref);
	oci_client_free(client);
	oci_ref_free(&ref);
	return cli_exit(rc);
}
