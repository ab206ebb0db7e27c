/*
 * pl_util.c - small helpers of the driver: owned string vectors for argv
 * and envp, reading the project name from Pulumi.yaml (the CLI namespaces
 * "greeting" as "<project>:greeting") and the config keys of the stack's
 * settings file Pulumi.<stack>.yaml.  The settings file is read directly,
 * as the Automation API does (reference §1.5): `config --json` also lists
 * project-level keys (defaults included), which are not the stack's to
 * remove.  Both files are read with libyaml's document API, so anchors
 * and aliases (and merge keys) mean what they mean to the CLI.
 */
#include "pulumi/pl_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

void pl_strv_add(struct pl_strv *s, const char *str)
{
	char *copy;

	if (s->oom)
		return;
	if (s->n + 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **nv = realloc(s->v, cap * sizeof(*nv));

		if (nv == NULL) {
			s->oom = 1;
			return;
		}
		s->v = nv;
		s->cap = cap;
	}
	copy = strdup(str);
	if (copy == NULL) {
		s->oom = 1;
		return;
	}
	s->v[s->n++] = copy;
	s->v[s->n] = NULL;
}

void pl_strv_addf(struct pl_strv *s, const char *fmt, ...)
{
	va_list ap;
	char *str = NULL;

	va_start(ap, fmt);
	if (vasprintf(&str, fmt, ap) < 0)
		str = NULL;
	va_end(ap);
	if (str == NULL) {
		s->oom = 1;
		return;
	}
	pl_strv_add(s, str);
	free(str);
}

void pl_strv_addl(struct pl_strv *s, ...)
{
	va_list ap;
	const char *str;

	va_start(ap, s);
	while ((str = va_arg(ap, const char *)) != NULL)
		pl_strv_add(s, str);
	va_end(ap);
}

void pl_strv_free(struct pl_strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* The node under scalar key `key` of mapping node map, or NULL. */
yaml_node_t *pl_yaml_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = yaml_document_get_node(d, pr->key);

		if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
			return yaml_document_get_node(d, pr->value);
	}
	return NULL;
}

static int is_merge_key(const yaml_node_t *k)
{
	return k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, "<<") == 0 &&
	       k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* Adds the scalar keys of mapping node map to keys, once each.  A merge key
 * (`<<: *base`, or a list of aliases), as the CLI's YAML library reads it,
 * contributes the keys of the mappings it names; depth bounds a hostile
 * nesting of merges. */
static void add_mapping_keys(yaml_document_t *d, yaml_node_t *map, cJSON *keys, int depth)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE || depth > 16)
		return;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = yaml_document_get_node(d, pr->key);
		yaml_node_t *v = yaml_document_get_node(d, pr->value);
		int seen = 0;

		if (k == NULL || k->type != YAML_SCALAR_NODE)
			continue;
		if (is_merge_key(k)) {
			if (v && v->type == YAML_SEQUENCE_NODE)
				for (yaml_node_item_t *it = v->data.sequence.items.start;
				     it < v->data.sequence.items.top; it++)
					add_mapping_keys(d, yaml_document_get_node(d, *it), keys, depth + 1);
			else
				add_mapping_keys(d, v, keys, depth + 1);
			continue;
		}
		for (const cJSON *c = keys->child; c && !seen; c = c->next)
			seen = strcmp(c->valuestring, (const char *)k->data.scalar.value) == 0;
		if (!seen)
			cJSON_AddItemToArray(keys, cJSON_CreateString((const char *)k->data.scalar.value));
	}
}

/* Loads the first document of the first of <workdir>/<names[0]>,
 * <workdir>/<names[1]> that exists; path receives the file's name.  The
 * document API resolves aliases (`*x` is the node `&x` names), which an
 * event walk would not.  Returns 1 (release doc with yaml_document_delete),
 * 0 when neither file exists, -1 + e. */
int pl_yaml_load_first(const char *workdir, const char *const names[2], char *path,
		       size_t pathlen, yaml_document_t *doc, struct err *e)
{
	for (size_t i = 0; i < 2; i++) {
		yaml_parser_t p;
		FILE *f;
		int ok;

		snprintf(path, pathlen, "%s/%s", workdir, names[i]);
		f = fopen(path, "re");
		if (f == NULL) {
			if (errno == ENOENT)
				continue;
			return err_set(e, ERR_IO, "open %s: %s", path, strerror(errno));
		}
		if (!yaml_parser_initialize(&p)) {
			fclose(f);
			return err_set(e, ERR_NOMEM, "out of memory reading %s", path);
		}
		yaml_parser_set_input_file(&p, f);
		ok = yaml_parser_load(&p, doc);
		if (!ok)
			err_set(e, ERR_INVALID, "%s: not valid YAML (line %zu: %s)", path,
				p.problem_mark.line + 1, p.problem ? p.problem : "parse error");
		yaml_parser_delete(&p);
		fclose(f);
		return ok ? 1 : -1;
	}
	return 0;
}

int pl_stack_config_keys(const char *workdir, const char *stack, cJSON **out, struct err *e)
{
	const char *name = strrchr(stack, '/');
	char yaml_name[512], yml_name[512], path[4096];
	const char *const names[2] = { yaml_name, yml_name };
	yaml_document_t doc;
	int rc;

	name = name ? name + 1 : stack;
	snprintf(yaml_name, sizeof(yaml_name), "Pulumi.%s.yaml", name);
	snprintf(yml_name, sizeof(yml_name), "Pulumi.%s.yml", name);
	*out = cJSON_CreateArray();
	if (*out == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	rc = pl_yaml_load_first(workdir, names, path, sizeof(path), &doc, e);
	if (rc <= 0)
		return rc;   /* 0: no settings file yet, so no keys */
	add_mapping_keys(&doc, pl_yaml_get(&doc, yaml_document_get_root_node(&doc), "config"), *out, 0);
	yaml_document_delete(&doc);
	return 0;
}

int pl_stack_settings_path(const char *workdir, const char *stack, char *out, size_t outlen)
{
	const char *name = strrchr(stack, '/');

	name = name ? name + 1 : stack;
	snprintf(out, outlen, "%s/Pulumi.%s.yaml", workdir, name);
	if (access(out, F_OK) == 0)
		return 1;
	snprintf(out, outlen, "%s/Pulumi.%s.yml", workdir, name);
	if (access(out, F_OK) == 0)
		return 1;
	snprintf(out, outlen, "%s/Pulumi.%s.yaml", workdir, name);
	return 0;
}

int pl_project_name(const char *workdir, char *out, size_t outlen, struct err *e)
{
	static const char *const names[2] = { "Pulumi.yaml", "Pulumi.yml" };
	char path[4096];
	yaml_document_t doc;
	yaml_node_t *n;
	int rc;

	out[0] = '\0';
	rc = pl_yaml_load_first(workdir, names, path, sizeof(path), &doc, e);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return err_set(e, ERR_NOTFOUND, "no Pulumi.yaml in %s", workdir);
	n = pl_yaml_get(&doc, yaml_document_get_root_node(&doc), "name");
	if (n && n->type == YAML_SCALAR_NODE)
		snprintf(out, outlen, "%s", (const char *)n->data.scalar.value);
	yaml_document_delete(&doc);
	if (out[0] == '\0')
		return err_set(e, ERR_INVALID, "%s: no project name (top-level \"name:\")", path);
	return 0;
}
