/*
 * manifest.c - OCI image manifests, OCI indexes and Docker v2 manifests and
 * lists: parsing the untrusted JSON into descriptors, choosing the layer
 * (Flux content first) or the platform (linux/amd64 first), and building
 * the manifest `push` writes.
 *
 * Parsing is strict where a mistake would matter later: every descriptor
 * needs a media type, a digest that digest_parse accepts and a size that
 * is a non-negative integer; the body's mediaType must agree with the
 * Content-Type the registry sent.
 */
#include "oci/oci.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/str.h"
#include "base/mem.h"
#include "oci/internal.h"

#define MAX_DESCRIPTORS 10000

static void descriptor_free(struct oci_descriptor *d)
{
	mem_free_all(d->media_type, d->digest, d->os, d->arch, d->variant);
	memset(d, 0, sizeof(*d));
}

void oci_manifest_free(struct oci_manifest *m)
{
	if (m == NULL)
		return;
	free(m->media_type);
	descriptor_free(&m->config);
	for (size_t i = 0; i < m->nlayers; i++)
		descriptor_free(&m->layers[i]);
	free(m->layers);
	oci_annotations_free(m->annotations, m->nannotations);
	memset(m, 0, sizeof(*m));
}

void oci_annotations_free(struct oci_annotation *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(a[i].key);
		free(a[i].value);
	}
	free(a);
}

static char *dup_string(const cJSON *obj, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

	return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

/* Content-Type may carry parameters ("; charset=utf-8"). */
static int same_type(const char *content_type, const char *media_type)
{
	size_t n = strcspn(content_type, "; \t");

	return strlen(media_type) == n && strncasecmp(content_type, media_type, n) == 0;
}

static int parse_descriptor(const cJSON *j, const char *what, size_t idx, struct oci_descriptor *d,
    struct err *e)
{
	const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "size");
	const cJSON *plat = cJSON_GetObjectItemCaseSensitive(j, "platform");
	struct digest dg;
	struct err de;
	char buf[DIGEST_STR_MAX];

	if (!cJSON_IsObject(j))
		return err_set(e, ERR_INVALID, "manifest: %s[%zu] is not an object", what, idx);
	d->media_type = dup_string(j, "mediaType");
	d->digest = dup_string(j, "digest");
	if (d->media_type == NULL || d->media_type[0] == '\0')
		return err_set(e, ERR_INVALID, "manifest: %s[%zu] has no mediaType", what, idx);
	if (d->digest == NULL || strchr(d->digest, ':') == NULL || digest_parse(d->digest, &dg, &de) < 0)
		return err_set(e, ERR_INVALID, "manifest: %s[%zu] has a missing or invalid digest", what, idx);
	digest_format(&dg, buf, sizeof(buf));
	free(d->digest);
	d->digest = strdup(buf);
	if (!cJSON_IsNumber(size) || size->valuedouble < 0 || size->valuedouble > 9.0e15 ||
	    floor(size->valuedouble) != size->valuedouble)
		return err_set(e, ERR_INVALID, "manifest: %s[%zu] has a missing or invalid size", what, idx);
	d->size = (int64_t)size->valuedouble;
	if (cJSON_IsObject(plat)) {
		d->os = dup_string(plat, "os");
		d->arch = dup_string(plat, "architecture");
		d->variant = dup_string(plat, "variant");
	}
	if (d->digest == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	return 0;
}

static int parse_descriptor_array(const cJSON *arr, const char *what, struct oci_manifest *m,
    struct err *e)
{
	int n;

	if (!cJSON_IsArray(arr))
		return err_set(e, ERR_INVALID, "manifest: \"%s\" is missing or not an array", what);
	n = cJSON_GetArraySize(arr);
	if (n > MAX_DESCRIPTORS)
		return err_set(e, ERR_LIMIT, "manifest: more than %d %s", MAX_DESCRIPTORS, what);
	m->layers = calloc(n > 0 ? (size_t)n : 1, sizeof(*m->layers));
	if (m->layers == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, arr) {
		if (parse_descriptor(it, what, m->nlayers, &m->layers[m->nlayers], e) < 0) {
			m->nlayers++;
			return -1;
		}
		m->nlayers++;
	}
	return 0;
}

static int parse_annotations(const cJSON *ann, struct oci_manifest *m, struct err *e)
{
	const cJSON *it;
	int n;

	if (ann == NULL)
		return 0;
	if (!cJSON_IsObject(ann))
		return err_set(e, ERR_INVALID, "manifest: \"annotations\" is not an object");
	n = cJSON_GetArraySize(ann);
	if (n > MAX_DESCRIPTORS)
		return err_set(e, ERR_LIMIT, "manifest: too many annotations");
	m->annotations = calloc(n > 0 ? (size_t)n : 1, sizeof(*m->annotations));
	if (m->annotations == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(it, ann) {
		if (!cJSON_IsString(it))
			return err_set(e, ERR_INVALID, "manifest: annotation \"%.100s\" is not a string", it->string);
		struct oci_annotation *a = &m->annotations[m->nannotations++];
		a->key = strdup(it->string);
		a->value = strdup(it->valuestring);
		if (a->key == NULL || a->value == NULL)
			return err_set(e, ERR_NOMEM, "out of memory");
	}
	return 0;
}

/* Decides manifest vs index from the body's mediaType, the Content-Type and,
 * failing both, from which of "manifests" / "layers" is present. */
static int classify(const cJSON *root, const char *content_type, struct oci_manifest *m, struct err *e)
{
	char *mt = dup_string(root, "mediaType");
	const char *t;

	if (mt != NULL && content_type != NULL && *content_type != '\0' && !same_type(content_type, mt) &&
	    !same_type(content_type, "application/json")) {
		free(mt);
		return err_set(e, ERR_INVALID, "manifest: mediaType in the body does not match the "
		    "Content-Type the registry sent");
	}
	if (mt == NULL && content_type != NULL && *content_type != '\0' &&
	    !same_type(content_type, "application/json")) {
		size_t n = strcspn(content_type, "; \t");
		mt = strndup(content_type, n);
	}
	if (mt == NULL) {
		if (cJSON_HasObjectItem(root, "manifests"))
			mt = strdup(OCI_MT_INDEX);
		else
			mt = strdup(OCI_MT_MANIFEST);
	}
	if (mt == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	m->media_type = mt;
	t = mt;
	if (strcmp(t, OCI_MT_INDEX) == 0 || strcmp(t, OCI_MT_DOCKER_LIST) == 0)
		m->kind = OCI_KIND_INDEX;
	else if (strcmp(t, OCI_MT_MANIFEST) == 0 || strcmp(t, OCI_MT_DOCKER_MANIFEST) == 0)
		m->kind = OCI_KIND_MANIFEST;
	else
		return err_set(e, ERR_UNSUPPORTED, "manifest: unsupported media type \"%.200s\"", t);
	return 0;
}

int oci_manifest_parse(const char *body, size_t len, const char *content_type,
    struct oci_manifest *out, struct err *e)
{
	cJSON *root;
	const cJSON *sv;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (len > (size_t)OCI_MANIFEST_MAX)
		return err_set(e, ERR_LIMIT, "manifest: %zu bytes, over the limit of %lld", len,
		    (long long)OCI_MANIFEST_MAX);
	root = cJSON_ParseWithLength(body, len);
	if (root == NULL || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return err_set(e, ERR_INVALID, "manifest: not a JSON object");
	}
	sv = cJSON_GetObjectItemCaseSensitive(root, "schemaVersion");
	if (!cJSON_IsNumber(sv) || sv->valuedouble != 2) {
		err_set(e, ERR_UNSUPPORTED, "manifest: schemaVersion must be 2");
		goto out;
	}
	if (classify(root, content_type, out, e) < 0)
		goto out;
	if (out->kind == OCI_KIND_INDEX) {
		if (parse_descriptor_array(cJSON_GetObjectItemCaseSensitive(root, "manifests"), "manifests",
		    out, e) < 0)
			goto out;
	} else {
		if (parse_descriptor(cJSON_GetObjectItemCaseSensitive(root, "config"), "config", 0,
		    &out->config, e) < 0)
			goto out;
		if (parse_descriptor_array(cJSON_GetObjectItemCaseSensitive(root, "layers"), "layers", out,
		    e) < 0)
			goto out;
	}
	rc = parse_annotations(cJSON_GetObjectItemCaseSensitive(root, "annotations"), out, e);
out:
	cJSON_Delete(root);
	if (rc < 0)
		oci_manifest_free(out);
	return rc;
}

static const char *const layer_preference[] = {
	OCI_MT_FLUX_CONTENT, OCI_MT_LAYER_TGZ, OCI_MT_LAYER_TAR, OCI_MT_LAYER_TZST, OCI_MT_DOCKER_LAYER,
};

static void list_types(const struct oci_manifest *m, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < m->nlayers && used + 4 < len; i++) {
		int n = snprintf(buf + used, len - used, "%s\"%.100s\"", i ? ", " : "", m->layers[i].media_type);
		if (n < 0)
			break;
		used += (size_t)n < len - used ? (size_t)n : len - used - 1;
	}
}

const struct oci_descriptor *oci_select_layer(const struct oci_manifest *m, const char *want,
    struct err *e)
{
	char seen[600];

	if (m->nlayers == 0) {
		err_set(e, ERR_NOTFOUND, "manifest has no layers");
		return NULL;
	}
	if (want != NULL) {
		for (size_t i = 0; i < m->nlayers; i++)
			if (strcmp(m->layers[i].media_type, want) == 0)
				return &m->layers[i];
	} else {
		for (size_t p = 0; p < sizeof(layer_preference) / sizeof(layer_preference[0]); p++)
			for (size_t i = 0; i < m->nlayers; i++)
				if (strcmp(m->layers[i].media_type, layer_preference[p]) == 0)
					return &m->layers[i];
	}
	list_types(m, seen, sizeof(seen));
	if (want != NULL)
		err_set(e, ERR_NOTFOUND, "no layer with media type \"%.200s\" (layers: %s)", want, seen);
	else
		err_set(e, ERR_NOTFOUND, "no layer with a tar media type (layers: %s); pick one with "
		    "--media-type", seen);
	return NULL;
}

static int is_manifest_type(const char *t)
{
	return strcmp(t, OCI_MT_MANIFEST) == 0 || strcmp(t, OCI_MT_DOCKER_MANIFEST) == 0;
}

const struct oci_descriptor *oci_select_platform(const struct oci_manifest *idx, struct err *e)
{
	const struct oci_descriptor *first = NULL;

	for (size_t i = 0; i < idx->nlayers; i++) {
		const struct oci_descriptor *d = &idx->layers[i];
		if (!is_manifest_type(d->media_type))
			continue;
		if (str_eq(d->os, "linux") && str_eq(d->arch, "amd64"))
			return d;
		if (first == NULL)
			first = d;
	}
	if (first == NULL)
		err_set(e, ERR_NOTFOUND, "index has no usable manifest (%zu entries, none an image manifest)",
		    idx->nlayers);
	return first;
}

/* ---------------- building ---------------- */

cJSON *oci_descriptor_json(const char *mt, const char *digest, int64_t size)
{
	cJSON *d = cJSON_CreateObject();

	cJSON_AddStringToObject(d, "mediaType", mt);
	cJSON_AddStringToObject(d, "digest", digest);
	cJSON_AddNumberToObject(d, "size", (double)size);
	return d;
}

static int ann_cmp(const void *a, const void *b)
{
	return strcmp(((const struct oci_annotation *)a)->key, ((const struct oci_annotation *)b)->key);
}

char *oci_flux_manifest_json(const char *config_digest, int64_t config_size,
    const char *layer_digest, int64_t layer_size, const struct oci_annotation *ann, size_t nann)
{
	cJSON *root = cJSON_CreateObject(), *layers, *annotations;
	struct oci_annotation *sorted = NULL;
	char *out;

	cJSON_AddNumberToObject(root, "schemaVersion", 2);
	cJSON_AddStringToObject(root, "mediaType", OCI_MT_MANIFEST);
	cJSON_AddItemToObject(root, "config", oci_descriptor_json(OCI_MT_FLUX_CONFIG, config_digest, config_size));
	layers = cJSON_AddArrayToObject(root, "layers");
	cJSON_AddItemToArray(layers, oci_descriptor_json(OCI_MT_FLUX_CONTENT, layer_digest, layer_size));
	if (nann > 0) {
		/* Sorted keys keep the bytes, hence the digest, independent of flag order. */
		sorted = malloc(nann * sizeof(*sorted));
		if (sorted == NULL) {
			cJSON_Delete(root);
			return NULL;
		}
		memcpy(sorted, ann, nann * sizeof(*sorted));
		qsort(sorted, nann, sizeof(*sorted), ann_cmp);
		annotations = cJSON_AddObjectToObject(root, "annotations");
		for (size_t i = 0; i < nann; i++) {
			cJSON_DeleteItemFromObjectCaseSensitive(annotations, sorted[i].key);
			cJSON_AddStringToObject(annotations, sorted[i].key, sorted[i].value);
		}
	}
	out = cJSON_PrintUnformatted(root);
	free(sorted);
	cJSON_Delete(root);
	return out;
}
