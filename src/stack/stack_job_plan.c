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
 * Both sides are here: the controller's (stack_job_plan_*) and the pod's
 * (stack_run_plan*, called from stack_runner.c).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base64.h"
#include "base/fs.h"
#include "base/log.h"
#include "stack/stack_internal.h"

/* A Secret holds at most 1 MiB; the plan goes in base64. */
#define PLAN_SECRET_MAX_BYTES (700L * 1024)

static const struct kube_resource plan_secret_res = { "", "v1", "secrets", "Secret", 1 };

void stack_job_plan_secret_name(const char *stack, char *out, size_t n)
{
	snprintf(out, n, "%s-plan", stack);
}

void stack_job_plan_result_name(const char *stack, char *out, size_t n)
{
	snprintf(out, n, "%s-plan-result", stack);
}

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
static int put_plan_secret(struct kube_client *c, const char *ns, const char *name, const char *text, size_t len,
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

char *stack_job_plan_read(struct stack_pass *p, size_t *len, struct err *e)
{
	char name[300];
	cJSON *sec;
	const cJSON *v;
	unsigned char *raw = NULL;
	size_t n = 0;
	char *text = NULL;

	*len = 0;
	stack_job_plan_result_name(p->name, name, sizeof(name));
	if ((sec = kube_get(p->sc->client, &plan_secret_res, p->ns, name, NULL, e)) == NULL)
		return NULL;
	v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sec, "data"), STACK_JOB_PLAN_KEY);
	if (!cJSON_IsString(v)) {
		err_set(e, ERR_NOTFOUND, "the Secret %s/%s has no %s", p->ns, name, STACK_JOB_PLAN_KEY);
	} else if (base64_decode(v->valuestring, strlen(v->valuestring), &raw, &n, e) == 0) {
		text = malloc(n + 1);
		if (text) {
			memcpy(text, raw, n);
			text[n] = '\0';
			*len = n;
		}
		free(raw);
	}
	cJSON_Delete(sec);
	return text;
}

int stack_job_plan_fetch(struct stack_pass *p, char **text, size_t *len)
{
	struct err e;
	char name[300];

	*text = NULL;
	if (stack_job_step(p, STACK_JOB_OP_PLAN))
		return 1;
	/* The plan's preview is reported as the local one is. */
	p->out.type = "preview";
	if (!p->out.ok)
		return -1;
	if ((*text = stack_job_plan_read(p, len, &e)) == NULL) {
		stack_job_plan_result_name(p->name, name, sizeof(name));
		p->out.ok = 0;
		p->out.status = PL_INTERNAL;
		snprintf(p->out.message, sizeof(p->out.message), "the plan Job succeeded, but no plan can be read "
		    "from the Secret %s/%s: %s", p->ns, name, e.msg);
		return -1;
	}
	return 0;
}

int stack_job_plan_store(struct stack_pass *p, const char *text, size_t len, struct err *e)
{
	char name[300];

	stack_job_plan_secret_name(p->name, name, sizeof(name));
	return put_plan_secret(p->sc->client, p->ns, name, text, len, e);
}

/* ------------------------------------------------------------ the pod */

static void run_fail(struct stack_pass *p, enum pl_status st, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void run_fail(struct stack_pass *p, enum pl_status st, const char *type, const char *fmt, ...)
{
	va_list ap;

	p->out.ran = 1;
	p->out.ok = 0;
	p->out.status = st;
	p->out.type = type;
	va_start(ap, fmt);
	vsnprintf(p->out.message, sizeof(p->out.message), fmt, ap);
	va_end(ap);
}

/* The plan into in->plan_secret with the pod's own token. */
static int write_plan_secret(const struct stack_run_input *in, const struct stack_run_opts *o, const char *text,
    size_t len, struct err *e)
{
	struct kube_client *c;
	int rc;

	if ((c = stack_run_client(o, e)) == NULL)
		return -1;
	rc = put_plan_secret(c, in->namespace, in->plan_secret, text, len, e);
	kube_client_free(c);
	return rc;
}

void stack_run_plan(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o)
{
	char path[PATH_MAX];
	char *text = NULL;
	size_t len = 0;
	struct err e;

	if (stack_plan_preview(p, o->work_dir, path, sizeof(path)) < 0)
		return;
	if (fs_read_file(path, PLAN_SECRET_MAX_BYTES, &text, &len, &e) < 0) {
		run_fail(p, PL_INTERNAL, "preview", "preview --save-plan wrote no plan the Secret %s can hold: %s",
		    in->plan_secret, e.msg);
		return;
	}
	if (write_plan_secret(in, o, text, len, &e) < 0) {
		log_warn("cannot write the plan Secret", "error", e.msg, NULL);
		run_fail(p, PL_INTERNAL, "preview", "the plan was made but not written: %s", e.msg);
	}
	free(text);
}

int stack_run_plan_load(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o)
{
	char path[PATH_MAX], pinned[PATH_MAX], id[65] = "";
	char *text = NULL;
	size_t len = 0;
	int changes = 0;
	struct err e;

	if (o->plan_dir == NULL) {
		run_fail(p, PL_INTERNAL, "up", "the update applies plan %s, but run-update has no --plan-dir",
		    in->plan_id);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", o->plan_dir, STACK_JOB_PLAN_KEY);
	if (fs_read_file(path, PLAN_SECRET_MAX_BYTES, &text, &len, &e) < 0) {
		run_fail(p, PL_INTERNAL, "up", "the approved plan %s cannot be read: %s", in->plan_id, e.msg);
		return -1;
	}
	if (stack_plan_id(text, len, in->plan_after, id, &changes, &e) < 0 || strcmp(id, in->plan_id) != 0) {
		/* The Secret was changed after the approval (or by a newer
		 * preview): this is not what was reviewed. */
		run_fail(p, PL_PLAN_VIOLATION, "up", "the plan given to this Job is %s, not the approved plan %s; "
		    "nothing was applied", id[0] ? id : "refused", in->plan_id);
		if (!id[0])
			log_warn("the mounted plan is refused", "error", e.msg, NULL);
		free(text);
		return -1;
	}
	/* The CLI reads the bytes just checked, not the volume (which the
	 * kubelet may swap at any time). */
	snprintf(pinned, sizeof(pinned), "%s/plan-approved.json", o->work_dir);
	if (fs_write_file(pinned, text, len, 0600, &e) < 0) {
		run_fail(p, PL_INTERNAL, "up", "the approved plan %s cannot be kept: %s", in->plan_id, e.msg);
		free(text);
		return -1;
	}
	free(text);
	log_info("applying the approved plan", "planId", id, NULL);
	snprintf(p->safety.plan_file, sizeof(p->safety.plan_file), "%s", pinned);
	return 0;
}
