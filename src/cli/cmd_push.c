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
	    "Signing (see docs/signing.md):\n"
	    "  --sign-key FILE        sign the pushed manifest with this PEM private key\n"
	    "                         (\"PRIVATE KEY\", \"EC PRIVATE KEY\", \"RSA PRIVATE KEY\" or\n"
	    "                         \"ENCRYPTED PRIVATE KEY\"; cosign's own encrypted format is\n"
	    "                         not read: `openssl pkcs8` converts); the password of an\n"
	    "                         encrypted key is read from $COSIGN_PASSWORD, never a flag\n"
	    "  --sign-key-password-file FILE  read that password from FILE instead\n"
	    "  --sign-format FORMAT   sig (default: the sha256-<hex>.sig tag, cosign v2's\n"
	    "                         format), bundle (a Sigstore bundle referrer, cosign v3's)\n"
	    "                         or both\n"
	    CLI_OCI_HELP
	    "  -h, --help             show this help\n"
	    "\n"
	    "A progress line is shown when standard error is a terminal.\n"
	    "Exit status: 0 success (pushed, and signed when asked), 1 failure (the push, or\n"
	    "the signing after it: the digest is then printed all the same), 2 bad usage\n"
	    "(an unreadable or unusable --sign-key included).\n");
}

enum { PUSH_PATH = 1, PUSH_SOURCE, PUSH_REVISION, PUSH_ANNOTATION, PUSH_REPRODUCIBLE, PUSH_IGNORE,
	PUSH_SIGN_KEY, PUSH_SIGN_PASSWORD_FILE, PUSH_SIGN_FORMAT };

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

int cmd_push(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "path", required_argument, NULL, PUSH_PATH },
		{ "source", required_argument, NULL, PUSH_SOURCE },
		{ "revision", required_argument, NULL, PUSH_REVISION },
		{ "annotation", required_argument, NULL, PUSH_ANNOTATION },
		{ "reproducible", no_argument, NULL, PUSH_REPRODUCIBLE },
		{ "ignore-paths", required_argument, NULL, PUSH_IGNORE },
		{ "sign-key", required_argument, NULL, PUSH_SIGN_KEY },
		{ "sign-key-password-file", required_argument, NULL, PUSH_SIGN_PASSWORD_FILE },
		{ "sign-format", required_argument, NULL, PUSH_SIGN_FORMAT },
		CLI_OCI_LONG_OPTIONS,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *annotations[MAX_ANNOTATION_FLAGS + 1] = { NULL };
	size_t nann = 0;
	struct oci_push_opts po = { .annotations = annotations };
	struct cli_oci_flags f;
	struct oci_push_result res;
	struct oci_ref ref;
	struct oci_client *client;
	struct oci_signer *signer = NULL;
	const char *sign_key = NULL, *sign_pw_file = NULL;
	int sign_formats = OCI_SIGN_SIMPLESIGNING;
	struct err e = { 0 };
	int c, rc, usage;

	cli_oci_flags_init(&f);
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			push_usage(stdout);
			cli_oci_flags_free(&f);
			return 0;
		case PUSH_PATH: po.path = optarg; break;
		case PUSH_SOURCE: po.source = optarg; break;
		case PUSH_REVISION: po.revision = optarg; break;
		case PUSH_REPRODUCIBLE: po.reproducible = 1; break;
		case PUSH_IGNORE: po.ignore = optarg; break;
		case PUSH_SIGN_KEY: sign_key = optarg; break;
		case PUSH_SIGN_PASSWORD_FILE: sign_pw_file = optarg; break;
		case PUSH_SIGN_FORMAT:
			if (strcmp(optarg, "sig") == 0)
				sign_formats = OCI_SIGN_SIMPLESIGNING;
			else if (strcmp(optarg, "bundle") == 0)
				sign_formats = OCI_SIGN_BUNDLE;
			else if (strcmp(optarg, "both") == 0)
				sign_formats = OCI_SIGN_SIMPLESIGNING | OCI_SIGN_BUNDLE;
			else {
				cli_errorf("push: --sign-format \"%s\": sig, bundle or both", optarg);
				goto usage;
			}
			break;
		case PUSH_ANNOTATION:
			if (strchr(optarg, '=') == NULL || optarg[0] == '=') {
				cli_errorf("push: --annotation \"%s\" is not KEY=VALUE", optarg);
				goto usage;
			}
			if (nann >= MAX_ANNOTATION_FLAGS) {
				fprintf(stderr, "push: more than %d --annotation flags\n", MAX_ANNOTATION_FLAGS);
				goto usage;
			}
			annotations[nann++] = optarg;
			break;
		default:
			if (cli_oci_flag(&f, c, optarg, "push") != 0)
				goto usage;
		}
	}
	if (optind != argc - 1 || po.path == NULL) {
		fprintf(stderr, "push: need exactly one reference and --path DIR\n");
		goto usage;
	}
	if (oci_ref_parse(argv[optind], &ref, &e) < 0) {
		cli_errorf("push: %s", e.msg);
		goto usage;
	}
	if (ref.digest != NULL) {
		fprintf(stderr, "push: push to a tag (oci://HOST/REPO:TAG), not to a digest\n");
		oci_ref_free(&ref);
		goto usage;
	}
	if ((sign_pw_file != NULL) && sign_key == NULL) {
		fprintf(stderr, "push: --sign-key-password-file needs --sign-key\n");
		oci_ref_free(&ref);
		goto usage;
	}
	if (sign_key != NULL && (signer = load_signer(sign_key, sign_pw_file)) == NULL) {
		oci_ref_free(&ref);
		goto usage;
	}
	client = cli_oci_client(&f, &ref, "push", NULL, &usage);
	cli_oci_flags_free(&f);
	if (client == NULL) {
		oci_ref_free(&ref);
		oci_signer_free(signer);
		return usage ? EXIT_USAGE : 1;
	}
	rc = oci_push(client, &ref, &po, &res, &e);
	if (rc < 0) {
		cli_errorf("push: %s", e.msg);
	} else {
		printf("%s\n", res.manifest_digest);
		fflush(stdout);
		log_info("pushed", "manifest", res.manifest_digest, "layer", res.layer_digest,
		    "layer_uploaded", res.layer_uploaded ? "true" : "false", NULL);
		if (signer != NULL)
			rc = sign_pushed(client, &ref, res.manifest_digest, signer, sign_formats);
		oci_push_result_free(&res);
	}
	oci_signer_free(signer);
	oci_client_free(client);
	oci_ref_free(&ref);
	return rc < 0 ? 1 : 0;
usage:
	cli_oci_flags_free(&f);
	return EXIT_USAGE;
}
