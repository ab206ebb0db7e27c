/*
 * stack_job_access.c - the objects a Stack's Jobs need before they start:
 * the runner's ServiceAccount, and the Secrets with the Roles and
 * RoleBindings that let exactly that identity write exactly them.
 *
 * Every object is made owned by the Stack (its controller ownerReference),
 * so it goes with it; one that exists and is not the Stack's own (another
 * Stack's, or made by hand) is never taken over: the pass is refused with
 * a message naming it (ObjectNotOwned, ServiceAccountNotOwned).  The Job
 * runner (stack_job.c) calls these before it creates a Job.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/log.h"
#include "base/secret.h"
#include "base/str.h"
#include "stack/stack_exec.h"

static const struct kube_resource sa_res = { "", "v1", "serviceaccounts", "ServiceAccount", 1 };
static const struct kube_resource secrets_res = { "", "v1", "secrets", "Secret", 1 };
static const struct kube_resource roles_res = { "rbac.authorization.k8s.io", "v1", "roles", "Role", 1 };
static const struct kube_resource bindings_res = { "rbac.authorization.k8s.io", "v1", "rolebindings",
	"RoleBinding", 1 };

static const cJSON *at(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static cJSON *owned_object(const struct stack_pass *p, const char *api_version, const char *kind,
    const char *name)
{
	cJSON *o = cJSON_CreateObject(), *md;
	char label[STACK_LABEL_VALUE_MAX];

	stack_label_value(p->name, label);
	cJSON_AddStringToObject(o, "apiVersion", api_version);
	cJSON_AddStringToObject(o, "kind", kind);
	md = cJSON_AddObjectToObject(o, "metadata");
	cJSON_AddStringToObject(md, "name", name);
	cJSON_AddStringToObject(md, "namespace", p->ns);
	cJSON_AddStringToObject(cJSON_AddObjectToObject(md, "labels"), STACK_LABEL_NAME, label);
	cJSON_AddItemToObject(md, "ownerReferences",
	    stack_owner_refs(kube_obj_str(p->obj, "apiVersion"), p->name, kube_obj_str(p->obj, "metadata.uid")));
	return o;
}

/* Creates want unless it exists; an existing one is updated when key
 * (rules, subjects) differs.  One that is not the Stack's (someone else's
 * Secret or binding of that name) is refused (ERR_REFUSED) and left as it
 * is, as the local runner refuses a foreign outputs Secret.  Consumes want. */
static int ensure_unnamed(struct stack_pass *p, const struct kube_resource *r, cJSON *want, const char *key,
    struct err *e)
{
	const char *name = kube_obj_str(want, "metadata.name");
	cJSON *have = kube_get(p->sc->client, r, p->ns, name, NULL, e), *res = NULL;

	if (have == NULL && e->code != ERR_NOTFOUND) {
		cJSON_Delete(want);
		return -1;
	}
	if (have == NULL) {
		res = kube_create(p->sc->client, r, p->ns, want, e);
		if (res == NULL && e->code == ERR_CONFLICT)   /* made meanwhile */
			err_clear(e), res = cJSON_CreateObject();
	} else if (!kube_owned_by(have, "Stack", kube_obj_str(p->obj, "metadata.uid"))) {
		err_set(e, ERR_REFUSED, "exists and is not owned by this Stack (no ownerReference to its uid), so "
		    "it is left as it is and the update does not run: delete or rename it");
	} else if (key == NULL || cJSON_Compare(at(have, key), at(want, key), 1)) {
		res = cJSON_CreateObject();
	} else {
		cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(want, "metadata"), "resourceVersion",
		    kube_obj_str(have, "metadata.resourceVersion"));
		res = kube_update(p->sc->client, r, p->ns, want, NULL, e);
	}
	cJSON_Delete(have);
	cJSON_Delete(want);
	if (res == NULL)
		return -1;
	cJSON_Delete(res);
	return 0;
}

/* ensure_unnamed, its error naming the object ("the Role ns/name: ..."):
 * every caller wants that, and want is consumed before they could read
 * its kind and name back. */
static int ensure(struct stack_pass *p, const struct kube_resource *r, cJSON *want, const char *key,
    struct err *e)
{
	const char *kind = kube_obj_str(want, "kind"), *name = kube_obj_str(want, "metadata.name");
	char what[400];

	/* want is NULL only when building it ran out of memory. */
	snprintf(what, sizeof(what), "the %s %s/%s", kind ? kind : "object", p->ns, name ? name : "");
	if (ensure_unnamed(p, r, want, key, e) < 0)
		return err_prefix(e, "%s", what), -1;
	return 0;
}

/* The uid of have's controller ownerReference to a Stack, or NULL. */
static const char *owner_stack_uid(const cJSON *have)
{
	const cJSON *ref;

	cJSON_ArrayForEach(ref, at(at(have, "metadata"), "ownerReferences"))
		if (str_eq(kube_obj_str(ref, "kind"), "Stack") && cJSON_IsTrue(at(ref, "controller")))
			return kube_obj_str(ref, "uid");
	return NULL;
}

/* A spec.runner.serviceAccountName that another Stack's controller made
 * (its <other>-runner or -planner) would run this Stack's program with the
 * other's rights: 1 (Stalled) for one owned by a different Stack.  One that
 * is missing is left to the kubelet's error, as one owned by no Stack is the
 * user's. */
static int named_sa_refused(struct stack_pass *p, const char *name, struct err *e)
{
	cJSON *have = kube_get(p->sc->client, &sa_res, p->ns, name, NULL, e);
	const char *owner;
	int refused;

	if (have == NULL && e->code != ERR_NOTFOUND)
		return err_prefix(e, "the ServiceAccount %s/%s", p->ns, name), -1;
	err_clear(e);
	owner = owner_stack_uid(have);
	refused = owner != NULL && !str_eq(owner, kube_obj_str(p->obj, "metadata.uid"));
	cJSON_Delete(have);
	if (refused)
		stack_verdict(p, STACK_STALLED, "ServiceAccountNotOwned", 0, "spec.runner.serviceAccountName: the "
		    "ServiceAccount %s/%s is owned by another Stack (the controller made it for that Stack's Jobs, "
		    "with that Stack's rights): name a ServiceAccount dedicated to this Stack's runner, or leave "
		    "the field unset", p->ns, name);
	return refused;
}

int stack_job_ensure_runner(struct stack_pass *p, const char *op, struct err *e)
{
	char name[300];
	const char *owner;
	cJSON *have;

	stack_job_runner_sa(&p->spec, p->name, op, name, sizeof(name));
	if (p->spec.runner.service_account)
		return named_sa_refused(p, p->spec.runner.service_account, e);
	if ((have = kube_get(p->sc->client, &sa_res, p->ns, name, NULL, e)) == NULL && e->code != ERR_NOTFOUND)
		return err_prefix(e, "the ServiceAccount %s/%s", p->ns, name), -1;
	if (have == NULL) {
		err_clear(e);
		return ensure(p, &sa_res, owned_object(p, "v1", "ServiceAccount", name), NULL, e);
	}
	owner = owner_stack_uid(have);
	if (owner == NULL || !str_eq(owner, kube_obj_str(p->obj, "metadata.uid"))) {
		/* Someone else's: granting it the Stack's Secrets would hand them
		 * to whoever else runs as it. */
		cJSON_Delete(have);
		stack_verdict(p, STACK_STALLED, "ServiceAccountNotOwned", 0, "the ServiceAccount %s/%s exists and is "
		    "not owned by this Stack: the Job runner will not take it over; delete or rename it, or set "
		    "spec.runner.serviceAccountName to a ServiceAccount dedicated to this Stack's runner", p->ns, name);
		return 1;
	}
	cJSON_Delete(have);
	return 0;
}

int stack_job_ensure_secret(struct stack_pass *p, const char *secret, int with_secrets_list, struct err *e)
{
	cJSON *s = owned_object(p, "v1", "Secret", secret);

	if (with_secrets_list)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_GetObjectItemCaseSensitive(s, "metadata"),
		    "annotations"), STACK_ANN_SECRETS, "[]");
	cJSON_AddStringToObject(s, "type", "Opaque");
	return ensure(p, &secrets_res, s, NULL, e);
}

/* The Secret secret (empty until the pod writes it), and a Role + RoleBinding
 * role letting the ServiceAccount op's Jobs run as (stack_job_runner_sa:
 * never one shared with other pods) get and update exactly that Secret.
 * with_secrets_list: the outputs Secret's empty list of secret keys. */
int stack_job_ensure_writer(struct stack_pass *p, const char *op, const char *secret, const char *role,
    int with_secrets_list, struct err *e)
{
	char sa_buf[300];
	const char *sa = stack_job_runner_sa(&p->spec, p->name, op, sa_buf, sizeof(sa_buf));
	cJSON *r, *rule, *b, *subj, *ref;

	if (stack_job_ensure_secret(p, secret, with_secrets_list, e) < 0)
		return -1;
	r = owned_object(p, "rbac.authorization.k8s.io/v1", "Role", role);
	rule = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(rule, "apiGroups"), cJSON_CreateString(""));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(rule, "resources"), cJSON_CreateString("secrets"));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(rule, "resourceNames"), cJSON_CreateString(secret));
	cJSON_AddItemToObject(rule, "verbs", cJSON_CreateStringArray((const char *[]){ "get", "update" }, 2));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "rules"), rule);
	if (ensure(p, &roles_res, r, "rules", e) < 0)
		return -1;
	b = owned_object(p, "rbac.authorization.k8s.io/v1", "RoleBinding", role);
	subj = cJSON_CreateObject();
	cJSON_AddStringToObject(subj, "kind", "ServiceAccount");
	cJSON_AddStringToObject(subj, "name", sa);
	cJSON_AddStringToObject(subj, "namespace", p->ns);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "subjects"), subj);
	ref = cJSON_AddObjectToObject(b, "roleRef");
	cJSON_AddStringToObject(ref, "apiGroup", "rbac.authorization.k8s.io");
	cJSON_AddStringToObject(ref, "kind", "Role");
	cJSON_AddStringToObject(ref, "name", role);
	return ensure(p, &bindings_res, b, "subjects", e);
}

/* <name>-outputs and <name>-outputs-writer (for <name>-runner, never the
 * planner). */
int stack_job_ensure_outputs_access(struct stack_pass *p, struct err *e)
{
	char secret[300], role[300];

	snprintf(secret, sizeof(secret), "%s-outputs", p->name);
	snprintf(role, sizeof(role), "%s-outputs-writer", p->name);
	return stack_job_ensure_writer(p, "up", secret, role, 1, e);
}

/* 1 when the Stack's own Secret name still holds values (a backend or
 * secretsProvider since removed from the spec), 0 when it is absent, empty
 * or not the Stack's (then no Job reads it, and it is not ours to touch). */
static int inputs_secret_left_over(struct stack_pass *p, const char *name, struct err *e)
{
	cJSON *have = kube_get(p->sc->client, &secrets_res, p->ns, name, NULL, e);
	int left;

	if (have == NULL) {
		if (e->code != ERR_NOTFOUND)
			return -1;
		err_clear(e);
		return 0;
	}
	left = kube_owned_by(have, "Stack", kube_obj_str(p->obj, "metadata.uid")) &&
	    cJSON_GetArraySize(at(have, "data")) > 0;
	cJSON_Delete(have);
	return left;
}

/* The Secret <name>-job-inputs with the backend, secretsProvider and
 * literal secret config a Job's pod reads (stack_job_inputs_data; never
 * literal in the Job), owned by the Stack and updated when they change.
 * None is made when there is none; one left from when there were is
 * emptied (the base role has no delete), so a credential taken out of the
 * spec does not stay in the namespace. */
int stack_job_ensure_inputs(struct stack_pass *p, struct err *e)
{
	char name[300];
	cJSON *s, *data = stack_job_inputs_data(&p->spec);
	int left;

	if (data == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	stack_job_inputs_secret_name(p->name, name, sizeof(name));
	if (cJSON_GetArraySize(data) == 0 && (left = inputs_secret_left_over(p, name, e)) != 1) {
		cJSON_Delete(data);
		if (left < 0)
			return err_prefix(e, "the Secret %s/%s", p->ns, name), -1;
		return 0;
	}
	s = owned_object(p, "v1", "Secret", name);
	cJSON_AddStringToObject(s, "type", "Opaque");
	cJSON_AddItemToObject(s, "data", data);
	return ensure(p, &secrets_res, s, "data", e);
}

int stack_job_plan_access(struct stack_pass *p, struct err *e)
{
	char secret[300], role[300];

	stack_job_plan_result_name(p->name, secret, sizeof(secret));
	snprintf(role, sizeof(role), "%s-plan-writer", p->name);
	if (stack_job_ensure_writer(p, STACK_JOB_OP_PLAN, secret, role, 0, e) < 0)
		return -1;
	/* The plan up Jobs mount: the controller's alone (no Role). */
	stack_job_plan_secret_name(p->name, secret, sizeof(secret));
	return stack_job_ensure_secret(p, secret, 0, e);
}
