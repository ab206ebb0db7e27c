/*
 * pl_util.c - small helpers of the driver: owned string vectors for argv
 * and envp, and reading the project name from Pulumi.yaml (needed to tell
 * which stack config keys are declared: the CLI namespaces "greeting" as
 * "<project>:greeting").
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

int pl_project_name(const char *workdir, char *out, size_t outlen, struct err *e)
{
	static const char *const names[] = { "Pulumi.yaml", "Pulumi.yml" };

	out[0] = '\0';
	for (size_t i = 0; i < 2; i++) {
		char path[4096];
		FILE *f;
		yaml_parser_t p;
		int rc;

		snprintf(path, sizeof(path), "%s/%s", workdir, names[i]);
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
		rc = find_name(&p, out, outlen);
		yaml_parser_delete(&p);
		fclose(f);
		if (rc < 0 || out[0] == '\0')
			return err_set(e, ERR_INVALID, "%s: no project name (top-level \"name:\")", path);
		return 0;
	}
	return err_set(e, ERR_NOTFOUND, "no Pulumi.yaml in %s", workdir);
}
