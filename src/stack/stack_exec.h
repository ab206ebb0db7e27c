/*
 * stack_exec.h - the executors: the two implementations of the execution
 * seam (struct stack_exec, stack_model.h) and what they are built from.
 * Above the gates (an executor records drift and reads approval state),
 * below the state machine.
 *
 *   stack_exec.c        which executor a spec chose; what holds whatever ran
 *   stack_exec_local.c  the local executor, over stack_update.c
 *   stack_update.c      the pulumi operations of one update, destroy,
 *                       plan or drift check, in this process
 *   stack_exec_job.c    the Job executor, over stack_job*.c
 *   stack_job.c         a Stack's Job: started, followed, its outcome read
 *   stack_job_build.c   the Job object and the names (pure)
 *   stack_job_access.c  the ServiceAccount, Secrets, Roles a Job needs
 *   stack_job_plan.c    the plan Secrets (the controller's side)
 *   stack_job_slots.c   --max-concurrent-jobs
 *   stack_job_lock.c    a lock left by the pod of an earlier Job
 */
#ifndef PC_STACK_EXEC_H
#define PC_STACK_EXEC_H

#include "stack/stack_gates.h"

/* Runs the update (or preview) in p->workdir; fills p->out. */
void stack_update_run(struct stack_pass *p);
/* Runs destroy; fills p->out. */
void stack_update_destroy(struct stack_pass *p);
/* The Stack's inputs of a pl_spec (stack, backend, secrets provider, env,
 * config; pointers borrowed from p), the rest zero: what pl_open runs with
 * and what pl_spec_redact masks by, from one place. */
void stack_pl_spec_inputs(const struct stack_pass *p, struct pl_spec *s);
/* 1 when host ran an interrupted update of this Stack (status's
 * interruptedUpdates) under lease, the Lease this controller has held for
 * led_ms, and led_ms is at least grace_ms: then host's lock is stale. */
int stack_lock_interrupted_here(const cJSON *status, const char *lease, const char *host, long long led_ms,
    long grace_ms);

/* Runs `preview --save-plan` into dir/plan-new.json (its path into path);
 * 0, or -1 (p->out holds the failure). */
int stack_update_plan_into(struct stack_pass *p, const char *dir, char *path, size_t n);

/* Runs `preview --save-plan p->safety.plan_file` the way an update runs;
 * fills p->out. */
void stack_update_plan(struct stack_pass *p);
/* Runs `refresh --preview-only --expect-no-changes`; fills p->out and
 * p->safety.drift_steps. */
void stack_update_drift_check(struct stack_pass *p);

/* What a Job is built from (stack_job_build); all borrowed. */
struct stack_job_in {
	const char *ns, *name, *uid, *api_version;   /* the Stack */
	const char *op;                              /* up, preview, destroy, refresh */
	const char *fingerprint;                     /* hex, at least 10 characters */
	const struct stack_spec *spec;
	const struct stack_artifact *art;
	const char *image;
	long ttl_s;
	const char *plugins_dir;                     /* NULL: none */
	int refresh;                                 /* --refresh besides spec.refresh (drift remediation) */
	const char *cancel_lock;                     /* the dead holder the pod may cancel; NULL */
	const char *plan_id;                         /* up: the approved plan (its Secret is mounted) */
	long long max_artifact_bytes;                /* the controller's --max-artifact-size; 0: not passed */
	const char *plan_after;                      /* up: status.approval.appliedPlan; NULL: none */
};

/* <stack>-<op>-<10 hex>, the stack part cut so that it fits 63 characters
 * (and ends in a letter or digit).  0, or -1 when n is too small. */
int stack_job_name(const char *stack, const char *op, const char *fingerprint, char *out, size_t n);
/* The Job name of Stack stack (uid) for op at fingerprint: stack_job_name
 * with the first 10 hex of sha256(uid, fingerprint), so that no two Stacks
 * share one.  0, or -1 when n is too small or the fingerprint is short. */
int stack_job_name_of(const char *stack, const char *uid, const char *op, const char *fingerprint, char *out,
    size_t n);
/* The Job object (caller frees), or NULL with e. */
cJSON *stack_job_build(const struct stack_job_in *in, struct err *e);
/* The PULUMI_CONTROLLER_UPDATE document (caller frees the string). */
char *stack_job_update_json(const struct stack_job_in *in);

/* One step of operation op (a literal, "up", "refresh"...: it becomes the
 * Job's name part and p->out.type) at p->fingerprint: finds the Stack's Job
 * for these inputs in the Job cache, creates it (or adopts the one a create
 * conflicts with), or reads its outcome once it has finished.  0: the
 * outcome is in p->out; 1: decided (p->v: JobRunning, WaitingForJobSlot,
 * a refusal; or p->retry).  The Job executor's run (stack_exec_job.c). */
int stack_job_step(struct stack_pass *p, const char *op);
/* 1 while a Job of the Stack (any op) has not finished: its key in out. */
int stack_job_unfinished(struct stack_pass *p, char *out, size_t n);
/* A finished destroy Job of the Stack (any inputs) succeeded: 1, p->out
 * holds its outcome; 0 none; -1 its pod could not be listed (e set). */
int stack_job_destroy_succeeded(struct stack_pass *p, struct err *e);
/* stack_job_lock.c.  1 when host is the hostname of a pod of a Job that
 * stack_job_name(stack, ...) names (any op and fingerprint). */
int stack_job_pod_host(const char *stack, const char *host);
/* 1 when job is a name stack_job_name(stack, op, fp) gives (an op of
 * lower-case letters, fp 10 hex): the shape of the Stack's own Jobs. */
int stack_job_is_named(const char *stack, const char *job);
/* stack_job.c: the label selector of the pods of the Job job (uid), as
 * the Job controller labels them (job-name and controller-uid); 0, or -1
 * without a uid. */
int stack_job_pod_selector(const char *job, const char *uid, char *out, size_t n);
/* The owner ("user@host") of the lock status.lastUpdate.lockHolder names,
 * written into out, when that host is a pod of this Stack's Jobs that is no
 * longer running (one LIST of pods); NULL otherwise. */
const char *stack_job_stale_lock(struct stack_pass *p, char *out, size_t n);
/* After the status write: marks the Job whose outcome it recorded. */
void stack_job_after_status(struct stack_pass *p);
/* A Stack at the head of the queue for a slot looks again after this even
 * if no slot freed (a backstop: a freed slot wakes the waiters it can
 * serve); one further back, after a multiple (stack_job_slot_poll_ms). */
#define STACK_JOB_SLOT_POLL_MS 300000L
/* When the waiting stack_key looks again on its own (ms). */
long stack_job_slot_poll_ms(struct stack_ctl *sc, const char *stack_key);
/* The pass's view of the Job key ("ns/name") it made or follows for the
 * Stack stack_key ("ns/name"; its own, the ownerReference checked): running
 * (1) or not (0); a slot freed wakes as many waiting Stacks as slots are
 * free. */
void stack_job_slot_seen(struct stack_ctl *sc, const char *key, const char *stack_key, int active);
/* The Job informer's view of key, whose controller ownerReference is the
 * Stack stack_key with uid stack_uid (NULL or "": none, never counted): it
 * counts only while that Stack is cached with that uid and key has the
 * name the controller gives its Jobs (stack_job_is_named), and at most one
 * Job per Stack counts; anyone may make a Job that looks like the
 * controller's. */
void stack_job_slot_seen_job(struct stack_ctl *sc, const char *key, const char *stack_key, const char *stack_uid,
    int active);
/* 0: the slot is job_key's; 1: all of this controller's are taken
 * (stack_key waits for one, in arrival order). */
int stack_job_slot_take(struct stack_ctl *sc, const char *job_key, const char *stack_key);
/* Frees job_key's slot and wakes the waiting Stacks it can serve. */
void stack_job_slot_release(struct stack_ctl *sc, const char *job_key);
/* stack_key ("ns/name") waits for no slot any more (deleted): it leaves
 * the queue, and a wake it held goes to the next waiter. */
void stack_job_slot_forget(struct stack_ctl *sc, const char *stack_key);
/* A pass of stack_key began at mark (stack_job_slot_mark) and decided:
 * unless it asked for a slot and found none since (whatever verdict the
 * pass then gave: a drift check keeps the Stack Ready), the Stack leaves
 * the queue as stack_job_slot_forget says. */
unsigned long stack_job_slot_mark(struct stack_ctl *sc);
void stack_job_slot_pass_done(struct stack_ctl *sc, const char *stack_key, unsigned long mark);
int stack_job_slots_new(struct stack_ctl *sc);
void stack_job_slots_free(struct stack_ctl *sc);
/* Jobs counted as running now: those of this controller's Stacks (the
 * metrics gauge). */
int stack_job_slots_used(struct stack_ctl *sc);
/* Stacks waiting for a slot now. */
size_t stack_job_slots_waiting(struct stack_ctl *sc);
/* 1 when the Job has a terminal condition (Complete or Failed True). */
int stack_job_finished(const cJSON *job);
/* Makes sure of the Secret secret and the Role + RoleBinding role that let
 * the ServiceAccount op's Jobs run as get and update exactly it (all owned
 * by the Stack); with_secrets_list: annotated as an empty outputs Secret. */
int stack_job_ensure_writer(struct stack_pass *p, const char *op, const char *secret, const char *role,
    int with_secrets_list, struct err *e);
/* The ServiceAccount op's Jobs run as: spec.runner.serviceAccountName, else
 * <stack>-planner for plan Jobs and <stack>-runner for the others (in buf),
 * which the controller makes. */
const char *stack_job_runner_sa(const struct stack_spec *s, const char *stack, const char *op, char *buf, size_t n);
/* Before a Job of op: its ServiceAccount (stack_job_runner_sa), made and
 * owned by the Stack when the spec names none; a named one must not be
 * another Stack's.  0, -1 (e), 1: refused (Stalled ServiceAccountNotOwned
 * in p->v). */
int stack_job_ensure_runner(struct stack_pass *p, const char *op, struct err *e);
/* The empty Secret secret owned by the Stack, unless it exists. */
/* <name>-outputs and the Role and RoleBinding letting <name>-runner write it. */
int stack_job_ensure_outputs_access(struct stack_pass *p, struct err *e);
/* <name>-job-inputs: the backend, secretsProvider and literal secret config
 * the pod reads (emptied when none is left).  0, or -1 with e set. */
int stack_job_ensure_inputs(struct stack_pass *p, struct err *e);
int stack_job_ensure_secret(struct stack_pass *p, const char *secret, int with_secrets_list, struct err *e);

#define STACK_JOB_OP_PLAN "plan"
#define STACK_JOB_PLAN_KEY "plan.json"
#define STACK_JOB_PLAN_MOUNT "/var/run/pulumi-controller/plan"
/* <name>-plan, the plan up Jobs mount, which only the controller writes
 * (caller's buffer). */
void stack_job_plan_secret_name(const char *stack, char *out, size_t n);
/* <stack>-job-inputs: the Secret with the Stack's backend,
 * secretsProvider and literal secret config (keys below) that a Job's pod
 * reads them from. */
void stack_job_inputs_secret_name(const char *stack, char *out, size_t n);
#define STACK_JOB_INPUT_BACKEND "backend"
#define STACK_JOB_INPUT_SECRETS_PROVIDER "secretsProvider"
/* + the config's index: a secretsRef Literal value (docs/job-runner.md). */
#define STACK_JOB_INPUT_CONFIG_PREFIX "config."
/* The data of <stack>-job-inputs for spec s (base64 values; empty when
 * nothing is secret); NULL out of memory.  The caller frees it. */
cJSON *stack_job_inputs_data(const struct stack_spec *s);
/* <name>-plan-result, where a plan Job's pod hands its plan back. */
void stack_job_plan_result_name(const char *stack, char *out, size_t n);
/* Before a plan Job: <name>-plan-result with <name>-plan-writer (the
 * runner may write it), and <name>-plan (it may not). */
int stack_job_plan_access(struct stack_pass *p, struct err *e);
/* The plan step in job mode: runs the `plan` Job; 1 decided (the Job runs:
 * p->v set, or p->retry), -1 failed (p->out), 0 *text (*len bytes) is the
 * plan the pod handed back in <name>-plan-result (caller frees). */
/* The plan now in <name>-plan-result (caller frees), NULL when there is none. */
char *stack_job_plan_read(struct stack_pass *p, size_t *len, struct err *e);
/* Writes the plan the controller read and judged into <name>-plan. */
/* Writes text as the plan Secret name in ns with client c (creating it); 0, or -1 with e set. */
int stack_job_plan_put(struct kube_client *c, const char *ns, const char *name, const char *text, size_t len,
    struct err *e);
int stack_job_plan_store(struct stack_pass *p, const char *text, size_t len, struct err *e);

extern const struct stack_exec stack_exec_local, stack_exec_job;

/* The executor spec s chose. */
const struct stack_exec *stack_exec_for(const struct stack_spec *s);
/* What holds for the Stack whatever executor ran it last (a spec may switch
 * between them while an operation runs): any operation still running,
 * any destroy that ended well; and, after the status write, every
 * executor's collected outcome marked recorded. */
int stack_exec_running(struct stack_pass *p, char *out, size_t n);
int stack_exec_destroyed(struct stack_pass *p, struct err *e);
void stack_exec_recorded(struct stack_pass *p);

#endif
