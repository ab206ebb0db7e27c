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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/log.h"
#include "base/untar.h"
#include "cli/cli.h"

/* The one unpack of this process: the flags' table points into it. */
static struct unpack_flags {
	struct untar_limits lim;
	const char *out, *digest, *level, *format;
} flags;

static const char unpack_usage[] =
	    "Usage: pulumi-controller unpack ARCHIVE --out DIR [flags]\n"
	    "\n"
	    "Safely unpacks a tar, tar.gz or tar.zst archive into DIR, which must not\n"
	    "exist (its parent must).  The archive is extracted into a staging directory\n"
	    "beside DIR and renamed into place only when every entry passed the safety\n"
	    "rules; otherwise nothing is left and one line on stderr names the entry and\n"
	    "the rule.  Other formats (zip, cpio, 7z, ...) are refused.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "BYTES: digits with an optional K, M, G (powers of 1000) or Ki, Mi, Gi suffix.\n"
	    "Exit status: 0 unpacked, 1 refused or failed, 2 bad usage.\n"
	    "Rules and limits: docs/unpack.md\n";

static const struct cli_opt unpack_opts[] = {
	CLI_STRING(0, "out", &flags.out, "DIR", "directory to create (required)"),
	CLI_BYTES("max-size", &flags.lim.max_total_bytes, "BYTES", "total bytes written (default 100Mi; -1 unlimited)",
	    "invalid byte count \"%s\" for --max-size"),
	CLI_NUMBER("max-entries", &flags.lim.max_entries, -1, __LONG_LONG_MAX__, "N",
	    "number of entries (default 100000; -1 unlimited)", "invalid count \"%s\" for --max-entries"),
	CLI_BYTES("max-file-size", &flags.lim.max_file_bytes, "BYTES",
	    "bytes of one file (default -1: only --max-size applies)", "invalid byte count \"%s\" for --max-file-size"),
	CLI_STRING(0, "digest", &flags.digest, "D", "the archive file must have this digest\n"
	    "(sha256:<hex>, sha384:<hex>, sha512:<hex>, or bare\n"
	    "64-hex sha256); checked in the same pass as extraction"),
	CLI_STRING(0, "log-level", &flags.level, "L", "debug, info, warn, error, off (default warn; info\n"
	    "logs a summary of what was unpacked)"),
	CLI_STRING(0, "log-format", &flags.format, "F", "json, text (default text)"),
	CLI_HELP("this help"),
	CLI_END,
};

static const struct cli_cmd unpack_cmd = { "unpack", unpack_usage, unpack_opts, 25, CLI_UNKNOWN_USAGE };

/* The flags into `flags`, checked: CLI_GO_ON with *operand at the
 * archive, or the exit status. */
static int parse_args(int argc, char **argv, int *operand, struct digest *want)
{
	struct err e;
	int rc;

	memset(&flags, 0, sizeof(flags));
	untar_limits_default(&flags.lim);
	/* One-shot commands log for a person at a terminal (docs/logging.md). */
	flags.level = "warn";
	flags.format = "text";
	if ((rc = cli_parse(&unpack_cmd, argc, argv, operand)) != CLI_GO_ON)
		return rc;
	if (*operand != argc - 1 || flags.out == NULL) {
		fprintf(stderr, "unpack: need exactly one ARCHIVE and --out DIR (see --help)\n");
		return EXIT_USAGE;
	}
	if (cli_setup_logging(flags.level, flags.format) < 0)
		return EXIT_USAGE;
	if (flags.digest != NULL && digest_parse(flags.digest, want, &e) < 0) {
		cli_print_error("unpack: --digest", e.msg);
		return EXIT_USAGE;
	}
	return CLI_GO_ON;
}

static void log_summary(const char *archive, const struct untar_stats *st)
{
	char entries[32], files[32], bytes[32];

	snprintf(entries, sizeof(entries), "%lld", (long long)st->entries);
	snprintf(files, sizeof(files), "%lld", (long long)st->files);
	snprintf(bytes, sizeof(bytes), "%lld", (long long)st->bytes_written);
	log_info("unpacked", "archive", archive, "out", flags.out, "entries", entries,
	    "files", files, "bytes", bytes, NULL);
}

int cmd_unpack(int argc, char **argv)
{
	struct untar_stats st;
	struct digest want;
	struct err e;
	const char *archive;
	int operand, rc = parse_args(argc, argv, &operand, &want);

	if (rc != CLI_GO_ON)
		return rc;
	archive = argv[operand];
	flags.lim.cancel = cli_cancel_on_signals();
	if (untar_file_verified(archive, flags.out, flags.digest != NULL ? &want : NULL, &flags.lim, &st, &e) < 0) {
		char what[PATH_MAX + 16];
		snprintf(what, sizeof(what), "unpack %s", archive);
		cli_print_error(what, e.msg);
		return cli_exit(1);
	}
	if (log_enabled(LOG_INFO))
		log_summary(archive, &st);
	return 0;
}
