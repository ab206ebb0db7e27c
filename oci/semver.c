/*
 * semver.c - semantic versions and ranges, to pick a tag exactly as Flux's
 * OCIRepository `ref.semver` does.
 *
 * source-controller parses each tag with fluxcd/pkg/version (at least two
 * dots, then Masterminds/semver's lenient parse), keeps the tags a
 * Masterminds/semver v3 constraint checks, and takes the highest.  This file
 * follows those rules, quirks included, because a user moving from an
 * OCIRepository must get the same tag; tests/e2e/test_semver_oracle.py
 * compares it with the real libraries on a large table.  In short:
 *
 *   - A range is alternatives joined by "||" (at most 32, 512 bytes in all);
 *     an alternative is comparators separated by spaces or a comma, all of
 *     which must hold.  "A - B" anywhere is first rewritten to ">= A, <= B".
 *   - A comparator is an operator (=, !=, >, <, >=, <=, =>, =<, ~, ~>, ^ or
 *     none) and a version whose numbers may be wildcards (x, X, *) or missing:
 *     the first wildcard or missing number makes it "dirty" and the numbers
 *     after it are ignored ("1.x.3" is "1.x").  Each operator then has its own
 *     rule for dirty versions (see the check_* functions), not an expansion
 *     into plain comparators: "!=4.1" excludes all of 4.1.x, "<=1.4" admits
 *     1.4.9, "^1.2.3-alpha" stays below 2.0.0-0.
 *   - A pre-release version matches an alternative only if one of that
 *     alternative's comparators names a pre-release ("*-0", ">=1-0").
 *   - Among equal versions ("v1.2.3", "1.2.3+b") the first tag listed wins.
 *
 * Versions keep pointers into the text they were parsed from (no copies, no
 * fixed buffers): a range owns its text, a tag's version lives as long as the
 * caller's tag string.
 */
#include "oci/oci.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

#define MAX_RANGE_LEN 512   /* Masterminds' MaxConstraintLen */
#define MAX_GROUPS 32       /* MaxConstraintGroups */
#define MAX_VERSION_LEN 256 /* MaxVersionLen */

/* ---------------- versions ---------------- */

/* Go's strconv.ParseUint(s, 10, 64): digits only (leading zeros fine), no overflow. */
static int parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int is_ident_char(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
}

/* Go regexp's \s: only these five, not \v. */
static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r';
}

static size_t span(const char *p, int (*in_class)(char))
{
	size_t n = 0;

	while (p[n] != '\0' && in_class(p[n]))
		n++;
	return n;
}

/* IDENT ("." IDENT)*, as long as possible; 0 when p does not start one. */
static size_t span_dotted(const char *p)
{
	size_t n = span(p, is_ident_char), more;

	while (n > 0 && p[n] == '.' && (more = span(p + n + 1, is_ident_char)) > 0)
		n += 1 + more;
	return n;
}

/* Masterminds' validatePrerelease: numeric identifiers have no leading zero
 * (the grammar already guarantees non-empty identifiers of allowed chars). */
static int valid_prerelease(const char *pre, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t len = 0;
		int numeric = 1;
		for (; i + len < n && pre[i + len] != '.'; len++)
			numeric = numeric && is_digit(pre[i + len]);
		if (numeric && len > 1 && pre[i] == '0')
			return -1;
		i += len + 1;
	}
	return 0;
}

/*
 * Masterminds' NewVersion (its lenient "coerce" form): optional "v", one to
 * three numbers, "-pre", "+build"; the whole of s[0..n).  Missing numbers
 * are 0.
 */
static int parse_lenient(const char *s, size_t n, struct oci_semver *out)
{
	const char *p = s, *end = s + n;
	uint64_t num[3] = { 0, 0, 0 };

	memset(out, 0, sizeof(*out));
	if (n > MAX_VERSION_LEN)
		return -1;
	if (p < end && *p == 'v')
		p++;
	for (int i = 0; i < 3; i++) {
		size_t d;
		if (i > 0) {
			if (p >= end || *p != '.' || !is_digit(p[1]))
				break;
			p++;
		}
		d = span(p, is_digit);
		if (d == 0 || p + d > end || parse_u64(p, d, &num[i]) < 0)
			return -1;
		p += d;
	}
	if (p < end && *p == '-') {
		size_t d = span_dotted(p + 1);
		if (d == 0 || p + 1 + d > end || valid_prerelease(p + 1, d) < 0)
			return -1;
		out->pre = p + 1;
		out->npre = d;
		p += 1 + d;
	}
	if (p < end && *p == '+') {
		size_t d = span_dotted(p + 1);
		if (d == 0)
			return -1;
		p += 1 + d;
	}
	if (p != end)
		return -1;
	out->major = num[0];
	out->minor = num[1];
	out->patch = num[2];
	return 0;
}

int oci_semver_parse(const char *text, struct oci_semver *out)
{
	const char *dot = strchr(text, '.');

	/* fluxcd/pkg/version: fewer than three dot-separated parts is not a
	 * version, so "1.26" and "v2" are not, while "1.2-rc.1" is. */
	if (dot == NULL || strchr(dot + 1, '.') == NULL) {
		memset(out, 0, sizeof(*out));
		return -1;
	}
	return parse_lenient(text, strlen(text), out);
}

/* One pre-release identifier against another; an absent one ("") is lowest.
 * Numeric means digits that fit in 64 bits; anything else compares as bytes. */
static int cmp_identifier(const char *a, size_t na, const char *b, size_t nb)
{
	uint64_t va, vb;
	int anum, bnum, c;

	if (na == nb && memcmp(a, b, na) == 0)
		return 0;
	if (na == 0 || nb == 0)
		return na == 0 ? -1 : 1;
	anum = parse_u64(a, na, &va) == 0;
	bnum = parse_u64(b, nb, &vb) == 0;
	if (anum && bnum)
		return va > vb ? 1 : -1;
	if (anum != bnum)
		return anum ? -1 : 1;
	c = memcmp(a, b, na < nb ? na : nb);
	if (c == 0)
		return na < nb ? -1 : 1;
	return c < 0 ? -1 : 1;
}

static size_t identifier_len(const char *p, size_t n)
{
	const char *dot = memchr(p, '.', n);

	return dot != NULL ? (size_t)(dot - p) : n;
}

static int cmp_prerelease(const char *a, size_t na, const char *b, size_t nb)
{
	for (;;) {
		size_t la = identifier_len(a, na), lb = identifier_len(b, nb);
		int c = cmp_identifier(a, la, b, lb);

		if (c != 0)
			return c;
		if (la >= na && lb >= nb)
			return 0;
		/* step past the identifier and its dot; an exhausted side stays empty */
		a += la < na ? la + 1 : la;
		na -= la < na ? la + 1 : la;
		b += lb < nb ? lb + 1 : lb;
		nb -= lb < nb ? lb + 1 : lb;
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
	if (a->npre == 0 || b->npre == 0)
		return (a->npre == 0) - (b->npre == 0);
	return cmp_prerelease(a->pre, a->npre, b->pre, b->npre);
}

/* ---------------- ranges: syntax ---------------- */

/* A version as written in a range: Masterminds' constraint-version pattern,
 * whose numbers are runs of digits, x, X, '*' (and '|', which its pattern
 * lets in and its version parser then refuses). */
struct written {
	const char *text;
	size_t len;
	const char *num[3];
	size_t numlen[3];
	int nnums;
	const char *pre;        /* after '-', NULL when none */
	size_t npre;
};

static int is_number_char(char c)
{
	return is_digit(c) || c == 'x' || c == 'X' || c == '*' || c == '|';
}

/* The longest written version at p; returns its length, 0 if there is none. */
static size_t scan_written(const char *p, struct written *w)
{
	const char *q = p;

	memset(w, 0, sizeof(*w));
	if (*q == 'v' && is_number_char(q[1]))
		q++;
	while (w->nnums < 3) {
		size_t d;
		if (w->nnums > 0) {
			if (*q != '.' || !is_number_char(q[1]))
				break;
			q++;
		}
		d = span(q, is_number_char);
		if (d == 0)
			return 0;
		w->num[w->nnums] = q;
		w->numlen[w->nnums++] = d;
		q += d;
	}
	if (*q == '-' && span_dotted(q + 1) > 0) {
		w->pre = q + 1;
		w->npre = span_dotted(q + 1);
		q += 1 + w->npre;
	}
	if (*q == '+' && span_dotted(q + 1) > 0)
		q += 1 + span_dotted(q + 1);
	w->text = p;
	w->len = (size_t)(q - p);
	return w->len;
}

/* A hyphen range "A - B" (with the spaces around it) starting exactly at p. */
struct hyphen {
	size_t start, end;                  /* of the whole match */
	struct written from, to;
};

static int hyphen_at(const char *s, size_t p, struct hyphen *h)
{
	size_t q = p + span(s + p, is_space), ws;

	if (scan_written(s + q, &h->from) == 0)
		return 0;
	q += h->from.len;
	if ((ws = span(s + q, is_space)) == 0 || s[q + ws] != '-')
		return 0;
	q += ws + 1;
	if ((ws = span(s + q, is_space)) == 0)
		return 0;
	q += ws;
	if (scan_written(s + q, &h->to) == 0)
		return 0;
	q += h->to.len;
	q += span(s + q, is_space);
	h->start = p;
	h->end = q;
	return 1;
}

/* Replaces the first occurrence of needle in *s (Go's strings.Replace(.., 1)).
 * Returns -1 when out of memory. */
static int replace_first(char **s, const char *needle, size_t nneedle, const char *with)
{
	char *at = memmem(*s, strlen(*s), needle, nneedle), *out;
	size_t head, nwith = strlen(with);

	if (at == NULL)
		return 0;
	head = (size_t)(at - *s);
	out = malloc(strlen(*s) - nneedle + nwith + 1);
	if (out == NULL)
		return -1;
	memcpy(out, *s, head);
	memcpy(out + head, with, nwith);
	strcpy(out + head + nwith, at + nneedle);
	free(*s);
	*s = out;
	return 0;
}

/*
 * Masterminds' rewriteRange: every "A - B" found in the original text
 * (leftmost, not overlapping) becomes ">= A, <= B " in the rewritten one,
 * each replacing the first occurrence of its text there.  Returns a malloc'd
 * string the caller frees, NULL when out of memory.
 */
static char *rewrite_hyphens(const char *text)
{
	size_t len = strlen(text), pos = 0;
	char *out = strdup(text);

	while (out != NULL && pos < len) {
		struct hyphen h;
		size_t p = pos;
		char *with;
		int rc;

		while (p < len && !hyphen_at(text, p, &h))
			p++;
		if (p >= len)
			break;
		with = malloc(h.from.len + h.to.len + sizeof(">= , <=  "));
		if (with == NULL)
			goto nomem;
		sprintf(with, ">= %.*s, <= %.*s ", (int)h.from.len, h.from.text, (int)h.to.len, h.to.text);
		rc = replace_first(&out, text + h.start, h.end - h.start, with);
		free(with);
		if (rc < 0)
			goto nomem;
		pos = h.end;
	}
	return out;
nomem:
	free(out);
	return NULL;
}

/* ---------------- ranges: comparators ---------------- */

enum cmp_op { OP_EQ_OR_TILDE, OP_NE, OP_GT, OP_LT, OP_GE, OP_LE, OP_TILDE, OP_CARET };

struct comparator {
	enum cmp_op op;
	struct oci_semver v;        /* wildcards and missing numbers as 0 */
	int dirty;                  /* some number is a wildcard or missing */
	int minor_dirty;            /* ... from the minor on ("1", "1.x") */
	int patch_dirty;            /* ... only the patch ("1.2", "1.2.x") */
};

struct group {
	size_t first, n;            /* into the range's comparators */
	int has_pre;                /* a comparator names a pre-release */
};

struct oci_semver_range {
	char *text;                 /* the rewritten range, split at "||"; versions point into it */
	struct comparator *cmps;
	size_t ncmps, cap;
	struct group groups[MAX_GROUPS];
	size_t ngroups;
};

static const struct { const char *text; enum cmp_op op; } operators[] = {
	{ "", OP_EQ_OR_TILDE }, { "=", OP_EQ_OR_TILDE }, { "!=", OP_NE }, { ">", OP_GT },
	{ "<", OP_LT }, { ">=", OP_GE }, { "=>", OP_GE }, { "<=", OP_LE }, { "=<", OP_LE },
	{ "~", OP_TILDE }, { "~>", OP_TILDE }, { "^", OP_CARET },
};

static int is_operator_char(char c)
{
	return c != '\0' && strchr("=!<>~^", c) != NULL;
}

/* The operator spelled by exactly s[0..n), or -1. */
static int find_operator(const char *s, size_t n, enum cmp_op *op)
{
	for (size_t i = 0; i < sizeof(operators) / sizeof(operators[0]); i++)
		if (strlen(operators[i].text) == n && strncmp(operators[i].text, s, n) == 0) {
			*op = operators[i].op;
			return 0;
		}
	return -1;
}

static int is_wildcard(const char *s, size_t n)
{
	return n == 1 && (*s == 'x' || *s == 'X' || *s == '*');
}

/*
 * The comparator's version, as Masterminds' parseConstraint builds it: the
 * first wildcard or missing number makes it dirty, and what follows is
 * dropped ("x.1.2" is "*"; the build part goes too).  The version string it
 * would build must then pass the lenient parser: numbers of digits within 64
 * bits, a valid pre-release, 256 bytes at most.
 */
static int comparator_version(const struct written *w, struct comparator *c)
{
	size_t numbers = 0, length;
	uint64_t *fields[3] = { &c->v.major, &c->v.minor, &c->v.patch };

	memset(&c->v, 0, sizeof(c->v));
	c->dirty = c->minor_dirty = c->patch_dirty = 0;
	if (is_wildcard(w->num[0], w->numlen[0])) {
		c->dirty = 1;
		length = 5;                          /* "0.0.0" */
	} else if (w->nnums < 2 || is_wildcard(w->num[1], w->numlen[1])) {
		c->dirty = c->minor_dirty = 1;
		numbers = 1;
		length = w->numlen[0] + 4;           /* "N.0.0" */
	} else if (w->nnums < 3 || is_wildcard(w->num[2], w->numlen[2])) {
		c->dirty = c->patch_dirty = 1;
		numbers = 2;
		length = w->numlen[0] + w->numlen[1] + 3;
	} else {
		numbers = 3;
		length = w->len;                     /* the whole text, "v" and build included */
	}
	if (numbers < 3 && w->pre != NULL)
		length += 1 + w->npre;
	if (length > MAX_VERSION_LEN)
		return -1;
	for (size_t i = 0; i < numbers; i++)
		if (parse_u64(w->num[i], w->numlen[i], fields[i]) < 0)
			return -1;
	if (w->pre != NULL && valid_prerelease(w->pre, w->npre) < 0)
		return -1;
	c->v.pre = w->pre;
	c->v.npre = w->npre;
	return 0;
}

static int add_comparator(struct oci_semver_range *r, const struct comparator *c)
{
	if (r->ncmps == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 8;
		struct comparator *bigger = realloc(r->cmps, cap * sizeof(*bigger));
		if (bigger == NULL)
			return -1;
		r->cmps = bigger;
		r->cap = cap;
	}
	r->cmps[r->ncmps++] = *c;
	return 0;
}

/*
 * One alternative s (NUL-terminated): comparators separated by whitespace
 * or a comma (with optional whitespace after it), each an operator, optional
 * whitespace, a written version.  Fills e on a syntax error.
 */
static int parse_group(struct oci_semver_range *r, const char *s, struct group *g, struct err *e)
{
	size_t p = span(s, is_space);

	g->first = r->ncmps;
	g->n = 0;
	g->has_pre = 0;
	for (;;) {
		size_t opstart = p, oplen, vlen, ws;
		struct written w;
		struct comparator c;

		while (is_operator_char(s[p]))
			p++;
		oplen = p - opstart;
		if (find_operator(s + opstart, oplen, &c.op) < 0)
			return err_set(e, ERR_INVALID, "\"%.*s\" is not an operator", (int)oplen, s + opstart);
		p += span(s + p, is_space);
		if ((vlen = scan_written(s + p, &w)) == 0)
			return err_set(e, ERR_INVALID, "a version is expected at \"%.40s\"", s + p);
		if (comparator_version(&w, &c) < 0)
			return err_set(e, ERR_INVALID, "\"%.*s\" is not a valid version", (int)vlen, s + p);
		if (add_comparator(r, &c) < 0)
			return err_set(e, ERR_NOMEM, "out of memory");
		g->n++;
		g->has_pre |= c.v.npre > 0;
		p += vlen;
		ws = span(s + p, is_space);
		p += ws;
		if (s[p] == '\0')
			return 0;
		if (s[p] == ',')
			p += 1 + span(s + p + 1, is_space);
		else if (ws == 0)
			return err_set(e, ERR_INVALID, "unexpected \"%.20s\" after a version", s + p);
	}
}

/* Control characters as '?', so a message stays on one line. */
static void printable(const char *in, char *out, size_t size)
{
	size_t i = 0;

	for (; in[i] != '\0' && i + 1 < size; i++)
		out[i] = (unsigned char)in[i] < 0x20 || in[i] == 0x7f ? '?' : in[i];
	out[i] = '\0';
}

static void range_error(struct err *e, const char *text)
{
	char shown[201];

	printable(text, shown, sizeof(shown));
	err_prefix(e, "invalid semver range \"%s\"", shown);
}

struct oci_semver_range *oci_semver_range_parse(const char *text, struct err *e)
{
	struct oci_semver_range *r;
	char *p;

	if (text == NULL || strlen(text) > MAX_RANGE_LEN) {
		err_set(e, ERR_INVALID, text ? "longer than %d bytes" : "no range given", MAX_RANGE_LEN);
		range_error(e, text ? text : "");
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (r == NULL || (r->text = rewrite_hyphens(text)) == NULL) {
		free(r);
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	/* Split at each "||", left to right, as Go's strings.Split does. */
	for (p = r->text;; p += 2) {
		char *bar = strstr(p, "||");

		if (bar != NULL)
			bar[0] = bar[1] = '\0';
		if (r->ngroups == MAX_GROUPS) {
			err_set(e, ERR_INVALID, "more than %d alternatives joined by ||", MAX_GROUPS);
			goto bad;
		}
		if (parse_group(r, p, &r->groups[r->ngroups], e) < 0)
			goto bad;
		r->ngroups++;
		if (bar == NULL)
			break;
		p = bar;
	}
	return r;
bad:
	if (e->code != ERR_NOMEM)
		range_error(e, text);
	oci_semver_range_free(r);
	return NULL;
}

void oci_semver_range_free(struct oci_semver_range *r)
{
	if (r == NULL)
		return;
	mem_free_all(r->cmps, r->text, r);
}

/* ---------------- ranges: matching (Masterminds' rules, operator by operator) ---------------- */

static int check_tilde(const struct comparator *c, const struct oci_semver *v)
{
	if (oci_semver_cmp(v, &c->v) < 0)
		return 0;
	/* "~0.0.0" (written out in full) admits everything above it */
	if (c->v.major == 0 && c->v.minor == 0 && c->v.patch == 0 && !c->minor_dirty && !c->patch_dirty)
		return 1;
	return v->major == c->v.major && (c->minor_dirty || v->minor == c->v.minor);
}

static int check_caret(const struct comparator *c, const struct oci_semver *v)
{
	if (oci_semver_cmp(v, &c->v) < 0)
		return 0;
	if (c->v.major > 0 || c->minor_dirty)
		return v->major == c->v.major;
	/* major 0: the minor must stay, and with minor 0 too the patch ("^*" is "^0.0.0") */
	if (v->major > 0)
		return 0;
	if (c->v.minor > 0 || c->patch_dirty)
		return v->minor == c->v.minor;
	return v->minor == 0 && v->patch == c->v.patch;
}

static int same_prerelease(const struct oci_semver *a, const struct oci_semver *b)
{
	if (a->npre == 0 || b->npre == 0)
		return a->npre == b->npre;
	return cmp_prerelease(a->pre, a->npre, b->pre, b->npre) == 0;
}

/* "!=" with a dirty version excludes what the x-range covers: "!=4.1" all of 4.1.x. */
static int check_not_equal(const struct comparator *c, const struct oci_semver *v)
{
	if (c->dirty) {
		if (v->major != c->v.major)
			return 1;
		if (c->minor_dirty)
			return 0;
		if (v->minor != c->v.minor)
			return 1;
		if (c->patch_dirty)
			return !same_prerelease(v, &c->v);
		if (v->patch != c->v.patch)
			return 1;
	}
	return oci_semver_cmp(v, &c->v) != 0;
}

static int check_greater(const struct comparator *c, const struct oci_semver *v)
{
	if (!c->dirty)
		return oci_semver_cmp(v, &c->v) > 0;
	if (v->major != c->v.major)
		return v->major > c->v.major;
	if (c->minor_dirty)             /* ">1" needs 2.0.0 or more */
		return 0;
	if (c->patch_dirty)             /* ">1.1" needs 1.2.0 or more */
		return v->minor > c->v.minor;
	return oci_semver_cmp(v, &c->v) > 0;
}

static int check_less_equal(const struct comparator *c, const struct oci_semver *v)
{
	if (!c->dirty)
		return oci_semver_cmp(v, &c->v) <= 0;
	if (v->major > c->v.major)
		return 0;
	return !(v->major == c->v.major && v->minor > c->v.minor && !c->minor_dirty);
}

static int comparator_holds(const struct comparator *c, const struct oci_semver *v)
{
	switch (c->op) {
	case OP_EQ_OR_TILDE:
		return c->dirty ? check_tilde(c, v) : oci_semver_cmp(v, &c->v) == 0;
	case OP_NE: return check_not_equal(c, v);
	case OP_GT: return check_greater(c, v);
	case OP_LT: return oci_semver_cmp(v, &c->v) < 0;
	case OP_GE: return oci_semver_cmp(v, &c->v) >= 0;
	case OP_LE: return check_less_equal(c, v);
	case OP_TILDE: return check_tilde(c, v);
	case OP_CARET: return check_caret(c, v);
	}
	return 0;
}

int oci_semver_range_match(const struct oci_semver_range *r, const struct oci_semver *v)
{
	for (size_t i = 0; i < r->ngroups; i++) {
		const struct group *g = &r->groups[i];
		size_t j = 0;

		if (v->npre > 0 && !g->has_pre)
			continue;
		while (j < g->n && comparator_holds(&r->cmps[g->first + j], v))
			j++;
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
		/* strictly greater: among equal versions the first listed stays */
		if (best == NULL || oci_semver_cmp(&v, &bv) > 0) {
			best = tags[i];
			bv = v;
		}
	}
	return best;
}
