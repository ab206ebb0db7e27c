/*
 * pl_version.c - the pulumi driver's version check: `pulumi version` once
 * per binary per process (a cache shared by all stacks, under a lock),
 * compared with the stack's minimum; and pl_begin, where every operation
 * starts.
 */
#include "pulumi/pl_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

struct vcache {
	char *exe;
	int major, minor, patch;
	struct vcache *next;
};

static pthread_mutex_t vlock = PTHREAD_MUTEX_INITIALIZER;
static struct vcache *vhead;

static int version_cmp(int a1, int b1, int c1, int a2, int b2, int c2)
{
	if (a1 != a2)
		return a1 < a2 ? -1 : 1;
	if (b1 != b2)
		return b1 < b2 ? -1 : 1;
	return c1 < c2 ? -1 : c1 > c2;
}

static int cached_version(const char *exe, int *v)
{
	int found = 0;

	pthread_mutex_lock(&vlock);
	for (struct vcache *c = vhead; c; c = c->next)
		if (strcmp(c->exe, exe) == 0) {
			v[0] = c->major;
			v[1] = c->minor;
			v[2] = c->patch;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&vlock);
	return found;
}

static void remember_version(const char *exe, const int *v)
{
	struct vcache *c = calloc(1, sizeof(*c));

	if (c == NULL || (c->exe = strdup(exe)) == NULL) {
		free(c);
		return;
	}
	c->major = v[0];
	c->minor = v[1];
	c->patch = v[2];
	pthread_mutex_lock(&vlock);
	c->next = vhead;
	vhead = c;
	pthread_mutex_unlock(&vlock);
}

static int check_min(struct pl_stack *st, const int *v, struct pl_result *r)
{
	int m[3];
	char text[160];

	pl_parse_version(st->min_version, &m[0], &m[1], &m[2]);
	if (version_cmp(v[0], v[1], v[2], m[0], m[1], m[2]) >= 0) {
		r->status = PL_OK;
		snprintf(text, sizeof(text), "pulumi v%d.%d.%d", v[0], v[1], v[2]);
		pl_set_message(r, "version", text, NULL, 0);
		return 0;
	}
	r->status = PL_CLI_TOO_OLD;
	snprintf(text, sizeof(text), "pulumi v%d.%d.%d is older than the minimum supported v%s",
		 v[0], v[1], v[2], st->min_version);
	pl_set_message(r, "version", text, NULL, 0);
	log_error("pulumi CLI too old", "stack", st->stack, "message", r->message, NULL);
	return -1;
}

int pl_check_version(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv args = { 0 };
	struct pl_cmd c = { .op = "version", .scope = PL_SCOPE_PROBE };
	char exe[4096], *out = NULL;
	struct err e = { 0 };
	int v[3];
	const char *slash = strrchr(st->bin, '/');
	char path[8192];

	pl_result_reset(r);
	if (slash && slash != st->bin)
		snprintf(path, sizeof(path), "%.*s:%s", (int)(slash - st->bin), st->bin, st->search_path);
	else
		snprintf(path, sizeof(path), "%s", st->search_path);
	if (proc_find_exe(st->bin, path, exe, sizeof(exe), &e) < 0) {
		r->status = PL_CLI_MISSING;
		pl_set_message(r, "version", e.msg, NULL, 0);
		log_error("pulumi CLI missing", "stack", st->stack, "message", r->message, NULL);
		return -1;
	}
	if (st->skip_version_check) {
		r->status = PL_OK;
		pl_set_message(r, "version", "check skipped", NULL, 0);
		return 0;
	}
	if (cached_version(exe, v))
		return check_min(st, v, r);
	pl_strv_add(&args, "version");
	if (pl_call(st, &c, &args, r, &out) < 0) {
		pl_strv_free(&args);
		free(out);
		return -1;
	}
	pl_strv_free(&args);
	if (pl_parse_version(out, &v[0], &v[1], &v[2]) < 0) {
		free(out);
		r->status = PL_CLI_MISSING;
		pl_set_message(r, "version", "`pulumi version` printed no version", NULL, 0);
		return -1;
	}
	free(out);
	remember_version(exe, v);
	return check_min(st, v, r);
}

/* Every operation starts here: the version check (cached) on a fresh result. */
int pl_begin(struct pl_stack *st, struct pl_result *r)
{
	if (pl_check_version(st, r) < 0)
		return -1;
	pl_result_free(r);
	pl_result_reset(r);
	return 0;
}
