/*
 * cmd_get.c - `pulumi-controller get [stacks] [NAME]`: the Stacks of a
 * namespace (or of all, -A) as a table in the manner of `flux get`, or as
 * kubectl's -o json / -o yaml.  The table is read from what the controller
 * writes (docs/stack-api.md): the Ready condition, lastAppliedRevision,
 * lastUpdate / currentUpdate, spec.suspend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/str.h"
#include "cli/cli.h"
#include "cli/stackctl.h"

/* The one get of this process: the flags' table points into it. */
static struct get_flags {
	struct stackctl_flags conn;
	enum stackctl_output fmt;
	int all;
} flags;

static const char get_usage[] =
	    "Usage: pulumi-controller get [stacks] [NAME] [flags]\n"
	    "\n"
	    "Shows Stacks (pulumi.com/v1) as the controller last reported them: whether\n"
	    "they are Ready, the revision last applied, whether they are suspended, the\n"
	    "last update and its age, and the Ready condition's message.  With NAME, only\n"
	    "that Stack.  `get stacks` and `get` are the same.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 success (also when there is no Stack), 1 the API request failed\n"
	    "or the Stack does not exist, 2 bad usage.  docs/cli.md has examples.\n";

static const struct cli_opt get_opts[] = {
	CLI_BOOL('A', "all-namespaces", &flags.all, "Stacks of every namespace (adds a NAMESPACE column)"),
	STACKCTL_OUTPUT_OPT(&flags.fmt, "json or yaml: the objects as the API server has them\n"
	    "(a List without NAME), managedFields and kubectl's\nlast-applied annotation left out"),
	STACKCTL_COMMON_OPTS(&flags.conn),
	CLI_END,
};

static const struct cli_cmd get_cmd = STACKCTL_CMD("get", get_usage, get_opts);

/* ------------------------------------------------------------ one row */

/* "up succeeded 5m ago", or "running for 12s" while an update runs. */
static void last_update(const cJSON *st, int64_t now, char *buf, size_t n)
{
	const char *start = stackctl_str(st, "status.currentUpdate.startTime");
	const char *type = stackctl_str(st, "status.lastUpdate.type");
	const char *state = stackctl_str(st, "status.lastUpdate.state");
	char age[16];

	if (stackctl_obj(st, "status.currentUpdate") != NULL) {
		snprintf(buf, n, "running for %s", stackctl_age(start, now, age, sizeof(age)));
		return;
	}
	if (type != NULL && *type == '\0')
		type = NULL;
	if (state != NULL && *state == '\0')
		state = NULL;
	if (type == NULL && state == NULL) {
		snprintf(buf, n, "-");
		return;
	}
	stackctl_age(stackctl_str(st, "status.lastUpdate.endTime"), now, age, sizeof(age));
	snprintf(buf, n, "%s %s%s%s", type ? type : "update", state ? state : "(no result)",
	    strcmp(age, "-") ? " " : "", strcmp(age, "-") ? age : "");
	if (strcmp(age, "-") != 0 && strlen(buf) + 4 < n)
		strcat(buf, " ago");
}

void stackctl_get_row(const cJSON *st, int64_t now, int with_ns, struct stackctl_row_buf *b,
    const char **cells)
{
	const cJSON *ready = stackctl_condition(st, "Ready");
	const char *rs = stackctl_str(ready, "status"), *msg = stackctl_str(ready, "message");
	long long gen = stackctl_int(st, "metadata.generation", -1);
	long long seen = stackctl_int(st, "status.observedGeneration", -1);
	int i = 0;

	snprintf(b->ready, sizeof(b->ready), "%s", str_eq(rs, "True") || str_eq(rs, "False") ? rs :
	    "Unknown");
	if (gen >= 0 && seen >= 0 && seen < gen) {
		/* The condition describes an older spec (kstatus: InProgress). */
		snprintf(b->ready, sizeof(b->ready), "Unknown");
		snprintf(b->message, sizeof(b->message), "generation %lld not reconciled yet (status is of %lld)",
		    gen, seen);
	} else {
		snprintf(b->message, sizeof(b->message), "%s", msg ? msg : "");
	}
	if (stackctl_str(st, "metadata.deletionTimestamp") != NULL) {
		char tmp[sizeof(b->message)];
		snprintf(tmp, sizeof(tmp), "being deleted%s%s", b->message[0] ? ": " : "", b->message);
		memcpy(b->message, tmp, sizeof(tmp));
	}
	snprintf(b->revision, sizeof(b->revision), "%s",
	    stackctl_str(st, "status.lastAppliedRevision") ? stackctl_str(st, "status.lastAppliedRevision") : "");
	snprintf(b->suspended, sizeof(b->suspended), "%s", stackctl_true(st, "spec.suspend") ? "True" : "False");
	last_update(st, now, b->last, sizeof(b->last));
	stackctl_age(stackctl_str(st, "metadata.creationTimestamp"), now, b->age, sizeof(b->age));
	if (with_ns)
		cells[i++] = stackctl_str(st, "metadata.namespace");
	cells[i++] = stackctl_str(st, "metadata.name");
	cells[i++] = b->ready;
	cells[i++] = b->revision;
	cells[i++] = b->suspended;
	cells[i++] = b->last;
	cells[i++] = b->age;
	cells[i] = b->message;
}

static void print_table(const cJSON *items, int with_ns)
{
	static const char *const headers[] = { "NAMESPACE", "NAME", "READY", "REVISION", "SUSPENDED",
		"LAST UPDATE", "AGE", "MESSAGE" };
	struct stackctl_table t;
	struct stackctl_row_buf b;
	const char *cells[STACKCTL_GET_COLS + 1];
	int64_t now = (int64_t)time(NULL);
	const cJSON *it;

	stackctl_table_init(&t, with_ns ? headers : headers + 1, STACKCTL_GET_COLS + (with_ns ? 1 : 0));
	cJSON_ArrayForEach(it, items) {
		if (!cJSON_IsObject(it))
			continue;
		stackctl_get_row(it, now, with_ns, &b, cells);
		stackctl_table_add(&t, cells);
	}
	stackctl_table_print(&t, stdout);
	stackctl_table_free(&t);
}

/* ------------------------------------------------------------ fetching */

/* As kubectl prints them: apiVersion and kind on every item, no
 * managedFields. */
static void tidy(cJSON *obj)
{
	if (!cJSON_IsObject(obj))
		return;
	kube_strip_object(obj);
	if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(obj, "apiVersion"))) {
		cJSON_DeleteItemFromObjectCaseSensitive(obj, "apiVersion");
		cJSON_AddStringToObject(obj, "apiVersion", "pulumi.com/v1");
	}
	if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(obj, "kind"))) {
		cJSON_DeleteItemFromObjectCaseSensitive(obj, "kind");
		cJSON_AddStringToObject(obj, "kind", "Stack");
	}
}

static int print_list(cJSON *items, enum stackctl_output fmt, int have_fmt, const char *ns)
{
	struct err e = { 0 };
	cJSON *it;
	int rc = 0;

	cJSON_ArrayForEach(it, items)
		tidy(it);
	if (have_fmt) {
		cJSON *list = cJSON_CreateObject();
		cJSON_AddStringToObject(list, "apiVersion", "v1");
		cJSON_AddStringToObject(list, "kind", "List");
		cJSON_AddItemReferenceToObject(list, "items", items);
		cJSON_AddStringToObject(cJSON_AddObjectToObject(list, "metadata"), "resourceVersion", "");
		rc = stackctl_print_doc(list, fmt, stdout, &e);
		cJSON_Delete(list);
	} else if (cJSON_GetArraySize(items) == 0) {
		if (ns != NULL)
			fprintf(stderr, "No Stacks found in namespace %s.\n", ns);
		else
			fprintf(stderr, "No Stacks found.\n");
	} else {
		print_table(items, ns == NULL);
	}
	if (rc < 0)
		cli_print_error("get", e.msg);
	return rc < 0 ? 1 : 0;
}

static int get_one(struct stackctl *sc, struct stackctl_ref *ref, enum stackctl_output fmt, int have_fmt)
{
	cJSON *st, *arr;
	struct err e = { 0 };
	int rc = 0;

	stackctl_resolve_ref(sc, ref);
	if ((st = stackctl_get_stack(sc, "get", ref)) == NULL)
		return 1;
	tidy(st);
	if (have_fmt) {
		rc = stackctl_print_doc(st, fmt, stdout, &e) < 0;
		if (rc)
			cli_print_error("get", e.msg);
		cJSON_Delete(st);
		return rc;
	}
	arr = cJSON_CreateArray();
	cJSON_AddItemToArray(arr, st);
	print_table(arr, 0);
	cJSON_Delete(arr);
	return 0;
}

/* ------------------------------------------------------------ command */

static int is_kind_word(const char *s)
{
	return strcmp(s, "stacks") == 0 || strcmp(s, "stack") == 0 || strcmp(s, "stacks.pulumi.com") == 0;
}

/* The flags into `flags`, and the operands: [stacks] [NAME].  CLI_GO_ON
 * with *name (NULL: all) and, for a NAME, ref set; or the exit status. */
static int parse_args(int argc, char **argv, const char **name, struct stackctl_ref *ref)
{
	struct err e = { 0 };
	int operand, rc;

	stackctl_flags_init(&flags.conn);
	if ((rc = cli_parse(&get_cmd, argc, argv, &operand)) != CLI_GO_ON)
		return rc;
	argc -= operand;
	argv += operand;
	if (argc > 0 && (argc == 2 || is_kind_word(argv[0]))) {
		if (!is_kind_word(argv[0])) {
			cli_errorf("get: unknown kind \"%s\" (this command shows stacks)", argv[0]);
			return EXIT_USAGE;
		}
		argc--;
		argv++;
	}
	if (argc > 1) {
		cli_errorf("get: one NAME at most");
		return EXIT_USAGE;
	}
	*name = argc == 1 ? argv[0] : NULL;
	if (flags.all && (flags.conn.namespace != NULL || *name != NULL)) {
		cli_errorf("get: -A lists every namespace; it takes neither --namespace nor a NAME");
		return EXIT_USAGE;
	}
	if (*name != NULL && stackctl_parse_ref(*name, flags.conn.namespace, ref, &e) < 0) {
		cli_print_error("get", e.msg);
		return EXIT_USAGE;
	}
	return CLI_GO_ON;
}

int cmd_get(int argc, char **argv)
{
	struct stackctl sc;
	struct stackctl_ref ref;
	int have_fmt, rc;
	const char *name = NULL;

	if ((rc = parse_args(argc, argv, &name, &ref)) != CLI_GO_ON)
		return rc;
	/* -o takes only json or yaml: the table is what no -o gives. */
	have_fmt = flags.fmt != STACKCTL_OUT_TABLE;
	if (stackctl_connect(&flags.conn, "get", &sc) != 0)
		return 1;
	if (name != NULL) {
		rc = get_one(&sc, &ref, flags.fmt, have_fmt);
	} else {
		const char *ns = flags.all ? NULL : sc.namespace;
		cJSON *items = stackctl_list_stacks(&sc, "get", ns);
		rc = items ? print_list(items, flags.fmt, have_fmt, ns) : 1;
		cJSON_Delete(items);
	}
	stackctl_close(&sc);
	return rc;
}
