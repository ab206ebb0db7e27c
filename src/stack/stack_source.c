/*
 * stack_source.c - from a Stack's source to a verified tree in the
 * artifact store.
 *
 *   fluxSource   the source object from the informer cache; its
 *                status.artifact {url, digest, revision} is usable as soon as
 *                it exists (kustomize-controller's rule: the last good
 *                artifact is used even while the source is failing);
 *   programRef   the same, through the GitRepository <name>-program the
 *                controller creates and keeps in step with programRef;
 *   projectRepo  the operator's Git source: the same GitRepository, its ref
 *                from branch or commit, its secretRef the Secret
 *                stack_git_auth.c writes from gitAuth / gitAuthSecret;
 *   programRef {name}  a Program rendered into the store (stack_program.c);
 *   ociSource    straight from the registry: the reference (tag, digest or
 *                semver) resolved to a manifest and its layer, at most once
 *                per interval per repository and reference however many
 *                Stacks use it.
 *
 * With ociSource.verify, or a Flux OCIRepository that has spec.verify, the
 * resolved revision goes through stack_verify.c before p->art is set: a
 * refused one is never fetched, and status.artifact keeps what was offered
 * before.  The signature checks that passed are kept with the resolution
 * (per digest and keys Secret resourceVersion), and fetch_oci pulls only
 * the layer of the resolution this pass verified.  The resolutions and
 * the checks that passed are cached in stack_oci.c.
 *
 * Fetching goes through the store shared by every Stack: one download per
 * digest (fluxsource/ for Flux artifacts, the OCI layer by its digest).
 * What went wrong decides the verdict: a hostile archive will not get
 * better by itself (Stalled until the source changes); a download or a
 * digest that failed may (retried).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/fs.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/secret.h"
#include "base/str.h"
#include "base/strbuf.h"
#include "fluxsource/fluxsource.h"
#include "base/base64.h"
#include "oci/oci.h"
#include "stack/stack_sources.h"

void stack_store_artifacts_dir(const struct stack_ctl *sc, char *out, size_t n)
{
	snprintf(out, n, "%s/artifacts", sc->o.storage_path);
}

static int set_artifact(struct stack_artifact *a, const char *rev, const char *digest, const char *url)
{
	stack_artifact_free(a);
	a->revision = strdup(rev ? rev : "");
	a->digest = strdup(digest ? digest : "");
	a->url = url ? strdup(url) : NULL;
	return a->revision && a->digest && (url == NULL || a->url) ? 0 : -1;
}

/* The message of a condition of obj, or NULL. */
static const char *condition_message(const cJSON *obj, const char *type, const char **status)
{
	const cJSON *c = kube_condition(obj, type);

	if (c == NULL)
		return NULL;
	if (status)
		*status = kube_obj_str(c, "status");
	return kube_obj_str(c, "message");
}

/* ------------------------------------------------------------ programRef */

/* The GitRepository spec.ref a classic programRef.ref means. */
static void program_git_ref(const char *ref, cJSON *out)
{
	size_t n = ref ? strlen(ref) : 0, hex = 0;

	while (hex < n && strchr("0123456789abcdef", ref[hex]))
		hex++;
	if (ref == NULL || n == 0)
		cJSON_AddStringToObject(out, "branch", "main");
	else if (strncmp(ref, "refs/tags/", 10) == 0)
		cJSON_AddStringToObject(out, "tag", ref + 10);
	else if (strncmp(ref, "refs/heads/", 11) == 0)
		cJSON_AddStringToObject(out, "branch", ref + 11);
	else if (n == 40 && hex == 40)
		cJSON_AddStringToObject(out, "commit", ref);
	else if (strncmp(ref, "refs/", 5) == 0)
		cJSON_AddStringToObject(out, "name", ref);
	else
		cJSON_AddStringToObject(out, "branch", ref);
}

/* GitRepository takes http(s):// and ssh:// URLs only; the classic manifests
 * write scp-like ones (git@github.com:acme/repo.git), which mean
 * ssh://git@github.com/acme/repo.git.  Malloc'd; the caller frees. */
static char *program_git_url(const char *repo)
{
	const char *colon = strchr(repo, ':'), *slash = strchr(repo, '/');
	size_t n = strlen(repo) + sizeof("ssh://");
	char *out = malloc(n);

	if (out == NULL)
		return NULL;
	if (strstr(repo, "://") == NULL && colon != NULL && colon != repo && (slash == NULL || colon < slash))
		snprintf(out, n, "ssh://%.*s/%s", (int)(colon - repo), repo, colon + 1);
	else
		snprintf(out, n, "%s", repo);
	return out;
}

#define FLUX_SHARD_LABEL "sharding.fluxcd.io/key"

#define FLUX_REQUESTED_AT "reconcile.fluxcd.io/requestedAt"

/* source-controller reads a secretRef only when it reconciles: credentials
 * that changed (a password put right) ask it to fetch again now, as `flux
 * reconcile` does, rather than at the next interval.  A merge patch, not
 * part of the apply: the controller does not own the annotation, so a
 * user's `flux reconcile` is never undone.  A failure only delays the
 * fetch to the interval. */
static void request_fetch(struct stack_pass *p, const struct stack_kind *k, const char *version)
{
	cJSON *doc = cJSON_CreateObject(), *res = NULL;
	char *patch;
	struct err e;

	cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(doc, "metadata"), "annotations"),
	    FLUX_REQUESTED_AT, version);
	patch = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	if (patch == NULL)
		err_set(&e, ERR_NOMEM, "out of memory");
	else
		res = kube_patch(p->sc->client, k->served, p->ns, p->spec.src_name, NULL, KUBE_PATCH_MERGE, patch,
		    NULL, 0, &e);
	free(patch);
	if (res == NULL)
		log_warn("cannot ask source-controller to fetch again", "namespace", p->ns, "name", p->spec.src_name,
		    "error", e.msg, NULL);
	cJSON_Delete(res);
}

/* Server-side apply of the GitRepository the Stack owns: created when
 * missing, its url/ref/interval (and credentials) kept as programRef or
 * projectRepo say, and the Stack's Flux shard label copied.  Fields the
 * spec no longer sets (a secretRef) leave with the apply. */
static int ensure_program_source(struct stack_pass *p, const struct stack_kind *k,
    const struct stack_git_creds *creds, struct err *e)
{
	cJSON *doc = cJSON_CreateObject(), *md, *labels, *spec, *ref;
	const cJSON *shard;
	char api[128], interval[32], label[STACK_LABEL_VALUE_MAX];
	char *text, *url = program_git_url(p->spec.prog_repo);
	cJSON *res;

	if (url == NULL) {
		cJSON_Delete(doc);
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	}
	snprintf(api, sizeof(api), "%s/%s", k->served->group, k->served->version);
	snprintf(interval, sizeof(interval), "%lds", p->spec.resync_ms / 1000);
	cJSON_AddStringToObject(doc, "apiVersion", api);
	cJSON_AddStringToObject(doc, "kind", "GitRepository");
	md = cJSON_AddObjectToObject(doc, "metadata");
	cJSON_AddStringToObject(md, "name", p->spec.src_name);
	cJSON_AddStringToObject(md, "namespace", p->ns);
	labels = cJSON_AddObjectToObject(md, "labels");
	stack_label_value(p->name, label);
	cJSON_AddStringToObject(labels, STACK_LABEL_NAME, label);
	/* A sharded source-controller only serves what carries its key. */
	shard = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(p->obj, "metadata"), "labels"), FLUX_SHARD_LABEL);
	if (cJSON_IsString(shard))
		cJSON_AddStringToObject(labels, FLUX_SHARD_LABEL, shard->valuestring);
	cJSON_AddItemToObject(md, "ownerReferences", stack_git_owner_refs(p));
	spec = cJSON_AddObjectToObject(doc, "spec");
	cJSON_AddStringToObject(spec, "url", url);
	free(url);
	cJSON_AddStringToObject(spec, "interval", interval);
	ref = cJSON_AddObjectToObject(spec, "ref");
	program_git_ref(p->spec.prog_ref, ref);
	if (creds->secret[0])
		cJSON_AddStringToObject(cJSON_AddObjectToObject(spec, "secretRef"), "name", creds->secret);
	if (creds->github)
		cJSON_AddStringToObject(spec, "provider", "github");
	text = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	if (text == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	res = kube_patch(p->sc->client, k->served, p->ns, p->spec.src_name, NULL, KUBE_PATCH_APPLY, text,
	    "pulumi-controller", 1, e);
	free(text);
	if (res == NULL)
		return -1;
	cJSON_Delete(res);
	if (creds->changed)
		request_fetch(p, k, creds->version);
	return 0;
}

/* ------------------------------------------------------------ Flux */

static int resolve_flux(struct stack_pass *p)
{
	struct stack_kind *k = stack_ctl_source_kind(p->sc, p->spec.src_kind);
	const cJSON *art;
	const char *status = NULL, *msg;
	const char *field = p->spec.project_repo ? "spec.projectRepo" : "spec.programRef";
	struct stack_git_creds creds;
	cJSON *src;
	struct err e;

	if (k == NULL) {
		stack_verdict(p, STACK_STALLED, "SourceKindNotServed", 0,
		    "%s (source.toolkit.fluxcd.io) is not served by the API server: Flux's "
		    "source-controller and its CRDs are needed%s%s", p->spec.src_kind,
		    p->spec.source == STACK_SRC_PROGRAM ? " for " : "",
		    p->spec.source == STACK_SRC_PROGRAM ? field : "");
		return 1;
	}
	if (p->spec.source == STACK_SRC_PROGRAM && stack_git_auth_prepare(p, &creds))
		return 1;
	if (p->spec.source == STACK_SRC_PROGRAM && ensure_program_source(p, k, &creds, &e) < 0) {
		stack_verdict(p, STACK_WAITING, "SourceNotFound", p->sc->o.requeue_dependency_ms,
		    "cannot create or update GitRepository %s/%s for %s: %s", p->ns,
		    p->spec.src_name, field, e.msg);
		return 1;
	}
	src = kube_informer_get(k->inf, p->ns, p->spec.src_name);
	if (src == NULL) {
		stack_verdict(p, STACK_WAITING, "SourceNotFound", p->sc->o.requeue_dependency_ms,
		    "%s %s/%s not found", p->spec.src_kind, p->ns, p->spec.src_name);
		return 1;
	}
	art = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(src, "status"), "artifact");
	if (!cJSON_IsObject(art) || kube_obj_str(art, "url") == NULL) {
		msg = condition_message(src, "Ready", &status);
		stack_verdict(p, STACK_WAITING, "ArtifactNotReady", p->sc->o.requeue_dependency_ms,
		    "%s %s/%s has no artifact yet%s%s", p->spec.src_kind, p->ns, p->spec.src_name,
		    msg ? ": " : "", msg ? msg : "");
		cJSON_Delete(src);
		return 1;
	}
	if (set_artifact(&p->art, kube_obj_str(art, "revision"), kube_obj_str(art, "digest") ?
	    kube_obj_str(art, "digest") : kube_obj_str(art, "checksum"), kube_obj_str(art, "url")) < 0) {
		cJSON_Delete(src);
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 1000, "out of memory");
		return 1;
	}
	if (strcmp(p->spec.src_kind, "OCIRepository") != 0 || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(src, "spec"), "verify")))
		p->verified_none = 1;
	else if (stack_verify_flux(p, src, p->art.revision)) {
		stack_artifact_free(&p->art);   /* status.artifact keeps what was offered before */
		cJSON_Delete(src);
		return 1;
	}
	cJSON_Delete(src);
	if (p->art.digest[0] == '\0') {
		stack_verdict(p, STACK_WAITING, "ArtifactNotReady", p->sc->o.requeue_dependency_ms,
		    "%s %s/%s has an artifact without a digest; waiting for source-controller to "
		    "rebuild it", p->spec.src_kind, p->ns, p->spec.src_name);
		return 1;
	}
	return 0;
}

/* A hostile or oversized artifact, which retrying will not change. */
static int is_refusal(const struct err *e)
{
	return e->code == ERR_REFUSED || e->code == ERR_LIMIT || e->code == ERR_UNSUPPORTED;
}

/* A download (a store miss) ended: e is NULL on success. */
static void count_download(const char *source, const struct err *e, double t0, long long bytes)
{
	stack_metrics_cache(source, 0);
	stack_metrics_fetched(source, e == NULL ? "success" : is_refusal(e) ? "refused" : "failed",
	    clock_mono_s() - t0, bytes);
	if (e != NULL && is_refusal(e))
		stack_metrics_refused(source, e);
}

/* Turns a store error into the verdict. */
static void fetch_failed(struct stack_pass *p, const char *what, const struct err *e)
{
	if (is_refusal(e)) {
		stack_verdict(p, STACK_STALLED, "ArtifactRefused", 0,
		    "%s refused: %s; the Stack waits for a new revision", what, e->msg);
		p->v.event = 1;
		return;
	}
	/* Retried: a source-controller restarting, a registry hiccup or bytes
	 * served wrong for a while all pass. */
	stack_verdict(p, STACK_WAITING, "ArtifactFailed", p->sc->o.requeue_dependency_ms, "%s: %s; retrying",
	    what, e->msg);
	p->v.event = 1;
}

static int fetch_flux(struct stack_pass *p)
{
	struct flux_fetch_opts fo;
	struct flux_artifact a = { p->art.url, p->art.digest, p->art.revision };
	struct err e;
	int cached = 0;
	long long received = 0;
	double t0 = clock_mono_s();

	flux_fetch_opts_default(&fo);
	fo.http.max_bytes = p->sc->o.max_artifact_bytes;
	fo.cancel = &p->sc->cancel;
	fo.received = &received;
	if (flux_store_get(p->sc->o.storage_path, &a, &fo, p->tree, sizeof(p->tree), &cached, &e) < 0) {
		count_download("flux", &e, t0, received);
		fetch_failed(p, "artifact", &e);
		return 1;
	}
	if (cached)
		stack_metrics_cache("flux", 1);
	else
		count_download("flux", NULL, t0, received);
	log_debug("artifact ready", "namespace", p->ns, "name", p->name, "revision", p->art.revision,
	    "cached", cached ? "true" : "false", NULL);
	return 0;
}

/* ------------------------------------------------------------ OCI */

static void oci_pull_options(const struct stack_pass *p, struct oci_pull_opts *po)
{
	oci_pull_opts_default(po);
	po->media_type = p->spec.oci_media_type;
	po->semver = p->spec.oci_semver;
	po->max_layer_bytes = p->sc->o.max_artifact_bytes;
}

/* insecure: plain HTTP, so the registry credentials of secretRef (if the
 * registry asks for them) cross the network readable: said in the Ready
 * message on every pass, as long as the spec says so. */
static void note_plain_http_credentials(struct stack_pass *p)
{
	size_t used = strlen(p->note);

	if (!p->spec.oci_insecure || p->spec.oci_secret == NULL)
		return;
	snprintf(p->note + used, sizeof(p->note) - used, "%sspec.ociSource.insecure: the registry credentials of "
	    "Secret %s are sent over plain HTTP, readable on the network", used ? "; " : "", p->spec.oci_secret);
}

/* The resolution of the spec's reference: from the cache the Stacks share,
 * or asked of the registry (and kept for the others).  0 with x->res; 1
 * with the verdict set. */
static int resolve_oci_ref(struct stack_pass *p, const char *key, struct oci_pull_parts *x)
{
	struct err e;
	long max_age_ms;

	/* A digest never moves; a tag or range is looked up once per interval,
	 * or at once when someone asks for a reconcile (as `flux reconcile`
	 * makes an OCIRepository look now). */
	if (p->spec.oci_digest)
		max_age_ms = INT64_MAX / 2;
	else
		max_age_ms = stack_pass_requested(p) ? 0 : p->spec.oci_interval_ms;
	if (stack_oci_cache_lookup(p->sc, key, max_age_ms, &x->res)) {
		stack_metrics_resolved("cached");
		return 0;
	}
	if (stack_oci_ref_parse(p, &x->ref, &e) < 0) {
		stack_verdict(p, STACK_STALLED, "SpecInvalid", 0, "spec.ociSource: %s", e.msg);
		return 1;
	}
	oci_pull_options(p, &x->po);
	if ((x->c = stack_oci_client_for(p, &x->ref, &e)) == NULL ||
	    oci_resolve(x->c, &x->ref, &x->po, &x->res, &e) < 0) {
		stack_metrics_resolved("failed");
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", p->sc->o.requeue_dependency_ms,
		    "cannot resolve %s: %s", p->spec.oci_url, e.msg);
		p->v.event = 1;
		return 1;
	}
	stack_metrics_resolved("resolved");
	stack_oci_cache_store(p->sc, key, p->spec.oci_digest ? 0 : p->spec.oci_interval_ms, &x->res);
	return 0;
}

static int resolve_oci(struct stack_pass *p)
{
	struct oci_pull_parts x;
	char key[4096];
	int rc = 1;

	oci_pull_parts_init(&x);
	note_plain_http_credentials(p);
	stack_oci_poll_key(&p->spec, p->ns, key, sizeof(key));
	if (resolve_oci_ref(p, key, &x) != 0)
		goto out;
	if (!p->spec.oci_verify)
		p->verified_none = 1;
	else if (stack_verify_oci(p, key, x.res.revision, x.res.manifest_digest, x.res.index_digest))
		goto out;
	/* The tree is keyed by the layer digest; the manifest digest is the
	 * revision's, as OCIRepository reports it. */
	if (set_artifact(&p->art, x.res.revision, x.res.layer_digest, NULL) < 0 ||
	    (x.res.index_digest && (p->art.index_digest = strdup(x.res.index_digest)) == NULL)) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 1000, "out of memory");
		goto out;
	}
	rc = 0;
out:
	oci_pull_parts_free(&x);
	return rc;
}

static int fetch_oci(struct stack_pass *p)
{
	struct oci_pull_parts x;
	struct err e;
	char key[4096];
	double t0 = clock_mono_s();
	int rc = 1;

	if (stack_oci_tree_path(p->sc->o.storage_path, p->art.digest, p->tree, sizeof(p->tree)) < 0) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 0, "bad layer digest %s", p->art.digest);
		return 1;
	}
	if (fs_is_dir(p->tree)) {
		stack_metrics_cache("oci", 1);
		return 0;
	}
	oci_pull_parts_init(&x);
	note_plain_http_credentials(p);
	stack_oci_poll_key(&p->spec, p->ns, key, sizeof(key));
	/* Only the layer this pass resolved (and verified) is fetched: another
	 * Stack's pass may have seen the tag move since. */
	if (!stack_oci_cache_lookup(p->sc, key, INT64_MAX / 2, &x.res) || !str_eq(x.res.layer_digest, p->art.digest)) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 1000, "the resolution of %s changed or expired; "
		    "resolving again", p->spec.oci_url);
		goto out;
	}
	oci_pull_options(p, &x.po);
	if (stack_oci_ref_parse(p, &x.ref, &e) < 0 || (x.c = stack_oci_client_for(p, &x.ref, &e)) == NULL ||
	    oci_fetch_layer(x.c, x.ref.repository, &x.res, &x.po, p->tree, 1, &e) < 0) {
		count_download("oci", &e, t0, 0);
		fetch_failed(p, p->spec.oci_url, &e);
		goto out;
	}
	/* The layer's digest matched, so exactly its descriptor's size came. */
	count_download("oci", NULL, t0, (long long)x.res.layer_size);
	rc = 0;
out:
	oci_pull_parts_free(&x);
	return rc;
}

/* ------------------------------------------------------------ entry points */

int stack_source_resolve(struct stack_pass *p)
{
	if (p->spec.source == STACK_SRC_PROGRAM_OBJECT)
		return stack_program_resolve(p);
	return p->spec.source == STACK_SRC_OCI ? resolve_oci(p) : resolve_flux(p);
}

int stack_source_fetch(struct stack_pass *p)
{
	if (p->spec.source == STACK_SRC_PROGRAM_OBJECT)
		return stack_program_fetch(p);
	return p->spec.source == STACK_SRC_OCI ? fetch_oci(p) : fetch_flux(p);
}
