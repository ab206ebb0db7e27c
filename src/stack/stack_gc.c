/*
 * stack_gc.c - keeps the store's disk bounded: artifact trees no Stack uses
 * any more, and workspaces of Stacks that are gone.
 *
 * What is in use is read from the cache: every cached Stack's
 * status.artifact.digest (the tree its last pass resolved, which a destroy
 * at deletion also needs) and every cached Stack's workspace.  A tree is
 * removed only when nothing uses it and it is older than STACK_GC_MIN_AGE_S,
 * so one a worker has just fetched for a Stack whose status does not name
 * it yet is left alone; if one is removed under a worker anyway, that pass
 * fails with ArtifactFailed and the next fetches it again.  Removal is a
 * rename out of the way first, so a reader never sees half a tree.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/fs.h"
#include "base/log.h"
#include "stack/stack_sources.h"

#define STACK_GC_MIN_AGE_S 3600

/* A small set of strings (keys of what is in use). */
struct strset {
	char **v;
	size_t n, cap;
};

static void set_add(struct strset *s, const char *str)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		char **v = realloc(s->v, cap * sizeof(*v));
		if (v == NULL)
			return;
		s->v = v;
		s->cap = cap;
	}
	if ((s->v[s->n] = strdup(str)) != NULL)
		s->n++;
}

static int set_has(const struct strset *s, const char *str)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i], str) == 0)
			return 1;
	return 0;
}

static void set_free(struct strset *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

struct in_use {
	struct stack_ctl *sc;
	struct strset keys, digests;   /* "ns/name"; "sha256/<hex>" */
};

static void collect_key(void *ud, const char *key, const char *rv)
{
	(void)rv;
	set_add(&((struct in_use *)ud)->keys, key);
}

/* The digest paths ("<algo>/<hex>") the cached Stacks' status names. */
static void collect_digests(struct in_use *u)
{
	for (size_t i = 0; i < u->keys.n; i++) {
		const char *slash = strchr(u->keys.v[i], '/'), *d, *colon;
		char ns[254], path[300];
		cJSON *obj;

		if (slash == NULL || (size_t)(slash - u->keys.v[i]) >= sizeof(ns))
			continue;
		snprintf(ns, sizeof(ns), "%.*s", (int)(slash - u->keys.v[i]), u->keys.v[i]);
		if ((obj = kube_informer_get(u->sc->stacks.inf, ns, slash + 1)) == NULL)
			continue;
		d = kube_obj_str(obj, "status.artifact.digest");
		if (d && (colon = strchr(d, ':')) != NULL) {
			snprintf(path, sizeof(path), "%.*s/%s", (int)(colon - d), d, colon + 1);
			set_add(&u->digests, path);
		}
		cJSON_Delete(obj);
	}
}

static int old_enough(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && time(NULL) - st.st_mtime > STACK_GC_MIN_AGE_S;
}

/* Renames path aside (same directory, a hidden name the store's sweep also
 * knows as staging), then removes it. */
static int remove_tree(const char *path)
{
	char aside[PATH_MAX + 16];
	const char *base = strrchr(path, '/');
	struct err e;

	if (base == NULL)
		return -1;
	snprintf(aside, sizeof(aside), "%.*s/.%s.gc", (int)(base - path), path, base + 1);
	if (rename(path, aside) != 0)
		return -1;
	if (fs_rm_rf(aside, &e) < 0) {
		log_warn("cannot remove an unused tree", "path", aside, "error", e.msg, NULL);
		return -1;
	}
	return 0;
}

/* Calls fn(dir, name) for each entry of dir that does not start with '.'. */
static int each_entry(const char *dir, void (*fn)(void *ud, const char *dir, const char *name), void *ud)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			fn(ud, dir, de->d_name);
	closedir(d);
	return 0;
}

/* One sweep of a two-level tree: <dir>/<group>/<name>, the key of an entry
 * being "<group>/<name>" (artifacts/<algo>/<hex>, workspaces/<ns>/<name>). */
struct sweep {
	const struct strset *keep;      /* the keys in use */
	int artifacts;                  /* only directories older than STACK_GC_MIN_AGE_S go */
	const char *group;
	int removed;
};

static void leaf_entry(void *ud, const char *dir, const char *name)
{
	struct sweep *s = ud;
	char key[600], path[PATH_MAX];

	snprintf(key, sizeof(key), "%s/%s", s->group, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (set_has(s->keep, key) || (s->artifacts && (!fs_is_dir(path) || !old_enough(path))))
		return;
	if (remove_tree(path) == 0)
		s->removed++;
}

static void group_entry(void *ud, const char *dir, const char *name)
{
	struct sweep *s = ud;
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	s->group = name;
	if (fs_is_dir(path))
		each_entry(path, leaf_entry, s);
}

void stack_ctl_gc(struct stack_ctl *sc)
{
	struct in_use u;
	struct sweep artifacts = { .artifacts = 1 }, workspaces = { 0 };
	char dir[PATH_MAX];

	if (sc->stacks.inf == NULL || !stack_ctl_synced(sc))
		return;   /* an empty cache would mean "nothing is in use" */
	memset(&u, 0, sizeof(u));
	u.sc = sc;
	kube_informer_each(sc->stacks.inf, collect_key, &u);
	collect_digests(&u);
	artifacts.keep = &u.digests;
	stack_store_artifacts_dir(sc, dir, sizeof(dir));
	each_entry(dir, group_entry, &artifacts);
	workspaces.keep = &u.keys;
	snprintf(dir, sizeof(dir), "%s/workspaces", sc->o.storage_path);
	each_entry(dir, group_entry, &workspaces);
	if (artifacts.removed + workspaces.removed > 0) {
		char n[16];
		snprintf(n, sizeof(n), "%d", artifacts.removed + workspaces.removed);
		log_info("removed unused artifacts and workspaces", "count", n, NULL);
	}
	set_free(&u.keys);
	set_free(&u.digests);
}
