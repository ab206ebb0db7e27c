/*
 * test_stack_workspace.c - stack_workspace_prepare, each Stack's own copy
 * of its program (stack_workspace.c), against a store tree the test builds
 * in a temporary directory: files keep their contents and modes, symlinks
 * stay symlinks, a write into the copy never reaches the shared artifact,
 * the copy is reused while the digest and dir stay and rebuilt when either
 * changes, and a missing dir or Pulumi.yaml is the ProgramNotFound verdict;
 * what an install left moves to a new revision with the same dependencies.
 *
 * The pass and the controller are zeroed structs with only what the
 * workspace reads filled in (storage path, namespace, name, artifact,
 * spec.dir, tree), so no server is involved.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fs.h"
#include "stack/stack_machine.h"

static char tmp[256], store[300], art[300];
static struct stack_ctl sc;

/* ------------------------------------------------------------ helpers */

static void write_file(const char *dir, const char *rel, const char *text, mode_t mode)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, mode), 0);
}

/* The file's contents (caller frees), or NULL when it cannot be read. */
static char *read_path(const char *path)
{
	char *buf = NULL;
	size_t len;
	struct err e;

	return fs_read_file(path, 1 << 20, &buf, &len, &e) == 0 ? buf : NULL;
}

static char *read_text(const char *dir, const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return read_path(path);
}

static void assert_text(const char *dir, const char *rel, const char *want)
{
	char *have = read_text(dir, rel);

	if (have == NULL)
		fail_msg("%s/%s cannot be read", dir, rel);
	assert_string_equal(have, want);
	free(have);
}

static int exists_in(const char *dir, const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return fs_exists(path);
}

static void mk(const char *dir, const char *rel, mode_t mode)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	assert_int_equal(mkdir(path, mode), 0);
}

/* An artifact tree as the extractor leaves it in the store, with a
 * program at its root and one in prog/:
 *
 *   Pulumi.yaml  main.sh (0755)  setuid.sh (04755)  README -> Pulumi.yaml
 *   lib -> prog/lib   fifo   empty/   nodir/readme.txt
 *   prog/Pulumi.yml  prog/lib/util.txt  prog/lib/deep/er/x.txt
 */
static void make_tree(const char *root)
{
	char path[PATH_MAX];

	assert_int_equal(fs_mkdir_p(root, 0755, &(struct err){0}), 0);
	write_file(root, "Pulumi.yaml", "name: web\nruntime: yaml\n", 0444);
	write_file(root, "main.sh", "#!/bin/sh\necho hi\n", 0555);
	write_file(root, "setuid.sh", "#!/bin/sh\n", 04755);
	mk(root, "empty", 0555);
	mk(root, "nodir", 0755);
	write_file(root, "nodir/readme.txt", "no program here\n", 0444);
	mk(root, "prog", 0755);
	write_file(root, "prog/Pulumi.yml", "name: prog\nruntime: yaml\n", 0444);
	mk(root, "prog/lib", 0755);
	write_file(root, "prog/lib/util.txt", "util\n", 0444);
	mk(root, "prog/lib/deep", 0755);
	mk(root, "prog/lib/deep/er", 0755);
	write_file(root, "prog/lib/deep/er/x.txt", "deep\n", 0600);
	snprintf(path, sizeof(path), "%s/README", root);
	assert_int_equal(symlink("Pulumi.yaml", path), 0);
	snprintf(path, sizeof(path), "%s/lib", root);
	assert_int_equal(symlink("prog/lib", path), 0);
	snprintf(path, sizeof(path), "%s/fifo", root);
	assert_int_equal(mkfifo(path, 0644), 0);
	/* The store's trees are read-only; the workspace must not need them writable. */
	assert_int_equal(chmod(root, 0555), 0);
}

/* A listing of a tree (path, type and mode, size, link target, inode,
 * contents), to compare before and after. */
static char *listing;
static size_t listing_len;
static const char *listing_root;

static int list_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	char line[PATH_MAX * 2 + 200], target[PATH_MAX] = "", *body = NULL;
	ssize_t n;
	(void)flag;
	(void)ftw;

	if (S_ISLNK(st->st_mode) && (n = readlink(path, target, sizeof(target) - 1)) >= 0)
		target[n] = '\0';
	if (S_ISREG(st->st_mode))
		body = read_path(path);
	snprintf(line, sizeof(line), "%s %o %lld %s %lu|%s\n", path + strlen(listing_root),
	    (unsigned)st->st_mode, (long long)st->st_size, target, (unsigned long)st->st_ino,
	    body ? body : "");
	free(body);
	listing = realloc(listing, listing_len + strlen(line) + 1);
	assert_non_null(listing);
	strcpy(listing + listing_len, line);
	listing_len += strlen(line);
	return 0;
}

/* Caller frees. */
static char *list_tree(const char *root)
{
	char *out;

	listing = NULL;
	listing_len = 0;
	listing_root = root;
	assert_int_equal(nftw(root, list_one, 16, FTW_PHYS), 0);
	out = listing;
	listing = NULL;
	return out;
}

/* A pass for apps/web at digest (owned strings; pass_free). */
static struct stack_pass *pass_new(const char *digest, const char *dir)
{
	struct stack_pass *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	p->sc = &sc;
	snprintf(p->ns, sizeof(p->ns), "apps");
	snprintf(p->name, sizeof(p->name), "web");
	p->art.digest = strdup(digest);
	p->art.revision = strdup("main@sha1:0123456789abcdef0123456789abcdef01234567");
	p->spec.dir = dir ? strdup(dir) : NULL;
	snprintf(p->tree, sizeof(p->tree), "%s", art);
	return p;
}

static void pass_free(struct stack_pass *p)
{
	free(p->art.digest);
	free(p->art.revision);
	free(p->spec.dir);
	free(p);
}

static void prepare_ok(struct stack_pass *p)
{
	if (stack_workspace_prepare(p) != 0)
		fail_msg("prepare: %s %s", p->v.reason ? p->v.reason : "?", p->v.message);
	assert_int_equal(p->v.set, 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_stack_workspace.XXXXXX");
	if (mkdtemp(tmp) == NULL)
		return -1;
	snprintf(store, sizeof(store), "%s/store", tmp);
	snprintf(art, sizeof(art), "%s/store/artifacts/gitrepository/apps/infra/tree", tmp);
	memset(&sc, 0, sizeof(sc));
	sc.o.storage_path = store;
	make_tree(art);
	return 0;
}

static int teardown(void **state)
{
	struct err e;
	(void)state;
	return fs_rm_rf(tmp, &e);
}

/* ------------------------------------------------------------ tests */

static void copies_files_modes_and_links(void **state)
{
	struct stack_pass *p = pass_new("sha256:aaaa", NULL);
	char want[PATH_MAX], path[PATH_MAX], target[PATH_MAX];
	struct stat st, src;
	ssize_t n;
	(void)state;

	prepare_ok(p);
	snprintf(want, sizeof(want), "%s/workspaces/apps/web/tree", store);
	assert_string_equal(p->workdir, want);
	snprintf(want, sizeof(want), "%s/workspaces/apps/web/scratch", store);
	assert_string_equal(p->scratch, want);

	assert_text(p->workdir, "Pulumi.yaml", "name: web\nruntime: yaml\n");
	assert_text(p->workdir, "main.sh", "#!/bin/sh\necho hi\n");
	assert_text(p->workdir, "prog/lib/deep/er/x.txt", "deep\n");
	assert_text(p->workdir, "nodir/readme.txt", "no program here\n");

	/* Modes: what the artifact had, writable by the owner (pulumi writes
	 * into its program dir), never setuid. */
	snprintf(path, sizeof(path), "%s/main.sh", p->workdir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	snprintf(path, sizeof(path), "%s/Pulumi.yaml", p->workdir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	snprintf(path, sizeof(path), "%s/setuid.sh", p->workdir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07000, 0);
	assert_int_equal(st.st_mode & 0777, 0755);
	snprintf(path, sizeof(path), "%s/empty", p->workdir);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));

	/* A copy, not a hard link. */
	snprintf(path, sizeof(path), "%s/Pulumi.yaml", p->workdir);
	assert_int_equal(stat(path, &st), 0);
	snprintf(path, sizeof(path), "%s/Pulumi.yaml", art);
	assert_int_equal(stat(path, &src), 0);
	assert_true(st.st_ino != src.st_ino || st.st_dev != src.st_dev);
	assert_int_equal(st.st_nlink, 1);

	/* Symlinks stay symlinks with the same target. */
	snprintf(path, sizeof(path), "%s/README", p->workdir);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	n = readlink(path, target, sizeof(target) - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_string_equal(target, "Pulumi.yaml");
	snprintf(path, sizeof(path), "%s/lib", p->workdir);
	n = readlink(path, target, sizeof(target) - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_string_equal(target, "prog/lib");
	assert_text(p->workdir, "lib/util.txt", "util\n");

	/* A FIFO is neither copied nor opened (opening one would block). */
	assert_false(exists_in(p->workdir, "fifo"));
	pass_free(p);
}

static void never_writes_the_source_tree(void **state)
{
	char *before = list_tree(art), *after;
	struct stack_pass *p = pass_new("sha256:bbbb", NULL);
	char path[PATH_MAX];
	FILE *f;
	(void)state;

	prepare_ok(p);
	/* What pulumi does in its program dir: a stack file, dependencies, and
	 * rewriting Pulumi.yaml (config set), including through the symlink. */
	write_file(p->workdir, "Pulumi.dev.yaml", "config: {}\n", 0644);
	write_file(p->workdir, "Pulumi.yaml", "name: changed\n", 0644);
	write_file(p->workdir, "prog/lib/util.txt", "changed\n", 0644);
	snprintf(path, sizeof(path), "%s/README", p->workdir);
	f = fopen(path, "a");
	assert_non_null(f);
	fputs("appended through the link\n", f);
	fclose(f);
	mk(p->workdir, "node_modules", 0755);
	write_file(p->workdir, "empty/new.txt", "x\n", 0644);

	after = list_tree(art);
	assert_string_equal(after, before);
	assert_text(art, "Pulumi.yaml", "name: web\nruntime: yaml\n");
	free(before);
	free(after);
	pass_free(p);
}

static void reused_while_the_digest_stays(void **state)
{
	struct stack_pass *p = pass_new("sha256:cccc", NULL), *q;
	(void)state;

	prepare_ok(p);
	/* pulumi install's dependencies stay between updates of one revision. */
	mk(p->workdir, "node_modules", 0755);
	write_file(p->workdir, "node_modules/dep.js", "dep\n", 0644);
	write_file(p->workdir, "Pulumi.yaml", "name: web\nruntime: yaml\n# edited\n", 0644);

	q = pass_new("sha256:cccc", NULL);
	prepare_ok(q);
	assert_string_equal(q->workdir, p->workdir);
	assert_text(q->workdir, "node_modules/dep.js", "dep\n");
	assert_text(q->workdir, "Pulumi.yaml", "name: web\nruntime: yaml\n# edited\n");
	pass_free(q);
	pass_free(p);
}

static void rebuilt_when_the_digest_changes(void **state)
{
	struct stack_pass *p = pass_new("sha256:dddd", NULL), *q;
	char old[PATH_MAX];
	(void)state;

	prepare_ok(p);
	mk(p->workdir, "node_modules", 0755);
	write_file(p->workdir, "Pulumi.yaml", "name: edited\n", 0644);
	/* What a crash between the two renames of an earlier rebuild leaves. */
	snprintf(old, sizeof(old), "%s/workspaces/apps/web/tree.old", store);
	assert_int_equal(fs_mkdir_p(old, 0755, &(struct err){0}), 0);
	write_file(old, "stale", "stale\n", 0644);

	q = pass_new("sha256:eeee", NULL);
	prepare_ok(q);
	assert_false(exists_in(q->workdir, "node_modules"));
	assert_text(q->workdir, "Pulumi.yaml", "name: web\nruntime: yaml\n");
	assert_false(fs_exists(old));
	{
		char root[PATH_MAX];
		snprintf(root, sizeof(root), "%s/workspaces/apps/web", store);
		assert_text(root, "source", "sha256:eeee .\n");
	}
	pass_free(q);
	pass_free(p);
}

static void rebuilt_when_the_dir_changes(void **state)
{
	struct stack_pass *p = pass_new("sha256:ffff", NULL), *q;
	char want[PATH_MAX];
	(void)state;

	prepare_ok(p);
	write_file(p->workdir, "marker", "m\n", 0644);
	q = pass_new("sha256:ffff", "prog");
	prepare_ok(q);
	snprintf(want, sizeof(want), "%s/workspaces/apps/web/tree/prog", store);
	assert_string_equal(q->workdir, want);
	/* Pulumi.yml is a Pulumi.yaml too. */
	assert_text(q->workdir, "Pulumi.yml", "name: prog\nruntime: yaml\n");
	/* The whole artifact is there (a program may read ../), freshly copied. */
	snprintf(want, sizeof(want), "%s/workspaces/apps/web/tree", store);
	assert_false(exists_in(want, "marker"));
	assert_text(want, "Pulumi.yaml", "name: web\nruntime: yaml\n");
	pass_free(q);
	pass_free(p);
}

/* Two Stacks on one artifact get two copies. */
static void each_stack_its_own_copy(void **state)
{
	struct stack_pass *p = pass_new("sha256:1111", NULL), *q = pass_new("sha256:1111", NULL);
	(void)state;

	snprintf(q->name, sizeof(q->name), "api");
	prepare_ok(p);
	prepare_ok(q);
	assert_string_not_equal(p->workdir, q->workdir);
	write_file(p->workdir, "Pulumi.yaml", "name: only-web\n", 0644);
	assert_text(q->workdir, "Pulumi.yaml", "name: web\nruntime: yaml\n");
	pass_free(q);
	pass_free(p);
}

static void missing_dir_is_program_not_found(void **state)
{
	struct stack_pass *p = pass_new("sha256:2222", "stacks/missing");
	(void)state;

	assert_int_equal(stack_workspace_prepare(p), 1);
	assert_int_equal(p->v.set, 1);
	assert_int_equal(p->v.state, STACK_STALLED);
	assert_string_equal(p->v.reason, "ProgramNotFound");
	assert_non_null(strstr(p->v.message, "stacks/missing"));
	assert_non_null(strstr(p->v.message, p->art.revision));
	pass_free(p);

	/* A file is not a directory. */
	p = pass_new("sha256:2222", "main.sh");
	assert_int_equal(stack_workspace_prepare(p), 1);
	assert_string_equal(p->v.reason, "ProgramNotFound");
	assert_non_null(strstr(p->v.message, "main.sh"));
	pass_free(p);
}

static void dir_without_pulumi_yaml_is_program_not_found(void **state)
{
	struct stack_pass *p = pass_new("sha256:3333", "nodir");
	(void)state;

	assert_int_equal(stack_workspace_prepare(p), 1);
	assert_int_equal(p->v.state, STACK_STALLED);
	assert_string_equal(p->v.reason, "ProgramNotFound");
	assert_non_null(strstr(p->v.message, "Pulumi.yaml"));
	assert_non_null(strstr(p->v.message, "nodir"));
	pass_free(p);

	p = pass_new("sha256:3333", "empty");
	assert_int_equal(stack_workspace_prepare(p), 1);
	assert_string_equal(p->v.reason, "ProgramNotFound");
	pass_free(p);
}

/* The artifact tree vanished from the store (a garbage collection raced
 * the pass): the pass waits and retries, it does not stall. */
static void missing_store_tree_is_retried(void **state)
{
	struct stack_pass *p = pass_new("sha256:4444", NULL);
	(void)state;

	snprintf(p->tree, sizeof(p->tree), "%s/store/artifacts/gone/tree", tmp);
	assert_int_equal(stack_workspace_prepare(p), 1);
	assert_int_equal(p->v.set, 1);
	assert_int_equal(p->v.state, STACK_WAITING);
	assert_string_equal(p->v.reason, "ArtifactFailed");
	assert_non_null(strstr(p->v.message, "gone"));
	pass_free(p);
}

static void remove_deletes_the_workspace(void **state)
{
	struct stack_pass *p = pass_new("sha256:5555", NULL);
	char root[PATH_MAX];
	(void)state;

	prepare_ok(p);
	stack_workspace_paths(&sc, "apps", "web", root, sizeof(root));
	assert_true(fs_is_dir(root));
	stack_workspace_remove(&sc, "apps", "web");
	assert_false(fs_exists(root));
	/* The artifact is not the workspace's to remove. */
	assert_true(exists_in(art, "Pulumi.yaml"));
	stack_workspace_remove(&sc, "apps", "web");   /* already gone: fine */
	pass_free(p);
}

/* A small nodejs program tree at path (index.js and package.json given). */
static void make_node_tree(const char *path, const char *index, const char *pkg)
{
	assert_int_equal(fs_mkdir_p(path, 0755, &(struct err){0}), 0);
	write_file(path, "Pulumi.yaml", "name: web\nruntime: nodejs\n", 0444);
	write_file(path, "package.json", pkg, 0444);
	write_file(path, "index.js", index, 0444);
}

/* What `pulumi install` leaves: node_modules, and the key it recorded. */
static void fake_install(const struct stack_pass *p)
{
	char key[72], root[PATH_MAX], path[PATH_MAX + 64];
	struct err e;
	FILE *f;

	assert_int_equal(pl_dependency_key(p->workdir, key, sizeof(key), &e), 1);
	mk(p->workdir, "node_modules", 0755);
	write_file(p->workdir, "node_modules/dep.js", "installed\n", 0644);
	stack_workspace_paths(&sc, p->ns, p->name, root, sizeof(root));
	snprintf(path, sizeof(path), "%s/scratch", root);
	assert_int_equal(fs_mkdir_p(path, 0700, &e), 0);
	snprintf(path, sizeof(path), "%s/scratch/installed-key", root);
	assert_non_null(f = fopen(path, "w"));
	fputs(key, f);
	assert_int_equal(fclose(f), 0);
}

static void installed_dependencies_move_to_a_revision_with_the_same_key(void **state)
{
	char t1[PATH_MAX], t2[PATH_MAX], t3[PATH_MAX];
	struct stack_pass *p1 = pass_new("sha256:7001", NULL), *p2 = pass_new("sha256:7002", NULL),
	    *p3 = pass_new("sha256:7003", NULL);
	(void)state;

	snprintf(t1, sizeof(t1), "%s/node1", tmp);
	snprintf(t2, sizeof(t2), "%s/node2", tmp);
	snprintf(t3, sizeof(t3), "%s/node3", tmp);
	make_node_tree(t1, "exports.v = 1;\n", "{\"dependencies\": {\"a\": \"1\"}}\n");
	make_node_tree(t2, "exports.v = 2;\n", "{\"dependencies\": {\"a\": \"1\"}}\n");
	make_node_tree(t3, "exports.v = 3;\n", "{\"dependencies\": {\"a\": \"2\"}}\n");
	snprintf(p1->tree, sizeof(p1->tree), "%s", t1);
	snprintf(p2->tree, sizeof(p2->tree), "%s", t2);
	snprintf(p3->tree, sizeof(p3->tree), "%s", t3);
	prepare_ok(p1);
	fake_install(p1);
	/* A new revision of the program alone: the install's work stays. */
	prepare_ok(p2);
	assert_text(p2->workdir, "index.js", "exports.v = 2;\n");
	assert_text(p2->workdir, "node_modules/dep.js", "installed\n");
	/* New dependencies: a fresh copy, and the install runs again. */
	prepare_ok(p3);
	assert_text(p3->workdir, "index.js", "exports.v = 3;\n");
	assert_false(exists_in(p3->workdir, "node_modules"));
	/* The artifacts were never written. */
	assert_false(exists_in(t1, "node_modules"));
	assert_false(exists_in(t2, "node_modules"));
	pass_free(p1);
	pass_free(p2);
	pass_free(p3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(copies_files_modes_and_links),
		cmocka_unit_test(never_writes_the_source_tree),
		cmocka_unit_test(reused_while_the_digest_stays),
		cmocka_unit_test(rebuilt_when_the_digest_changes),
		cmocka_unit_test(rebuilt_when_the_dir_changes),
		cmocka_unit_test(each_stack_its_own_copy),
		cmocka_unit_test(missing_dir_is_program_not_found),
		cmocka_unit_test(dir_without_pulumi_yaml_is_program_not_found),
		cmocka_unit_test(missing_store_tree_is_retried),
		cmocka_unit_test(remove_deletes_the_workspace),
		cmocka_unit_test(installed_dependencies_move_to_a_revision_with_the_same_key),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
