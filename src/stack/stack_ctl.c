/*
 * stack_ctl.c - the Stack controller object: what it watches, what a
 * change queues, and the entry point the workers call.
 *
 * Informers cache Stacks, the Flux source kinds and the operator's Program
 * kind the server serves, and ConfigMaps and Secrets metadata-only.  Two
 * secondary indexes on Stacks turn a change elsewhere into exactly the
 * Stacks it concerns:
 *   "source"  <Kind>/<namespace>/<name> of the Flux source (programRef's
 *             GitRepository included), or Program/<namespace>/<name> of
 *             programRef.name (always the Stack's own namespace)
 *   "ref"     Secret/<namespace>/<name> and ConfigMap/<namespace>/<name> of
 *             every object the spec reads values (or verification keys) from
 * Change filters queue on what can change an outcome, never on the status
 * the reconciler itself writes: a Stack's generation, deletion, finalizers
 * or reconcile-request annotations; a source's artifact (and its
 * SourceVerified condition); a Program's generation; a referenced
 * object's resourceVersion.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/log.h"
#include "fluxsource/fluxsource.h"
#include "stack/stack_machine.h"

static const struct stack_kind stack_kind_init = {
	.res = { { "pulumi.com", "v1", "stacks", "Stack", 1 } }, .nres = 1,
};
static const struct stack_kind source_kinds_init[3] = {
	{ .res = { { "source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository", 1 } }, .nres = 1 },
	{ .res = { { "source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository", 1 },
	    { "source.toolkit.fluxcd.io", "v1beta2", "ocirepositories", "OCIRepository", 1 } }, .nres = 2 },
	{ .res = { { "source.toolkit.fluxcd.io", "v1", "buckets", "Bucket", 1 },
	    { "source.toolkit.fluxcd.io", "v1beta2", "buckets", "Bucket", 1 } }, .nres = 2 },
};
static const struct stack_kind program_kind_init = {
	.res = { { "pulumi.com", "v1", "programs", "Program", 1 } }, .nres = 1,
};
static const struct stack_kind configmap_kind_init = {
	.res = { { "", "v1", "configmaps", "ConfigMap", 1 } }, .nres = 1,
};
static const struct stack_kind secret_kind_init = {
	.res = { { "", "v1", "secrets", "Secret", 1 } }, .nres = 1,
};
static const struct stack_kind job_kind_init = {
	.res = { { "batch", "v1", "jobs", "Job", 1 } }, .nres = 1,
};

/* ------------------------------------------------------------ indexes */

static const cJSON *at(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str_or_empty(const char *s)
{
	return s ? s : "";
}

static int add_value(char **out, int n, int max, const char *kind, const char *ns, const char *name)
{
	size_t len;

	if (n >= max || name == NULL || ns == NULL)
		return n;
	len = strlen(kind) + strlen(ns) + strlen(name) + 3;
	if ((out[n] = malloc(len)) == NULL)
		return n;
	snprintf(out[n], len, "%s/%s/%s", kind, ns, name);
	for (int i = 0; i < n; i++)
		if (strcmp(out[i], out[n]) == 0) {
			free(out[n]);
			return n;
		}
	return n + 1;
}

static int source_index(const cJSON *obj, char **out, int max)
{
	const cJSON *spec = at(obj, "spec");
	const cJSON *ref = at(at(spec, "fluxSource"), "sourceRef");
	const char *ns = kube_obj_str(obj, "metadata.namespace"), *name = kube_obj_str(obj, "metadata.name");

	if (cJSON_IsObject(ref))
		return add_value(out, 0, max, str_or_empty(kube_obj_str(ref, "kind")), ns, kube_obj_str(ref, "name"));
	/* The operator's programRef {name}: a Program of the Stack's namespace. */
	if (kube_obj_str(at(spec, "programRef"), "name") != NULL && at(at(spec, "programRef"), "repo") == NULL)
		return add_value(out, 0, max, "Program", ns, kube_obj_str(at(spec, "programRef"), "name"));
	if ((cJSON_IsObject(at(spec, "programRef")) || cJSON_IsString(at(spec, "projectRepo"))) && name != NULL) {
		char src[300];
		snprintf(src, sizeof(src), "%s-program", name);
		return add_value(out, 0, max, "GitRepository", ns, src);
	}
	return 0;
}

/* Secret/ConfigMap values named by a map of ResourceRefs or classic envs. */
static int refs_of_map(const cJSON *map, const char *ns, char **out, int n, int max)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, map) {
		const cJSON *from = at(it, "valueFrom");
		if (cJSON_IsObject(at(it, "secret")))
			n = add_value(out, n, max, "Secret", ns, kube_obj_str(at(it, "secret"), "name"));
		if (cJSON_IsObject(at(from, "secretKeyRef")))
			n = add_value(out, n, max, "Secret", ns, kube_obj_str(at(from, "secretKeyRef"), "name"));
		if (cJSON_IsObject(at(from, "configMapKeyRef")))
			n = add_value(out, n, max, "ConfigMap", ns, kube_obj_str(at(from, "configMapKeyRef"), "name"));
	}
	return n;
}

static int ref_index(const cJSON *obj, char **out, int max)
{
	const cJSON *spec = at(obj, "spec"), *it, *os = at(spec, "ociSource");
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	int n = 0;

	/* The source's credentials first: they must never be the ones cut off
	 * when a Stack refers to more objects than an index entry holds. */
	n = add_value(out, n, max, "Secret", ns, kube_obj_str(at(os, "secretRef"), "name"));
	n = add_value(out, n, max, "Secret", ns, kube_obj_str(at(os, "certSecretRef"), "name"));
	n = add_value(out, n, max, "Secret", ns, kube_obj_str(at(at(os, "verify"), "secretRef"), "name"));
	/* projectRepo's credentials: their Secret changed, <name>-git-auth is
	 * rewritten; that one changed or deleted (by hand, or the garbage
	 * collector after a Stack of the same name), it is written again. */
	n = add_value(out, n, max, "Secret", ns, kube_obj_str(spec, "gitAuthSecret"));
	n = refs_of_map(at(spec, "gitAuth"), ns, out, n, max);
	cJSON_ArrayForEach(it, at(spec, "gitAuth"))
		n = refs_of_map(it, ns, out, n, max);
	if (cJSON_IsString(at(spec, "projectRepo")) && (at(spec, "gitAuth") || at(spec, "gitAuthSecret")) &&
	    kube_obj_str(obj, "metadata.name") != NULL) {
		char own[300];
		snprintf(own, sizeof(own), "%s-git-auth", kube_obj_str(obj, "metadata.name"));
		n = add_value(out, n, max, "Secret", ns, own);
	}
	n = refs_of_map(at(spec, "envRefs"), ns, out, n, max);
	n = refs_of_map(at(spec, "envs"), ns, out, n, max);
	n = refs_of_map(at(spec, "secretsRef"), ns, out, n, max);
	/* The operator's envFrom lists and its access token Secret: strings,
	 * so refs_of_map finds nothing in them. */
	cJSON_ArrayForEach(it, (cJSON_IsArray(at(spec, "envs")) ? at(spec, "envs") : NULL))
		n = add_value(out, n, max, "ConfigMap", ns, cJSON_IsString(it) ? it->valuestring : NULL);
	cJSON_ArrayForEach(it, (cJSON_IsArray(at(spec, "envSecrets")) ? at(spec, "envSecrets") : NULL))
		n = add_value(out, n, max, "Secret", ns, cJSON_IsString(it) ? it->valuestring : NULL);
	n = add_value(out, n, max, "Secret", ns, kube_obj_str(spec, "accessTokenSecret"));
	cJSON_ArrayForEach(it, at(spec, "configRef"))
		n = add_value(out, n, max, "ConfigMap", ns, kube_obj_str(it, "name"));
	return n;
}

/* ------------------------------------------------------------ filters */

static int str_changed(const cJSON *a, const cJSON *b, const char *path)
{
	const char *x = kube_obj_str(a, path), *y = kube_obj_str(b, path);

	return (x == NULL) != (y == NULL) || (x && strcmp(x, y) != 0);
}

/* Do the two JSON values under metadata differ? */
static int meta_changed(const cJSON *a, const cJSON *b, const char *key)
{
	const cJSON *x = at(at(a, "metadata"), key), *y = at(at(b, "metadata"), key);

	if (x == NULL || y == NULL)
		return (x == NULL) != (y == NULL);
	return !cJSON_Compare(x, y, 1);
}

static const char *change_name(enum kube_change c)
{
	return c == KUBE_CHANGE_ADD ? "added" : c == KUBE_CHANGE_UPDATE ? "updated" : "deleted";
}

/* One line per change of a Stack or a source (not of ConfigMaps and
 * Secrets, which are many and mostly unrelated). */
static void log_change(struct kube_informer *inf, enum kube_change ch, const cJSON *obj)
{
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	const char *name = kube_obj_str(obj, "metadata.name");
	const char *rv = kube_obj_str(obj, "metadata.resourceVersion");

	log_info("object changed", "kind", kube_informer_resource(inf)->kind, "change", change_name(ch),
	    "namespace", str_or_empty(ns), "name", str_or_empty(name), "resourceVersion", str_or_empty(rv), NULL);
}

/* Does this Stack update change what the reconciler would do? */
static int stack_changed(const cJSON *old, const cJSON *obj)
{
	const cJSON *go = at(at(old, "metadata"), "generation"), *gn = at(at(obj, "metadata"), "generation");

	/* Annotations: reconcile requests, and anything a user sets to have a
	 * look (a pass that finds nothing new runs no CLI and writes nothing). */
	if (!cJSON_IsNumber(go) || !cJSON_IsNumber(gn) || go->valuedouble != gn->valuedouble)
		return 1;
	return str_changed(old, obj, "metadata.deletionTimestamp") || meta_changed(old, obj, "annotations") ||
	    meta_changed(old, obj, "finalizers");
}

static void enqueue_dependents(struct stack_ctl *sc, const char *index, const char *kind,
    const cJSON *obj);

static void on_stack(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	struct stack_ctl *sc = ud;
	char *key;

	log_change(inf, ch, obj);
	if (ch == KUBE_CHANGE_DELETE && (key = kube_object_key(obj)) != NULL) {
		/* Gone from this shard's cache: it waits for no Job slot. */
		stack_job_slot_forget(sc, key);
		free(key);
	}
	/* Its dependents (spec.prerequisites) look again at once. */
	if (stack_prereq_readiness_changed(old, obj))
		enqueue_dependents(sc, "prereq", "Stack", obj);
	if (ch == KUBE_CHANGE_UPDATE && old != NULL && !stack_changed(old, obj))
		return;
	if ((key = kube_object_key(obj)) != NULL) {
		log_debug("stack queued", "key", key, "change", change_name(ch), NULL);
		kube_queue_add(sc->queue, key);
	}
	free(key);
}

static void enqueue_key(void *ud, const char *key)
{
	kube_queue_add(((struct stack_ctl *)ud)->queue, key);
}

static void enqueue_dependents(struct stack_ctl *sc, const char *index, const char *kind,
    const cJSON *obj)
{
	char value[600];
	const char *ns = kube_obj_str(obj, "metadata.namespace"), *name = kube_obj_str(obj, "metadata.name");

	if (sc->stacks.inf == NULL || ns == NULL || name == NULL)
		return;
	snprintf(value, sizeof(value), "%s/%s/%s", kind, ns, name);
	kube_informer_by_index(sc->stacks.inf, index, value, enqueue_key, sc);
}

/* An OCIRepository's SourceVerified condition, which the Stack reports
 * and which decides whether its artifact may be used (stack_source.c). */
static int verified_changed(const cJSON *a, const cJSON *b)
{
	const cJSON *x = NULL, *y = NULL, *c;

	cJSON_ArrayForEach(c, at(at(a, "status"), "conditions"))
		if (kube_obj_str(c, "type") && strcmp(kube_obj_str(c, "type"), "SourceVerified") == 0)
			x = c;
	cJSON_ArrayForEach(c, at(at(b, "status"), "conditions"))
		if (kube_obj_str(c, "type") && strcmp(kube_obj_str(c, "type"), "SourceVerified") == 0)
			y = c;
	if (x == NULL || y == NULL)
		return (x == NULL) != (y == NULL);
	return str_changed(x, y, "status") || str_changed(x, y, "message") ||
	    !cJSON_Compare(at(x, "observedGeneration"), at(y, "observedGeneration"), 1);
}

static void on_source(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	log_change(inf, ch, obj);
	if (ch == KUBE_CHANGE_UPDATE && old != NULL && !str_changed(old, obj, "status.artifact.revision") &&
	    !str_changed(old, obj, "status.artifact.digest") && !str_changed(old, obj, "status.artifact.url") &&
	    !verified_changed(old, obj))
		return;
	enqueue_dependents(ud, "source", kube_informer_resource(inf)->kind, obj);
}

/* A Program changed what it renders to only when its generation moved (it
 * has no spec: `program` is the object's content; status is not ours). */
static void on_program(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	log_change(inf, ch, obj);
	if (ch == KUBE_CHANGE_UPDATE && old != NULL && cJSON_Compare(at(at(old, "metadata"), "generation"),
	    at(at(obj, "metadata"), "generation"), 1))
		return;
	enqueue_dependents(ud, "source", "Program", obj);
}

static void on_reference(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	if (ch == KUBE_CHANGE_UPDATE && old != NULL && !str_changed(old, obj, "metadata.resourceVersion"))
		return;
	enqueue_dependents(ud, "ref", kube_informer_resource(inf)->kind, obj);
}

/* The Job's controller ownerReference of kind Stack, or NULL. */
static const cJSON *job_owner(const cJSON *job)
{
	const cJSON *o;

	cJSON_ArrayForEach(o, at(at(job, "metadata"), "ownerReferences"))
		if (cJSON_IsTrue(at(o, "controller")) && kube_obj_str(o, "kind") &&
		    strcmp(kube_obj_str(o, "kind"), "Stack") == 0)
			return o;
	return NULL;
}

/* The Stack a Job belongs to: its controller ownerReference (the label
 * is cut to 63 characters, the reference is not). */
static const char *job_stack(const cJSON *job)
{
	const cJSON *o = job_owner(job);

	if (o != NULL)
		return kube_obj_str(o, "name");
	o = at(at(at(job, "metadata"), "labels"), STACK_LABEL_NAME);
	return cJSON_IsString(o) ? o->valuestring : NULL;
}

static int job_index(const cJSON *obj, char **out, int max)
{
	const char *ns = kube_obj_str(obj, "metadata.namespace"), *stack = job_stack(obj);
	size_t len;

	if (max < 1 || ns == NULL || stack == NULL)
		return 0;
	len = strlen(ns) + strlen(stack) + 2;
	if ((out[0] = malloc(len)) == NULL)
		return 0;
	snprintf(out[0], len, "%s/%s", ns, stack);
	return 1;
}

enum job_phase { JOB_UNFINISHED, JOB_DELETING, JOB_FINISHED };

static enum job_phase job_phase(const cJSON *job)
{
	if (job == NULL)
		return JOB_UNFINISHED;
	if (stack_job_finished(job))
		return JOB_FINISHED;
	return kube_obj_str(job, "metadata.deletionTimestamp") ? JOB_DELETING : JOB_UNFINISHED;
}

/* Does this change concern the Stack's pass?  Only a Job finishing, being
 * deleted or gone: while it runs the pass has nothing to do (the start
 * timeout is the pass's own requeue), so the Job controller's and the
 * kubelet's status writes of a running Job (active, ready, startTime), the
 * controller's own annotation and the create it made itself wake nothing. */
static int job_change_matters(enum kube_change ch, const cJSON *old, const cJSON *obj)
{
	if (ch == KUBE_CHANGE_DELETE)
		return 1;
	if (ch == KUBE_CHANGE_UPDATE && old != NULL)
		return job_phase(old) != job_phase(obj);
	return job_phase(obj) != JOB_UNFINISHED;
}

/* A Job changed: its slot is taken or freed, and its Stack looks again
 * when the Job finished or went, if the Stack is this shard's (the Job
 * informer sees every shard's Jobs). */
static void on_job(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	struct stack_ctl *sc = ud;
	char *key = kube_object_key(obj), stack_key[600] = "", owner_key[600] = "";
	const char *ns = kube_obj_str(obj, "metadata.namespace"), *stack = job_stack(obj);
	const cJSON *owner = job_owner(obj);

	(void)inf;
	if (ns != NULL && stack != NULL)
		snprintf(stack_key, sizeof(stack_key), "%s/%s", ns, stack);
	/* The slot is the owner's by uid, never by a label anyone can set. */
	if (ns != NULL && kube_obj_str(owner, "name") != NULL)
		snprintf(owner_key, sizeof(owner_key), "%s/%s", ns, kube_obj_str(owner, "name"));
	if (key != NULL)
		stack_job_slot_seen_job(sc, key, owner_key, kube_obj_str(owner, "uid"), ch != KUBE_CHANGE_DELETE &&
		    job_phase(obj) == JOB_UNFINISHED);
	free(key);
	if (stack_key[0] == '\0' || !job_change_matters(ch, old, obj) || !stack_ctl_has_stack(sc, stack_key))
		return;
	log_debug("stack queued", "key", stack_key, "change", change_name(ch), "by", "Job", NULL);
	kube_queue_add(sc->queue, stack_key);
}

/* ------------------------------------------------------------ the pass */

static int split_key(const char *key, char *ns, size_t nn, char *name, size_t n)
{
	const char *slash = strchr(key, '/');

	if (slash == NULL || (size_t)(slash - key) >= nn || strlen(slash + 1) >= n)
		return -1;
	snprintf(ns, nn, "%.*s", (int)(slash - key), key);
	snprintf(name, n, "%s", slash + 1);
	return 0;
}

static const char *annotation(const cJSON *obj, const char *name)
{
	const cJSON *v = at(at(at(obj, "metadata"), "annotations"), name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void pass_init(struct stack_pass *p, struct stack_ctl *sc, cJSON *obj)
{
	const cJSON *gen = at(at(obj, "metadata"), "generation");

	p->sc = sc;
	p->obj = obj;
	if (!at(obj, "apiVersion"))
		cJSON_AddStringToObject(obj, "apiVersion", "pulumi.com/v1");
	if (!at(obj, "kind"))
		cJSON_AddStringToObject(obj, "kind", "Stack");
	p->status = at(obj, "status");
	p->generation = cJSON_IsNumber(gen) ? (long long)gen->valuedouble : 0;
	p->deleting = kube_obj_str(obj, "metadata.deletionTimestamp") != NULL;
	p->requested = annotation(obj, STACK_ANN_REQUESTED) ? strdup(annotation(obj, STACK_ANN_REQUESTED)) : NULL;
	p->request = annotation(obj, STACK_ANN_REQUEST) ? strdup(annotation(obj, STACK_ANN_REQUEST)) : NULL;
}

/* A random (version 4) UUID, as controller-runtime's reconcileID: one per
 * reconcile, so the lines of one pass can be told from the next one's. */
static void new_reconcile_id(char out[37])
{
	unsigned char b[16];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		for (size_t i = 0; i < sizeof(b); i++)
			b[i] = (unsigned char)rand();
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
	    b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static void pass_free(struct stack_pass *p)
{
	stack_spec_free(&p->spec);
	stack_artifact_free(&p->art);
	stack_inputs_free(&p->in);
	cJSON_Delete(p->out.changes);
	cJSON_Delete(p->out.outputs);
	cJSON_Delete(p->out.outputs_plain);
	cJSON_Delete(p->obj);
	free(p->requested);
	free(p->request);
}

/* A Stack waits for a Job slot only while its passes keep asking for one.
 * A pass that decided without asking (suspended, nothing due, gone, another
 * step) gives its place up; one that failed before it decided (to be
 * retried) keeps it. */
static void slot_pass_done(struct stack_ctl *sc, const char *key, const struct stack_pass *p, int rc,
    unsigned long mark)
{
	if (p->gone)
		stack_job_slot_forget(sc, key);
	else if (rc >= 0 && !p->retry)
		stack_job_slot_pass_done(sc, key, mark);
}

static int reconcile(void *ud, const char *key, long *requeue_after_ms, struct err *e)
{
	struct stack_ctl *sc = ud;
	struct stack_pass p;
	char ns[254], name[254], id[37];
	double t0 = clock_mono_s();
	unsigned long slot_mark = stack_job_slot_mark(sc);
	cJSON *obj;
	int rc;

	*requeue_after_ms = 0;
	if (split_key(key, ns, sizeof(ns), name, sizeof(name)) < 0)
		return 0;
	/* Every line of this reconcile, whoever logs it, names it (the worker
	 * clears the context when it is done). */
	new_reconcile_id(id);
	log_context_clear();
	log_context_set("namespace", ns);
	log_context_set("name", name);
	log_context_set("reconcileID", id);
	if ((obj = kube_informer_get(sc->stacks.inf, ns, name)) == NULL) {
		stack_metrics_gone(ns, name, clock_mono_s() - t0);
		stack_job_slot_forget(sc, key);
		return 0;   /* deleted; its finalizer was handled before */
	}
	for (int attempt = 0;; attempt++) {
		memset(&p, 0, sizeof(p));
		snprintf(p.ns, sizeof(p.ns), "%s", ns);
		snprintf(p.name, sizeof(p.name), "%s", name);
		snprintf(p.id, sizeof(p.id), "%s", id);
		pass_init(&p, sc, obj);
		rc = stack_reconcile_pass(&p, e);
		if (p.stale && attempt > 0) {
			rc = err_set(e, ERR_CONFLICT, "Stack %s keeps changing; retrying", key);
			break;
		}
		if (!p.stale)
			break;
		/* The cache lagged behind the server (our own last write, usually):
		 * decide again on the object as the server has it. */
		obj = p.obj;
		p.obj = NULL;
		pass_free(&p);
	}
	stack_metrics_reconciled(&p, rc, clock_mono_s() - t0);
	slot_pass_done(sc, key, &p, rc, slot_mark);
	pass_free(&p);
	log_info("reconcile", "stack", key, "result", rc < 0 ? "retry" : "done", "error", rc < 0 ? e->msg : "",
	    NULL);
	if (rc < 0)
		return -1;
	*requeue_after_ms = rc;
	return 0;
}

/* The workers call this when the shutdown grace ran out. */
static void interrupt(void *ud)
{
	stack_ctl_interrupt(ud);
}

/* ------------------------------------------------------------ lifecycle */

struct stack_ctl *stack_ctl_new(struct kube_client *c, struct kube_queue *q,
    struct kube_recorder *rec, const struct stack_opts *o, struct err *e)
{
	struct stack_ctl *sc = calloc(1, sizeof(*sc));

	if (sc == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	sc->client = c;
	sc->queue = q;
	sc->recorder = rec;
	sc->o = *o;
	sc->stacks = stack_kind_init;
	memcpy(sc->sources, source_kinds_init, sizeof(sc->sources));
	sc->programs = program_kind_init;
	sc->configmaps = configmap_kind_init;
	sc->secrets = secret_kind_init;
	sc->jobs = job_kind_init;
	pthread_mutex_init(&sc->lock, NULL);
	pthread_mutex_init(&sc->oci_lock, NULL);
	if (stack_job_slots_new(sc) < 0) {
		pthread_mutex_destroy(&sc->lock);
		pthread_mutex_destroy(&sc->oci_lock);
		free(sc);
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	}
	sc->rec.reconcile = reconcile;
	sc->rec.interrupt = interrupt;
	sc->rec.ud = sc;
	stack_metrics_init();
	if (o->identity)
		snprintf(sc->identity, sizeof(sc->identity), "%s", o->identity);
	else if (gethostname(sc->identity, sizeof(sc->identity) - 1) != 0)
		snprintf(sc->identity, sizeof(sc->identity), "pulumi-controller");
	snprintf(sc->pulumi_home, sizeof(sc->pulumi_home), "%s", o->pulumi_home ? o->pulumi_home : "");
	if (o->pulumi_home == NULL)
		snprintf(sc->pulumi_home, sizeof(sc->pulumi_home), "%s/pulumi-home", o->storage_path);
	if (fs_mkdir_p(o->storage_path, 0700, e) < 0 || fs_mkdir_p(sc->pulumi_home, 0700, e) < 0) {
		stack_ctl_free(sc);
		return NULL;
	}
	/* Staging a killed predecessor left behind (its lock is free). */
	if (flux_store_sweep(o->storage_path, e) < 0)
		log_warn("cannot sweep the artifact store", "path", o->storage_path, "error", e->msg, NULL);
	err_clear(e);
	return sc;
}

void stack_ctl_free(struct stack_ctl *sc)
{
	if (sc == NULL)
		return;
	stack_ctl_unwatch(sc);
	stack_source_cleanup(sc);
	stack_job_slots_free(sc);
	pthread_mutex_destroy(&sc->lock);
	pthread_mutex_destroy(&sc->oci_lock);
	free(sc);
}

/* All informers, for loops that treat them alike. */

/* Picks the first served version; 0 served, 1 not, -1 error. */
static int discover(struct kube_client *c, struct stack_kind *k, struct err *e)
{
	for (int i = 0; i < k->nres; i++) {
		int rc = kube_resource_served(c, &k->res[i], e);
		if (rc < 0)
			return -1;
		if (rc == 1) {
			k->served = &k->res[i];
			return 0;
		}
	}
	return 1;
}

static int make_informer(struct stack_ctl *sc, struct stack_kind *k, const char *selector,
    int metadata_only, kube_handler_fn fn, struct err *e)
{
	struct kube_informer_opts io;

	memset(&io, 0, sizeof(io));
	io.namespace = sc->o.namespace;
	io.label_selector = selector;
	io.watch_idle_timeout_s = sc->o.watch_idle_timeout_s;
	/* ConfigMaps and Secrets: only their metadata is ever received, so no
	 * Secret value is cached; values are read with a GET when needed. */
	io.metadata_only = metadata_only;
	if ((k->inf = kube_informer_new(sc->client, k->served, &io)) == NULL)
		return err_set(e, ERR_NOMEM, "cannot create the %s informer", k->served->kind), -1;
	if (kube_informer_add_handler(k->inf, fn, sc) < 0)
		return err_set(e, ERR_INVALID, "cannot watch %s changes", k->served->kind), -1;
	atomic_store(&k->live, 1);
	return 0;
}

/* The kinds that may be served or not, and appear later (a CRD installed
 * while the controller runs): the Flux sources and Program. */
#define OPTIONAL_KINDS 4

static struct stack_kind *optional_kind(struct stack_ctl *sc, int i)
{
	return i < 3 ? &sc->sources[i] : &sc->programs;
}

static kube_handler_fn optional_handler(struct stack_ctl *sc, const struct stack_kind *k)
{
	return k == &sc->programs ? on_program : on_source;
}

int stack_ctl_watch(struct stack_ctl *sc, struct err *e)
{
	struct stack_kind *all[STACK_KINDS_MAX];
	int rc, n;

	if ((rc = discover(sc->client, &sc->stacks, e)) != 0)
		return rc < 0 ? -1 : err_set(e, ERR_NOTFOUND, "the server does not serve stacks.pulumi.com/v1; "
		    "install the CRD (deploy/crds)"), -1;
	if (make_informer(sc, &sc->stacks, sc->o.label_selector, 0, on_stack, e) < 0 ||
	    kube_informer_add_index(sc->stacks.inf, "source", source_index) < 0 ||
	    kube_informer_add_index(sc->stacks.inf, "ref", ref_index) < 0 ||
	    kube_informer_add_index(sc->stacks.inf, "prereq", stack_prereq_index) < 0)
		return err_set(e, ERR_INVALID, "cannot index the Stack cache"), -1;
	for (int i = 0; i < OPTIONAL_KINDS; i++) {
		struct stack_kind *k = optional_kind(sc, i);
		if ((rc = discover(sc->client, k, e)) < 0)
			return err_prefix(e, "discovering %s: ", k->res[0].kind), -1;
		if (rc == 1) {
			log_info("kind not served by the API server; not watching it", "kind", k->res[0].kind,
			    "group", k->res[0].group, NULL);
			continue;
		}
		if (make_informer(sc, k, NULL, 0, optional_handler(sc, k), e) < 0)
			return -1;
	}
	sc->configmaps.served = &sc->configmaps.res[0];
	sc->secrets.served = &sc->secrets.res[0];
	if (make_informer(sc, &sc->configmaps, sc->o.configs_selector, 1, on_reference, e) < 0 ||
	    make_informer(sc, &sc->secrets, sc->o.configs_selector, 1, on_reference, e) < 0)
		return -1;
	/* Jobs only when a Stack may run in one: a local-only controller needs
	 * no RBAC on Jobs. */
	sc->jobs.served = &sc->jobs.res[0];
	if (sc->o.job_image && (make_informer(sc, &sc->jobs, STACK_JOB_LABEL_MANAGED "=" STACK_JOB_MANAGER, 0,
	    on_job, e) < 0 || kube_informer_add_index(sc->jobs.inf, "stack", job_index) < 0))
		return err_set(e, ERR_INVALID, "cannot watch Jobs"), -1;
	n = stack_ctl_kinds(sc, all);
	for (int i = 0; i < n; i++)
		if (all[i]->inf && kube_informer_start(all[i]->inf, e) < 0)
			return -1;
	return 0;
}

static void requeue_key(void *ud, const char *key, const char *rv)
{
	(void)rv;
	kube_queue_add(((struct stack_ctl *)ud)->queue, key);
}

int stack_ctl_rediscover(struct stack_ctl *sc)
{
	int missing = 0, found = 0;
	struct err e;

	for (int i = 0; i < OPTIONAL_KINDS; i++) {
		struct stack_kind *k = optional_kind(sc, i);
		int rc;
		if (atomic_load(&k->live))
			continue;
		if ((rc = discover(sc->client, k, &e)) != 0) {
			missing++;
			if (rc < 0)
				log_debug("discovery failed; trying again later", "kind", k->res[0].kind, "error", e.msg,
				    NULL);
			continue;
		}
		/* Live before it starts: a Stack reconciled meanwhile finds its
		 * source not yet cached (SourceNotFound, retried), and the first
		 * list's events queue the Stacks on each source. */
		if (make_informer(sc, k, NULL, 0, optional_handler(sc, k), &e) < 0 ||
		    kube_informer_start(k->inf, &e) < 0) {
			log_error("cannot watch a newly served kind", "kind", k->res[0].kind, "error", e.msg, NULL);
			missing++;
			continue;
		}
		log_info("kind now served by the API server; watching it", "kind", k->served->kind,
		    "version", k->served->version, NULL);
		found++;
	}
	if (found && atomic_load(&sc->stacks.live))
		kube_informer_each(sc->stacks.inf, requeue_key, sc);
	return missing;
}

void stack_ctl_unwatch(struct stack_ctl *sc)
{
	struct stack_kind *all[STACK_KINDS_MAX];
	int n = stack_ctl_kinds(sc, all);

	for (int i = 0; i < n; i++) {
		atomic_store(&all[i]->live, 0);
		if (all[i]->inf)
			kube_informer_request_stop(all[i]->inf);
	}
	/* Every informer's thread is joined before any is freed: a Secret's,
	 * ConfigMap's, source's or Job's handler looks Stacks up in the Stack
	 * informer's index (enqueue_dependents, stack_ctl_has_stack), so that
	 * one must outlive every other thread that may still be in a handler
	 * (tests/unit/test_stack_shutdown.c holds one there). */
	for (int i = 0; i < n; i++)
		if (all[i]->inf)
			kube_informer_stop(all[i]->inf);
	for (int i = 0; i < n; i++)
		if (all[i]->inf) {
			kube_informer_free(all[i]->inf);
			all[i]->inf = NULL;
		}
}

const struct kube_reconciler *stack_ctl_reconciler(struct stack_ctl *sc)
{
	return &sc->rec;
}

/* ------------------------------------------------------------ running ops */

void stack_ctl_leading(struct stack_ctl *sc)
{
	atomic_store(&sc->leading_since_ms, (long long)clock_mono_ms());
}

/* ------------------------------------------------------------ metrics, dump */

void stack_ctl_metrics(struct stack_ctl *sc, FILE *out)
{
	struct stack_kind *all[STACK_KINDS_MAX];
	int n = stack_ctl_kinds(sc, all);
	static const char *names[] = { "watch_events_total", "lists_total", "watch_errors_total" };
	static const char *helps[] = { "Watch events received.", "Lists (initial and relists).",
		"Failed lists and watches." };

	fputs("# HELP pulumi_controller_cache_objects Objects in the informer cache.\n"
	    "# TYPE pulumi_controller_cache_objects gauge\n", out);
	for (int i = 0; i < n; i++)
		if (all[i]->inf)
			fprintf(out, "pulumi_controller_cache_objects{kind=\"%s\"} %zu\n", all[i]->served->kind,
			    kube_informer_count(all[i]->inf));
	/* One family at a time: the text format wants a family's samples together. */
	for (int fam = 0; fam < 3; fam++) {
		fprintf(out, "# HELP pulumi_controller_%s %s\n# TYPE pulumi_controller_%s counter\n",
		    names[fam], helps[fam], names[fam]);
		for (int i = 0; i < n; i++) {
			struct kube_informer_stats st;
			uint64_t v;
			if (!all[i]->inf)
				continue;
			kube_informer_stats(all[i]->inf, &st);
			v = fam == 0 ? st.events : fam == 1 ? st.lists : st.errors;
			fprintf(out, "pulumi_controller_%s{kind=\"%s\"} %llu\n", names[fam], all[i]->served->kind,
			    (unsigned long long)v);
		}
	}
	fprintf(out, "# HELP pulumi_controller_stack_updates_total Pulumi updates run, by result.\n"
	    "# TYPE pulumi_controller_stack_updates_total counter\n"
	    "pulumi_controller_stack_updates_total{result=\"succeeded\"} %llu\n"
	    "pulumi_controller_stack_updates_total{result=\"failed\"} %llu\n",
	    (unsigned long long)atomic_load(&sc->updates_ok), (unsigned long long)atomic_load(&sc->updates_failed));
	fprintf(out, "# HELP pulumi_controller_jobs_running Update Jobs counted against --max-concurrent-jobs.\n"
	    "# TYPE pulumi_controller_jobs_running gauge\n"
	    "pulumi_controller_jobs_running %d\n", stack_job_slots_used(sc));
	fprintf(out, "# HELP pulumi_controller_stack_unchanged_total Reconciles that found nothing to do.\n"
	    "# TYPE pulumi_controller_stack_unchanged_total counter\n"
	    "pulumi_controller_stack_unchanged_total %llu\n", (unsigned long long)atomic_load(&sc->no_change));
}

struct dump_ctx {
	cJSON *obj;
};

static void dump_one(void *ud, const char *key, const char *rv)
{
	cJSON_AddStringToObject(((struct dump_ctx *)ud)->obj, key, rv);
}

int stack_ctl_dump_cache(struct stack_ctl *sc, const char *path)
{
	struct stack_kind *all[STACK_KINDS_MAX];
	int n = stack_ctl_kinds(sc, all);
	cJSON *doc = cJSON_CreateObject();
	char tmp[4096], *text;
	FILE *f;

	for (int i = 0; i < n; i++) {
		struct dump_ctx c;
		if (all[i]->inf == NULL || all[i] == &sc->configmaps || all[i] == &sc->secrets)
			continue;
		c.obj = cJSON_AddObjectToObject(doc, all[i]->served->resource);
		kube_informer_each(all[i]->inf, dump_one, &c);
	}
	text = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (f == NULL || text == NULL) {
		if (f)
			fclose(f);
		free(text);
		return -1;
	}
	fputs(text, f);
	free(text);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}
