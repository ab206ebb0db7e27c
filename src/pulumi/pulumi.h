/*
 * pulumi.h - the pulumi driver: runs the real `pulumi` CLI on one stack the
 * way the Automation API does, with the differences this project needs
 * (environment built from nothing, secret config through stdin, a timeout
 * that kills the CLI's whole process group, bounded output, every known
 * secret value masked in what comes back).  The reconciler (src/stack/)
 * is its only caller; docs/pulumi-driver.md describes the behaviour.
 *
 * Use:
 *     struct pl_stack *st = pl_open(&spec, &e);      spec is deep-copied
 *     struct pl_result r;
 *     pl_ensure_stack(st, &r);  pl_result_free(&r);   select, else init
 *     pl_apply_config(st, &r);  ...                   set-all / set --secret / rm
 *     pl_install(st, key, &r); ...                    only when dependencies changed
 *     pl_up(st, &opts, &r); ...                       summary and outputs from the event log
 *     pl_outputs(st, 1, &r); ...                      masked + plaintext outputs,
 *                                                     needed only if r.has_secret_outputs
 * or, fewer calls: pl_apply_secret_config, then pl_up with opts.with_config,
 * then pl_outputs_shown(st, up's r.outputs, ...) only if r.has_secret_outputs.
 *     pl_close(st);
 *
 * Every operation fills a caller-provided struct pl_result (always, also on
 * failure; release it with pl_result_free) and returns 0 when its status is
 * PL_OK, -1 otherwise.  A pl_stack may be used by one thread at a time;
 * different stacks may run in parallel threads.
 */
#ifndef PC_PULUMI_H
#define PC_PULUMI_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "base/err.h"

/* Oldest CLI accepted: state files carry secrets_providers from here on
 * (reference/pulumi-cli.md §0), and every flag the driver passes exists. */
#define PL_MIN_VERSION "3.135.0"

enum pl_status {
	PL_OK = 0,
	PL_FAILED,               /* any other failure (resource errors, bad flags...) */
	PL_CONFLICT,             /* another update in progress / the stack is locked */
	PL_NOT_FOUND,            /* the stack does not exist */
	PL_PROGRAM_ERROR,        /* the program failed to compile or to run */
	PL_POLICY_VIOLATION,     /* a mandatory policy failed */
	PL_CHANGES_NOT_EXPECTED, /* --expect-no-changes and changes were proposed */
	PL_PLAN_VIOLATION,       /* up --plan diverged from the saved plan */
	PL_TIMEOUT,              /* the operation's timeout expired; the group was killed */
	PL_CANCELED,             /* the CLI reported a cancelled update */
	PL_CLI_MISSING,          /* the pulumi binary could not be found or started */
	PL_CLI_TOO_OLD,          /* `pulumi version` is below the minimum */
	PL_INTERNAL,             /* driver-side failure: bad spec, I/O, memory */
};

/* Stable lower-case name ("conflict", "timeout"...), for conditions and logs. */
const char *pl_status_name(enum pl_status s);

/* An environment value for the child.  secret: the value is masked in
 * everything the driver returns or logs (passwords, cloud keys). */
struct pl_env_var {
	const char *name;
	const char *value;
	int secret;
};

/*
 * One declared config key.  key: "greeting" (the project namespace is added
 * by the CLI) or "aws:region".  value: the string value; with structured=1
 * it is JSON text (object, array, number, bool) and is set leaf by leaf with
 * `--path` ("k.a[0]").  secret=1: set with `config set --secret`, value on
 * stdin, and masked in everything returned.
 */
struct pl_config_item {
	const char *key;
	const char *value;
	int secret;
	int structured;
};

/* Everything the driver needs about one stack.  All strings are copied by
 * pl_open; the caller keeps ownership of what it passed. */
struct pl_spec {
	const char *pulumi_bin;        /* path, or a name looked up in search_path; NULL: "pulumi" */
	const char *search_path;       /* the child's PATH; NULL: this process's PATH (else /usr/local/bin:/usr/bin:/bin) */
	const char *home;              /* the child's HOME; NULL: pulumi_home */
	const char *pulumi_home;       /* PULUMI_HOME, shared by all stacks (one plugin cache); required */
	const char *workdir;           /* the directory holding Pulumi.yaml; required */
	const char *scratch_dir;       /* driver-private directory (event logs, plans, markers),
	                                * one per stack, created if missing; required */
	const char *stack;             /* stack name; required */
	const char *backend_url;       /* PULUMI_BACKEND_URL; NULL: Pulumi.yaml / credentials.json */
	const char *secrets_provider;  /* for `stack init --secrets-provider`; NULL: CLI default */
	const char *passphrase;        /* PULUMI_CONFIG_PASSPHRASE (a secret); NULL: unset */
	const struct pl_env_var *env;  /* the stack's own environment and provider variables */
	size_t n_env;
	const struct pl_config_item *config;
	size_t n_config;
	long timeout_ms;               /* per CLI call; 0: one hour */
	long grace_ms;                 /* SIGINT -> SIGTERM -> SIGKILL spacing; 0: 10 s */
	size_t tail_max;               /* stdout/stderr bytes kept per call; 0: 64 KiB */
	const char *min_version;       /* NULL: PL_MIN_VERSION */
	int skip_version_check;        /* trust the binary (a development build may print
	                                * no version), as PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK */
	int no_create;                 /* pl_ensure_stack never creates the stack (PKO's
	                                * useLocalStackOnly): a missing one is PL_NOT_FOUND */
	const char *const *environments; /* Pulumi ESC environments the stack imports
	                                * (pl_apply_environments) */
	size_t n_environments;
};

struct pl_stack;

/* Validates and deep-copies spec; creates scratch_dir.  NULL + e on error.
 * The result is freed with pl_close. */
struct pl_stack *pl_open(const struct pl_spec *spec, struct err *e);
void pl_close(struct pl_stack *st);

/* One resource step seen in the event log while an operation runs. */
struct pl_step {
	const char *op;     /* "create", "update", "same"... (valid during the callback only) */
	const char *urn;
	const char *type;
	int done;           /* 0: resourcePreEvent, 1: resOutputsEvent */
	int failed;         /* 1: resOpFailedEvent */
	int drifted;        /* the outcome of an update's refresh that changed the state
	                     * (op "refresh" with diffs): drift */
};

typedef void (*pl_progress_fn)(void *arg, const struct pl_step *step);

struct pl_op_opts {
	const char *plan_file;         /* preview: --save-plan FILE; up: --plan FILE */
	int refresh;                   /* preview/up/destroy: --refresh */
	int expect_no_changes;         /* preview/up/refresh: --expect-no-changes */
	int preview_only;              /* refresh/destroy: --preview-only */
	const char *const *targets;    /* --target URN, repeated */
	size_t n_targets;
	int target_dependents;         /* with targets: --target-dependents */
	int run_program;               /* refresh/destroy: --run-program=true */
	const char *const *policy_packs; /* --policy-pack DIR, repeated */
	size_t n_policy_packs;
	/* up: pass the stack's plaintext config as `--config k=v` (the CLI sets
	 * and saves it in the same call; structured leaves still take one
	 * `config set-all --path` before it), so the caller applies only the
	 * rest with pl_apply_secret_config instead of pl_apply_config. */
	int with_config;
	pl_progress_fn progress;       /* may be NULL; called from the calling thread */
	void *progress_arg;
};

struct pl_summary {
	int present;                   /* a summaryEvent was read */
	int count;                     /* how many summaryEvents (should be 1) */
	int is_preview;
	long duration_seconds;
	char result[16];               /* "succeeded", "failed", "canceled", "" (older CLIs) */
	cJSON *changes;                /* {"create": 1, "same": 2}; owned by the result */
};

/* Who holds the lock, from the CLI's conflict text ("created by
 * user@host (pid N) at TIME"), so the caller can judge whether it is
 * stale (e.g. held by a previous incarnation of this controller). */
struct pl_lock {
	int present;
	char owner[128];               /* "user@host" */
	long pid;
	char created[48];              /* as printed, RFC 3339 */
};

struct pl_result {
	enum pl_status status;
	int exit_code;                 /* CLI exit status, -1 when it did not exit normally */
	char message[512];             /* short, status-fit; every known secret is "[secret]" */
	struct pl_summary summary;     /* from the event log (preview/up/refresh/destroy) */
	int steps;                     /* resource steps started */
	int failed_steps;
	int policy_violations;         /* mandatory policy events */
	struct pl_lock lock;           /* PL_CONFLICT on a file:// backend: the first lock */
	/* pl_outputs: masked ("[secret]").  pl_up: the root stack's outputs as
	 * this update registered them, read from the event log, secret values
	 * "[secret]" (NULL when the log holds none, e.g. the program failed
	 * before registering them: then ask pl_outputs).  Owned by the result. */
	cJSON *outputs;
	/* pl_up, pl_outputs: some output is secret, so only
	 * pl_outputs(st, 1, ...) can tell its value.  When 0 after a pl_up that
	 * set outputs, r->outputs is complete and no further call is needed. */
	int has_secret_outputs;
	cJSON *outputs_plain;          /* pl_outputs with show_secrets; owned; never log it */
	cJSON *history;                /* pl_last_history: the newest entry; owned */
	char *out_tail;                /* bounded stdout/stderr tails, secrets masked; owned */
	char *err_tail;
};

void pl_result_free(struct pl_result *r);

/* `pulumi version` (once per binary per process): PL_CLI_TOO_OLD names the
 * version found.  Every operation below runs it first. */
int pl_check_version(struct pl_stack *st, struct pl_result *r);

/* `stack select --stack S`; when the CLI says it does not exist,
 * `stack init S [--secrets-provider P]` (with spec.no_create: PL_NOT_FOUND). */
int pl_ensure_stack(struct pl_stack *st, struct pl_result *r);

/* `config env add ENV... --yes` for each of spec.environments the stack's
 * settings file does not import yet (nothing else is removed or
 * reordered); no CLI call when it imports them all.  Only a Pulumi Cloud
 * backend has environments: elsewhere the CLI's refusal is the result. */
int pl_apply_environments(struct pl_stack *st, struct pl_result *r);

/* Plaintext keys with `config set-all` (structured leaves with --path),
 * each secret key with `config set --secret KEY` (value on stdin) unless
 * the driver set that very value last time and the settings file is still
 * the one it left (docs/pulumi-driver.md), then `config rm` for every key
 * in the stack that is no longer declared.  With nothing changed and
 * nothing to remove, only the plaintext `set-all` runs. */
int pl_apply_config(struct pl_stack *st, struct pl_result *r);

/* pl_apply_config without the plaintext keys, for a caller that passes
 * them with pl_up (opts.with_config): with nothing changed, no CLI call at
 * all. */
int pl_apply_secret_config(struct pl_stack *st, struct pl_result *r);

/* `pulumi install` unless `key` is the one installed last time (recorded
 * in scratch_dir/installed-key); NULL key: always install.  Callers pass
 * pl_dependency_key's key, so a revision that changes no dependency
 * declaration installs nothing. */
int pl_install(struct pl_stack *st, const char *key, struct pl_result *r);

/* The dependency key of the program in workdir (pl_deps.c: Pulumi.yaml's
 * runtime, plugins and packages, and the language's dependency and lock
 * files), as 64 hex characters into out (outlen >= 65).  1: written; 0:
 * the runtime has no key (not yaml, nodejs, python or go: always install);
 * -1 + e: Pulumi.yaml or a dependency file cannot be read. */
int pl_dependency_key(const char *workdir, char *out, size_t outlen, struct err *e);

/* The directories an install fills inside workdir (node_modules, venv,
 * .venv, a python runtime's relative `virtualenv` option), at most max,
 * into dirs; returns how many.  A workspace rebuilt for a revision with the
 * same dependency key keeps these. */
size_t pl_dependency_dirs(const char *workdir, char dirs[][256], size_t max);

int pl_preview(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r);
int pl_up(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r);
int pl_refresh(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r);
int pl_destroy(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r);

/* `cancel --yes`: removes the stack's lock.  Call it only for a lock known
 * to be stale (its holder is gone); it would break a running update. */
int pl_cancel(struct pl_stack *st, struct pl_result *r);

/*
 * Asks the operation running on st (in another thread) to stop the way the
 * CLI expects: SIGINT to its process group (a graceful cancel that releases
 * the lock), then SIGTERM and SIGKILL after grace_ms each.  The request
 * sticks: later operations on st return PL_CANCELED without running.  The
 * only function that may be called concurrently with another on st.
 */
void pl_interrupt(struct pl_stack *st);

/* `stack output --json` into r->outputs; with show_secrets also
 * `--show-secrets` into r->outputs_plain, and the secret output values join
 * the set of masked values. */
int pl_outputs(struct pl_stack *st, int show_secrets, struct pl_result *r);

/* After a pl_up that set r->outputs and r->has_secret_outputs: only the
 * `stack output --json --show-secrets` call, into r->outputs_plain (the
 * secret values join the masked ones); r->outputs gets a copy of masked
 * (the up's r->outputs: its "[secret]" places say which values are
 * secret; the caller keeps ownership).  r must be another result than
 * the up's: every operation starts by clearing r. */
int pl_outputs_shown(struct pl_stack *st, const cJSON *masked, struct pl_result *r);

/* `stack history --json --page-size 1 --page 1` into r->history (left
 * NULL when the stack has no history yet).  Unlike the Go SDK it does not
 * pass --show-secrets: the CLI then leaves secret config values out. */
int pl_last_history(struct pl_stack *st, struct pl_result *r);

/* ---- parsers, exposed for tests and fuzzing ---- */

/* Parses "v3.135.0\n" (leading v optional, pre-release ignored). */
int pl_parse_version(const char *s, int *major, int *minor, int *patch);

/* What an event log said.  Fed bytes in any chunking; lines may be split. */
struct pl_events {
	struct pl_summary summary;     /* changes owned here until taken */
	int events;                    /* JSON lines parsed */
	int bad_lines;                 /* lines that were not an engine event */
	int saw_prelude, saw_cancel;
	int steps, failed_steps, policy_violations;
	int program_errors;            /* error diagnostics on the stack itself (no urn, or the
	                                * root pulumi:pulumi:Stack): the program failed */
	char first_error[256];         /* first error diagnostic (first line) */
	char first_policy[256];        /* first mandatory policy message */
	/* The root stack's outputs from its last resOutputsEvent, every secret
	 * value (Pulumi's secret signature) as "[secret]"; NULL when none was
	 * seen.  Owned here until taken. */
	cJSON *outputs;
	int has_secret_outputs;        /* outputs holds at least one "[secret]" */
	/* Masked (pl_redact) in a diagnostic or policy message before it is cut
	 * into first_error/first_policy; may be NULL; not owned. */
	const char *const *secrets;
	size_t n_secrets;
	pl_progress_fn progress;
	void *progress_arg;
	char *partial;                 /* an incomplete last line; owned */
	size_t partial_len;
	int skipping;                  /* inside an over-long line */
};

void pl_events_init(struct pl_events *ev);
void pl_events_feed(struct pl_events *ev, const char *data, size_t len);
/* Parses what is left after the last newline (the writer exited). */
void pl_events_finish(struct pl_events *ev);
void pl_events_free(struct pl_events *ev);

/* `stack output --json` text -> an object (caller frees); NULL when it is
 * not a JSON object. */
cJSON *pl_parse_outputs(const char *text);
/* `stack history --json` text -> a copy of element 0 (caller frees); NULL
 * when empty or malformed (*empty set to 1 for a valid empty array). */
cJSON *pl_parse_history(const char *text, int *empty);

/* Shortest line of a multi-line secret that is masked on its own. */
#define PL_REDACT_MIN_LINE 8

/*
 * Replaces with "[secret]", in s, every occurrence of each secret and of
 * its JSON-escaped form; for a multi-line secret (a PEM key, a JSON key
 * file) also every line of it, trimmed of blanks, of at least
 * PL_REDACT_MIN_LINE bytes; for a secret that is a JSON object or array
 * also its string leaves of that length and their lines.  Longer texts
 * are masked first.  Returns a new string (caller frees); NULL when out of
 * memory.
 */
char *pl_redact(const char *s, const char *const *secrets, size_t n);
/* 1 when name may be a variable of a pl_spec's env: [A-Za-z_][A-Za-z0-9_]*
 * and none of those the driver sets itself (PATH, HOME, PULUMI_HOME, ...).
 * pl_open refuses a spec with any other. */
int pl_env_name_ok(const char *name);

/* pl_redact for a bounded output tail; truncated: the tail does not start
 * at the start of the output, so its first (partial) line, which may hold
 * the end of a secret, is dropped. */
char *pl_redact_tail(const char *tail, int truncated, const char *const *secrets, size_t n);

/* pl_redact with the secrets pl_open(sp) would record (the passphrase,
 * secret config values and their JSON leaves, secret env values, the
 * backend URL's credentials), for text a stack's operations printed
 * somewhere else (a Job's pod).  Only the env, config, stack, backend_url
 * and passphrase of sp are read; nothing is created.  Returns a new string
 * (caller frees); NULL when out of memory or sp's env or config is invalid
 * (then nothing of s may be shown). */
char *pl_spec_redact(const struct pl_spec *sp, const char *s);

#endif
