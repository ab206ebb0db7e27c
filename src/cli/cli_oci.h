/*
 * cli_oci.h - what the `pull`, `push` and `verify` commands share: the
 * registry auth and TLS flags (entries of their flag tables), turning them
 * into an oci_client, and the terminal progress line.  Implemented in src/cli/cli_oci.c.
 */
#ifndef PC_CLI_OCI_H
#define PC_CLI_OCI_H

#include "cli/cli.h"
#include "oci/oci.h"

struct cli_oci_flags {
	char *creds;
	int password_stdin;
	const char *docker_config;
	const char *ca_file;
	int plain_http;
	int insecure_skip_tls_verify;
	long timeout_ms;
	int retries;
	const char *log_level, *log_format;
};

void cli_oci_flags_init(struct cli_oci_flags *f);
void cli_oci_flags_free(struct cli_oci_flags *f);

/* --creds: a copy of the value, and argv's own blanked (ps shows it). */
cli_opt_cb cli_oci_creds_flag;

/* The shared flags' entries, for a command's table (cli.h), their help
 * under the heading "Registry access:"; f is the command's static
 * struct cli_oci_flags. */
#define CLI_OCI_OPTS(f) \
	CLI_GROUP("Registry access:"), \
	CLI_CALLBACK(0, "creds", (f), "USER[:PASS]", "credentials (a password on the command line is visible\n" \
	    "to other users: prefer --password-stdin)", cli_oci_creds_flag), \
	CLI_BOOL(0, "password-stdin", &(f)->password_stdin, "read the password for --creds USER from standard input"), \
	CLI_STRING(0, "docker-config", &(f)->docker_config, "FILE", \
	    "docker config.json (auths, credHelpers, credsStore);\n" \
	    "default $DOCKER_CONFIG/config.json or ~/.docker/config.json"), \
	CLI_STRING(0, "ca-file", &(f)->ca_file, "FILE", "extra CA bundle (PEM) for the registry's TLS certificate"), \
	CLI_BOOL(0, "plain-http", &(f)->plain_http, "plain HTTP, no TLS at all: what `insecure: true` means\n" \
	    "on a Flux OCIRepository or a Stack's ociSource"), \
	CLI_BOOL(0, "insecure-skip-tls-verify", &(f)->insecure_skip_tls_verify, \
	    "TLS, but any certificate is accepted (not what\nFlux's insecure means; excludes --plain-http)"), \
	{ .kind = CLI_OPT_DURATION, .name = "timeout", .target = &(f)->timeout_ms, .size = sizeof(long), \
	  .argh = "DURATION", .help = "connect and stall timeout per request (30s, 500ms, 2m)", \
	  .bad = "invalid --timeout \"%s\" (e.g. 30s, 500ms, 2m)", .lo = 1, .hi = 86400000, \
	  .flags = CLI_BARE_SECONDS }, \
	CLI_NUMBER("retries", &(f)->retries, 0, 100, "N", "retries of failed requests (default 3)", \
	    "invalid --retries \"%s\""), \
	CLI_STRING(0, "log-level", &(f)->log_level, "LEVEL", "debug, info, warn (default), error, off"), \
	CLI_STRING(0, "log-format", &(f)->log_format, "FORMAT", "json (default) or text")

/* The column the commands with these flags align their help at. */
#define CLI_OCI_WIDTH 25

/* Logging, credentials and the client for ref's registry; NULL after
 * printing the error.  *usage is set when the mistake was in the flags.
 * cancel (may be NULL) becomes the client's cancel flag. */
struct oci_client *cli_oci_client(struct cli_oci_flags *f, const struct oci_ref *ref,
    const char *cmd, const volatile int *cancel, int *usage);

#endif
