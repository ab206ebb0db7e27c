/*
 * metrics.h - Prometheus metrics: counters, gauges and fixed-bucket
 * histograms with labels, and their text exposition (format 0.0.4).
 *
 * A metric family is described once, statically, by the module that
 * updates it:
 *
 *     static struct metric_desc adds = { "workqueue_adds_total",
 *         "Total number of adds handled by workqueue", METRIC_COUNTER,
 *         { "name", "controller" } };
 *     metric_add(metric_d(&adds), (const char *[]){ "stack", "stack" }, 1);
 *
 * metric_d registers the description in the process-wide registry on first
 * use (metrics_default), so no module needs an init call; the exposition
 * (`run`'s /metrics) writes every registered family.  Tests make their own
 * registry with metrics_registry_new and metrics_family.
 *
 * Thread-safety: every update takes its family's mutex for a hash lookup and
 * an addition, nothing more; the exposition takes each family's mutex only
 * to copy its numbers, and formats the text after releasing it.  So a scrape never waits for a
 * reconcile and a reconcile never waits for a scrape's network I/O.
 *
 * Cardinality is bounded: a family holds at most max_series label sets
 * (METRICS_DEFAULT_MAX_SERIES when 0); updates of new label sets beyond it
 * are dropped and counted in pulumi_controller_metric_series_dropped_total.
 * Series of an object that is gone are removed with metric_delete (a
 * deleted Stack's gotk_reconcile_duration_seconds, as Flux does).
 */
#ifndef PC_METRICS_H
#define PC_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#define METRICS_MAX_LABELS 4
#define METRICS_MAX_BUCKETS 48
#define METRICS_DEFAULT_MAX_SERIES 20000

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metric;              /* one registered family */
struct metrics_registry;

/* A family: name, help, type, label names (unused slots NULL) and, for a
 * histogram, its upper bounds in increasing order (+Inf is implicit). */
struct metric_desc {
	const char *name;
	const char *help;
	enum metric_type type;
	const char *labels[METRICS_MAX_LABELS];
	const double *buckets;
	size_t nbuckets;
	size_t max_series;                /* 0: METRICS_DEFAULT_MAX_SERIES */
	_Atomic(struct metric *) fam;     /* set by metric_d */
};

/* The process-wide registry (never freed; its memory stays reachable). */
struct metrics_registry *metrics_default(void);
struct metrics_registry *metrics_registry_new(void);
void metrics_registry_free(struct metrics_registry *r);

/* The family of d in r, registered on first call (by name: a second
 * description with the same name gets the first one's family).  A family
 * without labels has its one series from the start, at 0. */
struct metric *metrics_family(struct metrics_registry *r, const struct metric_desc *d);
/* metrics_family(metrics_default(), d), cached in d->fam. */
struct metric *metric_d(struct metric_desc *d);

/* values: one per label name, in order (NULL is ""); NULL when the family
 * has no labels.  Counters only ever grow (a negative v is ignored). */
void metric_add(struct metric *m, const char *const *values, double v);
void metric_set(struct metric *m, const char *const *values, double v);   /* gauges */
void metric_observe(struct metric *m, const char *const *values, double v);  /* histograms */
/* Creates the series at 0 if missing, so it shows before its first event. */
void metric_touch(struct metric *m, const char *const *values);
/* Removes every series whose labels match all the given (name, value)
 * pairs, e.g. metric_delete(m, 2, "namespace", "ns", "name", "web"); returns
 * how many were removed. */
int metric_delete(struct metric *m, int npairs, ...);
/* The value of one series (counter, gauge; a histogram's count), or -1 when
 * it does not exist.  For tests and diagnostics. */
double metric_value(struct metric *m, const char *const *values);

/* Writes every family of r in the text format. */
void metrics_write(struct metrics_registry *r, FILE *out);

/* Helpers for values computed at scrape time (cache sizes, queue depth):
 * a family's HELP and TYPE lines, then its samples.  label names and values
 * are n-long arrays (n may be 0); values are escaped. */
void metrics_write_header(FILE *out, const char *name, const char *help, enum metric_type type);
void metrics_write_sample(FILE *out, const char *name, size_t n, const char *const *names,
    const char *const *values, double v);

/* Prometheus's rendering of a float: the shortest text that reads back as
 * v ("0.1", "1e+06", "+Inf", "NaN"), into buf (>= 32 bytes). */
const char *metrics_format_value(double v, char *buf, size_t n);
/* A label value escaped for the text format (\\, \", \n) into buf; a value
 * too long is cut (never inside an escape).  Returns buf. */
const char *metrics_escape_label(const char *in, char *buf, size_t n);

/* Bucket bounds are literals: Go's client library computes Flux's and
 * controller-runtime's with its own float arithmetic, and their text is what
 * dashboards match on ("9.999999999999999e-06"), so they are copied as
 * printed, not recomputed with libm. */

#endif
