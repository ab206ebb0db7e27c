/*
 * stack_prereq.c - prerequisites (spec.prerequisites, and Flux's
 * dependsOn as an alias): a Stack waits until each Stack it names is Ready
 * at its current generation and, when asked (requirement.
 * succeededWithinDuration), succeeded recently.
 *
 * No polling: the Stack cache has an index "prereq" (Stack/<ns>/<name> of
 * every prerequisite, stack_prereq_index), and when a Stack's readiness
 * changes the controller queues every Stack that names it at once
 * (stack_ctl.c, on_stack).  A prerequisite whose last success is too old
 * is asked to run again with the pulumi.com/reconciliation-request
 * annotation, as the Pulumi Kubernetes Operator does.  A cycle is found by
 * walking the cached Stacks and is Stalled.  docs/stack-api.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "stack/stack_gates.h"

#define PREREQ_DEPTH_MAX 64

static const cJSON *at(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* Calls fn for each prerequisite named by obj's raw spec (both lists),
 * until fn returns nonzero (which is returned). */
static int each_prereq(const cJSON *obj, int (*fn)(void *ud, const char *ns, const char *name), void *ud)
{
	static const char *const lists[] = { "prerequisites", "dependsOn" };
	const char *own = kube_obj_str(obj, "metadata.namespace");

	for (size_t l = 0; l < 2; l++) {
		const cJSON *it;
		cJSON_ArrayForEach(it, at(at(obj, "spec"), lists[l])) {
			const char *name = kube_obj_str(it, "name"), *ns = l ? kube_obj_str(it, "namespace") : NULL;
			int rc;
			if (name && own && (rc = fn(ud, ns ? ns : own, name)) != 0)
				return rc;
		}
	}
	return 0;
}

struct index_acc {
	char **out;
	int n, max;
};

static int add_index_value(void *ud, const char *ns, const char *name)
{
	struct index_acc *a = ud;
	size_t len = strlen(ns) + strlen(name) + 8;

	if (a->n >= a->max || (a->out[a->n] = malloc(len)) == NULL)
		return 0;
	snprintf(a->out[a->n], len, "Stack/%s/%s", ns, name);
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->out[i], a->out[a->n]) == 0) {
			free(a->out[a->n]);
			return 0;
		}
	a->n++;
	return 0;
}

int stack_prereq_index(const cJSON *obj, char **out, int max)
{
	struct index_acc a = { out, 0, max };

	each_prereq(obj, add_index_value, &a);
	return a.n;
}

static const cJSON *ready_condition(const cJSON *obj)
{
	return kube_condition(obj, "Ready");
}

int stack_prereq_readiness_changed(const cJSON *old, const cJSON *obj)
{
	const cJSON *a = ready_condition(old), *b = ready_condition(obj);
	const char *sa = a ? kube_obj_str(a, "status") : NULL, *sb = b ? kube_obj_str(b, "status") : NULL;

	if (old == NULL)
		return 1;
	return !str_eq(sa, sb) || (sa == NULL) != (sb == NULL) ||
	    !cJSON_Compare(at(at(old, "status"), "observedGeneration"), at(at(obj, "status"), "observedGeneration"), 1) ||
	    !str_eq(kube_obj_str(old, "status.lastUpdate.endTime"), kube_obj_str(obj, "status.lastUpdate.endTime"));
}

/* Ready=True at its current generation. */
static int is_ready(const cJSON *obj)
{
	const cJSON *c = ready_condition(obj), *gen = at(at(obj, "metadata"), "generation");
	const cJSON *seen = at(at(obj, "status"), "observedGeneration");

	return c && str_eq(kube_obj_str(c, "status"), "True") && cJSON_IsNumber(gen) && cJSON_IsNumber(seen) &&
	    gen->valuedouble == seen->valuedouble;
}

/* ------------------------------------------------------------ cycles */

struct walk {
	struct stack_ctl *sc;
	const char *home_ns, *home_name;
	char path[1024];
	int depth;
	int visits;
};

static int visit(void *ud, const char *ns, const char *name);

static int walk_from(struct walk *w, const cJSON *obj)
{
	return each_prereq(obj, visit, w);
}

/* 1 when following ns/name leads back to the Stack of the walk. */
static int visit(void *ud, const char *ns, const char *name)
{
	struct walk *w = ud;
	size_t len = strlen(w->path);
	cJSON *obj;
	int rc;

	snprintf(w->path + len, sizeof(w->path) - len, " -> %s/%s", ns, name);
	if (str_eq(ns, w->home_ns) && str_eq(name, w->home_name))
		return 1;
	/* Bounded: a deep or wide graph is not walked forever. */
	if (w->depth >= PREREQ_DEPTH_MAX || ++w->visits > 4096 ||
	    (obj = kube_informer_get(w->sc->stacks.inf, ns, name)) == NULL) {
		w->path[len] = '\0';
		return 0;
	}
	w->depth++;
	rc = walk_from(w, obj);
	w->depth--;
	cJSON_Delete(obj);
	if (!rc)
		w->path[len] = '\0';
	return rc;
}

/* ------------------------------------------------------------ the gate */

/* Asks a prerequisite whose success is too old to run again (once per
 * request: not while the last one is unhandled). */
static void request_rerun(struct stack_pass *p, const cJSON *obj, const char *ns, const char *name)
{
	const cJSON *ann = at(at(obj, "metadata"), "annotations");
	const cJSON *req = at(ann, STACK_ANN_REQUEST);
	char patch[300], now[32];
	struct err e;
	cJSON *res;

	if (cJSON_IsString(req) && !str_eq(req->valuestring, kube_obj_str(obj, "status.observedReconcileRequest")))
		return;   /* asked already, not handled yet */
	clock_format_rfc3339(now, sizeof(now), time(NULL));
	snprintf(patch, sizeof(patch), "{\"metadata\":{\"annotations\":{\"%s\":\"%s\"}}}", STACK_ANN_REQUEST, now);
	res = kube_patch(p->sc->client, p->sc->stacks.served, ns, name, NULL, KUBE_PATCH_MERGE, patch, NULL, 0, &e);
	if (res == NULL)
		log_warn("cannot ask a prerequisite to run again", "namespace", ns, "name", name, "error", e.msg, NULL);
	else
		stack_event(p, "Normal", "PrerequisiteRequested", "asked prerequisite %s/%s to run again: its last "
		    "success is older than its requirement", ns, name);
	cJSON_Delete(res);
}

/* 1 with a verdict when prerequisite r is not met. */
static int check_one(struct stack_pass *p, const struct stack_prereq *r)
{
	const char *ns = r->namespace ? r->namespace : p->ns;
	cJSON *obj = kube_informer_get(p->sc->stacks.inf, ns, r->name);
	int64_t end_us;

	if (obj == NULL) {
		stack_verdict(p, STACK_WAITING, "PrerequisiteNotReady", 0, "waiting for prerequisite %s/%s: no such "
		    "Stack", ns, r->name);
		return 1;
	}
	if (!is_ready(obj)) {
		const cJSON *c = ready_condition(obj);
		stack_verdict(p, STACK_WAITING, "PrerequisiteNotReady", 0, "waiting for prerequisite %s/%s: not "
		    "Ready at its generation (%s)", ns, r->name, c && kube_obj_str(c, "reason") ?
		    kube_obj_str(c, "reason") : "no status yet");
		cJSON_Delete(obj);
		return 1;
	}
	end_us = stack_parse_time_us(kube_obj_str(obj, "status.lastUpdate.endTime"));
	if (r->within_ms > 0 && (end_us <= 0 || kube_now_us() - end_us > (int64_t)r->within_ms * 1000)) {
		stack_verdict(p, STACK_WAITING, "PrerequisiteNotReady", 0, "waiting for prerequisite %s/%s: its last "
		    "success is older than %lds (requirement.succeededWithinDuration); it was asked to run again",
		    ns, r->name, r->within_ms / 1000);
		request_rerun(p, obj, ns, r->name);
		cJSON_Delete(obj);
		return 1;
	}
	cJSON_Delete(obj);
	return 0;
}

int stack_prereq_gate(struct stack_pass *p)
{
	struct walk w;

	if (!p->spec_ok || p->deleting || p->spec.n_prereqs == 0 || p->sc->stacks.inf == NULL)
		return 0;
	memset(&w, 0, sizeof(w));
	w.sc = p->sc;
	w.home_ns = p->ns;
	w.home_name = p->name;
	snprintf(w.path, sizeof(w.path), "%s/%s", p->ns, p->name);
	if (walk_from(&w, p->obj)) {
		stack_verdict(p, STACK_STALLED, "PrerequisiteCycle", 0, "the prerequisites form a cycle: %s; "
		    "remove one of them", w.path);
		p->v.event = 1;
		return 1;
	}
	for (size_t i = 0; i < p->spec.n_prereqs; i++)
		if (check_one(p, &p->spec.prereqs[i]))
			return 1;
	return 0;
}
