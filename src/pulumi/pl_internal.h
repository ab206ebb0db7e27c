/*
 * pl_internal.h - shared between the files of src/pulumi/ only; the public
 * interface is pulumi.h.
 */
#ifndef PC_PL_INTERNAL_H
#define PC_PL_INTERNAL_H

#include <stdatomic.h>
#include <yaml.h>

#include "base/proc.h"
#include "pulumi/pulumi.h"

/* stdout kept for calls whose output is parsed as JSON (stack output...). */
#define PL_JSON_TAIL_MAX (16u * 1024 * 1024)

/* A growable NULL-terminated string vector (pl_util.c): v[n] is NULL;
 * oom is set (and later adds ignored) when an allocation failed. */
struct pl_strv {
	char **v;
	size_t n, cap;
	int oom;
};

/* ---- the stack (pl_spec.c) ---- */

struct pl_env_copy {
	char *name, *value;
	int secret;
};

struct pl_cfg_copy {
	char *key, *value;
	int secret, structured;
};

/* A deep copy of struct pl_spec plus the driver's state for one stack. */
struct pl_stack {
	char *bin, *search_path, *home, *pulumi_home, *workdir, *scratch, *stack;
	char *backend, *provider, *passphrase, *min_version;
	struct pl_env_copy *env;
	size_t n_env;
	struct pl_cfg_copy *cfg;
	size_t n_cfg;
	long timeout_ms, grace_ms;
	size_t tail_max;
	int skip_version_check;
	int no_create;
	struct pl_strv environments;
	struct pl_strv secrets;  /* every known secret value, owned (wiped when freed) */
	int oom;                 /* a secret could not be recorded: fail, never leak */
	atomic_int interrupt;    /* pl_interrupt was called */
};

/* Records v (copied) as a secret; empty and known values are skipped. */
void pl_secret_add(struct pl_stack *st, const char *v);
/* Every string and number leaf of a JSON value, when the whole is secret. */
void pl_secret_add_leaves(struct pl_stack *st, const cJSON *v);

/* ---- one CLI call (pl_call.c) ---- */

enum pl_scope {
	PL_SCOPE_PROBE,      /* `pulumi version`: no Automation API variables */
	PL_SCOPE_WORKSPACE,  /* stack select/init, config, install, stack output */
	PL_SCOPE_STACK,      /* preview/up/refresh/destroy/history/cancel: + PULUMI_DEBUG_COMMANDS */
};

struct pl_cmd {
	const char *op;              /* for messages and logs: "up", "config set" */
	enum pl_scope scope;
	int experimental;
	const char *stdin_data;      /* secret value for `config set --secret` */
	struct pl_events *ev;        /* when an --event-log is read */
	const char *evlog;
	size_t tail_max;             /* 0: the stack's */
	int quiet_ok;                /* a failure here is expected (select before init) */
};

/* Runs `pulumi [--non-interactive] <args>` and classifies the outcome into r
 * (status, message, exit code, tails).  *out receives stdout for callers
 * that parse it (caller frees), when out is not NULL and the call ran.
 * 0 when the status is PL_OK, else -1. */
int pl_call(struct pl_stack *st, const struct pl_cmd *c, struct pl_strv *args,
	    struct pl_result *r, char **out);

/* Zeroes r (nothing owned) with exit_code -1. */
void pl_result_reset(struct pl_result *r);

/* Sets PL_INTERNAL with msg (masked), logs it; returns -1. */
int pl_fail_internal(struct pl_stack *st, struct pl_result *r, const char *op, const char *msg);

/* ---- plaintext config on `up` (pl_config.c) ---- */

/* Appends `--config k=v` for every plaintext key to a (`up`'s argv); the
 * structured plaintext leaves are set first with `config set-all --path`
 * (one call, only when there are any).  -1 with r filled on failure. */
int pl_config_up_args(struct pl_stack *st, struct pl_strv *a, struct pl_result *r);

/* Hex SHA-256 of the stack's settings file ("" when missing), and the
 * secret config state's update after an `up --config` changed the file
 * that had hash `before`. */
void pl_config_settings_hash(struct pl_stack *st, char *out, size_t n);
void pl_config_after_up(struct pl_stack *st, const char *before);

/* ---- pl_version.c ---- */

/* Every operation starts here: the version check (cached), then a fresh r. */
int pl_begin(struct pl_stack *st, struct pl_result *r);

/* ---- helpers (pl_util.c, pl_classify.c) ---- */

/* A growable NULL-terminated vector of owned strings (argv, envp). */
void pl_strv_add(struct pl_strv *s, const char *str);
void pl_strv_addf(struct pl_strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Adds each of the strings that follow s, up to the NULL that ends them:
 * one call for an argv's fixed words, so they read as the command line. */
void pl_strv_addl(struct pl_strv *s, ...) __attribute__((sentinel));
void pl_strv_free(struct pl_strv *s);

/* The keys under `config:` in <workdir>/Pulumi.<stack>.yaml (or .yml; the
 * last "/" segment of stack), as a new cJSON array of strings (caller
 * frees); an empty array when the file does not exist.  -1 + e. */
int pl_stack_config_keys(const char *workdir, const char *stack, cJSON **keys, struct err *e);

/* The path of the stack's settings file, Pulumi.<stack>.yaml or .yml (the
 * last "/" segment of stack), into out: 1 when it exists, 0 when neither
 * does (out names the .yaml one). */
int pl_stack_settings_path(const char *workdir, const char *stack, char *out, size_t outlen);

/* The node under scalar key `key` of mapping node map, or NULL. */
yaml_node_t *pl_yaml_get(yaml_document_t *d, yaml_node_t *map, const char *key);

/* Loads the first document of the first of <workdir>/<names[0]>,
 * <workdir>/<names[1]> that exists (path receives its name).  1: loaded
 * (release with yaml_document_delete); 0: neither file exists; -1 + e. */
int pl_yaml_load_first(const char *workdir, const char *const names[2], char *path,
		       size_t pathlen, yaml_document_t *doc, struct err *e);

/* 1 when <workdir>/Pulumi.yaml (or .yml) names the runtime `name`
 * (`runtime: go` or `runtime: {name: go}`); 0 otherwise, unreadable too. */
int pl_runtime_is(const char *workdir, const char *name);

/* Reads `name:` from <workdir>/Pulumi.yaml (or .yml) into out.  -1 + e. */
int pl_project_name(const char *workdir, char *out, size_t outlen, struct err *e);

/* 1 when the extended regular expression matches somewhere in hay (NULL: 0). */
int pl_text_matches(const char *hay, const char *pattern);

/* Classifies a finished CLI call and writes r->status and r->message.
 * ev may be NULL (no event log).  op names the operation for the message. */
void pl_classify(const char *op, const struct proc_result *pr, const struct pl_events *ev,
		 const char *const *secrets, size_t n_secrets, struct pl_result *r);

/* Writes a status-fit message: "<op>: <text>", one line, secrets masked,
 * at most 300 bytes. */
void pl_set_message(struct pl_result *r, const char *op, const char *text,
		    const char *const *secrets, size_t n_secrets);

#endif
