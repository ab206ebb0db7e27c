/*
 * cmd_verify.c - `pulumi-controller verify oci://HOST/REPO[:TAG|@DIGEST]
 * --key FILE [--key FILE...]`: checks from the command line what a Stack's
 * ociSource.verify checks before anything is applied: that the manifest the
 * reference resolves to carries a cosign signature (a Sigstore bundle
 * referrer, or the sha256-<hex>.sig tag) made by one of the keys and naming
 * that very digest.  The library does the work (oci_verify, oci/verify.c);
 * registry flags are the shared ones (src/cli/cli_oci.h).
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/log.h"
#include "cli/cli.h"
#include "cli/cli_oci.h"

#define MAX_KEY_FLAGS 64
#define EXIT_UNREACHABLE 3

/* The one verify of this process: the flags' table points into it. */
static struct verify_flags {
	const char *key_v[MAX_KEY_FLAGS];
	struct cli_strings keys;
	struct cli_oci_flags oci;
} flags;

static const char verify_usage[] =
	    "Usage: pulumi-controller verify oci://HOST[:PORT]/REPO[:TAG|@DIGEST] --key FILE\n"
	    "           [--key FILE...] [flags]\n"
	    "\n"
	    "Verifies that the manifest the reference resolves to is signed with cosign by\n"
	    "one of the public keys (PEM \"PUBLIC KEY\", as `cosign generate-key-pair` writes\n"
	    "cosign.pub: ECDSA P-256/P-384/P-521, RSA 2048-4096 or Ed25519), offline and\n"
	    "without a transparency log, as Flux's OCIRepository verify does with keys.\n"
	    "Both schemes are read: Sigstore bundles attached as OCI 1.1 referrers (the\n"
	    "referrers API, then the sha256-<hex> referrers tag) and the sha256-<hex>.sig\n"
	    "tag.  The signed payload must name the manifest's digest.  Prints the scheme,\n"
	    "where the signature was found and the key that matched.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 a signature verified; 1 no signature, or none verifies (the\n"
	    "message names the scheme and what did not match); 2 bad usage or an unusable\n"
	    "key file; 3 the registry could not be asked (network, auth, HTTP errors).\n";

static const struct cli_opt verify_opts[] = {
	CLI_STRINGS("key", &flags.keys, "FILE", "a trusted public key (repeatable; any one may match)"),
	CLI_OCI_OPTS(&flags.oci),
	CLI_HELP("show this help"),
	CLI_END,
};

static const struct cli_cmd verify_cmd = { "verify", verify_usage, verify_opts, CLI_OCI_WIDTH, CLI_UNKNOWN_QUIET };

/* Reads each key file into the keyring; -1 after printing the error. */
static int load_keys(struct oci_keyring *k, const char *const *paths, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *pem = NULL, *copy = strdup(paths[i]);
		size_t len = 0;
		struct err e = { 0 };
		int rc;

		if (copy == NULL || fs_read_file(paths[i], 64 * 1024, &pem, &len, &e) < 0) {
			cli_errorf("verify: key %s: %s", paths[i], copy ? e.msg : "out of memory");
			free(copy);
			return -1;
		}
		rc = oci_keyring_add_pem(k, basename(copy), pem, len, &e);
		free(pem);
		free(copy);
		if (rc < 0) {
			cli_errorf("verify: %s (file %s)", e.msg, paths[i]);
			return -1;
		}
	}
	return 0;
}

/* The digest the reference names: its own, or the one its tag points at. */
static int resolve_digest(struct oci_client *c, const struct oci_ref *ref, char **digest,
    struct err *e)
{
	struct oci_manifest m;

	if (oci_get_manifest(c, ref->repository, ref->digest ? ref->digest : ref->tag ? ref->tag : "latest",
	    &m, digest, NULL, NULL, e) < 0)
		return -1;
	oci_manifest_free(&m);
	return 0;
}

static int run_verify(struct oci_client *client, const struct oci_ref *ref, const struct oci_keyring *k)
{
	struct oci_verify_result res;
	struct err e = { 0 };
	char *digest = NULL;
	int rc;

	if (resolve_digest(client, ref, &digest, &e) < 0) {
		cli_print_error("verify", e.msg);
		return e.code == ERR_NOTFOUND ? 1 : EXIT_UNREACHABLE;
	}
	rc = oci_verify(client, ref->repository, digest, k, &res, &e);
	if (rc == 0) {
		printf("verified %s/%s@%s\nscheme: %s\nsignature: %s\nkey: %s\n", ref->registry,
		    ref->repository, digest, oci_sig_scheme_name(res.scheme), res.signature, res.key_name);
	} else {
		cli_print_error("verify", e.msg);
		rc = (e.code == ERR_NOTFOUND || e.code == ERR_REFUSED || e.code == ERR_INVALID) ? 1 :
		    EXIT_UNREACHABLE;
	}
	oci_verify_result_free(&res);
	free(digest);
	return rc;
}

/* The flags into `flags`, the keys into *ring and the reference into ref:
 * CLI_GO_ON, or the exit status after saying what is wrong. */
static int parse_args(int argc, char **argv, struct oci_keyring **ring, struct oci_ref *ref)
{
	struct err e = { 0 };
	int operand, rc;

	memset(&flags, 0, sizeof(flags));
	flags.keys = (struct cli_strings){ flags.key_v, 0, MAX_KEY_FLAGS };
	cli_oci_flags_init(&flags.oci);
	*ring = NULL;
	if ((rc = cli_parse(&verify_cmd, argc, argv, &operand)) != CLI_GO_ON)
		return rc;
	if (operand != argc - 1 || flags.keys.n == 0) {
		fprintf(stderr, "verify: need exactly one reference and at least one --key FILE\n");
		return EXIT_USAGE;
	}
	*ring = oci_keyring_new();
	if (*ring == NULL || load_keys(*ring, flags.keys.v, flags.keys.n) < 0)
		return EXIT_USAGE;
	if (oci_ref_parse(argv[operand], ref, &e) < 0) {
		cli_errorf("verify: %s", e.msg);
		return EXIT_USAGE;
	}
	return CLI_GO_ON;
}

int cmd_verify(int argc, char **argv)
{
	struct oci_keyring *ring;
	struct oci_ref ref;
	struct oci_client *client;
	int rc, usage;

	if ((rc = parse_args(argc, argv, &ring, &ref)) != CLI_GO_ON) {
		oci_keyring_free(ring);
		cli_oci_flags_free(&flags.oci);
		return rc;
	}
	client = cli_oci_client(&flags.oci, &ref, "verify", NULL, &usage);
	cli_oci_flags_free(&flags.oci);
	if (client == NULL)
		rc = usage ? EXIT_USAGE : EXIT_UNREACHABLE;
	else
		rc = run_verify(client, &ref, ring);
	oci_client_free(client);
	oci_ref_free(&ref);
	oci_keyring_free(ring);
	return rc;
}
