/*
 * pl_deps.c - what `pulumi install` depends on in a program directory, so
 * a new revision that changes only the program (not its dependencies)
 * skips the install.
 *
 * The dependency key is a SHA-256 over the project's `runtime`, `plugins`
 * and `packages` (read from Pulumi.yaml with libyaml's document API, so
 * aliases mean what they mean to the CLI; the rest of the file, which for
 * a YAML program is the program itself, does not count) and over the
 * language's own dependency files in the directory: package.json and the
 * npm, yarn, pnpm and bun lock files and settings; requirements.txt,
 * pyproject.toml and the poetry, uv and Pipenv locks; go.mod and go.sum.
 * An absent file counts as absent, so adding one changes the key.
 *
 * Only runtimes whose install is exactly those files get a key: yaml,
 * nodejs, python and go.  For any other (dotnet and java build in the
 * tree) there is no key and the caller always installs.  The directories
 * an install fills inside the program (node_modules, the virtualenv) are
 * listed by pl_dependency_dirs, so a workspace rebuilt for a new revision
 * with the same key can keep them.
 */
#include "pulumi/pl_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/digest.h"

/* Bounds on what a hostile Pulumi.yaml can make the walk do. */
#define DEPS_MAX_DEPTH 32
#define DEPS_MAX_NODES 100000

static const char *const dep_files[] = {
	"package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
	"pnpm-workspace.yaml", "bun.lockb", "bun.lock", ".npmrc", ".yarnrc.yml",
	"requirements.txt", "pyproject.toml", "poetry.lock", "uv.lock", "Pipfile", "Pipfile.lock",
	"setup.py", "setup.cfg", "go.mod", "go.sum",
};

static const char *const keyed_runtimes[] = { "yaml", "nodejs", "python", "go" };

/* A length-prefixed field, so "ab"+"c" and "a"+"bc" hash differently. */
static void hash_field(struct digest_ctx *c, char tag, const char *s, size_t n)
{
	char head[32];
	int len = snprintf(head, sizeof(head), "%c%zu:", tag, n);

	digest_ctx_update(c, head, (size_t)len);
	digest_ctx_update(c, s, n);
}

/* Hashes the node's structure and scalars; -1 past the bounds. */
static int hash_node(struct digest_ctx *c, yaml_document_t *d, yaml_node_t *n, int depth, long *budget)
{
	if (n == NULL) {
		hash_field(c, 'n', "", 0);
		return 0;
	}
	if (depth > DEPS_MAX_DEPTH || --*budget < 0)
		return -1;
	switch (n->type) {
	case YAML_SCALAR_NODE:
		hash_field(c, 's', (const char *)n->data.scalar.value, n->data.scalar.length);
		return 0;
	case YAML_SEQUENCE_NODE:
		hash_field(c, '[', "", 0);
		for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++)
			if (hash_node(c, d, yaml_document_get_node(d, *it), depth + 1, budget) < 0)
				return -1;
		hash_field(c, ']', "", 0);
		return 0;
	case YAML_MAPPING_NODE:
		hash_field(c, '{', "", 0);
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++)
			if (hash_node(c, d, yaml_document_get_node(d, p->key), depth + 1, budget) < 0 ||
			    hash_node(c, d, yaml_document_get_node(d, p->value), depth + 1, budget) < 0)
				return -1;
		hash_field(c, '}', "", 0);
		return 0;
	default:
		hash_field(c, '?', "", 0);
		return 0;
	}
}

/* The runtime's name: `runtime: nodejs` or `runtime: {name: nodejs, ...}`. */
static const char *runtime_name(yaml_document_t *d, yaml_node_t *rt)
{
	if (rt && rt->type == YAML_MAPPING_NODE)
		rt = pl_yaml_get(d, rt, "name");
	return rt && rt->type == YAML_SCALAR_NODE ? (const char *)rt->data.scalar.value : NULL;
}

static int runtime_keyed(const char *name)
{
	for (size_t i = 0; name && i < sizeof(keyed_runtimes) / sizeof(*keyed_runtimes); i++)
		if (strcmp(name, keyed_runtimes[i]) == 0)
			return 1;
	return 0;
}

static int hash_file(struct digest_ctx *c, const char *workdir, const char *name, struct err *e)
{
	char path[4096], hex[160];
	struct digest dg;
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", workdir, name);
	if (stat(path, &st) != 0) {
		if (errno != ENOENT)
			return err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
		hash_field(c, 'a', name, strlen(name));
		return 0;
	}
	if (!S_ISREG(st.st_mode))
		return err_set(e, ERR_UNSUPPORTED, "%s is not a regular file", path);
	if (digest_file(path, DIGEST_SHA256, &dg, e) < 0)
		return -1;
	digest_hex(&dg, hex, sizeof(hex));
	hash_field(c, 'f', name, strlen(name));
	hash_field(c, 'h', hex, strlen(hex));
	return 0;
}

int pl_dependency_key(const char *workdir, char *out, size_t outlen, struct err *e)
{
	static const char *const names[2] = { "Pulumi.yaml", "Pulumi.yml" };
	static const char *const sections[] = { "runtime", "plugins", "packages" };
	char path[4096];
	yaml_document_t doc;
	yaml_node_t *root;
	struct digest_ctx *c;
	struct digest dg;
	long budget = DEPS_MAX_NODES;
	int rc;

	if (outlen < 65)
		return err_set(e, ERR_INVALID, "dependency key: buffer too small");
	if ((rc = pl_yaml_load_first(workdir, names, path, sizeof(path), &doc, e)) <= 0)
		return rc == 0 ? err_set(e, ERR_NOTFOUND, "no Pulumi.yaml in %s", workdir) : -1;
	root = yaml_document_get_root_node(&doc);
	if (!runtime_keyed(runtime_name(&doc, pl_yaml_get(&doc, root, "runtime")))) {
		yaml_document_delete(&doc);
		return 0;
	}
	if ((c = digest_ctx_new(DIGEST_SHA256)) == NULL) {
		yaml_document_delete(&doc);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	hash_field(c, 'v', "pl-deps-1", 9);
	for (size_t i = 0; i < sizeof(sections) / sizeof(*sections); i++) {
		hash_field(c, 'k', sections[i], strlen(sections[i]));
		if (hash_node(c, &doc, pl_yaml_get(&doc, root, sections[i]), 0, &budget) < 0) {
			digest_ctx_free(c);
			yaml_document_delete(&doc);
			return err_set(e, ERR_LIMIT, "%s: `%s` is nested too deep or too large", path, sections[i]);
		}
	}
	yaml_document_delete(&doc);
	for (size_t i = 0; i < sizeof(dep_files) / sizeof(*dep_files); i++)
		if (hash_file(c, workdir, dep_files[i], e) < 0) {
			digest_ctx_free(c);
			return -1;
		}
	digest_ctx_final(c, &dg);
	digest_ctx_free(c);
	digest_hex(&dg, out, outlen);
	return 1;
}

int pl_runtime_is(const char *workdir, const char *name)
{
	static const char *const names[2] = { "Pulumi.yaml", "Pulumi.yml" };
	char path[4096];
	yaml_document_t doc;
	const char *rt;
	struct err e;
	int is;

	if (pl_yaml_load_first(workdir, names, path, sizeof(path), &doc, &e) <= 0)
		return 0;
	rt = runtime_name(&doc, pl_yaml_get(&doc, yaml_document_get_root_node(&doc), "runtime"));
	is = rt != NULL && strcmp(rt, name) == 0;
	yaml_document_delete(&doc);
	return is;
}

/* The virtualenv option of a python runtime, when it is a plain relative
 * path inside the directory ("venv", "env/py"), else NULL. */
static int virtualenv_option(const char *workdir, char *out, size_t n)
{
	static const char *const names[2] = { "Pulumi.yaml", "Pulumi.yml" };
	char path[4096];
	yaml_document_t doc;
	yaml_node_t *v;
	struct err e;
	int ok = 0;

	if (pl_yaml_load_first(workdir, names, path, sizeof(path), &doc, &e) <= 0)
		return 0;
	v = pl_yaml_get(&doc, pl_yaml_get(&doc, pl_yaml_get(&doc, yaml_document_get_root_node(&doc),
	    "runtime"), "options"), "virtualenv");
	if (v && v->type == YAML_SCALAR_NODE) {
		const char *s = (const char *)v->data.scalar.value;
		ok = s[0] != '\0' && s[0] != '/' && strstr(s, "..") == NULL && strlen(s) < n;
		if (ok)
			snprintf(out, n, "%s", s);
	}
	yaml_document_delete(&doc);
	return ok;
}

size_t pl_dependency_dirs(const char *workdir, char dirs[][256], size_t max)
{
	static const char *const fixed[] = { "node_modules", "venv", ".venv" };
	size_t n = 0;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(*fixed) && n < max; i++)
		snprintf(dirs[n++], 256, "%s", fixed[i]);
	if (n < max && virtualenv_option(workdir, dirs[n], 256)) {
		int dup = 0;
		for (size_t i = 0; i < n; i++)
			dup |= strcmp(dirs[i], dirs[n]) == 0;
		n += !dup;
	}
	return n;
}
