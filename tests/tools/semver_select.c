/*
 * semver_select.c - a test-only driver over oci/semver.c that answers the
 * semver oracle's table (tests/real/semver/main.go) in the oracle's own
 * format, so tests/e2e/test_semver_oracle.py can compare the two answer for
 * answer.
 *
 *   semver_select < table.json > answers.json
 *
 * Input: {"ranges": [..], "versions": [..], "selections": [{"range", "tags"}]}.
 * Output: {"versions": [{"valid"}], "order": ["<=>-" rows],
 *          "ranges": [{"error", "matches": "10-" row}],
 *          "selections": [{"error", "tag", "matching"}]}.
 * Exit status 2 when the table cannot be read, 1 when out of memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "oci/oci.h"

/* All of stdin, NUL-terminated; the caller frees. */
static char *read_stdin(void)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);

	while (buf != NULL) {
		size_t n = fread(buf + len, 1, cap - len - 1, stdin);
		len += n;
		if (n == 0)
			break;
		if (cap - len - 1 == 0) {
			char *bigger = realloc(buf, cap * 2);
			if (bigger == NULL) {
				free(buf);
				return NULL;
			}
			buf = bigger;
			cap *= 2;
		}
	}
	if (buf != NULL)
		buf[len] = '\0';
	return buf;
}

static const char *item_text(const cJSON *a, int i)
{
	const char *s = cJSON_GetStringValue(cJSON_GetArrayItem(a, i));

	return s != NULL ? s : "";
}

/* The versions' answers and their pairwise order.  parsed[i] is filled and
 * valid[i] set for the versions oci_semver_parse accepts. */
static int answer_versions(const cJSON *texts, struct oci_semver *parsed, char *valid, cJSON *out)
{
	int n = cJSON_GetArraySize(texts);
	cJSON *versions = cJSON_AddArrayToObject(out, "versions");
	cJSON *order = cJSON_AddArrayToObject(out, "order");
	char *row = malloc((size_t)n + 1);

	if (versions == NULL || order == NULL || row == NULL) {
		free(row);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		cJSON *v = cJSON_CreateObject();
		valid[i] = oci_semver_parse(item_text(texts, i), &parsed[i]) == 0;
		if (v == NULL || cJSON_AddBoolToObject(v, "valid", valid[i]) == NULL) {
			cJSON_Delete(v);
			free(row);
			return -1;
		}
		cJSON_AddItemToArray(versions, v);
	}
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < n; j++) {
			int d = valid[i] && valid[j] ? oci_semver_cmp(&parsed[i], &parsed[j]) : 2;
			row[j] = d == 2 ? '-' : d < 0 ? '<' : d > 0 ? '>' : '=';
		}
		row[n] = '\0';
		cJSON_AddItemToArray(order, cJSON_CreateString(row));
	}
	free(row);
	return 0;
}

static int answer_ranges(const cJSON *texts, int nversions, const struct oci_semver *parsed,
    const char *valid, cJSON *out)
{
	cJSON *ranges = cJSON_AddArrayToObject(out, "ranges");
	char *row = malloc((size_t)nversions + 1);

	if (ranges == NULL || row == NULL) {
		free(row);
		return -1;
	}
	for (int i = 0; i < cJSON_GetArraySize(texts); i++) {
		struct err e = { 0 };
		struct oci_semver_range *r = oci_semver_range_parse(item_text(texts, i), &e);
		cJSON *a = cJSON_CreateObject();

		if (a == NULL) {
			oci_semver_range_free(r);
			free(row);
			return -1;
		}
		cJSON_AddItemToArray(ranges, a);
		if (r == NULL) {
			cJSON_AddStringToObject(a, "error", e.msg);
			cJSON_AddStringToObject(a, "matches", "");
			continue;
		}
		for (int j = 0; j < nversions; j++)
			row[j] = !valid[j] ? '-' : oci_semver_range_match(r, &parsed[j]) ? '1' : '0';
		row[nversions] = '\0';
		cJSON_AddNullToObject(a, "error");
		cJSON_AddStringToObject(a, "matches", row);
		oci_semver_range_free(r);
	}
	free(row);
	return 0;
}

/* One selection: the tag oci_semver_select picks, and how many tags match. */
static cJSON *answer_selection(const cJSON *sel)
{
	const cJSON *tags = cJSON_GetObjectItem(sel, "tags");
	int n = cJSON_GetArraySize(tags), matching = 0;
	struct err e = { 0 };
	struct oci_semver_range *r = oci_semver_range_parse(
	    cJSON_GetStringValue(cJSON_GetObjectItem(sel, "range")), &e);
	cJSON *a = cJSON_CreateObject();
	char **list = calloc((size_t)n + 1, sizeof(*list));

	if (a == NULL || list == NULL) {
		oci_semver_range_free(r);
		cJSON_Delete(a);
		free(list);
		return NULL;
	}
	if (r == NULL) {
		cJSON_AddStringToObject(a, "error", e.msg);
		cJSON_AddNullToObject(a, "tag");
	} else {
		for (int i = 0; i < n; i++) {
			struct oci_semver v;
			list[i] = (char *)item_text(tags, i);
			if (oci_semver_parse(list[i], &v) == 0 && oci_semver_range_match(r, &v))
				matching++;
		}
		const char *best = oci_semver_select(r, list, (size_t)n);
		cJSON_AddNullToObject(a, "error");
		if (best != NULL)
			cJSON_AddStringToObject(a, "tag", best);
		else
			cJSON_AddNullToObject(a, "tag");
		oci_semver_range_free(r);
	}
	cJSON_AddNumberToObject(a, "matching", matching);
	free(list);
	return a;
}

int main(void)
{
	char *text = read_stdin();
	cJSON *in = text != NULL ? cJSON_Parse(text) : NULL;
	cJSON *out = cJSON_CreateObject();
	const cJSON *versions = cJSON_GetObjectItem(in, "versions");
	int nv = cJSON_GetArraySize(versions);
	struct oci_semver *parsed = calloc((size_t)nv + 1, sizeof(*parsed));
	char *valid = calloc((size_t)nv + 1, 1);
	cJSON *selections = cJSON_AddArrayToObject(out, "selections");
	const cJSON *sel;
	char *printed = NULL;
	int rc = 1;

	free(text);
	if (in == NULL) {
		fprintf(stderr, "semver_select: stdin is not a JSON table\n");
		rc = 2;
		goto done;
	}
	if (parsed == NULL || valid == NULL || selections == NULL ||
	    answer_versions(versions, parsed, valid, out) < 0 ||
	    answer_ranges(cJSON_GetObjectItem(in, "ranges"), nv, parsed, valid, out) < 0)
		goto done;
	cJSON_ArrayForEach(sel, cJSON_GetObjectItem(in, "selections")) {
		cJSON *a = answer_selection(sel);
		if (a == NULL)
			goto done;
		cJSON_AddItemToArray(selections, a);
	}
	printed = cJSON_PrintUnformatted(out);
	if (printed != NULL && puts(printed) >= 0)
		rc = 0;
done:
	if (rc == 1)
		fprintf(stderr, "semver_select: out of memory\n");
	free(printed);
	free(parsed);
	free(valid);
	cJSON_Delete(in);
	cJSON_Delete(out);
	return rc;
}
