/*
 * stack_shared.c - the controller's state that every pass reads: its
 * options, the caches of Stacks and sources, and the pulumi operations
 * running now.
 *
 * struct stack_ctl (stack_model.h) is built, watched and freed by the
 * controller above everything (stack_ctl.c); the layers below it need only
 * these reads and the running-operations list, so they live here, under
 * the pass, and nothing below the controller calls up into it.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "fluxsource/fluxsource.h"
#include "stack/stack_model.h"

void stack_opts_default(struct stack_opts *o)
{
	*o = (struct stack_opts){
		.storage_path = "/var/lib/pulumi-controller",
		.update_timeout_ms = 30L * 60 * 1000,
		.max_artifact_bytes = FLUX_DEFAULT_MAX_ARTIFACT_BYTES,
		.requeue_dependency_ms = 30000,
		.lock_grace_ms = 45000,
		.max_failures = 5,
		.watch_idle_timeout_s = 120,
		.max_concurrent_jobs = 10,
		.job_ttl_s = 3600,
		.job_start_timeout_ms = 5L * 60 * 1000,
	};
}

/* The kinds being watched (a Flux kind not served is left out). */
int stack_ctl_kinds(struct stack_ctl *sc, struct stack_kind **out)
{
	struct stack_kind *every[STACK_KINDS_MAX] = { &sc->stacks, &sc->sources[0], &sc->sources[1],
	    &sc->sources[2], &sc->configmaps, &sc->secrets, &sc->jobs, &sc->programs };
	int n = 0;

	for (int i = 0; i < STACK_KINDS_MAX; i++)
		if (atomic_load(&every[i]->live))
			out[n++] = every[i];
	return n;
}

int stack_ctl_has_stack_uid(struct stack_ctl *sc, const char *key, const char *uid)
{
	const char *slash = strchr(key, '/');
	char ns[254];
	cJSON *obj;
	int has;

	if (sc->stacks.inf == NULL)
		return 1;
	if (slash == NULL || (size_t)(slash - key) >= sizeof(ns))
		return 0;
	snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
	obj = kube_informer_get(sc->stacks.inf, ns, slash + 1);
	has = obj != NULL && (uid == NULL || (kube_obj_str(obj, "metadata.uid") &&
	    strcmp(kube_obj_str(obj, "metadata.uid"), uid) == 0));
	cJSON_Delete(obj);
	return has;
}

int stack_ctl_has_stack(struct stack_ctl *sc, const char *key)
{
	return stack_ctl_has_stack_uid(sc, key, NULL);
}

int stack_ctl_synced(struct stack_ctl *sc)
{
	struct stack_kind *all[STACK_KINDS_MAX];
	int n = stack_ctl_kinds(sc, all);

	if (sc->stacks.inf == NULL)
		return 0;
	for (int i = 0; i < n; i++)
		if (all[i]->inf && !kube_informer_synced(all[i]->inf))
			return 0;
	return 1;
}

size_t stack_ctl_stack_count(struct stack_ctl *sc)
{
	return sc->stacks.inf ? kube_informer_count(sc->stacks.inf) : 0;
}

struct stack_kind *stack_ctl_source_kind(struct stack_ctl *sc, const char *kind)
{
	for (int i = 0; i < 3; i++)
		if (atomic_load(&sc->sources[i].live) && strcmp(sc->sources[i].res[0].kind, kind) == 0)
			return &sc->sources[i];
	return NULL;
}

/* Before anything expensive: is the cached object the server's latest? */
int stack_ctl_refresh(struct stack_pass *p)
{
	struct err e;
	cJSON *fresh = kube_get(p->sc->client, p->sc->stacks.served, p->ns, p->name, NULL, &e);
	const char *rv_fresh, *rv_cached;

	if (fresh == NULL) {
		if (e.code == ERR_NOTFOUND) {
			p->gone = 1;
			return 1;
		}
		p->retry = 1;
		p->err = e;
		return 1;
	}
	kube_strip_object(fresh);
	rv_fresh = kube_obj_str(fresh, "metadata.resourceVersion");
	rv_cached = kube_obj_str(p->obj, "metadata.resourceVersion");
	if ((rv_fresh == NULL && rv_cached == NULL) || str_eq(rv_fresh, rv_cached)) {
		cJSON_Delete(fresh);
		return 0;
	}
	cJSON_Delete(p->obj);
	p->obj = fresh;
	p->status = cJSON_GetObjectItemCaseSensitive(fresh, "status");
	p->stale = 1;
	return 1;
}

int stack_ctl_track(struct stack_ctl *sc, struct stack_running *r, struct pl_stack *pl)
{
	int ok;

	pthread_mutex_lock(&sc->lock);
	ok = !sc->interrupted;
	if (ok) {
		r->pl = pl;
		r->next = sc->running;
		sc->running = r;
	}
	pthread_mutex_unlock(&sc->lock);
	return ok ? 0 : -1;
}

void stack_ctl_untrack(struct stack_ctl *sc, struct stack_running *r)
{
	pthread_mutex_lock(&sc->lock);
	for (struct stack_running **pp = &sc->running; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	pthread_mutex_unlock(&sc->lock);
}

void stack_ctl_interrupt(struct stack_ctl *sc)
{
	int n = 0;

	pthread_mutex_lock(&sc->lock);
	sc->interrupted = 1;
	sc->cancel = 1;
	for (struct stack_running *r = sc->running; r; r = r->next, n++)
		pl_interrupt(r->pl);
	pthread_mutex_unlock(&sc->lock);
	if (n > 0) {
		char count[16];
		snprintf(count, sizeof(count), "%d", n);
		log_warn("interrupting running pulumi operations", "count", count, NULL);
	}
}

cJSON *stack_owner_refs(const char *api_version, const char *name, const char *uid)
{
	cJSON *refs = cJSON_CreateArray(), *ref = cJSON_CreateObject();

	cJSON_AddStringToObject(ref, "apiVersion", api_version ? api_version : "pulumi.com/v1");
	cJSON_AddStringToObject(ref, "kind", "Stack");
	cJSON_AddStringToObject(ref, "name", name);
	cJSON_AddStringToObject(ref, "uid", uid ? uid : "");
	cJSON_AddBoolToObject(ref, "controller", 1);
	cJSON_AddBoolToObject(ref, "blockOwnerDeletion", 1);
	cJSON_AddItemToArray(refs, ref);
	return refs;
}
