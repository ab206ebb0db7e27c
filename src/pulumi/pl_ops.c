/*
 * pl_ops.c - the operations of the pulumi driver (see pulumi.h) other than
 * config: stack selection, install, preview/up/refresh/destroy with an
 * event log, cancel and interrupt, outputs and history.  Each is one or
 * more CLI calls made through pl_call (pl_call.c).
 */
#include "pulumi/pl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/secret.h"

/* ---- stack selection ---- */

int pl_ensure_stack(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd sel = { .op = "stack select", .scope = PL_SCOPE_WORKSPACE, .quiet_ok = 1 };
	struct pl_cmd init = { .op = "stack init", .scope = PL_SCOPE_WORKSPACE };
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	pl_strv_addl(&a, "stack", "select", "--stack", st->stack, NULL);
	rc = pl_call(st, &sel, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0 || r->status != PL_NOT_FOUND)
		return rc;
	if (st->no_create) {
		char m[300];

		snprintf(m, sizeof(m), "the stack %s does not exist, and it is not to be created", st->stack);
		pl_set_message(r, "stack select", m, (const char *const *)st->secrets.v, st->secrets.n);
		return -1;
	}
	pl_strv_addl(&a, "stack", "init", st->stack, NULL);
	if (st->provider)
		pl_strv_addl(&a, "--secrets-provider", st->provider, NULL);
	rc = pl_call(st, &init, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0) {
		log_info("pulumi stack created", "stack", st->stack, NULL);
		return 0;
	}
	/* Created by someone else since our select (reference §3.1
	 * IsCreateStack409Error): select it after all. */
	if (pl_text_matches(r->err_tail, "stack.*already exists")) {
		pl_strv_addl(&a, "stack", "select", "--stack", st->stack, NULL);
		sel.quiet_ok = 0;
		rc = pl_call(st, &sel, &a, r, NULL);
		pl_strv_free(&a);
	}
	return rc;
}

/* ---- ESC environments ---- */

/* Adds to have the environments the stack's settings file imports:
 * `environment: [a, b]`, or ESC's `environment: {imports: [a, b]}`. */
static void imported_environments(struct pl_stack *st, struct pl_strv *have)
{
	char path[4096], loaded[4096];
	const char *names[2];
	yaml_document_t doc;
	yaml_node_t *env;
	struct err e = { 0 };

	if (pl_stack_settings_path(st->workdir, st->stack, path, sizeof(path)) != 1)
		return;
	names[0] = names[1] = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (pl_yaml_load_first(st->workdir, names, loaded, sizeof(loaded), &doc, &e) <= 0)
		return;
	env = pl_yaml_get(&doc, yaml_document_get_root_node(&doc), "environment");
	if (env && env->type == YAML_MAPPING_NODE)
		env = pl_yaml_get(&doc, env, "imports");
	if (env && env->type == YAML_SEQUENCE_NODE)
		for (yaml_node_item_t *it = env->data.sequence.items.start; it < env->data.sequence.items.top; it++) {
			yaml_node_t *n = yaml_document_get_node(&doc, *it);
			if (n && n->type == YAML_SCALAR_NODE)
				pl_strv_add(have, (const char *)n->data.scalar.value);
		}
	yaml_document_delete(&doc);
}

int pl_apply_environments(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv have = { 0 }, a = { 0 };
	struct pl_cmd c = { .op = "config env add", .scope = PL_SCOPE_WORKSPACE };
	size_t missing = 0;
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	if (st->environments.n == 0)
		return 0;
	imported_environments(st, &have);
	pl_strv_addl(&a, "config", "env", "add", NULL);
	for (size_t i = 0; i < st->environments.n; i++) {
		size_t j = 0;
		while (j < have.n && strcmp(have.v[j], st->environments.v[i]) != 0)
			j++;
		if (j == have.n) {
			pl_strv_add(&a, st->environments.v[i]);
			missing++;
		}
	}
	pl_strv_free(&have);
	if (missing == 0) {
		pl_strv_free(&a);
		pl_set_message(r, "config env add", "the stack imports every environment already", NULL, 0);
		return 0;
	}
	pl_strv_addl(&a, "--yes", "--stack", st->stack, NULL);
	rc = pl_call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	return rc;
}

/* ---- install ---- */

int pl_install(struct pl_stack *st, const char *key, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd c = { .op = "install", .scope = PL_SCOPE_WORKSPACE };
	char marker[4096], *prev = NULL;
	struct err e = { 0 };
	size_t len;
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	snprintf(marker, sizeof(marker), "%s/installed-key", st->scratch);
	if (key && fs_read_file(marker, 4096, &prev, &len, &e) == 0 && strcmp(prev, key) == 0) {
		free(prev);
		pl_set_message(r, "install", "already installed for these dependencies", NULL, 0);
		return 0;
	}
	free(prev);
	unlink(marker);
	pl_strv_add(&a, "install");
	/* A Go program's install would download every plugin the CLI guesses
	 * from the module graph: any github.com/pulumi/pulumi-* module, used or
	 * not (sdk/v3 v3.274.1 requires pulumi-cloud-sdk/go, hence a plugin
	 * "cloud-sdk" no program uses), and it fails without internet access.
	 * `up` still installs the plugins the program does use, as for a YAML
	 * program; the install then only fetches the modules (go mod download). */
	if (pl_runtime_is(st->workdir, "go"))
		pl_strv_add(&a, "--no-plugins");
	rc = pl_call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0 && key) {
		FILE *f = fopen(marker, "we");

		if (f == NULL || fputs(key, f) < 0 || fclose(f) != 0) {
			if (f)
				fclose(f);
			return pl_fail_internal(st, r, "install", "cannot record the installed dependencies");
		}
	}
	return rc;
}

/* ---- stack operations with an event log ---- */

/* --target-dependents only with targets: without any it means nothing. */
static void add_targets(struct pl_strv *a, const struct pl_op_opts *o)
{
	for (size_t i = 0; o && i < o->n_targets; i++)
		pl_strv_addf(a, "--target=%s", o->targets[i]);
	if (o && o->n_targets > 0 && o->target_dependents)
		pl_strv_add(a, "--target-dependents");
}

/* refresh and destroy run the program only when asked; `=true` is what the
 * Automation API passes, and a bare flag would take the next word as its
 * value where it is a string flag (preview). */
static void add_run_program(struct pl_strv *a, const struct pl_op_opts *o)
{
	if (o && o->run_program)
		pl_strv_add(a, "--run-program=true");
}

static void add_common(struct pl_strv *a, const struct pl_op_opts *o)
{
	if (o && o->expect_no_changes)
		pl_strv_add(a, "--expect-no-changes");
	add_targets(a, o);
}

/* refresh and destroy either only preview or go ahead without asking. */
static void add_preview_or_yes(struct pl_strv *a, const struct pl_op_opts *o)
{
	if (o && o->preview_only)
		pl_strv_add(a, "--preview-only");
	else
		pl_strv_addl(a, "--yes", "--skip-preview", NULL);
}

static void add_policy(struct pl_strv *a, const struct pl_op_opts *o)
{
	for (size_t i = 0; o && i < o->n_policy_packs; i++)
		pl_strv_addf(a, "--policy-pack=%s", o->policy_packs[i]);
}

static int run_logged(struct pl_stack *st, const char *op, struct pl_strv *a,
		      const struct pl_op_opts *o, int experimental, struct pl_result *r)
{
	struct pl_events ev;
	char evlog[4096];
	struct pl_cmd c = { .op = op, .scope = PL_SCOPE_STACK, .experimental = experimental, .ev = &ev,
			  .evlog = evlog };
	int rc;

	snprintf(evlog, sizeof(evlog), "%s/events-%s.jsonl", st->scratch, op);
	pl_events_init(&ev);
	ev.secrets = (const char *const *)st->secrets.v;
	ev.n_secrets = st->secrets.n;
	if (o) {
		ev.progress = o->progress;
		ev.progress_arg = o->progress_arg;
	}
	pl_strv_addl(a, "--exec-kind=auto.local", "--event-log", evlog, "--stack", st->stack, NULL);
	rc = pl_call(st, &c, a, r, NULL);
	if (strcmp(op, "up") == 0 && ev.outputs) {
		/* What the reconciler needs from `stack output`, without the call. */
		r->outputs = ev.outputs;
		ev.outputs = NULL;
		r->has_secret_outputs = ev.has_secret_outputs;
	}
	pl_events_free(&ev);
	return rc;
}

/* What preview and up share: the common flags, policy packs, the plan
 * (written by a preview with --save-plan, followed by an up with --plan)
 * and --refresh. */
static void add_update_flags(struct pl_strv *a, const struct pl_op_opts *o, const char *plan_flag)
{
	add_common(a, o);
	add_policy(a, o);
	if (o && o->plan_file)
		pl_strv_addf(a, "%s=%s", plan_flag, o->plan_file);
	if (o && o->refresh)
		pl_strv_add(a, "--refresh");
}

int pl_preview(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "preview");
	add_update_flags(&a, o, "--save-plan");
	rc = run_logged(st, "preview", &a, o, o && o->plan_file, r);
	pl_strv_free(&a);
	return rc;
}

int pl_up(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	char before[DIGEST_STR_MAX];
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	pl_strv_addl(&a, "up", "--yes", "--skip-preview", NULL);
	add_update_flags(&a, o, "--plan");
	if (o && o->with_config) {
		pl_config_settings_hash(st, before, sizeof(before));
		if (pl_config_up_args(st, &a, r) < 0) {
			pl_strv_free(&a);
			return -1;
		}
	}
	rc = run_logged(st, "up", &a, o, o && o->plan_file, r);
	pl_strv_free(&a);
	if (o && o->with_config)
		pl_config_after_up(st, before);
	return rc;
}

int pl_refresh(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "refresh");
	add_preview_or_yes(&a, o);
	add_common(&a, o);
	add_run_program(&a, o);
	rc = run_logged(st, "refresh", &a, o, 0, r);
	pl_strv_free(&a);
	return rc;
}

int pl_destroy(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "destroy");
	add_targets(&a, o);
	if (o && o->refresh)
		pl_strv_add(&a, "--refresh");
	add_run_program(&a, o);
	add_preview_or_yes(&a, o);
	rc = run_logged(st, "destroy", &a, o, 0, r);
	pl_strv_free(&a);
	return rc;
}

int pl_cancel(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd c = { .op = "cancel", .scope = PL_SCOPE_STACK };
	int rc;

	if (pl_begin(st, r) < 0)
		return -1;
	pl_strv_addl(&a, "cancel", "--yes", "--stack", st->stack, NULL);
	rc = pl_call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0)
		log_warn("pulumi stack lock cancelled", "stack", st->stack, NULL);
	return rc;
}

void pl_interrupt(struct pl_stack *st)
{
	atomic_store(&st->interrupt, 1);
}

/* ---- outputs and history ---- */

/* Where the masked outputs say "[secret]", the plaintext value's leaves
 * become known secrets. */
static void learn_secret_outputs(struct pl_stack *st, const cJSON *masked, const cJSON *plain)
{
	if (cJSON_IsString(masked) && strcmp(masked->valuestring, "[secret]") == 0) {
		if (!(cJSON_IsString(plain) && strcmp(plain->valuestring, "[secret]") == 0))
			pl_secret_add_leaves(st, plain);
		return;
	}
	if (cJSON_IsObject(masked)) {
		for (const cJSON *c = masked->child; c; c = c->next)
			learn_secret_outputs(st, c, cJSON_GetObjectItemCaseSensitive(plain, c->string));
	} else if (cJSON_IsArray(masked)) {
		int i = 0;

		for (const cJSON *c = masked->child; c; c = c->next, i++)
			learn_secret_outputs(st, c, cJSON_GetArrayItem(plain, i));
	}
}

/* 1 when some value in v is the CLI's "[secret]" mask. */
static int holds_secret_marker(const cJSON *v, int depth)
{
	if (cJSON_IsString(v))
		return strcmp(v->valuestring, "[secret]") == 0;
	for (const cJSON *c = depth < 64 && v ? v->child : NULL; c; c = c->next)
		if (holds_secret_marker(c, depth + 1))
			return 1;
	return 0;
}

static int read_outputs(struct pl_stack *st, int show, cJSON **dst, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd c = { .op = "stack output", .scope = PL_SCOPE_WORKSPACE, .tail_max = PL_JSON_TAIL_MAX };
	char *out = NULL;
	int rc;

	pl_strv_addl(&a, "stack", "output", "--json", NULL);
	if (show)
		pl_strv_add(&a, "--show-secrets");
	pl_strv_addl(&a, "--stack", st->stack, NULL);
	rc = pl_call(st, &c, &a, r, &out);
	pl_strv_free(&a);
	if (rc == 0 && (*dst = pl_parse_outputs(out)) == NULL)
		rc = pl_fail_internal(st, r, "stack output", "`pulumi stack output --json` did not print a JSON object");
	secret_free(out);
	return rc;
}

/* `stack output --json --show-secrets` into r->outputs_plain; the secret
 * values, where r->outputs says "[secret]", join the known secrets. */
static int read_plain_outputs(struct pl_stack *st, struct pl_result *r)
{
	cJSON *plain = NULL;
	char *o;

	if (read_outputs(st, 1, &plain, r) < 0)
		return -1;
	learn_secret_outputs(st, r->outputs, plain);
	r->outputs_plain = plain;
	/* The plaintext call's tails were masked before its secrets were known. */
	o = pl_redact(r->out_tail, (const char *const *)st->secrets.v, st->secrets.n);
	free(r->out_tail);
	r->out_tail = o;
	return st->oom ? pl_fail_internal(st, r, "stack output", "out of memory") : 0;
}

int pl_outputs(struct pl_stack *st, int show_secrets, struct pl_result *r)
{
	cJSON *masked = NULL;

	if (pl_begin(st, r) < 0)
		return -1;
	if (read_outputs(st, 0, &masked, r) < 0)
		return -1;
	r->outputs = masked;
	r->has_secret_outputs = holds_secret_marker(masked, 0);
	return show_secrets ? read_plain_outputs(st, r) : 0;
}

int pl_outputs_shown(struct pl_stack *st, const cJSON *masked, struct pl_result *r)
{
	cJSON *copy = cJSON_Duplicate(masked, 1);

	if (pl_begin(st, r) < 0) {
		cJSON_Delete(copy);
		return -1;
	}
	if (!cJSON_IsObject(copy)) {
		cJSON_Delete(copy);
		return pl_fail_internal(st, r, "stack output", "no masked outputs given");
	}
	r->outputs = copy;
	r->has_secret_outputs = holds_secret_marker(copy, 0);
	return read_plain_outputs(st, r);
}

int pl_last_history(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd c = { .op = "stack history", .scope = PL_SCOPE_STACK, .tail_max = PL_JSON_TAIL_MAX };
	char *out = NULL;
	int rc, empty = 0;

	if (pl_begin(st, r) < 0)
		return -1;
	pl_strv_addl(&a, "stack", "history", "--json", "--page-size", "1", "--page", "1", "--stack", st->stack,
	    NULL);
	rc = pl_call(st, &c, &a, r, &out);
	pl_strv_free(&a);
	if (rc == 0) {
		r->history = pl_parse_history(out, &empty);
		if (r->history == NULL && !empty)
			rc = pl_fail_internal(st, r, "stack history", "`pulumi stack history --json` did not print a JSON array");
	}
	free(out);
	return rc;
}
