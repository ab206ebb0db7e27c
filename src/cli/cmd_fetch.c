/*
 * cmd_fetch.c - `pulumi-controller fetch`: what the controller does for a
 * Flux artifact, as a command: download, verify the digest and unpack in one
 * streaming pass, into a new directory or into an artifact store.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/url.h"
#include "cli/cli.h"
#include "fluxsource/fluxsource.h"

/* The one fetch of this process: the flags' table points into it. */
static struct fetch_flags {
	struct flux_fetch_opts o;
	const char *digest, *out, *store, *level, *format;
} flags;

#define FETCH_BAD_NUMBER "invalid number \"%s\""
#define FETCH_BAD_DURATION "invalid duration \"%s\" (seconds, or 90s, 5m)"
#define FETCH_MAX_MS 86400000L

/* --timeout bounds the whole fetch and each request, and no stall may
 * outlast it. */
static int timeout_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	long ms;

	if (duration_parse_ms_or_seconds(arg, &ms) < 0 || ms > FETCH_MAX_MS) {
		cli_errorf("%s: " FETCH_BAD_DURATION, cmd, arg);
		return -1;
	}
	flags.o.timeout_ms = ms;
	flags.o.http.timeout_ms = ms;
	if (flags.o.http.stall_timeout_ms > ms)
		flags.o.http.stall_timeout_ms = ms;
	return 0;
}

static const char fetch_usage[] =
	    "Usage: pulumi-controller fetch URL --digest D (--out DIR | --store DIR) [flags]\n"
	    "\n"
	    "Downloads a Flux artifact (a tar.gz served by source-controller), verifies it\n"
	    "against its digest while it streams, and unpacks it with the safe extractor.\n"
	    "Nothing is left behind on failure, nor when stopped by SIGTERM or SIGINT.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 success, 1 failure (the message names the URL and the cause), 2 bad usage.\n";

static const struct cli_opt fetch_opts[] = {
	CLI_STRING(0, "digest", &flags.digest, "D", "expected digest: sha256:<hex>, sha384:<hex>, sha512:<hex>\n"
	    "or a bare sha256 hex value (required)"),
	CLI_STRING(0, "out", &flags.out, "DIR", "unpack into DIR, which must not exist"),
	CLI_STRING(0, "store", &flags.store, "DIR", "put the artifact into the store DIR/artifacts/<algo>/<hex>/\n"
	    "(reused without network access when present) and print its path;\n"
	    "staging that a killed fetch or pull left in DIR is removed first"),
	CLI_BYTES("max-size", &flags.o.limits.max_total_bytes, "BYTES",
	    "limit on unpacked bytes (default 100Mi; -1 unlimited)", FETCH_BAD_NUMBER),
	CLI_BYTES("max-artifact-size", &flags.o.http.max_bytes, "BYTES",
	    "limit on downloaded (compressed) bytes (default 512Mi;\n-1 unlimited); --max-download-size is the old name",
	    FETCH_BAD_NUMBER),
	{ .kind = CLI_OPT_BYTES, .name = "max-download-size", .target = &flags.o.http.max_bytes,
	  .size = sizeof(flags.o.http.max_bytes), .bad = FETCH_BAD_NUMBER, .lo = -1, .hi = __LONG_LONG_MAX__,
	  .flags = CLI_HIDDEN },
	CLI_BYTES("max-entries", &flags.o.limits.max_entries, "N", "limit on archive entries (default 100000)",
	    FETCH_BAD_NUMBER),
	CLI_STRING(0, "ca-file", &flags.o.http.ca_file, "F", "trust the CA certificates in PEM file F"),
	CLI_BOOL(0, "insecure-skip-tls-verify", &flags.o.http.insecure_skip_tls_verify,
	    "do not verify the server certificate"),
	CLI_NUMBER("retries", &flags.o.http.retries, 0, 100, "N",
	    "retries on connection errors, 5xx and 429 (default 3)", "invalid --retries \"%s\""),
	CLI_CALLBACK(0, "timeout", NULL, "S", "limit on the whole fetch, in seconds: waiting for another\n"
	    "download of the same artifact in the store, every attempt\n"
	    "and the pauses between them (default 300)", timeout_flag),
	{ .kind = CLI_OPT_DURATION, .name = "connect-timeout", .target = &flags.o.http.connect_timeout_ms,
	  .size = sizeof(long), .argh = "S", .help = "limit on connecting, in seconds (default 10)",
	  .bad = FETCH_BAD_DURATION, .lo = 0, .hi = FETCH_MAX_MS, .flags = CLI_BARE_SECONDS },
	CLI_STRING(0, "host-override", &flags.o.host_override, "HOST",
	    "replace the URL's host[:port] (default: $SOURCE_CONTROLLER_LOCALHOST)"),
	CLI_LOG_OPTS(&flags.level, &flags.format, "warn", "text"),
	CLI_HELP("show this help"),
	CLI_END,
};

static const struct cli_cmd fetch_cmd = { "fetch", fetch_usage, fetch_opts, 27, CLI_UNKNOWN_USAGE };

/* The fetch itself, once the flags are understood: 0 or 1. */
static int fetch_to(const struct flux_fetch_opts *o, const char *url, const char *digest,
    const char *out, const char *store)
{
	char safe[URL_LOG_MAX];
	struct err e = { 0 };

	if (store != NULL) {
		struct flux_artifact a = { .url = url, .digest = digest };
		char path[PATH_MAX];
		int cached = 0;
		/* Staging a killed fetch left behind goes first (see --help). */
		if (flux_store_sweep(store, &e) < 0)
			log_warn("could not sweep the artifact store", "store", store, "error", e.msg, NULL);
		if (flux_store_get(store, &a, o, path, sizeof(path), &cached, &e) < 0) {
			cli_print_error("fetch", e.msg);
			return 1;
		}
		log_info(cached ? "artifact already in store" : "artifact stored", "path", path, NULL);
		printf("%s\n", path);
		return 0;
	}
	char *real_url = flux_rewrite_url(url, o->host_override, &e);
	if (real_url == NULL || flux_fetch(o, real_url, digest, out, &e) < 0) {
		cli_print_error("fetch", e.msg);
		free(real_url);
		return 1;
	}
	log_info("artifact unpacked", "url", url_for_log(real_url, safe, sizeof(safe)), "out", out, NULL);
	free(real_url);
	return 0;
}

/* The flags into `flags`: CLI_GO_ON with *operand at the URL, or the exit
 * status. */
static int parse_flags(int argc, char **argv, int *operand)
{
	memset(&flags, 0, sizeof(flags));
	flux_fetch_opts_default(&flags.o);
	/* One-shot commands log for a person at a terminal (docs/logging.md). */
	flags.level = "warn";
	flags.format = "text";
	return cli_parse(&fetch_cmd, argc, argv, operand);
}

/* What only the flags together, the digest and the URL can say; a
 * mistake in any is bad usage, as in `unpack`.  0, or -1 after saying so. */
static int check_args(int argc, char **argv, int operand)
{
	struct digest want;
	struct err e = { 0 };
	char *parsed;

	if (operand != argc - 1 || flags.digest == NULL || (flags.out == NULL) == (flags.store == NULL)) {
		fprintf(stderr, "fetch: need one URL, --digest, and one of --out or --store\n");
		cli_usage(&fetch_cmd, stderr);
		return -1;
	}
	if (cli_setup_logging(flags.level, flags.format) < 0)
		return -1;
	if (digest_parse(flags.digest, &want, &e) < 0) {
		cli_print_error("fetch: --digest", e.msg);
		return -1;
	}
	/* So is a URL (or --host-override) that cannot be parsed. */
	if ((parsed = flux_rewrite_url(argv[operand], flags.o.host_override, &e)) == NULL) {
		cli_print_error("fetch", e.msg);
		return -1;
	}
	free(parsed);
	return 0;
}

int cmd_fetch(int argc, char **argv)
{
	int operand, rc = parse_flags(argc, argv, &operand);

	if (rc != CLI_GO_ON)
		return rc;
	if (check_args(argc, argv, operand) < 0)
		return EXIT_USAGE;
	flags.o.cancel = cli_cancel_on_signals();
	return cli_exit(fetch_to(&flags.o, argv[operand], flags.digest, flags.out, flags.store));
}
