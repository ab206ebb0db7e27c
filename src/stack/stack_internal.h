/*
 * stack_internal.h - shared between the files of src/stack/ only; the
 * public interface is stack.h.
 *
 * The files and what each owns:
 *   stack_ctl.c        the controller object: informers, indexes, change
 *                      filters (what queues which Stack), metrics
 *   stack_spec.c       spec parsing and validation (struct stack_spec)
 *   stack_source.c     from a spec's source to an artifact in the store
 *   stack_verify.c     signatures: ociSource.verify, a Flux source's
 *                      SourceVerified
 *   stack_inputs.c     config, secrets and environment values, fingerprint
 *   stack_workspace.c  each Stack's own copy of the program tree
 *   stack_status.c     conditions, status, Events, finalizer and outputs
 *   stack_reconcile.c  the state machine: one pass over a Stack
 *   stack_update.c     the pulumi operations of one update or destroy
 *   stack_approval.c   plan-bound approval: plan ids, status.preview
 *   stack_drift.c      drift checks: status.drift, the Drifted condition
 *   stack_prereq.c     prerequisites: the index, the wait, cycles
 *   stack_metrics.c    what the controller counts (Prometheus families)
 *   stack_job_spec.c   spec.runner: parsed and validated (hostile specs refused)
 *   stack_job.c        the Job runner: the Job an update runs in, adoption,
 *                      and its result read back into the outcome
 *   stack_job_build.c  the Job object (pure)
 *   stack_job_slots.c  --max-concurrent-jobs
 *   stack_job_lock.c   a lock left by the pod of an earlier Job
 */
#ifndef PC_STACK_INTERNAL_H
#define PC_STACK_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include <cjson/cJSON.h>

#include "base/strmap.h"
#include "kube/kube.h"
#include "pulumi/pulumi.h"
#include "stack/stack.h"

#define STACK_FINALIZER "finalizer.stack.pulumi.com"
#define STACK_ANN_REQUESTED "reconcile.fluxcd.io/requestedAt"
#define STACK_ANN_REQUEST "pulumi.com/reconciliation-request"
#define STACK_ANN_SECRETS "pulumi.com/secrets"
/* The outputs as status.outputs shows them (secrets masked, nested ones
 * too), JSON, on the outputs Secret: what a Job's status is read from.
 * Left out above STACK_MASKED_OUTPUTS_MAX bytes (annotations of an
 * object are 256 KiB together). */
#define STACK_ANN_MASKED_OUTPUTS "pulumi.com/masked-outputs"
#define STACK_MASKED_OUTPUTS_MAX (64 * 1024)
#define STACK_LABEL_NAME "pulumi.com/stack-name"
#define STACK_HISTORY_MAX 10

/* The STACK_LABEL_NAME value for Stack name: a label value holds at most 63
 * characters, a Stack name up to 253, so longer names are cut (at a letter or
 * digit, as a label must end).  Labels only help people select; every lookup
 * goes by ownerReference, which carries the whole name. */
#define STACK_LABEL_VALUE_MAX 64
void stack_label_value(const char *name, char out[STACK_LABEL_VALUE_MAX]);
/* 1 for an environment variable a Stack may not set (envRefs, envs, the
 * pod template's env): PULUMI_CONTROLLER_*, HOME, KUBERNETES_*, which the
 * controller sets for the CLI and the Job's pod. */
int stack_env_reserved(const char *name);

/* ------------------------------------------------------------ controller */

/* A kind the controller caches; res[] lists the versions it accepts, in
 * order of preference, and served points at the one the server has. */
struct stack_kind {
	struct kube_resource res[2];
	int nres;
	const struct kube_resource *served;
	struct kube_informer *inf;
	/* Set (once, after inf) when the kind is watched.  A Flux kind the
	 * server did not serve at start is looked for again from the main loop
	 * (stack_ctl_rediscover), while workers and the metrics thread read. */
	atomic_int live;
};

/* One running pulumi operation, so stack_ctl_interrupt can reach it. */
struct stack_running {
	struct pl_stack *pl;
	struct stack_running *next;
};

struct stack_ctl {
	struct kube_client *client;       /* borrowed */
	struct kube_queue *queue;         /* borrowed */
	struct kube_recorder *recorder;   /* borrowed */
	struct stack_opts o;              /* strings borrowed */
	char pulumi_home[PATH_MAX];
	char identity[256];
	struct kube_reconciler rec;

	struct stack_kind stacks;
	struct stack_kind sources[3];     /* GitRepository, OCIRepository, Bucket */
	struct stack_kind configmaps, secrets;   /* metadata only */

	pthread_mutex_t lock;             /* guards running and interrupted */
	struct stack_running *running;
	int interrupted;
	volatile int cancel;              /* set with interrupted: stops downloads too */

	/* The shared OCI resolutions, by poll key (stack_source.c), with their
	 * own lock: a lookup is one hash probe, never a scan under lock. */
	pthread_mutex_t oci_lock;
	struct strmap oci_polls;

	atomic_ullong updates_ok, updates_failed, no_change;
	atomic_llong leading_since_ms;    /* monotonic; 0: not leading (stack_ctl_leading) */

	struct stack_kind jobs;           /* batch/v1 Jobs this controller made (job_image set) */
	struct stack_job_slots *slots;    /* stack_job.c */
	/* run-update only: a lock held by exactly this owner is stale (the
	 * controller found its pod gone; stack_job_lock.c).  Borrowed. */
	const char *cancel_lock;
};

/* The informer of a served source kind ("GitRepository"...), or NULL when
 * the server does not serve it. */
struct stack_kind *stack_ctl_source_kind(struct stack_ctl *sc, const char *kind);
/* The kinds being watched (a Flux kind not served is left out) into out[7]; their count. */
int stack_ctl_kinds(struct stack_ctl *sc, struct stack_kind **out);
/* GETs the Stack; 1 (p->stale, p->obj replaced) when the cache was behind,
 * 1 with p->gone or p->retry on errors, 0 when the cache was current. */
struct stack_pass;
int stack_ctl_refresh(struct stack_pass *p);
/* Registers a pulumi stack as running (so interrupt reaches it); returns -1
 * when the controller was interrupted already (nothing may start). */
int stack_ctl_track(struct stack_ctl *sc, struct stack_running *r, struct pl_stack *pl);
void stack_ctl_untrack(struct stack_ctl *sc, struct stack_running *r);

/* ------------------------------------------------------------ spec */

enum stack_value_kind { STACK_VAL_LITERAL, STACK_VAL_SECRET, STACK_VAL_CONFIGMAP };

/* Where one value comes from: a literal, or key of a Secret / ConfigMap in
 * the Stack's namespace.  json: the ConfigMap value is JSON (structured). */
struct stack_value {
	enum stack_value_kind kind;
	char *literal;                 /* LITERAL: the value (JSON text when structured) */
	char *object, *key;            /* SECRET / CONFIGMAP */
	int structured;
};

struct stack_config {
	char *key;
	struct stack_value v;
	int secret;
};

struct stack_envvar {
	char *name;
	struct stack_value v;
};

enum stack_source_type { STACK_SRC_FLUX, STACK_SRC_OCI, STACK_SRC_PROGRAM };

/* One Stack that must be Ready first (spec.prerequisites, or Flux's
 * dependsOn).  within_ms: its last success at most this old (0: any). */
struct stack_prereq {
	char *name;
	char *namespace;                  /* NULL: the Stack's own */
	long within_ms;
};
/* The shortest succeededWithinDuration (docs/stack-api.md). */
#define STACK_PREREQ_MIN_WITHIN_MS 60000L

enum stack_runner_type { STACK_RUNNER_DEFAULT, STACK_RUNNER_LOCAL, STACK_RUNNER_JOB };

/* spec.runner, validated (stack_job_spec.c).  The cJSON members are owned
 * copies of what the spec said (NULL: not given). */
struct stack_runner {
	enum stack_runner_type type;
	char *service_account;            /* NULL: <name>-runner (plan Jobs: <name>-planner), made by the controller */
	cJSON *labels, *annotations;      /* podTemplate.metadata */
	cJSON *resources, *node_selector, *tolerations, *affinity;
	cJSON *env, *volumes, *volume_mounts;
};

/* A parsed, validated spec.  Every string is owned; stack_spec_free. */
struct stack_spec {
	char *stack;
	enum stack_source_type source;
	char *src_kind, *src_name;        /* FLUX and PROGRAM (GitRepository <name>-program) */
	char *dir;                        /* NULL: the artifact's root */
	char *oci_url, *oci_tag, *oci_digest, *oci_semver, *oci_media_type;
	char *oci_secret, *oci_cert_secret;
	int oci_insecure;
	long oci_interval_ms;
	int oci_verify;                   /* ociSource.verify (cosign, keys in oci_verify_secret) */
	char *oci_verify_secret;
	char *prog_repo, *prog_ref;       /* PROGRAM */
	char *backend, *secrets_provider;
	char *cloud_ignored;              /* a `cloud` value that is no backend URL */
	char *cloud_shadowed;             /* a `cloud` URL that spec.backend overrides */
	struct stack_config *config;
	size_t n_config;
	struct stack_envvar *env;
	size_t n_env;
	int refresh, preview, suspend, destroy_on_finalize, continue_resync;
	char **targets;
	size_t n_targets;
	char **policy_packs;
	size_t n_policy_packs;
	long resync_ms, retry_max_ms, timeout_ms;
	int max_failures;
	/* docs/approvals.md */
	int approval_manual;              /* spec.approval: Manual */
	char *approved_plan;              /* spec.approvedPlan */
	int continue_approval;            /* spec.continue (classic) */
	/* docs/drift.md; drift_interval_ms 0: no drift detection */
	long drift_interval_ms;
	int drift_remediate;
	struct stack_prereq *prereqs;
	size_t n_prereqs;
	struct stack_runner runner;
	int job_mode;                     /* updates run as Jobs (spec.runner, --runner) */
};

/* Parses obj's spec; ERR_INVALID with a message naming the field. */
int stack_spec_parse(const cJSON *obj, const struct stack_opts *o, struct stack_spec *out,
    struct err *e);
void stack_spec_free(struct stack_spec *s);

/* stack_job_spec.c: parses spec.runner into s->runner and decides
 * s->job_mode; ERR_INVALID naming the field (a privileged or host-sharing
 * pod, an oversized list, a reserved name). */
int stack_runner_parse(const cJSON *spec, const struct stack_opts *o, struct stack_spec *s,
    struct err *e);
void stack_runner_free(struct stack_runner *r);

/* ------------------------------------------------------------ source */

/* What the Stack's source offers now.  Owned strings; stack_artifact_free. */
struct stack_artifact {
	char *revision;     /* "main@sha1:…", "v1.2.0@sha256:…" */
	char *digest;       /* of the tarball (Flux) or the manifest (OCI) */
	char *url;          /* Flux only */
	char *index_digest; /* OCI: the index the tag named, whose signature may vouch for
	                     * the manifest (stack_verify.c); NULL when none */
};
void stack_artifact_free(struct stack_artifact *a);

struct stack_pass;

/* Fills p->art from the source; 1 when the pass is decided (p->v set:
 * waiting for the source, or stalled), 0 to go on, never -1. */
int stack_source_resolve(struct stack_pass *p);
/* Makes sure the artifact's tree is in the store: p->tree. 1/0 as above. */
int stack_source_fetch(struct stack_pass *p);
/* Frees the shared OCI resolutions (at stack_ctl_free). */
void stack_source_cleanup(struct stack_ctl *sc);
/* The cache key of s's ociSource lookups in namespace ns, into out (at
 * least 65 bytes): Stacks share a resolution only when it is the same
 * lookup (reference, credentials, CA, transport). */
void stack_oci_poll_key(const struct stack_spec *s, const char *ns, char *out, size_t n);
/* The shared OCI resolutions (exposed for the unit tests).  A lookup of key
 * younger than max_age_ms copies it into res (caller frees it with
 * oci_pull_result_free) and returns 1; a store replaces key's, for Stacks
 * that look again every interval_ms (0: never), and prunes the cache when
 * it outgrows the Stacks (entries idle past their interval, then the least
 * recently used). */
struct oci_pull_result;
int stack_oci_cache_lookup(struct stack_ctl *sc, const char *key, long max_age_ms,
    struct oci_pull_result *res);
void stack_oci_cache_store(struct stack_ctl *sc, const char *key, long interval_ms,
    const struct oci_pull_result *res);
size_t stack_oci_cache_count(struct stack_ctl *sc);
/* Store paths. */
void stack_store_artifacts_dir(const struct stack_ctl *sc, char *out, size_t n);

/* For stack_verify.c: a client for the ociSource's registry, with its
 * credentials (caller frees it with oci_client_free, and *repo); and the
 * signature checks that passed, kept with the resolution under poll_key
 * while it still names digest.  keys: "<secret>@<resourceVersion>". */
struct oci_client;
struct oci_client *stack_source_oci_client(struct stack_pass *p, char **repo, struct err *e);
struct oci_ref;
/* The spec's ociSource as a reference (url, and the digest or tag the spec
 * pins); 0, or -1 with e set.  oci_ref_free frees it. */
int stack_oci_ref_parse(struct stack_pass *p, struct oci_ref *ref, struct err *e);
/* A registry client for ref with the spec's credentials, CA and transport;
 * NULL with e set.  The caller frees it (oci_client_free). */
struct oci_client *stack_oci_client_for(struct stack_pass *p, const struct oci_ref *ref, struct err *e);
int stack_source_verified_lookup(struct stack_ctl *sc, const char *poll_key, const char *digest,
    const char *keys, char *key_name, size_t n, char *scheme, size_t sn);
void stack_source_verified_store(struct stack_ctl *sc, const char *poll_key, const char *digest,
    const char *keys, const char *key_name, const char *scheme);

/* ------------------------------------------------------------ verify */

/* stack_verify.c.  Each sets p->verified (SourceVerified) and returns 1
 * when the revision is refused (verdict set: nothing may be fetched or
 * applied), 0 when it verified.  Flux: src is the OCIRepository with
 * spec.verify and revision its status.artifact's.  ociSource: the
 * resolution's revision, manifest digest and index digest (or NULL). */
int stack_verify_flux(struct stack_pass *p, const cJSON *src, const char *revision);
int stack_verify_oci(struct stack_pass *p, const char *poll_key, const char *revision, const char *manifest,
    const char *index);

/* ------------------------------------------------------------ inputs */

/* Resolved values for the driver.  Every string owned; stack_inputs_free. */
struct stack_inputs {
	struct pl_config_item *config;
	size_t n_config;
	struct pl_env_var *env;
	size_t n_env;
	char **refs;        /* "Secret/name@rv", sorted, for the fingerprint */
	size_t n_refs;
};

/* GETs every referenced Secret and ConfigMap (once each).  1 when the
 * pass is decided (a reference is missing: p->v set), 0 to go on. */
int stack_inputs_resolve(struct stack_pass *p);
/* Best effort for destroy: missing references are skipped. */
void stack_inputs_resolve_lenient(struct stack_pass *p);
void stack_inputs_free(struct stack_inputs *in);
/* Hex sha256 of what an update depends on (never values). */
void stack_fingerprint(const struct stack_pass *p, char out[65]);

/* ------------------------------------------------------------ workspace */

/* Builds (or reuses) the Stack's workspace from p->tree and spec.dir:
 * p->workdir.  1 when decided (ProgramNotFound...), 0 to go on. */
int stack_workspace_prepare(struct stack_pass *p);
void stack_workspace_paths(const struct stack_ctl *sc, const char *ns, const char *name,
    char *root, size_t n);
/* Removes the Stack's workspace (after it is finalized). */
void stack_workspace_remove(const struct stack_ctl *sc, const char *ns, const char *name);

/* ------------------------------------------------------------ verdicts */

/* How a pass ends, as kstatus sees it. */
enum stack_state {
	STACK_READY,        /* Ready=True */
	STACK_WAITING,      /* Ready=False, Reconciling=True: work pending or retrying */
	STACK_STALLED,      /* Ready=False, Stalled=True: a human must change something */
};

struct stack_verdict {
	int set;
	enum stack_state state;
	const char *reason;             /* CONTRACT/docs reason, static */
	const char *ready_reason;       /* Ready's, when it differs (NULL: reason) */
	char message[1024];
	long requeue_ms;                /* 0: none */
	int event;                      /* emit an Event for this verdict */
	const char *event_reason;       /* static; NULL: reason */
};

void stack_verdict(struct stack_pass *p, enum stack_state st, const char *reason, long requeue_ms,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ------------------------------------------------------------ update */

/* What one pulumi operation did, for status and history. */
struct stack_outcome {
	int ran;
	const char *type;               /* "up", "preview", "destroy" */
	int ok;
	enum pl_status status;
	char message[512];
	struct pl_lock lock;
	cJSON *changes;                 /* owned */
	cJSON *outputs;                 /* masked; owned */
	cJSON *outputs_plain;           /* owned; never log it */
	int64_t start_us, end_us;
};

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

/* ------------------------------------------------------------ safety */

/* A condition this pass decided besides Ready/Reconciling/Stalled (set: 1
 * True, -1 False; 0 leaves the old one as it was). */
struct stack_extra_cond {
	int set;
	const char *reason;             /* static */
	char message[1024];
};

/* What the approval and drift steps learned in one pass. */
struct stack_safety {
	char plan_file[PATH_MAX];       /* set: preview saves / up applies this plan */
	char plan_id[65];
	int previewing;                 /* the update body runs a preview (for a plan) */
	cJSON *preview;                 /* the new status.preview (owned); NULL: unchanged */
	int clear_preview;              /* remove status.preview (its plan was applied) */
	cJSON *approval;                /* the new status.approval (owned); NULL: unchanged */
	struct stack_extra_cond awaiting;
	cJSON *drift;                   /* the new status.drift (owned); NULL: unchanged */
	struct stack_extra_cond drifted;
	int remediate;                  /* this update repairs drift (runs with --refresh) */
	cJSON *drift_steps;             /* collected while a drift check runs (owned) */
	int drift_omitted;              /* drifted resources beyond what drift_steps keeps */
	int refresh_in_update;          /* drift_steps come from an update's refresh */
	char policy[256];               /* the first mandatory policy message */
};

/* A plan (`preview --save-plan`, len bytes) parsed as the pulumi CLI will
 * read it, or refused (NULL, ERR_REFUSED in e naming the key at fault):
 * not UTF-8 JSON, no resourcePlans, a key twice at any level, or two
 * spellings of a key where Go decodes a struct (json_strict.h).  Caller
 * frees. */
/* The largest plan file read. */
#define STACK_PLAN_MAX_BYTES (64L * 1024 * 1024)
cJSON *stack_plan_parse(const char *text, size_t len, struct err *e);
/* The hex digest of an update plan: its steps and their goals per URN,
 * random seeds and secret ciphertexts left out; after (NULL or "": none)
 * is status.approval.appliedPlan, the plan applied last, so that the same
 * steps again need a new approval.  0, or -1 when stack_plan_parse refuses
 * text (e says why).  *changes: some step is not "same". */
int stack_plan_id(const char *text, size_t len, const char *after, char out[65], int *changes, struct err *e);
struct stack_pass;
/* status.approval.appliedPlan as the pass leaves it (32 hex), or NULL. */
const char *stack_approval_applied(const struct stack_pass *p);
/* status.preview.steps from a plan: op and URN of every change, at most
 * max; *omitted counts the rest.  Caller frees. */
cJSON *stack_plan_steps(const char *text, int max, int *omitted);

struct stack_pass;
/* Runs `preview --save-plan` into dir/plan-new.json (its path into path);
 * 0, or -1 (p->out holds the failure). */
int stack_update_plan_into(struct stack_pass *p, const char *dir, char *path, size_t n);
/* Before decide: a plan for these inputs awaits approval (1, verdict set). */
int stack_approval_gate(struct stack_pass *p);
/* After workspace: makes (or reuses) the plan and lets the update apply it
 * once approved.  1 decided (awaiting), 0 go on, -1 the preview failed
 * (p->out holds it). */
int stack_approval_plan(struct stack_pass *p);
/* After the update: clears an applied plan, or replaces one that no longer
 * applies with a fresh preview. */
void stack_approval_after_update(struct stack_pass *p);
/* Adds the AwaitingApproval / Drifted conditions to out (status writes). */
void stack_safety_conditions(const struct stack_pass *p, cJSON *out, const cJSON *old,
    void (*add)(cJSON *out, const cJSON *old, const char *type, const char *status,
        const char *reason, const char *message, long long generation));
/* Hex sha256 of what a plan is made from: the fingerprint's inputs with
 * the spec in place of the generation, approvedPlan and continue left out. */
void stack_plan_inputs_digest(const struct stack_pass *p, char out[65]);

/* Before decide: the drift check when due (1 with a verdict when drift is
 * left unrepaired); sets p->safety.remediate when an update must repair it. */
int stack_drift_gate(struct stack_pass *p);
/* When the next drift check is due, in ms from now (0: no drift checks). */
long stack_drift_next_ms(const struct stack_pass *p, int64_t now_us);
/* After the update: a remediating update that succeeded clears Drifted. */
void stack_drift_after_update(struct stack_pass *p);
/* A Job's termination message (res, may be NULL): its "drift" into
 * p->safety.drift_steps / drift_omitted, bounded as a local refresh is. */
void stack_drift_from_result(struct stack_pass *p, const cJSON *res);
/* One drifted resource into p->safety.drift_steps, at most
 * STACK_DRIFT_STEPS_MAX of them (the rest counted in drift_omitted). */
#define STACK_DRIFT_STEPS_MAX 50
void stack_drift_add(struct stack_pass *p, const char *op, const char *urn);
void stack_safety_free(struct stack_safety *s);

/* stack_prereq.c: the "prereq" index of the Stack cache (Stack/<ns>/<name>
 * of each prerequisite), whether a Stack's readiness changed (its
 * dependents are queued then), and the step that waits for them. */
int stack_prereq_index(const cJSON *obj, char **out, int max);
int stack_prereq_readiness_changed(const cJSON *old, const cJSON *obj);
int stack_prereq_gate(struct stack_pass *p);

/* Runs `preview --save-plan p->safety.plan_file` the way an update runs;
 * fills p->out. */
void stack_update_plan(struct stack_pass *p);
/* Runs `refresh --preview-only --expect-no-changes`; fills p->out and
 * p->safety.drift_steps. */
void stack_update_drift_check(struct stack_pass *p);

/* ------------------------------------------------------------ jobs */

#define STACK_JOB_LABEL_MANAGED "app.kubernetes.io/managed-by"
#define STACK_JOB_MANAGER "pulumi-controller"
#define STACK_JOB_ANN_RECORDED "pulumi.com/result-recorded"

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

/* The update step in job mode: 1 when the pass is decided (the Job was
 * created or is running, no slot is free: p->v set; or p->retry), 0 when
 * the Job finished (or never started) and p->out holds its outcome. */
struct stack_pass;
/* The same for any operation op (a literal, "up", "refresh"...: it becomes
 * the Job's name part and p->out.type). */
int stack_job_step(struct stack_pass *p, const char *op);
/* A Stack being deleted without destroy: 1 (p->v: Waiting JobRunning,
 * naming the Job) while a Job of the Stack has not finished, since letting
 * the finalizer go would have its pod garbage-collected mid-update; the Job
 * watch wakes the Stack when it finishes.  0: nothing runs. */
/* 1 while a Job of the Stack (any op) has not finished: its key in out. */
int stack_job_unfinished(struct stack_pass *p, char *out, size_t n);
/* The same for the destroy of a Stack being deleted (p->fingerprint set). */
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
/* 1 when the Stack key ("ns/name") is in this controller's Stack cache
 * (its --watch-label-selector's), or there is no Stack informer (tests). */
int stack_ctl_has_stack(struct stack_ctl *sc, const char *key);
/* The same, and the cached Stack's metadata.uid is uid (NULL: any). */
int stack_ctl_has_stack_uid(struct stack_ctl *sc, const char *key, const char *uid);
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

/* ------------------------------------------------------------ plans in Jobs (stack_job_plan.c) */

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
struct stack_run_input;
struct stack_run_opts;
/* In the pod: `preview --save-plan`, then the plan into in->plan_secret
 * (p->out holds the result). */
void stack_run_plan(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o);
/* The pod's own client: the in-cluster config and its ServiceAccount token
 * (stack_runner.c); caller frees, NULL with e. */
struct kube_client *stack_run_client(const struct stack_run_opts *o, struct err *e);
/* In the pod, before `up`: the mounted plan must be in->plan_id; sets
 * p->safety.plan_file.  0, or -1 with the refusal in p->out. */
int stack_run_plan_load(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o);

/* ------------------------------------------------------------ one pass */

/* ------------------------------------------------------------ the execution seam */

/*
 * Deciding and running meet here.  The gates and the state machine name an
 * operation; an executor runs it.  Two executors implement the interface:
 *   stack_exec_local  the pulumi CLI in this process (stack_exec_local.c
 *                     over stack_update.c); an operation ends within the pass
 *   stack_exec_job    a batch/v1 Job's pod (stack_exec_job.c over
 *                     stack_job*.c); an operation outlives the pass that
 *                     starts it, and a later pass collects its outcome
 * The pass holds the one its spec chose (p->exec, set by the spec step);
 * nothing above this seam names either.  A third executor is a new file
 * with one more of these tables.
 */
enum stack_op {
	STACK_OP_UPDATE,     /* pulumi up (preview under spec.preview) */
	STACK_OP_DESTROY,    /* pulumi destroy, for a deletion */
	STACK_OP_PLAN,       /* preview --save-plan, for approval: Manual */
	STACK_OP_CHECK,      /* refresh --preview-only, the drift check */
};

/* What run() says of the pass. */
#define STACK_EXEC_DONE     0   /* the outcome is in p->out */
#define STACK_EXEC_PENDING  1   /* the operation runs or waits (for a slot, an
                                 * older Job); p->v says so: the pass is decided */
#define STACK_EXEC_BLOCKED  2   /* it cannot run now; p->v or p->retry says why */

struct stack_exec {
	const char *name;               /* "local", "job": log lines, metrics */
	int async;                      /* operations outlive the pass that starts them */
	int fetches;                    /* the program is fetched and unpacked in this
	                                 * process (a Job's pod fetches its own) */
	int writes_outputs;             /* the pass writes <name>-outputs after an update
	                                 * (a Job's pod writes it itself) */
	/* Starts op, follows it while it runs, or collects its outcome once it
	 * has ended: STACK_EXEC_*. */
	int (*run)(struct stack_pass *p, enum stack_op op);
	/* After a STACK_OP_PLAN that succeeded: the plan it made (caller frees),
	 * and in where the words that name where it came from.  NULL: p->out
	 * holds the failure. */
	char *(*plan_read)(struct stack_pass *p, size_t *len, char *where, size_t n);
	/* Keeps the plan bytes the gate judged (id) where the update that
	 * applies it will read them: 0; -1 with p->out holding the failure; 1
	 * undecided (p->retry). */
	int (*plan_keep)(struct stack_pass *p, const char *id, const char *text, size_t len);
	/* 1 when the plan id is still kept for an update to apply. */
	int (*plan_kept)(const struct stack_pass *p, const char *id);
	/* The update of this pass applies the kept plan id. */
	void (*plan_use)(struct stack_pass *p, const char *id);
	/* 1 when an operation of the Stack still runs, described in out ("the
	 * Job ns/name"). */
	int (*running)(struct stack_pass *p, char *out, size_t n);
	/* A destroy of the Stack that ended well before this pass: 1 with its
	 * outcome in p->out, 0 none, -1 with e set. */
	int (*destroyed)(struct stack_pass *p, struct err *e);
	/* The outcome this pass collected is in status now: not collected again. */
	void (*recorded)(struct stack_pass *p);
};
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

struct stack_pass {
	struct stack_ctl *sc;
	char ns[254], name[254];
	char id[37];                    /* reconcile id (a UUID), on every log line */
	cJSON *obj;                     /* the cached Stack (a copy; owned) */
	const cJSON *status;            /* obj's status (may be NULL) */
	long long generation;
	int deleting;
	int suspended;                  /* nothing is written */
	int gone;                       /* the Stack no longer exists */
	int spec_ok;
	struct stack_spec spec;
	const struct stack_exec *exec;  /* what runs its operations (the spec's; local until parsed) */
	struct stack_artifact art;
	struct stack_inputs in;
	char fingerprint[65];
	char *requested;                /* annotation values (owned: obj is replaced
	                                 * by each write of the pass) */
	char *request;
	char tree[PATH_MAX];            /* the artifact's tree in the store */
	char workdir[PATH_MAX];         /* the program directory in the workspace */
	char scratch[PATH_MAX];
	const char *why;                /* why an update runs, for the event */
	struct stack_verdict v;
	struct stack_outcome out;
	char note[512];                 /* appended to the Ready message (cloud ignored) */
	int failures;                   /* consecutive failures, this outcome included */
	int retry;                      /* undecided: the worker retries with backoff (err) */
	int stale;                      /* the cached object was stale: run again on a fresh one */
	struct err err;
	struct stack_safety safety;     /* approval and drift (stack_approval.c, stack_drift.c) */
	/* SourceVerified as the source step found it (stack_source.c; set 0:
	 * left as it was); verified_none: the source verifies nothing, so the
	 * condition is removed. */
	struct stack_extra_cond verified;
	int verified_none;
	char job_recorded[64];          /* the Job whose outcome this pass records (stack_job.c) */
	char job_recorded_uid[64];      /* and its uid: a plan records it in status.preview.jobUid */
	int job_waits_other;            /* its Job waits for one of earlier inputs (stack_job.c) */
};

/* The state machine; returns the requeue delay (0: none). */
int stack_reconcile_pass(struct stack_pass *p, struct err *e);

/* ------------------------------------------------------------ metrics */

/* Registers the families and their zero series (at stack_ctl_new). */
void stack_metrics_init(void);
/* One reconcile of a Stack ended (rc < 0: to be retried): counts it by
 * result and reason and records its gotk_reconcile_duration_seconds, or
 * removes the Stack's series when it is gone. */
void stack_metrics_reconciled(const struct stack_pass *p, int rc, double seconds);
/* Removes the Stack's per-object series (it was deleted). */
void stack_metrics_forget(const char *ns, const char *name);
/* A reconcile found the Stack deleted (not in the cache any more). */
void stack_metrics_gone(const char *ns, const char *name, double seconds);
/* source: "flux" or "oci".  A store lookup found the tree (hit) or not. */
void stack_metrics_cache(const char *source, int hit);
/* A download ended: result "success", "failed" or "refused"; bytes
 * received (0 when unknown). */
void stack_metrics_fetched(const char *source, const char *result, double seconds, long long bytes);
/* A refused artifact, counted by the rule its message names. */
void stack_metrics_refused(const char *source, const struct err *e);
/* The rule label for a refusal ("path", "symlink", "size_limit"...). */
const char *stack_refusal_rule(const struct err *e);
/* An ociSource resolution: "cached", "resolved" or "failed". */
void stack_metrics_resolved(const char *result);
/* A pulumi operation ("up", "preview", "destroy") starts and ends. */
void stack_metrics_operation_start(const char *op);
void stack_metrics_operation_end(const char *op, enum pl_status status, double seconds);

/* ------------------------------------------------------------ status */

/* Writes status from p (verdict, outcome, artifact, fingerprint) through the
 * status subresource, based on the cached object's resourceVersion.  A
 * conflict is returned as -1 (the worker retries), unless the pass ran an
 * update: then the Stack is read again and the same status written onto
 * it (a few times at most), so the update's outcome is not lost. */
int stack_status_write(struct stack_pass *p, struct err *e);
/* The intermediate "an update is running" status, before the CLI starts. */
int stack_status_write_running(struct stack_pass *p, struct err *e);
/* Records an Event about the Stack. */
void stack_event(struct stack_pass *p, const char *type, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Adds or removes the finalizer with a merge patch (resourceVersion as a
 * precondition); 0, or -1 with e. */
int stack_finalizer_set(struct stack_pass *p, int present, struct err *e);
/* Creates or updates the outputs Secret <name>-outputs. */
int stack_outputs_write(struct stack_pass *p, struct err *e);
/* status.outputs from an outputs Secret stack_outputs_write wrote (a Job's
 * pod): its STACK_ANN_MASKED_OUTPUTS copy; without a readable one (too
 * large, an older writer) every data key as "[secret]".  Never decodes
 * data.  Caller frees. */
cJSON *stack_outputs_from_secret(const cJSON *secret);

/* Does the Stack carry a reconcile request not yet handled (Flux's
 * requestedAt, or the operator's reconciliation-request)? */
int stack_pass_requested(const struct stack_pass *p);

/* Small readers of the cached status. */
const char *stack_status_str(const struct stack_pass *p, const char *path);
long long stack_status_int(const struct stack_pass *p, const char *path, long long dflt);
int stack_has_finalizer(const cJSON *obj);
int64_t stack_parse_time_us(const char *rfc3339);

#endif
