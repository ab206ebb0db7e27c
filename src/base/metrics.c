/*
 * metrics.c - counters, gauges and histograms with labels, and the
 * Prometheus text exposition (see metrics.h).
 *
 * A family keeps its series in a strmap keyed by the label values
 * (length-prefixed, so no value can forge another's key) under its own
 * mutex; updates hold it for one lookup, the exposition for copying one
 * family's numbers (the text is formatted after the lock is released).  The registry's mutex
 * only guards the list of families.
 */
#include "base/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/strmap.h"
#include "base/xalloc.h"

struct series {
	char *values[METRICS_MAX_LABELS];
	char *rendered;                /* a="x",b="y", escaped once at creation */
	double value;                  /* counter, gauge */
	double sum;                    /* histogram */
	uint64_t count;
	uint64_t buckets[METRICS_MAX_BUCKETS];   /* not cumulative */
};

struct metric {
	struct metric *next;
	char *name, *help;
	enum metric_type type;
	char *labels[METRICS_MAX_LABELS];
	size_t nlabels;
	double bounds[METRICS_MAX_BUCKETS];
	size_t nbounds;
	size_t max_series;
	pthread_mutex_t lock;
	struct strmap series;          /* key -> struct series */
	uint64_t dropped;              /* updates refused by max_series */
};

struct metrics_registry {
	pthread_mutex_t lock;
	struct metric *head, **tail;
};

static struct metrics_registry default_registry = {
	PTHREAD_MUTEX_INITIALIZER, NULL, &default_registry.head,
};

struct metrics_registry *metrics_default(void)
{
	return &default_registry;
}

struct metrics_registry *metrics_registry_new(void)
{
	struct metrics_registry *r = xcalloc(1, sizeof(*r));

	pthread_mutex_init(&r->lock, NULL);
	r->tail = &r->head;
	return r;
}

static void series_free(void *v)
{
	struct series *s = v;

	for (size_t i = 0; i < METRICS_MAX_LABELS; i++)
		free(s->values[i]);
	free(s->rendered);
	free(s);
}

static void family_free(struct metric *m)
{
	strmap_free(&m->series, series_free);
	for (size_t i = 0; i < m->nlabels; i++)
		free(m->labels[i]);
	free(m->name);
	free(m->help);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

void metrics_registry_free(struct metrics_registry *r)
{
	struct metric *m, *next;

	if (r == NULL || r == &default_registry)
		return;
	for (m = r->head; m; m = next) {
		next = m->next;
		family_free(m);
	}
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* ------------------------------------------------------------ series */

/* "<len>:<value>" per label: unambiguous whatever the values hold.
 * Malloc'd; the caller frees. */
static char *series_key(const struct metric *m, const char *const *values)
{
	size_t len = 1;
	char *key, *p;

	for (size_t i = 0; i < m->nlabels; i++)
		len += strlen(values[i] ? values[i] : "") + 24;
	p = key = xmalloc(len);
	*p = '\0';
	for (size_t i = 0; i < m->nlabels; i++) {
		const char *v = values[i] ? values[i] : "";
		p += sprintf(p, "%zu:%s", strlen(v), v);
	}
	return key;
}

static char *render_labels(const struct metric *m, const struct series *s);

/* The series for values, created when missing and the family has room.
 * NULL when it is full.  Called with m->lock held. */
static struct series *series_locked(struct metric *m, const char *const *values, int create)
{
	char *key = series_key(m, values);
	struct series *s = strmap_get(&m->series, key);

	if (s == NULL && create) {
		if (m->series.count >= m->max_series) {
			m->dropped++;
		} else {
			s = xcalloc(1, sizeof(*s));
			for (size_t i = 0; i < m->nlabels; i++)
				s->values[i] = xstrdup(values[i] ? values[i] : "");
			s->rendered = render_labels(m, s);
			strmap_put(&m->series, key, s);
		}
	}
	free(key);
	return s;
}

struct metric *metrics_family(struct metrics_registry *r, const struct metric_desc *d)
{
	struct metric *m;

	pthread_mutex_lock(&r->lock);
	for (m = r->head; m; m = m->next)
		if (strcmp(m->name, d->name) == 0)
			goto out;
	m = xcalloc(1, sizeof(*m));
	m->name = xstrdup(d->name);
	m->help = xstrdup(d->help ? d->help : "");
	m->type = d->type;
	for (size_t i = 0; i < METRICS_MAX_LABELS && d->labels[i]; i++)
		m->labels[m->nlabels++] = xstrdup(d->labels[i]);
	if (d->type == METRIC_HISTOGRAM) {
		m->nbounds = d->nbuckets < METRICS_MAX_BUCKETS ? d->nbuckets : METRICS_MAX_BUCKETS;
		memcpy(m->bounds, d->buckets, m->nbounds * sizeof(double));
	}
	m->max_series = d->max_series ? d->max_series : METRICS_DEFAULT_MAX_SERIES;
	pthread_mutex_init(&m->lock, NULL);
	strmap_init(&m->series);
	if (m->nlabels == 0)
		series_locked(m, NULL, 1);   /* no lock needed: not published yet */
	*r->tail = m;
	r->tail = &m->next;
out:
	pthread_mutex_unlock(&r->lock);
	return m;
}

struct metric *metric_d(struct metric_desc *d)
{
	struct metric *m = atomic_load(&d->fam);

	if (m == NULL) {
		/* Two threads may both get here: metrics_family returns the one
		 * family of that name to both. */
		m = metrics_family(metrics_default(), d);
		atomic_store(&d->fam, m);
	}
	return m;
}

/* ------------------------------------------------------------ updates */

static void update(struct metric *m, const char *const *values, double v, enum metric_type want,
    int set)
{
	struct series *s;

	if (m == NULL || m->type != want)
		return;
	pthread_mutex_lock(&m->lock);
	if ((s = series_locked(m, values, 1)) != NULL) {
		if (want == METRIC_HISTOGRAM) {
			size_t i = 0;
			while (i < m->nbounds && v > m->bounds[i])
				i++;
			if (i < m->nbounds)
				s->buckets[i]++;
			s->count++;
			s->sum += v;
		} else if (set) {
			s->value = v;
		} else {
			s->value += v;
		}
	}
	pthread_mutex_unlock(&m->lock);
}

void metric_add(struct metric *m, const char *const *values, double v)
{
	if (m != NULL && m->type == METRIC_COUNTER && !(v >= 0))
		return;
	update(m, values, v, m ? (m->type == METRIC_GAUGE ? METRIC_GAUGE : METRIC_COUNTER) : METRIC_COUNTER, 0);
}

void metric_set(struct metric *m, const char *const *values, double v)
{
	update(m, values, v, METRIC_GAUGE, 1);
}

void metric_observe(struct metric *m, const char *const *values, double v)
{
	update(m, values, v, METRIC_HISTOGRAM, 0);
}

void metric_touch(struct metric *m, const char *const *values)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	series_locked(m, values, 1);
	pthread_mutex_unlock(&m->lock);
}

double metric_value(struct metric *m, const char *const *values)
{
	struct series *s;
	double v = -1;

	if (m == NULL)
		return -1;
	pthread_mutex_lock(&m->lock);
	if ((s = series_locked(m, values, 0)) != NULL)
		v = m->type == METRIC_HISTOGRAM ? (double)s->count : s->value;
	pthread_mutex_unlock(&m->lock);
	return v;
}

struct delete_ctx {
	const struct metric *m;
	int npairs;
	const char *names[METRICS_MAX_LABELS], *values[METRICS_MAX_LABELS];
	char **keys;
	size_t nkeys;
};

static int series_matches(const struct delete_ctx *c, const struct series *s)
{
	for (int p = 0; p < c->npairs; p++) {
		size_t i = 0;
		while (i < c->m->nlabels && strcmp(c->m->labels[i], c->names[p]) != 0)
			i++;
		if (i == c->m->nlabels || strcmp(s->values[i], c->values[p]) != 0)
			return 0;
	}
	return 1;
}

static void collect_matching(void *ud, const char *key, void *value)
{
	struct delete_ctx *c = ud;

	if (series_matches(c, value)) {
		c->keys = xrealloc(c->keys, (c->nkeys + 1) * sizeof(char *));
		c->keys[c->nkeys++] = xstrdup(key);
	}
}

int metric_delete(struct metric *m, int npairs, ...)
{
	struct delete_ctx c = { .m = m };
	va_list ap;

	if (m == NULL || npairs <= 0 || npairs > METRICS_MAX_LABELS)
		return 0;
	c.npairs = npairs;
	va_start(ap, npairs);
	for (int p = 0; p < npairs; p++) {
		c.names[p] = va_arg(ap, const char *);
		c.values[p] = va_arg(ap, const char *);
	}
	va_end(ap);
	pthread_mutex_lock(&m->lock);
	strmap_each(&m->series, collect_matching, &c);   /* no change while iterating */
	for (size_t i = 0; i < c.nkeys; i++) {
		series_free(strmap_del(&m->series, c.keys[i]));
		free(c.keys[i]);
	}
	pthread_mutex_unlock(&m->lock);
	free(c.keys);
	return (int)c.nkeys;
}

/* ------------------------------------------------------------ text */

/* Go's strconv.FormatFloat(v, 'g', -1, 64), which the Prometheus client
 * library writes: the shortest digits that read back as v, in exponent form
 * when the exponent is below -4 or at least 6 ("1e+06", "1.4410284e+07",
 * "1e-05"), else plain ("123456", "0.0001"). */
const char *metrics_format_value(double v, char *buf, size_t n)
{
	char e[40], digits[20], *p;
	size_t nd = 0;
	int exp;

	if (isnan(v))
		return snprintf(buf, n, "NaN"), buf;
	if (isinf(v))
		return snprintf(buf, n, v > 0 ? "+Inf" : "-Inf"), buf;
	if (v == 0)
		return snprintf(buf, n, "0"), buf;
	/* A double whose shortest form has up to 15 digits reads back from its
	 * 15-digit rounding, so the search starts there. */
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(e, sizeof(e), "%.*e", prec - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	for (p = e + (e[0] == '-'); *p && *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	exp = atoi(p + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	if (exp < -4 || exp >= 6)
		snprintf(buf, n, "%s%c%s%se%c%02d", v < 0 ? "-" : "", digits[0], nd > 1 ? "." : "", digits + 1,
		    exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	else
		snprintf(buf, n, "%.*f", (int)nd - 1 - exp > 0 ? (int)nd - 1 - exp : 0, v);
	return buf;
}

const char *metrics_escape_label(const char *in, char *buf, size_t n)
{
	size_t len = 0;

	if (n == 0)
		return buf;
	for (const char *p = in ? in : ""; *p; p++) {
		const char *rep = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
		size_t k = rep ? 2 : 1;
		if (len + k >= n)
			break;
		if (rep)
			memcpy(buf + len, rep, 2);
		else
			buf[len] = *p;
		len += k;
	}
	buf[len] = '\0';
	return buf;
}

/* HELP text escapes only backslash and newline. */
static void write_help(FILE *out, const char *help)
{
	for (const char *p = help; *p; p++) {
		if (*p == '\\')
			fputs("\\\\", out);
		else if (*p == '\n')
			fputs("\\n", out);
		else
			fputc(*p, out);
	}
}

void metrics_write_header(FILE *out, const char *name, const char *help, enum metric_type type)
{
	static const char *types[] = { "counter", "gauge", "histogram" };

	fprintf(out, "# HELP %s ", name);
	write_help(out, help ? help : "");
	fprintf(out, "\n# TYPE %s %s\n", name, types[type]);
}

/* {a="x",b="y"}, or nothing without labels. */
static void write_labels(FILE *out, size_t n, const char *const *names, const char *const *values)
{
	char esc[1024];

	if (n == 0)
		return;
	fputc('{', out);
	for (size_t i = 0; i < n; i++)
		fprintf(out, "%s%s=\"%s\"", i ? "," : "", names[i], metrics_escape_label(values[i], esc, sizeof(esc)));
	fputc('}', out);
}

void metrics_write_sample(FILE *out, const char *name, size_t n, const char *const *names,
    const char *const *values, double v)
{
	char num[40];

	fputs(name, out);
	write_labels(out, n, names, values);
	fprintf(out, " %s\n", metrics_format_value(v, num, sizeof(num)));
}

/* A series as the exposition writes it: its labels already rendered
 * (a="x",b="y"), its numbers copied, so the family's lock is not held
 * while the text is formatted. */
struct snap {
	char *labels;
	double value, sum;
	uint64_t count;
	uint64_t buckets[METRICS_MAX_BUCKETS];
};

struct snap_ctx {
	const struct metric *m;
	struct snap *v;
	size_t n;
};

/* a="x",b="y" for s, malloc'd. */
static char *render_labels(const struct metric *m, const struct series *s)
{
	char *buf = NULL, esc[1024];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		return xstrdup("");
	for (size_t i = 0; i < m->nlabels; i++)
		fprintf(f, "%s%s=\"%s\"", i ? "," : "", m->labels[i], metrics_escape_label(s->values[i], esc, sizeof(esc)));
	fclose(f);
	return buf ? buf : xstrdup("");
}

static void take_snap(void *ud, const char *key, void *value)
{
	struct snap_ctx *c = ud;
	const struct series *s = value;
	struct snap *sn = &c->v[c->n++];
	(void)key;

	sn->labels = xstrdup(s->rendered);
	sn->value = s->value;
	sn->sum = s->sum;
	sn->count = s->count;
	memcpy(sn->buckets, s->buckets, sizeof(sn->buckets));
}

static void write_snap(FILE *out, const struct metric *m, const char le[][40], const struct snap *sn)
{
	const char *sep = sn->labels[0] ? "," : "";
	char num[40];
	uint64_t cum = 0;

	if (m->type != METRIC_HISTOGRAM) {
		fprintf(out, sn->labels[0] ? "%s{%s} %s\n" : "%s%s %s\n", m->name, sn->labels,
		    metrics_format_value(sn->value, num, sizeof(num)));
		return;
	}
	for (size_t i = 0; i < m->nbounds; i++) {
		cum += sn->buckets[i];
		fprintf(out, "%s_bucket{%s%sle=\"%s\"} %llu\n", m->name, sn->labels, sep, le[i], (unsigned long long)cum);
	}
	fprintf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", m->name, sn->labels, sep, (unsigned long long)sn->count);
	fprintf(out, sn->labels[0] ? "%s_sum{%s} %s\n" : "%s_sum%s %s\n", m->name, sn->labels,
	    metrics_format_value(sn->sum, num, sizeof(num)));
	fprintf(out, sn->labels[0] ? "%s_count{%s} %llu\n" : "%s_count%s %llu\n", m->name, sn->labels,
	    (unsigned long long)sn->count);
}

/* One family: its series copied under its lock (microseconds per series),
 * then formatted without it. */
static void write_family(FILE *out, struct metric *m)
{
	struct snap_ctx c = { m, NULL, 0 };
	char le[METRICS_MAX_BUCKETS][40];

	for (size_t i = 0; i < m->nbounds; i++)
		metrics_format_value(m->bounds[i], le[i], sizeof(le[i]));
	pthread_mutex_lock(&m->lock);
	c.v = xcalloc(m->series.count ? m->series.count : 1, sizeof(*c.v));
	strmap_each(&m->series, take_snap, &c);
	pthread_mutex_unlock(&m->lock);
	metrics_write_header(out, m->name, m->help, m->type);
	for (size_t i = 0; i < c.n; i++) {
		write_snap(out, m, (const char (*)[40])le, &c.v[i]);
		free(c.v[i].labels);
	}
	free(c.v);
}

void metrics_write(struct metrics_registry *r, FILE *out)
{
	static const char *names[] = { "metric" };
	struct metric *m;

	pthread_mutex_lock(&r->lock);
	for (m = r->head; m; m = m->next)
		write_family(out, m);
	/* Always declared, so that an alert on it has a family to read. */
	metrics_write_header(out, "pulumi_controller_metric_series_dropped_total",
	    "Updates of new label sets refused because the family had its maximum of series.", METRIC_COUNTER);
	for (m = r->head; m; m = m->next) {
		uint64_t d;
		pthread_mutex_lock(&m->lock);
		d = m->dropped;
		pthread_mutex_unlock(&m->lock);
		if (d > 0)
			metrics_write_sample(out, "pulumi_controller_metric_series_dropped_total", 1, names,
			    (const char *const *)&m->name, (double)d);
	}
	pthread_mutex_unlock(&r->lock);
}
