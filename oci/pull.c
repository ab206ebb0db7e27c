/*
 * pull.c - pulling an artifact: reference -> (semver) tag -> manifest (via
 * an index when there is one) -> layer -> verified, unpacked directory.
 *
 * The layer is never held in memory nor written to disk as a file: the
 * blob stream feeds the safe extractor through a read callback that hashes
 * and counts every compressed byte on the way.  The extractor stops at the
 * tar end-of-archive marker, so whatever follows is drained and hashed too
 * before the digest and size are compared.  Only then is the staging
 * directory renamed into place, so a failed or tampered pull leaves nothing
 * at the destination.
 */
#include "oci/oci.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/fs.h"
#include "base/http.h"
#include "base/log.h"
#include "base/str.h"
#include "base/mem.h"
#include "oci/internal.h"

#define READ_CHUNK (256 * 1024)

void oci_pull_opts_default(struct oci_pull_opts *o)
{
	memset(o, 0, sizeof(*o));
	untar_limits_default(&o->limits);
	o->max_layer_bytes = OCI_DEFAULT_MAX_LAYER_BYTES;
	o->lock_timeout_ms = OCI_DEFAULT_LOCK_TIMEOUT_MS;
	o->layer_timeout_ms = OCI_DEFAULT_LAYER_TIMEOUT_MS;
}

void oci_pull_result_free(struct oci_pull_result *r)
{
	if (r == NULL)
		return;
	mem_free_all(r->tag, r->revision, r->manifest_digest, r->index_digest,
		     r->platform, r->layer_digest, r->layer_media_type);
	oci_annotations_free(r->annotations, r->nannotations);
	memset(r, 0, sizeof(*r));
}

void oci_pull_parts_init(struct oci_pull_parts *x)
{
	memset(x, 0, sizeof(*x));
	oci_pull_opts_default(&x->po);
}

void oci_pull_parts_free(struct oci_pull_parts *x)
{
	oci_client_free(x->c);
	oci_ref_free(&x->ref);
	oci_pull_result_free(&x->res);
	oci_pull_parts_init(x);
}

/* ---------------- the verifying blob reader ---------------- */

struct blob_reader {
	struct oci_client *client;
	struct http_stream *stream;
	struct digest_ctx *hash;
	const char *digest;        /* expected, for messages */
	char what[120];            /* "layer sha256:0123456789ab" for progress */
	int64_t expected, got;
	int64_t archive_end;       /* bytes read when the extractor finished, or -1 */
	int failed_stream;         /* the transport broke: do not try to drain */
	char *buf;
};

static ssize_t blob_read(void *ud, const void **out, struct err *e)
{
	struct blob_reader *br = ud;
	ssize_t n = http_stream_read(br->stream, br->buf, READ_CHUNK, e);

	if (n < 0) {
		br->failed_stream = 1;
		err_prefix(e, "blob %s", br->digest);
		return -1;
	}
	if (n == 0)
		return 0;
	if (br->got + n > br->expected) {
		br->failed_stream = 1;
		return err_set(e, ERR_DIGEST, "blob %s: more bytes than the %lld the manifest declares",
		    br->digest, (long long)br->expected);
	}
	digest_ctx_update(br->hash, br->buf, (size_t)n);
	br->got += n;
	if (br->archive_end >= 0 && br->got - br->archive_end > OCI_MAX_TRAILING_BYTES) {
		br->failed_stream = 1;
		return err_set(e, ERR_LIMIT, "blob %s: more than %lld bytes after the end of the archive",
		    br->digest, (long long)OCI_MAX_TRAILING_BYTES);
	}
	oci_client_progress(br->client, br->what, br->got, br->expected);
	*out = br->buf;
	return n;
}

/* Reads what the extractor left unread (padding after the end marker),
 * OCI_MAX_TRAILING_BYTES at most. */
static int drain(struct blob_reader *br, struct err *e)
{
	const void *p;
	ssize_t n;

	br->archive_end = br->got;
	while ((n = blob_read(br, &p, e)) > 0)
		;
	return n < 0 ? -1 : 0;
}

static int check_blob(struct blob_reader *br, struct err *e)
{
	struct digest want, got;
	char gotbuf[DIGEST_STR_MAX];

	if (br->got != br->expected)
		return err_set(e, ERR_DIGEST, "blob %s: size mismatch: the manifest declares %lld bytes, "
		    "the registry sent %lld", br->digest, (long long)br->expected, (long long)br->got);
	if (digest_parse(br->digest, &want, e) < 0)
		return -1;
	digest_ctx_final(br->hash, &got);
	if (!digest_equal(&want, &got)) {
		digest_format(&got, gotbuf, sizeof(gotbuf));
		return err_set(e, ERR_DIGEST, "blob %s: digest mismatch: the bytes received are %s "
		    "(tampered or corrupt content refused)", br->digest, gotbuf);
	}
	return 0;
}

static enum digest_algo algo_of(const char *digest)
{
	if (str_has_prefix(digest, "sha512:"))
		return DIGEST_SHA512;
	if (str_has_prefix(digest, "sha384:"))
		return DIGEST_SHA384;
	return DIGEST_SHA256;
}

/* Streams the layer into `staging` and verifies it. */
static int fetch_and_unpack(struct oci_client *c, const char *repo, const struct oci_descriptor *layer,
    const struct untar_limits *limits, long timeout_ms, const char *staging, struct err *e)
{
	struct blob_reader br = { .client = c, .digest = layer->digest, .expected = layer->size,
	    .archive_end = -1 };
	char *url = NULL, *scope = oci_scope(repo, "pull");
	struct untar_limits lim = *limits;
	struct untar_stats st;
	int rc = -1;

	if (lim.cancel == NULL)
		lim.cancel = oci_client_http(c)->cancel;
	snprintf(br.what, sizeof(br.what), "layer %.19s", layer->digest);
	br.hash = digest_ctx_new(algo_of(layer->digest));
	br.buf = malloc(READ_CHUNK);
	if (scope == NULL || br.hash == NULL || br.buf == NULL ||
	    oci_asprintf(&url, "%s/v2/%s/blobs/%s", oci_client_base(c), repo, layer->digest) < 0) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	br.stream = oci_open_stream(c, scope, url, NULL, timeout_ms, e);
	if (br.stream == NULL) {
		err_prefix(e, "blob %s", layer->digest);
		goto out;
	}
	int64_t cl = http_stream_content_length(br.stream);
	if (cl >= 0 && cl != layer->size) {
		err_set(e, ERR_DIGEST, "blob %s: size mismatch: the manifest declares %lld bytes, the "
		    "registry announces %lld", layer->digest, (long long)layer->size, (long long)cl);
		goto out;
	}
	if (untar_into_dir(blob_read, &br, staging, &lim, &st, e) < 0) {
		/* Corrupt bytes usually surface as an archive error first: when the
		 * stream is intact, finish it and prefer the digest verdict. */
		struct err de;
		if (!br.failed_stream && drain(&br, &de) == 0 && check_blob(&br, &de) < 0)
			*e = de;
		else
			err_prefix(e, "layer %s", layer->digest);
		goto out;
	}
	if (drain(&br, e) < 0 || check_blob(&br, e) < 0)
		goto out;
	rc = 0;
out:
	http_stream_free(br.stream);
	digest_ctx_free(br.hash);
	free(br.buf);
	free(url);
	free(scope);
	return rc;
}

/* ---------------- resolution ---------------- */

/* dest may be missing or an empty directory (rename(2) replaces that). */
static int dest_usable(const char *dest, struct err *e)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	int empty = 1;

	if (lstat(dest, &st) < 0)
		return errno == ENOENT ? 0 : err_set(e, ERR_IO, "%s: %s", dest, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return err_set(e, ERR_INVALID, "destination %s exists and is not a directory", dest);
	d = opendir(dest);
	if (d == NULL)
		return err_set(e, ERR_IO, "%s: %s", dest, strerror(errno));
	while (empty && (de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			empty = 0;
	closedir(d);
	if (!empty)
		return err_set(e, ERR_INVALID, "destination %s exists and is not empty", dest);
	return 0;
}

static int choose_tag(struct oci_client *c, const struct oci_ref *ref, const char *range,
    char **tag, struct err *e)
{
	struct oci_semver_range *r = oci_semver_range_parse(range, e);
	char **tags = NULL;
	size_t n = 0;
	const char *best;

	if (r == NULL)
		return -1;
	if (oci_list_tags(c, ref->repository, &tags, &n, e) < 0) {
		oci_semver_range_free(r);
		return -1;
	}
	best = oci_semver_select(r, tags, n);
	if (best == NULL)
		err_set(e, ERR_NOTFOUND, "no tag of %s/%s matches the semver range \"%.200s\" (%zu tags)",
		    ref->registry, ref->repository, range, n);
	else
		*tag = strdup(best);
	oci_semver_range_free(r);
	oci_tags_free(tags, n);
	if (best == NULL)
		return -1;
	return *tag ? 0 : err_set(e, ERR_NOMEM, "out of memory");
}

static int copy_annotations(const struct oci_manifest *m, struct oci_pull_result *res, struct err *e)
{
	if (m->nannotations == 0)
		return 0;
	res->annotations = calloc(m->nannotations, sizeof(*res->annotations));
	if (res->annotations == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < m->nannotations; i++) {
		res->annotations[i].key = strdup(m->annotations[i].key);
		res->annotations[i].value = strdup(m->annotations[i].value);
		res->nannotations++;
		if (res->annotations[i].key == NULL || res->annotations[i].value == NULL)
			return err_set(e, ERR_NOMEM, "out of memory");
	}
	return 0;
}

/* Follows an index to one image manifest; *m is replaced. */
static int through_index(struct oci_client *c, const char *repo, struct oci_manifest *m,
    char **digest, struct oci_pull_result *res, struct err *e)
{
	const struct oci_descriptor *d = oci_select_platform(m, e);
	struct oci_manifest inner;
	char *inner_digest = NULL, plat[200];

	if (d == NULL) {
		err_prefix(e, "index %s", *digest);
		return -1;
	}
	snprintf(plat, sizeof(plat), "%.60s/%.60s%s%.60s", d->os ? d->os : "unknown",
	    d->arch ? d->arch : "unknown", d->variant ? "/" : "", d->variant ? d->variant : "");
	res->platform = strdup(plat);
	if (oci_get_manifest(c, repo, d->digest, &inner, &inner_digest, NULL, NULL, e) < 0)
		return -1;
	if (inner.kind != OCI_KIND_MANIFEST) {
		oci_manifest_free(&inner);
		free(inner_digest);
		return err_set(e, ERR_UNSUPPORTED, "index %s: entry %s is itself an index", *digest, d->digest);
	}
	log_info("picked a manifest from the index", "index", *digest, "platform", plat,
	    "manifest", inner_digest, NULL);
	res->index_digest = *digest;
	*digest = inner_digest;
	oci_manifest_free(m);
	*m = inner;
	return 0;
}

int oci_resolve(struct oci_client *c, const struct oci_ref *ref, const struct oci_pull_opts *o,
    struct oci_pull_result *res, struct err *e)
{
	struct oci_manifest m = { 0 };
	char *digest = NULL;
	const char *reference;
	const struct oci_descriptor *layer;
	int rc = -1;

	memset(res, 0, sizeof(*res));
	if (ref->digest == NULL) {
		if (o->semver != NULL) {
			if (choose_tag(c, ref, o->semver, &res->tag, e) < 0)
				goto out;
		} else {
			res->tag = strdup(ref->tag ? ref->tag : "latest");
		}
	} else if (ref->tag != NULL) {
		res->tag = strdup(ref->tag);
	}
	reference = ref->digest ? ref->digest : res->tag;
	if (reference == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	if (oci_get_manifest(c, ref->repository, reference, &m, &digest, NULL, NULL, e) < 0)
		goto out;
	if (m.kind == OCI_KIND_INDEX && through_index(c, ref->repository, &m, &digest, res, e) < 0)
		goto out;
	res->manifest_digest = digest;
	digest = NULL;
	const char *top = res->index_digest ? res->index_digest : res->manifest_digest;
	if (res->tag != NULL)
		oci_asprintf(&res->revision, "%s@%s", res->tag, top);
	else
		res->revision = strdup(top);
	layer = oci_select_layer(&m, o->media_type, e);
	if (layer == NULL) {
		err_prefix(e, "manifest %s", res->manifest_digest);
		goto out;
	}
	res->layer_digest = strdup(layer->digest);
	res->layer_media_type = strdup(layer->media_type);
	res->layer_size = layer->size;
	if (res->revision == NULL || res->layer_digest == NULL || res->layer_media_type == NULL ||
	    copy_annotations(&m, res, e) < 0) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	rc = 0;
out:
	oci_manifest_free(&m);
	free(digest);
	if (rc < 0)
		oci_pull_result_free(res);
	return rc;
}

/* A non-empty directory at dest: what a concurrent pull of the same
 * content-addressed entry leaves. */
static int complete_entry_exists(const char *dest)
{
	struct err ignored;

	return fs_is_dir(dest) && dest_usable(dest, &ignored) < 0;
}

int oci_fetch_layer(struct oci_client *c, const char *repo, const struct oci_pull_result *res,
    const struct oci_pull_opts *o, const char *dest, int content_addressed, struct err *e)
{
	struct oci_descriptor layer = { .media_type = res->layer_media_type, .digest = res->layer_digest,
	    .size = res->layer_size };
	char staging[4096];
	struct err ce;
	int rc = -1;

	/* The descriptor's size is exactly what will be read (more is refused). */
	if (o->max_layer_bytes >= 0 && layer.size > o->max_layer_bytes)
		return err_set(e, ERR_LIMIT, "layer %s: %lld bytes, over the download limit of %lld",
		    layer.digest, (long long)layer.size, (long long)o->max_layer_bytes);
	if (fs_staging_dir(dest, staging, sizeof(staging), e) < 0)
		return -1;
	if (fetch_and_unpack(c, repo, &layer, &o->limits, o->layer_timeout_ms, staging, e) < 0)
		goto out;
	if (rename(staging, dest) < 0) {
		if (content_addressed && (errno == ENOTEMPTY || errno == EEXIST) && complete_entry_exists(dest)) {
			/* Someone else stored the same digest first: theirs is as good. */
			rc = 0;
			goto out;
		}
		err_set(e, ERR_IO, "rename %s to %s: %s", staging, dest, strerror(errno));
		goto out;
	}
	return 0;
out:
	if (fs_rm_rf(staging, &ce) < 0)
		log_warn("could not remove the staging directory", "path", staging, "error", ce.msg, NULL);
	return rc;
}

int oci_pull(struct oci_client *c, const struct oci_ref *ref, const struct oci_pull_opts *o,
    const char *dest, struct oci_pull_result *res, struct err *e)
{
	memset(res, 0, sizeof(*res));
	if (dest_usable(dest, e) < 0)
		return -1;
	if (oci_resolve(c, ref, o, res, e) < 0)
		return -1;
	if (oci_fetch_layer(c, ref->repository, res, o, dest, 0, e) < 0) {
		oci_pull_result_free(res);
		return -1;
	}
	return 0;
}
