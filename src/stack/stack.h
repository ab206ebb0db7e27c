/*
 * stack.h - the Stack controller (the one public header of src/stack/).
 *
 * A Stack (pulumi.com/v1, kind Stack) names a Pulumi program (a Flux
 * source's artifact, an OCI artifact, or a Git repository through a Flux
 * GitRepository the controller creates) and how to run it.  This module
 * watches Stacks and everything they refer to, decides when an update is due,
 * runs it through the pulumi driver (src/pulumi/) in a workspace built from
 * the artifact store (fluxsource/, oci/), and writes status, Events and the
 * outputs Secret.  docs/stack-api.md is the user's view of the same.
 *
 * It sits between `run` (src/cli/cmd_run.c: process, signals, leader election,
 * probes) and the libraries below it:
 *
 *     cmd_run --> stack --> {pulumi, kube, fluxsource, oci} --> base
 *
 * Use:
 *     struct stack_ctl *sc = stack_ctl_new(client, queue, recorder, &opts, &e);
 *     stack_ctl_watch(sc, &e);                      discovery + informers
 *     ... wait for stack_ctl_synced(sc) ...
 *     kube_workers_start(queue, n, stack_ctl_reconciler(sc), &e);
 *     ... stack_ctl_interrupt(sc) on a lost Lease or when the grace ran out ...
 *     stack_ctl_unwatch(sc);  (after the workers stopped)
 *     stack_ctl_free(sc);
 *
 * The controller borrows the client, queue and recorder: they must outlive
 * it.  Every other pointer it hands out is borrowed from it.
 */
#ifndef PC_STACK_H
#define PC_STACK_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "kube/kube.h"

/* What `run`'s flags set.  Strings are borrowed for the controller's life. */
struct stack_opts {
	const char *storage_path;       /* artifacts/, workspaces/, pulumi-home/ */
	const char *pulumi_bin;         /* NULL: "pulumi" from PATH */
	const char *pulumi_home;        /* NULL: <storage_path>/pulumi-home */
	const char *namespace;          /* NULL: all namespaces */
	const char *label_selector;     /* Stacks only (sharding) */
	const char *configs_selector;   /* ConfigMaps/Secrets watched; NULL: all */
	const char *identity;           /* who this incarnation is, for locks; NULL: hostname */
	const char *lease;              /* "namespace/name" of the Lease held while working
	                                 * (--leader-elect); NULL: none */
	long lock_grace_ms;             /* a lock an interrupted update of this Lease left is
	                                 * cancelled only after holding the Lease this long:
	                                 * the pod that lost it may still be ending its CLI */
	long update_timeout_ms;         /* one update, unless spec.timeout says otherwise */
	long long max_artifact_bytes;   /* one artifact download */
	long requeue_dependency_ms;     /* while a source or reference is missing */
	int max_failures;               /* consecutive failures before Stalled */
	long watch_idle_timeout_s;      /* passed to every informer */
	/* The Job runner (docs/job-runner.md): runner_job makes Job the default
	 * of Stacks that name no spec.runner.type; a Stack may use Jobs only
	 * when job_image is set. */
	int runner_job;
	const char *job_image;
	const char *job_plugins_dir;    /* in the image: run-update's --plugins-dir (NULL: none) */
	int max_concurrent_jobs;        /* across the controller */
	long job_ttl_s;                 /* ttlSecondsAfterFinished */
	long job_start_timeout_ms;      /* a pod not started by then fails the update */
};

/* Defaults documented in docs/run.md. */
void stack_opts_default(struct stack_opts *o);

struct stack_ctl;

struct stack_ctl *stack_ctl_new(struct kube_client *c, struct kube_queue *q,
    struct kube_recorder *rec, const struct stack_opts *o, struct err *e);
void stack_ctl_free(struct stack_ctl *sc);

/* Discovers the Stack API and the served Flux source kinds and starts the
 * informers (Stacks, sources, metadata-only ConfigMaps and Secrets).  Fails
 * when the Stack CRD is not served. */
int stack_ctl_watch(struct stack_ctl *sc, struct err *e);
/* Looks again for the Flux source kinds that were not served (Flux
 * installed after the controller) and starts watching those now served;
 * every Stack is queued again so none stays Stalled on SourceKindNotServed.
 * Returns how many kinds are still missing.  Call from the thread that
 * called stack_ctl_watch, now and then. */
int stack_ctl_rediscover(struct stack_ctl *sc);
/* Stops and joins every informer; call after the workers stopped. */
void stack_ctl_unwatch(struct stack_ctl *sc);
/* 1 once every informer has its first list. */
int stack_ctl_synced(struct stack_ctl *sc);
/* Cached Stacks, for the "caches synced" log line. */
size_t stack_ctl_stack_count(struct stack_ctl *sc);

/* The reconciler the workers call (borrowed from sc). */
const struct kube_reconciler *stack_ctl_reconciler(struct stack_ctl *sc);
/* Cancels every running pulumi operation the way the CLI expects (SIGINT,
 * then SIGTERM and SIGKILL): on a lost Lease, and when the shutdown grace
 * ran out.  New operations return at once as cancelled. */
void stack_ctl_interrupt(struct stack_ctl *sc);
/* Called once this process leads (holds the Lease), before its workers
 * start: the lock grace (stack_opts.lock_grace_ms) counts from here. */
void stack_ctl_leading(struct stack_ctl *sc);

/* Removes artifact trees no cached Stack uses (older than an hour) and the
 * workspaces of Stacks no longer cached.  The store must be this
 * controller's own (one volume per replica).  Run it now and then from one
 * thread; workers may run meanwhile. */
void stack_ctl_gc(struct stack_ctl *sc);

/* Prometheus text for the controller's own families (cache sizes, informer
 * counters, updates by result). */
void stack_ctl_metrics(struct stack_ctl *sc, FILE *out);
/* {"stacks": {"ns/name": "rv"}, "gitrepositories": …} for the tests. */
int stack_ctl_dump_cache(struct stack_ctl *sc, const char *path);


/* ------------------------------------------------------------ run-update */

/*
 * One update inside a Job's pod (stack_runner.c, stack_runner_io.c; `pulumi-controller
 * run-update`, docs/job-runner.md and docs/cli.md): the controller puts
 * the update's non-secret inputs into the pod's environment as JSON, and
 * the pod goes
 *
 *     input --> artifact --> workspace --> driver --> result
 *
 *     struct stack_run_input *in = stack_run_input_parse(json, &e);
 *     struct stack_run_result r;
 *     stack_run(in, &opts, &r);                  never fails: r says how it went
 *     char *msg = stack_run_termination(&r, STACK_RUN_TERMINATION_MAX);
 *     exit(stack_run_exit_code(&r));
 *
 * Secret values never pass through the JSON: it names the environment
 * variables (filled by the kubelet from secretKeyRef / configMapKeyRef)
 * that hold them.
 */

/* The termination message's size limit (the kubelet keeps 4096 bytes). */
#define STACK_RUN_TERMINATION_MAX 3584

/* A config key and its value (config) or the environment variable that
 * holds its value (secretConfig, configFromEnv). */
struct stack_run_pair {
	char *key;
	char *value;
};

/* PULUMI_CONTROLLER_UPDATE, parsed.  Every string is owned. */
struct stack_run_input {
	char *operation;                  /* "up", "preview", "destroy", "refresh" */
	char *namespace, *name;           /* the Stack object */
	char *stack;                      /* the pulumi stack */
	char *fingerprint;
	int oci;                          /* source.kind: 0 "artifact", 1 "oci" */
	char *url, *digest, *revision;    /* artifact: the tarball's URL and digest */
	char *manifest_digest, *layer_digest, *media_type;   /* oci (url too) */
	char *index_digest;               /* oci: the index the controller resolved; NULL */
	int insecure, verify;
	char *dir, *backend, *secrets_provider;   /* NULL when absent */
	char *backend_env, *secrets_provider_env; /* backendFromEnv, secretsProviderFromEnv: the
	                                           * variable holding the value (the controller's
	                                           * Secret, which may carry credentials); NULL */
	struct stack_run_pair *config;    /* plaintext values */
	size_t n_config;
	struct stack_run_pair *secret_config;   /* value: an env name */
	size_t n_secret_config;
	struct stack_run_pair *config_from_env; /* value: an env name */
	size_t n_config_from_env;
	char **structured;                /* keys whose value is JSON text */
	size_t n_structured;
	char **env;                       /* variable names passed to pulumi */
	size_t n_env;
	int refresh;
	char **targets;
	size_t n_targets;
	char **policy_packs;
	size_t n_policy_packs;
	int target_dependents, run_program, local_stack_only;   /* the operator's flags */
	char **environments;              /* Pulumi ESC environments to import */
	size_t n_environments;
	char *outputs_secret;
	char *plan_secret;                /* plan: the Secret the plan goes to (<name>-plan-result) */
	char *plan_id;                    /* up: the approved plan, mounted (--plan-dir) */
	char *plan_after;                 /* up: the plan applied before it (its id includes it); NULL */
	long timeout_seconds;
	char *cancel_lock;                /* a lock owner the controller found gone; NULL */
};

/* Parses and validates the JSON; NULL with ERR_INVALID naming the field
 * ("source.digest: …").  Free with stack_run_input_free. */
struct stack_run_input *stack_run_input_parse(const char *json, struct err *e);
void stack_run_input_free(struct stack_run_input *in);

/* Where the pod finds things (flags of run-update); strings borrowed. */
struct stack_run_opts {
	const char *work_dir;             /* store, workspace, PULUMI_HOME; required */
	const char *oci_secret_dir;       /* .dockerconfigjson, ca.crt; NULL: none */
	const char *verify_keys_dir;      /* public keys for "verify"; NULL: none */
	const char *service_account_dir;  /* token, ca.crt for the outputs Secret */
	const char *plan_dir;             /* the approved plan (plan.json); NULL: none */
	const char *kube_host, *kube_port;   /* KUBERNETES_SERVICE_HOST/PORT */
	const char *pulumi_bin;           /* NULL: the driver's lookup of "pulumi" */
	const char *plugins_dir;          /* the image's plugin cache, linked as
	                                   * PULUMI_HOME/plugins; NULL: none */
	const char *identity;             /* for lock messages; NULL: hostname */
	long long max_artifact_bytes;     /* one artifact download; 0: the default, -1: none */
	const volatile int *cancel;       /* set by SIGTERM: stop the CLI gracefully */
};

/* The failure classes of the termination message. */
enum stack_run_class {
	STACK_RUN_OK, STACK_RUN_CONFLICT, STACK_RUN_TIMEOUT, STACK_RUN_POLICY, STACK_RUN_CLI,
	STACK_RUN_SOURCE, STACK_RUN_INTERNAL, STACK_RUN_FAILED,
};
const char *stack_run_class_name(enum stack_run_class c);

enum stack_run_outputs { STACK_RUN_OUTPUTS_NONE, STACK_RUN_OUTPUTS_WRITTEN, STACK_RUN_OUTPUTS_FAILED };

/* How one run went: the termination message's fields. */
struct stack_run_result {
	int status;                       /* enum pl_status */
	enum stack_run_class cls;
	int usage;                        /* the input was refused (exit 2) */
	char message[2048];               /* secrets masked */
	cJSON *changes;                   /* owned; NULL: none */
	enum stack_run_outputs outputs;
	int lock_present;
	char lock_owner[128], lock_created[48];
	long lock_pid;
	cJSON *drift;                     /* owned; NULL: none. [{op, urn}]: what a
	                                   * refresh found changed (drift check, up --refresh) */
	int drift_omitted;                /* drifted resources beyond drift */
};

/* Runs the update in; fills r (release with stack_run_result_free). */
void stack_run(const struct stack_run_input *in, const struct stack_run_opts *o,
    struct stack_run_result *r);
void stack_run_result_free(struct stack_run_result *r);
/* r for an input that was refused (exit 2), message from e. */
void stack_run_result_usage(struct stack_run_result *r, const struct err *e);
/* The termination message: compact JSON of at most max bytes (the
 * message cut to fit), always valid JSON and UTF-8.  Caller frees. */
char *stack_run_termination(const struct stack_run_result *r, size_t max);
/* 0 the operation succeeded, 1 it failed, 2 the input was refused. */
int stack_run_exit_code(const struct stack_run_result *r);

#endif
