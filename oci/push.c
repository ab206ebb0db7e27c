/*
 * push.c - publishing a directory as a Flux OCI artifact: pack it (pack.c),
 * upload the config and the layer unless the registry already has them
 * (HEAD), then put the manifest under the tag and check the digest the
 * registry reports against the bytes we sent.
 *
 * The artifact matches `flux push artifact`: an OCI image manifest with
 * config application/vnd.cncf.flux.config.v1+json, one layer
 * application/vnd.cncf.flux.content.v1.tar+gzip and the annotations
 * org.opencontainers.image.{created,source,revision} plus the caller's.
 *
 * Uploads are monolithic (POST, then PUT ?digest= with the body).  The
 * packed layer is streamed from its temporary file, so memory stays flat
 * whatever the artifact size.
 */
#include "oci/oci.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/mem.h"
#include "oci/internal.h"

#define EPOCH_CREATED "1970-01-01T00:00:00Z"
#define MAX_ANNOTATIONS 256

void oci_push_result_free(struct oci_push_result *r)
{
	if (r == NULL)
		return;
	mem_free_all(r->manifest_digest, r->layer_digest);
	memset(r, 0, sizeof(*r));
}

/* Upload locations may be absolute, root-relative or relative. */
static char *resolve_location(struct oci_client *c, const char *loc)
{
	char *out = NULL;

	if (strncasecmp(loc, "http://", 7) == 0 || strncasecmp(loc, "https://", 8) == 0)
		return strdup(loc);
	oci_asprintf(&out, "%s%s%s", oci_client_base(c), loc[0] == '/' ? "" : "/", loc);
	return out;
}

/* 1 when the registry has the blob, 0 when not. */
static int blob_exists(struct oci_client *c, const char *scope, const char *repo, const char *digest,
    struct err *e)
{
	struct http_response r;
	char *url = NULL, what[300];
	int rc;

	if (oci_asprintf(&url, "%s/v2/%s/blobs/%s", oci_client_base(c), repo, digest) < 0)
		return err_set(e, ERR_NOMEM, "out of memory");
	struct http_request req = { .method = "HEAD", .url = url };
	rc = oci_request(c, scope, NULL, &req, &r, e);
	free(url);
	if (rc < 0)
		return -1;
	snprintf(what, sizeof(what), "HEAD blob %.150s", digest);
	if (r.status == 200)
		rc = 1;
	else if (r.status == 404)
		rc = 0;
	else
		rc = oci_status_error(e, what, &r);
	http_response_free(&r);
	return rc;
}

/* What an upload sends: bytes in memory (data) or a file (fd). */
struct blob_src {
	const void *data;
	int fd;
	size_t len;
	size_t off;
};

static ssize_t blob_read(void *ud, void *buf, size_t len)
{
	struct blob_src *b = ud;
	size_t left = b->len - b->off;
	ssize_t n;

	if (len > left)
		len = left;
	if (len == 0)
		return 0;
	if (b->data != NULL) {
		memcpy(buf, (const char *)b->data + b->off, len);
		n = (ssize_t)len;
	} else {
		do
			n = pread(b->fd, buf, len, (off_t)b->off);
		while (n < 0 && errno == EINTR);
		if (n <= 0)
			return -1;  /* the file shrank or failed: abort the upload */
	}
	b->off += (size_t)n;
	return n;
}

static int blob_rewind(void *ud)
{
	((struct blob_src *)ud)->off = 0;
	return 0;
}

static int upload_blob(struct oci_client *c, const char *scope, const char *repo, const char *digest,
    struct blob_src *src, struct err *e)
{
	struct http_response r = { 0 };
	char *url = NULL, *loc = NULL, *put = NULL, what[300];
	static const char *const put_hdrs[] = { "Content-Type: application/octet-stream", NULL };
	int rc = -1;

	snprintf(what, sizeof(what), "upload of blob %.150s to %.100s", digest, repo);
	if (oci_asprintf(&url, "%s/v2/%s/blobs/uploads/", oci_client_base(c), repo) < 0)
		goto nomem;
	struct http_request post = { .method = "POST", .url = url };
	if (oci_request(c, scope, NULL, &post, &r, e) < 0) {
		err_prefix(e, "%s", what);
		goto out;
	}
	if (r.status != 202) {
		oci_status_error(e, what, &r);
		goto out;
	}
	char *hdr = http_response_header(&r, "Location");
	if (hdr == NULL) {
		err_set(e, ERR_HTTP, "%s: the registry sent no upload Location", what);
		goto out;
	}
	loc = resolve_location(c, hdr);
	free(hdr);
	if (loc == NULL || oci_asprintf(&put, "%s%cdigest=%s", loc, strchr(loc, '?') ? '&' : '?',
	    digest) < 0)
		goto nomem;
	http_response_free(&r);
	struct http_request preq = { .method = "PUT", .url = put, .headers = put_hdrs,
	    .body_len = src->len, .body_read = blob_read, .body_rewind = blob_rewind, .body_ud = src };
	struct http_opts o = *oci_client_http(c);
	o.timeout_ms = 0;   /* large bodies: rely on the stall timeout */
	if (oci_request(c, scope, &o, &preq, &r, e) < 0) {
		err_prefix(e, "%s", what);
		goto out;
	}
	if (r.status != 201) {
		oci_status_error(e, what, &r);
		goto out;
	}
	rc = 0;
	goto out;
nomem:
	err_set(e, ERR_NOMEM, "out of memory");
out:
	http_response_free(&r);
	free(url);
	free(loc);
	free(put);
	return rc;
}

/* Uploads unless present; *uploaded tells which. */
static int ensure_blob(struct oci_client *c, const char *scope, const char *repo, const char *digest,
    struct blob_src *src, const char *what, int *uploaded, struct err *e)
{
	int64_t len = (int64_t)src->len;
	int have = blob_exists(c, scope, repo, digest, e);

	*uploaded = 0;
	if (have < 0)
		return -1;
	if (have) {
		log_debug("blob already in the registry", "digest", digest, NULL);
		return 0;
	}
	oci_client_progress(c, what, 0, len);
	if (upload_blob(c, scope, repo, digest, src, e) < 0)
		return -1;
	oci_client_progress(c, what, len, len);
	*uploaded = 1;
	return 0;
}

int oci_ensure_blob_mem(struct oci_client *c, const char *scope, const char *repo,
    const char *digest, const void *data, size_t len, const char *what, struct err *e)
{
	struct blob_src src = { .data = data, .fd = -1, .len = len };
	int uploaded;

	return ensure_blob(c, scope, repo, digest, &src, what, &uploaded, e);
}

int oci_put_manifest(struct oci_client *c, const char *scope, const char *repo, const char *tag,
    const char *media_type, const char *body, char **digest_out, int *subject_ack, struct err *e)
{
	char ctype[200];
	const char *const hdrs[] = { ctype, NULL };
	struct http_response r;
	struct digest mine, theirs;
	char mine_s[DIGEST_STR_MAX], *url = NULL, *hdr, what[600];
	int rc = -1;

	snprintf(ctype, sizeof(ctype), "Content-Type: %s", media_type);
	snprintf(what, sizeof(what), "manifest %s/%s%s%s", oci_client_registry(c), repo,
	    strchr(tag, ':') ? "@" : ":", tag);
	digest_bytes(DIGEST_SHA256, body, strlen(body), &mine);
	digest_format(&mine, mine_s, sizeof(mine_s));
	if (oci_asprintf(&url, "%s/v2/%s/manifests/%s", oci_client_base(c), repo, tag) < 0)
		return err_set(e, ERR_NOMEM, "out of memory");
	struct http_request req = { .method = "PUT", .url = url, .headers = hdrs, .body = body,
	    .body_len = strlen(body) };
	if (oci_request(c, scope, NULL, &req, &r, e) < 0) {
		free(url);
		err_prefix(e, "%s", what);
		return -1;
	}
	free(url);
	if (r.status != 201 && r.status != 200) {
		oci_status_error(e, what, &r);
		http_response_free(&r);
		return -1;
	}
	hdr = http_response_header(&r, "Docker-Content-Digest");
	if (hdr != NULL) {
		struct err de;
		if (digest_parse(hdr, &theirs, &de) < 0 || !digest_equal(&mine, &theirs)) {
			err_set(e, ERR_DIGEST, "%s: the registry reports digest %.140s for the manifest we "
			    "sent, whose digest is %s", what, hdr, mine_s);
			goto out;
		}
	}
	if (subject_ack != NULL) {
		char *subject = http_response_header(&r, "OCI-Subject");
		*subject_ack = subject != NULL;
		free(subject);
	}
	*digest_out = strdup(mine_s);
	rc = *digest_out ? 0 : err_set(e, ERR_NOMEM, "out of memory");
out:
	free(hdr);
	http_response_free(&r);
	return rc;
}

static int add_annotation(struct oci_annotation *ann, size_t *n, const char *k, size_t klen,
    const char *v)
{
	/* A later value for the same key wins (--annotation overrides defaults). */
	for (size_t i = 0; i < *n; i++) {
		if (strlen(ann[i].key) == klen && strncmp(ann[i].key, k, klen) == 0) {
			free(ann[i].value);
			ann[i].value = strdup(v);
			return ann[i].value ? 0 : -1;
		}
	}
	if (*n >= MAX_ANNOTATIONS)
		return -1;
	ann[*n].key = strndup(k, klen);
	ann[*n].value = strdup(v);
	(*n)++;
	return ann[*n - 1].key && ann[*n - 1].value ? 0 : -1;
}

static int build_annotations(const struct oci_push_opts *o, const char *created,
    struct oci_annotation *ann, size_t *n, struct err *e)
{
	*n = 0;
	if (add_annotation(ann, n, "org.opencontainers.image.created", 32, created) < 0 ||
	    (o->source && add_annotation(ann, n, "org.opencontainers.image.source", 31, o->source) < 0) ||
	    (o->revision && add_annotation(ann, n, "org.opencontainers.image.revision", 33, o->revision) < 0))
		return err_set(e, ERR_NOMEM, "out of memory");
	for (const char *const *a = o->annotations; a != NULL && *a != NULL; a++) {
		const char *eq = strchr(*a, '=');
		if (eq == NULL || eq == *a)
			return err_set(e, ERR_INVALID, "annotation \"%.200s\" is not key=value", *a);
		if (add_annotation(ann, n, *a, (size_t)(eq - *a), eq + 1) < 0)
			return err_set(e, ERR_LIMIT, "too many annotations (at most %d)", MAX_ANNOTATIONS);
	}
	return 0;
}

/* The config blob: a minimal go-containerregistry style config. */
static char *config_json(const char *created)
{
	char *s = NULL;

	oci_asprintf(&s, "{\"architecture\":\"\",\"created\":\"%s\",\"os\":\"\","
	    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]},\"config\":{}}", created);
	return s;
}

static int open_blob_file(const char *path, struct blob_src *b, struct err *e)
{
	struct stat st;

	b->data = NULL;
	b->off = 0;
	b->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (b->fd < 0 || fstat(b->fd, &st) < 0) {
		int en = errno;
		if (b->fd >= 0)
			close(b->fd);
		b->fd = -1;
		return err_set(e, ERR_IO, "%s: %s", path, strerror(en));
	}
	b->len = (size_t)st.st_size;
	return 0;
}

int oci_push(struct oci_client *c, const struct oci_ref *ref, const struct oci_push_opts *o,
    struct oci_push_result *res, struct err *e)
{
	const char *tmpbase = getenv("TMPDIR");
	char tmpdir[4096], layer_path[4200], digest[DIGEST_STR_MAX], cfg_digest[DIGEST_STR_MAX];
	char created[40], *cfg = NULL, *manifest = NULL, *scope = NULL;
	struct oci_annotation ann[MAX_ANNOTATIONS];
	size_t nann = 0;
	struct blob_src layer = { .fd = -1 }, config = { .fd = -1 };
	struct digest cd;
	struct err ce;
	int64_t size = 0;
	int rc = -1, have_tmp = 0;
	const char *tag = ref->tag ? ref->tag : "latest";

	memset(res, 0, sizeof(*res));
	if (ref->digest != NULL)
		return err_set(e, ERR_INVALID, "push: the reference must name a tag, not a digest");
	snprintf(tmpdir, sizeof(tmpdir), "%s/pc-push-XXXXXX", tmpbase && *tmpbase ? tmpbase : "/tmp");
	if (mkdtemp(tmpdir) == NULL)
		return err_set(e, ERR_IO, "mkdtemp %s: %s", tmpdir, strerror(errno));
	have_tmp = 1;
	snprintf(layer_path, sizeof(layer_path), "%s/layer.tar.gz", tmpdir);
	struct oci_pack_opts po = { .ignore = o->ignore, .reproducible = o->reproducible };
	if (oci_pack_dir(o->path, &po, layer_path, digest, sizeof(digest), &size, e) < 0)
		goto out;
	if (o->reproducible)
		snprintf(created, sizeof(created), "%s", EPOCH_CREATED);
	else
		clock_format_rfc3339(created, sizeof(created), time(NULL));
	if (build_annotations(o, created, ann, &nann, e) < 0)
		goto out;
	cfg = config_json(created);
	scope = oci_scope(ref->repository, "pull,push");
	if (cfg == NULL || scope == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	digest_bytes(DIGEST_SHA256, cfg, strlen(cfg), &cd);
	digest_format(&cd, cfg_digest, sizeof(cfg_digest));
	manifest = oci_flux_manifest_json(cfg_digest, (int64_t)strlen(cfg), digest, size, ann, nann);
	if (manifest == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	if (open_blob_file(layer_path, &layer, e) < 0)
		goto out;
	config.data = cfg;
	config.len = strlen(cfg);
	if (ensure_blob(c, scope, ref->repository, digest, &layer, "layer", &res->layer_uploaded, e) < 0 ||
	    ensure_blob(c, scope, ref->repository, cfg_digest, &config, "config", &res->config_uploaded, e) < 0)
		goto out;
	if (oci_put_manifest(c, scope, ref->repository, tag, OCI_MT_MANIFEST, manifest,
	    &res->manifest_digest, NULL, e) < 0)
		goto out;
	res->layer_digest = strdup(digest);
	res->layer_size = size;
	rc = res->layer_digest ? 0 : err_set(e, ERR_NOMEM, "out of memory");
out:
	if (layer.fd >= 0)
		close(layer.fd);
	if (have_tmp && fs_rm_rf(tmpdir, &ce) < 0)
		log_warn("could not remove a temporary directory", "path", tmpdir, "error", ce.msg, NULL);
	for (size_t i = 0; i < nann; i++) {
		free(ann[i].key);
		free(ann[i].value);
	}
	free(cfg);
	free(manifest);
	free(scope);
	if (rc < 0)
		oci_push_result_free(res);
	return rc;
}
