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
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "cmd.h"
#include "kube/kube.h"

static const struct kube_resource stack_res = { "pulumi.com", "v1", "stacks", "Stack", 1 };

#define APPROVE_ATTEMPTS 5

struct approve_flags {
	const char *kubeconfig;
	const char *plan;
	int yes;
};

static void preview_usage(FILE *out)
{
	fprintf(out,
	    "Usage: pulumi-controller preview NAMESPACE/NAME [flags]\n\n"
	    "Prints the plan of a Stack with spec.approval: Manual that awaits approval: its id,\n"
	    "revision, change summary and steps (op, URN, changed properties).\n\n"
	    "Flags:\n"
	    "  --kubeconfig F   kubeconfig file(s) (default: $KUBECONFIG, in-cluster, ~/.kube/config)\n"
	    "  -h, --help       this help\n\n"
	    "Exit status: 0 a plan is shown, 1 none awaits approval or the Stack cannot be read,\n"
	    "2 bad usage.  docs/approvals.md\n");
}

static void approve_usage(FILE *out)
{
	fprintf(out,
	    "Usage: pulumi-controller approve NAMESPACE/NAME [--plan ID] [--yes] [flags]\n\n"
	    "Shows the plan awaiting approval and sets spec.approvedPlan to its id (a merge patch).\n"
	    "Refuses when the plan in status is not ID, or changed since it was shown.\n\n"
	    "Flags:\n"
	    "  --plan ID        approve only this plan id (what the reviewer saw elsewhere)\n"
	    "  -y, --yes        do not ask (needed when stdin is not a terminal)\n"
	    "  --kubeconfig F   kubeconfig file(s) (default: $KUBECONFIG, in-cluster, ~/.kube/config)\n"
	    "  -h, --help       this help\n\n"
	    "Exit status: 0 approved, 1 refused or failed, 2 bad usage.  docs/approvals.md\n");
}

/* "ns/name" into its parts; -1 when it is not that. */
static int split_ref(const char *ref, char *ns, size_t nn, char *name, size_t n)
{
	const char *slash = ref ? strchr(ref, '/') : NULL;

	if (slash == NULL || slash == ref || slash[1] == '\0' || strchr(slash + 1, '/') ||
	    (size_t)(slash - ref) >= nn || strlen(slash + 1) >= n)
		return -1;
	snprintf(ns, nn, "%.*s", (int)(slash - ref), ref);
	snprintf(name, n, "%s", slash + 1);
	return 0;
}

static int parse(int argc, char **argv, struct approve_flags *f, int approve, const char **ref)
{
	static const struct option long_opts[] = {
		{ "kubeconfig", required_argument, NULL, 'k' },
		{ "plan", required_argument, NULL, 'p' },
		{ "yes", no_argument, NULL, 'y' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(f, 0, sizeof(*f));
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, approve ? "yh" : "h", long_opts, NULL)) != -1) {
		switch (c) {
		case 'k': f->kubeconfig = optarg; break;
		case 'p': if (!approve) goto bad; f->plan = optarg; break;
		case 'y': if (!approve) goto bad; f->yes = 1; break;
		case 'h': (approve ? approve_usage : preview_usage)(stdout); return 1;
		default:
		bad:
			cmd_errorf("%s: unknown or incomplete flag %s (see --help)", approve ? "approve" : "preview",
			    argv[optind - 1]);
			return -1;
		}
	}
	if (optind != argc - 1) {
		cmd_errorf("%s: expected one NAMESPACE/NAME (see --help)", approve ? "approve" : "preview");
		return -1;
	}
	*ref = argv[optind];
	return 0;
}

static struct kube_client *connect(const struct approve_flags *f, const char *cmd)
{
	struct kube_config *cfg = NULL;
	struct kube_client *c;
	struct err e;

	if (kube_config_load(f->kubeconfig, &cfg, &e) < 0 || (c = kube_client_new(cfg, &e)) == NULL) {
		cmd_print_error(cmd, e.msg);
		return NULL;
	}
	return c;
}

static const cJSON *preview_of(const cJSON *obj)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "status"), "preview");
}

/* The status.preview as a reviewer reads it. */
static void print_plan(const char *ref, const cJSON *pv)
{
	const cJSON *c, *s;
	const char *by = kube_obj_str(pv, "approvedBy");
	int first = 1;

	printf("Stack %s: plan %s\n", ref, kube_obj_str(pv, "planId"));
	printf("  revision:  %s\n", kube_obj_str(pv, "revision") ? kube_obj_str(pv, "revision") : "?");
	printf("  previewed: %s\n", kube_obj_str(pv, "generatedAt") ? kube_obj_str(pv, "generatedAt") : "?");
	printf("  state:     %s%s\n", by ? "approved by " : "awaiting approval", by ? by : "");
	printf("  changes:   ");
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(pv, "changeSummary"))
		if (cJSON_IsNumber(c) && strcmp(c->string, "same") != 0) {
			printf("%s%d to %s", first ? "" : ", ", (int)c->valuedouble, c->string);
			first = 0;
		}
	printf("%s\n  steps:\n", first ? "none" : "");
	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(pv, "steps")) {
		const cJSON *p;
		int n = 0;
		printf("    %-8s %s", kube_obj_str(s, "op") ? kube_obj_str(s, "op") : "?",
		    kube_obj_str(s, "urn") ? kube_obj_str(s, "urn") : "?");
		cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(s, "properties"))
			if (cJSON_IsString(p))
				printf("%s%s", n++ ? ", " : "  [", p->valuestring);
		printf("%s\n", n ? "]" : "");
	}
	c = cJSON_GetObjectItemCaseSensitive(pv, "omittedSteps");
	if (cJSON_IsNumber(c) && c->valuedouble > 0)
		printf("    ... and %d more\n", (int)c->valuedouble);
}

/* GETs the Stack; its status.preview must hold a plan.  Caller frees. */
static cJSON *read_pending(struct kube_client *c, const char *cmd, const char *ns, const char *name,
    const char *ref)
{
	struct err e;
	cJSON *obj = kube_get(c, &stack_res, ns, name, NULL, &e);

	if (obj == NULL) {
		cmd_print_error(cmd, e.msg);
		return NULL;
	}
	if (kube_obj_str(preview_of(obj), "planId") == NULL) {
		char msg[600];
		snprintf(msg, sizeof(msg), "Stack %s has no plan awaiting approval (status.preview is empty; "
		    "is spec.approval Manual?)", ref);
		cmd_print_error(cmd, msg);
		cJSON_Delete(obj);
		return NULL;
	}
	return obj;
}

int cmd_preview(int argc, char **argv)
{
	struct approve_flags f;
	struct kube_client *c;
	const char *ref;
	char ns[254], name[254];
	cJSON *obj;
	int rc = parse(argc, argv, &f, 0, &ref);

	if (rc != 0)
		return rc > 0 ? 0 : EXIT_USAGE;
	if (split_ref(ref, ns, sizeof(ns), name, sizeof(name)) < 0) {
		cmd_errorf("preview: \"%s\" is not NAMESPACE/NAME", ref);
		return EXIT_USAGE;
	}
	if ((c = connect(&f, "preview")) == NULL)
		return 1;
	obj = read_pending(c, "preview", ns, name, ref);
	if (obj)
		print_plan(ref, preview_of(obj));
	cJSON_Delete(obj);
	kube_client_free(c);
	return obj ? 0 : 1;
}

/* y/yes on a terminal; anything else (or no terminal) is no. */
static int confirmed(const char *id)
{
	char line[16];

	if (!isatty(STDIN_FILENO)) {
		cmd_print_error("approve", "stdin is not a terminal: pass --yes to approve without asking");
		return 0;
	}
	printf("Approve plan %s? [y/N] ", id);
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
static int set_approval(struct kube_client *c, const char *ns, const char *name, const char *ref,
    const char *id, cJSON *obj)
{
	for (int attempt = 0; attempt < APPROVE_ATTEMPTS; attempt++) {
		char *patch = approval_patch(kube_obj_str(obj, "metadata.resourceVersion"), id);
		struct err e;
		cJSON *res = kube_patch(c, &stack_res, ns, name, NULL, KUBE_PATCH_MERGE, patch, NULL, 0, &e);

		free(patch);
		if (res) {
			cJSON_Delete(res);
			cJSON_Delete(obj);
			return 0;
		}
		if (e.code != ERR_CONFLICT) {
			cmd_print_error("approve", e.msg);
			cJSON_Delete(obj);
			return -1;
		}
		/* The Stack changed since it was read: only the same plan may go on. */
		cJSON_Delete(obj);
		if ((obj = read_pending(c, "approve", ns, name, ref)) == NULL)
			return -1;
		if (strcmp(kube_obj_str(preview_of(obj), "planId"), id) != 0) {
			char msg[400];
			snprintf(msg, sizeof(msg), "the plan of %s changed since it was shown (now %s): not approved; "
			    "review it again", ref, kube_obj_str(preview_of(obj), "planId"));
			cmd_print_error("approve", msg);
			cJSON_Delete(obj);
			return -1;
		}
	}
	cmd_print_error("approve", "the Stack keeps changing; not approved");
	cJSON_Delete(obj);
	return -1;
}

int cmd_approve(int argc, char **argv)
{
	struct approve_flags f;
	struct kube_client *c;
	const char *ref, *id;
	char ns[254], name[254], shown[65];
	cJSON *obj;
	int rc = parse(argc, argv, &f, 1, &ref);

	if (rc != 0)
		return rc > 0 ? 0 : EXIT_USAGE;
	if (split_ref(ref, ns, sizeof(ns), name, sizeof(name)) < 0) {
		cmd_errorf("approve: \"%s\" is not NAMESPACE/NAME", ref);
		return EXIT_USAGE;
	}
	if ((c = connect(&f, "approve")) == NULL)
		return 1;
	if ((obj = read_pending(c, "approve", ns, name, ref)) == NULL) {
		kube_client_free(c);
		return 1;
	}
	id = kube_obj_str(preview_of(obj), "planId");
	print_plan(ref, preview_of(obj));
	if (f.plan && strcmp(f.plan, id) != 0) {
		char msg[400];
		snprintf(msg, sizeof(msg), "the plan awaiting approval is %s, not %s: not approved; review it "
		    "again", id, f.plan);
		cmd_print_error("approve", msg);
		rc = 1;
	} else if (!f.yes && !confirmed(id)) {
		cmd_print_error("approve", "not approved");
		rc = 1;
	} else {
		snprintf(shown, sizeof(shown), "%s", id);
		/* set_approval owns obj from here (it may replace it). */
		rc = set_approval(c, ns, name, ref, shown, obj) < 0 ? 1 : 0;
		obj = NULL;
		if (rc == 0)
			printf("approved plan %s of %s (spec.approvedPlan)\n", shown, ref);
	}
	cJSON_Delete(obj);
	kube_client_free(c);
	return rc;
}
