/*
 * stack_model.h - the bottom layer of the Stack reconciler (src/stack/):
 * what a Stack is and what one pass over it holds.  Every other layer
 * builds on it; it includes nothing of theirs.  docs/architecture.md has
 * the whole map; the public interface is stack.h.
 *
 * The layers, each including only the headers below it (checked by
 * scripts/check-layers, run by `make unit`):
 *   stack_model.h    the model: spec, inputs, status, plans, metrics, the
 *                    controller state passes read, the pass, the seam's
 *                    interface
 *   stack_sources.h  from a source to a verified tree and a workspace
 *   stack_gates.h    what decides whether an operation may run
 *   stack_exec.h     the executors that run it (local, Job)
 *   stack_machine.h  the state machine: one pass (stack_reconcile.c)
 *   stack_pod.h      run-update, the Job pod's program (beside the machine)
 * and stack_ctl.c, the controller, above all of them.
 *
 * The files of this layer:
 *   stack_shared.c      options and the controller state a pass reads
 *                       (caches, running operations, freshness)
 *   stack_spec_field.c  the typed field readers the spec parsers share
 *   stack_spec.c        spec parsing and validation (struct stack_spec)
 *   stack_spec_git.c    the Git sources: programRef {repo}, projectRepo
 *   stack_spec_runner.c spec.runner (hostile pod templates refused)
 *   stack_spec_pko.c    the operator's deprecated input fields and flags
 *   stack_inputs.c      config, secrets and environment values, fingerprint
 *   stack_status.c      status reading and writing, conditions, Events,
 *                       the finalizer and the outputs Secret
 *   stack_plan.c        what a plan is: strict parsing, its id, its steps
 *   stack_metrics.c     what the controller counts (Prometheus families)
 */
#ifndef PC_STACK_MODEL_H
#define PC_STACK_MODEL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include <cjson/cJSON.h>

#include "base/strmap.h"
#include "kube/kube.h"
#include "pulumi/pulumi.h"
#include "stack/stack.h"

struct stack_pass;

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
/* On every object made for a Stack's Jobs (a pod template may not set them). */
#define STACK_JOB_LABEL_MANAGED "app.kubernetes.io/managed-by"
#define STACK_JOB_MANAGER "pulumi-controller"
#define STACK_JOB_ANN_RECORDED "pulumi.com/result-recorded"

/* The STACK_LABEL_NAME value for Stack name: a label value holds at most 63
 * characters, a Stack name up to 253, so longer names are cut (at a letter or
 * digit, as a label must end).  Labels only help people select; every lookup
 * goes by ownerReference, which carries the whole name. */
#define STACK_LABEL_VALUE_MAX 64
void stack_label_value(const char *name, char out[STACK_LABEL_VALUE_MAX]);
/* The ownerReferences of an object the Stack (api_version, name, uid) owns
 * as its controller, so that the garbage collector removes it with the Stack
 * and ownership checks know it.  api_version NULL means pulumi.com/v1, uid
 * NULL the empty string.  The caller owns the returned array. */
cJSON *stack_owner_refs(const char *api_version, const char *name, const char *uid);
/* 1 for an environment variable a Stack may not set (envRefs, envs, the
 * pod template's env): PULUMI_CONTROLLER_*, HOME, KUBERNETES_*, which the
 * controller sets for the CLI and the Job's pod. */
int stack_env_reserved(const char *name);

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
	struct stack_kind programs;       /* pulumi.com/v1 Program, when served */

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
/* The kinds being watched (a Flux kind or Program not served is left out)
 * into out[STACK_KINDS_MAX]; their count. */
#define STACK_KINDS_MAX 8
int stack_ctl_kinds(struct stack_ctl *sc, struct stack_kind **out);
int stack_ctl_refresh(struct stack_pass *p);
/* Registers a pulumi stack as running (so interrupt reaches it); returns -1
 * when the controller was interrupted already (nothing may start). */
int stack_ctl_track(struct stack_ctl *sc, struct stack_running *r, struct pl_stack *pl);
void stack_ctl_untrack(struct stack_ctl *sc, struct stack_running *r);

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

/* The operator's envFrom lists (envs as a list of ConfigMap names,
 * envSecrets): every key of the object becomes a variable, resolved per
 * pass (stack_inputs.c). */
struct stack_env_from {
	enum stack_value_kind kind;    /* SECRET or CONFIGMAP */
	char *object;
	const char *field;             /* "spec.envs", "spec.envSecrets" (static) */
};

/* PROGRAM is the classic programRef {repo} (and projectRepo): a GitRepository
 * the controller makes; PROGRAM_OBJECT is the operator's programRef {name}:
 * a Program (pulumi.com/v1) rendered into Pulumi.yaml (stack_program.c). */
enum stack_source_type { STACK_SRC_FLUX, STACK_SRC_OCI, STACK_SRC_PROGRAM, STACK_SRC_PROGRAM_OBJECT };

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

/* spec.runner, validated (stack_spec_runner.c).  The cJSON members are owned
 * copies of what the spec said (NULL: not given). */
struct stack_runner {
	enum stack_runner_type type;
	char *service_account;            /* NULL: <name>-runner (plan Jobs: <name>-planner), made by the controller */
	cJSON *labels, *annotations;      /* podTemplate.metadata */
	cJSON *resources, *node_selector, *tolerations, *affinity;
	cJSON *env, *volumes, *volume_mounts;
};

/* The operator's Git credentials (spec.gitAuth, spec.gitAuthSecret), which
 * stack_git_auth.c writes into the Secret <name>-git-auth in
 * source-controller's shape.  v[] by kind: SSH {private key, passphrase
 * (optional)}, TOKEN {token}, BASIC {user name, password}, APP {app id,
 * installation id, private key}; n of them are set. */
enum stack_git_auth_kind {
	STACK_GIT_NONE, STACK_GIT_SECRET, STACK_GIT_SSH, STACK_GIT_TOKEN, STACK_GIT_BASIC, STACK_GIT_APP,
};
struct stack_git_auth {
	enum stack_git_auth_kind kind;
	char *secret;                     /* SECRET: the gitAuthSecret, read as the operator reads it */
	struct stack_value v[3];
	int n;
};

/* A parsed, validated spec.  Every string is owned; stack_spec_free. */
struct stack_spec {
	char *stack;
	enum stack_source_type source;
	char *src_kind, *src_name;        /* FLUX and PROGRAM (GitRepository <name>-program);
	                                   * PROGRAM_OBJECT: "Program" and programRef.name */
	char *dir;                        /* NULL: the artifact's root */
	char *oci_url, *oci_tag, *oci_digest, *oci_semver, *oci_media_type;
	char *oci_secret, *oci_cert_secret;
	int oci_insecure;
	long oci_interval_ms;
	int oci_verify;                   /* ociSource.verify (cosign, keys in oci_verify_secret) */
	char *oci_verify_secret;
	char *prog_repo, *prog_ref;       /* PROGRAM */
	int project_repo;                 /* PROGRAM from the operator's projectRepo (branch/commit in prog_ref) */
	struct stack_git_auth git_auth;   /* with projectRepo */
	char *backend, *secrets_provider;
	char *cloud_ignored;              /* a `cloud` value that is no backend URL */
	char *cloud_shadowed;             /* a `cloud` URL that spec.backend overrides */
	struct stack_config *config;
	size_t n_config;
	struct stack_envvar *env;
	size_t n_env;
	/* env[0..n_env_spec) are named by the spec; the rest are env_from's
	 * keys, which stack_inputs_resolve expands anew on each pass so that
	 * the local and the Job runner see them as named variables. */
	size_t n_env_spec;
	struct stack_env_from *env_from;
	size_t n_env_from;
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
	/* The operator's operation flags (stack_spec_pko.c) */
	int target_dependents;            /* with targets: --target-dependents */
	int run_program;                  /* refresh and destroy: --run-program */
	int local_stack_only;             /* useLocalStackOnly: never `stack init` */
	char **environments;              /* Pulumi ESC environments to import */
	size_t n_environments;
	struct stack_runner runner;
	int job_mode;                     /* updates run as Jobs (spec.runner, --runner) */
};

/* Parses obj's spec; ERR_INVALID with a message naming the field.  out
 * holds what was parsed before a failure too: the caller frees it with
 * stack_spec_free either way. */
int stack_spec_parse(const cJSON *obj, const struct stack_opts *o, struct stack_spec *out,
    struct err *e);
void stack_spec_free(struct stack_spec *s);

/* stack_spec_field.c: one field of an object, typed.  Each returns 0 when
 * the field is absent or null (outputs left NULL, or as they were for the
 * numbers and bools), -1 with "field: must be <what>" in e when it is of
 * another type; the strings are the caller's to free. */
const cJSON *stack_field(const cJSON *o, const char *k);
int stack_field_present(const cJSON *o, const char *k);
int stack_field_typed(const cJSON *o, const char *k, const char *field, cJSON_bool (*is)(const cJSON *),
    const char *what, const cJSON **v, struct err *e);
int stack_field_str(const cJSON *o, const char *k, const char *field, char **out, struct err *e);
/* Absent, or exactly `only`; another value is refused with why. */
int stack_field_only(const cJSON *o, const char *k, const char *field, const char *only, const char *why,
    struct err *e);
int stack_field_obj(const cJSON *o, const char *k, const char *field, const cJSON **out, struct err *e);
int stack_field_bool(const cJSON *o, const char *k, const char *field, int *out, struct err *e);
int stack_field_duration(const cJSON *o, const char *k, const char *field, long *ms, struct err *e);
int stack_field_seconds(const cJSON *o, const char *k, const char *field, long *ms, struct err *e);
/* A NULL-terminated array of *n strings; free each and the array. */
int stack_field_strings(const cJSON *o, const char *k, const char *field, char ***out, size_t *n,
    struct err *e);
/* {name, key} of a Secret or ConfigMap in namespace ns (the Stack's) into v. */
int stack_spec_key_ref(const cJSON *ref, const char *field, const char *ns, enum stack_value_kind kind,
    struct stack_value *v, struct err *e);
/* The operator's ResourceRef {type: Literal|Secret, ...} into v. */
int stack_spec_resource_ref(const cJSON *ref, const char *field, const char *ns, struct stack_value *v,
    struct err *e);
int stack_path_has_dotdot(const char *path);
/* A Kubernetes object name (lower-case DNS subdomain characters, <= 253). */
int stack_object_name_ok(const char *s);

/* stack_spec_git.c: the Git sources into s (the GitRepository <name>-program). */
int stack_spec_parse_program_ref(const cJSON *pr, const char *name, struct stack_spec *s, struct err *e);
int stack_spec_parse_project_repo(const cJSON *spec, const char *name, const char *ns, struct stack_spec *s,
    struct err *e);

/* stack_spec_pko.c: the operator's deprecated input fields (envs as a
 * list, envSecrets, accessTokenSecret, secrets) and its operation flags,
 * into s; ERR_INVALID naming the field. */
int stack_spec_parse_pko(const cJSON *spec, struct stack_spec *s, struct err *e);
/* A list of object names (spec.envs as a list, spec.envSecrets) into s->env_from. */
int stack_spec_parse_env_from(const cJSON *list, const char *field, enum stack_value_kind kind,
    struct stack_spec *s, struct err *e);
/* What stack_spec.c parses with, for stack_spec_pko.c: a variable or a
 * config key added to s (refused when reserved, malformed or set twice). */
int stack_spec_add_env(struct stack_spec *s, const char *field, const char *name, struct err *e);
int stack_spec_add_config(struct stack_spec *s, const char *field, const char *key, struct err *e);
/* Grows *arr (n elements of size) by one zeroed element. */
int stack_spec_grow(void **arr, size_t n, size_t size, struct err *e);
/* A name a variable from an envFrom object may have: one the driver takes
 * (pl_env_name_ok), not reserved (stack_env_reserved), and none that makes a
 * program run other code (LD_*, NODE_*, PYTHON*, GIT_*, ...). */
int stack_env_name_ok(const char *name);
/* At most this many envs/envSecrets objects, and variables made of their
 * keys: one tenant's lists must not hold a worker for long. */
#define STACK_ENV_FROM_MAX 32
#define STACK_ENV_FROM_VARS_MAX 1000
/* At most this many Pulumi ESC environments (spec.environment). */
#define STACK_ENVIRONMENTS_MAX 32

/* stack_spec_runner.c: parses spec.runner into s->runner and decides
 * s->job_mode; ERR_INVALID naming the field (a privileged or host-sharing
 * pod, an oversized list, a reserved name). */
int stack_runner_parse(const cJSON *spec, const struct stack_opts *o, struct stack_spec *s,
    struct err *e);
void stack_runner_free(struct stack_runner *r);

/* What the Stack's source offers now.  Owned strings; stack_artifact_free. */
struct stack_artifact {
	char *revision;     /* "main@sha1:…", "v1.2.0@sha256:…" */
	char *digest;       /* of the tarball (Flux) or the manifest (OCI) */
	char *url;          /* Flux only */
	char *index_digest; /* OCI: the index the tag named, whose signature may vouch for
	                     * the manifest (stack_verify.c); NULL when none */
	char *content;      /* a Program: its rendered Pulumi.yaml, which the fetch
	                     * writes into the store under digest; else NULL */
};
void stack_artifact_free(struct stack_artifact *a);

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
/* status.approval.appliedPlan as the pass leaves it (32 hex), or NULL. */
const char *stack_approval_applied(const struct stack_pass *p);
/* status.preview.steps from a plan: op and URN of every change, at most
 * max; *omitted counts the rest.  Caller frees. */
cJSON *stack_plan_steps(const char *text, int max, int *omitted);
/* A preview's changeSummary ({"create": 1, "same": 2}) in words into buf:
 * "1 to create", or "no resource changes". */
void stack_plan_summary_text(const cJSON *changes, char *buf, size_t n);

/* Adds the AwaitingApproval / Drifted conditions to out (status writes). */
void stack_safety_conditions(const struct stack_pass *p, cJSON *out, const cJSON *old,
    void (*add)(cJSON *out, const cJSON *old, const char *type, const char *status,
        const char *reason, const char *message, long long generation));
/* Hex sha256 of what a plan is made from: the fingerprint's inputs with
 * the spec in place of the generation, approvedPlan and continue left out. */
void stack_plan_inputs_digest(const struct stack_pass *p, char out[65]);

void stack_safety_free(struct stack_safety *s);

/* 1 when the Stack key ("ns/name") is in this controller's Stack cache
 * (its --watch-label-selector's), or there is no Stack informer (tests). */
int stack_ctl_has_stack(struct stack_ctl *sc, const char *key);
/* The same, and the cached Stack's metadata.uid is uid (NULL: any). */
int stack_ctl_has_stack_uid(struct stack_ctl *sc, const char *key, const char *uid);

/*
 * Where a Stack stands, as one value: derived once per pass from the object
 * as the pass found it (stack_phase_of), before the pass writes anything;
 * it stays what the pass found whatever the pass writes later.  The step
 * table (stack_reconcile.c) selects the steps of a pass by it: today the
 * Finalizing and Suspended phases run their own steps and the others share
 * the live ones.  First match wins, in this order.  A Job's pod
 * (stack_runner.c) runs its passes as Updating.
 */
enum stack_phase {
	STACK_PHASE_FINALIZING,   /* metadata.deletionTimestamp is set */
	STACK_PHASE_SUSPENDED,    /* spec.suspend */
	STACK_PHASE_UPDATING,     /* status.currentUpdate: an update was under way
	                           * (a Job's, or one a stopped controller left) */
	STACK_PHASE_AWAITING,     /* AwaitingApproval is True: a plan awaits approval */
	STACK_PHASE_DRIFTED,      /* status.drift.drifted: drift found, not repaired */
	STACK_PHASE_BACKING_OFF,  /* the last update failed */
	STACK_PHASE_IDLE,         /* the last update succeeded, or none ran yet */
};
#define STACK_PHASE_BIT(ph) (1u << (ph))
enum stack_phase stack_phase_of(const cJSON *obj);
/* "Finalizing", "Suspended"...: log lines. */
const char *stack_phase_name(enum stack_phase ph);

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
                                 * older Job), or could not be looked at (p->retry);
                                 * p->v says which: the pass is decided */
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
	enum stack_phase phase;         /* as the pass found the Stack (stack_phase_of) */
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
