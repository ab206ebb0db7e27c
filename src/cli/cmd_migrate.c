/*
 * cmd_migrate.c - `pulumi-controller migrate --check`: before the Pulumi
 * Kubernetes Operator (PKO) is switched off, says for each Stack of a
 * namespace (or of all, -A) what this controller will do with it: run it
 * as it is, run it with a change the reader should know of (a Flux
 * GitRepository made for projectRepo, Jobs for a workspaceTemplate, the
 * finalizer taken off), or refuse it, naming the field.  It also lists
 * what of PKO is still at work (Updates not finished, Workspaces).
 *
 * Read only: it GETs and LISTs, never writes.  The verdict is the
 * controller's own spec check (stack_spec_parse, the code `run` uses), so
 * what it says is refused is what the controller would refuse.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "cli/cli.h"
#include "cli/stackctl.h"
#include "stack/stack_model.h"

#define FINALIZER "finalizer.stack.pulumi.com"
#define NOTES_MAX 2048

static struct migrate_flags {
	struct stackctl_flags conn;
	int check, all;
} flags;

static const char migrate_usage[] =
	    "Usage: pulumi-controller migrate --check [flags]\n"
	    "\n"
	    "Reads the Stacks of a namespace (-A: of every namespace) as the Pulumi\n"
	    "Kubernetes Operator left them and says, for each, what this controller will\n"
	    "do: run it (ok), run it with a change to know of (change), or refuse it\n"
	    "(refused, with the field at fault).  Then it lists the operator's Updates\n"
	    "that have not finished and its Workspaces.  Nothing is written.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 every Stack can move, 1 a Stack would be refused, an Update\n"
	    "is still running, or the API request failed, 2 bad usage.\n"
	    "docs/migrating-from-pko.md walks through the move.\n";

static const struct cli_opt migrate_opts[] = {
	CLI_BOOL(0, "check", &flags.check, "say what would change (the only mode: migrate writes nothing)"),
	CLI_BOOL('A', "all-namespaces", &flags.all, "Stacks of every namespace"),
	STACKCTL_COMMON_OPTS(&flags.conn),
	CLI_END,
};

static const struct cli_cmd migrate_cmd = STACKCTL_CMD("migrate", migrate_usage, migrate_opts);

/* PKO's Workspace and Update kinds, read to say what of it still runs. */
static const struct kube_resource pko_updates = { "auto.pulumi.com", "v1alpha1", "updates", "Update", 1 };
static const struct kube_resource pko_workspaces = { "auto.pulumi.com", "v1alpha1", "workspaces", "Workspace", 1 };

/* ------------------------------------------------------------ one Stack */

static void note(char *buf, const char *text)
{
	size_t used = strlen(buf);

	if (used + strlen(text) + 3 < NOTES_MAX)
		snprintf(buf + used, NOTES_MAX - used, "%s%s", used ? "; " : "", text);
}

static int has_finalizer(const cJSON *st)
{
	const cJSON *f;

	cJSON_ArrayForEach(f, stackctl_arr(st, "metadata.finalizers"))
		if (cJSON_IsString(f) && str_eq(f->valuestring, FINALIZER))
			return 1;
	return 0;
}

/* The changes a reader should know of, for a Stack the controller takes. */
static void changes_of(const cJSON *st, const struct stack_spec *s, char *notes)
{
	static const char *noops[] = { "expectNoRefreshChanges", "retryOnUpdateConflict",
		"workspaceReclaimPolicy", "updateTemplate" };
	char text[512];

	if (stackctl_str(st, "spec.projectRepo") != NULL) {
		snprintf(text, sizeof(text), "a Flux GitRepository %s is made for projectRepo", s->src_name ?
		    s->src_name : "<name>-program");
		note(notes, text);
		/* PKO's own workspace clone is shallow or not; source-controller's always is. */
		if (stackctl_true(st, "spec.shallow"))
			note(notes, "shallow changes nothing (source-controller fetches one commit's tree)");
		if (s->git_auth.kind != STACK_GIT_NONE) {
			snprintf(text, sizeof(text), "its credentials are copied into Secret %s-git-auth",
			    stackctl_str(st, "metadata.name") ? stackctl_str(st, "metadata.name") : "<name>");
			note(notes, text);
		}
		/* source-controller checks SSH host keys; PKO's images carried them. */
		if (s->git_auth.kind == STACK_GIT_SSH)
			note(notes, "SSH needs key known_hosts in the private key's Secret");
		else if (s->git_auth.kind == STACK_GIT_SECRET)
			note(notes, "an sshPrivateKey in gitAuthSecret needs key known_hosts beside it");
	}
	if (stackctl_str(st, "spec.programRef.name") != NULL)
		note(notes, "the Program is rendered by this controller");
	if (stackctl_obj(st, "spec.workspaceTemplate") != NULL || stackctl_str(st, "spec.serviceAccountName"))
		note(notes, "updates run as Jobs, not in a Workspace pod");
	for (size_t i = 0; i < sizeof(noops) / sizeof(noops[0]); i++) {
		char path[64];
		snprintf(path, sizeof(path), "spec.%s", noops[i]);
		if (stackctl_obj(st, path) != NULL || stackctl_true(st, path)) {
			snprintf(text, sizeof(text), "%s means nothing here (as in PKO v2)", noops[i]);
			note(notes, text);
		}
	}
	if (has_finalizer(st) && !s->destroy_on_finalize)
		note(notes, "the finalizer is taken off (no destroyOnFinalize)");
	if (stackctl_condition(st, "Ready") != NULL)
		note(notes, "conditions are rewritten with this controller's reasons");
}

/* "ok", "change" or "refused" into verdict, and why into notes; 1 when
 * refused. */
static int judge(const cJSON *st, const struct stack_opts *o, const char **verdict, char *notes)
{
	struct stack_spec s;
	struct err e = { 0 };

	notes[0] = '\0';
	if (stack_spec_parse(st, o, &s, &e) < 0) {
		*verdict = "refused";
		note(notes, e.msg);
		stack_spec_free(&s);
		return 1;
	}
	changes_of(st, &s, notes);
	*verdict = notes[0] ? "change" : "ok";
	stack_spec_free(&s);
	return 0;
}

/* ------------------------------------------------------------ what of PKO runs */

/* PKO's objects of one kind (NULL when the kind is not served: PKO's CRDs
 * are gone, which is fine). */
static cJSON *list_pko(struct stackctl *sc, const struct kube_resource *r, const char *ns)
{
	struct kube_list_opts lo = { .limit = 500 };
	struct err e = { 0 };

	return kube_list(sc->client, r, ns, &lo, &e);
}

/* Prints the Updates that have not finished; their count. */
static int running_updates(struct stackctl *sc, const char *ns)
{
	cJSON *list = list_pko(sc, &pko_updates, ns);
	const cJSON *u;
	int n = 0;

	cJSON_ArrayForEach(u, stackctl_arr(list, "items")) {
		const cJSON *done = stackctl_condition(u, "Complete");
		if (str_eq(stackctl_str(done, "status"), "True"))
			continue;
		char *who = stackctl_escaped(stackctl_str(u, "metadata.name"));
		char *where = stackctl_escaped(stackctl_str(u, "metadata.namespace"));
		printf("Update %s/%s of the operator has not finished: wait for it before the switch\n", where, who);
		free(who);
		free(where);
		n++;
	}
	cJSON_Delete(list);
	return n;
}

static void workspaces(struct stackctl *sc, const char *ns)
{
	cJSON *list = list_pko(sc, &pko_workspaces, ns);
	int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(list, "items"));

	if (n > 0)
		printf("%d Workspace%s of the operator: delete them (or their CRD) once the Stacks are Ready here\n",
		    n, n == 1 ? "" : "s");
	cJSON_Delete(list);
}

/* ------------------------------------------------------------ command */

static int parse_args(int argc, char **argv)
{
	int operand, rc;

	stackctl_flags_init(&flags.conn);
	if ((rc = cli_parse(&migrate_cmd, argc, argv, &operand)) != CLI_GO_ON)
		return rc;
	if (operand < argc) {
		cli_errorf("migrate: takes no operand (see pulumi-controller migrate --help)");
		return EXIT_USAGE;
	}
	if (!flags.check) {
		cli_errorf("migrate: only --check is offered: the move itself is the steps of "
		    "docs/migrating-from-pko.md");
		return EXIT_USAGE;
	}
	if (flags.all && flags.conn.namespace != NULL) {
		cli_errorf("migrate: -A reads every namespace; it takes no --namespace");
		return EXIT_USAGE;
	}
	return CLI_GO_ON;
}

static int report(cJSON *items, int with_ns)
{
	static const char *const headers[] = { "NAMESPACE", "NAME", "VERDICT", "WHAT CHANGES" };
	struct stack_opts o;
	struct stackctl_table t;
	const cJSON *st;
	int refused = 0;

	stack_opts_default(&o);
	stackctl_table_init(&t, headers + !with_ns, 4 - !with_ns);
	cJSON_ArrayForEach(st, items) {
		const char *verdict, *cells[4];
		char notes[NOTES_MAX];
		int i = 0;

		refused += judge(st, &o, &verdict, notes);
		if (with_ns)
			cells[i++] = stackctl_str(st, "metadata.namespace");
		cells[i++] = stackctl_str(st, "metadata.name");
		cells[i++] = verdict;
		cells[i] = notes;
		stackctl_table_add(&t, cells);
	}
	stackctl_table_print(&t, stdout);
	stackctl_table_free(&t);
	return refused;
}

int cmd_migrate(int argc, char **argv)
{
	struct stackctl sc;
	const char *ns;
	cJSON *items;
	int rc, refused, running;

	if ((rc = parse_args(argc, argv)) != CLI_GO_ON)
		return rc;
	if (stackctl_connect(&flags.conn, "migrate", &sc) != 0)
		return 1;
	ns = flags.all ? NULL : sc.namespace;
	if ((items = stackctl_list_stacks(&sc, "migrate", ns)) == NULL) {
		stackctl_close(&sc);
		return 1;
	}
	if (cJSON_GetArraySize(items) == 0)
		fprintf(stderr, "No Stacks found%s%s.\n", ns ? " in namespace " : "", ns ? ns : "");
	refused = report(items, ns == NULL);
	running = running_updates(&sc, ns);
	workspaces(&sc, ns);
	if (refused > 0)
		printf("%d Stack%s would be refused: change %s as the message says, or see "
		    "docs/migrating-from-pko.md\n", refused, refused == 1 ? "" : "s", refused == 1 ? "it" : "them");
	cJSON_Delete(items);
	stackctl_close(&sc);
	return refused > 0 || running > 0;
}
