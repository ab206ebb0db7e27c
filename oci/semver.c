/*
 * semver.c - semantic versions and ranges, to pick a tag the way Flux's
 * OCIRepository `ref.semver` does (Masterminds/semver syntax).
 *
 * A range is alternatives joined by "||"; each alternative is comparators
 * joined by spaces or commas, all of which must hold.  Shorthands are
 * expanded into plain comparators at parse time:
 *   1.2.3 / =1.2.3   exactly        1.2 / 1.2.x   >=1.2.0 <1.3.0
 *   ~1.2.3           >=1.2.3 <1.3.0 ~1            >=1.0.0 <2.0.0
 *   ^1.2.3           >=1.2.3 <2.0.0 ^0.2.3        >=0.2.3 <0.3.0
 *   A - B            >=A <=B        * / x         anything
 * Pre-release versions only match an alternative that names a pre-release
 * in one of its comparators (so "^1" never picks "1.3.0-rc.1").
 */
#include "oci/oci.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUPS 32
#define MAX_CMPS 64

enum cmp_op { OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE };

struct comparator {
	enum cmp_op op;
	struct oci_semver v;
};

struct group {
	struct comparator c[MAX_CMPS];
	size_t n;
	int has_pre;
};

struct oci_semver_range {
	struct group *groups;
	size_t n;
};

/* A version as written in a range: up to three numbers, then wildcards. */
struct partial {
	int nparts;               /* numbers given before the first wildcard/end */
	uint64_t v[3];
	char pre[128];
};

static int parse_number(const char **pp, uint64_t *out)
{
	const char *p = *pp;
	uint64_t v = 0;
	int digits = 0;

	while (isdigit((unsigned char)*p)) {
		if (++digits > 18)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
		p++;
	}
	if (digits == 0)
		return -1;
	*out = v;
	*pp = p;
	return 0;
}

static int parse_pre_build(const char *p, char *pre, size_t prelen)
{
	size_t n = 0;

	pre[0] = '\0';
	if (*p == '-') {
		p++;
		const char *start = p;
		while (isalnum((unsigned char)*p) || *p == '-' || *p == '.')
			p++;
		n = (size_t)(p - start);
		if (n == 0 || n >= prelen || start[0] == '.' || p[-1] == '.' ||
		    memmem(start, n, "..", 2) != NULL)
			return -1;
		memcpy(pre, start, n);
		pre[n] = '\0';
	}
	if (*p == '+') {
		p++;
		const char *start = p;
		while (isalnum((unsigned char)*p) || *p == '-' || *p == '.')
			p++;
		if (p == start)
			return -1;
	}
	return *p == '\0' ? 0 : -1;
}

int oci_semver_parse(const char *text, struct oci_semver *out)
{
	const char *p = text;
	uint64_t v[3] = { 0, 0, 0 };

	memset(out, 0, sizeof(*out));
	if (*p == 'v' || *p == 'V')
		p++;
	for (int i = 0; i < 3; i++) {
		if (parse_number(&p, &v[i]) < 0)
			return -1;
		if (*p != '.')
			break;
		if (i == 2)
			return -1;
		p++;
	}
	if (parse_pre_build(p, out->pre, sizeof(out->pre)) < 0)
		return -1;
	out->major = v[0];
	out->minor = v[1];
	out->patch = v[2];
	return 0;
}

static int all_digits(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return 0;
	return 1;
}

/* Semver 2.0 §11 pre-release precedence. */
static int cmp_pre(const char *a, const char *b)
{
	if (*a == '\0' || *b == '\0')
		return (*a == '\0') - (*b == '\0');
	for (;;) {
		size_t na = strcspn(a, "."), nb = strcspn(b, ".");
		int da = all_digits(a, na), db = all_digits(b, nb);
		int c;

		if (da && db) {
			/* strip leading zeros, then longer means bigger */
			while (na > 1 && *a == '0') { a++; na--; }
			while (nb > 1 && *b == '0') { b++; nb--; }
			c = na != nb ? (na < nb ? -1 : 1) : strncmp(a, b, na);
		} else if (da != db) {
			c = da ? -1 : 1;
		} else {
			c = strncmp(a, b, na < nb ? na : nb);
			if (c == 0 && na != nb)
				c = na < nb ? -1 : 1;
		}
		if (c != 0)
			return c < 0 ? -1 : 1;
		a += na;
		b += nb;
		if (*a == '\0' || *b == '\0')
			return (*a != '\0') - (*b != '\0');
		a++;
		b++;
	}
}

int oci_semver_cmp(const struct oci_semver *a, const struct oci_semver *b)
{
	if (a->major != b->major)
		return a->major < b->major ? -1 : 1;
	if (a->minor != b->minor)
		return a->minor < b->minor ? -1 : 1;
	if (a->patch != b->patch)
		return a->patch < b->patch ? -1 : 1;
	return cmp_pre(a->pre, b->pre);
}

/* ---------------- ranges ---------------- */

static int is_wild(const char *p)
{
	return *p == 'x' || *p == 'X' || *p == '*';
}

static int parse_partial(const char *text, struct partial *out)
{
	const char *p = text;

	memset(out, 0, sizeof(*out));
	if (*p == 'v' || *p == 'V')
		p++;
	for (int i = 0; i < 3; i++) {
		if (is_wild(p)) {
			p++;
		} else {
			if (parse_number(&p, &out->v[i]) < 0)
				return -1;
			if (out->nparts == i)
				out->nparts = i + 1;
		}
		if (*p != '.')
			break;
		if (i == 2)
			return -1;
		p++;
	}
	if (parse_pre_build(p, out->pre, sizeof(out->pre)) < 0)
		return -1;
	if (out->pre[0] != '\0' && out->nparts < 3)
		return -1;
	return 0;
}

static struct oci_semver ver(uint64_t a, uint64_t b, uint64_t c, const char *pre)
{
	struct oci_semver v = { .major = a, .minor = b, .patch = c };

	if (pre != NULL)
		snprintf(v.pre, sizeof(v.pre), "%s", pre);
	return v;
}

static int add(struct group *g, enum cmp_op op, struct oci_semver v)
{
	if (g->n >= MAX_CMPS)
		return -1;
	g->c[g->n].op = op;
	g->c[g->n].v = v;
	g->n++;
	if (v.pre[0] != '\0')
		g->has_pre = 1;
	return 0;
}

static struct oci_semver lower_of(const struct partial *p)
{
	return ver(p->v[0], p->nparts > 1 ? p->v[1] : 0, p->nparts > 2 ? p->v[2] : 0,
	    p->nparts == 3 ? p->pre : NULL);
}

/* The first version above everything the partial covers ("1.2" -> 1.3.0). */
static struct oci_semver upper_of(const struct partial *p)
{
	if (p->nparts == 1)
		return ver(p->v[0] + 1, 0, 0, NULL);
	return ver(p->v[0], p->v[1] + 1, 0, NULL);
}

/* Expands one comparator (op text + partial) into plain ones. */
static int expand(struct group *g, const char *op, const struct partial *p)
{
	int n = p->nparts;
	struct oci_semver lo = lower_of(p);

	if (strcmp(op, "^") == 0) {
		if (n == 0)
			return add(g, OP_GE, ver(0, 0, 0, NULL));
		if (p->v[0] > 0 || n == 1)
			return add(g, OP_GE, lo) < 0 ? -1 : add(g, OP_LT, ver(p->v[0] + 1, 0, 0, NULL));
		if (p->v[1] > 0 || n == 2)
			return add(g, OP_GE, lo) < 0 ? -1 : add(g, OP_LT, ver(0, p->v[1] + 1, 0, NULL));
		return add(g, OP_GE, lo) < 0 ? -1 : add(g, OP_LT, ver(0, 0, p->v[2] + 1, NULL));
	}
	if (strcmp(op, "~") == 0 || strcmp(op, "~>") == 0) {
		if (n == 0)
			return add(g, OP_GE, ver(0, 0, 0, NULL));
		if (n == 1)
			return add(g, OP_GE, lo) < 0 ? -1 : add(g, OP_LT, ver(p->v[0] + 1, 0, 0, NULL));
		return add(g, OP_GE, lo) < 0 ? -1 : add(g, OP_LT, ver(p->v[0], p->v[1] + 1, 0, NULL));
	}
	if (n == 0) {
		/* "*", ">=*": anything; "<*", "!=*" and friends: nothing. */
		if (*op == '\0' || strcmp(op, "=") == 0 || strcmp(op, ">=") == 0 || strcmp(op, "<=") == 0)
			return add(g, OP_GE, ver(0, 0, 0, NULL));
		return add(g, OP_LT, ver(0, 0, 0, NULL));
	}
	if (*op == '\0' || strcmp(op, "=") == 0) {
		if (n == 3)
			return add(g, OP_EQ, lo);
		return add(g, OP_GE, lo) < 0 ? -1 : add(g, OP_LT, upper_of(p));
	}
	if (strcmp(op, "!=") == 0)
		return add(g, OP_NE, lo);
	if (strcmp(op, ">") == 0)
		return n == 3 ? add(g, OP_GT, lo) : add(g, OP_GE, upper_of(p));
	if (strcmp(op, ">=") == 0)
		return add(g, OP_GE, lo);
	if (strcmp(op, "<") == 0)
		return add(g, OP_LT, lo);
	if (strcmp(op, "<=") == 0)
		return n == 3 ? add(g, OP_LE, lo) : add(g, OP_LT, upper_of(p));
	return -1;
}

static size_t op_len(const char *s)
{
	static const char *const ops[] = { ">=", "<=", "!=", "~>", "=>", "=<", ">", "<", "=", "~", "^" };

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (strncmp(s, ops[i], strlen(ops[i])) == 0)
			return strlen(ops[i]);
	return 0;
}

/* Splits an alternative into tokens (spaces/commas); an operator standing
 * alone is glued to the version after it (">= 1.2"). */
static int tokenize(char *s, char **tok, size_t max, size_t *ntok)
{
	size_t n = 0;
	char *save = NULL;

	for (char *t = strtok_r(s, " \t,", &save); t != NULL; t = strtok_r(NULL, " \t,", &save)) {
		if (n >= max)
			return -1;
		tok[n++] = t;
	}
	*ntok = n;
	return 0;
}

static int parse_group(char *text, struct group *g)
{
	char *tok[MAX_CMPS * 2];
	size_t n, i;

	if (tokenize(text, tok, sizeof(tok) / sizeof(tok[0]), &n) < 0 || n == 0)
		return -1;
	/* Hyphen range: "A - B". */
	if (n == 3 && strcmp(tok[1], "-") == 0) {
		struct partial a, b;
		if (parse_partial(tok[0], &a) < 0 || parse_partial(tok[2], &b) < 0)
			return -1;
		if (add(g, OP_GE, lower_of(&a)) < 0)
			return -1;
		if (b.nparts == 0)
			return 0;
		return b.nparts == 3 ? add(g, OP_LE, lower_of(&b)) : add(g, OP_LT, upper_of(&b));
	}
	for (i = 0; i < n; i++) {
		char opbuf[3] = "";
		const char *vtext = tok[i];
		size_t ol = op_len(tok[i]);
		struct partial p;

		if (ol > 0) {
			memcpy(opbuf, tok[i], ol);
			opbuf[ol] = '\0';
			vtext = tok[i] + ol;
			if (*vtext == '\0') {
				if (i + 1 >= n)
					return -1;
				vtext = tok[++i];
			}
			/* "=>" and "=<" are accepted spellings of ">=" and "<=". */
			if (strcmp(opbuf, "=>") == 0)
				strcpy(opbuf, ">=");
			else if (strcmp(opbuf, "=<") == 0)
				strcpy(opbuf, "<=");
		}
		if (parse_partial(vtext, &p) < 0 || expand(g, opbuf, &p) < 0)
			return -1;
	}
	return 0;
}

struct oci_semver_range *oci_semver_range_parse(const char *text, struct err *e)
{
	struct oci_semver_range *r = calloc(1, sizeof(*r));
	char *copy = text ? strdup(text) : NULL;
	char *p;

	if (r == NULL || copy == NULL) {
		free(r);
		free(copy);
		err_set(e, text ? ERR_NOMEM : ERR_INVALID, text ? "out of memory" : "semver range: empty");
		return NULL;
	}
	r->groups = calloc(MAX_GROUPS, sizeof(*r->groups));
	if (r->groups == NULL)
		goto bad;
	p = copy;
	for (;;) {
		char *bar = strstr(p, "||");
		if (bar != NULL)
			*bar = '\0';
		if (r->n >= MAX_GROUPS || parse_group(p, &r->groups[r->n]) < 0)
			goto bad;
		r->n++;
		if (bar == NULL)
			break;
		p = bar + 2;
	}
	free(copy);
	return r;
bad:
	free(copy);
	oci_semver_range_free(r);
	err_set(e, ERR_INVALID, "invalid semver range \"%.200s\" (examples: \">=1.2.0 <2.0.0\", "
	    "\"~1.2\", \"^1\", \"1.x\")", text);
	return NULL;
}

void oci_semver_range_free(struct oci_semver_range *r)
{
	if (r == NULL)
		return;
	free(r->groups);
	free(r);
}

static int cmp_holds(const struct comparator *c, const struct oci_semver *v)
{
	int d = oci_semver_cmp(v, &c->v);

	switch (c->op) {
	case OP_EQ: return d == 0;
	case OP_NE: return d != 0;
	case OP_GT: return d > 0;
	case OP_GE: return d >= 0;
	case OP_LT: return d < 0;
	case OP_LE: return d <= 0;
	}
	return 0;
}

int oci_semver_range_match(const struct oci_semver_range *r, const struct oci_semver *v)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct group *g = &r->groups[i];
		size_t j;

		if (v->pre[0] != '\0' && !g->has_pre)
			continue;
		for (j = 0; j < g->n && cmp_holds(&g->c[j], v); j++)
			;
		if (j == g->n)
			return 1;
	}
	return 0;
}

const char *oci_semver_select(const struct oci_semver_range *r, char *const *tags, size_t ntags)
{
	const char *best = NULL;
	struct oci_semver bv;

	for (size_t i = 0; i < ntags; i++) {
		struct oci_semver v;
		if (oci_semver_parse(tags[i], &v) < 0 || !oci_semver_range_match(r, &v))
			continue;
		/* Ties ("1.2" vs "v1.2.0"): the first listed wins, deterministically. */
		if (best == NULL || oci_semver_cmp(&v, &bv) > 0) {
			best = tags[i];
			bv = v;
		}
	}
	return best;
}
