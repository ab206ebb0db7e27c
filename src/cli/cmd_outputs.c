/*
 * cmd_outputs.c - `pulumi-controller outputs` and `history`: what
 * the last successful update produced, and the updates before it.
 *
 * outputs reads the Secret <name>-outputs that the controller writes after
 * every successful `up` (docs/stack-api.md, "The outputs Secret"): one key
 * per output, and the annotation pulumi.com/secrets listing the keys whose
 * values are secret.  Those are never decoded without --show-secrets; when
 * the annotation is missing or unreadable every value counts as secret.  A
 * Secret of that name that the Stack does not own (its controller
 * ownerReference) is not shown: anyone may create a Secret with a
 * plausible name.  history prints status.history, newest first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base64.h"
#include "base/secret.h"
#include "base/xalloc.h"
#include "cli/cli.h"
#include "cli/stackctl.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

#define MASK "[secret]"

/* The one outputs or history of this process: the tables point into it. */
static struct outputs_flags {
	struct stackctl_flags conn;
	enum stackctl_output fmt;
	int show_secrets;
} flags;

static const char outputs_usage[] =
	    "Usage: pulumi-controller outputs [NAMESPACE/]NAME [flags]\n"
	    "\n"
	    "Prints the Stack's outputs from the Secret NAME-outputs the controller writes\n"
	    "after each successful update.  Secret outputs print as [secret] and are not\n"
	    "even decoded unless --show-secrets is given.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 success, 1 the Stack or its outputs Secret does not exist (no\n"
	    "successful update yet), the Secret is not the Stack's, or a request failed;\n"
	    "2 bad usage.\n";

static const struct cli_opt outputs_opts[] = {
	CLI_BOOL(0, "show-secrets", &flags.show_secrets, "print the values of secret outputs too"),
	STACKCTL_OUTPUT_OPT(&flags.fmt, "json or yaml: an object of output name -> value (as\n"
	    "the Secret holds it: structured values are JSON text)"),
	STACKCTL_COMMON_OPTS(&flags.conn),
	CLI_END,
};

static const struct cli_cmd outputs_cmd = STACKCTL_CMD("outputs", outputs_usage, outputs_opts);

static const char history_usage[] =
	    "Usage: pulumi-controller history [NAMESPACE/]NAME [flags]\n"
	    "\n"
	    "Prints the Stack's last updates (status.history, at most 10, newest first):\n"
	    "when each started and how long it took, its type and result, the source\n"
	    "revision it ran, the Stack's generation then, and the resource changes.\n"
	    "docs/cli.md says how to roll back to one of them.\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Exit status: 0 success (also with no history yet), 1 the Stack does not exist\n"
	    "or the request failed, 2 bad usage.\n";

static const struct cli_opt history_opts[] = {
	STACKCTL_OUTPUT_OPT(&flags.fmt, "json or yaml: status.history as the controller wrote it"),
	CLI_REFUSE(CLI_OPT_BOOL, "show-secrets", 0),    /* outputs' */
	STACKCTL_COMMON_OPTS(&flags.conn),
	CLI_END,
};

static const struct cli_cmd history_cmd = STACKCTL_CMD("history", history_usage, history_opts);


/* ------------------------------------------------------------ outputs */

/* The annotation's key list (a JSON array of strings; caller frees), or
 * NULL when it is missing or not that. */
static cJSON *secret_keys(const cJSON *secret)
{
	const cJSON *ann = stackctl_obj(secret, "metadata.annotations"), *it;
	const cJSON *v = ann ? cJSON_GetObjectItemCaseSensitive(ann, STACKCTL_ANN_SECRETS) : NULL;
	cJSON *list = cJSON_IsString(v) ? cJSON_Parse(v->valuestring) : NULL;

	if (!cJSON_IsArray(list)) {
		cJSON_Delete(list);
		return NULL;
	}
	cJSON_ArrayForEach(it, list)
		if (!cJSON_IsString(it)) {
			cJSON_Delete(list);
			return NULL;
		}
	return list;
}

static int listed(const cJSON *keys, const char *key)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, keys)
		if (strcmp(it->valuestring, key) == 0)
			return 1;
	return 0;
}

/* Overwrites every string in the tree before it is freed (it held
 * decoded outputs, perhaps secret ones). */
static void wipe_tree(cJSON *v)
{
	for (cJSON *it = v; it != NULL; it = it->next) {
		if (cJSON_IsString(it) && it->valuestring)
			secret_wipe(it->valuestring, strlen(it->valuestring));
		wipe_tree(it->child);
	}
}

static int cmp_keys(const void *a, const void *b)
{
	return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* {output: value} of the Secret's data, secret values masked unless shown;
 * caller wipes (wipe_tree) and frees.  *undecodable counts the values that
 * were not base64. */
static cJSON *decode_outputs(const cJSON *secret, const cJSON *keys, int show_secrets, int *undecodable)
{
	const cJSON *data = stackctl_obj(secret, "data"), *it;
	cJSON *out = cJSON_CreateObject();
	const cJSON **sorted;
	size_t n = 0;

	*undecodable = 0;
	sorted = xcalloc((size_t)cJSON_GetArraySize(data) + 1, sizeof(*sorted));
	cJSON_ArrayForEach(it, data)
		if (it->string != NULL)
			sorted[n++] = it;
	qsort(sorted, n, sizeof(*sorted), cmp_keys);
	for (size_t i = 0; i < n; i++) {
		const cJSON *v = sorted[i];
		unsigned char *plain = NULL;
		size_t len = 0;
		struct err e;
		int is_secret = keys == NULL || listed(keys, v->string);

		if (is_secret && !show_secrets) {
			cJSON_AddStringToObject(out, v->string, MASK);
			continue;
		}
		if (!cJSON_IsString(v) || base64_decode(v->valuestring, strlen(v->valuestring), &plain, &len, &e) < 0 ||
		    memchr(plain, '\0', len) != NULL) {
			/* Not base64, or binary: not an output the controller wrote. */
			(*undecodable)++;
			cJSON_AddStringToObject(out, v->string, "(not a text value)");
			if (plain)
				secret_wipe(plain, len);
			free(plain);
			continue;
		}
		cJSON_AddStringToObject(out, v->string, (char *)plain);
		secret_wipe(plain, len);
		free(plain);
	}
	free(sorted);
	return out;
}

static int print_outputs(cJSON *outs, enum stackctl_output fmt, const struct stackctl_ref *ref)
{
	static const char *const headers[] = { "OUTPUT", "VALUE" };
	struct stackctl_table t;
	struct err e = { 0 };
	const cJSON *it;

	if (fmt != STACKCTL_OUT_TABLE) {
		if (stackctl_print_doc(outs, fmt, stdout, &e) < 0) {
			cli_print_error("outputs", e.msg);
			return 1;
		}
		return 0;
	}
	if (outs->child == NULL) {
		fprintf(stderr, "Stack %s/%s has no outputs.\n", ref->ns, ref->name);
		return 0;
	}
	stackctl_table_init(&t, headers, 2);
	cJSON_ArrayForEach(it, outs) {
		const char *cells[2] = { it->string, it->valuestring };
		stackctl_table_add(&t, cells);
	}
	stackctl_table_print(&t, stdout);
	stackctl_table_free(&t);
	return 0;
}

/* The Stack's outputs Secret, checked to be the Stack's; NULL after
 * printing why not. */
static cJSON *outputs_secret(struct stackctl *sc, const struct stackctl_ref *ref, const cJSON *st)
{
	char name[STACKCTL_NAME_MAX + 16], msg[1200];
	struct err e = { 0 };
	cJSON *secret;

	snprintf(name, sizeof(name), "%s-outputs", ref->name);
	if (strlen(name) > STACKCTL_NAME_MAX) {
		snprintf(msg, sizeof(msg), "Stack %s/%s: its name leaves no room for an outputs Secret (%s)",
		    ref->ns, ref->name, name);
		cli_print_error("outputs", msg);
		return NULL;
	}
	secret = kube_get(sc->client, &secret_res, ref->ns, name, NULL, &e);
	if (secret == NULL && e.code == ERR_NOTFOUND && strstr(e.msg, "\" not found") != NULL) {
		snprintf(msg, sizeof(msg), "Stack %s/%s has no outputs yet: Secret %s/%s does not exist (the "
		    "controller writes it after the first successful update)", ref->ns, ref->name, ref->ns, name);
		cli_print_error("outputs", msg);
		return NULL;
	}
	if (secret == NULL) {
		stackctl_print_object_error("outputs", "get", "Secret", ref->ns, name, &e);
		return NULL;
	}
	/* ownerReferences that is not a list reads as none, as every field of
	 * the server's here whose type is wrong. */
	if (stackctl_arr(secret, "metadata.ownerReferences") == NULL ||
	    !kube_owned_by(secret, "Stack", stackctl_str(st, "metadata.uid"))) {
		snprintf(msg, sizeof(msg), "Secret %s/%s is not owned by Stack %s/%s (no ownerReference with its "
		    "uid): not shown", ref->ns, name, ref->ns, ref->name);
		cli_print_error("outputs", msg);
		wipe_tree(secret);
		cJSON_Delete(secret);
		return NULL;
	}
	return secret;
}

int cmd_outputs(int argc, char **argv)
{
	struct stackctl_ref ref;
	struct stackctl sc;
	int undecodable = 0, show, rc = stackctl_open(&outputs_cmd, argc, argv, &flags.conn, 0, &ref, &sc);
	enum stackctl_output fmt;
	cJSON *st = NULL, *secret = NULL, *keys = NULL, *outs;

	if (rc != CLI_GO_ON)
		return rc;
	show = flags.show_secrets;
	fmt = flags.fmt;
	rc = 1;
	if ((st = stackctl_get_stack(&sc, "outputs", &ref)) == NULL ||
	    (secret = outputs_secret(&sc, &ref, st)) == NULL)
		goto out;
	keys = secret_keys(secret);
	if (keys == NULL && !show)
		fprintf(stderr, "outputs: the Secret's %s annotation is missing or unreadable: every value is "
		    "masked (--show-secrets shows them)\n", STACKCTL_ANN_SECRETS);
	outs = decode_outputs(secret, keys, show, &undecodable);
	if (undecodable)
		fprintf(stderr, "outputs: %d value(s) of the Secret are not base64 text\n", undecodable);
	rc = print_outputs(outs, fmt, &ref);
	wipe_tree(outs);
	cJSON_Delete(outs);
out:
	if (secret)
		wipe_tree(secret);
	cJSON_Delete(secret);
	cJSON_Delete(keys);
	cJSON_Delete(st);
	stackctl_close(&sc);
	return rc;
}

/* ------------------------------------------------------------ history */

static void print_history(const cJSON *hist)
{
	static const char *const headers[] = { "#", "STARTED", "DURATION", "TYPE", "RESULT", "REVISION",
		"GENERATION", "CHANGES" };
	struct stackctl_table t;
	const cJSON *h;
	int i = 0;

	stackctl_table_init(&t, headers, 8);
	cJSON_ArrayForEach(h, hist) {
		const char *start = stackctl_str(h, "startTime"), *end = stackctl_str(h, "endTime");
		char num[16], dur[16] = "-", gen[24] = "-", changes[256];
		int64_t s_us, e_us;
		long long g = stackctl_int(h, "generation", -1);
		const char *cells[8];

		if (!cJSON_IsObject(h))
			continue;
		snprintf(num, sizeof(num), "%d", ++i);
		if (start && end && kube_parse_time_us(start, &s_us) == 0 && kube_parse_time_us(end, &e_us) == 0)
			stackctl_human_duration((e_us - s_us) / 1000000, dur, sizeof(dur));
		if (g >= 0)
			snprintf(gen, sizeof(gen), "%lld", g);
		stackctl_changes(stackctl_obj(h, "resourceChanges"), changes, sizeof(changes));
		cells[0] = num;
		cells[1] = start;
		cells[2] = dur;
		cells[3] = stackctl_str(h, "type");
		cells[4] = stackctl_str(h, "result");
		cells[5] = stackctl_str(h, "revision");
		cells[6] = gen;
		cells[7] = changes;
		stackctl_table_add(&t, cells);
	}
	stackctl_table_print(&t, stdout);
	stackctl_table_free(&t);
}

int cmd_history(int argc, char **argv)
{
	struct stackctl_ref ref;
	struct stackctl sc;
	int rc = stackctl_open(&history_cmd, argc, argv, &flags.conn, 0, &ref, &sc);
	enum stackctl_output fmt = flags.fmt;   /* read after stackctl_open set it */
	const cJSON *hist;
	struct err e = { 0 };
	cJSON *st;

	if (rc != CLI_GO_ON)
		return rc;
	rc = 1;
	if ((st = stackctl_get_stack(&sc, "history", &ref)) != NULL) {
		hist = stackctl_arr(st, "status.history");
		rc = 0;
		if (fmt != STACKCTL_OUT_TABLE) {
			cJSON *empty = cJSON_CreateArray();
			rc = stackctl_print_doc(hist ? hist : empty, fmt, stdout, &e) < 0;
			cJSON_Delete(empty);
			if (rc)
				cli_print_error("history", e.msg);
		} else if (hist == NULL || hist->child == NULL) {
			fprintf(stderr, "Stack %s/%s has no update history yet.\n", ref.ns, ref.name);
		} else {
			print_history(hist);
		}
	}
	cJSON_Delete(st);
	stackctl_close(&sc);
	return rc;
}
