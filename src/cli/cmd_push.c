/*
 * cmd_push.c - `pulumi-controller push oci://HOST/REPO:TAG --path DIR`:
 * publishes a directory as an OCI artifact in the format of
 * `flux push artifact`, so Flux's OCIRepository (and `pull`) can consume
 * it.  Prints the manifest digest.  Shared registry flags: src/cli/cli_oci.h.
 * With --sign-key it then signs the manifest as `cosign sign --key` does
 * (oci_sign, oci/sign.c); the key is loaded before anything is pushed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/secret.h"
#include "cli/cli.h"
#include "cli/cli_oci.h"

#define MAX_ANNOTATION_FLAGS 128

/* The one push of this process: the flags' table points into it. */
static struct push_flags {
	struct oci_push_opts po;
	const char *annotation_v[MAX_ANNOTATION_FLAGS + 1];   /* NULL-terminated for po */
	struct cli_strings annotations;
	const char *sign_key, *sign_pw_file;
	int sign_formats;
	struct cli_oci_flags oci;
} flags;

static int annotation_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (strchr(arg, '=') == NULL || arg[0] == '=') {
		cli_errorf("%s: --annotation \"%s\" is not KEY=VALUE", cmd, arg);
		return -1;
	}
	return cli_strings_add(&flags.annotations, arg, cmd, o->name);
}

static int sign_format_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (strcmp(arg, "sig") == 0)
		flags.sign_formats = OCI_SIGN_SIMPLESIGNING;
	else if (strcmp(arg, "bundle") == 0)
		flags.sign_formats = OCI_SIGN_BUNDLE;
	else if (strcmp(arg, "both") == 0)
		flags.sign_formats = OCI_SIGN_SIMPLESIGNING | OCI_SIGN_BUNDLE;
	else {
		cli_errorf("%s: --sign-format \"%s\": sig, bundle or both", cmd, arg);
		return -1;
	}
	return 0;
}

static const char push_usage[] =
	    "Usage: pulumi-controller push oci://HOST[:PORT]/REPO:TAG --path DIR [flags]\n"
	    "\n"
	    "Packs DIR as tar+gzip (entries relative to DIR, sorted, owners and times\n"
	    "zeroed, modes kept; only directories and regular files) and pushes it as a\n"
	    "Flux artifact: config application/vnd.cncf.flux.config.v1+json, one layer\n"
	    "application/vnd.cncf.flux.content.v1.tar+gzip.  Blobs the registry already\n"
	    "has are not uploaded again.  Prints the manifest digest.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "A progress line is shown when standard error is a terminal.\n"
	    "Exit status: 0 success (pushed, and signed when asked), 1 failure (the push, or\n"
	    "the signing after it: the digest is then printed all the same), 2 bad usage\n"
	    "(an unreadable or unusable --sign-key included).\n";

static const struct cli_opt push_opts[] = {
	CLI_STRING(0, "path", &flags.po.path, "DIR", "the directory to push (required)"),
	CLI_STRING(0, "source", &flags.po.source, "URL", "annotation org.opencontainers.image.source"),
	CLI_STRING(0, "revision", &flags.po.revision, "REV", "annotation org.opencontainers.image.revision\n"
	    "(e.g. main@sha1:<commit>)"),
	CLI_CALLBACK(0, "annotation", NULL, "K=V", "an extra manifest annotation (repeatable)", annotation_flag),
	CLI_BOOL(0, "reproducible", &flags.po.reproducible, "created = 1970-01-01T00:00:00Z, so the same tree and\n"
	    "flags always give the same manifest digest"),
	CLI_STRING(0, "ignore-paths", &flags.po.ignore, "LIST", "comma-separated gitignore-style patterns to leave out\n"
	    "(default: " OCI_DEFAULT_IGNORE ")"),
	CLI_GROUP("Signing (see docs/signing.md):"),
	CLI_STRING(0, "sign-key", &flags.sign_key, "FILE", "sign the pushed manifest with this PEM private key\n"
	    "(\"PRIVATE KEY\", \"EC PRIVATE KEY\", \"RSA PRIVATE KEY\" or\n"
	    "\"ENCRYPTED PRIVATE KEY\"; cosign's own encrypted format is\n"
	    "not read: `openssl pkcs8` converts); the password of an\n"
	    "encrypted key is read from $COSIGN_PASSWORD, never a flag"),
	CLI_STRING(0, "sign-key-password-file", &flags.sign_pw_file, "FILE", "read that password from FILE instead"),
	CLI_CALLBACK(0, "sign-format", NULL, "FORMAT", "sig (default: the sha256-<hex>.sig tag, cosign v2's\n"
	    "format), bundle (a Sigstore bundle referrer, cosign v3's)\nor both", sign_format_flag),
	CLI_OCI_OPTS(&flags.oci),
	CLI_HELP("show this help"),
	CLI_END,
};

static const struct cli_cmd push_cmd = { "push", push_usage, push_opts, CLI_OCI_WIDTH, CLI_UNKNOWN_QUIET };

/* The signing key, loaded before the push so a bad key costs no upload.
 * The password comes from a file or $COSIGN_PASSWORD, never argv. */
static struct oci_signer *load_signer(const char *path, const char *password_file)
{
	char *pem = NULL, *pw = NULL, *env = getenv("COSIGN_PASSWORD");
	size_t len = 0, pwlen = 0;
	struct oci_signer *s = NULL;
	struct err e = { 0 };

	if (fs_read_file(path, 64 * 1024, &pem, &len, &e) < 0) {
		cli_errorf("push: --sign-key %s: %s", path, e.msg);
		return NULL;
	}
	if (password_file != NULL) {
		if (fs_read_file(password_file, 4096, &pw, &pwlen, &e) < 0) {
			cli_errorf("push: --sign-key-password-file %s: %s", password_file, e.msg);
			goto out;
		}
		while (pwlen > 0 && (pw[pwlen - 1] == '\n' || pw[pwlen - 1] == '\r'))
			pw[--pwlen] = '\0';
	} else if (env != NULL && (pw = strdup(env)) == NULL) {
		goto out;
	}
	s = oci_signer_from_pem(path, pem, len, pw, &e);
	if (s == NULL)
		cli_errorf("push: %s", e.msg);
out:
	secret_wipe(pem, len);
	free(pem);
	secret_free(pw);
	return s;
}

/* Signs the pushed manifest in each format asked for; 0 or -1 (printed). */
static int sign_pushed(struct oci_client *client, const struct oci_ref *ref, const char *digest,
    const struct oci_signer *signer, int formats)
{
	char *docker_ref = NULL, *where = NULL;
	struct err e = { 0 };
	int rc = 0;

	/* What cosign writes as critical.identity.docker-reference: the
	 * repository without tag. */
	if (asprintf(&docker_ref, "%s/%s", ref->registry, ref->repository) < 0)
		return -1;
	for (int f = OCI_SIGN_SIMPLESIGNING; f <= OCI_SIGN_BUNDLE && rc == 0; f <<= 1) {
		if (!(formats & f))
			continue;
		if (oci_sign(client, ref->repository, digest, docker_ref, signer, (enum oci_sign_format)f,
		    &where, &e) < 0) {
			cli_errorf("push: pushed %s but could not sign it: %s", digest, e.msg);
			rc = -1;
		} else {
			log_info("signed", "manifest", digest, "signature", where, NULL);
		}
		free(where);
		where = NULL;
	}
	free(docker_ref);
	return rc;
}

/* The flags into `flags`: CLI_GO_ON with *operand at the reference, or
 * the exit status. */
static int parse_flags(int argc, char **argv, int *operand)
{
	memset(&flags, 0, sizeof(flags));
	flags.po.annotations = flags.annotation_v;
	flags.annotations = (struct cli_strings){ flags.annotation_v, 0, MAX_ANNOTATION_FLAGS };
	flags.sign_formats = OCI_SIGN_SIMPLESIGNING;
	cli_oci_flags_init(&flags.oci);
	return cli_parse(&push_cmd, argc, argv, operand);
}

/* The reference and the signing key, checked before anything is sent:
 * 0, or -1 after saying what is wrong (a usage error). */
static int check_args(int argc, char **argv, int operand, struct oci_ref *ref, struct oci_signer **signer)
{
	struct err e = { 0 };

	*signer = NULL;
	if (operand != argc - 1 || flags.po.path == NULL) {
		fprintf(stderr, "push: need exactly one reference and --path DIR\n");
		return -1;
	}
	if (oci_ref_parse(argv[operand], ref, &e) < 0) {
		cli_errorf("push: %s", e.msg);
		return -1;
	}
	if (ref->digest != NULL)
		fprintf(stderr, "push: push to a tag (oci://HOST/REPO:TAG), not to a digest\n");
	else if (flags.sign_pw_file != NULL && flags.sign_key == NULL)
		fprintf(stderr, "push: --sign-key-password-file needs --sign-key\n");
	else if (flags.sign_key == NULL || (*signer = load_signer(flags.sign_key, flags.sign_pw_file)) != NULL)
		return 0;
	oci_ref_free(ref);
	return -1;
}

/* Pushes, prints the digest, then signs when asked: 0 or 1. */
static int push_and_sign(struct oci_client *client, const struct oci_ref *ref, const struct oci_signer *signer)
{
	struct oci_push_result res;
	struct err e = { 0 };
	int rc = oci_push(client, ref, &flags.po, &res, &e);

	if (rc < 0) {
		cli_errorf("push: %s", e.msg);
		return 1;
	}
	printf("%s\n", res.manifest_digest);
	fflush(stdout);
	log_info("pushed", "manifest", res.manifest_digest, "layer", res.layer_digest,
	    "layer_uploaded", res.layer_uploaded ? "true" : "false", NULL);
	if (signer != NULL)
		rc = sign_pushed(client, ref, res.manifest_digest, signer, flags.sign_formats);
	oci_push_result_free(&res);
	return rc < 0 ? 1 : 0;
}

int cmd_push(int argc, char **argv)
{
	struct oci_ref ref;
	struct oci_client *client;
	struct oci_signer *signer;
	int operand, rc, usage;

	rc = parse_flags(argc, argv, &operand);
	if (rc == CLI_GO_ON && check_args(argc, argv, operand, &ref, &signer) < 0)
		rc = EXIT_USAGE;
	if (rc != CLI_GO_ON) {
		cli_oci_flags_free(&flags.oci);
		return rc;
	}
	client = cli_oci_client(&flags.oci, &ref, "push", NULL, &usage);
	cli_oci_flags_free(&flags.oci);
	if (client == NULL)
		rc = usage ? EXIT_USAGE : 1;
	else
		rc = push_and_sign(client, &ref, signer);
	oci_signer_free(signer);
	oci_client_free(client);
	oci_ref_free(&ref);
	return rc;
}
