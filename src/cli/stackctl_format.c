/*
 * stackctl_format.c - how the operator's commands print
 * (stackctl.h): kubectl's AGE durations, kubectl-style tables, and
 * objects as -o json or -o yaml.  No API access here: the unit tests
 * (tests/unit/test_cmd_stackctl.c) drive all of it.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "base/log.h"
#include "base/secret.h"
#include "base/xalloc.h"
#include "cli/stackctl.h"

/* ------------------------------------------------------------ durations */

/*
 * The steps kubectl's AGE column takes (k8s.io/apimachinery's
 * HumanDuration): precise while short, coarser as it grows, at most two
 * units.  A clock a second ahead of the server's still reads "0s".
 */
const char *stackctl_human_duration(int64_t s, char *buf, size_t n)
{
	int64_t m = s / 60, h = s / 3600, d = h / 24;

	if (s < -1)
		snprintf(buf, n, "<invalid>");
	else if (s < 0)
		snprintf(buf, n, "0s");
	else if (s < 120)
		snprintf(buf, n, "%llds", (long long)s);
	else if (m < 10 && s % 60 != 0)
		snprintf(buf, n, "%lldm%llds", (long long)m, (long long)(s % 60));
	else if (m < 180)
		snprintf(buf, n, "%lldm", (long long)m);
	else if (h < 8 && m % 60 != 0)
		snprintf(buf, n, "%lldh%lldm", (long long)h, (long long)(m % 60));
	else if (h < 48)
		snprintf(buf, n, "%lldh", (long long)h);
	else if (h < 24 * 8 && h % 24 != 0)
		snprintf(buf, n, "%lldd%lldh", (long long)d, (long long)(h % 24));
	else if (h < 24 * 365 * 2)
		snprintf(buf, n, "%lldd", (long long)d);
	else if (h < 24 * 365 * 8 && d % 365 != 0)
		snprintf(buf, n, "%lldy%lldd", (long long)(d / 365), (long long)(d % 365));
	else
		snprintf(buf, n, "%lldy", (long long)(d / 365));
	return buf;
}

const char *stackctl_age(const char *rfc3339, int64_t now, char *buf, size_t n)
{
	int64_t us;

	if (rfc3339 == NULL || kube_parse_time_us(rfc3339, &us) < 0) {
		snprintf(buf, n, "-");
		return buf;
	}
	return stackctl_human_duration(now - us / 1000000, buf, n);
}

/* ------------------------------------------------------------ tables */

size_t stackctl_text_width(const char *s)
{
	size_t w = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p & 0xC0) != 0x80)   /* not a UTF-8 continuation byte */
			w++;
	return w;
}

char *stackctl_escaped(const char *s)
{
	size_t len;
	char *out;

	if (s == NULL || *s == '\0')
		s = "-";
	len = strlen(s);
	out = xmalloc(len * 4 + 8);
	log_escape(s, out, len * 4 + 8, 0);
	return out;
}

void stackctl_table_init(struct stackctl_table *t, const char *const *headers, size_t ncols)
{
	memset(t, 0, sizeof(*t));
	t->ncols = ncols;
	stackctl_table_add(t, headers);
}

void stackctl_table_add(struct stackctl_table *t, const char *const *cells)
{
	if (t->nrows == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 8;
		t->cells = xrealloc(t->cells, t->cap * t->ncols * sizeof(*t->cells));
	}
	for (size_t c = 0; c < t->ncols; c++)
		t->cells[t->nrows * t->ncols + c] = stackctl_escaped(cells[c]);
	t->nrows++;
}

void stackctl_table_print(const struct stackctl_table *t, FILE *out)
{
	size_t *width = xcalloc(t->ncols ? t->ncols : 1, sizeof(*width));

	for (size_t r = 0; r < t->nrows; r++)
		for (size_t c = 0; c < t->ncols; c++) {
			size_t w = stackctl_text_width(t->cells[r * t->ncols + c]);
			if (w > width[c])
				width[c] = w;
		}
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			const char *cell = t->cells[r * t->ncols + c];
			fputs(cell, out);
			if (c + 1 < t->ncols)
				fprintf(out, "%*s", (int)(width[c] - stackctl_text_width(cell) + 3), "");
		}
		fputc('\n', out);
	}
	free(width);
}

void stackctl_table_free(struct stackctl_table *t)
{
	/* A cell may hold an output shown with --show-secrets. */
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		secret_free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof(*t));
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void stackctl_changes(const cJSON *changes, char *buf, size_t n)
{
	const char *names[64];
	size_t k = 0, len = 0;
	const cJSON *it, *obj = cJSON_IsObject(changes) ? changes : NULL;

	buf[0] = '\0';
	cJSON_ArrayForEach(it, obj)
		if (cJSON_IsNumber(it) && it->string != NULL && k < sizeof(names) / sizeof(names[0]))
			names[k++] = it->string;
	qsort(names, k, sizeof(names[0]), cmp_names);
	for (size_t i = 0; i < k && len < n; i++) {
		long long v = stackctl_int(changes, names[i], 0);
		int w = snprintf(buf + len, n - len, "%s%s:%lld", i ? " " : "", names[i], v);
		len += w > 0 ? (size_t)w : 0;
	}
	if (k == 0)
		snprintf(buf, n, "-");
}

/* ------------------------------------------------------------ json */

static void indent(FILE *out, int depth)
{
	fprintf(out, "%*s", depth * 4, "");
}

/* One scalar (or a key, as a string) the way cJSON escapes it. */
static void json_scalar(FILE *out, const cJSON *v)
{
	char *s = cJSON_PrintUnformatted(v);

	fputs(s ? s : "null", out);
	free(s);
}

static void json_key(FILE *out, const char *key)
{
	cJSON *k = cJSON_CreateString(key ? key : "");

	json_scalar(out, k);
	cJSON_Delete(k);
}

/* kubectl's layout: one member per line, four spaces a level. */
static void json_value(FILE *out, const cJSON *v, int depth)
{
	int obj = cJSON_IsObject(v);
	const cJSON *it;

	if (!obj && !cJSON_IsArray(v)) {
		json_scalar(out, v);
		return;
	}
	if (v->child == NULL) {
		fputs(obj ? "{}" : "[]", out);
		return;
	}
	fputs(obj ? "{\n" : "[\n", out);
	for (it = v->child; it != NULL; it = it->next) {
		indent(out, depth + 1);
		if (obj) {
			json_key(out, it->string);
			fputs(": ", out);
		}
		json_value(out, it, depth + 1);
		fputs(it->next ? ",\n" : "\n", out);
	}
	indent(out, depth);
	fputc(obj ? '}' : ']', out);
}

int stackctl_print_json(const cJSON *obj, FILE *out, struct err *e)
{
	json_value(out, obj, 0);
	fputc('\n', out);
	if (ferror(out))
		return err_set(e, ERR_IO, "cannot write the output");
	return 0;
}

/* ------------------------------------------------------------ yaml */

/* Would this string read back as something else (a boolean, a null, a
 * number, a timestamp) if written plain?  Then it is quoted, as kubectl
 * quotes "true" and "2026-12-01T10:00:00Z".  Erring towards quotes is
 * harmless. */
static int yaml_ambiguous(const char *s)
{
	static const char *const words[] = { "true", "false", "yes", "no", "on", "off", "y", "n",
		"null", "~", "<<", "=", ".inf", "-.inf", "+.inf", ".nan" };
	const char *p = s;

	if (*s == '\0')
		return 1;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcasecmp(s, words[i]) == 0)
			return 1;
	if (*p == '-' || *p == '+')
		p++;
	if (*p == '.')
		p++;
	return *p >= '0' && *p <= '9';
}

static int emit(yaml_emitter_t *em, yaml_event_t *ev, struct err *e)
{
	if (!yaml_emitter_emit(em, ev))
		return err_set(e, ERR_IO, "yaml output: %s", em->problem ? em->problem : "emitter error");
	return 0;
}

static int emit_scalar(yaml_emitter_t *em, const char *text, int plain_ok, struct err *e)
{
	yaml_event_t ev;
	/* A message with line breaks reads best as one "...\n..." line. */
	yaml_scalar_style_t style = strchr(text, '\n') ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE;

	if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text),
	    plain_ok, 1, style))
		return err_set(e, ERR_NOMEM, "out of memory");
	return emit(em, &ev, e);
}

static int emit_number(yaml_emitter_t *em, const cJSON *v, struct err *e)
{
	char num[64];
	double d = v->valuedouble;

	if (d > -9e15 && d < 9e15 && d == (double)(long long)d) {
		snprintf(num, sizeof(num), "%lld", (long long)d);
	} else {
		char *exp;
		/* The shortest form that reads back as the same number. */
		snprintf(num, sizeof(num), "%.15g", d);
		if (strtod(num, NULL) != d)
			snprintf(num, sizeof(num), "%.17g", d);
		/* YAML 1.1 reads 1e+308 as a string: its floats have a dot. */
		if (strchr(num, '.') == NULL && (exp = strchr(num, 'e')) != NULL) {
			memmove(exp + 2, exp, strlen(exp) + 1);
			memcpy(exp, ".0", 2);
		}
	}
	return emit_scalar(em, num, 1, e);
}

static int emit_node(yaml_emitter_t *em, const cJSON *v, struct err *e)
{
	yaml_event_t ev;
	const cJSON *it;

	if (cJSON_IsString(v))
		return emit_scalar(em, v->valuestring, !yaml_ambiguous(v->valuestring), e);
	if (cJSON_IsNumber(v))
		return emit_number(em, v, e);
	if (cJSON_IsBool(v))
		return emit_scalar(em, cJSON_IsTrue(v) ? "true" : "false", 1, e);
	if (cJSON_IsObject(v)) {
		yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
		if (emit(em, &ev, e) < 0)
			return -1;
		cJSON_ArrayForEach(it, v)
			if (emit_scalar(em, it->string ? it->string : "", !yaml_ambiguous(it->string ? it->string : ""), e) < 0 ||
			    emit_node(em, it, e) < 0)
				return -1;
		yaml_mapping_end_event_initialize(&ev);
		return emit(em, &ev, e);
	}
	if (cJSON_IsArray(v)) {
		yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
		if (emit(em, &ev, e) < 0)
			return -1;
		cJSON_ArrayForEach(it, v)
			if (emit_node(em, it, e) < 0)
				return -1;
		yaml_sequence_end_event_initialize(&ev);
		return emit(em, &ev, e);
	}
	return emit_scalar(em, "null", 1, e);
}

static int file_writer(void *ud, unsigned char *buf, size_t n)
{
	return fwrite(buf, 1, n, (FILE *)ud) == n;
}

int stackctl_print_yaml(const cJSON *obj, FILE *out, struct err *e)
{
	yaml_emitter_t em;
	yaml_event_t ev;
	int rc = -1;

	if (!yaml_emitter_initialize(&em))
		return err_set(e, ERR_NOMEM, "out of memory");
	yaml_emitter_set_output(&em, file_writer, out);
	yaml_emitter_set_unicode(&em, 1);
	yaml_emitter_set_width(&em, -1);     /* long messages stay on one line */
	yaml_emitter_set_indent(&em, 2);
	yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
	if (emit(&em, &ev, e) < 0)
		goto out;
	yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
	if (emit(&em, &ev, e) < 0 || emit_node(&em, obj, e) < 0)
		goto out;
	yaml_document_end_event_initialize(&ev, 1);
	if (emit(&em, &ev, e) < 0)
		goto out;
	yaml_stream_end_event_initialize(&ev);
	if (emit(&em, &ev, e) < 0)
		goto out;
	rc = fflush(out) == 0 ? 0 : err_set(e, ERR_IO, "cannot write the output");
out:
	yaml_emitter_delete(&em);
	return rc;
}

int stackctl_print_doc(const cJSON *obj, enum stackctl_output fmt, FILE *out, struct err *e)
{
	return fmt == STACKCTL_OUT_YAML ? stackctl_print_yaml(obj, out, e) : stackctl_print_json(obj, out, e);
}
