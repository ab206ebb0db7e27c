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

static void pull_usage(FILE *out)
{
	fprintf(out,
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
	    "  --out DIR              where to unpack\n"
	    "  --store DIR            instead of --out: keep the layer's tree in the artifact\n"
	    "                         store DIR/artifacts/<algo>/<hex>/ (shared with `fetch`;\n"
	    "                         no download when present; one download per layer digest\n"
	    "                         however many pulls run at once) and print its path;\n"
	    "                         staging a killed fetch or pull left there is removed first\n"
	    "  --semver RANGE         pick the highest tag matching RANGE (\">=1.2.0 <2.0.0\",\n"
	    "                         \"~1.2\", \"^1\", \"1.x\"); pre-releases only when RANGE names one\n"
	    "  --media-type TYPE      unpack the first layer of this media type (default: Flux\n"
	    "                         content, then OCI tar+gzip, tar, tar+zstd)\n"
	    "  --max-size BYTES       limit on unpacked bytes (default 100Mi; -1 unlimited)\n"
	    "  --max-entries N        limit on archive entries (default 100000)\n"
	    "  --max-download-size BYTES  limit on the (compressed) layer size (default 512Mi;\n"
	    "                         -1 none); at most 1 MiB may follow the archive's end\n"
	    "  --max-time DURATION    limit on the layer download, start to end (default 5m;\n"
	    "                         0 none); the store lock wait is limited to 5m too\n"
	    CLI_OCI_HELP
	    "  -h, --help             show this help\n"
	    "\n"
	    "A progress line is shown when standard error is a terminal.\n"
	    "Exit status: 0 success, 1 failure, 2 bad usage (a malformed reference or\n"
	    "--semver range included).\n");
}

enum { PULL_OUT = 1, PULL_STORE, PULL_SEMVER, PULL_MEDIA_TYPE, PULL_MAX_SIZE, PULL_MAX_ENTRIES, PULL_MAX_DOWNLOAD,
	PULL_MAX_TIME };

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

int cmd_pull(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "out", required_argument, NULL, PULL_OUT },
		{ "store", required_argument, NULL, PULL_STORE },
		{ "semver", required_argument, NULL, PULL_SEMVER },
		{ "media-type", required_argument, NULL, PULL_MEDIA_TYPE },
		{ "max-size", required_argument, NULL, PULL_MAX_SIZE },
		{ "max-entries", required_argument, NULL, PULL_MAX_ENTRIES },
		{ "max-download-size", required_argument, NULL, PULL_MAX_DOWNLOAD },
		{ "max-time", required_argument, NULL, PULL_MAX_TIME },
		CLI_OCI_LONG_OPTIONS,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_oci_flags f;
	struct oci_pull_opts po;
	struct oci_pull_result res;
	struct oci_ref ref;
	struct oci_client *client;
	const char *out = NULL, *store = NULL;
	struct err e = { 0 };
	long long n;
	int c, rc, usage;

	cli_oci_flags_init(&f);
	oci_pull_opts_default(&po);
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			pull_usage(stdout);
			cli_oci_flags_free(&f);
			return 0;
		case PULL_OUT: out = optarg; break;
		case PULL_STORE: store = optarg; break;
		case PULL_SEMVER: po.semver = optarg; break;
		case PULL_MEDIA_TYPE: po.media_type = optarg; break;
		case PULL_MAX_TIME:
			if (duration_parse_ms(optarg, &po.layer_timeout_ms) < 0) {
				cli_errorf("pull: invalid --max-time \"%s\" (e.g. 5m, 90s)", optarg);
				goto usage;
			}
			break;
		case PULL_MAX_SIZE:
		case PULL_MAX_ENTRIES:
		case PULL_MAX_DOWNLOAD:
			if (cli_parse_bytes(optarg, &n) < 0) {
				cli_errorf("pull: invalid number \"%s\"", optarg);
				goto usage;
			}
			if (c == PULL_MAX_SIZE)
				po.limits.max_total_bytes = n;
			else if (c == PULL_MAX_ENTRIES)
				po.limits.max_entries = n;
			else
				po.max_layer_bytes = n;
			break;
		default:
			if (cli_oci_flag(&f, c, optarg, "pull") != 0)
				goto usage;
		}
	}
	if (optind != argc - 1 || (out == NULL) == (store == NULL)) {
		fprintf(stderr, "pull: need exactly one reference and one of --out DIR or --store DIR\n");
		goto usage;
	}
	if (oci_ref_parse(argv[optind], &ref, &e) < 0) {
		cli_errorf("pull: %s", e.msg);
		goto usage;
	}
	if (po.semver != NULL && !semver_usable(po.semver)) {
		oci_ref_free(&ref);
		goto usage;
	}
	if (po.semver != NULL && ref.digest != NULL) {
		fprintf(stderr, "pull: --semver and a @digest reference exclude each other\n");
		oci_ref_free(&ref);
		goto usage;
	}
	const volatile int *cancel = cli_cancel_on_signals();
	po.limits.cancel = cancel;
	client = cli_oci_client(&f, &ref, "pull", cancel, &usage);
	cli_oci_flags_free(&f);
	if (client == NULL) {
		oci_ref_free(&ref);
		return usage ? EXIT_USAGE : 1;
	}
	if (store != NULL)
		rc = pull_into_store(client, &ref, &po, store, &res, &e);
	else
		rc = oci_pull(client, &ref, &po, out, &res, &e);
	if (rc < 0) {
		cli_print_error("pull", e.msg);
	} else {
		print_result(&res);
		log_info("pulled", "revision", res.revision, "layer", res.layer_digest, NULL);
		oci_pull_result_free(&res);
	}
	oci_client_free(client);
	oci_ref_free(&ref);
	return cli_exit(rc < 0 ? 1 : 0);
usage:
	cli_oci_flags_free(&f);
	return EXIT_USAGE;
}
