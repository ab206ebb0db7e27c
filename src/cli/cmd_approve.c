/*
 * cmd_approve.c - `pulumi-controller preview NS/NAME` and `pulumi-controller
 * approve NS/NAME [--plan ID] [--yes]`: the reviewer's side of plan-bound
 * approval (docs/approvals.md).
 *
 * Both read the Stack's status.preview, the plan the controller previewed
 * and keeps (src/stack/stack_approval.c).  approve shows it, asks, and sets
 * spec.approvedPlan with a merge patch that carries the resourceVersion it
 * read, so a Stack that changed meanwhile is never approved blind: on a
 * conflict it reads again and goes on only if the plan in status is still
 * the one shown.  The approval is an ordinary spec change, so the API
 * server's audit log records who approved.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/stackctl.h"
#include "kube/kube.h"

#define APPROVE_ATTEMPTS 5

/* The one preview or approve of this process: the tables point into it. */
static struct approve_flags {
	struct stackctl_flags conn;
	const char *plan;
	int yes;
} flags;

static const char preview_usage[] =
	    "Usage: pulumi-controller preview [NAMESPACE/]NAME [flags]\n\n"
	    "Prints the plan of a Stack with spec.approval: Manual that awaits approval: its id,\n"
	    "revision, change summary and steps (op, URN, changed properties).\n\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 a plan is shown, 1 none awaits approval or the Stack cannot be read,\n"
	    "2 bad usage.  docs/approvals.md\n";

static const struct cli_opt preview_opts[] = {
	/* approve's, refused with a pointer to --help (-y is unknown here). */
	CLI_REFUSE(CLI_OPT_STRING, "plan", 0),
	CLI_REFUSE(CLI_OPT_BOOL, "yes", 0),
	STACKCTL_COMMON_OPTS(&flags.conn),
	CLI_END,
};

static const struct cli_cmd preview_cmd = STACKCTL_CMD("preview", preview_usage, preview_opts);

static const char approve_usage[] =
	    "Usage: pulumi-controller approve [NAMESPACE/]NAME [--plan ID] [--yes] [flags]\n\n"
	    "Shows the plan awaiting approval and sets spec.approvedPlan to its id (a merge patch).\n"
	    "Refuses when the plan in status is not ID, or changed since it was shown.\n\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 approved, 1 refused or failed, 2 bad usage.  docs/approvals.md\n";

static const struct cli_opt approve_opts[] = {
	CLI_STRING(0, "plan", &flags.plan, "ID", "approve only this plan id (what the reviewer saw elsewhere)"),
	CLI_BOOL('y', "yes", &flags.yes, "do not ask (needed when stdin is not a terminal)"),
	STACKCTL_COMMON_OPTS(&flags.conn),
	CLI_END,
};

static const struct cli_cmd approve_cmd = STACKCTL_CMD("approve", approve_usage, approve_opts);


static const cJSON *preview_of(const cJSON *obj)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "status"), "preview");
}

/* Prints fmt with one string from the server, escaped (a URN holding
 * terminal escapes must not hide a step from the reviewer); NULL: dflt. */
static void print_escaped(const char *fmt, const char *s, const char *dflt)
{
	char *v = stackctl_escaped(s ? s : dflt);

	printf(fmt, v);
	free(v);
}

/* The status.preview as a reviewer reads it. */
static void print_plan(const char *ref, const cJSON *pv)
{
	const cJSON *c, *s;
	const char *by = kube_obj_str(pv, "approvedBy");
	int first = 1;

	printf("Stack %s: plan ", ref);
	print_escaped("%s\n", kube_obj_str(pv, "planId"), "?");
	print_escaped("  revision:  %s\n", kube_obj_str(pv, "revision"), "?");
	print_escaped("  previewed: %s\n", kube_obj_str(pv, "generatedAt"), "?");
	if (by)
		print_escaped("  state:     approved by %s\n", by, "?");
	else
		printf("  state:     awaiting approval\n");
	printf("  changes:   ");
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(pv, "changeSummary"))
		if (cJSON_IsNumber(c) && strcmp(c->string, "same") != 0) {
			printf("%s%d to ", first ? "" : ", ", (int)c->valuedouble);
			print_escaped("%s", c->string, "?");
			first = 0;
		}
	printf("%s\n  steps:\n", first ? "none" : "");
	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(pv, "steps")) {
		const cJSON *p;
		int n = 0;
		char *op = stackctl_escaped(kube_obj_str(s, "op") ? kube_obj_str(s, "op") : "?");
		printf("    %-8s ", op);
		free(op);
		print_escaped("%s", kube_obj_str(s, "urn"), "?");
		cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(s, "properties"))
			if (cJSON_IsString(p)) {
				printf("%s", n++ ? ", " : "  [");
				print_escaped("%s", p->valuestring, "?");
			}
		printf("%s\n", n ? "]" : "");
	}
	c = cJSON_GetObjectItemCaseSensitive(pv, "omittedSteps");
	if (cJSON_IsNumber(c) && c->valuedouble > 0)
		printf("    ... and %d more\n", (int)c->valuedouble);
}

/* GETs the Stack; its status.preview must hold a plan.  Caller frees. */
static cJSON *read_pending(struct stackctl *sc, const char *cmd, const struct stackctl_ref *ref)
{
	cJSON *obj = stackctl_get_stack(sc, cmd, ref);

	if (obj == NULL)
		return NULL;
	if (kube_obj_str(preview_of(obj), "planId") == NULL) {
		char msg[600];
		snprintf(msg, sizeof(msg), "Stack %s/%s has no plan awaiting approval (status.preview is empty; "
		    "is spec.approval Manual?)", ref->ns, ref->name);
		cli_print_error(cmd, msg);
		cJSON_Delete(obj);
		return NULL;
	}
	return obj;
}

int cmd_preview(int argc, char **argv)
{
	struct stackctl_ref ref;
	struct stackctl sc;
	char shown[2 * STACKCTL_NAME_MAX + 2];
	cJSON *obj;
	int rc = stackctl_open(&preview_cmd, argc, argv, &flags.conn, 0, &ref, &sc);

	if (rc != CLI_GO_ON)
		return rc;
	obj = read_pending(&sc, "preview", &ref);
	snprintf(shown, sizeof(shown), "%s/%s", ref.ns, ref.name);
	if (obj)
		print_plan(shown, preview_of(obj));
	cJSON_Delete(obj);
	stackctl_close(&sc);
	return obj ? 0 : 1;
}

/* y/yes on a terminal; anything else (or no terminal) is no. */
static int confirmed(const char *id)
{
	char line[16];

	if (!isatty(STDIN_FILENO)) {
		cli_print_error("approve", "stdin is not a terminal: pass --yes to approve without asking");
		return 0;
	}
	print_escaped("Approve plan %s? [y/N] ", id, "?");
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
		return 0;
	return strcmp(line, "y\n") == 0 || strcmp(line, "yes\n") == 0;
}

/* The merge patch: approvedPlan, with the resourceVersion read as its
 * precondition. */
static char *approval_patch(const char *rv, const char *id)
{
	cJSON *p = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(p, "metadata");
	char *text;

	cJSON_AddStringToObject(meta, "resourceVersion", rv ? rv : "");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "spec"), "approvedPlan", id);
	text = cJSON_PrintUnformatted(p);
	cJSON_Delete(p);
	return text;
}

/* Patches approvedPlan to id while status still shows plan id; on a
 * conflict reads again.  Frees obj.  0, or -1 (printed). */
static int set_approval(struct stackctl *sc, const struct stackctl_ref *ref, const char *id, cJSON *obj)
{
	for (int attempt = 0; attempt < APPROVE_ATTEMPTS; attempt++) {
		char *patch = approval_patch(kube_obj_str(obj, "metadata.resourceVersion"), id);
		struct err e;
		cJSON *res = kube_patch(sc->client, &stackctl_stack_res, ref->ns, ref->name, NULL, KUBE_PATCH_MERGE,
		    patch, NULL, 0, &e);

		free(patch);
		cJSON_Delete(obj);
		obj = NULL;
		if (res) {
			cJSON_Delete(res);
			return 0;
		}
		if (e.code != ERR_CONFLICT) {
			stackctl_print_object_error("approve", "patch", "Stack", ref->ns, ref->name, &e);
			return -1;
		}
		/* The Stack changed since it was read: only the same plan may go on. */
		if ((obj = read_pending(sc, "approve", ref)) == NULL)
			return -1;
		if (!str_eq(kube_obj_str(preview_of(obj), "planId"), id)) {
			char msg[400];
			snprintf(msg, sizeof(msg), "the plan of %s/%s changed since it was shown (now %s): not "
			    "approved; review it again", ref->ns, ref->name, kube_obj_str(preview_of(obj), "planId"));
			cli_print_error("approve", msg);
			cJSON_Delete(obj);
			return -1;
		}
	}
	cli_print_error("approve", "the Stack keeps changing; not approved");
	cJSON_Delete(obj);
	return -1;
}

int cmd_approve(int argc, char **argv)
{
	struct approve_flags *f = &flags;
	struct stackctl_ref ref;
	struct stackctl sc;
	char shown[65], where[2 * STACKCTL_NAME_MAX + 2];
	const char *id;
	cJSON *obj;
	int rc = stackctl_open(&approve_cmd, argc, argv, &f->conn, 0, &ref, &sc);

	if (rc != CLI_GO_ON)
		return rc;
	snprintf(where, sizeof(where), "%s/%s", ref.ns, ref.name);
	if ((obj = read_pending(&sc, "approve", &ref)) == NULL) {
		stackctl_close(&sc);
		return 1;
	}
	id = kube_obj_str(preview_of(obj), "planId");
	snprintf(shown, sizeof(shown), "%s", id);
	print_plan(where, preview_of(obj));
	if (f->plan && strcmp(f->plan, shown) != 0) {
		char msg[400];
		snprintf(msg, sizeof(msg), "the plan awaiting approval is %s, not %s: not approved; review it "
		    "again", shown, f->plan);
		cli_print_error("approve", msg);
		rc = 1;
	} else if (!f->yes && !confirmed(shown)) {
		cli_print_error("approve", "not approved");
		rc = 1;
	} else {
		/* set_approval owns obj from here (it may replace it). */
		rc = set_approval(&sc, &ref, shown, obj) < 0 ? 1 : 0;
		obj = NULL;
		if (rc == 0) {
			print_escaped("approved plan %s", shown, "?");
			printf(" of %s (spec.approvedPlan)\n", where);
		}
	}
	cJSON_Delete(obj);
	stackctl_close(&sc);
	return rc;
}
