/*
 * stack_update.c - the pulumi operations of one update (up or preview) or
 * one destroy, through the driver (src/pulumi/), in the Stack's workspace.
 *
 * The sequence is the Automation API's: select (or init) the stack, set
 * config, install on a new revision, the operation, then the outputs.  Every
 * running operation is registered with the controller so that a lost Lease
 * or the end of the shutdown grace interrupts it the way the CLI expects.
 *
 * Locks: the driver reports the holder as user@host (pid N).  A lock left
 * by a previous incarnation of this controller is cancelled and the
 * operation retried once:
 *   - on this host (a restarted container), when that pid is dead;
 *   - on another host (a replaced pod), when that host ran an update of
 *     this Stack that never recorded its outcome (status.interruptedUpdates,
 *     folded in from status.currentUpdate as the pass found it, before its
 *     own "running" write replaced it) while holding the Lease this process
 *     holds now: a controller works only while it holds its Lease and exits
 *     when it loses it, so that one no longer runs.
 * So is, in a Job's pod, the lock of a pod the controller found gone
 * (stack_job_lock.c).  A lock held by anyone else (without --leader-elect,
 * any other host) is reported and never broken.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "stack/stack_exec.h"

static void outcome_start(struct stack_pass *p, const char *type)
{
	memset(&p->out, 0, sizeof(p->out));
	p->out.ran = 1;
	p->out.type = type;
	p->out.start_us = kube_now_us();
}

static void outcome_from(struct stack_pass *p, const struct pl_result *r)
{
	p->out.ok = r->status == PL_OK;
	p->out.status = r->status;
	snprintf(p->out.message, sizeof(p->out.message), "%s", r->message[0] ? r->message :
	    (r->status == PL_OK ? "succeeded" : pl_status_name(r->status)));
	p->out.lock = r->lock;
	if (r->status == PL_POLICY_VIOLATION)
		snprintf(p->safety.policy, sizeof(p->safety.policy), "%s", p->out.message);
	if (r->summary.changes) {
		cJSON_Delete(p->out.changes);
		p->out.changes = cJSON_Duplicate(r->summary.changes, 1);
	}
}

void stack_pl_spec_inputs(const struct stack_pass *p, struct pl_spec *s)
{
	memset(s, 0, sizeof(*s));
	s->stack = p->spec.stack;
	s->backend_url = p->spec.backend;
	s->secrets_provider = p->spec.secrets_provider;
	s->env = p->in.env;
	s->n_env = p->in.n_env;
	s->config = p->in.config;
	s->n_config = p->in.n_config;
}

static struct pl_stack *open_stack(struct stack_pass *p, const char *type, struct err *e)
{
	struct pl_spec s;

	stack_pl_spec_inputs(p, &s);
	/* useLocalStackOnly: an update never creates the stack; a destroy of
	 * one that is missing has nothing to do and must not hold the
	 * finalizer for ever, so it may select-or-init as before. */
	s.no_create = p->spec.local_stack_only && strcmp(type, "destroy") != 0;
	s.environments = (const char *const *)p->spec.environments;
	s.n_environments = p->spec.n_environments;
	s.pulumi_bin = p->sc->o.pulumi_bin;
	s.pulumi_home = p->sc->pulumi_home;
	s.workdir = p->workdir;
	s.scratch_dir = p->scratch;
	s.timeout_ms = p->spec.timeout_ms;
	return pl_open(&s, e);
}

/* The host part of "user@host". */
static const char *lock_host(const struct pl_lock *l)
{
	const char *at = strrchr(l->owner, '@');

	return at ? at + 1 : l->owner;
}

/* A killed CLI may linger as a zombie until it is reaped: that is dead. */
static int pid_alive(pid_t pid)
{
	char path[64], buf[512], *paren;
	FILE *f;
	size_t n;

	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	paren = strrchr(buf, ')');
	return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* Did host run an interrupted update of this Stack under the Lease this
 * controller holds now, long enough ago that it cannot still be running?
 * A pod that lost the Lease (partitioned, not dead) interrupts its CLI at
 * its renew deadline and may wait the CLI's cancel window before it is
 * gone; the Lease can change hands before that window ends, so the lock
 * waits out lock_grace_ms of this controller's leadership. */
int stack_lock_interrupted_here(const cJSON *status, const char *lease, const char *host, long long led_ms,
    long grace_ms)
{
	const cJSON *it;

	if (lease == NULL || led_ms < grace_ms)
		return 0;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(status, "interruptedUpdates")) {
		const char *c = kube_obj_str(it, "controller"), *l = kube_obj_str(it, "lease");
		if (c && l && strcmp(c, host) == 0 && strcmp(l, lease) == 0)
			return 1;
	}
	return 0;
}

/* Left by a previous incarnation of this controller? */
static int lock_is_stale(const struct stack_pass *p, const struct pl_lock *l)
{
	const char *host = lock_host(l);
	long long since = atomic_load(&p->sc->leading_since_ms);

	if (!l->present)
		return 0;
	if (p->sc->cancel_lock && strcmp(l->owner, p->sc->cancel_lock) == 0)
		return 1;   /* a Job's pod: the controller found this holder gone */
	if (strcmp(host, p->sc->identity) == 0)
		return l->pid > 0 && !pid_alive((pid_t)l->pid);
	return since > 0 && stack_lock_interrupted_here(p->status, p->sc->o.lease, host, clock_mono_ms() - since,
	    p->sc->o.lock_grace_ms);
}

/* Policy packs are named by their path inside the artifact; the CLI gets
 * them in the workspace's copy of it.  Caller frees (policy_paths_free). */
static char **policy_paths(const struct stack_pass *p)
{
	char root[PATH_MAX], **v = calloc(p->spec.n_policy_packs + 1, sizeof(char *));

	stack_workspace_paths(p->sc, p->ns, p->name, root, sizeof(root));
	for (size_t i = 0; v && i < p->spec.n_policy_packs; i++) {
		size_t n = strlen(root) + strlen(p->spec.policy_packs[i]) + 8;
		if ((v[i] = malloc(n)) != NULL)
			snprintf(v[i], n, "%s/tree/%s", root, p->spec.policy_packs[i]);
	}
	return v;
}

static void policy_paths_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* The drifted resources, as a refresh's outcome events name them. */
static void collect_drift(void *arg, const struct pl_step *s)
{
	struct stack_pass *p = arg;

	/* A drift check (refresh): the outcome's op; an update's refresh: its
	 * outcome events with diffs. */
	if (p->safety.refresh_in_update ? !s->drifted :
	    (!s->done || s->op == NULL || strcmp(s->op, "same") == 0 || strcmp(s->op, "refresh") == 0))
		return;
	stack_drift_add(p, p->safety.refresh_in_update ? "update" : s->op, s->urn ? s->urn : "");
}

/* One operation's options: spec.refresh (also on the update that repairs
 * drift), the targets, the policy packs (packs: their paths), the plan. */
static void op_options(struct stack_pass *p, struct pl_op_opts *o, char *const *packs)
{
	memset(o, 0, sizeof(*o));
	o->with_config = 1;
	o->refresh = p->spec.refresh || p->safety.remediate;
	o->targets = (const char *const *)p->spec.targets;
	o->n_targets = p->spec.n_targets;
	o->target_dependents = p->spec.target_dependents;
	o->run_program = p->spec.run_program;
	o->policy_packs = (const char *const *)packs;
	o->n_policy_packs = packs ? p->spec.n_policy_packs : 0;
	o->plan_file = p->safety.plan_file[0] ? p->safety.plan_file : NULL;
}

static void result_reset(struct pl_result *r)
{
	pl_result_free(r);
	memset(r, 0, sizeof(*r));
}

typedef int (*pl_op_fn)(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r);

/* Runs op; on a stale lock cancels it and runs op once more. */
static int run_op(struct stack_pass *p, struct pl_stack *st, pl_op_fn op, struct pl_result *r)
{
	struct pl_op_opts o;
	char **packs = policy_paths(p);
	int rc;

	op_options(p, &o, packs);
	if (op == pl_refresh) {
		/* A drift check: changes the refresh would make are the drift. */
		o.preview_only = 1;
		o.expect_no_changes = 1;
		o.progress = collect_drift;
		o.progress_arg = p;
	} else if (op == pl_up && o.refresh) {
		/* What the update's refresh changed in the state is drift too. */
		p->safety.refresh_in_update = 1;
		o.progress = collect_drift;
		o.progress_arg = p;
	}
	if (op(st, &o, r) == 0 || r->status != PL_CONFLICT || !lock_is_stale(p, &r->lock)) {
		policy_paths_free(packs, p->spec.n_policy_packs);
		return r->status == PL_OK ? 0 : -1;
	}
	{
		struct pl_result c;
		char pid[24];
		snprintf(pid, sizeof(pid), "%ld", r->lock.pid);
		log_warn(p->sc->cancel_lock ? "cancelling a lock left by the pod of an earlier Job of this Stack" :
		    "cancelling a lock left by a previous incarnation of this controller", "namespace",
		    p->ns, "name", p->name, "owner", r->lock.owner, "pid", pid, NULL);
		stack_event(p, "Normal", "LockCancelled", "cancelled the lock %s (pid %ld) left by a previous "
		    "incarnation of this controller at %s", r->lock.owner, r->lock.pid, r->lock.created);
		memset(&c, 0, sizeof(c));
		pl_cancel(st, &c);
		pl_result_free(&c);
	}
	result_reset(r);
	cJSON_Delete(p->safety.drift_steps);
	p->safety.drift_steps = NULL;
	p->safety.drift_omitted = 0;
	rc = op(st, &o, r) == 0 ? 0 : -1;
	policy_paths_free(packs, p->spec.n_policy_packs);
	return rc;
}

/* Config the up does not carry itself (secret and removed keys; nothing
 * when nothing changed), and install when the dependencies changed.  A
 * runtime without a dependency key, a key that cannot be read and a
 * reconcile request (the way to refresh a dependency the key cannot see)
 * always install.  0, or -1 with r holding the failure. */
static int prepare(struct stack_pass *p, struct pl_stack *st, struct pl_result *r)
{
	char key[72];
	struct err e;
	int keyed;

	if (pl_apply_environments(st, r) < 0)
		return -1;
	result_reset(r);
	if (pl_apply_secret_config(st, r) < 0)
		return -1;
	result_reset(r);
	keyed = !stack_pass_requested(p) && pl_dependency_key(p->workdir, key, sizeof(key), &e) == 1;
	if (pl_install(st, keyed ? key : NULL, r) < 0)
		return -1;
	result_reset(r);
	return 0;
}

static void with_stack(struct stack_pass *p, const char *type,
    void (*body)(struct stack_pass *p, struct pl_stack *st, struct pl_result *r))
{
	struct stack_running reg;
	struct pl_result r;
	struct pl_stack *st;
	struct err e;

	outcome_start(p, type);
	stack_metrics_operation_start(type);
	memset(&r, 0, sizeof(r));
	if ((st = open_stack(p, type, &e)) == NULL) {
		snprintf(p->out.message, sizeof(p->out.message), "%s", e.msg);
		p->out.status = PL_INTERNAL;
	} else if (stack_ctl_track(p->sc, &reg, st) < 0) {
		snprintf(p->out.message, sizeof(p->out.message), "the controller is shutting down");
		p->out.status = PL_CANCELED;
		pl_close(st);
	} else {
		body(p, st, &r);
		outcome_from(p, &r);
		stack_ctl_untrack(p->sc, &reg);
		pl_close(st);
	}
	pl_result_free(&r);
	p->out.end_us = kube_now_us();
	stack_metrics_operation_end(type, p->out.status, (double)(p->out.end_us - p->out.start_us) / 1e6);
}

/* Select, else create the stack; under useLocalStackOnly a missing one is
 * the update's failure, in words that name the field. */
static int ensure_stack(struct stack_pass *p, struct pl_stack *st, struct pl_result *r)
{
	if (pl_ensure_stack(st, r) == 0)
		return 0;
	if (r->status == PL_NOT_FOUND && p->spec.local_stack_only)
		snprintf(r->message, sizeof(r->message), "the stack %s does not exist, and spec.useLocalStackOnly "
		    "says it is not to be created; create it, or remove useLocalStackOnly", p->spec.stack);
	return -1;
}

/*
 * The Automation API's up is select, config, up, outputs: four or more CLI
 * calls.  Here a stack that has been updated before is not selected (an up
 * of a missing stack says so, and then it is created), plaintext config
 * rides on the up itself, and outputs come from the up's event log; only
 * secret outputs need one more call.
 */
static void update_body(struct stack_pass *p, struct pl_stack *st, struct pl_result *r)
{
	int known = stack_status_str(p, "lastUpdate.type") != NULL;
	int preview = p->spec.preview || p->safety.previewing;
	pl_op_fn op = preview ? pl_preview : pl_up;
	struct pl_result o;

	if (!known && ensure_stack(p, st, r) < 0)
		return;
	result_reset(r);
	if (prepare(p, st, r) < 0)
		return;
	if (run_op(p, st, op, r) < 0 && r->status == PL_NOT_FOUND && known) {
		result_reset(r);
		if (ensure_stack(p, st, r) < 0)
			return;
		result_reset(r);
		if (prepare(p, st, r) < 0 || run_op(p, st, op, r) < 0)
			return;
	}
	if (r->status != PL_OK || preview)
		return;
	if (!r->has_secret_outputs) {
		p->out.outputs = r->outputs ? cJSON_Duplicate(r->outputs, 1) : cJSON_CreateObject();
		return;
	}
	memset(&o, 0, sizeof(o));
	if (pl_outputs_shown(st, r->outputs, &o) < 0) {
		/* The update succeeded; its outputs could not be read. */
		pl_result_free(r);
		*r = o;
		return;
	}
	p->out.outputs = o.outputs;
	p->out.outputs_plain = o.outputs_plain;
	o.outputs = o.outputs_plain = NULL;
	pl_result_free(&o);
}

void stack_update_run(struct stack_pass *p)
{
	with_stack(p, p->spec.preview ? "preview" : "up", update_body);
}

static void destroy_body(struct stack_pass *p, struct pl_stack *st, struct pl_result *r)
{
	/* No config step: the stack's config from its last update is in the
	 * workspace, and the values it came from may be gone by now. */
	if (pl_ensure_stack(st, r) < 0)
		return;
	result_reset(r);
	run_op(p, st, pl_destroy, r);
}

void stack_update_destroy(struct stack_pass *p)
{
	with_stack(p, "destroy", destroy_body);
}

void stack_update_plan(struct stack_pass *p)
{
	p->safety.previewing = 1;
	with_stack(p, "preview", update_body);
	p->safety.previewing = 0;
}

/* The stack exists (it was updated at these inputs); the refresh needs its
 * config as the update left it. */
static void drift_body(struct stack_pass *p, struct pl_stack *st, struct pl_result *r)
{
	if (prepare(p, st, r) < 0)
		return;
	run_op(p, st, pl_refresh, r);
}

void stack_update_drift_check(struct stack_pass *p)
{
	cJSON_Delete(p->safety.drift_steps);
	p->safety.drift_steps = NULL;
	p->safety.drift_omitted = 0;
	with_stack(p, "refresh", drift_body);
}

int stack_update_plan_into(struct stack_pass *p, const char *dir, char *path, size_t n)
{
	snprintf(path, n, "%s/plan-new.json", dir);
	unlink(path);
	snprintf(p->safety.plan_file, sizeof(p->safety.plan_file), "%s", path);
	stack_update_plan(p);
	p->safety.plan_file[0] = '\0';
	return p->out.ok ? 0 : -1;
}
