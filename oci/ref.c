/*
 * ref.c - OCI references: oci://host[:port]/path/repo[:tag][@algo:hex].
 *
 * The grammar is the distribution-spec one (repository name components of
 * lower-case alphanumerics joined by '.', '_', '__' or dashes; tags of at
 * most 128 characters), plus Docker's normalisation so "docker.io/nginx"
 * reaches registry-1.docker.io/library/nginx.  Errors quote the reference
 * and name the part at fault.
 */
#include "oci/oci.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"

#define DOCKER_HUB_API "registry-1.docker.io"
#define REPO_MAX 255

void oci_ref_free(struct oci_ref *r)
{
	if (r == NULL)
		return;
	mem_free_all(r->registry, r->repository, r->tag, r->digest);
	memset(r, 0, sizeof(*r));
}

static int is_alnum_lower(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* One path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* */
static int component_valid(const char *s, size_t n)
{
	size_t i = 0;

	if (n == 0 || !is_alnum_lower(s[0]) || !is_alnum_lower(s[n - 1]))
		return 0;
	while (i < n) {
		if (is_alnum_lower(s[i])) {
			i++;
			continue;
		}
		/* a separator run: ".", "_", "__" or one or more "-" */
		size_t j = i;
		if (s[i] == '.') {
			j++;
		} else if (s[i] == '_') {
			j++;
			if (j < n && s[j] == '_')
				j++;
		} else if (s[i] == '-') {
			while (j < n && s[j] == '-')
				j++;
		} else {
			return 0;
		}
		if (j >= n || !is_alnum_lower(s[j]))
			return 0;
		i = j;
	}
	return 1;
}

static int repository_valid(const char *repo)
{
	const char *p = repo;

	if (strlen(repo) > REPO_MAX)
		return 0;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (!component_valid(p, n))
			return 0;
		if (slash == NULL)
			return 1;
		p = slash + 1;
	}
}

/* [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127} */
int oci_tag_valid(const char *t)
{
	size_t n = strlen(t);

	if (n == 0 || n > 128 || !(isalnum((unsigned char)t[0]) || t[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)t[i]) || t[i] == '_' || t[i] == '.' || t[i] == '-'))
			return 0;
	return 1;
}

/* host[:port] with a DNS-ish host or an IPv4 literal; port 1..65535. */
static int host_valid(const char *h)
{
	const char *colon = strrchr(h, ':');
	size_t hn = colon ? (size_t)(colon - h) : strlen(h);

	if (hn == 0 || hn > 253)
		return 0;
	for (size_t i = 0; i < hn; i++) {
		char c = h[i];
		if (!(isalnum((unsigned char)c) || c == '.' || c == '-'))
			return 0;
	}
	if (h[0] == '-' || h[0] == '.' || h[hn - 1] == '-' || h[hn - 1] == '.')
		return 0;
	if (colon != NULL) {
		const char *p = colon + 1;
		long port = 0;
		if (*p == '\0' || strlen(p) > 5)
			return 0;
		for (; *p; p++) {
			if (!isdigit((unsigned char)*p))
				return 0;
			port = port * 10 + (*p - '0');
		}
		if (port < 1 || port > 65535)
			return 0;
	}
	return 1;
}

/* Docker's rule: the first component is a host when it has a dot or a port,
 * or is "localhost"; otherwise the name lives on Docker Hub. */
static int looks_like_host(const char *s, size_t n)
{
	return memchr(s, '.', n) != NULL || memchr(s, ':', n) != NULL ||
	    (n == 9 && strncmp(s, "localhost", 9) == 0);
}

/* The reference as echoed in messages: control characters escaped. */
static const char *shown(const char *text, char *buf, size_t n)
{
	return log_printable(text, buf, n);
}

static int fail(struct err *e, const char *text, const char *why)
{
	char b[320];

	return err_set(e, ERR_INVALID, "invalid OCI reference \"%s\": %s", shown(text, b, sizeof(b)), why);
}

static int set_digest(struct oci_ref *out, const char *text, const char *dtext, struct err *e)
{
	struct digest d;
	struct err de;
	char buf[DIGEST_STR_MAX];

	if (strchr(dtext, ':') == NULL)
		return fail(e, text, "digest must be \"<algorithm>:<hex>\"");
	if (digest_parse(dtext, &d, &de) < 0)
		return fail(e, text, de.msg);
	digest_format(&d, buf, sizeof(buf));
	out->digest = strdup(buf);
	return out->digest ? 0 : err_set(e, ERR_NOMEM, "out of memory");
}

/* Splits "name[:tag]" where the tag can only be in the last component. */
static int split_tag(char *path, char **tag)
{
	char *last = strrchr(path, '/');
	char *colon = strchr(last ? last : path, ':');

	*tag = NULL;
	if (colon != NULL) {
		*colon = '\0';
		*tag = colon + 1;
	}
	return 0;
}

static int normalise_docker_hub(struct oci_ref *out, struct err *e)
{
	if (strcmp(out->registry, "docker.io") == 0 || strcmp(out->registry, "index.docker.io") == 0) {
		free(out->registry);
		out->registry = strdup(DOCKER_HUB_API);
		if (out->registry == NULL)
			return err_set(e, ERR_NOMEM, "out of memory");
	}
	if (strcmp(out->registry, DOCKER_HUB_API) == 0 && strchr(out->repository, '/') == NULL) {
		size_t n = strlen(out->repository) + sizeof("library/");
		char *r = malloc(n);
		if (r == NULL)
			return err_set(e, ERR_NOMEM, "out of memory");
		snprintf(r, n, "library/%s", out->repository);
		free(out->repository);
		out->repository = r;
	}
	return 0;
}

int oci_ref_parse(const char *text, struct oci_ref *out, struct err *e)
{
	const char *s = text;
	char *work = NULL, *at, *tag, *path, *slash;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (text == NULL || *text == '\0')
		return err_set(e, ERR_INVALID, "invalid OCI reference: empty");
	if (str_has_prefix(s, "oci://"))
		s += 6;
	else if (strstr(s, "://") != NULL)
		return fail(e, text, "only the oci:// scheme is accepted");
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
			return fail(e, text, "contains whitespace or a non-ASCII character");
	work = strdup(s);
	if (work == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	at = strrchr(work, '@');
	if (at != NULL) {
		*at = '\0';
		if (set_digest(out, text, at + 1, e) < 0)
			goto out;
	}
	slash = strchr(work, '/');
	if (slash != NULL && looks_like_host(work, (size_t)(slash - work))) {
		*slash = '\0';
		out->registry = strdup(work);
		path = slash + 1;
	} else {
		char *colon = strchr(work, ':');
		if (slash == NULL && looks_like_host(work, colon ? (size_t)(colon - work) : strlen(work))) {
			fail(e, text, "missing repository after the registry host");
			goto out;
		}
		out->registry = strdup("docker.io");
		path = work;
	}
	if (out->registry == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	if (!host_valid(out->registry)) {
		fail(e, text, "bad registry host (expected host[:port])");
		goto out;
	}
	split_tag(path, &tag);
	if (*path == '\0') {
		fail(e, text, "missing repository");
		goto out;
	}
	if (!repository_valid(path)) {
		fail(e, text, "bad repository name (lower-case letters, digits and . _ __ - separators, "
		    "components joined by /)");
		goto out;
	}
	if (tag != NULL && !oci_tag_valid(tag)) {
		fail(e, text, "bad tag (letters, digits, _ . -; at most 128; not starting with . or -)");
		goto out;
	}
	out->repository = strdup(path);
	out->tag = tag ? strdup(tag) : NULL;
	if (out->repository == NULL || (tag != NULL && out->tag == NULL)) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	rc = normalise_docker_hub(out, e);
out:
	free(work);
	if (rc < 0)
		oci_ref_free(out);
	return rc;
}

char *oci_ref_string(const struct oci_ref *r)
{
	size_t n = strlen(r->registry) + strlen(r->repository) + 4 +
	    (r->tag ? strlen(r->tag) : 0) + (r->digest ? strlen(r->digest) : 0);
	char *s = malloc(n);

	if (s == NULL)
		return NULL;
	snprintf(s, n, "%s/%s%s%s%s%s", r->registry, r->repository, r->tag ? ":" : "",
	    r->tag ? r->tag : "", r->digest ? "@" : "", r->digest ? r->digest : "");
	return s;
}
