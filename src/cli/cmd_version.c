/*
 * cmd_version.c - `pulumi-controller version`: the program's version and the
 * versions of the libraries it was linked with, for bug reports.
 */
#include <archive.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int cmd_version(int argc, char **argv)
{
	if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("Usage: pulumi-controller version\n\n"
		    "Prints the version of pulumi-controller and of the libraries it uses.\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "version: unexpected argument \"%s\"\n", argv[1]);
		return EXIT_USAGE;
	}
	printf("pulumi-controller %s\n", PC_VERSION);
	printf("  libcurl %s\n", curl_version_info(CURLVERSION_NOW)->version);
	printf("  %s\n", OpenSSL_version(OPENSSL_VERSION));
	printf("  %s\n", archive_version_details());
	printf("  cJSON %s\n", cJSON_Version());
	return 0;
}
