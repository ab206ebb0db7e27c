/*
 * pl_config.c - pl_apply_config: the declared config planned into CLI
 * calls (plain keys with one `config set-all`, structured values flattened
 * into --path leaves, each secret leaf with `config set --secret` and its
 * value on stdin), then `config rm` for every key of the stack's settings
 * file that is no longer declared.
 */
#include "pulumi/pl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

static int simple_segment(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '_' || *s == '-'))
			return 0;
	return 1;
}

/* Flattens a structured value into --path keys ("k.a[0]", `k["x.y"]`) and
 * their leaf values.  -1 for a member name the path syntax cannot carry. */
static int flatten(const char *prefix, const cJSON *v, struct pl_strv *keys, struct pl_strv *vals)
{
	if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
		int i = 0;

		for (const cJSON *c = v->child; c; c = c->next, i++) {
			char *k = NULL;
			int n;

			if (cJSON_IsArray(v))
				n = asprintf(&k, "%s[%d]", prefix, i);
			else if (c->string && simple_segment(c->string))
				n = asprintf(&k, "%s.%s", prefix, c->string);
			else if (c->string && !strpbrk(c->string, "\"\\") && c->string[0])
				n = asprintf(&k, "%s[\"%s\"]", prefix, c->string);
			else
				return -1;
			if (n < 0)
				return -1;
			n = flatten(k, c, keys, vals);
			free(k);
			if (n < 0)
				return -1;
		}
		return 0;
	}
	if (cJSON_IsNull(v))
		return 0;
	pl_strv_add(keys, prefix);
	if (cJSON_IsString(v)) {
		pl_strv_add(vals, v->valuestring);
	} else {
		char *p = cJSON_PrintUnformatted(v);

		pl_strv_add(vals, p ? p : "");
		free(p);
	}
	return 0;
}

/* Splits the declared config into plain pairs, --path pairs, and secrets
 * (each with its own path flag). */
struct cfg_plan {
	struct pl_strv plain_k, plain_v, path_k, path_v, sec_k, sec_v;
	int *sec_path;
	size_t n_sec_path;
};

static void cfg_plan_free(struct cfg_plan *p)
{
	pl_strv_free(&p->plain_k);
	pl_strv_free(&p->plain_v);
	pl_strv_free(&p->path_k);
	pl_strv_free(&p->path_v);
	for (size_t i = 0; i < p->sec_v.n; i++)
		explicit_bzero(p->sec_v.v[i], strlen(p->sec_v.v[i]));
	pl_strv_free(&p->sec_k);
	pl_strv_free(&p->sec_v);
	free(p->sec_path);
}

static int cfg_plan_build(struct pl_stack *st, struct cfg_plan *p, char *bad, size_t badlen)
{
	p->sec_path = calloc(1, sizeof(int));
	for (size_t i = 0; i < st->n_cfg; i++) {
		const struct pl_cfg_copy *c = &st->cfg[i];
		size_t before = p->sec_k.n;

		if (!c->structured) {
			pl_strv_add(c->secret ? &p->sec_k : &p->plain_k, c->key);
			pl_strv_add(c->secret ? &p->sec_v : &p->plain_v, c->value);
		} else {
			cJSON *j = cJSON_Parse(c->value);
			int rc = j ? flatten(c->key, j, c->secret ? &p->sec_k : &p->path_k,
					     c->secret ? &p->sec_v : &p->path_v) : -1;

			cJSON_Delete(j);
			if (rc < 0) {
				snprintf(bad, badlen, "config %s: a member name cannot be expressed as a --path key",
					 c->key);
				return -1;
			}
		}
		int *np = realloc(p->sec_path, (p->sec_k.n + 1) * sizeof(int));

		if (np == NULL)
			return -1;
		p->sec_path = np;
		for (size_t k = before; k < p->sec_k.n; k++)
			p->sec_path[k] = c->structured;
	}
	return p->plain_k.oom || p->plain_v.oom || p->path_k.oom || p->sec_k.oom || p->sec_v.oom ? -1 : 0;
}

static int set_all(struct pl_stack *st, struct pl_strv *k, struct pl_strv *v, int path,
		   struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd c = { .op = "config set-all", .scope = PL_SCOPE_WORKSPACE };
	int rc;

	if (k->n == 0)
		return 0;
	pl_strv_add(&a, "config");
	pl_strv_add(&a, "set-all");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	if (path)
		pl_strv_add(&a, "--path");
	for (size_t i = 0; i < k->n; i++) {
		pl_strv_add(&a, "--plaintext");
		pl_strv_addf(&a, "%s=%s", k->v[i], v->v[i]);
	}
	rc = pl_call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	return rc;
}

static int set_secret(struct pl_stack *st, const char *key, const char *value, int path,
		      struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd c = { .op = "config set --secret", .scope = PL_SCOPE_WORKSPACE, .stdin_data = value };
	int rc;

	pl_strv_add(&a, "config");
	pl_strv_add(&a, "set");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	if (path)
		pl_strv_add(&a, "--path");
	pl_strv_add(&a, "--secret");
	pl_strv_add(&a, "--");
	pl_strv_add(&a, key);
	rc = pl_call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	return rc;
}

static int declared(struct pl_stack *st, const char *project, const char *full)
{
	for (size_t i = 0; i < st->n_cfg; i++) {
		const char *k = st->cfg[i].key;
		size_t pl = strlen(project);

		if (strcmp(k, full) == 0)
			return 1;
		if (!strchr(k, ':') && strncmp(full, project, pl) == 0 && full[pl] == ':' &&
		    strcmp(full + pl + 1, k) == 0)
			return 1;
	}
	return 0;
}

static int remove_undeclared(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	char project[256];
	struct err e = { 0 };
	cJSON *keys = NULL;
	int rc = 0;

	if (pl_project_name(st->workdir, project, sizeof(project), &e) < 0 ||
	    pl_stack_config_keys(st->workdir, st->stack, &keys, &e) < 0) {
		cJSON_Delete(keys);
		return pl_fail_internal(st, r, "config", e.msg);
	}
	for (const cJSON *k = keys->child; k && rc == 0; k = k->next) {
		struct pl_cmd rm = { .op = "config rm", .scope = PL_SCOPE_WORKSPACE };

		if (declared(st, project, k->valuestring))
			continue;
		pl_strv_add(&a, "config");
		pl_strv_add(&a, "rm");
		pl_strv_add(&a, "--stack");
		pl_strv_add(&a, st->stack);
		pl_strv_add(&a, "--");
		pl_strv_add(&a, k->valuestring);
		rc = pl_call(st, &rm, &a, r, NULL);
		pl_strv_free(&a);
		if (rc == 0)
			log_info("pulumi config key removed", "stack", st->stack, "key", k->valuestring, NULL);
	}
	cJSON_Delete(keys);
	return rc;
}

int pl_apply_config(struct pl_stack *st, struct pl_result *r)
{
	struct cfg_plan p = { 0 };
	char bad[300] = "";
	int rc = 0;

	if (pl_begin(st, r) < 0)
		return -1;
	if (cfg_plan_build(st, &p, bad, sizeof(bad)) < 0) {
		cfg_plan_free(&p);
		return pl_fail_internal(st, r, "config", bad[0] ? bad : "out of memory");
	}
	rc = set_all(st, &p.plain_k, &p.plain_v, 0, r);
	if (rc == 0)
		rc = set_all(st, &p.path_k, &p.path_v, 1, r);
	for (size_t i = 0; rc == 0 && i < p.sec_k.n; i++)
		rc = set_secret(st, p.sec_k.v[i], p.sec_v.v[i], p.sec_path[i], r);
	cfg_plan_free(&p);
	if (rc == 0)
		rc = remove_undeclared(st, r);   /* after the sets: the file exists now */
	if (rc == 0)
		pl_set_message(r, "config", "applied", NULL, 0);
	return rc;
}
