/*
 * stack_status.c - everything the reconciler writes back: the Stack's
 * status (kstatus conditions, the last update, history), Events, the
 * finalizer and the outputs Secret.
 *
 * Status is rebuilt from the previous one and the pass (its verdict and
 * the outcome of an update, if one ran) and written with PUT on the status
 * subresource against the resourceVersion the pass read.  A concurrent
 * writer (a label, an annotation, a spec change: this controller is the
 * only status writer) makes it fail with 409.  A pass that ran no update
 * then fails, the worker retries, and the next pass recomputes from fresh
 * state; a pass that ran one re-reads the Stack and writes the same status
 * again, since the update happened whatever changed meanwhile (a new
 * generation is left to the next pass: observedGeneration says which one
 * this status is about).  Conditions follow kstatus: Ready always;
 * Reconciling and Stalled only while True and never both; a condition's
 * lastTransitionTime moves only when its status does.
 *
 * status.interruptedUpdates keeps who ran an update that never recorded
 * its outcome (the controller was killed or its pod replaced), so that
 * its CLI lock can be recovered (stack_update.c).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base64.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/secret.h"
#include "fluxsource/fluxsource.h"
#include "base/str.h"
#include "stack/stack_model.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

#define STACK_INTERRUPTED_MAX 5     /* status.interruptedUpdates entries */
#define STACK_STATUS_TRIES 5        /* an update's outcome, against conflicts */

void stack_verdict(struct stack_pass *p, enum stack_state st, const char *reason, long requeue_ms,
    const char *fmt, ...)
{
	va_list ap;

	p->v.set = 1;
	p->v.state = st;
	p->v.reason = reason;
	p->v.ready_reason = NULL;
	p->v.requeue_ms = requeue_ms;
	va_start(ap, fmt);
	vsnprintf(p->v.message, sizeof(p->v.message), fmt, ap);
	va_end(ap);
}

const char *stack_status_str(const struct stack_pass *p, const char *path)
{
	return p->status ? kube_obj_str(p->status, path) : NULL;
}

long long stack_status_int(const struct stack_pass *p, const char *path, long long dflt)
{
	const cJSON *o = p->status;
	char part[128];
	const char *s = path, *dot;

	while (o && (dot = strchr(s, '.')) != NULL) {
		snprintf(part, sizeof(part), "%.*s", (int)(dot - s), s);
		o = cJSON_GetObjectItemCaseSensitive(o, part);
		s = dot + 1;
	}
	o = o ? cJSON_GetObjectItemCaseSensitive(o, s) : NULL;
	return cJSON_IsNumber(o) ? (long long)o->valuedouble : dflt;
}

int stack_has_finalizer(const cJSON *obj)
{
	const cJSON *f;

	cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "finalizers"))
		if (cJSON_IsString(f) && strcmp(f->valuestring, STACK_FINALIZER) == 0)
			return 1;
	return 0;
}

int64_t stack_parse_time_us(const char *s)
{
	struct tm tm;
	const char *end;

	if (s == NULL)
		return 0;
	memset(&tm, 0, sizeof(tm));
	end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (end == NULL)
		return 0;
	return (int64_t)timegm(&tm) * 1000000;
}

/* ------------------------------------------------------------ events */

void stack_event(struct stack_pass *p, const char *type, const char *reason, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	struct err e;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (kube_event(p->sc->recorder, p->obj, type, reason, msg, &e) < 0)
		log_warn("cannot record an event", "namespace", p->ns, "name", p->name, "reason", reason,
		    "error", e.msg, NULL);
	/* And to notification-controller (run --events-addr): queued, never waited for. */
	flux_notify_object(flux_notify_default(), p->obj, type, reason, msg, p->art.revision);
}

/* ------------------------------------------------------------ conditions */

static cJSON *find_condition(const cJSON *conds, const char *type)
{
	cJSON *c;

	cJSON_ArrayForEach(c, conds) {
		const char *t = kube_obj_str(c, "type");
		if (t && strcmp(t, type) == 0)
			return c;
	}
	return NULL;
}

/* A condition with its transition time carried over when its status is
 * unchanged. */
static void add_condition(cJSON *out, const cJSON *old, const char *type, const char *status,
    const char *reason, const char *message, long long generation)
{
	const cJSON *prev = find_condition(old, type);
	const char *ps = prev ? kube_obj_str(prev, "status") : NULL;
	const char *pt = prev ? kube_obj_str(prev, "lastTransitionTime") : NULL;
	cJSON *c = cJSON_CreateObject();
	char now[32];

	clock_format_rfc3339(now, sizeof(now), time(NULL));
	cJSON_AddStringToObject(c, "type", type);
	cJSON_AddStringToObject(c, "status", status);
	cJSON_AddNumberToObject(c, "observedGeneration", (double)generation);
	cJSON_AddStringToObject(c, "lastTransitionTime", ps && pt && strcmp(ps, status) == 0 ? pt : now);
	cJSON_AddStringToObject(c, "reason", reason);
	cJSON_AddStringToObject(c, "message", message);
	cJSON_AddItemToArray(out, c);
}

/* Conditions other owners (or later features) wrote are kept as they are. */
static void keep_other_conditions(cJSON *out, const cJSON *old)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, old) {
		const char *t = kube_obj_str(c, "type");
		if (t && strcmp(t, "Ready") && strcmp(t, "Reconciling") && strcmp(t, "Stalled") &&
		    strcmp(t, "AwaitingApproval") && strcmp(t, "Drifted") && strcmp(t, "SourceVerified"))
			cJSON_AddItemToArray(out, cJSON_Duplicate(c, 1));
	}
}

/* Does the Stack's source verify signatures at all?  ociSource.verify
 * does; a Flux OCIRepository may (its spec.verify, which only the source
 * step sees: verified_none). */
static int source_may_verify(const struct stack_pass *p)
{
	if (!p->spec_ok)
		return 1;   /* the spec cannot be read: nothing is known, keep it */
	if (p->spec.source == STACK_SRC_OCI)
		return p->spec.oci_verify;
	return p->spec.source == STACK_SRC_FLUX && p->spec.src_kind &&
	    strcmp(p->spec.src_kind, "OCIRepository") == 0 && !p->verified_none;
}

/* SourceVerified (docs/stack-api.md): as the source step decided it this
 * pass; removed once nothing is verified (as Flux removes it when
 * spec.verify goes); otherwise as it was, for a pass that stopped before
 * the source step (a prerequisite not Ready...). */
static void verified_condition(const struct stack_pass *p, cJSON *out, const cJSON *old)
{
	const cJSON *prev = find_condition(old, "SourceVerified");

	if (!source_may_verify(p))
		return;
	if (p->verified.set)
		add_condition(out, old, "SourceVerified", p->verified.set > 0 ? "True" : "False",
		    p->verified.reason, p->verified.message, p->generation);
	else if (prev)
		cJSON_AddItemToArray(out, cJSON_Duplicate(prev, 1));
}

static cJSON *build_conditions(const struct stack_pass *p, const cJSON *old)
{
	cJSON *out = cJSON_CreateArray();
	char msg[1400];
	const struct stack_verdict *v = &p->v;

	snprintf(msg, sizeof(msg), "%s%s%s", v->message, p->note[0] ? "; " : "", p->note);
	add_condition(out, old, "Ready", v->state == STACK_READY ? "True" : "False",
	    v->ready_reason ? v->ready_reason : v->reason, msg, p->generation);
	if (v->state == STACK_WAITING)
		add_condition(out, old, "Reconciling", "True", v->reason, msg, p->generation);
	if (v->state == STACK_STALLED)
		add_condition(out, old, "Stalled", "True", v->reason, msg, p->generation);
	stack_safety_conditions(p, out, old, add_condition);
	verified_condition(p, out, old);
	keep_other_conditions(out, old);
	return out;
}

/* ------------------------------------------------------------ status */

static void replace(cJSON *obj, const char *key, cJSON *value)
{
	cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
	if (value)
		cJSON_AddItemToObject(obj, key, value);
}

static void set_str(cJSON *obj, const char *key, const char *value)
{
	replace(obj, key, value ? cJSON_CreateString(value) : NULL);
}

static cJSON *update_entry(const struct stack_pass *p, int with_outputs)
{
	const struct stack_outcome *o = &p->out;
	cJSON *u = cJSON_CreateObject();
	char start[32], end[32];

	clock_format_rfc3339(start, sizeof(start), (time_t)(o->start_us / 1000000));
	clock_format_rfc3339(end, sizeof(end), (time_t)(o->end_us / 1000000));
	cJSON_AddNumberToObject(u, "generation", (double)p->generation);
	cJSON_AddStringToObject(u, "type", o->type);
	cJSON_AddStringToObject(u, "state", o->ok ? "succeeded" : "failed");
	cJSON_AddStringToObject(u, "message", o->message);
	if (with_outputs && !o->ok && o->lock.present && o->lock.owner[0])
		cJSON_AddStringToObject(u, "lockHolder", o->lock.owner);
	if (with_outputs) {
		const char *last_ok = stack_status_str(p, "lastUpdate.lastSuccessfulCommit");
		cJSON_AddStringToObject(u, "lastAttemptedCommit", p->art.revision ? p->art.revision : "");
		cJSON_AddStringToObject(u, "lastSuccessfulCommit", o->ok ? (p->art.revision ? p->art.revision : "") :
		    (last_ok ? last_ok : ""));
		cJSON_AddStringToObject(u, "lastResyncTime", end);
		cJSON_AddNumberToObject(u, "failures", o->ok ? 0 : p->failures);
		if (p->request)
			cJSON_AddStringToObject(u, "reconcileRequest", p->request);
		/* Which Job this outcome was read from: that Job is never read
		 * again as a new outcome, even when its recorded mark is lost. */
		if (p->job_recorded_uid[0])
			cJSON_AddStringToObject(u, "jobUid", p->job_recorded_uid);
	}
	cJSON_AddStringToObject(u, "startTime", start);
	cJSON_AddStringToObject(u, "endTime", end);
	cJSON_AddItemToObject(u, "resourceChanges", o->changes ? cJSON_Duplicate(o->changes, 1) :
	    cJSON_CreateObject());
	return u;
}

static void add_history(cJSON *st, const struct stack_pass *p)
{
	cJSON *old = cJSON_GetObjectItemCaseSensitive(st, "history"), *h = cJSON_CreateArray();
	cJSON *entry = update_entry(p, 0), *it;
	int n = 1;

	cJSON_DeleteItemFromObjectCaseSensitive(entry, "message");
	cJSON_DeleteItemFromObjectCaseSensitive(entry, "state");
	cJSON_AddStringToObject(entry, "revision", p->art.revision ? p->art.revision : "");
	cJSON_AddStringToObject(entry, "digest", p->art.digest ? p->art.digest : "");
	cJSON_AddStringToObject(entry, "result", p->out.ok ? "succeeded" : "failed");
	cJSON_AddItemToArray(h, entry);
	cJSON_ArrayForEach(it, old)
		if (n++ < STACK_HISTORY_MAX)
			cJSON_AddItemToArray(h, cJSON_Duplicate(it, 1));
	replace(st, "history", h);
}

/* status.preview, .approval, .drift and .policyViolation, as the approval
 * and drift steps decided them (stack_approval.c, stack_drift.c). */
static void safety_status(cJSON *st, const struct stack_pass *p)
{
	const struct stack_safety *s = &p->safety;

	if (s->clear_preview)
		replace(st, "preview", NULL);
	else if (s->preview)
		replace(st, "preview", cJSON_Duplicate(s->preview, 1));
	if (s->approval)
		replace(st, "approval", cJSON_Duplicate(s->approval, 1));
	if (s->drift)
		replace(st, "drift", cJSON_Duplicate(s->drift, 1));
	if (p->out.ran && strcmp(p->out.type, "destroy") != 0)
		set_str(st, "policyViolation", s->policy[0] ? s->policy : NULL);
	if (p->spec_ok && !p->spec.approval_manual) {
		replace(st, "preview", NULL);
		replace(st, "approval", NULL);
	}
	if (p->spec_ok && p->spec.drift_interval_ms == 0 && !p->spec.refresh)
		replace(st, "drift", NULL);
}

static int same_str(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* The update the pass found running (status.currentUpdate, which a pass
 * removes when it records the outcome: this one's controller never did)
 * joins status.interruptedUpdates, newest first, each controller and Lease
 * once, at most STACK_INTERRUPTED_MAX. */
static void note_interrupted(cJSON *st, const cJSON *found)
{
	const cJSON *cur = cJSON_GetObjectItemCaseSensitive(found, "currentUpdate"), *it;
	const char *ctl = kube_obj_str(cur, "controller"), *lease = kube_obj_str(cur, "lease");
	cJSON *list, *entry;
	int n = 1;

	if (ctl == NULL)
		return;
	list = cJSON_CreateArray();
	entry = cJSON_CreateObject();
	cJSON_AddStringToObject(entry, "controller", ctl);
	if (lease)
		cJSON_AddStringToObject(entry, "lease", lease);
	if (kube_obj_str(cur, "startTime"))
		cJSON_AddStringToObject(entry, "startTime", kube_obj_str(cur, "startTime"));
	cJSON_AddItemToArray(list, entry);
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(found, "interruptedUpdates"))
		if (n < STACK_INTERRUPTED_MAX && !(same_str(kube_obj_str(it, "controller"), ctl) &&
		    same_str(kube_obj_str(it, "lease"), lease))) {
			cJSON_AddItemToArray(list, cJSON_Duplicate(it, 1));
			n++;
		}
	replace(st, "interruptedUpdates", list);
}

/* An up or destroy that succeeded took the stack's lock: no lock of an
 * interrupted update is left. */
static int lock_taken(const struct stack_outcome *o)
{
	return o->ran && o->ok && (strcmp(o->type, "up") == 0 || strcmp(o->type, "destroy") == 0);
}

/* The pass handed its update to a Job that has not finished (or waits for
 * a slot, or for the old Job of its name to go): a reconcile request is
 * handled by the pass that reads that Job's outcome, not this one, so that
 * whoever waits for lastHandledReconcileAt (flux reconcile,
 * pulumi-controller reconcile) then reads the request's outcome in Ready,
 * as in local mode.  The request also keeps the update due until then: a
 * pass that saw it handled would find nothing due and never read the Job's
 * result.  A Job waiting for one of earlier inputs is not the request's:
 * handled as before, since a pending request would keep asking for a fresh
 * plan (approval: Manual) instead of reading that earlier Job's outcome. */
static int job_in_flight(const struct stack_pass *p)
{
	return p->v.set && p->v.state == STACK_WAITING && !p->job_waits_other &&
	    (same_str(p->v.reason, "JobRunning") || same_str(p->v.reason, "WaitingForJobSlot"));
}

/* The new status: the old one with what this pass learned. */
static cJSON *build_status(const struct stack_pass *p, int running)
{
	cJSON *st = p->status ? cJSON_Duplicate(p->status, 1) : cJSON_CreateObject();
	cJSON *old_conds = cJSON_GetObjectItemCaseSensitive(p->status, "conditions");

	replace(st, "observedGeneration", cJSON_CreateNumber((double)p->generation));
	/* currentUpdate is this pass's own once it ran an update; otherwise
	 * (and before this pass's replaces it) an earlier controller's. */
	if (running || !p->out.ran)
		note_interrupted(st, p->status);
	if (!running && lock_taken(&p->out))
		replace(st, "interruptedUpdates", NULL);
	if (!running) {
		replace(st, "conditions", build_conditions(p, old_conds));
		if (p->requested && !job_in_flight(p))
			set_str(st, "lastHandledReconcileAt", p->requested);
		if (p->request && !job_in_flight(p))
			set_str(st, "observedReconcileRequest", p->request);
		replace(st, "currentUpdate", NULL);
	}
	if (p->art.revision) {
		cJSON *a = cJSON_CreateObject();
		cJSON_AddStringToObject(a, "revision", p->art.revision);
		cJSON_AddStringToObject(a, "digest", p->art.digest ? p->art.digest : "");
		replace(st, "artifact", a);
	}
	if (p->out.ran && !running) {
		int is_destroy = strcmp(p->out.type, "destroy") == 0;
		replace(st, "lastUpdate", update_entry(p, 1));
		add_history(st, p);
		if (!is_destroy) {
			set_str(st, "lastAttemptedRevision", p->art.revision);
			set_str(st, "lastAttemptedFingerprint", p->fingerprint);
		}
		if (p->out.ok && !is_destroy && strcmp(p->out.type, "up") == 0) {
			set_str(st, "lastAppliedRevision", p->art.revision);
			set_str(st, "fingerprint", p->fingerprint);
			if (p->out.outputs) {
				char name[300];
				snprintf(name, sizeof(name), "%s-outputs", p->name);
				replace(st, "outputs", cJSON_Duplicate(p->out.outputs, 1));
				set_str(st, "outputsSecretName", name);
			}
		}
		if (p->out.ok && strcmp(p->out.type, "preview") == 0)
			set_str(st, "fingerprint", p->fingerprint);
	}
	safety_status(st, p);
	return st;
}

/* The server's answer to a write becomes the pass's object (its new
 * resourceVersion for the next write), stripped as the cache strips, with
 * apiVersion and kind for Events. */
static void adopt(struct stack_pass *p, cJSON *res)
{
	if (!cJSON_GetObjectItemCaseSensitive(res, "apiVersion"))
		cJSON_AddStringToObject(res, "apiVersion", kube_obj_str(p->obj, "apiVersion"));
	if (!cJSON_GetObjectItemCaseSensitive(res, "kind"))
		cJSON_AddStringToObject(res, "kind", "Stack");
	kube_strip_object(res);
	cJSON_Delete(p->obj);
	p->obj = res;
	p->status = cJSON_GetObjectItemCaseSensitive(res, "status");
}

/* PUTs the status; p->obj becomes the server's answer (its new
 * resourceVersion for the next write of this pass). */
static int put_status(struct stack_pass *p, cJSON *st, struct err *e)
{
	cJSON *body = cJSON_Duplicate(p->obj, 1), *res;

	replace(body, "status", st);
	res = kube_update(p->sc->client, p->sc->stacks.served, p->ns, body, "status", e);
	cJSON_Delete(body);
	if (res == NULL)
		return -1;
	adopt(p, res);
	return 0;
}

/* The Stack as the server has it now becomes p->obj, for a status write
 * that met a conflict.  -1 when it is gone or is another Stack of that name
 * (deleted and created again). */
static int reread(struct stack_pass *p, struct err *e)
{
	cJSON *fresh = kube_get(p->sc->client, p->sc->stacks.served, p->ns, p->name, NULL, e);

	if (fresh == NULL)
		return -1;
	if (!same_str(kube_obj_str(fresh, "metadata.uid"), kube_obj_str(p->obj, "metadata.uid"))) {
		cJSON_Delete(fresh);
		return err_set(e, ERR_CONFLICT, "Stack %s/%s was deleted and created again during the update",
		    p->ns, p->name), -1;
	}
	adopt(p, fresh);
	return 0;
}

int stack_status_write(struct stack_pass *p, struct err *e)
{
	cJSON *st = build_status(p, 0);
	int tries = 0;

	/* A pass that learned nothing new writes nothing: a no-change
	 * reconcile costs no API write. */
	if (p->status != NULL && cJSON_Compare(st, p->status, 1)) {
		cJSON_Delete(st);
		return 0;
	}
	while (put_status(p, cJSON_Duplicate(st, 1), e) < 0) {
		if (e->code != ERR_CONFLICT || !p->out.ran || ++tries >= STACK_STATUS_TRIES || reread(p, e) < 0) {
			cJSON_Delete(st);
			return -1;
		}
		log_info("the Stack changed during the update; writing its outcome again", "namespace", p->ns,
		    "name", p->name, "reconcileID", p->id, "resourceVersion",
		    kube_obj_str(p->obj, "metadata.resourceVersion"), NULL);
	}
	cJSON_Delete(st);
	return 0;
}

int stack_status_write_running(struct stack_pass *p, struct err *e)
{
	cJSON *st = build_status(p, 1), *cur = cJSON_CreateObject(), *conds;
	char now[32];
	char msg[600];

	clock_format_rfc3339(now, sizeof(now), time(NULL));
	cJSON_AddStringToObject(cur, "startTime", now);
	cJSON_AddStringToObject(cur, "controller", p->sc->identity);
	if (p->sc->o.lease)
		cJSON_AddStringToObject(cur, "lease", p->sc->o.lease);
	cJSON_AddStringToObject(cur, "revision", p->art.revision ? p->art.revision : "");
	replace(st, "currentUpdate", cur);
	snprintf(msg, sizeof(msg), "%s at revision %s: %s", p->deleting ? "destroying" : "updating",
	    p->art.revision ? p->art.revision : "(last applied)", p->why ? p->why : "");
	conds = cJSON_CreateArray();
	add_condition(conds, cJSON_GetObjectItemCaseSensitive(p->status, "conditions"), "Ready", "False",
	    "Progressing", msg, p->generation);
	add_condition(conds, cJSON_GetObjectItemCaseSensitive(p->status, "conditions"), "Reconciling",
	    "True", "Progressing", msg, p->generation);
	stack_safety_conditions(p, conds, cJSON_GetObjectItemCaseSensitive(p->status, "conditions"),
	    add_condition);
	verified_condition(p, conds, cJSON_GetObjectItemCaseSensitive(p->status, "conditions"));
	keep_other_conditions(conds, cJSON_GetObjectItemCaseSensitive(p->status, "conditions"));
	replace(st, "conditions", conds);
	return put_status(p, st, e);
}

/* ------------------------------------------------------------ finalizer */

int stack_finalizer_set(struct stack_pass *p, int present, struct err *e)
{
	cJSON *patch = cJSON_CreateObject(), *md = cJSON_AddObjectToObject(patch, "metadata");
	cJSON *list = cJSON_AddArrayToObject(md, "finalizers"), *f, *res;
	char *text;

	/* The resourceVersion makes the merge patch conditional, so a list
	 * changed by someone else meanwhile is not overwritten. */
	cJSON_AddStringToObject(md, "resourceVersion", kube_obj_str(p->obj, "metadata.resourceVersion"));
	cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(p->obj, "metadata"), "finalizers"))
		if (cJSON_IsString(f) && strcmp(f->valuestring, STACK_FINALIZER) != 0)
			cJSON_AddItemToArray(list, cJSON_CreateString(f->valuestring));
	if (present)
		cJSON_AddItemToArray(list, cJSON_CreateString(STACK_FINALIZER));
	text = cJSON_PrintUnformatted(patch);
	cJSON_Delete(patch);
	if (text == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	res = kube_patch(p->sc->client, p->sc->stacks.served, p->ns, p->name, NULL, KUBE_PATCH_MERGE, text,
	    NULL, 0, e);
	free(text);
	if (res == NULL)
		return -1;
	adopt(p, res);
	return 0;
}

/* ------------------------------------------------------------ outputs */

void stack_label_value(const char *name, char out[STACK_LABEL_VALUE_MAX])
{
	size_t len = strlen(name);

	if (len > STACK_LABEL_VALUE_MAX - 1)
		len = STACK_LABEL_VALUE_MAX - 1;
	while (len > 0 && !isalnum((unsigned char)name[len - 1]))
		len--;
	memcpy(out, name, len);
	out[len] = '\0';
}

/* A Secret data key for an output name ([-._a-zA-Z0-9], as the operator). */
static void secret_key(const char *name, char *out, size_t n)
{
	size_t i;

	for (i = 0; name[i] && i + 1 < n; i++)
		out[i] = isalnum((unsigned char)name[i]) || strchr("-._", name[i]) ? name[i] : '_';
	out[i] = '\0';
}

static int add_output(cJSON *data, cJSON *secrets, const cJSON *plain, const cJSON *masked)
{
	char key[254];
	char *text = cJSON_IsString(plain) ? strdup(plain->valuestring) : cJSON_PrintUnformatted(plain);
	char *enc;

	if (text == NULL)
		return -1;
	enc = base64_encode(text, strlen(text));
	secret_free(text);
	if (enc == NULL)
		return -1;
	secret_key(plain->string, key, sizeof(key));
	if (cJSON_GetObjectItemCaseSensitive(data, key) != NULL) {
		/* "a b" and "a_b" are one Secret key: the first output keeps it. */
		log_warn("two outputs map to one Secret key; the later is left out", "key", key,
		    "output", plain->string, NULL);
		free(enc);
		return 0;
	}
	cJSON_AddItemToObject(data, key, cJSON_CreateString(enc));
	free(enc);
	if (cJSON_IsString(masked) && strcmp(masked->valuestring, "[secret]") == 0)
		cJSON_AddItemToArray(secrets, cJSON_CreateString(key));
	return 0;
}

static int cmp_items(const void *a, const void *b)
{
	return strcmp((*(cJSON *const *)a)->valuestring, (*(cJSON *const *)b)->valuestring);
}

/* Sorts an array of strings in place. */
static void sort_strings(cJSON *arr)
{
	int n = cJSON_GetArraySize(arr);
	cJSON **v = n > 0 ? malloc((size_t)n * sizeof(*v)) : NULL;

	if (v == NULL)
		return;
	for (int i = 0; i < n; i++)
		v[i] = cJSON_DetachItemFromArray(arr, 0);
	qsort(v, (size_t)n, sizeof(*v), cmp_items);
	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(arr, v[i]);
	free(v);
}

/* The masked outputs (p->out.outputs: the CLI's "[secret]" in place, at
 * any depth) as STACK_ANN_MASKED_OUTPUTS, when they fit; a Job's status
 * is read from it (stack_outputs_from_secret), since the secret list
 * names only outputs that are secret as a whole. */
static void add_masked_outputs(cJSON *annotations, const cJSON *masked)
{
	char *text = masked ? cJSON_PrintUnformatted(masked) : NULL;

	if (text && strlen(text) <= STACK_MASKED_OUTPUTS_MAX)
		cJSON_AddStringToObject(annotations, STACK_ANN_MASKED_OUTPUTS, text);
	free(text);
}

cJSON *stack_outputs_from_secret(const cJSON *secret)
{
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(secret, "metadata"), *it;
	const cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "annotations"),
	    STACK_ANN_MASKED_OUTPUTS);
	cJSON *out = NULL;

	if (cJSON_IsString(ann) && strlen(ann->valuestring) <= STACK_MASKED_OUTPUTS_MAX)
		out = cJSON_Parse(ann->valuestring);
	if (cJSON_IsObject(out))
		return out;
	cJSON_Delete(out);
	/* Which values hold a secret is not known: none is shown. */
	out = cJSON_CreateObject();
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(secret, "data"))
		cJSON_AddStringToObject(out, it->string, "[secret]");
	return out;
}

static cJSON *outputs_secret(const struct stack_pass *p, const char *name)
{
	const cJSON *plain = p->out.outputs_plain ? p->out.outputs_plain : p->out.outputs, *it;
	cJSON *s = cJSON_CreateObject(), *md, *data, *secrets = cJSON_CreateArray(), *ann;
	char *list;
	const char *uid = kube_obj_str(p->obj, "metadata.uid");

	cJSON_AddStringToObject(s, "apiVersion", "v1");
	cJSON_AddStringToObject(s, "kind", "Secret");
	md = cJSON_AddObjectToObject(s, "metadata");
	cJSON_AddStringToObject(md, "name", name);
	cJSON_AddStringToObject(md, "namespace", p->ns);
	{
		cJSON *labels = cJSON_AddObjectToObject(md, "labels");
		char v[STACK_LABEL_VALUE_MAX];

		stack_label_value(p->name, v);
		cJSON_AddStringToObject(labels, "reconcile.fluxcd.io/watch", "Enabled");
		cJSON_AddStringToObject(labels, STACK_LABEL_NAME, v);
	}
	cJSON_AddItemToObject(md, "ownerReferences", stack_owner_refs(kube_obj_str(p->obj, "apiVersion"), p->name, uid));
	cJSON_AddStringToObject(s, "type", "Opaque");
	data = cJSON_AddObjectToObject(s, "data");
	cJSON_ArrayForEach(it, plain)
		if (add_output(data, secrets, it, cJSON_GetObjectItemCaseSensitive(p->out.outputs, it->string)) < 0) {
			cJSON_Delete(secrets);
			cJSON_Delete(s);
			return NULL;
		}
	sort_strings(secrets);
	list = cJSON_PrintUnformatted(secrets);
	cJSON_Delete(secrets);
	ann = cJSON_AddObjectToObject(md, "annotations");
	cJSON_AddStringToObject(ann, STACK_ANN_SECRETS, list ? list : "[]");
	free(list);
	add_masked_outputs(ann, p->out.outputs);
	return s;
}

int stack_outputs_write(struct stack_pass *p, struct err *e)
{
	char name[300];
	cJSON *want, *have, *res;

	snprintf(name, sizeof(name), "%s-outputs", p->name);
	if ((want = outputs_secret(p, name)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	have = kube_get(p->sc->client, &secret_res, p->ns, name, NULL, e);
	if (have == NULL && e->code != ERR_NOTFOUND) {
		cJSON_Delete(want);
		return -1;
	}
	if (have == NULL) {
		res = kube_create(p->sc->client, &secret_res, p->ns, want, e);
	} else if (!kube_owned_by(have, "Stack", kube_obj_str(p->obj, "metadata.uid"))) {
		cJSON_Delete(have);
		cJSON_Delete(want);
		return err_set(e, ERR_CONFLICT, "Secret %s/%s exists and is not owned by this Stack; the "
		    "outputs are not written (delete or rename it)", p->ns, name), -1;
	} else {
		cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(want, "metadata"), "resourceVersion",
		    kube_obj_str(have, "metadata.resourceVersion"));
		res = kube_update(p->sc->client, &secret_res, p->ns, want, NULL, e);
	}
	cJSON_Delete(have);
	cJSON_Delete(want);   /* outputs in the clear: cJSON frees without wiping; short-lived */
	if (res == NULL)
		return -1;
	cJSON_Delete(res);
	return 0;
}

static void extra_condition(const struct stack_pass *p, cJSON *out, const cJSON *old, const char *type,
    const struct stack_extra_cond *c, int keep,
    void (*add)(cJSON *out, const cJSON *old, const char *type, const char *status,
        const char *reason, const char *message, long long generation))
{
	const cJSON *prev;

	if (c->set) {
		add(out, old, type, c->set > 0 ? "True" : "False", c->reason, c->message, p->generation);
		return;
	}
	cJSON_ArrayForEach(prev, old)
		if (str_eq(kube_obj_str(prev, "type"), type) && keep)
			cJSON_AddItemToArray(out, cJSON_Duplicate(prev, 1));
}

void stack_safety_conditions(const struct stack_pass *p, cJSON *out, const cJSON *old,
    void (*add)(cJSON *out, const cJSON *old, const char *type, const char *status,
        const char *reason, const char *message, long long generation))
{
	/* Kept while the feature is on (a pass that ended early decided
	 * nothing about it); dropped once the spec turns it off. */
	extra_condition(p, out, old, "AwaitingApproval", &p->safety.awaiting,
	    !p->spec_ok || p->spec.approval_manual, add);
	extra_condition(p, out, old, "Drifted", &p->safety.drifted, !p->spec_ok || p->spec.drift_interval_ms > 0 ||
	    p->spec.refresh, add);
}

void stack_safety_free(struct stack_safety *s)
{
	cJSON_Delete(s->preview);
	cJSON_Delete(s->approval);
	cJSON_Delete(s->drift);
	cJSON_Delete(s->drift_steps);
	memset(s, 0, sizeof(*s));
}

int stack_pass_requested(const struct stack_pass *p)
{
	return (p->requested && !str_eq(p->requested, stack_status_str(p, "lastHandledReconcileAt"))) ||
	    (p->request && !str_eq(p->request, stack_status_str(p, "observedReconcileRequest")));
}

/* ------------------------------------------------------------ phase */

static const cJSON *child(const cJSON *o, const char *k)
{
	return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

enum stack_phase stack_phase_of(const cJSON *obj)
{
	const cJSON *st = child(obj, "status");

	if (kube_obj_str(obj, "metadata.deletionTimestamp") != NULL)
		return STACK_PHASE_FINALIZING;
	if (cJSON_IsTrue(child(child(obj, "spec"), "suspend")))
		return STACK_PHASE_SUSPENDED;
	if (cJSON_IsObject(child(st, "currentUpdate")))
		return STACK_PHASE_UPDATING;
	if (str_eq(kube_obj_str(kube_condition(obj, "AwaitingApproval"), "status"), "True"))
		return STACK_PHASE_AWAITING;
	if (cJSON_IsTrue(child(child(st, "drift"), "drifted")))
		return STACK_PHASE_DRIFTED;
	if (str_eq(kube_obj_str(obj, "status.lastUpdate.state"), "failed"))
		return STACK_PHASE_BACKING_OFF;
	return STACK_PHASE_IDLE;
}

const char *stack_phase_name(enum stack_phase ph)
{
	static const char *const names[] = { "Finalizing", "Suspended", "Updating", "AwaitingApproval", "Drifted",
		"BackingOff", "Idle" };

	return (unsigned)ph < sizeof(names) / sizeof(names[0]) ? names[ph] : "?";
}
