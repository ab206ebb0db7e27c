/*
 * cmd_fetch.c - `pulumi-controller fetch`: what the controller does for a
 * Flux artifact, as a command: download, verify the digest and unpack in one
 * streaming pass, into a new directory or into an artifact store.
 */
#include <getopt.h>
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

static void fetch_usage(FILE *out)
{
	fprintf(out,
	    "Usage: pulumi-controller fetch URL --digest D (--out DIR | --store DIR) [flags]\n"
	    "\n"
	    "Downloads a Flux artifact (a tar.gz served by source-controller), verifies it\n"
	    "against its digest while it streams, and unpacks it with the safe extractor.\n"
	    "Nothing is left behind on failure, nor when stopped by SIGTERM or SIGINT.\n"
	    "\n"
	    "Flags:\n"
	    "  --digest D               expected digest: sha256:<hex>, sha384:<hex>, sha512:<hex>\n"
	    "                           or a bare sha256 hex value (required)\n"
	    "  --out DIR                unpack into DIR, which must not exist\n"
	    "  --store DIR              put the artifact into the store DIR/artifacts/<algo>/<hex>/\n"
	    "                           (reused without network access when present) and print its path;\n"
	    "                           staging that a killed fetch or pull left in DIR is removed first\n"
	    "  --max-size BYTES         limit on unpacked bytes (default 100Mi; -1 unlimited)\n"
	    "  --max-artifact-size BYTES limit on downloaded (compressed) bytes (default 512Mi;\n"
	    "                           -1 unlimited); --max-download-size is the old name\n"
	    "  --max-entries N          limit on archive entries (default 100000)\n"
	    "  --ca-file F              trust the CA certificates in PEM file F\n"
	    "  --insecure-skip-tls-verify  do not verify the server certificate\n"
	    "  --retries N              retries on connection errors, 5xx and 429 (default 3)\n"
	    "  --timeout S              limit on the whole fetch, in seconds: waiting for another\n"
	    "                           download of the same artifact in the store, every attempt\n"
	    "                           and the pauses between them (default 300)\n"
	    "  --connect-timeout S      limit on connecting, in seconds (default 10)\n"
	    "  --host-override HOST     replace the URL's host[:port] (default: $SOURCE_CONTROLLER_LOCALHOST)\n"
	    "  --log-level L            debug, info, warn, error (default warn)\n"
	    "  --log-format F           json or text (default text)\n"
	    "  -h, --help               show this help\n"
	    "\n"
	    "Exit status: 0 success, 1 failure (the message names the URL and the cause), 2 bad usage.\n");
}

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

int cmd_fetch(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "digest", required_argument, NULL, 'd' },
		{ "out", required_argument, NULL, 'o' },
		{ "store", required_argument, NULL, 's' },
		{ "max-size", required_argument, NULL, 'm' },
		{ "max-artifact-size", required_argument, NULL, 'D' },
		{ "max-download-size", required_argument, NULL, 'D' },
		{ "max-entries", required_argument, NULL, 'E' },
		{ "ca-file", required_argument, NULL, 'c' },
		{ "insecure-skip-tls-verify", no_argument, NULL, 'k' },
		{ "retries", required_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 't' },
		{ "connect-timeout", required_argument, NULL, 'T' },
		{ "host-override", required_argument, NULL, 'H' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "log-format", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct flux_fetch_opts o;
	const char *digest = NULL, *out = NULL, *store = NULL;
	const char *level = "warn", *format = "text";
	long long n;
	char *end;
	struct err e = { 0 };
	int c;

	flux_fetch_opts_default(&o);
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': digest = optarg; break;
		case 'o': out = optarg; break;
		case 's': store = optarg; break;
		case 'm':
		case 'D':
		case 'E':
			if (cli_parse_bytes(optarg, &n) < 0) {
				cli_errorf("fetch: invalid number \"%s\"", optarg);
				return EXIT_USAGE;
			}
			if (c == 'm')
				o.limits.max_total_bytes = n;
			else if (c == 'D')
				o.http.max_bytes = n;
			else
				o.limits.max_entries = n;
			break;
		case 'c': o.http.ca_file = optarg; break;
		case 'k': o.http.insecure_skip_tls_verify = 1; break;
		case 'r':
			o.http.retries = (int)strtol(optarg, &end, 10);
			if (*end != '\0' || o.http.retries < 0 || o.http.retries > 100) {
				cli_errorf("fetch: invalid --retries \"%s\"", optarg);
				return EXIT_USAGE;
			}
			break;
		case 't':
		case 'T': {
			long ms;
			if (duration_parse_ms_or_seconds(optarg, &ms) < 0 || ms > 86400000) {
				cli_errorf("fetch: invalid duration \"%s\" (seconds, or 90s, 5m)", optarg);
				return EXIT_USAGE;
			}
			if (c == 't') {
				o.timeout_ms = ms;
				o.http.timeout_ms = ms;
				if (o.http.stall_timeout_ms > ms)
					o.http.stall_timeout_ms = ms;
			} else {
				o.http.connect_timeout_ms = ms;
			}
			break;
		}
		case 'H': o.host_override = optarg; break;
		case 'L': level = optarg; break;
		case 'F': format = optarg; break;
		case 'h': fetch_usage(stdout); return 0;
		default: fetch_usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind != argc - 1 || digest == NULL || (out == NULL) == (store == NULL)) {
		fprintf(stderr, "fetch: need one URL, --digest, and one of --out or --store\n");
		fetch_usage(stderr);
		return EXIT_USAGE;
	}
	if (cli_setup_logging(level, format) < 0)
		return EXIT_USAGE;
	/* A digest that cannot be one is a usage error, as in `unpack`. */
	struct digest want;
	if (digest_parse(digest, &want, &e) < 0) {
		cli_print_error("fetch: --digest", e.msg);
		return EXIT_USAGE;
	}
	/* So is a URL (or --host-override) that cannot be parsed. */
	char *parsed = flux_rewrite_url(argv[optind], o.host_override, &e);
	if (parsed == NULL) {
		cli_print_error("fetch", e.msg);
		return EXIT_USAGE;
	}
	free(parsed);
	o.cancel = cli_cancel_on_signals();
	return cli_exit(fetch_to(&o, argv[optind], digest, out, store));
}
