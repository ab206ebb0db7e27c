/*
 * stack_job_lock.c - a lock left by the pod of an earlier Job of this Stack
 * (docs/job-runner.md, "Locks").
 *
 * Locally a lock left by a killed CLI is recognised by its host (this
 * controller's identity) and a dead pid.  In job mode every update runs on a
 * new host, the pod, so a pod killed hard (SIGKILL past its grace period, an
 * OOM kill, a lost node) leaves a lock no later pod would ever call its own.
 *
 * The controller decides, the pod acts:
 *   1. an update Job fails with a lock conflict; its termination message
 *      names the holder, which status.lastUpdate.lockHolder keeps;
 *   2. before the next Job of the Stack is created, stack_job_stale_lock()
 *      checks that the holder's host is the name of a pod of one of this
 *      Stack's Jobs (stack_job_pod_host) and that no such pod is still
 *      running (one LIST of the namespace's Job pods, only in this case);
 *   3. the new Job gets that holder as "cancelLock", and run-update cancels
 *      a lock held by exactly that owner, once (stack_update.c).
 * A holder that is anyone else, or a pod still running, is never broken.
 *
 * The parser of a Stack's Job names that step 2 needs also tells the Job
 * slots (stack_job_slots.c) whether a Job has the name the controller gives
 * that Stack's Jobs (stack_job_is_named).
 */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "stack/stack_exec.h"

#define HOST_MAX 63                 /* a pod's hostname: its name, cut to 63 */
#define FP_CHARS 10                 /* stack_job_name's fingerprint part */
#define POD_SUFFIX 6                /* "-" and the 5 characters the Job controller adds */

static const struct kube_resource pods_res = { "", "v1", "pods", "Pod", 1 };

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static int is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_lower(char c)
{
	return c >= 'a' && c <= 'z';
}

static int all(const char *s, size_t n, int (*ok)(char))
{
	for (size_t i = 0; i < n; i++)
		if (!ok(s[i]))
			return 0;
	return 1;
}

/* host is name + "-xxxxx" cut to 63 characters (a pod's hostname). */
static int pod_host_of_job(const char *job, const char *host)
{
	size_t jl = strlen(job), hl = strlen(host), want = jl + POD_SUFFIX;

	if (want > HOST_MAX)
		want = HOST_MAX;
	if (hl != want || strncmp(host, job, jl) != 0)
		return 0;
	if (hl == jl)
		return 1;
	if (host[jl] != '-')
		return 0;
	return all(host + jl + 1, hl - jl - 1, is_lower_alnum);
}

/* Is s, or what fits says of it, the name stack_job_name(stack, op, fp)
 * gives for some op (lower-case letters) and fp (10 hex)?  fits(job, s)
 * compares one such name with s. */
static int named_like(const char *stack, const char *s, int (*fits)(const char *job, const char *s))
{
	char op[24], fp[FP_CHARS + 1], job[80];

	/* The op part's length decides how much of the Stack's name the Job's
	 * name kept: try each. */
	for (size_t ol = 1; ol < sizeof(op); ol++) {
		const char *rest;
		size_t i;

		memset(op, 'a', ol);
		op[ol] = '\0';
		memset(fp, '0', FP_CHARS);
		fp[FP_CHARS] = '\0';
		if (stack_job_name(stack, op, fp, job, sizeof(job)) < 0)
			break;
		/* job is <kept stack>-<op>-<fp>: the kept part ends ol + 12 before. */
		i = strlen(job) - ol - FP_CHARS - 2;
		if (strncmp(s, job, i + 1) != 0 || strlen(s) < i + 1 + ol + 1 + FP_CHARS)
			continue;
		rest = s + i + 1;
		if (!all(rest, ol, is_lower) || rest[ol] != '-' || !all(rest + ol + 1, FP_CHARS, is_hex))
			continue;
		memcpy(op, rest, ol);
		memcpy(fp, rest + ol + 1, FP_CHARS);
		if (stack_job_name(stack, op, fp, job, sizeof(job)) == 0 && fits(job, s))
			return 1;
	}
	return 0;
}

int stack_job_pod_host(const char *stack, const char *host)
{
	return named_like(stack, host, pod_host_of_job);
}

static int same_name(const char *job, const char *name)
{
	return strcmp(job, name) == 0;
}

int stack_job_is_named(const char *stack, const char *job)
{
	return named_like(stack, job, same_name);
}

static int pod_finished(const cJSON *pod)
{
	const char *phase = kube_obj_str(pod, "status.phase");

	return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

/* 1 when no pod of this namespace's Jobs with hostname host is still
 * running; 0 when one is; -1 with e when the list failed. */
static int holder_gone(struct stack_pass *p, const char *host, struct err *e)
{
	struct kube_list_opts lo;
	cJSON *list;
	const cJSON *it;
	int gone = 1;

	memset(&lo, 0, sizeof(lo));
	lo.label_selector = STACK_JOB_LABEL_MANAGED "=" STACK_JOB_MANAGER;
	if ((list = kube_list(p->sc->client, &pods_res, p->ns, &lo, e)) == NULL)
		return -1;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items")) {
		const char *name = kube_obj_str(it, "metadata.name");
		int same = name && (strcmp(name, host) == 0 ||
		    (strlen(host) == HOST_MAX && strncmp(name, host, HOST_MAX) == 0));
		if (same && !pod_finished(it))
			gone = 0;
	}
	cJSON_Delete(list);
	return gone;
}

const char *stack_job_stale_lock(struct stack_pass *p, char *out, size_t n)
{
	const char *owner = stack_status_str(p, "lastUpdate.lockHolder");
	const char *at = owner ? strrchr(owner, '@') : NULL;
	const char *host = at ? at + 1 : owner;
	struct err e;
	int gone;

	if (owner == NULL || host[0] == '\0' || strlen(owner) >= n || !stack_job_pod_host(p->name, host))
		return NULL;
	if ((gone = holder_gone(p, host, &e)) < 0) {
		log_warn("cannot tell whether a lock's holder pod is gone; the lock is kept", "namespace", p->ns,
		    "name", p->name, "holder", owner, "error", e.msg, NULL);
		return NULL;
	}
	if (!gone)
		return NULL;
	snprintf(out, n, "%s", owner);
	return out;
}
