/*
 * json_strict.c - reading JSON so that a Go reader of the same bytes reads
 * the same thing (json_strict.h says why).  Shared by oci/sigcheck.c
 * (cosign's documents) and stack/stack_approval.c (pulumi's plans).
 */
#include "base/json_strict.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

int json_member(const cJSON *obj, const char *name, const char *where, const cJSON **out, struct err *e)
{
	const cJSON *it, *found = NULL;
	int same = 0;

	*out = NULL;
	if (!cJSON_IsObject(obj))
		return 1;
	cJSON_ArrayForEach(it, obj) {
		if (it->string == NULL || strcasecmp(it->string, name) != 0)
			continue;
		same++;
		if (strcmp(it->string, name) == 0 && found == NULL)
			found = it;
	}
	if (same > 1)
		return err_set(e, ERR_REFUSED, "%s has \"%s\" more than once (in some spelling): ambiguous",
		    where, name);
	*out = found;
	return found ? 0 : 1;
}

static int cmp_exact(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_fold(const void *a, const void *b)
{
	return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

static int non_ascii(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80)
			return 1;
	return 0;
}

int json_keys_distinct(const cJSON *obj, int fold_case, const char *where, struct err *e)
{
	const cJSON *it;
	const char **names;
	size_t n = 0, i = 0;
	int rc = 0;

	if (!cJSON_IsObject(obj) || obj->child == NULL)
		return 0;
	cJSON_ArrayForEach(it, obj)
		n++;
	/* Sorted, a duplicate is next to its twin: n log n, not n squared. */
	if ((names = malloc(n * sizeof(*names))) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(it, obj) {
		names[i] = it->string ? it->string : "";
		if (fold_case && non_ascii(names[i])) {
			err_set(e, ERR_REFUSED, "%s has a key outside ASCII (\"%.100s\"), which Go may read as "
			    "another: ambiguous", where, names[i]);
			free(names);
			return -1;
		}
		i++;
	}
	qsort(names, n, sizeof(*names), fold_case ? cmp_fold : cmp_exact);
	for (i = 1; i < n && rc == 0; i++)
		if ((fold_case ? cmp_fold : cmp_exact)(&names[i - 1], &names[i]) == 0)
			rc = err_set(e, ERR_REFUSED, "%s has \"%.200s\" more than once%s: ambiguous", where,
			    names[i], fold_case ? " (in some spelling)" : "");
	free(names);
	return rc;
}

int json_struct_keys(const cJSON *obj, const char *const *fields, const char *where, struct err *e)
{
	const cJSON *it;

	if (json_keys_distinct(obj, 1, where, e) < 0)
		return -1;
	if (!cJSON_IsObject(obj))
		return 0;
	cJSON_ArrayForEach(it, obj)
		for (const char *const *f = fields; it->string && *f; f++)
			if (strcasecmp(it->string, *f) == 0 && strcmp(it->string, *f) != 0)
				return err_set(e, ERR_REFUSED, "%s has \"%.200s\", which Go reads as its field "
				    "\"%s\": a wrong spelling, refused", where, it->string, *f);
	return 0;
}

static int tree(const cJSON *v, int depth, int depth_max, const char *where, struct err *e)
{
	const cJSON *c;

	if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
		return 0;
	if (depth > depth_max)
		return err_set(e, ERR_REFUSED, "%s nests deeper than %d levels", where, depth_max);
	if (json_keys_distinct(v, 0, where, e) < 0)
		return -1;
	for (c = v->child; c; c = c->next)
		if (tree(c, depth + 1, depth_max, where, e) < 0)
			return -1;
	return 0;
}

int json_tree_keys_distinct(const cJSON *v, int depth_max, const char *where, struct err *e)
{
	return tree(v, 0, depth_max, where, e);
}

/* The length of the UTF-8 sequence at s (at most n bytes), 0 if invalid:
 * overlong forms, surrogates and code points past U+10FFFF are invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned long cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

cJSON *json_parse_exact(const char *text, size_t len, const char *what, struct err *e)
{
	const unsigned char *s = (const unsigned char *)text;
	const char *end = NULL;
	cJSON *root;

	for (size_t i = 0, k; i < len; i += k)
		if (s[i] == '\0' || (k = utf8_seq(s + i, len - i)) == 0)
			return err_set(e, ERR_REFUSED, "%s is not valid UTF-8 text (byte %zu)", what, i), NULL;
	root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	if (root && end) {
		while (end < text + len && strchr(" \t\r\n", *end))
			end++;
		if (end != text + len) {
			cJSON_Delete(root);
			return err_set(e, ERR_REFUSED, "%s has more after its JSON value", what), NULL;
		}
	}
	if (root == NULL)
		err_set(e, ERR_REFUSED, "%s is not JSON", what);
	return root;
}
