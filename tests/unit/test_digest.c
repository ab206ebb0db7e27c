/*
 * test_digest.c - digest parsing and formatting (the OCI/Flux "algo:hex"
 * notation and Flux's bare sha256 hex), and streaming vs one-shot hashing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/digest.h"

/* FIPS 180-2 test vectors for "abc". */
#define ABC256 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define ABC384 "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed" \
	"8086072ba1e7cc2358baeca134c825a7"
#define ABC512 "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a" \
	"2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"

static void assert_parses_to(const char *text, enum digest_algo algo, size_t len, const char *canonical)
{
	struct digest d;
	struct err e;
	char buf[DIGEST_STR_MAX];

	if (digest_parse(text, &d, &e) < 0)
		fail_msg("\"%s\" did not parse: %s", text, e.msg);
	assert_int_equal(d.algo, algo);
	assert_int_equal(d.len, len);
	digest_format(&d, buf, sizeof(buf));
	assert_string_equal(buf, canonical);
}

static void parses_every_algorithm(void **state)
{
	(void)state;
	assert_parses_to("sha256:" ABC256, DIGEST_SHA256, 32, "sha256:" ABC256);
	assert_parses_to("sha384:" ABC384, DIGEST_SHA384, 48, "sha384:" ABC384);
	assert_parses_to("sha512:" ABC512, DIGEST_SHA512, 64, "sha512:" ABC512);
}

static void bare_hex_means_sha256(void **state)
{
	(void)state;
	assert_parses_to(ABC256, DIGEST_SHA256, 32, "sha256:" ABC256);
}

static void upper_case_hex_is_normalised(void **state)
{
	char upper[200];
	(void)state;

	snprintf(upper, sizeof(upper), "sha256:%s", ABC256);
	for (char *p = upper + 7; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	assert_parses_to(upper, DIGEST_SHA256, 32, "sha256:" ABC256);
	assert_parses_to(upper + 7, DIGEST_SHA256, 32, "sha256:" ABC256);
}

static void assert_refused(const char *text, enum err_code code)
{
	struct digest d;
	struct err e;

	err_clear(&e);
	if (digest_parse(text, &d, &e) == 0)
		fail_msg("\"%s\" was accepted", text);
	assert_int_equal(e.code, code);
	assert_true(strlen(e.msg) > 0);
}

static void wrong_lengths_are_refused(void **state)
{
	(void)state;
	assert_refused("sha256:" ABC256 "00", ERR_INVALID);
	assert_refused("sha256:ba7816bf", ERR_INVALID);
	assert_refused("sha256:", ERR_INVALID);
	assert_refused("sha512:" ABC256, ERR_INVALID);       /* sha256 length under sha512 */
	assert_refused("sha384:" ABC512, ERR_INVALID);
	assert_refused(ABC512, ERR_INVALID);                  /* bare hex is sha256 only */
	assert_refused("ba7816bf", ERR_INVALID);
}

static void non_hex_is_refused(void **state)
{
	char bad[100];
	(void)state;

	snprintf(bad, sizeof(bad), "sha256:%s", ABC256);
	bad[10] = 'g';
	assert_refused(bad, ERR_INVALID);
	bad[10] = ' ';
	assert_refused(bad, ERR_INVALID);
	assert_refused("sha256: " ABC256, ERR_INVALID);
}

static void unknown_algorithms_are_refused(void **state)
{
	(void)state;
	assert_refused("md5:d41d8cd98f00b204e9800998ecf8427e", ERR_UNSUPPORTED);
	assert_refused("sha1:a9993e364706816aba3e25717850c26c9cd0d89d", ERR_UNSUPPORTED);
	assert_refused("blake3:" ABC256, ERR_UNSUPPORTED);
	assert_refused("SHA256:" ABC256, ERR_UNSUPPORTED);    /* names are lower case */
	assert_refused(":" ABC256, ERR_UNSUPPORTED);
	assert_refused("", ERR_INVALID);
}

static void error_names_the_value(void **state)
{
	struct digest d;
	struct err e;
	(void)state;

	assert_int_equal(digest_parse("blake3:abcd", &d, &e), -1);
	assert_non_null(strstr(e.msg, "blake3:abcd"));
	assert_int_equal(digest_parse("sha256:abcd", &d, &e), -1);
	assert_non_null(strstr(e.msg, "sha256:abcd"));
	assert_non_null(strstr(e.msg, "64"));
}

static void one_shot_matches_vectors(void **state)
{
	struct digest d, want;
	struct err e;
	(void)state;

	digest_bytes(DIGEST_SHA256, "abc", 3, &d);
	assert_int_equal(digest_parse("sha256:" ABC256, &want, &e), 0);
	assert_true(digest_equal(&d, &want));
	digest_bytes(DIGEST_SHA384, "abc", 3, &d);
	assert_int_equal(digest_parse("sha384:" ABC384, &want, &e), 0);
	assert_true(digest_equal(&d, &want));
	digest_bytes(DIGEST_SHA512, "abc", 3, &d);
	assert_int_equal(digest_parse("sha512:" ABC512, &want, &e), 0);
	assert_true(digest_equal(&d, &want));
	/* Same bytes, another algorithm: never equal. */
	digest_bytes(DIGEST_SHA256, "abc", 3, &d);
	assert_false(digest_equal(&d, &want));
}

static void streaming_matches_one_shot(void **state)
{
	static const size_t chunks[] = { 1, 7, 63, 64, 65, 4096, 100000 };
	enum digest_algo algos[] = { DIGEST_SHA256, DIGEST_SHA384, DIGEST_SHA512 };
	size_t n = 300000;
	unsigned char *data = malloc(n);
	(void)state;

	assert_non_null(data);
	for (size_t i = 0; i < n; i++)
		data[i] = (unsigned char)(i * 31 + (i >> 8));
	for (size_t a = 0; a < 3; a++) {
		struct digest whole;
		digest_bytes(algos[a], data, n, &whole);
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
			struct digest_ctx *ctx = digest_ctx_new(algos[a]);
			struct digest part;
			assert_non_null(ctx);
			for (size_t off = 0; off < n; off += chunks[c])
				digest_ctx_update(ctx, data + off, off + chunks[c] > n ? n - off : chunks[c]);
			digest_ctx_final(ctx, &part);
			digest_ctx_free(ctx);
			assert_true(digest_equal(&whole, &part));
		}
	}
	free(data);
}

static void file_matches_bytes(void **state)
{
	char path[] = "/tmp/test_digest.XXXXXX";
	int fd = mkstemp(path);
	struct digest f, b;
	struct err e;
	unsigned char data[70000];
	(void)state;

	assert_true(fd >= 0);
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i ^ (i >> 3));
	assert_int_equal(write(fd, data, sizeof(data)), (ssize_t)sizeof(data));
	close(fd);
	assert_int_equal(digest_file(path, DIGEST_SHA512, &f, &e), 0);
	digest_bytes(DIGEST_SHA512, data, sizeof(data), &b);
	assert_true(digest_equal(&f, &b));
	unlink(path);
	assert_int_equal(digest_file(path, DIGEST_SHA256, &f, &e), -1);
	assert_int_equal(e.code, ERR_IO);
	assert_non_null(strstr(e.msg, path));
}

static void hex_and_names(void **state)
{
	struct digest d;
	struct err e;
	char hex[DIGEST_MAX_RAW * 2 + 1];
	(void)state;

	assert_int_equal(digest_parse("sha384:" ABC384, &d, &e), 0);
	digest_hex(&d, hex, sizeof(hex));
	assert_string_equal(hex, ABC384);
	assert_string_equal(digest_algo_name(DIGEST_SHA256), "sha256");
	assert_string_equal(digest_algo_name(DIGEST_SHA384), "sha384");
	assert_string_equal(digest_algo_name(DIGEST_SHA512), "sha512");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_every_algorithm),
		cmocka_unit_test(bare_hex_means_sha256),
		cmocka_unit_test(upper_case_hex_is_normalised),
		cmocka_unit_test(wrong_lengths_are_refused),
		cmocka_unit_test(non_hex_is_refused),
		cmocka_unit_test(unknown_algorithms_are_refused),
		cmocka_unit_test(error_names_the_value),
		cmocka_unit_test(one_shot_matches_vectors),
		cmocka_unit_test(streaming_matches_one_shot),
		cmocka_unit_test(file_matches_bytes),
		cmocka_unit_test(hex_and_names),
	};
	return cmocka_run_group_tests_name("digest", tests, NULL, NULL);
}
