/*
 * pl_util.c - small helpers of the driver: owned string vectors for argv
 * and envp, reading the project name from Pulumi.yaml (the CLI namespaces
 * "greeting" as "<project>:greeting") and the config keys of the stack's
 * settings file Pulumi.<stack>.yaml.  The settings file is read directly,
 * as the Automation API does (reference §1.5): `config --json` also lists
 * project-level keys (defaults included), which are not the stack's to
 * remove.
 */
#include "pulumi/pl_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void pl_strv_free(struct pl_strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* Walks the top-level mapping's events looking for the scalar after "name". */
static int find_name(yaml_parser_t *p, char *out, size_t outlen)
{
	int depth = 0, want_value = 0, is_key = 1, found = -1;

	for (;;) {
		yaml_event_t ev;

		if (!yaml_parser_parse(p, &ev))
			return -1;
		yaml_event_type_t t = ev.type;

		if (t == YAML_STREAM_END_EVENT || t == YAML_DOCUMENT_END_EVENT) {
			yaml_event_delete(&ev);
			return found;
		}
		if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) {
			if (depth == 1)
				is_key = !is_key;   /* a collection as a top-level value */
			depth++;
			want_value = 0;
		} else if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) {
			depth--;
		} else if (t == YAML_SCALAR_EVENT && depth == 1) {
			const char *v = (const char *)ev.data.scalar.value;

			if (is_key) {
				want_value = strcmp(v, "name") == 0;
			} else if (want_value) {
				snprintf(out, outlen, "%s", v);
				found = 0;
				want_value = 0;
			}
			is_key = !is_key;
		}
		yaml_event_delete(&ev);
	}
}

/* Collects the keys of the top-level "config" mapping into keys. */
static int collect_config_keys(yaml_parser_t *p, cJSON *keys)
{
	int depth = 0, is_key = 1, in_config = 0, want_config = 0, sub_key = 1;

	for (;;) {
		yaml_event_t ev;
		yaml_event_type_t t;

		if (!yaml_parser_parse(p, &ev))
			return -1;
		t = ev.type;
		if (t == YAML_STREAM_END_EVENT || t == YAML_DOCUMENT_END_EVENT) {
			yaml_event_delete(&ev);
			return 0;
		}
		if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) {
			if (depth == 1) {
				in_config = want_config && t == YAML_MAPPING_START_EVENT;
				sub_key = 1;
				is_key = !is_key;
			} else if (depth == 2 && in_config) {
				sub_key = !sub_key;   /* a structured value */
			}
			depth++;
		} else if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) {
			depth--;
			if (depth == 1)
				in_config = 0;
		} else if (t == YAML_SCALAR_EVENT) {
			const char *v = (const char *)ev.data.scalar.value;

			if (depth == 1) {
				if (is_key)
					want_config = strcmp(v, "config") == 0;
				is_key = !is_key;
			} else if (depth == 2 && in_config) {
				if (sub_key)
					cJSON_AddItemToArray(keys, cJSON_CreateString(v));
				sub_key = !sub_key;
			}
		}
		yaml_event_delete(&ev);
	}
}

/* Opens the first of <workdir>/<names[0]>, <workdir>/<names[1]> that exists
 * and readies parser p on it; path receives the file's name.  Returns 1
 * (release with yaml_close), 0 when neither exists, -1 + e. */
static int yaml_open_first(const char *workdir, const char *const names[2], char *path,
			   size_t pathlen, yaml_parser_t *p, FILE **f, struct err *e)
{
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, pathlen, "%s/%s", workdir, names[i]);
		*f = fopen(path, "re");
		if (*f == NULL) {
			if (errno == ENOENT)
				continue;
			return err_set(e, ERR_IO, "open %s: %s", path, strerror(errno));
		}
		if (!yaml_parser_initialize(p)) {
			fclose(*f);
			return err_set(e, ERR_NOMEM, "out of memory reading %s", path);
		}
		yaml_parser_set_input_file(p, *f);
		return 1;
	}
	return 0;
}

static void yaml_close(yaml_parser_t *p, FILE *f)
{
	yaml_parser_delete(p);
	fclose(f);
}

int pl_stack_config_keys(const char *workdir, const char *stack, cJSON **out, struct err *e)
{
	const char *name = strrchr(stack, '/');
	char yaml_name[512], yml_name[512], path[4096];
	const char *const names[2] = { yaml_name, yml_name };
	yaml_parser_t p;
	FILE *f;
	int rc;

	name = name ? name + 1 : stack;
	snprintf(yaml_name, sizeof(yaml_name), "Pulumi.%s.yaml", name);
	snprintf(yml_name, sizeof(yml_name), "Pulumi.%s.yml", name);
	*out = cJSON_CreateArray();
	if (*out == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	rc = yaml_open_first(workdir, names, path, sizeof(path), &p, &f, e);
	if (rc <= 0)
		return rc;   /* 0: no settings file yet, so no keys */
	rc = collect_config_keys(&p, *out);
	yaml_close(&p, f);
	if (rc < 0)
		return err_set(e, ERR_INVALID, "%s: not valid YAML", path);
	return 0;
}

int pl_project_name(const char *workdir, char *out, size_t outlen, struct err *e)
{
	static const char *const names[2] = { "Pulumi.yaml", "Pulumi.yml" };
	char path[4096];
	yaml_parser_t p;
	FILE *f;
	int rc;

	out[0] = '\0';
	rc = yaml_open_first(workdir, names, path, sizeof(path), &p, &f, e);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return err_set(e, ERR_NOTFOUND, "no Pulumi.yaml in %s", workdir);
	rc = find_name(&p, out, outlen);
	yaml_close(&p, f);
	if (rc < 0 || out[0] == '\0')
		return err_set(e, ERR_INVALID, "%s: no project name (top-level \"name:\")", path);
	return 0;
}
