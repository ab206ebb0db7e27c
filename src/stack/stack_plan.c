/*
 * stack_plan.c - what a plan is: the plan file `pulumi preview --save-plan`
 * writes, read strictly, its id, its steps as status.preview lists them,
 * and the digest of the inputs a plan was made from.
 *
 * Pure functions of a plan's bytes and of the pass's inputs: the approval
 * gate (stack_approval.c) decides with them, the Job runner names the plan
 * an up Job applies with them, and `run-update` checks the plan it was
 * handed with them.  Nothing here runs the CLI or writes an object.
 *
 * The plan id is a digest of the plan's steps and goals per URN, not of the
 * revision: a new commit that changes nothing the plan does keeps its
 * approval, and an approval can never apply a plan with other steps.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/json_strict.h"
#include "stack/stack_model.h"

#define STEP_PROPERTIES_MAX 20
#define CANON_DEPTH_MAX 64

/* The key of a secret value in Pulumi's serialized state and plans. */
#define SECRET_SIG "4dabf18193072939515e22adb298388d"
#define SECRET_SIG_VALUE "1b47061264138c4ac30d75fd1eb44270"

/* ------------------------------------------------------------ plan ids */

static int cmp_children(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;

	return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

/* A secret (its ciphertext differs on every preview); an asset, archive or
 * resource reference, which carry the same key with other values, is hashed
 * whole. */
static int secret_value(const cJSON *v)
{
	const cJSON *sig = cJSON_GetObjectItemCaseSensitive(v, SECRET_SIG);

	return cJSON_IsString(sig) && strcmp(sig->valuestring, SECRET_SIG_VALUE) == 0;
}

/* A copy of v with object keys sorted and secret values as "[secret]" (a
 * secret's ciphertext is new on every preview).  Caller frees. */
static cJSON *canonical(const cJSON *v, int depth)
{
	const cJSON **kids;
	cJSON *out;
	size_t n = 0, i = 0;

	if (depth > CANON_DEPTH_MAX)
		return cJSON_CreateString("[too deep]");
	if (cJSON_IsArray(v)) {
		out = cJSON_CreateArray();
		for (const cJSON *c = v->child; c && out; c = c->next)
			cJSON_AddItemToArray(out, canonical(c, depth + 1));
		return out;
	}
	if (!cJSON_IsObject(v))
		return cJSON_Duplicate(v, 0);
	if (secret_value(v))
		return cJSON_CreateString("[secret]");
	for (const cJSON *c = v->child; c; c = c->next)
		n++;
	if ((kids = calloc(n + 1, sizeof(*kids))) == NULL)
		return NULL;
	for (const cJSON *c = v->child; c; c = c->next)
		kids[i++] = c;
	qsort(kids, n, sizeof(*kids), cmp_children);
	out = cJSON_CreateObject();
	for (i = 0; i < n && out; i++)
		cJSON_AddItemToObject(out, kids[i]->string ? kids[i]->string : "", canonical(kids[i], depth + 1));
	free(kids);
	return out;
}

static int steps_change(const cJSON *steps)
{
	const cJSON *s;

	cJSON_ArrayForEach(s, steps)
		if (!cJSON_IsString(s) || strcmp(s->valuestring, "same") != 0)
			return 1;
	return 0;
}

/* The JSON names of the fields of the plan's Go structs (pulumi's apitype
 * DeploymentPlanV1, ResourcePlanV1, GoalV1, PlanDiffV1, and resource's
 * CustomTimeouts), NULL-terminated: Go matches those case-insensitively. */
static const char *const plan_fields[] = { "manifest", "config", "resourcePlans", NULL };
static const char *const resource_fields[] = { "goal", "steps", "state", "seed", NULL };
static const char *const goal_fields[] = {
	"type", "name", "custom", "inputDiff", "outputDiff", "parent", "protect", "dependencies",
	"provider", "propertyDependencies", "deleteBeforeReplace", "ignoreChanges",
	"ignoreRefreshChanges", "additionalSecretOutputs", "aliases", "structuredAliases", "id",
	"customTimeouts", NULL
};
static const char *const diff_fields[] = { "adds", "deletes", "updates", NULL };
static const char *const timeouts_fields[] = { "create", "update", "delete", NULL };

/* The goal's own structs, each with its fields. */
static const struct {
	const char *name;
	const char *const *fields;
} goal_structs[] = {
	{ "inputDiff", diff_fields }, { "outputDiff", diff_fields }, { "customTimeouts", timeouts_fields },
};

/* The levels of a plan the pulumi CLI decodes into Go structs: there Go
 * matches names case-insensitively, so two spellings of a name, or one
 * spelling a case-sensitive read would miss ("Steps"), are refused. */
static int plan_structs_distinct(const cJSON *doc, struct err *e)
{
	const cJSON *rp = cJSON_GetObjectItemCaseSensitive(doc, "resourcePlans"), *r;
	char where[400];

	if (json_struct_keys(doc, plan_fields, "the plan", e) < 0)
		return -1;
	if (!cJSON_IsObject(rp))
		return err_set(e, ERR_REFUSED, "the plan has no object \"resourcePlans\""), -1;
	cJSON_ArrayForEach(r, rp) {
		const cJSON *goal = cJSON_GetObjectItemCaseSensitive(r, "goal");
		snprintf(where, sizeof(where), "the plan's resource %.300s", r->string);
		if (!cJSON_IsObject(r))
			return err_set(e, ERR_REFUSED, "%s is no object", where), -1;
		if (json_struct_keys(r, resource_fields, where, e) < 0)
			return -1;
		snprintf(where, sizeof(where), "the goal of %.300s", r->string);
		if (json_struct_keys(goal, goal_fields, where, e) < 0)
			return -1;
		for (size_t i = 0; i < sizeof(goal_structs) / sizeof(goal_structs[0]); i++) {
			snprintf(where, sizeof(where), "the goal's %s of %.300s", goal_structs[i].name, r->string);
			if (json_struct_keys(cJSON_GetObjectItemCaseSensitive(goal, goal_structs[i].name),
			    goal_structs[i].fields, where, e) < 0)
				return -1;
		}
	}
	return 0;
}

cJSON *stack_plan_parse(const char *text, size_t len, struct err *e)
{
	cJSON *doc;

	if (text == NULL)
		return err_set(e, ERR_REFUSED, "there is no plan"), NULL;
	if ((doc = json_parse_exact(text, len, "the plan", e)) == NULL)
		return NULL;
	/* Deeper than canonical() reads, a difference would not change the id. */
	if (json_tree_keys_distinct(doc, CANON_DEPTH_MAX, "the plan", e) < 0 || plan_structs_distinct(doc, e) < 0) {
		cJSON_Delete(doc);
		return NULL;
	}
	return doc;
}

int stack_plan_id(const char *text, size_t len, const char *after, char out[65], int *changes, struct err *e)
{
	cJSON *doc, *canon = NULL;
	const cJSON *rp, *r;
	EVP_MD_CTX *ctx = NULL;
	unsigned char md[32];
	unsigned int mdlen = 0;
	char *flat = NULL;
	int rc = -1;

	out[0] = '\0';
	*changes = 0;
	if ((doc = stack_plan_parse(text, len, e)) == NULL)
		return -1;
	rp = cJSON_GetObjectItemCaseSensitive(doc, "resourcePlans");
	/* Only what the plan will do: per URN its steps and goal. */
	canon = cJSON_CreateObject();
	cJSON_ArrayForEach(r, rp) {
		cJSON *g = cJSON_CreateObject();
		const cJSON *steps = cJSON_GetObjectItemCaseSensitive(r, "steps");
		if (g == NULL)
			goto done;
		cJSON_AddItemToObject(g, "steps", canonical(steps, 0));
		cJSON_AddItemToObject(g, "goal", canonical(cJSON_GetObjectItemCaseSensitive(r, "goal"), 0));
		cJSON_AddItemToObject(canon, r->string, g);
		*changes |= steps_change(steps);
	}
	{
		cJSON *sorted = canonical(canon, 0);
		cJSON_Delete(canon);
		canon = sorted;
	}
	if (canon == NULL || (flat = cJSON_PrintUnformatted(canon)) == NULL)
		goto done;
	if ((ctx = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
	    EVP_DigestUpdate(ctx, flat, strlen(flat)) != 1)
		goto done;
	/* After an applied plan the same steps are another plan: its approval
	 * was used up (an empty `after` keeps the ids of before). */
	if (after && after[0] && (EVP_DigestUpdate(ctx, "\nafter ", 7) != 1 ||
	    EVP_DigestUpdate(ctx, after, strlen(after)) != 1))
		goto done;
	if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1)
		goto done;
	/* 128 bits: short enough to type, far beyond any collision. */
	for (unsigned int i = 0; i < 16 && i < mdlen; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	rc = 0;
done:
	if (rc < 0)
		err_set(e, ERR_NOMEM, "out of memory computing the plan id");
	EVP_MD_CTX_free(ctx);
	free(flat);
	cJSON_Delete(canon);
	cJSON_Delete(doc);
	return rc;
}

/* The names of the properties a goal changes (the real plan's inputDiff;
 * the stand-in writes the same shape). */
static cJSON *changed_properties(const cJSON *goal)
{
	static const char *const kinds[] = { "adds", "updates", "deletes" };
	const cJSON *diff = cJSON_GetObjectItemCaseSensitive(goal, "inputDiff");
	cJSON *names = cJSON_CreateArray();
	int n = 0;

	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(diff, kinds[k]), *c;
		if (cJSON_IsObject(m))
			cJSON_ArrayForEach(c, m)
				if (n++ < STEP_PROPERTIES_MAX)
					cJSON_AddItemToArray(names, cJSON_CreateString(c->string));
		if (cJSON_IsArray(m))   /* deletes may be a list of names */
			cJSON_ArrayForEach(c, m)
				if (cJSON_IsString(c) && n++ < STEP_PROPERTIES_MAX)
					cJSON_AddItemToArray(names, cJSON_CreateString(c->valuestring));
	}
	return names;
}

/* Appends sep (unless buf is still empty) and the formatted text to buf, of
 * n bytes.  *len counts what was asked for, so once it reaches n the rest
 * is left out and buf keeps what fitted. */
static void __attribute__((format(printf, 5, 6)))
text_add(char *buf, size_t n, size_t *len, const char *sep, const char *fmt, ...)
{
	va_list ap;

	if (*len < n && *len > 0)
		*len += (size_t)snprintf(buf + *len, n - *len, "%s", sep);
	if (*len >= n)
		return;
	va_start(ap, fmt);
	*len += (size_t)vsnprintf(buf + *len, n - *len, fmt, ap);
	va_end(ap);
}

static void join_steps(const cJSON *steps, char *buf, size_t n)
{
	const cJSON *s;
	size_t len = 0;

	buf[0] = '\0';
	cJSON_ArrayForEach(s, steps)
		if (cJSON_IsString(s) && strcmp(s->valuestring, "same") != 0)
			text_add(buf, n, &len, ",", "%s", s->valuestring);
}

void stack_plan_summary_text(const cJSON *changes, char *buf, size_t n)
{
	const cJSON *c;
	size_t len = 0;

	buf[0] = '\0';
	cJSON_ArrayForEach(c, changes)
		if (strcmp(c->string, "same") != 0)
			text_add(buf, n, &len, ", ", "%d to %s", (int)c->valuedouble, c->string);
	if (len == 0)
		snprintf(buf, n, "no resource changes");
}

cJSON *stack_plan_steps(const char *text, int max, int *omitted)
{
	struct err e;
	cJSON *doc = text ? stack_plan_parse(text, strlen(text), &e) : NULL, *out = cJSON_CreateArray();
	const cJSON *r;
	int n = 0;

	*omitted = 0;
	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(doc, "resourcePlans")) {
		const cJSON *steps = cJSON_GetObjectItemCaseSensitive(r, "steps");
		char op[128];
		cJSON *s;
		if (!steps_change(steps))
			continue;
		if (n++ >= max) {
			(*omitted)++;
			continue;
		}
		join_steps(steps, op, sizeof(op));
		s = cJSON_CreateObject();
		cJSON_AddStringToObject(s, "op", op);
		cJSON_AddStringToObject(s, "urn", r->string ? r->string : "");
		cJSON_AddItemToObject(s, "properties",
		    changed_properties(cJSON_GetObjectItemCaseSensitive(r, "goal")));
		cJSON_AddItemToArray(out, s);
	}
	cJSON_Delete(doc);
	return out;
}

/* ------------------------------------------------------------ inputs */

static void hash_str(EVP_MD_CTX *ctx, const char *k, const char *v)
{
	EVP_DigestUpdate(ctx, k, strlen(k) + 1);
	EVP_DigestUpdate(ctx, v ? v : "", v ? strlen(v) + 1 : 1);
}

void stack_plan_inputs_digest(const struct stack_pass *p, char out[65])
{
	const cJSON *spec = cJSON_GetObjectItemCaseSensitive(p->obj, "spec");
	cJSON *copy = cJSON_Duplicate(spec, 1), *canon;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[32];
	unsigned int mdlen = 0;
	char *flat;

	out[0] = '\0';
	/* Approving is a spec change that must not make the plan a new one. */
	cJSON_DeleteItemFromObjectCaseSensitive(copy, "approvedPlan");
	cJSON_DeleteItemFromObjectCaseSensitive(copy, "continue");
	canon = canonical(copy, 0);
	flat = canon ? cJSON_PrintUnformatted(canon) : NULL;
	if (ctx && flat && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1) {
		hash_str(ctx, "spec", flat);
		hash_str(ctx, "revision", p->art.revision);
		hash_str(ctx, "digest", p->art.digest);
		for (size_t i = 0; i < p->in.n_refs; i++)
			hash_str(ctx, "ref", p->in.refs[i]);
		if (EVP_DigestFinal_ex(ctx, md, &mdlen) == 1)
			for (unsigned int i = 0; i < mdlen && i < 32; i++)
				snprintf(out + 2 * i, 3, "%02x", md[i]);
	}
	EVP_MD_CTX_free(ctx);
	free(flat);
	cJSON_Delete(canon);
	cJSON_Delete(copy);
}

/* status.approval.appliedPlan as this pass leaves it: the plan applied
 * last, which every new plan id includes (stack_plan_id). */
const char *stack_approval_applied(const struct stack_pass *p)
{
	const char *v = p->safety.approval ? kube_obj_str(p->safety.approval, "appliedPlan") :
	    stack_status_str(p, "approval.appliedPlan");

	return v && strlen(v) == 32 && strspn(v, "0123456789abcdef") == 32 ? v : NULL;
}
