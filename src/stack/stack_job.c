/*
 * stack_job.c - the Job runner: an update as a batch/v1 Job instead of a
 * local CLI (docs/job-runner.md).
 *
 * A worker never waits for a Job.  A step of an operation (stack_job_step,
 * the Job executor's run: stack_exec_job.c) finds
 * the Stack's Job for these inputs in the Job cache or creates it, and the
 * pass ends Reconciling (JobRunning, WaitingForJobSlot); the Job informer
 * (stack_ctl.c) queues the Stack when its Job changes, and the pass that
 * finds it finished reads the result from the pod's termination message
 * (and, on failure, the pod's log tail) into p->out, the same outcome the
 * local runner fills, so verdicts, backoff, events and history are the
 * local runner's code.  After the status recorded it, the Job is annotated
 * (stack_job_after_status): a later update for the same inputs (a retry,
 * a resync) replaces it instead of reading the old result again.
 *
 * Names are deterministic (<stack>-<op>-<fingerprint>), so a controller
 * restarted while a Job runs finds it and adopts it; a create that
 * conflicts adopts too.  Slots: at most --max-concurrent-jobs Jobs run at
 * once (stack_job_slots.c).
 */
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/log.h"
#include "base/secret.h"
#include "base/str.h"
#include "stack/stack_exec.h"

#define GONE_RETRY_MS 2000L
#define JOB_FORBIDDEN_RETRY_MS 60000L  /* JobForbidden: until the rights are bound */
#define LOG_TAIL_LINES 20
#define LOG_TAIL_BYTES 2048
#define TAIL_IN_MESSAGE 240

static const struct kube_resource jobs_res = { "batch", "v1", "jobs", "Job", 1 };
static const struct kube_resource pods_res = { "", "v1", "pods", "Pod", 1 };
static const struct kube_resource secrets_res = { "", "v1", "secrets", "Secret", 1 };

static const cJSON *at(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* ------------------------------------------------------------ Job state */

static const char *condition_true(const cJSON *job, const char *type, const char **reason)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, at(at(job, "status"), "conditions"))
		if (str_eq(kube_obj_str(c, "type"), type) && str_eq(kube_obj_str(c, "status"), "True")) {
			if (reason)
				*reason = kube_obj_str(c, "reason");
			return type;
		}
	return NULL;
}

int stack_job_finished(const cJSON *job)
{
	return condition_true(job, "Complete", NULL) || condition_true(job, "Failed", NULL);
}

static void job_key(const char *ns, const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", ns, name);
}

static int recorded(const cJSON *job)
{
	return at(at(at(job, "metadata"), "annotations"), STACK_JOB_ANN_RECORDED) != NULL;
}

/* Deletes the Job name, but only while it is the Job the pass saw (uid):
 * the Job cache can be behind the server, and a Job of that name created
 * since (the same op at the same inputs, run again) must not be killed by a
 * decision about the old one.  Background propagation: its pod goes with it
 * (an API DELETE of a Job orphans pods by default).  0 deleted or gone; 1
 * another Job holds the name now; -1 with e set. */
static int delete_job(struct stack_pass *p, const char *name, const char *uid, struct err *e)
{
	char *path = kube_path(&jobs_res, p->ns, name, NULL), opts[200];
	long status = 0;
	char *body = NULL;
	int rc;

	if (path == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	if (uid && strlen(uid) < 64 && strspn(uid, "0123456789abcdefABCDEF-") == strlen(uid))
		snprintf(opts, sizeof(opts), "{\"propagationPolicy\":\"Background\",\"preconditions\":{\"uid\":\"%s\"}}",
		    uid);
	else
		snprintf(opts, sizeof(opts), "{\"propagationPolicy\":\"Background\"}");
	rc = kube_request(p->sc->client, "DELETE", path, "application/json", opts, &status, &body, e);
	free(body);
	free(path);
	if (rc < 0 && e->code == ERR_NOTFOUND)
		return 0;
	if (rc < 0 && e->code == ERR_CONFLICT) {
		err_clear(e);
		return 1;
	}
	return rc;
}

/* ------------------------------------------------------------ the pod */

/* The selector of the pods the Job controller made for this Job: its
 * controller-uid label, which only it sets to the Job's uid; the job-name
 * label alone is anyone's to give a pod.  -1 without a uid. */
int stack_job_pod_selector(const char *job, const char *uid, char *out, size_t n)
{
	if (job == NULL || uid == NULL || uid[0] == '\0')
		return -1;
	snprintf(out, n, "batch.kubernetes.io/job-name=%s,batch.kubernetes.io/controller-uid=%s", job, uid);
	return 0;
}

/* The newest pod of the Job (caller frees), or NULL. */
static cJSON *job_pod(struct stack_pass *p, const cJSON *job, struct err *e)
{
	char sel[256];
	struct kube_list_opts lo;
	cJSON *list, *best = NULL;
	const cJSON *it;
	const char *best_ts = NULL;

	err_clear(e);
	memset(&lo, 0, sizeof(lo));
	if (stack_job_pod_selector(kube_obj_str(job, "metadata.name"), kube_obj_str(job, "metadata.uid"), sel,
	    sizeof(sel)) < 0)
		return err_set(e, ERR_INVALID, "the Job has no metadata.uid"), NULL;
	lo.label_selector = sel;
	if ((list = kube_list(p->sc->client, &pods_res, p->ns, &lo, e)) == NULL)
		return NULL;
	cJSON_ArrayForEach(it, at(list, "items")) {
		const char *ts = kube_obj_str(it, "metadata.creationTimestamp");
		if (best == NULL || (ts && best_ts && strcmp(ts, best_ts) > 0)) {
			best = (cJSON *)it;
			best_ts = ts;
		}
	}
	best = best ? cJSON_Duplicate(best, 1) : NULL;
	cJSON_Delete(list);
	return best;
}

static const cJSON *update_container_status(const cJSON *pod)
{
	const cJSON *cs;

	cJSON_ArrayForEach(cs, at(at(pod, "status"), "containerStatuses"))
		if (str_eq(kube_obj_str(cs, "name"), "update"))
			return cs;
	return NULL;
}

static int pod_started(const cJSON *pod)
{
	const char *phase = kube_obj_str(pod, "status.phase");
	const cJSON *cs = update_container_status(pod);

	return str_eq(phase, "Running") || str_eq(phase, "Succeeded") || str_eq(phase, "Failed") ||
	    at(at(cs, "state"), "running") || at(at(cs, "state"), "terminated");
}

/* Why a pod has not started: PodScheduled=False, or its container waiting
 * (ErrImagePull...). */
static void pod_not_started_reason(const cJSON *pod, char *out, size_t n)
{
	const cJSON *c, *w = at(at(update_container_status(pod), "state"), "waiting");

	if (pod == NULL) {
		snprintf(out, n, "no pod was created for it");
		return;
	}
	if (w && kube_obj_str(w, "reason")) {
		snprintf(out, n, "%s: %s", kube_obj_str(w, "reason"),
		    kube_obj_str(w, "message") ? kube_obj_str(w, "message") : "the container is waiting");
		return;
	}
	cJSON_ArrayForEach(c, at(at(pod, "status"), "conditions"))
		if (str_eq(kube_obj_str(c, "type"), "PodScheduled") && str_eq(kube_obj_str(c, "status"), "False")) {
			snprintf(out, n, "%s: %s", kube_obj_str(c, "reason") ? kube_obj_str(c, "reason") : "Unschedulable",
			    kube_obj_str(c, "message") ? kube_obj_str(c, "message") : "the pod cannot be scheduled");
			return;
		}
	snprintf(out, n, "the pod is %s", kube_obj_str(pod, "status.phase") ? kube_obj_str(pod, "status.phase") :
	    "Pending");
}

/* text with every secret input of the Stack masked the way the local
 * runner's driver masks its output (pl_spec_redact: the same secrets, a
 * new string): the pod must not print one, and the controller does not
 * repeat one if it did.  Caller frees; NULL (show nothing) when out of
 * memory. */
static char *redact(const struct stack_pass *p, const char *text)
{
	struct pl_spec s;

	stack_pl_spec_inputs(p, &s);
	return pl_spec_redact(&s, text);
}

/* The last lines of the pod's log, one line of text, at most n - 1 bytes,
 * secrets masked; "" when it cannot be read. */
static void log_tail(struct stack_pass *p, const cJSON *pod, char *out, size_t n)
{
	const char *name = kube_obj_str(pod, "metadata.name");
	char *path, full[1200], *body = NULL, *masked, *nl;
	long status = 0;
	struct err e;
	size_t len;

	out[0] = '\0';
	if (name == NULL || (path = kube_path(&pods_res, p->ns, name, "log")) == NULL)
		return;
	snprintf(full, sizeof(full), "%s?container=update&tailLines=%d&limitBytes=%d", path, LOG_TAIL_LINES,
	    LOG_TAIL_BYTES);
	free(path);
	if (kube_request(p->sc->client, "GET", full, NULL, NULL, &status, &body, &e) < 0 || body == NULL) {
		log_warn("cannot read the log of a Job's pod", "namespace", p->ns, "pod", name, "error",
		    body ? "" : e.msg, NULL);
		free(body);
		return;
	}
	/* limitBytes cut the end, maybe inside a secret, whose start no longer
	 * matches it: the last (partial) line goes. */
	len = strlen(body);
	if (len >= LOG_TAIL_BYTES && (nl = strrchr(body, '\n')) != NULL)
		*nl = '\0';
	else if (len >= LOG_TAIL_BYTES)
		body[0] = '\0';
	/* Masked before the lines are joined: a multi-line secret is masked
	 * line by line too. */
	masked = redact(p, body);
	secret_wipe(body, len);
	free(body);
	if (masked == NULL)
		return;
	for (char *c = masked; *c; c++)
		if (*c == '\n' || *c == '\r' || *c == '\t')
			*c = ' ';
	len = strlen(masked);
	while (len > 0 && masked[len - 1] == ' ')
		masked[--len] = '\0';
	snprintf(out, n, "%s", len > n - 1 ? masked + len - (n - 1) : masked);
	free(masked);
}

/* ------------------------------------------------------------ result */

static enum pl_status status_named(const char *name)
{
	for (int s = PL_OK; s <= PL_INTERNAL; s++)
		if (str_eq(pl_status_name((enum pl_status)s), name))
			return (enum pl_status)s;
	return PL_FAILED;
}

static void lock_from(struct pl_lock *l, const cJSON *j)
{
	if (!cJSON_IsObject(j))
		return;
	l->present = 1;
	snprintf(l->owner, sizeof(l->owner), "%s", kube_obj_str(j, "owner") ? kube_obj_str(j, "owner") : "");
	l->pid = cJSON_IsNumber(at(j, "pid")) ? (long)at(j, "pid")->valuedouble : 0;
	snprintf(l->created, sizeof(l->created), "%s", kube_obj_str(j, "created") ? kube_obj_str(j, "created") : "");
}

/* status.outputs from the Secret the pod wrote: its masked copy, as local
 * mode's status has them (stack_outputs_from_secret); the data, the
 * plain values, is not decoded here. */
static cJSON *outputs_read_back(struct stack_pass *p)
{
	char name[300];
	struct err e;
	cJSON *sec, *out;

	snprintf(name, sizeof(name), "%s-outputs", p->name);
	if ((sec = kube_get(p->sc->client, &secrets_res, p->ns, name, NULL, &e)) == NULL)
		return NULL;
	out = stack_outputs_from_secret(sec);
	cJSON_Delete(sec);   /* Secret data: cJSON frees without wiping; short-lived */
	return out;
}

static int64_t time_or(const char *rfc3339, int64_t dflt)
{
	int64_t t = stack_parse_time_us(rfc3339);

	return t > 0 ? t : dflt;
}

/* When the Job started and ended (0: not known): its status's times, else
 * its creation and the time its Complete or Failed condition became True
 * (a failed Job has no completionTime). */
static int64_t job_start_us(const cJSON *job)
{
	return time_or(kube_obj_str(job, "status.startTime"), stack_parse_time_us(kube_obj_str(job,
	    "metadata.creationTimestamp")));
}

static int64_t job_end_us(const cJSON *job)
{
	const cJSON *c;

	if (kube_obj_str(job, "status.completionTime"))
		return stack_parse_time_us(kube_obj_str(job, "status.completionTime"));
	cJSON_ArrayForEach(c, at(at(job, "status"), "conditions"))
		if ((str_eq(kube_obj_str(c, "type"), "Complete") || str_eq(kube_obj_str(c, "type"), "Failed")) &&
		    str_eq(kube_obj_str(c, "status"), "True"))
			return stack_parse_time_us(kube_obj_str(c, "lastTransitionTime"));
	return 0;
}

/* The status holds this finished Job's outcome already: its recorded mark
 * could not be written after the status was (stack_job_after_status).
 * status.lastUpdate.jobUid (status.preview.jobUid for a plan, which writes
 * no lastUpdate) names the Job it was read from.  A status written before
 * jobUid existed is matched by operation and the Job's start and end, to
 * the second as the status has them: a Job made again within the same
 * second would match too, which the uid rules out. */
static int recorded_in_status(const struct stack_pass *p, const char *op, const cJSON *job)
{
	int64_t start = job_start_us(job), end = job_end_us(job);
	int64_t st = stack_parse_time_us(stack_status_str(p, "lastUpdate.startTime"));
	int64_t en = stack_parse_time_us(stack_status_str(p, "lastUpdate.endTime"));
	const char *uid = kube_obj_str(job, "metadata.uid");

	if (str_eq(op, STACK_JOB_OP_PLAN))
		return stack_job_finished(job) && str_eq(stack_status_str(p, "preview.jobUid"), uid);
	if (stack_status_str(p, "lastUpdate.jobUid"))
		return stack_job_finished(job) && str_eq(stack_status_str(p, "lastUpdate.type"), op) &&
		    str_eq(stack_status_str(p, "lastUpdate.jobUid"), uid);
	return stack_job_finished(job) && start > 0 && end > 0 && st > 0 && en > 0 &&
	    str_eq(stack_status_str(p, "lastUpdate.type"), op) && st / 1000000 == start / 1000000 &&
	    en / 1000000 == end / 1000000;
}

/* Fills p->out from the finished Job and its pod. */
static void outcome_from_job(struct stack_pass *p, const char *op, const cJSON *job, const cJSON *pod)
{
	const cJSON *term = at(at(update_container_status(pod), "state"), "terminated");
	const char *reason = NULL, *tmsg = kube_obj_str(term, "message");
	int complete = condition_true(job, "Complete", NULL) != NULL;
	cJSON *res = tmsg ? cJSON_Parse(tmsg) : NULL;
	char tail[LOG_TAIL_BYTES], why[400];

	condition_true(job, "Failed", &reason);
	memset(&p->out, 0, sizeof(p->out));
	p->out.ran = 1;
	p->out.type = op;
	p->out.start_us = job_start_us(job) > 0 ? job_start_us(job) : kube_now_us();
	p->out.end_us = job_end_us(job) > 0 ? job_end_us(job) : kube_now_us();
	if (cJSON_IsObject(res)) {
		p->out.status = status_named(kube_obj_str(res, "status"));
		if (str_eq(kube_obj_str(res, "class"), "timeout"))
			p->out.status = PL_TIMEOUT;
		/* The pod masked it; the controller does not trust that. */
		char *masked = redact(p, kube_obj_str(res, "message") ? kube_obj_str(res, "message") : "");
		snprintf(why, sizeof(why), "%s", masked ? masked : "");
		free(masked);
		if (cJSON_IsObject(at(res, "changes")))
			p->out.changes = cJSON_Duplicate(at(res, "changes"), 1);
		lock_from(&p->out.lock, at(res, "lock"));
		stack_drift_from_result(p, res);
	} else {
		long code = cJSON_IsNumber(at(term, "exitCode")) ? (long)at(term, "exitCode")->valuedouble : -1;
		p->out.status = complete ? PL_OK : PL_INTERNAL;
		snprintf(why, sizeof(why), "the Job's pod ended without a result (exit code %ld%s%s)", code,
		    kube_obj_str(term, "reason") ? ", " : "", kube_obj_str(term, "reason") ? kube_obj_str(term, "reason") : "");
	}
	if (str_eq(reason, "DeadlineExceeded")) {
		p->out.status = PL_TIMEOUT;
		snprintf(why, sizeof(why), "the update did not finish within its timeout (%lds, the Job's "
		    "activeDeadlineSeconds); the Job was stopped", (p->spec.timeout_ms + 999) / 1000);
	} else if (!complete && p->out.status == PL_OK) {
		p->out.status = PL_FAILED;   /* the Job failed whatever its pod said */
	}
	p->out.ok = p->out.status == PL_OK;
	if (p->out.ok) {
		snprintf(p->out.message, sizeof(p->out.message), "%s", why[0] ? why : "succeeded");
		if (str_eq(kube_obj_str(res, "outputs"), "written") && str_eq(op, "up"))
			p->out.outputs = outputs_read_back(p);
		else if (str_eq(kube_obj_str(res, "outputs"), "failed"))
			snprintf(p->note + strlen(p->note), sizeof(p->note) - strlen(p->note),
			    "%sthe Job's pod could not write the outputs Secret", p->note[0] ? "; " : "");
	} else if (p->out.status == PL_CHANGES_NOT_EXPECTED) {
		/* a drift check's answer, not a failure: no log tail to read */
		snprintf(p->out.message, sizeof(p->out.message), "%s", why[0] ? why : pl_status_name(p->out.status));
	} else {
		log_tail(p, pod, tail, TAIL_IN_MESSAGE);
		snprintf(p->out.message, sizeof(p->out.message), "%s%s%s", why[0] ? why :
		    pl_status_name(p->out.status), tail[0] ? "; log tail: " : "", tail);
		if (p->out.status == PL_POLICY_VIOLATION)
			snprintf(p->safety.policy, sizeof(p->safety.policy), "%s", why);
	}
	cJSON_Delete(res);
}

/* A pod that never started: the update fails with the pod's reason. */
static void outcome_not_started(struct stack_pass *p, const char *op, const cJSON *pod)
{
	char why[300];

	pod_not_started_reason(pod, why, sizeof(why));
	memset(&p->out, 0, sizeof(p->out));
	p->out.ran = 1;
	p->out.type = op;
	p->out.start_us = p->out.end_us = kube_now_us();
	p->out.status = PL_FAILED;
	snprintf(p->out.message, sizeof(p->out.message), "the Job's pod did not start within %lds: %s",
	    p->sc->o.job_start_timeout_ms / 1000, why);
}

/* ------------------------------------------------------------ the outputs Secret's writer */


/* ------------------------------------------------------------ the step */

/* A refusal by RBAC is said in status, not only in a log line: the Job
 * runner's rights are bound per namespace (deploy/job-runner), and nothing
 * that the Stack's owner sees would say that this namespace has none.  No
 * watch tells of a new binding: tried again after JOB_FORBIDDEN_RETRY_MS. */
static int retry_later(struct stack_pass *p, const struct err *e)
{
	if (e->code == ERR_AUTH && e->http_status == 403) {
		stack_verdict(p, STACK_WAITING, "JobForbidden", JOB_FORBIDDEN_RETRY_MS, "the controller may not run "
		    "this Stack's Job in namespace %s: %s; bind the ClusterRole pulumi-controller-job-runner to its "
		    "ServiceAccount in this namespace (docs/job-runner.md, \"RBAC\")", p->ns, e->msg);
		p->v.event = 1;
		return 1;
	}
	p->retry = 1;
	p->err = *e;
	return 1;
}

#define OTHER_JOBS_MAX 8   /* Jobs of one Stack looked at; there are rarely more than two */

struct other_jobs {
	char keys[OTHER_JOBS_MAX][600];
	int n;
	const char *own;
};

static void note_other(void *ud, const char *key)
{
	struct other_jobs *o = ud;

	if (o->n < OTHER_JOBS_MAX && strcmp(key, o->own) != 0)
		snprintf(o->keys[o->n++], sizeof(o->keys[0]), "%s", key);
}

/* The keys of the cached Jobs of this Stack, but own_key ("" for none).
 * 0: no Job watch (this controller runs no Jobs). */
static int stack_jobs(struct stack_pass *p, const char *own_key, struct other_jobs *o)
{
	char value[600];

	memset(o, 0, sizeof(*o));
	if (p->sc->jobs.inf == NULL)
		return 0;
	o->own = own_key;
	snprintf(value, sizeof(value), "%s/%s", p->ns, p->name);
	kube_informer_by_index(p->sc->jobs.inf, "stack", value, note_other, o);
	return 1;
}

/* The i-th Job of o if it is this Stack's own (its ownerReference has the
 * Stack's uid), else NULL; the caller frees. */
static cJSON *own_job_at(struct stack_pass *p, const struct other_jobs *o, int i)
{
	const char *slash = strchr(o->keys[i], '/');
	cJSON *job = kube_informer_get(p->sc->jobs.inf, p->ns, slash ? slash + 1 : o->keys[i]);

	if (job && !kube_owned_by(job, "Stack", kube_obj_str(p->obj, "metadata.uid"))) {
		cJSON_Delete(job);
		job = NULL;
	}
	return job;
}

/* An unfinished Job of this Stack other than own_key ("" for any): its key
 * is written into out. */
static int unfinished_job(struct stack_pass *p, const char *own_key, char *out, size_t n)
{
	struct other_jobs o;
	int running = 0;

	if (!stack_jobs(p, own_key, &o))
		return 0;
	for (int i = 0; i < o.n && !running; i++) {
		cJSON *job = own_job_at(p, &o, i);

		running = job && !stack_job_finished(job) && kube_obj_str(job, "metadata.deletionTimestamp") == NULL;
		cJSON_Delete(job);
		if (running)
			snprintf(out, n, "%s", o.keys[i]);
	}
	return running;
}

/* Another unfinished Job of this Stack (earlier inputs): two updates of one
 * stack at once would only fight over its lock. */
static int other_job_running(struct stack_pass *p, const char *own_key, char *out, size_t n)
{
	return unfinished_job(p, own_key, out, n);
}

int stack_job_unfinished(struct stack_pass *p, char *out, size_t n)
{
	return unfinished_job(p, "", out, n);
}

/* Creates the Job (or adopts the one a create conflicts with).  1 decided. */
/* A Job of the Stack's Job name that is not the Stack's (a hash collision,
 * or someone else's made by hand): never deleted nor followed. */
static int not_own_job(struct stack_pass *p, const char *name)
{
	stack_verdict(p, STACK_STALLED, "ObjectNotOwned", p->sc->o.requeue_dependency_ms, "the Job %s/%s: exists "
	    "and is not owned by this Stack (no ownerReference to its uid), so it is left as it is and the "
	    "update does not run: delete or rename it", p->ns, name);
	p->v.event = 1;
	return 1;
}

/* After a 409 on create: 1 when the Job of that name is the Stack's own
 * (or gone meanwhile: looked at again next pass); 0 when it is not, or
 * with e set when the GET failed. */
static int job_is_own(struct stack_pass *p, const char *name, struct err *e)
{
	cJSON *have = kube_get(p->sc->client, &jobs_res, p->ns, name, NULL, e);
	int own;

	if (have == NULL) {
		if (e->code != ERR_NOTFOUND)
			return 0;
		err_clear(e);
		return 1;
	}
	own = kube_owned_by(have, "Stack", kube_obj_str(p->obj, "metadata.uid"));
	cJSON_Delete(have);
	err_clear(e);
	return own;
}

static int start_job(struct stack_pass *p, const char *op, const char *name, const char *key)
{
	struct stack_job_in in = { p->ns, p->name, kube_obj_str(p->obj, "metadata.uid"),
		kube_obj_str(p->obj, "apiVersion"), op, p->fingerprint, &p->spec, &p->art, p->sc->o.job_image,
		p->sc->o.job_ttl_s, p->sc->o.job_plugins_dir, p->safety.remediate, NULL,
		str_eq(op, "up") && p->safety.plan_id[0] ? p->safety.plan_id : NULL, p->sc->o.max_artifact_bytes,
		stack_approval_applied(p) };
	char stack_key[600], other[600], stale[128];
	cJSON *job, *res;
	struct err e;
	int rc;

	snprintf(stack_key, sizeof(stack_key), "%s/%s", p->ns, p->name);
	if (other_job_running(p, key, other, sizeof(other))) {
		p->job_waits_other = 1;
		stack_verdict(p, STACK_WAITING, "JobRunning", p->spec.timeout_ms, "waiting for the Job %s (earlier "
		    "inputs) to finish before this update starts", other);
		return 1;
	}
	if ((rc = stack_job_ensure_runner(p, op, &e)) != 0)
		return rc < 0 ? retry_later(p, &e) : 1;
	if (stack_job_slot_take(p->sc, key, stack_key)) {
		stack_verdict(p, STACK_WAITING, "WaitingForJobSlot", stack_job_slot_poll_ms(p->sc, stack_key),
		    "waiting for a Job slot: %d Jobs run already (--max-concurrent-jobs)", p->sc->o.max_concurrent_jobs);
		return 1;
	}
	in.cancel_lock = stack_job_stale_lock(p, stale, sizeof(stale));
	if (stack_job_ensure_inputs(p, &e) < 0 || (str_eq(op, "up") && stack_job_ensure_outputs_access(p, &e) < 0) ||
	    (str_eq(op, STACK_JOB_OP_PLAN) && stack_job_plan_access(p, &e) < 0) ||
	    (job = stack_job_build(&in, &e)) == NULL) {
		stack_job_slot_release(p->sc, key);
		if (e.code != ERR_REFUSED)
			return retry_later(p, &e);
		stack_verdict(p, STACK_STALLED, "ObjectNotOwned", p->sc->o.requeue_dependency_ms, "%s", e.msg);
		p->v.event = 1;
		return 1;
	}
	res = kube_create(p->sc->client, &jobs_res, p->ns, job, &e);
	cJSON_Delete(job);
	if (res == NULL && e.code != ERR_CONFLICT) {
		stack_job_slot_release(p->sc, key);
		return retry_later(p, &e);
	}
	if (res == NULL && !job_is_own(p, name, &e)) {
		stack_job_slot_release(p->sc, key);
		return e.code ? retry_later(p, &e) : not_own_job(p, name);
	}
	if (res == NULL) {
		/* Made before (a restart, a cache behind): that one is ours to follow. */
		log_info("adopting an existing Job", "namespace", p->ns, "name", p->name, "job", name, NULL);
		stack_verdict(p, STACK_WAITING, "JobRunning", GONE_RETRY_MS, "the %s runs in Job %s", op, name);
		return 1;
	}
	cJSON_Delete(res);
	if (in.cancel_lock)
		stack_event(p, "Normal", "LockCancelled", "the lock %s was left by the pod of an earlier Job of "
		    "this Stack, which is gone: Job %s cancels it before its %s", in.cancel_lock, name, op);
	/* Not "update started": that line pairs with an end in the same pass. */
	log_info("update Job created", "namespace", p->ns, "name", p->name, "revision", p->art.revision,
	    "reconcileID", p->id, "reason", p->why, "job", name, NULL);
	if (str_eq(op, "destroy"))
		stack_event(p, "Normal", "DestroyStarted", "destroying stack %s in Job %s", p->spec.stack, name);
	else if (!str_eq(op, "refresh"))   /* a drift check is no update (no event locally either) */
		stack_event(p, "Normal", "UpdateStarted", "%s at revision %s in Job %s: %s", p->spec.preview || str_eq(op, STACK_JOB_OP_PLAN) ?
		    "preview" : "update", p->art.revision, name, p->why);
	stack_verdict(p, STACK_WAITING, "JobRunning", p->sc->o.job_start_timeout_ms, "the %s of revision %s runs "
	    "in Job %s", op, p->art.revision, name);
	return 1;
}

/* The Job exists and has not finished: still waiting, or its pod never
 * started (0: p->out holds the failure). */
static int job_running(struct stack_pass *p, const char *op, const char *name, const char *key,
    const cJSON *job)
{
	int64_t created = stack_parse_time_us(kube_obj_str(job, "metadata.creationTimestamp"));
	int64_t left_ms = created > 0 ? (created - kube_now_us()) / 1000 + p->sc->o.job_start_timeout_ms : 0;
	cJSON *pod;
	struct err e;
	char stack_key[600];

	snprintf(stack_key, sizeof(stack_key), "%s/%s", p->ns, p->name);
	stack_job_slot_seen(p->sc, key, stack_key, 1);
	if (left_ms > 0) {
		stack_verdict(p, STACK_WAITING, "JobRunning", left_ms + 1, "the %s of revision %s runs in Job %s",
		    op, p->art.revision, name);
		return 1;
	}
	/* "Could not list" is no "no pod": the Job may be mid-update; it is
	 * looked at again later, never deleted on a failed LIST. */
	if ((pod = job_pod(p, job, &e)) == NULL && e.code != 0) {
		err_prefix(&e, "the pods of Job %s/%s", p->ns, name);
		return retry_later(p, &e);
	}
	if (pod != NULL && pod_started(pod)) {
		cJSON_Delete(pod);
		stack_verdict(p, STACK_WAITING, "JobRunning", p->spec.timeout_ms, "the %s of revision %s runs in "
		    "Job %s", op, p->art.revision, name);
		return 1;
	}
	outcome_not_started(p, op, pod);
	cJSON_Delete(pod);
	if (delete_job(p, name, kube_obj_str(job, "metadata.uid"), &e) < 0)
		log_warn("cannot delete a Job whose pod never started", "job", name, "error", e.msg, NULL);
	stack_job_slot_release(p->sc, key);
	return 0;
}

/* op: a literal ("up", "preview", "destroy", "refresh"...): it becomes p->out.type. */
int stack_job_step(struct stack_pass *p, const char *op)
{
	char name[64], key[400];
	cJSON *job, *pod;
	struct err e;

	if (p->sc->o.job_image == NULL || p->sc->jobs.inf == NULL) {
		/* The spec step refuses this first; kept so the step never runs
		 * without an image or a Job watch. */
		stack_verdict(p, STACK_STALLED, "SpecInvalid", 0, "spec.runner.type: Job, but this controller "
		    "runs without --job-image (the image the Job's pod runs)");
		p->v.event = 1;
		return 1;
	}
	if (stack_job_name_of(p->name, kube_obj_str(p->obj, "metadata.uid"), op, p->fingerprint, name,
	    sizeof(name)) < 0) {
		err_set(&e, ERR_INVALID, "no Job name for fingerprint \"%s\"", p->fingerprint);
		return retry_later(p, &e);
	}
	job_key(p->ns, name, key, sizeof(key));
	job = kube_informer_get(p->sc->jobs.inf, p->ns, name);
	if (job && !kube_owned_by(job, "Stack", kube_obj_str(p->obj, "metadata.uid"))) {
		cJSON_Delete(job);
		return not_own_job(p, name);
	}
	/* A result already recorded (this update is a retry or a resync):
	 * replaced. */
	if (job && (recorded(job) || recorded_in_status(p, op, job)) &&
	    kube_obj_str(job, "metadata.deletionTimestamp") == NULL) {
		int rc = delete_job(p, name, kube_obj_str(job, "metadata.uid"), &e);
		cJSON_Delete(job);
		job = NULL;
		if (rc < 0)
			return retry_later(p, &e);
		if (rc > 0) {   /* the cache has not seen the Job made since: its watch brings it */
			stack_verdict(p, STACK_WAITING, "JobRunning", GONE_RETRY_MS, "the Job %s was made again "
			    "since this controller last saw it; waiting for it", name);
			return 1;
		}
		stack_job_slot_release(p->sc, key);
	}
	if (job && kube_obj_str(job, "metadata.deletionTimestamp") != NULL) {
		cJSON_Delete(job);
		stack_verdict(p, STACK_WAITING, "JobRunning", GONE_RETRY_MS, "waiting for the old Job %s to be "
		    "deleted", name);
		return 1;
	}
	if (job == NULL)
		return start_job(p, op, name, key);
	if (!stack_job_finished(job)) {
		int rc = job_running(p, op, name, key, job);
		cJSON_Delete(job);
		return rc;
	}
	if ((pod = job_pod(p, job, &e)) == NULL && e.code != 0 && e.code != ERR_NOTFOUND) {
		cJSON_Delete(job);
		return retry_later(p, &e);
	}
	outcome_from_job(p, op, job, pod);
	snprintf(p->job_recorded_uid, sizeof(p->job_recorded_uid), "%s",
	    kube_obj_str(job, "metadata.uid") ? kube_obj_str(job, "metadata.uid") : "");
	cJSON_Delete(pod);
	cJSON_Delete(job);
	stack_job_slot_release(p->sc, key);
	snprintf(p->job_recorded, sizeof(p->job_recorded), "%s", name);
	return 0;
}

/* A destroy Job of the Stack that finished and succeeded, whatever
 * inputs it ran with (its name has the fingerprint of the source it had,
 * which may be gone now).  Only the deletion runs destroy Jobs, and it is
 * never undone, so such a Job settles the deletion.  1: p->out holds its
 * outcome (ok); 0: none (p->out untouched); -1: its pod could not be listed
 * (e set). */
int stack_job_destroy_succeeded(struct stack_pass *p, struct err *e)
{
	struct other_jobs o;
	int found = 0;

	err_clear(e);
	if (!stack_jobs(p, "", &o))
		return 0;
	for (int i = 0; i < o.n && !found; i++) {
		cJSON *job = own_job_at(p, &o, i), *pod;
		const char *slash = strchr(o.keys[i], '/');
		char key[400];

		if (job == NULL || !str_eq(cJSON_GetStringValue(at(at(at(job, "metadata"), "labels"),
		    "pulumi.com/operation")), "destroy") ||
		    condition_true(job, "Complete", NULL) == NULL) {
			cJSON_Delete(job);
			continue;
		}
		if ((pod = job_pod(p, job, e)) == NULL && e->code != 0 &&
		    e->code != ERR_NOTFOUND) {
			cJSON_Delete(job);
			return -1;
		}
		err_clear(e);
		outcome_from_job(p, "destroy", job, pod);
		found = p->out.ok;
		if (found) {
			job_key(p->ns, slash ? slash + 1 : o.keys[i], key, sizeof(key));
			stack_job_slot_release(p->sc, key);
		} else {   /* complete, but its pod said it failed: the usual path reads it */
			cJSON_Delete(p->out.changes);
			memset(&p->out, 0, sizeof(p->out));
		}
		cJSON_Delete(pod);
		cJSON_Delete(job);
	}
	return found;
}

void stack_job_after_status(struct stack_pass *p)
{
	char patch[256];
	struct err e;
	cJSON *res;

	if (p->job_recorded[0] == '\0')
		return;
	snprintf(patch, sizeof(patch), "{\"metadata\":{\"annotations\":{\"%s\":\"true\"}}}", STACK_JOB_ANN_RECORDED);
	res = kube_patch(p->sc->client, &jobs_res, p->ns, p->job_recorded, NULL, KUBE_PATCH_MERGE, patch, NULL, 0, &e);
	if (res == NULL && e.code != ERR_NOTFOUND)
		log_warn("cannot mark the Job's result as recorded", "job", p->job_recorded, "error", e.msg, NULL);
	cJSON_Delete(res);
}

