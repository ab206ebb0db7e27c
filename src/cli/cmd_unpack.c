/*
 * cmd_unpack.c - `pulumi-controller unpack ARCHIVE --out DIR`: the safe
 * extractor (base/untar.h) on a local file, with its limits and an optional
 * digest check.  It is what an operator uses to see how the controller will
 * treat an artifact, and what the hostile-archive tests drive.
 *
 * Output contract: exit 0 after DIR was created with the whole archive; on
 * any failure exit 1 (2 for bad usage), exactly one line on stderr naming
 * the archive and, for a refused entry, the entry and the rule; DIR is then
 * not created and no staging directory is left beside it.  SIGTERM/SIGINT
 * stop the extraction, remove the staging and end the process by that
 * signal.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/log.h"
#include "base/untar.h"
#include "cli/cli.h"

static void unpack_usage(FILE *out)
{
	fprintf(out,
	    "Usage: pulumi-controller unpack ARCHIVE --out DIR [flags]\n"
	    "\n"
	    "Safely unpacks a tar, tar.gz or tar.zst archive into DIR, which must not\n"
	    "exist (its parent must).  The archive is extracted into a staging directory\n"
	    "beside DIR and renamed into place only when every entry passed the safety\n"
	    "rules; otherwise nothing is left and one line on stderr names the entry and\n"
	    "the rule.  Other formats (zip, cpio, 7z, ...) are refused.\n"
	    "\n"
	    "Flags:\n"
	    "  --out DIR              directory to create (required)\n"
	    "  --max-size BYTES       total bytes written (default 100Mi; -1 unlimited)\n"
	    "  --max-entries N        number of entries (default 100000; -1 unlimited)\n"
	    "  --max-file-size BYTES  bytes of one file (default -1: only --max-size applies)\n"
	    "  --digest D             the archive file must have this digest\n"
	    "                         (sha256:<hex>, sha384:<hex>, sha512:<hex>, or bare\n"
	    "                         64-hex sha256); checked in the same pass as extraction\n"
	    "  --log-level L          debug, info, warn, error, off (default warn; info\n"
	    "                         logs a summary of what was unpacked)\n"
	    "  --log-format F         json, text (default text)\n"
	    "  -h, --help             this help\n"
	    "\n"
	    "BYTES: digits with an optional K, M, G (powers of 1000) or Ki, Mi, Gi suffix.\n"
	    "Exit status: 0 unpacked, 1 refused or failed, 2 bad usage.\n"
	    "Rules and limits: docs/unpack.md\n");
}

static int parse_count(const char *s, long long *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < -1)
		return -1;
	*out = v;
	return 0;
}

enum { OPT_OUT = 256, OPT_MAX_SIZE, OPT_MAX_ENTRIES, OPT_MAX_FILE, OPT_DIGEST, OPT_LOG_LEVEL,
	OPT_LOG_FORMAT };

int cmd_unpack(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "out", required_argument, NULL, OPT_OUT },
		{ "max-size", required_argument, NULL, OPT_MAX_SIZE },
		{ "max-entries", required_argument, NULL, OPT_MAX_ENTRIES },
		{ "max-file-size", required_argument, NULL, OPT_MAX_FILE },
		{ "digest", required_argument, NULL, OPT_DIGEST },
		{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
		{ "log-format", required_argument, NULL, OPT_LOG_FORMAT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	/* One-shot commands log for a person at a terminal (docs/logging.md). */
	const char *out = NULL, *digest_text = NULL, *level = "warn", *format = "text", *archive;
	struct untar_limits lim;
	struct untar_stats st;
	struct digest want;
	struct err e;
	long long v;
	int c;

	untar_limits_default(&lim);
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_OUT:
			out = optarg;
			break;
		case OPT_MAX_SIZE:
		case OPT_MAX_FILE:
			if (cli_parse_bytes(optarg, &v) < 0) {
				cli_errorf("unpack: invalid byte count \"%s\" for --%s", optarg,
				    c == OPT_MAX_SIZE ? "max-size" : "max-file-size");
				return EXIT_USAGE;
			}
			if (c == OPT_MAX_SIZE)
				lim.max_total_bytes = v;
			else
				lim.max_file_bytes = v;
			break;
		case OPT_MAX_ENTRIES:
			if (parse_count(optarg, &v) < 0) {
				cli_errorf("unpack: invalid count \"%s\" for --max-entries", optarg);
				return EXIT_USAGE;
			}
			lim.max_entries = v;
			break;
		case OPT_DIGEST:
			digest_text = optarg;
			break;
		case OPT_LOG_LEVEL:
			level = optarg;
			break;
		case OPT_LOG_FORMAT:
			format = optarg;
			break;
		case 'h':
			unpack_usage(stdout);
			return 0;
		default:
			unpack_usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind != argc - 1 || out == NULL) {
		fprintf(stderr, "unpack: need exactly one ARCHIVE and --out DIR (see --help)\n");
		return EXIT_USAGE;
	}
	archive = argv[optind];
	if (cli_setup_logging(level, format) < 0)
		return EXIT_USAGE;
	if (digest_text != NULL && digest_parse(digest_text, &want, &e) < 0) {
		cli_print_error("unpack: --digest", e.msg);
		return EXIT_USAGE;
	}
	lim.cancel = cli_cancel_on_signals();
	if (untar_file_verified(archive, out, digest_text != NULL ? &want : NULL, &lim, &st, &e) < 0) {
		char what[PATH_MAX + 16];
		snprintf(what, sizeof(what), "unpack %s", archive);
		cli_print_error(what, e.msg);
		return cli_exit(1);
	}
	if (log_enabled(LOG_INFO)) {
		char entries[32], files[32], bytes[32];
		snprintf(entries, sizeof(entries), "%lld", (long long)st.entries);
		snprintf(files, sizeof(files), "%lld", (long long)st.files);
		snprintf(bytes, sizeof(bytes), "%lld", (long long)st.bytes_written);
		log_info("unpacked", "archive", archive, "out", out, "entries", entries,
		    "files", files, "bytes", bytes, NULL);
	}
	return 0;
}
