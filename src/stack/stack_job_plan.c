/*
 * stack_job_plan.c - spec.approval: Manual with the Job runner: the plan's
 * way from the preview's pod to the controller and to the up Job's pod
 * (docs/job-runner.md, "Approval").
 *
 * The plan (`preview --save-plan`) is made in a Job of its own (op "plan").
 * Its pod hands the plan back in the Secret <name>-plan-result, which the
 * controller created empty, owned by the Stack, with a Role letting the
 * runner's ServiceAccount get and update exactly that Secret.  The
 * controller reads it, parses it strictly (stack_plan_parse: a plan the
 * pulumi CLI would read otherwise is refused), computes its id, and copies
 * exactly those bytes into <name>-plan, a Secret only the controller
 * writes (no Role names it), and describes it in status.preview
 * (stack_approval.c does the rest, as locally).  The up Job of an approved
 * plan mounts <name>-plan (a Secret volume needs no RBAC) and carries only
 * the plan's id; its pod computes the id of the plan it was given, refuses
 * (plan-violation) one that is not the approved one, and hands the CLI the
 * very bytes it checked.  The runner's identity can so never write the plan
 * it is judged by.  The plan itself never enters a Job spec.
 *
 * The controller's side is here; the pod's is stack_runner_plan.c.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base64.h"
#include "base/fs.h"
#include "base/log.h"
#include "stack/stack_exec.h"

/* A Secret holds at most 1 MiB; the plan goes in base64. */
#define PLAN_SECRET_MAX_BYTES (700L * 1024)

static const struct kube_resource plan_secret_res = { "", "v1", "secrets", "Secret", 1 };

/* Replaces the Secret's data with the plan (ud: its base64). */
static int put_plan(void *ud, cJSON *obj, struct err *e)
{
	cJSON *data;

	(void)e;
	cJSON_DeleteItemFromObjectCaseSensitive(obj, "data");
	data = cJSON_AddObjectToObject(obj, "data");
	cJSON_AddStringToObject(data, STACK_JOB_PLAN_KEY, ud);
	return 1;
}

/* GET and PUT of the plan into ns/name with client c. */
int stack_job_plan_put(struct kube_client *c, const char *ns, const char *name, const char *text, size_t len,
    struct err *e)
{
	char *b64;
	cJSON *res;

	if ((b64 = base64_encode(text, len)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	res = kube_modify(c, &plan_secret_res, ns, name, NULL, 3, put_plan, b64, e);
	free(b64);
	if (res == NULL)
		return err_prefix(e, "the Secret %s/%s: ", ns, name), -1;
	cJSON_Delete(res);
	return 0;
}

/* ------------------------------------------------------------ the controller */

char *stack_job_plan_read(struct stack_pass *p, size_t *len, struct err *e)
{
	char name[300];
	cJSON *sec;
	char *text;

	*len = 0;
	stack_job_plan_result_name(p->name, name, sizeof(name));
	if ((sec = kube_get(p->sc->client, &plan_secret_res, p->ns, name, NULL, e)) == NULL)
		return NULL;
	/* NUL-terminated, so the plan reads as text. */
	text = (char *)kube_secret_value(sec, STACK_JOB_PLAN_KEY, len, e);
	if (text == NULL && e->code == ERR_NOTFOUND)
		err_set(e, ERR_NOTFOUND, "the Secret %s/%s has no %s", p->ns, name, STACK_JOB_PLAN_KEY);
	cJSON_Delete(sec);
	return text;
}

int stack_job_plan_store(struct stack_pass *p, const char *text, size_t len, struct err *e)
{
	char name[300];

	stack_job_plan_secret_name(p->name, name, sizeof(name));
	return stack_job_plan_put(p->sc->client, p->ns, name, text, len, e);
}


