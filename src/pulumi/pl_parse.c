/*
 * pl_parse.c - reading what the pulumi CLI writes: `version`, the
 * --event-log stream of EngineEvent lines, `stack output --json`,
 * `stack history --json`; and masking secret values in
 * text.  Everything here treats its input as hostile (it is fuzzed):
 * lengths are bounded, unknown shapes are skipped, nothing is trusted to be
 * NUL-terminated or well-formed.
 */
#include "pulumi/pl_internal.h"
#include "base/secret.h"
#include "base/str.h"
#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An event line longer than this is skipped: a sane CLI writes far less,
 * and the reader must not grow without bound. */
#define PL_MAX_EVENT_LINE (4u * 1024 * 1024)

int pl_parse_version(const char *s, int *major, int *minor, int *patch)
{
	int n = 0, a = 0, b = 0, c = 0;

	if (s == NULL)
		return -1;
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	if (*s == 'v' || *s == 'V')
		s++;
	if (sscanf(s, "%9d.%9d.%9d%n", &a, &b, &c, &n) != 3 || a < 0 || b < 0 || c < 0)
		return -1;
	s += n;
	if (*s != '\0' && *s != '-' && *s != '+' && *s != '\n' && *s != '\r' && *s != ' ')
		return -1;
	*major = a;
	*minor = b;
	*patch = c;
	return 0;
}

void pl_events_init(struct pl_events *ev)
{
	memset(ev, 0, sizeof(*ev));
}

void pl_events_free(struct pl_events *ev)
{
	cJSON_Delete(ev->summary.changes);
	ev->summary.changes = NULL;
	cJSON_Delete(ev->outputs);
	ev->outputs = NULL;
	free(ev->partial);
	ev->partial = NULL;
	ev->partial_len = 0;
}

static const char *str_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Copies the first non-empty line of msg, without a trailing newline. */
static void first_line(char *dst, size_t n, const char *msg)
{
	size_t len;

	while (*msg == '\n' || *msg == ' ')
		msg++;
	len = strcspn(msg, "\n");
	if (len >= n)
		len = n - 1;
	memcpy(dst, msg, len);
	dst[len] = '\0';
}

/* first_line of msg with the secrets masked first: cutting first would
 * leave the first line of a multi-line secret, or the start of a long one. */
static void first_line_masked(const struct pl_events *ev, char *dst, size_t n, const char *msg)
{
	char *masked = pl_redact(msg, ev->secrets, ev->n_secrets);

	first_line(dst, n, masked ? masked : "(message withheld: out of memory)");
	free(masked);
}

static void on_summary(struct pl_events *ev, const cJSON *s)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(s, "durationSeconds");
	const cJSON *rc = cJSON_GetObjectItemCaseSensitive(s, "resourceChanges");
	const char *res = str_field(s, "result");

	ev->summary.count++;
	ev->summary.present = 1;
	ev->summary.is_preview = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "isPreview"));
	/* A hostile or broken event log must not make the cast undefined. */
	ev->summary.duration_seconds = cJSON_IsNumber(d) && d->valuedouble >= 0 && d->valuedouble < 1e9 ?
	    (long)d->valuedouble : 0;
	snprintf(ev->summary.result, sizeof(ev->summary.result), "%s", res ? res : "");
	cJSON_Delete(ev->summary.changes);
	ev->summary.changes = NULL;
	if (cJSON_IsObject(rc)) {
		ev->summary.changes = cJSON_CreateObject();
		for (const cJSON *c = rc->child; c && ev->summary.changes; c = c->next)
			if (cJSON_IsNumber(c) && c->string)
				cJSON_AddNumberToObject(ev->summary.changes, c->string, c->valuedouble);
	}
}

/* Pulumi's marker of a secret property value (reference §2.5, §6). */
#define SECRET_SIG       "4dabf18193072939515e22adb298388d"
#define SECRET_SIG_VALUE "1b47061264138c4ac30d75fd1eb44270"

static int is_secret_value(const cJSON *v)
{
	const cJSON *sig = cJSON_GetObjectItemCaseSensitive(v, SECRET_SIG);

	return cJSON_IsObject(v) && cJSON_IsString(sig) && strcmp(sig->valuestring, SECRET_SIG_VALUE) == 0;
}

/* A copy of a property value with every secret value as "[secret]": what
 * it holds besides the signature (a ciphertext, a plaintext some CLI might
 * add) is never copied.  *secret is set when one was seen.  NULL when out
 * of memory or nested absurdly deep. */
static cJSON *mask_secret_values(const cJSON *v, int *secret, int depth)
{
	cJSON *out;

	if (depth > 64)
		return NULL;
	if (is_secret_value(v)) {
		*secret = 1;
		return cJSON_CreateString("[secret]");
	}
	if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
		return cJSON_Duplicate(v, 0);
	out = cJSON_IsObject(v) ? cJSON_CreateObject() : cJSON_CreateArray();
	for (const cJSON *c = v->child; c && out; c = c->next) {
		cJSON *m = mask_secret_values(c, secret, depth + 1);

		if (m == NULL) {
			cJSON_Delete(out);
			return NULL;
		}
		if (cJSON_IsObject(v))
			cJSON_AddItemToObject(out, c->string ? c->string : "", m);
		else
			cJSON_AddItemToArray(out, m);
	}
	return out;
}

/* The root stack's outputs event carries the stack's outputs as this
 * update registered them; the last one wins. */
static void on_root_outputs(struct pl_events *ev, const cJSON *md)
{
	const cJSON *nw = cJSON_GetObjectItemCaseSensitive(md, "new");
	const cJSON *outs = cJSON_GetObjectItemCaseSensitive(nw, "outputs");
	const char *type = str_field(md, "type");
	int secret = 0;
	cJSON *masked;

	if (type == NULL || strcmp(type, "pulumi:pulumi:Stack") != 0 || !cJSON_IsObject(outs))
		return;
	masked = mask_secret_values(outs, &secret, 0);
	if (masked == NULL)
		return;
	cJSON_Delete(ev->outputs);
	ev->outputs = masked;
	ev->has_secret_outputs = secret;
}

static void on_step(struct pl_events *ev, const cJSON *payload, int done, int failed)
{
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(payload, "metadata");
	struct pl_step st = { 0 };

	if (!cJSON_IsObject(md))
		return;
	if (done && !failed)
		on_root_outputs(ev, md);
	st.op = str_field(md, "op");
	st.urn = str_field(md, "urn");
	st.type = str_field(md, "type");
	st.done = done;
	st.failed = failed;
	st.drifted = done && str_eq(st.op, "refresh") &&
	    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(md, "diffs")) > 0;
	if (failed)
		ev->failed_steps++;
	else if (!done)
		ev->steps++;
	if (ev->progress && st.op && st.urn)
		ev->progress(ev->progress_arg, &st);
}

/* Pulumi YAML reports template errors (an unknown reference...) as error
 * diagnostics without a urn, or on the root stack, and goes on with the
 * rest of the program (observed with pulumi-yaml 1.25): those mean the
 * program is wrong, unlike an error on a resource's urn. */
static int on_stack_itself(const char *urn)
{
	return urn == NULL || urn[0] == '\0' || strstr(urn, "::pulumi:pulumi:Stack::") != NULL;
}

static void on_diagnostic(struct pl_events *ev, const cJSON *d)
{
	const char *sev = str_field(d, "severity");
	const char *msg = str_field(d, "message");

	if (sev == NULL || msg == NULL || strcmp(sev, "error") != 0)
		return;
	if (on_stack_itself(str_field(d, "urn")))
		ev->program_errors++;
	if (ev->first_error[0] == '\0')
		first_line_masked(ev, ev->first_error, sizeof(ev->first_error), msg);
}

static void on_policy(struct pl_events *ev, const cJSON *p)
{
	const char *lvl = str_field(p, "enforcementLevel");
	const char *msg = str_field(p, "message");
	const char *name = str_field(p, "policyName");

	if (lvl == NULL || strcmp(lvl, "mandatory") != 0)
		return;
	ev->policy_violations++;
	if (ev->first_policy[0] == '\0') {
		char line[200];

		first_line_masked(ev, line, sizeof(line), msg ? msg : "");
		snprintf(ev->first_policy, sizeof(ev->first_policy), "%.50s: %s", name ? name : "policy",
			 line);
	}
}

static void parse_line(struct pl_events *ev, const char *line, size_t len)
{
	cJSON *o;
	const cJSON *p;

	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (len == 0)
		return;
	o = cJSON_ParseWithLength(line, len);
	if (!cJSON_IsObject(o)) {
		ev->bad_lines++;
		cJSON_Delete(o);
		return;
	}
	ev->events++;
	if ((p = cJSON_GetObjectItemCaseSensitive(o, "summaryEvent")) && cJSON_IsObject(p))
		on_summary(ev, p);
	else if ((p = cJSON_GetObjectItemCaseSensitive(o, "resourcePreEvent")) && cJSON_IsObject(p))
		on_step(ev, p, 0, 0);
	else if ((p = cJSON_GetObjectItemCaseSensitive(o, "resOutputsEvent")) && cJSON_IsObject(p))
		on_step(ev, p, 1, 0);
	else if ((p = cJSON_GetObjectItemCaseSensitive(o, "resOpFailedEvent")) && cJSON_IsObject(p))
		on_step(ev, p, 1, 1);
	else if ((p = cJSON_GetObjectItemCaseSensitive(o, "diagnosticEvent")) && cJSON_IsObject(p))
		on_diagnostic(ev, p);
	else if ((p = cJSON_GetObjectItemCaseSensitive(o, "policyEvent")) && cJSON_IsObject(p))
		on_policy(ev, p);
	else if (cJSON_GetObjectItemCaseSensitive(o, "preludeEvent"))
		ev->saw_prelude = 1;
	else if (cJSON_GetObjectItemCaseSensitive(o, "cancelEvent"))
		ev->saw_cancel = 1;
	cJSON_Delete(o);
}

/* Keeps an incomplete line for the next feed; over-long lines are dropped
 * whole (counted as bad) rather than buffered. */
static void keep_partial(struct pl_events *ev, const char *data, size_t len)
{
	char *nb;

	if (ev->skipping)
		return;
	if (ev->partial_len + len > PL_MAX_EVENT_LINE) {
		free(ev->partial);
		ev->partial = NULL;
		ev->partial_len = 0;
		ev->skipping = 1;
		ev->bad_lines++;
		return;
	}
	nb = realloc(ev->partial, ev->partial_len + len + 1);
	if (nb == NULL) {
		ev->skipping = 1;
		return;
	}
	memcpy(nb + ev->partial_len, data, len);
	ev->partial = nb;
	ev->partial_len += len;
}

void pl_events_feed(struct pl_events *ev, const char *data, size_t len)
{
	while (len > 0) {
		const char *nl = memchr(data, '\n', len);
		size_t seg = nl ? (size_t)(nl - data) : len;

		if (nl == NULL) {
			keep_partial(ev, data, seg);
			return;
		}
		if (ev->skipping) {
			ev->skipping = 0;
		} else if (ev->partial_len > 0) {
			keep_partial(ev, data, seg);
			if (!ev->skipping)
				parse_line(ev, ev->partial, ev->partial_len);
			ev->skipping = 0;
			free(ev->partial);
			ev->partial = NULL;
			ev->partial_len = 0;
		} else {
			parse_line(ev, data, seg);
		}
		data += seg + 1;
		len -= seg + 1;
	}
}

void pl_events_finish(struct pl_events *ev)
{
	if (ev->partial_len > 0 && !ev->skipping)
		parse_line(ev, ev->partial, ev->partial_len);
	free(ev->partial);
	ev->partial = NULL;
	ev->partial_len = 0;
	ev->skipping = 0;
}

cJSON *pl_parse_outputs(const char *text)
{
	cJSON *o = text ? cJSON_Parse(text) : NULL;

	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

cJSON *pl_parse_history(const char *text, int *empty)
{
	cJSON *a = text ? cJSON_Parse(text) : NULL;
	cJSON *first = NULL;

	*empty = 0;
	if (cJSON_IsArray(a)) {
		const cJSON *f = cJSON_GetArrayItem(a, 0);

		if (f == NULL)
			*empty = 1;
		else if (cJSON_IsObject(f))
			first = cJSON_Duplicate(f, 1);
	}
	cJSON_Delete(a);
	return first;
}

/* The JSON-escaped form of s without the quotes (how the value looks
 * inside a JSON document); NULL when it equals s or on failure. */
static char *json_escaped(const char *s)
{
	cJSON *str = cJSON_CreateString(s);
	char *printed = str ? cJSON_PrintUnformatted(str) : NULL;
	char *inner = NULL;
	size_t n;

	cJSON_Delete(str);
	if (printed == NULL)
		return NULL;
	n = strlen(printed);
	if (n >= 2 && !(n - 2 == strlen(s) && memcmp(printed + 1, s, n - 2) == 0)) {
		inner = malloc(n - 1);
		if (inner) {
			memcpy(inner, printed + 1, n - 2);
			inner[n - 2] = '\0';
		}
	}
	free(printed);
	return inner;
}

/* Replaces every occurrence of needle in *s (reallocating). */
/* Marks in hit every byte of s that is inside an occurrence of needle
 * (occurrences may overlap). */
static void mark_all(const char *s, size_t len, const char *needle, unsigned char *hit)
{
	size_t nl = strlen(needle);
	const char *p = s, *end = s + len;

	if (nl == 0)
		return;
	while ((size_t)(end - p) >= nl && (p = memmem(p, (size_t)(end - p), needle, nl)) != NULL) {
		memset(hit + (p - s), 1, nl);
		p++;
	}
}

/* s with each run of marked bytes as one "[secret]" (caller frees; NULL
 * when out of memory). */
static char *mask_marked(const char *s, size_t len, const unsigned char *hit)
{
	static const char mask[] = "[secret]";
	struct strbuf b;

	strbuf_init(&b);
	for (size_t i = 0; i < len;) {
		size_t j = i;

		if (hit[i]) {
			while (j < len && hit[j])
				j++;
			strbuf_addn(&b, mask, sizeof(mask) - 1);
		} else {
			while (j < len && !hit[j])
				j++;
			strbuf_addn(&b, s + i, j - i);
		}
		i = j;
	}
	return b.buf ? strbuf_take(&b) : strdup("");
}

/* The texts masked for one set of secrets, each once (an owned vector). */
static void frag_add_len(struct pl_strv *f, const char *s, size_t len)
{
	char *copy;

	if (len == 0 || f->oom)
		return;
	for (size_t i = 0; i < f->n; i++)
		if (strlen(f->v[i]) == len && memcmp(f->v[i], s, len) == 0)
			return;
	copy = strndup(s, len);
	if (copy == NULL) {
		f->oom = 1;
		return;
	}
	pl_strv_add(f, copy);
	secret_wipe(copy, len);
	free(copy);
}

/* Each line of a multi-line text, trimmed of blanks and CR, when it is at
 * least PL_REDACT_MIN_LINE bytes long: a text cut to one line, or printed
 * with its lines re-indented, no longer holds the whole secret. */
static void frag_add_lines(struct pl_strv *f, const char *s)
{
	if (strchr(s, '\n') == NULL)
		return;
	while (*s) {
		size_t len = strcspn(s, "\n");
		const char *b = s, *e = s + len;

		while (b < e && (*b == ' ' || *b == '\t' || *b == '\r'))
			b++;
		while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			e--;
		if ((size_t)(e - b) >= PL_REDACT_MIN_LINE)
			frag_add_len(f, b, (size_t)(e - b));
		s += len;
		if (*s == '\n')
			s++;
	}
}

/* A secret that is a JSON document (a cloud key file) may be printed
 * decoded: its string leaves of at least PL_REDACT_MIN_LINE bytes, and
 * their lines (the PEM key inside), are masked too. */
static void frag_add_json_leaves(struct pl_strv *f, const cJSON *v, int depth)
{
	if (depth > 32)
		return;
	if (cJSON_IsString(v) && strlen(v->valuestring) >= PL_REDACT_MIN_LINE) {
		frag_add_len(f, v->valuestring, strlen(v->valuestring));
		frag_add_lines(f, v->valuestring);
	}
	for (const cJSON *c = (cJSON_IsObject(v) || cJSON_IsArray(v)) ? v->child : NULL; c; c = c->next)
		frag_add_json_leaves(f, c, depth + 1);
}

static void frag_add_secret(struct pl_strv *f, const char *secret)
{
	const char *p = secret;
	cJSON *j;

	frag_add_len(f, secret, strlen(secret));
	frag_add_lines(f, secret);
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if ((*p == '{' || *p == '[') && (j = cJSON_Parse(p)) != NULL) {
		frag_add_json_leaves(f, j, 0);
		cJSON_Delete(j);
	}
}

static void frag_free(struct pl_strv *f)
{
	for (size_t i = 0; i < f->n; i++)
		secret_wipe(f->v[i], strlen(f->v[i]));
	pl_strv_free(f);
}

char *pl_redact(const char *s, const char *const *secrets, size_t n)
{
	size_t len = strlen(s ? s : "");
	struct pl_strv f = { 0 };
	unsigned char *hit;
	char *out;

	if (n == 0 || len == 0)
		return strdup(s ? s : "");
	for (size_t i = 0; i < n; i++)
		if (secrets[i] && secrets[i][0])
			frag_add_secret(&f, secrets[i]);
	/* Every occurrence of every fragment is found in the text as it was,
	 * and their union masked: masking one after another would let a longer
	 * secret's mask swallow part of a shorter, overlapping one, whose rest
	 * then shows. */
	if ((hit = calloc(len, 1)) == NULL || f.oom) {
		free(hit);
		frag_free(&f);
		return NULL;
	}
	for (size_t i = 0; i < f.n; i++) {
		char *esc = json_escaped(f.v[i]);

		mark_all(s, len, f.v[i], hit);
		if (esc)
			mark_all(s, len, esc, hit);
		free(esc);
	}
	out = mask_marked(s, len, hit);
	free(hit);
	frag_free(&f);
	return out;
}

char *pl_redact_tail(const char *tail, int truncated, const char *const *secrets, size_t n)
{
	const char *nl;

	/* The tail starts wherever the bound fell, maybe inside a secret,
	 * whose end no longer matches it: its first line is dropped. */
	if (truncated && tail != NULL) {
		nl = strchr(tail, '\n');
		tail = nl ? nl + 1 : "";
	}
	return pl_redact(tail, secrets, n);
}
