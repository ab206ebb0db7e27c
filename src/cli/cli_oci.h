/*
 * cli_oci.h - what the `pull` and `push` commands share: the registry
 * auth and TLS flags, turning them into an oci_client, and the terminal
 * progress line.  Implemented in src/cli/cli_oci.c.
 */
#ifndef PC_CLI_OCI_H
#define PC_CLI_OCI_H

#include <getopt.h>

#include "oci/oci.h"

/* Option codes of the shared long options (outside the char range). */
enum {
	CLI_OCI_CREDS = 1000, CLI_OCI_PASSWORD_STDIN, CLI_OCI_DOCKER_CONFIG, CLI_OCI_CA_FILE,
	CLI_OCI_PLAIN_HTTP, CLI_OCI_TIMEOUT, CLI_OCI_RETRIES, CLI_OCI_LOG_LEVEL, CLI_OCI_LOG_FORMAT,
	CLI_OCI_INSECURE_SKIP_TLS_VERIFY,
};

#define CLI_OCI_LONG_OPTIONS \
	{ "creds", required_argument, NULL, CLI_OCI_CREDS }, \
	{ "password-stdin", no_argument, NULL, CLI_OCI_PASSWORD_STDIN }, \
	{ "docker-config", required_argument, NULL, CLI_OCI_DOCKER_CONFIG }, \
	{ "ca-file", required_argument, NULL, CLI_OCI_CA_FILE }, \
	{ "plain-http", no_argument, NULL, CLI_OCI_PLAIN_HTTP }, \
	{ "insecure-skip-tls-verify", no_argument, NULL, CLI_OCI_INSECURE_SKIP_TLS_VERIFY }, \
	{ "timeout", required_argument, NULL, CLI_OCI_TIMEOUT }, \
	{ "retries", required_argument, NULL, CLI_OCI_RETRIES }, \
	{ "log-level", required_argument, NULL, CLI_OCI_LOG_LEVEL }, \
	{ "log-format", required_argument, NULL, CLI_OCI_LOG_FORMAT }

#define CLI_OCI_HELP \
	"Registry access:\n" \
	"  --creds USER[:PASS]    credentials (a password on the command line is visible\n" \
	"                         to other users: prefer --password-stdin)\n" \
	"  --password-stdin       read the password for --creds USER from standard input\n" \
	"  --docker-config FILE   docker config.json (auths, credHelpers, credsStore);\n" \
	"                         default $DOCKER_CONFIG/config.json or ~/.docker/config.json\n" \
	"  --ca-file FILE         extra CA bundle (PEM) for the registry's TLS certificate\n" \
	"  --plain-http           plain HTTP, no TLS at all: what `insecure: true` means\n" \
	"                         on a Flux OCIRepository or a Stack's ociSource\n" \
	"  --insecure-skip-tls-verify  TLS, but any certificate is accepted (not what\n" \
	"                         Flux's insecure means; excludes --plain-http)\n" \
	"  --timeout DURATION     connect and stall timeout per request (30s, 500ms, 2m)\n" \
	"  --retries N            retries of failed requests (default 3)\n" \
	"  --log-level LEVEL      debug, info, warn (default), error, off\n" \
	"  --log-format FORMAT    json (default) or text\n"

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

/* Handles one shared option: 0 handled, -1 bad value (message printed),
 * 1 not a shared option. */
int cli_oci_flag(struct cli_oci_flags *f, int code, const char *arg, const char *cmd);

/* Logging, credentials and the client for ref's registry; NULL after
 * printing the error.  *usage is set when the mistake was in the flags.
 * cancel (may be NULL) becomes the client's cancel flag. */
struct oci_client *cli_oci_client(struct cli_oci_flags *f, const struct oci_ref *ref,
    const char *cmd, const volatile int *cancel, int *usage);

#endif
