/*
 * stack_workspace.c - each Stack's own copy of its program.
 *
 * Artifact trees in the store are shared by every Stack on that revision
 * and must never be written, but a pulumi run writes into its program
 * directory (Pulumi.<stack>.yaml, `pulumi install`'s node_modules or venv).
 * So each Stack works in a copy:
 *
 *     STORE/workspaces/<namespace>/<name>/tree/      the copy (spec.dir inside it)
 *     STORE/workspaces/<namespace>/<name>/source     "<digest> <dir>" the copy was made from
 *     STORE/workspaces/<namespace>/<name>/scratch/   the driver's event logs, markers
 *
 * Files are cloned (FICLONE, a copy-on-write reflink) where the filesystem
 * can, else copied; never hard-linked, since a write through a link would
 * change the shared artifact.  The copy is rebuilt only when the digest or
 * the dir changes, so an install's dependencies stay between updates of one
 * revision, and it is swapped in with a rename, so a crash mid-copy leaves
 * the previous copy or none, never half of one.  When the new revision has
 * the dependency key the last install recorded (pl_dependency_key: the
 * program changed, its dependencies did not), what that install put in the
 * program directory (node_modules, the virtualenv) moves into the new copy,
 * and the install is skipped.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "stack/stack_sources.h"

void stack_workspace_paths(const struct stack_ctl *sc, const char *ns, const char *name,
    char *root, size_t n)
{
	snprintf(root, n, "%s/workspaces/%s/%s", sc->o.storage_path, ns, name);
}

static int copy_file(const char *from, const char *to, mode_t mode, struct err *e)
{
	int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), out;
	char buf[65536];
	ssize_t n;

	if (in < 0)
		return err_set(e, ERR_IO, "workspace: cannot open %s: %s", from, strerror(errno)), -1;
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 0777);
	if (out < 0) {
		close(in);
		return err_set(e, ERR_IO, "workspace: cannot create %s: %s", to, strerror(errno)), -1;
	}
	if (ioctl(out, FICLONE, in) != 0) {
		while ((n = read(in, buf, sizeof(buf))) > 0)
			if (write(out, buf, (size_t)n) != n) {
				n = -1;
				break;
			}
		if (n < 0) {
			err_set(e, ERR_IO, "workspace: cannot copy %s: %s", from, strerror(errno));
			close(in);
			close(out);
			return -1;
		}
	}
	close(in);
	if (close(out) != 0)
		return err_set(e, ERR_IO, "workspace: cannot write %s: %s", to, strerror(errno)), -1;
	return 0;
}

/* Copies the tree under from into to (which exists), depth-bounded. */
static int copy_tree(const char *from, const char *to, int depth, struct err *e)
{
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (depth > 64)
		return err_set(e, ERR_LIMIT, "workspace: %s is nested too deep", from), -1;
	if ((d = opendir(from)) == NULL)
		return err_set(e, ERR_IO, "workspace: cannot read %s: %s", from, strerror(errno)), -1;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		char src[PATH_MAX], dst[PATH_MAX];
		struct stat st;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fs_join(src, sizeof(src), from, de->d_name, e) < 0 ||
		    fs_join(dst, sizeof(dst), to, de->d_name, e) < 0)
			rc = -1;
		else if (lstat(src, &st) != 0)
			rc = err_set(e, ERR_IO, "workspace: %s: %s", src, strerror(errno));
		else if (S_ISDIR(st.st_mode)) {
			if (mkdir(dst, 0755) != 0)
				rc = err_set(e, ERR_IO, "workspace: cannot create %s: %s", dst, strerror(errno));
			else
				rc = copy_tree(src, dst, depth + 1, e);
		} else if (S_ISREG(st.st_mode)) {
			rc = copy_file(src, dst, st.st_mode | 0600, e);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n = readlink(src, target, sizeof(target) - 1);
			if (n < 0)
				rc = err_set(e, ERR_IO, "workspace: %s: %s", src, strerror(errno));
			else {
				target[n] = '\0';   /* the extractor checked it stays inside */
				if (symlink(target, dst) != 0)
					rc = err_set(e, ERR_IO, "workspace: %s: %s", dst, strerror(errno));
			}
		}
	}
	closedir(d);
	return rc;
}

/* "<digest> <dir>": what the copy was made from. */
static void source_line(const struct stack_pass *p, char *out, size_t n)
{
	snprintf(out, n, "%s %s\n", p->art.digest, p->spec.dir ? p->spec.dir : ".");
}

static int copy_is_current(const char *root, const char *want)
{
	char path[PATH_MAX + 16], *have = NULL;
	size_t len;
	struct err e;
	int same;

	snprintf(path, sizeof(path), "%s/source", root);
	if (fs_read_file(path, 4096, &have, &len, &e) < 0)
		return 0;
	same = strcmp(have, want) == 0;
	free(have);
	snprintf(path, sizeof(path), "%s/tree", root);
	return same && fs_is_dir(path);
}

/* The dependency key the last successful install in this workspace
 * recorded (pl_install's marker) equals the new tree's? */
static int same_dependencies(const char *root, const char *new_workdir)
{
	char path[PATH_MAX + 32], key[72], *have = NULL;
	size_t len;
	struct err e;
	int same;

	snprintf(path, sizeof(path), "%s/scratch/installed-key", root);
	if (pl_dependency_key(new_workdir, key, sizeof(key), &e) != 1 ||
	    fs_read_file(path, 4096, &have, &len, &e) < 0)
		return 0;
	same = strcmp(have, key) == 0;
	free(have);
	return same;
}

/* Moves the install's directories from the old copy's program directory
 * into the new one's, where the new artifact does not have them itself.
 * The final path is the same (staging is renamed to tree), so what an
 * install wrote with absolute paths (a virtualenv) still holds. */
static void carry_dependencies(const struct stack_pass *p, const char *root, const char *staging)
{
	char old_dir[PATH_MAX], new_dir[PATH_MAX], dirs[8][256];
	const char *sub = p->spec.dir ? p->spec.dir : ".";
	size_t n;

	snprintf(old_dir, sizeof(old_dir), "%s/tree/%s", root, sub);
	snprintf(new_dir, sizeof(new_dir), "%s/%s", staging, sub);
	if (!fs_is_dir(old_dir) || !fs_is_dir(new_dir) || !same_dependencies(root, new_dir))
		return;
	n = pl_dependency_dirs(new_dir, dirs, 8);
	for (size_t i = 0; i < n; i++) {
		char from[PATH_MAX + 260], to[PATH_MAX + 260];
		struct stat st;
		snprintf(from, sizeof(from), "%s/%s", old_dir, dirs[i]);
		snprintf(to, sizeof(to), "%s/%s", new_dir, dirs[i]);
		if (lstat(from, &st) != 0 || !S_ISDIR(st.st_mode) || lstat(to, &st) == 0)
			continue;
		if (rename(from, to) != 0)
			log_warn("cannot keep installed dependencies", "from", from, "error", strerror(errno),
			    NULL);
	}
}

/* Replaces root/tree with a fresh copy of p->tree. */
static int rebuild(const struct stack_pass *p, const char *root, const char *line, struct err *e)
{
	char tree[PATH_MAX + 8], staging[PATH_MAX], old[PATH_MAX + 8], src[PATH_MAX + 16];
	FILE *f;

	snprintf(tree, sizeof(tree), "%s/tree", root);
	snprintf(old, sizeof(old), "%s/tree.old", root);
	snprintf(src, sizeof(src), "%s/source", root);
	if (fs_mkdir_p(root, 0700, e) < 0 || fs_staging_dir(tree, staging, sizeof(staging), e) < 0)
		return -1;
	if (copy_tree(p->tree, staging, 0, e) < 0) {
		struct err ig;
		fs_rm_rf(staging, &ig);
		return -1;
	}
	carry_dependencies(p, root, staging);
	unlink(src);
	if (fs_rm_rf(old, e) < 0 || (fs_is_dir(tree) && rename(tree, old) != 0) || rename(staging, tree) != 0) {
		struct err ig;
		fs_rm_rf(staging, &ig);
		return err_set(e, ERR_IO, "workspace: cannot swap in %s: %s", tree, strerror(errno)), -1;
	}
	fs_rm_rf(old, e);
	if ((f = fopen(src, "we")) == NULL || fputs(line, f) < 0 || fclose(f) != 0)
		return err_set(e, ERR_IO, "workspace: cannot write %s", src), -1;
	return 0;
}

/* Is path a directory (links followed) that resolves inside root/tree? */
static int dir_inside(const char *root, const char *path)
{
	char tree[PATH_MAX + 8], real_tree[PATH_MAX], real[PATH_MAX];
	size_t n;
	struct stat st;

	snprintf(tree, sizeof(tree), "%s/tree", root);
	if (realpath(tree, real_tree) == NULL || realpath(path, real) == NULL || stat(real, &st) != 0 ||
	    !S_ISDIR(st.st_mode))
		return 0;
	n = strlen(real_tree);
	return strncmp(real, real_tree, n) == 0 && (real[n] == '\0' || real[n] == '/');
}

/* A regular file named Pulumi.yaml (or .yml) in dir. */
static int has_project_file(const char *dir)
{
	static const char *names[] = { "Pulumi.yaml", "Pulumi.yml" };
	char path[PATH_MAX + 16];
	struct stat st;

	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			return 1;
	}
	return 0;
}

int stack_workspace_prepare(struct stack_pass *p)
{
	char root[PATH_MAX], line[PATH_MAX];
	struct err e;

	stack_workspace_paths(p->sc, p->ns, p->name, root, sizeof(root));
	snprintf(p->scratch, sizeof(p->scratch), "%s/scratch", root);
	source_line(p, line, sizeof(line));
	if (!copy_is_current(root, line) && rebuild(p, root, line, &e) < 0) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", p->sc->o.requeue_dependency_ms,
		    "cannot build the workspace: %s", e.msg);
		return 1;
	}
	snprintf(p->workdir, sizeof(p->workdir), "%s/tree%s%s", root, p->spec.dir ? "/" : "",
	    p->spec.dir ? p->spec.dir : "");
	if (!dir_inside(root, p->workdir)) {
		stack_verdict(p, STACK_STALLED, "ProgramNotFound", 0, "dir \"%s\" is not a directory in the "
		    "artifact at revision %s", p->spec.dir ? p->spec.dir : ".", p->art.revision);
		return 1;
	}
	if (!has_project_file(p->workdir)) {
		stack_verdict(p, STACK_STALLED, "ProgramNotFound", 0, "no Pulumi.yaml in dir \"%s\" of the "
		    "artifact at revision %s", p->spec.dir ? p->spec.dir : ".", p->art.revision);
		return 1;
	}
	return 0;
}

void stack_workspace_remove(const struct stack_ctl *sc, const char *ns, const char *name)
{
	char root[PATH_MAX];
	struct err e;

	stack_workspace_paths(sc, ns, name, root, sizeof(root));
	if (fs_rm_rf(root, &e) < 0)
		log_warn("cannot remove a workspace", "path", root, "error", e.msg, NULL);
}
