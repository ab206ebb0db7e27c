/*
 * stackctl.h - what the operator's commands share: `get`, `reconcile`,
 * `suspend`, `resume`, `outputs` and `history` (src/cli/cmd_get.c,
 * cmd_reconcile.c, cmd_outputs.c, cmd_approve.c; plumbing in stackctl*.c).  They talk to the API server the way kubectl and
 * flux do (a kubeconfig, --context, -n), read Stacks as the controller
 * writes them (docs/stack-api.md) and print for people (tables) or for
 * programs (-o json|yaml).  docs/cli.md is their manual.
 *
 * Every reader here takes what the server sent as untrusted: a field that
 * is missing or of the wrong type reads as absent, never as a crash, and
 * text from the server is printed with its control characters escaped.
 */
#ifndef PC_CLI_STACKCTL_H
#define PC_CLI_STACKCTL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "cli/cli.h"
#include "kube/kube.h"

#define STACKCTL_ANN_REQUESTED "reconcile.fluxcd.io/requestedAt"
#define STACKCTL_ANN_SECRETS "pulumi.com/secrets"
#define STACKCTL_FIELD_MANAGER "pulumi-controller-cli"
#define STACKCTL_NAME_MAX 253

extern const struct kube_resource stackctl_stack_res;

/* ------------------------------------------------------------ flags */

/* The connection flags every command takes. */
struct stackctl_flags {
	const char *kubeconfig, *context, *namespace;
	long request_timeout_ms;
};

/* The connection flags' callbacks: they check the value (the message
 * names the flag) and store it into the struct stackctl_flags o->target. */
cli_opt_cb stackctl_namespace_flag, stackctl_context_flag, stackctl_request_timeout_flag;

/* The connection flags' entries, for a command's table (cli.h); f is the
 * command's static struct stackctl_flags.  --help lists them last. */
#define STACKCTL_COMMON_OPTS(f) \
	CLI_CALLBACK('n', "namespace", (f), "NS", "the Stack's namespace (default: the kubeconfig context's)", \
	    stackctl_namespace_flag), \
	CLI_STRING(0, "kubeconfig", &(f)->kubeconfig, "F", "kubeconfig file(s) (default: $KUBECONFIG, in-cluster,\n" \
	    "then ~/.kube/config)"), \
	CLI_CALLBACK(0, "context", (f), "NAME", "the kubeconfig context to use (default: current-context)", \
	    stackctl_context_flag), \
	CLI_CALLBACK(0, "request-timeout", (f), "D", "limit on one API request (default 30s)", \
	    stackctl_request_timeout_flag), \
	CLI_HELP("show this help")

/* An operator's command (struct cli_cmd): their flags' help at one
 * column, an unknown flag answered with a pointer to --help. */
#define STACKCTL_CMD(name, usage, opts) { (name), (usage), (opts), 25, CLI_UNKNOWN_SEE_HELP }

void stackctl_flags_init(struct stackctl_flags *f);

/* -o: table (the default), json or yaml. */
enum stackctl_output { STACKCTL_OUT_TABLE, STACKCTL_OUT_JSON, STACKCTL_OUT_YAML };
/* -o's callback: json or yaml into the enum stackctl_output o->target;
 * -1 after printing why, for anything else. */
cli_opt_cb stackctl_output_flag;
#define STACKCTL_OUTPUT_OPT(v, h) CLI_CALLBACK('o', "output", (1 ? (v) : (enum stackctl_output *)0), "FMT", \
	(h), stackctl_output_flag)

/* ------------------------------------------------------------ names */

/* A Stack named on the command line: "NS/NAME" or "NAME". */
struct stackctl_ref {
	char ns[STACKCTL_NAME_MAX + 1];        /* "" until resolved */
	char name[STACKCTL_NAME_MAX + 1];
};

/* Sets f's defaults, parses the flags by the command's table, then its one
 * operand, a Stack: CLI_GO_ON with ref set, or the exit status after
 * saying what is wrong.
 * see_help adds "(see pulumi-controller <cmd> --help)" to the message
 * for a wrong number of operands. */
int stackctl_parse_one(const struct cli_cmd *cmd, int argc, char **argv, struct stackctl_flags *f, int see_help,
    struct stackctl_ref *ref);

/* Splits and checks arg (a DNS subdomain name, optionally after a DNS
 * label namespace and '/'); a namespace given both ways must agree with
 * flag_ns.  -1 with e set (ERR_INVALID): a usage error. */
int stackctl_parse_ref(const char *arg, const char *flag_ns, struct stackctl_ref *ref, struct err *e);
/* 1 when s is a lower-case RFC 1123 subdomain of at most max bytes. */
int stackctl_valid_name(const char *s, size_t max);

/* ------------------------------------------------------------ the API */

struct stackctl {
	struct kube_client *client;
	char *namespace;           /* -n, or the context's namespace; owned */
	long request_timeout_ms;
};

/* Loads the config (--kubeconfig, --context) and makes the client.
 * 0, or 1 after printing what is wrong (the exit status). */
int stackctl_connect(const struct stackctl_flags *f, const char *cmd, struct stackctl *sc);
void stackctl_close(struct stackctl *sc);
/* Fills ref->ns from sc when the command line named none. */
void stackctl_resolve_ref(const struct stackctl *sc, struct stackctl_ref *ref);

/* What every command on one Stack does first: stackctl_parse_one, then
 * stackctl_connect and stackctl_resolve_ref.  CLI_GO_ON with sc open (the
 * caller closes it), or the exit status. */
int stackctl_open(const struct cli_cmd *cmd, int argc, char **argv, struct stackctl_flags *f, int see_help,
    struct stackctl_ref *ref, struct stackctl *sc);

/* GETs the Stack.  NULL after printing a message that names NS/NAME (not
 * found, not allowed, kind not served, or the server's error). */
cJSON *stackctl_get_stack(struct stackctl *sc, const char *cmd, const struct stackctl_ref *ref);

/* Prints an API failure of `verb` ("get", "patch") on `what` ("Stack
 * NS/NAME", "Stacks in namespace NS") as one line on stderr, saying what
 * it means for the common cases (not found, not allowed, not served).
 * name is the object's (NULL for a list): a 404 that is not about it
 * means the kind itself is not served. */
void stackctl_print_api_error(const char *cmd, const char *verb, const char *what, const char *name,
    const struct err *e);
/* stackctl_print_api_error for "<kind> ns/name". */
void stackctl_print_object_error(const char *cmd, const char *verb, const char *kind, const char *ns,
    const char *name, const struct err *e);

/* Every Stack of namespace ns (NULL: of all), every page of the list, into
 * one array (caller frees); NULL after printing why, as cmd. */
cJSON *stackctl_list_stacks(struct stackctl *sc, const char *cmd, const char *ns);

/* A merge patch of the Stack; 0, or -1 after printing why. */
int stackctl_patch_stack(struct stackctl *sc, const char *cmd, const struct stackctl_ref *ref,
    const char *patch);

/* A fresh reconcile request token: the time now as RFC 3339 with
 * nanoseconds, as `flux reconcile` writes it. */
void stackctl_request_token(char *buf, size_t n);

/* ------------------------------------------------------------ reading objects */

/* Borrowed string at a dotted path, or NULL when absent or not a string. */
const char *stackctl_str(const cJSON *obj, const char *path);
/* The object or array at a dotted path (of that type), or NULL. */
const cJSON *stackctl_obj(const cJSON *obj, const char *path);
const cJSON *stackctl_arr(const cJSON *obj, const char *path);
/* A number at a dotted path as a whole number, or dflt. */
long long stackctl_int(const cJSON *obj, const char *path, long long dflt);
/* 1 when the boolean at path is true (a string "true" is not). */
int stackctl_true(const cJSON *obj, const char *path);
/* The status condition of that type (an object), or NULL. */
const cJSON *stackctl_condition(const cJSON *obj, const char *type);

/* ------------------------------------------------------------ formatting */

/* kubectl's AGE: 42s, 3m12s, 45m, 5h3m, 20h, 3d4h, 45d, 2y30d, 9y;
 * "<invalid>" for a time in the future by more than a second.  buf of
 * at least 16 bytes; returns buf. */
const char *stackctl_human_duration(int64_t seconds, char *buf, size_t n);
/* The age of an RFC 3339 time at `now` (seconds since the epoch), or "-"
 * when the time is missing or unreadable. */
const char *stackctl_age(const char *rfc3339, int64_t now, char *buf, size_t n);

/* A table in kubectl's layout: upper-case headers, columns padded to the
 * widest cell plus three spaces, the last column unpadded.  Cells are
 * copied with control characters escaped; NULL or "" prints as "-". */
struct stackctl_table {
	size_t ncols, nrows, cap;
	char **cells;              /* row-major; row 0 is the header */
};

void stackctl_table_init(struct stackctl_table *t, const char *const *headers, size_t ncols);
void stackctl_table_add(struct stackctl_table *t, const char *const *cells);
void stackctl_table_print(const struct stackctl_table *t, FILE *out);
void stackctl_table_free(struct stackctl_table *t);
/* A copy of text from the server with control characters escaped (as
 * log_escape: a terminal escape cannot hide or rewrite what is shown);
 * never cut (each byte becomes at most four); NULL or "" is "-".  Caller
 * frees. */
char *stackctl_escaped(const char *s);
/* Display width of UTF-8 text (code points; no wide-character tables). */
size_t stackctl_text_width(const char *s);

/* Prints obj as kubectl -o json (4-space indent) or -o yaml (libyaml; a
 * string that would read back as another type is quoted).  -1 with e set
 * when the emitter fails. */
int stackctl_print_json(const cJSON *obj, FILE *out, struct err *e);
int stackctl_print_yaml(const cJSON *obj, FILE *out, struct err *e);
int stackctl_print_doc(const cJSON *obj, enum stackctl_output fmt, FILE *out, struct err *e);

/* ------------------------------------------------------------ get */

/* The `get` table's cells of one Stack (NAMESPACE first with with_ns),
 * written into cells[] (STACKCTL_GET_COLS + 1 of them) pointing into buf. */
#define STACKCTL_GET_COLS 7
struct stackctl_row_buf {
	char ready[16], revision[1024], suspended[8], last[160], age[16], message[2048];
};
void stackctl_get_row(const cJSON *stack, int64_t now, int with_ns, struct stackctl_row_buf *buf,
    const char **cells);

/* "create:1 same:2" from a resourceChanges object (sorted by name), or "-". */
void stackctl_changes(const cJSON *changes, char *buf, size_t n);

#endif
