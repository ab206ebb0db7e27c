/*
 * stack_oci.c - what the source and verification code share of an
 * ociSource: a registry client built from the Stack's spec (credentials,
 * CA, transport), and the cache of resolutions and of the signature checks
 * that passed for them.
 *
 * One resolution of (url, ref, media type, credentials, transport) is
 * shared by every Stack that names it, under its poll key
 * (stack_oci_poll_key).  The resolutions are a hash map under their own
 * lock (not the controller's); when they outgrow the cached Stacks
 * (OCI_CACHE_SLACK + 2 per Stack) the ones no Stack has asked for lately
 * go, then the least recently used: Stacks that come and go leave nothing
 * behind for long.  stack_source.c resolves and fetches with them;
 * stack_verify.c checks signatures with the client and records what passed.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/clock.h"
#include "base/digest.h"
#include "base/fs.h"
#include "base/locked.h"
#include "base/log.h"
#include "base/secret.h"
#include "base/str.h"
#include "base/strbuf.h"
#include "oci/oci.h"
#include "stack/stack_sources.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

/* ------------------------------------------------------------ the cache */

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
	unsigned char *out;
	struct err ig;

	if (s == NULL)
		return NULL;
	if ((out = kube_secret_value(s, key, len, &ig)) == NULL)
		err_set(e, ERR_NOTFOUND, "Secret %s/%s has no key \"%s\"", p->ns, name, key);
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
struct oci_client *stack_oci_client_for(struct stack_pass *p, const struct oci_ref *ref,
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
	return locked_size(&sc->oci_lock, &sc->oci_polls.count);
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
		if (str_eq(old->res.manifest_digest, res->manifest_digest)) {
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
	if (q != NULL && str_eq(q->res.manifest_digest, digest))
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
	if (q != NULL && str_eq(q->res.manifest_digest, digest)) {
		forget_secret(&q->verified, keys);
		v->next = q->verified;
		q->verified = v;
		v = NULL;
	}
	pthread_mutex_unlock(&sc->oci_lock);
	verified_free(v);
}

int stack_oci_ref_parse(struct stack_pass *p, struct oci_ref *ref, struct err *e)
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
	if (stack_oci_ref_parse(p, &ref, e) == 0 && (c = stack_oci_client_for(p, &ref, e)) != NULL &&
	    (*repo = strdup(ref.repository)) == NULL) {
		oci_client_free(c);
		c = NULL;
		err_set(e, ERR_NOMEM, "out of memory");
	}
	oci_ref_free(&ref);
	return c;
}

/* ------------------------------------------------------------ the store */

int stack_oci_tree_path(const char *root, const char *digest, char *out, size_t n)
{
	const char *colon = digest ? strchr(digest, ':') : NULL;

	if (colon == NULL || colon == digest || colon[1] == '\0')
		return -1;
	snprintf(out, n, "%s/artifacts/%.*s/%s", root, (int)(colon - digest), digest, colon + 1);
	return 0;
}
