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
 * the layer of the resolution this pass verified.  The resolutions are a
 * hash map under their own lock (not the controller's); when they outgrow
 * the cached Stacks (OCI_CACHE_SLACK + 2 per Stack) the ones no Stack has
 * asked for lately go, then the least recently used: Stacks that come and
 * go leave nothing behind for long.
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
#include "base/strbuf.h"
#include "fluxsource/fluxsource.h"
#include "base/base64.h"
#include "oci/oci.h"
#include "stack/stack_internal.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

void stack_artifact_free(struct stack_artifact *a)
{
	free(a->revision);
	free(a->digest);
	free(a->url);
	free(a->index_digest);
	memset(a, 0, sizeof(*a));
}

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
	const cJSON *c;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(obj, "status"), "conditions")) {
		const char *t = kube_obj_str(c, "type");
		if (t && strcmp(t, type) == 0) {
			if (status)
				*status = kube_obj_str(c, "status");
			return kube_obj_str(c, "message");
		}
	}
	return NULL;
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

/* Server-side apply of the GitRepository the Stack owns: created when
 * missing, its url/ref/interval kept as programRef says, and the Stack's
 * Flux shard label copied. */
static int ensure_program_source(struct stack_pass *p, const struct stack_kind *k, struct err *e)
{
	cJSON *doc = cJSON_CreateObject(), *md, *labels, *spec, *ref, *owners, *owner;
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
	owners = cJSON_AddArrayToObject(md, "ownerReferences");
	owner = cJSON_CreateObject();
	cJSON_AddStringToObject(owner, "apiVersion", kube_obj_str(p->obj, "apiVersion") ?
	    kube_obj_str(p->obj, "apiVersion") : "pulumi.com/v1");
	cJSON_AddStringToObject(owner, "kind", "Stack");
	cJSON_AddStringToObject(owner, "name", p->name);
	cJSON_AddStringToObject(owner, "uid", kube_obj_str(p->obj, "metadata.uid") ?
	    kube_obj_str(p->obj, "metadata.uid") : "");
	cJSON_AddBoolToObject(owner, "controller", 1);
	cJSON_AddBoolToObject(owner, "blockOwnerDeletion", 1);
	cJSON_AddItemToArray(owners, owner);
	spec = cJSON_AddObjectToObject(doc, "spec");
	cJSON_AddStringToObject(spec, "url", url);
	free(url);
	cJSON_AddStringToObject(spec, "interval", interval);
	ref = cJSON_AddObjectToObject(spec, "ref");
	program_git_ref(p->spec.prog_ref, ref);
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
	return 0;
}

/* ------------------------------------------------------------ Flux */

static int resolve_flux(struct stack_pass *p)
{
	struct stack_kind *k = stack_ctl_source_kind(p->sc, p->spec.src_kind);
	const cJSON *art;
	const char *status = NULL, *msg;
	cJSON *src;
	struct err e;

	if (k == NULL) {
		stack_verdict(p, STACK_STALLED, "SourceKindNotServed", 0,
		    "%s (source.toolkit.fluxcd.io) is not served by the API server: Flux's "
		    "source-controller and its CRDs are needed%s", p->spec.src_kind,
		    p->spec.source == STACK_SRC_PROGRAM ? " for spec.programRef" : "");
		return 1;
	}
	if (p->spec.source == STACK_SRC_PROGRAM && ensure_program_source(p, k, &e) < 0) {
		stack_verdict(p, STACK_WAITING, "SourceNotFound", p->sc->o.requeue_dependency_ms,
		    "cannot create or update GitRepository %s/%s for spec.programRef: %s", p->ns,
		    p->spec.src_name, e.msg);
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

/* A signature check that passed for a poll's manifest digest, with the
 * keys of one Secret at one resourceVersion: a changed Secret or a new
 * digest is verified again, an unchanged pair is not. */
struct stack_oci_verified {
	char *keys;                   /* "<secret>@<resourceVersion>" */
	char *key_name;               /* the Secret key that matched */
	char *scheme;                 /* oci_sig_scheme_name() */
	struct stack_oci_verified *next;
};

/* One resolution of (url, ref, media type), shared by every Stack that
 * names it; the value of sc->oci_polls under its poll key. */
struct stack_oci_poll {
	int64_t at_ms;                /* when it was resolved */
	int64_t used_ms;              /* the last lookup or store */
	uint64_t used_seq;            /* its order (touch_seq): least recent first */
	long interval_ms;             /* how often its Stacks look (0: never) */
	struct oci_pull_result res;
	struct stack_oci_verified *verified;   /* of res.manifest_digest */
};

/* The cache holds this many resolutions more than twice the cached Stacks
 * before it is pruned (Stacks come and go; their resolutions must not
 * stay). */
#define OCI_CACHE_SLACK 64
/* An entry idle this long (and past twice its Stacks' interval) is no
 * longer used by any Stack that still exists, as far as can be told. */
#define OCI_CACHE_IDLE_MS (10L * 60 * 1000)

/* Orders the lookups and stores of every cache (ms ties are common). */
static atomic_ullong touch_seq;

static void touch(struct stack_oci_poll *q, int64_t now)
{
	q->used_ms = now;
	q->used_seq = atomic_fetch_add(&touch_seq, 1) + 1;
}

static void verified_free(struct stack_oci_verified *v)
{
	while (v) {
		struct stack_oci_verified *n = v->next;
		free(v->keys);
		free(v->key_name);
		free(v->scheme);
		free(v);
		v = n;
	}
}

static void oci_poll_free(void *v)
{
	struct stack_oci_poll *q = v;

	if (q == NULL)
		return;
	oci_pull_result_free(&q->res);
	verified_free(q->verified);
	free(q);
}

void stack_source_cleanup(struct stack_ctl *sc)
{
	strmap_free(&sc->oci_polls, oci_poll_free);
}

/* Reads a key of a Secret in the Stack's namespace (malloc'd, caller frees
 * and wipes).  NULL with e set when missing. */
static char *secret_value(struct stack_pass *p, const char *name, const char *key, size_t *len,
    struct err *e)
{
	cJSON *s = kube_get(p->sc->client, &secret_res, p->ns, name, NULL, e);
	const cJSON *v;
	unsigned char *out = NULL;
	struct err ig;

	if (s == NULL)
		return NULL;
	v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "data"), key);
	if (!cJSON_IsString(v) || base64_decode(v->valuestring, strlen(v->valuestring), &out, len, &ig) < 0) {
		err_set(e, ERR_NOTFOUND, "Secret %s/%s has no key \"%s\"", p->ns, name, key);
		out = NULL;
	}
	cJSON_Delete(s);
	return (char *)out;
}

static void wipe_free(char *s, size_t n)
{
	if (s)
		secret_wipe(s, n);
	free(s);
}

/* A client for the Stack's registry with its credentials and CA. */
static struct oci_client *oci_client_for(struct stack_pass *p, const struct oci_ref *ref,
    struct err *e)
{
	struct oci_client_opts co;
	struct oci_creds creds;
	struct oci_client *c;
	char ca_path[PATH_MAX] = "";

	memset(&co, 0, sizeof(co));
	memset(&creds, 0, sizeof(creds));
	co.plain_http = p->spec.oci_insecure;   /* Flux's `insecure`: plain HTTP */
	co.retries = -1;
	co.cancel = &p->sc->cancel;
	if (p->spec.oci_secret) {
		size_t len = 0;
		char *cfg = secret_value(p, p->spec.oci_secret, ".dockerconfigjson", &len, e), *helper = NULL;
		if (cfg == NULL)
			return NULL;
		if (oci_docker_config_parse(cfg, len, ref->registry, &creds, &helper, e) < 0) {
			wipe_free(cfg, len);
			return NULL;
		}
		wipe_free(cfg, len);
		if (helper) {
			free(helper);
			oci_creds_free(&creds);
			return err_set(e, ERR_UNSUPPORTED, "spec.ociSource.secretRef: credential helpers are "
			    "not supported in a cluster; put the credentials in the Secret"), NULL;
		}
		co.creds = creds;
		if (co.plain_http && !oci_creds_empty(&creds))
			log_warn("registry credentials sent over plain HTTP (spec.ociSource.insecure)", "namespace", p->ns,
			    "name", p->name, "registry", ref->registry, "secret", p->spec.oci_secret, NULL);
	}
	if (p->spec.oci_cert_secret) {
		size_t len = 0;
		char *pem = secret_value(p, p->spec.oci_cert_secret, "ca.crt", &len, e);
		FILE *f;
		if (pem == NULL) {
			oci_creds_free(&creds);
			return NULL;
		}
		snprintf(ca_path, sizeof(ca_path), "%s/ca.crt", p->scratch);
		if (fs_mkdir_p(p->scratch, 0700, e) < 0 || (f = fopen(ca_path, "we")) == NULL ||
		    fwrite(pem, 1, len, f) != len || fclose(f) != 0) {
			free(pem);
			oci_creds_free(&creds);
			return err_set(e, ERR_IO, "cannot write the registry CA for spec.ociSource.certSecretRef"),
			    NULL;
		}
		free(pem);
		co.ca_file = ca_path;
	}
	c = oci_client_new(ref->registry, &co, e);
	oci_creds_free(&creds);
	return c;
}

/* The OCI resolution cache's key (hex SHA-256, at least 65 bytes of out):
 * polls are shared only by Stacks that would make the same lookup: same
 * namespace, reference, credentials and CA Secrets, same transport.  A
 * Stack without a registry's credentials must not learn what another's
 * found, nor one that asks for TLS take what was read over plain HTTP.
 * Each field goes in with its length, so no two specs share a key. */
void stack_oci_poll_key(const struct stack_spec *s, const char *ns, char *out, size_t n)
{
	const char *fields[] = { ns, s->oci_url, s->oci_tag, s->oci_digest, s->oci_semver, s->oci_media_type,
	    s->oci_secret, s->oci_cert_secret, s->oci_insecure ? "insecure" : "tls" };
	struct strbuf b;
	struct digest d;

	strbuf_init(&b);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (fields[i])
			strbuf_printf(&b, "%zu:%zu:%s;", i, strlen(fields[i]), fields[i]);
	digest_bytes(DIGEST_SHA256, b.buf ? b.buf : "", b.len, &d);
	strbuf_free(&b);
	digest_hex(&d, out, n);
}

static int copy_result(const struct oci_pull_result *from, struct oci_pull_result *to)
{
	memset(to, 0, sizeof(*to));
#define DUP(f) if (from->f && (to->f = strdup(from->f)) == NULL) return -1
	DUP(tag); DUP(revision); DUP(manifest_digest); DUP(index_digest); DUP(platform);
	DUP(layer_digest); DUP(layer_media_type);
#undef DUP
	to->layer_size = from->layer_size;
	return 0;
}

int stack_oci_cache_lookup(struct stack_ctl *sc, const char *key, long max_age_ms,
    struct oci_pull_result *res)
{
	struct stack_oci_poll *q;
	int64_t now = clock_mono_ms();
	int found = 0;

	pthread_mutex_lock(&sc->oci_lock);
	if ((q = strmap_get(&sc->oci_polls, key)) != NULL) {
		touch(q, now);
		if (now - q->at_ms < max_age_ms)
			found = copy_result(&q->res, res) == 0;
	}
	pthread_mutex_unlock(&sc->oci_lock);
	return found;
}

static int same_str(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* ------------------------------------------------------------ OCI cache pruning */

struct prune_ctx {
	int64_t now;
	const char *spare;            /* the key just stored: never dropped */
	const char **keys;            /* the candidates; the victims first */
	uint64_t *order;              /* 0 for an idle entry, else its used_seq */
	size_t n, max;
};

/* No Stack has looked for it in twice its interval (and a while). */
static int idle(const struct stack_oci_poll *q, int64_t now)
{
	int64_t quiet = q->interval_ms > 0 ? 2 * (int64_t)q->interval_ms : 0;

	return now - q->used_ms > (quiet > OCI_CACHE_IDLE_MS ? quiet : OCI_CACHE_IDLE_MS);
}

static void collect_entry(void *ud, const char *key, void *value)
{
	struct prune_ctx *c = ud;

	const struct stack_oci_poll *q = value;

	if (c->n < c->max && strcmp(key, c->spare) != 0) {
		c->keys[c->n] = key;
		c->order[c->n++] = idle(q, c->now) ? 0 : q->used_seq;
	}
}

/* Moves the least recent of c's candidates from i on to i. */
static void pick_oldest(struct prune_ctx *c, size_t i)
{
	size_t oldest = i;
	const char *k;
	uint64_t o;

	for (size_t j = i + 1; j < c->n; j++)
		if (c->order[j] < c->order[oldest])
			oldest = j;
	k = c->keys[oldest];
	o = c->order[oldest];
	c->keys[oldest] = c->keys[i];
	c->order[oldest] = c->order[i];
	c->keys[i] = k;
	c->order[i] = o;
}

/* Drops idle entries, then the least recently used, until at most keep
 * remain besides spare.  Lock held. */
static void prune_to(struct stack_ctl *sc, size_t keep, const char *spare)
{
	size_t n = sc->oci_polls.count, drop;
	struct prune_ctx c = { clock_mono_ms(), spare, calloc(n, sizeof(char *)), calloc(n, sizeof(uint64_t)),
		0, n };
	char **victims = NULL;

	if (c.keys == NULL || c.order == NULL)
		goto out;
	strmap_each(&sc->oci_polls, collect_entry, &c);
	drop = c.n > keep ? c.n - keep : 0;
	if ((victims = calloc(drop ? drop : 1, sizeof(*victims))) == NULL)
		goto out;
	/* A quarter of the cache goes, at most: picked one by one. */
	for (size_t v = 0; v < drop; v++) {
		pick_oldest(&c, v);
		victims[v] = strdup(c.keys[v]);   /* the key lives in the entry it names */
	}
	for (size_t v = 0; v < drop; v++)
		if (victims[v]) {
			oci_poll_free(strmap_del(&sc->oci_polls, victims[v]));
			free(victims[v]);
		}
out:
	free(victims);
	free(c.keys);
	free(c.order);
}

/* When the cache outgrows the Stacks it serves, cut it to three quarters
 * of its bound (so the next prunes are far apart).  Lock held. */
static void maybe_prune(struct stack_ctl *sc, const char *spare)
{
	size_t bound = OCI_CACHE_SLACK + 2 * stack_ctl_stack_count(sc);

	if (sc->oci_polls.count > bound)
		prune_to(sc, bound * 3 / 4, spare);
}

size_t stack_oci_cache_count(struct stack_ctl *sc)
{
	size_t n;

	pthread_mutex_lock(&sc->oci_lock);
	n = sc->oci_polls.count;
	pthread_mutex_unlock(&sc->oci_lock);
	return n;
}

/* A new resolution replaces the old; the verifications of the old one
 * carry over only when the manifest digest is the same. */
void stack_oci_cache_store(struct stack_ctl *sc, const char *key, long interval_ms,
    const struct oci_pull_result *res)
{
	struct stack_oci_poll *q = calloc(1, sizeof(*q)), *old;

	if (q == NULL || copy_result(res, &q->res) < 0) {
		oci_poll_free(q);
		return;
	}
	q->at_ms = clock_mono_ms();
	touch(q, q->at_ms);
	q->interval_ms = interval_ms;
	pthread_mutex_lock(&sc->oci_lock);
	if ((old = strmap_put(&sc->oci_polls, key, q)) != NULL) {
		if (same_str(old->res.manifest_digest, res->manifest_digest)) {
			q->verified = old->verified;
			old->verified = NULL;
		}
		oci_poll_free(old);
	}
	maybe_prune(sc, key);
	pthread_mutex_unlock(&sc->oci_lock);
}

int stack_source_verified_lookup(struct stack_ctl *sc, const char *key, const char *digest, const char *keys,
    char *key_name, size_t n, char *scheme, size_t sn)
{
	struct stack_oci_poll *q;
	int found = 0;

	pthread_mutex_lock(&sc->oci_lock);
	q = strmap_get(&sc->oci_polls, key);
	if (q != NULL && same_str(q->res.manifest_digest, digest))
		for (struct stack_oci_verified *v = q->verified; v && !found; v = v->next)
			if (strcmp(v->keys, keys) == 0) {
				snprintf(key_name, n, "%s", v->key_name);
				snprintf(scheme, sn, "%s", v->scheme);
				found = 1;
			}
	pthread_mutex_unlock(&sc->oci_lock);
	return found;
}

/* Drops the checks made with an older resourceVersion of the same Secret
 * ("<secret>@" prefix), so the list stays one entry per Secret. */
static void forget_secret(struct stack_oci_verified **list, const char *keys)
{
	const char *at = strchr(keys, '@');
	size_t n = at ? (size_t)(at - keys) + 1 : strlen(keys);

	for (struct stack_oci_verified **vp = list; *vp;) {
		struct stack_oci_verified *v = *vp;
		if (strncmp(v->keys, keys, n) == 0) {
			*vp = v->next;
			v->next = NULL;
			verified_free(v);
		} else {
			vp = &v->next;
		}
	}
}

/* Kept only while the poll still holds digest (another Stack's pass may
 * have seen the tag move meanwhile). */
void stack_source_verified_store(struct stack_ctl *sc, const char *key, const char *digest, const char *keys,
    const char *key_name, const char *scheme)
{
	struct stack_oci_verified *v;
	struct stack_oci_poll *q;

	if ((v = calloc(1, sizeof(*v))) == NULL || (v->keys = strdup(keys)) == NULL ||
	    (v->key_name = strdup(key_name ? key_name : "")) == NULL ||
	    (v->scheme = strdup(scheme ? scheme : "")) == NULL) {
		verified_free(v);
		return;
	}
	pthread_mutex_lock(&sc->oci_lock);
	q = strmap_get(&sc->oci_polls, key);
	if (q != NULL && same_str(q->res.manifest_digest, digest)) {
		forget_secret(&q->verified, keys);
		v->next = q->verified;
		q->verified = v;
		v = NULL;
	}
	pthread_mutex_unlock(&sc->oci_lock);
	verified_free(v);
}

static int parse_oci_ref(struct stack_pass *p, struct oci_ref *ref, struct err *e)
{
	char text[2048];

	snprintf(text, sizeof(text), "%s%s%s", p->spec.oci_url, p->spec.oci_digest ? "@" : "",
	    p->spec.oci_digest ? p->spec.oci_digest : "");
	if (oci_ref_parse(text, ref, e) < 0)
		return -1;
	if (ref->tag == NULL && ref->digest == NULL && p->spec.oci_tag &&
	    (ref->tag = strdup(p->spec.oci_tag)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	return 0;
}

struct oci_client *stack_source_oci_client(struct stack_pass *p, char **repo, struct err *e)
{
	struct oci_ref ref;
	struct oci_client *c = NULL;

	memset(&ref, 0, sizeof(ref));
	*repo = NULL;
	if (parse_oci_ref(p, &ref, e) == 0 && (c = oci_client_for(p, &ref, e)) != NULL &&
	    (*repo = strdup(ref.repository)) == NULL) {
		oci_client_free(c);
		c = NULL;
		err_set(e, ERR_NOMEM, "out of memory");
	}
	oci_ref_free(&ref);
	return c;
}

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

static int resolve_oci(struct stack_pass *p)
{
	struct oci_ref ref;
	struct oci_pull_opts po;
	struct oci_pull_result res;
	struct oci_client *c;
	struct err e;
	char key[4096];
	long max_age_ms;

	memset(&ref, 0, sizeof(ref));
	memset(&res, 0, sizeof(res));
	note_plain_http_credentials(p);
	stack_oci_poll_key(&p->spec, p->ns, key, sizeof(key));
	/* A digest never moves; a tag or range is looked up once per interval,
	 * or at once when someone asks for a reconcile (as `flux reconcile`
	 * makes an OCIRepository look now). */
	if (p->spec.oci_digest)
		max_age_ms = INT64_MAX / 2;
	else
		max_age_ms = stack_pass_requested(p) ? 0 : p->spec.oci_interval_ms;
	if (stack_oci_cache_lookup(p->sc, key, max_age_ms, &res)) {
		stack_metrics_resolved("cached");
	} else {
		if (parse_oci_ref(p, &ref, &e) < 0) {
			oci_ref_free(&ref);
			stack_verdict(p, STACK_STALLED, "SpecInvalid", 0, "spec.ociSource: %s", e.msg);
			return 1;
		}
		oci_pull_options(p, &po);
		if ((c = oci_client_for(p, &ref, &e)) == NULL || oci_resolve(c, &ref, &po, &res, &e) < 0) {
			oci_client_free(c);
			oci_ref_free(&ref);
			oci_pull_result_free(&res);
			stack_metrics_resolved("failed");
			stack_verdict(p, STACK_WAITING, "ArtifactFailed", p->sc->o.requeue_dependency_ms,
			    "cannot resolve %s: %s", p->spec.oci_url, e.msg);
			p->v.event = 1;
			return 1;
		}
		oci_client_free(c);
		oci_ref_free(&ref);
		stack_metrics_resolved("resolved");
		stack_oci_cache_store(p->sc, key, p->spec.oci_digest ? 0 : p->spec.oci_interval_ms, &res);
	}
	if (!p->spec.oci_verify)
		p->verified_none = 1;
	else if (stack_verify_oci(p, key, res.revision, res.manifest_digest, res.index_digest)) {
		oci_pull_result_free(&res);
		return 1;
	}
	/* The tree is keyed by the layer digest; the manifest digest is the
	 * revision's, as OCIRepository reports it. */
	if (set_artifact(&p->art, res.revision, res.layer_digest, NULL) < 0 ||
	    (res.index_digest && (p->art.index_digest = strdup(res.index_digest)) == NULL)) {
		oci_pull_result_free(&res);
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 1000, "out of memory");
		return 1;
	}
	oci_pull_result_free(&res);
	return 0;
}

static int fetch_oci(struct stack_pass *p)
{
	struct oci_ref ref;
	struct oci_pull_opts po;
	struct oci_pull_result res;
	struct oci_client *c = NULL;
	struct err e;
	char key[4096];
	const char *colon = strchr(p->art.digest, ':');
	double t0 = clock_mono_s();

	if (colon == NULL) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 0, "bad layer digest %s", p->art.digest);
		return 1;
	}
	snprintf(p->tree, sizeof(p->tree), "%s/artifacts/%.*s/%s", p->sc->o.storage_path,
	    (int)(colon - p->art.digest), p->art.digest, colon + 1);
	if (fs_is_dir(p->tree)) {
		stack_metrics_cache("oci", 1);
		return 0;
	}
	memset(&ref, 0, sizeof(ref));
	memset(&res, 0, sizeof(res));
	note_plain_http_credentials(p);
	stack_oci_poll_key(&p->spec, p->ns, key, sizeof(key));
	/* Only the layer this pass resolved (and verified) is fetched: another
	 * Stack's pass may have seen the tag move since. */
	if (!stack_oci_cache_lookup(p->sc, key, INT64_MAX / 2, &res) || !same_str(res.layer_digest, p->art.digest)) {
		oci_pull_result_free(&res);
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 1000, "the resolution of %s changed or expired; "
		    "resolving again", p->spec.oci_url);
		return 1;
	}
	oci_pull_options(p, &po);
	if (parse_oci_ref(p, &ref, &e) < 0 || (c = oci_client_for(p, &ref, &e)) == NULL ||
	    oci_fetch_layer(c, ref.repository, &res, &po, p->tree, 1, &e) < 0) {
		oci_client_free(c);
		oci_ref_free(&ref);
		oci_pull_result_free(&res);
		count_download("oci", &e, t0, 0);
		fetch_failed(p, p->spec.oci_url, &e);
		return 1;
	}
	/* The layer's digest matched, so exactly its descriptor's size came. */
	count_download("oci", NULL, t0, (long long)res.layer_size);
	oci_client_free(c);
	oci_ref_free(&ref);
	oci_pull_result_free(&res);
	return 0;
}

/* ------------------------------------------------------------ entry points */

int stack_source_resolve(struct stack_pass *p)
{
	return p->spec.source == STACK_SRC_OCI ? resolve_oci(p) : resolve_flux(p);
}

int stack_source_fetch(struct stack_pass *p)
{
	return p->spec.source == STACK_SRC_OCI ? fetch_oci(p) : fetch_flux(p);
}
