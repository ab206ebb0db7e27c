/*
 * test_pulumi_deps.c - pl_dependency_key and pl_dependency_dirs (pl_deps.c):
 * the key a new revision must match to skip `pulumi install`.  A change to
 * the program alone keeps the key; a change to the runtime, its options,
 * plugins, packages or any dependency or lock file changes it; runtimes
 * whose install builds in the tree have no key; a hostile Pulumi.yaml is
 * refused with a message naming the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fs.h"
#include "pulumi/pulumi.h"

static char dir[256];

static void put(const char *rel, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void drop(const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	assert_int_equal(unlink(path), 0);
}

/* The key now (asserting there is one), into out[72]. */
static void key_of(char *out)
{
	struct err e;
	int rc = pl_dependency_key(dir, out, 72, &e);

	if (rc != 1)
		fail_msg("pl_dependency_key: %d %s", rc, rc < 0 ? e.msg : "(no key)");
	assert_int_equal(strlen(out), 64);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_pulumi_deps.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	struct err e;
	(void)state;
	return fs_rm_rf(dir, &e);
}

static void a_program_change_keeps_the_key(void **state)
{
	char a[72], b[72];
	(void)state;

	put("Pulumi.yaml", "name: web\nruntime: yaml\nresources:\n  a:\n    type: random:RandomPet\n");
	key_of(a);
	put("Pulumi.yaml", "name: web\ndescription: now described\nruntime: yaml\noutputs:\n  x: 1\n");
	key_of(b);
	assert_string_equal(a, b);
	/* The same runtime written as a mapping is another declaration. */
	put("Pulumi.yaml", "name: web\nruntime:\n  name: yaml\n");
	key_of(b);
	assert_string_not_equal(a, b);
}

static void runtime_options_plugins_and_packages_count(void **state)
{
	char base[72], k[72];
	(void)state;

	put("Pulumi.yaml", "name: web\nruntime: nodejs\n");
	key_of(base);
	put("Pulumi.yaml", "name: web\nruntime:\n  name: nodejs\n  options:\n    packagemanager: pnpm\n");
	key_of(k);
	assert_string_not_equal(base, k);
	put("Pulumi.yaml", "name: web\nruntime: nodejs\nplugins:\n  providers:\n  - name: aws\n    path: ./bin\n");
	key_of(k);
	assert_string_not_equal(base, k);
	put("Pulumi.yaml", "name: web\nruntime: nodejs\npackages:\n  tls: tls@4.0.0\n");
	key_of(k);
	assert_string_not_equal(base, k);
	/* An alias means the node it names, as the CLI reads it. */
	put("Pulumi.yaml", "name: web\nx: &pk {tls: tls@4.0.0}\nruntime: nodejs\npackages: *pk\n");
	{
		char via_alias[72];
		key_of(via_alias);
		assert_string_equal(k, via_alias);
	}
}

static void dependency_files_count_absent_or_present(void **state)
{
	char none[72], k1[72], k2[72], k3[72];
	(void)state;

	put("Pulumi.yaml", "name: web\nruntime: nodejs\n");
	key_of(none);
	put("package.json", "{\"dependencies\": {\"@pulumi/pulumi\": \"^3\"}}\n");
	key_of(k1);
	assert_string_not_equal(none, k1);
	put("package-lock.json", "{\"lockfileVersion\": 3}\n");
	key_of(k2);
	assert_string_not_equal(k1, k2);
	put("package-lock.json", "{\"lockfileVersion\": 3, \"x\": 1}\n");
	key_of(k3);
	assert_string_not_equal(k2, k3);
	drop("package-lock.json");
	key_of(k3);
	assert_string_equal(k1, k3);
	/* A program file is not a dependency declaration. */
	put("index.ts", "export const x = 1;\n");
	key_of(k3);
	assert_string_equal(k1, k3);
	drop("package.json");
	drop("index.ts");
	put("requirements.txt", "pulumi>=3\n");
	key_of(k3);
	assert_string_not_equal(none, k3);
	drop("requirements.txt");
}

static void runtimes_that_build_in_the_tree_have_no_key(void **state)
{
	char k[72];
	struct err e;
	(void)state;

	put("Pulumi.yaml", "name: web\nruntime: dotnet\n");
	assert_int_equal(pl_dependency_key(dir, k, sizeof(k), &e), 0);
	put("Pulumi.yaml", "name: web\nruntime:\n  name: java\n");
	assert_int_equal(pl_dependency_key(dir, k, sizeof(k), &e), 0);
	put("Pulumi.yaml", "name: web\n");
	assert_int_equal(pl_dependency_key(dir, k, sizeof(k), &e), 0);
}

static void hostile_or_missing_project_files_are_errors(void **state)
{
	char k[72], deep[4096] = "name: web\nruntime: python\npackages: ";
	struct err e;
	(void)state;

	for (int i = 0; i < 40; i++)
		strcat(deep, "[");
	for (int i = 0; i < 40; i++)
		strcat(deep, "]");
	strcat(deep, "\n");
	put("Pulumi.yaml", deep);
	assert_int_equal(pl_dependency_key(dir, k, sizeof(k), &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
	assert_non_null(strstr(e.msg, "Pulumi.yaml"));
	assert_non_null(strstr(e.msg, "packages"));
	put("Pulumi.yaml", "name: [unclosed\n");
	assert_int_equal(pl_dependency_key(dir, k, sizeof(k), &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	drop("Pulumi.yaml");
	assert_int_equal(pl_dependency_key(dir, k, sizeof(k), &e), -1);
	assert_int_equal(e.code, ERR_NOTFOUND);
}

static void dependency_dirs_include_a_relative_virtualenv(void **state)
{
	char dirs[8][256];
	size_t n;
	(void)state;

	put("Pulumi.yaml", "name: web\nruntime:\n  name: python\n  options:\n    virtualenv: env/py\n");
	n = pl_dependency_dirs(dir, dirs, 8);
	assert_int_equal(n, 4);
	assert_string_equal(dirs[0], "node_modules");
	assert_string_equal(dirs[3], "env/py");
	/* Outside the program directory: not the workspace's to carry. */
	put("Pulumi.yaml", "name: web\nruntime:\n  name: python\n  options:\n    virtualenv: ../shared\n");
	assert_int_equal(pl_dependency_dirs(dir, dirs, 8), 3);
	put("Pulumi.yaml", "name: web\nruntime:\n  name: python\n  options:\n    virtualenv: /opt/venv\n");
	assert_int_equal(pl_dependency_dirs(dir, dirs, 8), 3);
	put("Pulumi.yaml", "name: web\nruntime:\n  name: python\n  options:\n    virtualenv: venv\n");
	assert_int_equal(pl_dependency_dirs(dir, dirs, 8), 3);
	drop("Pulumi.yaml");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_program_change_keeps_the_key),
		cmocka_unit_test(runtime_options_plugins_and_packages_count),
		cmocka_unit_test(dependency_files_count_absent_or_present),
		cmocka_unit_test(runtimes_that_build_in_the_tree_have_no_key),
		cmocka_unit_test(hostile_or_missing_project_files_are_errors),
		cmocka_unit_test(dependency_dirs_include_a_relative_virtualenv),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
