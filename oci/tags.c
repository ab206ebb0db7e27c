/*
 * tags.c - a repository's tag list (GET /v2/<repo>/tags/list), following
 * Link pagination, bounded in tags, pages and bytes because the list comes
 * from the registry: a hostile one could page junk forever.  Used by
 * semver selection (pull.c).
 */
#include "oci/oci.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/http.h"
#include "oci/internal.h"

#define TAGS_PAGE_MAX (4 << 20)
#define TAGS_MAX_PAGES 1000
#define TAGS_MAX 100000
#define TAGS_TOTAL_MAX (16 << 20)

void oci_tags_free(char **tags, size_t ntags)
{
	for (size_t i = 0; i < ntags; i++)
		free(tags[i]);
	free(tags);
}

/* Link: <url>; rel="next" -> absolute next URL (malloc'd) or NULL. */
static char *next_link(const struct oci_client *c, const struct http_response *r)
{
	char *h = http_response_header(r, "Link"), *next = NULL;
	char *lt, *gt;

	if (h == NULL)
		return NULL;
	lt = strchr(h, '<');
	gt = lt ? strchr(lt, '>') : NULL;
	if (lt != NULL && gt != NULL && strstr(gt, "rel=\"next\"") != NULL) {
		*gt = '\0';
		if (lt[1] == '/')
			oci_asprintf(&next, "%s%s", oci_client_base(c), lt + 1);
		else if (oci_same_origin(c, lt + 1))
			next = strdup(lt + 1);
	}
	free(h);
	return next;
}

static int append_tags(const char *body, char ***tags, size_t *ntags, size_t *cap, struct err *e)
{
	cJSON *root = cJSON_Parse(body);
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "tags"), *it;

	if (!cJSON_IsObject(root) || (arr != NULL && !cJSON_IsArray(arr) && !cJSON_IsNull(arr))) {
		cJSON_Delete(root);
		return err_set(e, ERR_INVALID, "tag list is not {\"tags\": [...]}");
	}
	if (!cJSON_IsArray(arr))
		arr = NULL;
	cJSON_ArrayForEach(it, arr) {
		/* A tag a registry cannot hold is junk (a hostile list, a newline
		 * meant for our output): not something to select or print. */
		if (!cJSON_IsString(it) || !oci_tag_valid(it->valuestring))
			continue;
		if (*ntags >= TAGS_MAX) {
			cJSON_Delete(root);
			return err_set(e, ERR_LIMIT, "more than %d tags", TAGS_MAX);
		}
		if (*ntags == *cap) {
			size_t nc = *cap ? *cap * 2 : 64;
			char **nt = realloc(*tags, nc * sizeof(*nt));
			if (nt == NULL) {
				cJSON_Delete(root);
				return err_set(e, ERR_NOMEM, "out of memory");
			}
			*tags = nt;
			*cap = nc;
		}
		(*tags)[*ntags] = strdup(it->valuestring);
		if ((*tags)[*ntags] == NULL) {
			cJSON_Delete(root);
			return err_set(e, ERR_NOMEM, "out of memory");
		}
		(*ntags)++;
	}
	cJSON_Delete(root);
	return 0;
}

int oci_list_tags(struct oci_client *c, const char *repo, char ***tags, size_t *ntags, struct err *e)
{
	char *url = NULL, *scope = oci_scope(repo, "pull"), what[600];
	size_t cap = 0, total = 0;
	struct http_opts o = *oci_client_http(c);
	int rc = -1;

	*tags = NULL;
	*ntags = 0;
	snprintf(what, sizeof(what), "tags of %s/%s", oci_client_registry(c), repo);
	if (scope == NULL || oci_asprintf(&url, "%s/v2/%s/tags/list?n=1000", oci_client_base(c), repo) < 0) {
		free(scope);
		return err_set(e, ERR_NOMEM, "out of memory");
	}
	o.max_bytes = TAGS_PAGE_MAX;
	for (int page = 0; url != NULL; page++) {
		struct http_response r;
		struct http_request req = { .url = url };
		if (page >= TAGS_MAX_PAGES) {
			err_set(e, ERR_LIMIT, "%s: more than %d pages", what, TAGS_MAX_PAGES);
			goto out;
		}
		if (oci_request(c, scope, &o, &req, &r, e) < 0) {
			err_prefix(e, "%s", what);
			goto out;
		}
		if (r.status != 200) {
			oci_status_error(e, what, &r);
			http_response_free(&r);
			goto out;
		}
		total += r.body_len;
		if (total > TAGS_TOTAL_MAX) {
			err_set(e, ERR_LIMIT, "%s: more than %d bytes of tag lists", what, TAGS_TOTAL_MAX);
			http_response_free(&r);
			goto out;
		}
		if (append_tags(r.body, tags, ntags, &cap, e) < 0) {
			err_prefix(e, "%s", what);
			http_response_free(&r);
			goto out;
		}
		free(url);
		url = next_link(c, &r);
		http_response_free(&r);
	}
	rc = 0;
out:
	free(url);
	free(scope);
	if (rc < 0) {
		oci_tags_free(*tags, *ntags);
		*tags = NULL;
		*ntags = 0;
	}
	return rc;
}
