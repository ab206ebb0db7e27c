/*
 * stack_metrics.c - what the Stack controller counts, in the default
 * metrics registry (base/metrics.h); docs/run.md lists every family.
 *
 *   gotk_reconcile_duration_seconds{kind,name,namespace}   Flux's own
 *       histogram, with Flux's bounds, so Flux's dashboards show Stacks;
 *       a deleted Stack's series are removed, as Flux removes them
 *   pulumi_controller_reconcile_total{result,reason} and
 *   pulumi_controller_reconcile_duration_seconds{result}   passes by how
 *       they ended
 *   pulumi_controller_artifact_*      fetches of the store: cache hits and
 *       misses, downloads (bytes, duration by result), refusals by rule
 *   pulumi_controller_oci_resolves_total{result}   registry resolutions
 *   pulumi_controller_pulumi_operation*   updates, previews and destroys:
 *       duration by operation and result, in flight
 *
 * Every label value is one of a fixed set (results, reasons, rules,
 * operations are static strings) except the Stacks' own names, which are
 * bounded by the Stacks that exist.  Nothing here blocks: each call is one
 * short mutex in the metrics module.
 */
#include <string.h>

#include "base/metrics.h"
#include "stack/stack_model.h"

/* Flux's bounds: ExponentialBucketsRange(10e-3, 1800, 10) as Go computes
 * and prints them (fluxcd/pkg runtime/metrics). */
static const double GOTK_BUCKETS[] = { 0.01, 0.038363583488692544, 0.1471764538093883, 0.5646216173286169,
	2.166090855590701, 8.309900738254731, 31.879757075478317, 122.30217221643493, 469.19495946736544,
	1799.9999999999986 };
/* Passes and pulumi operations: from a no-op pass (milliseconds) to an
 * hour-long update. */
static const double LONG_BUCKETS[] = { 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800,
	3600 };
/* Downloads: 10 ms .. 5 min, the store's default budget. */
static const double FETCH_BUCKETS[] = { 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 };

#define NB(a) (sizeof(a) / sizeof((a)[0]))

static struct metric_desc m_gotk = { "gotk_reconcile_duration_seconds",
	"The duration in seconds of a GitOps Toolkit resource reconciliation.", METRIC_HISTOGRAM,
	{ "kind", "name", "namespace" }, GOTK_BUCKETS, NB(GOTK_BUCKETS), 0, NULL };
static struct metric_desc m_reconciles = { "pulumi_controller_reconcile_total",
	"Reconcile passes over a Stack, by how they ended (result) and the Ready reason they set.",
	METRIC_COUNTER, { "result", "reason" }, NULL, 0, 0, NULL };
static struct metric_desc m_reconcile_time = { "pulumi_controller_reconcile_duration_seconds",
	"How long a reconcile pass over a Stack took, pulumi operations included, by result.",
	METRIC_HISTOGRAM, { "result" }, LONG_BUCKETS, NB(LONG_BUCKETS), 0, NULL };
static struct metric_desc m_hits = { "pulumi_controller_artifact_cache_hits_total",
	"Artifacts found in the store already (no download).", METRIC_COUNTER, { "source" }, NULL, 0, 0, NULL };
static struct metric_desc m_misses = { "pulumi_controller_artifact_cache_misses_total",
	"Artifacts not in the store, so downloaded.", METRIC_COUNTER, { "source" }, NULL, 0, 0, NULL };
static struct metric_desc m_fetch_time = { "pulumi_controller_artifact_fetch_duration_seconds",
	"Downloads into the store (download, digest check, unpacking), by result.", METRIC_HISTOGRAM,
	{ "source", "result" }, FETCH_BUCKETS, NB(FETCH_BUCKETS), 0, NULL };
static struct metric_desc m_fetch_bytes = { "pulumi_controller_artifact_fetch_bytes_total",
	"Bytes of artifacts downloaded (compressed, as served) into the store.", METRIC_COUNTER, { "source" },
	NULL, 0, 0, NULL };
static struct metric_desc m_refusals = { "pulumi_controller_artifact_refusals_total",
	"Artifacts refused by the extractor or a limit, by the rule they broke.", METRIC_COUNTER,
	{ "source", "rule" }, NULL, 0, 0, NULL };
static struct metric_desc m_resolves = { "pulumi_controller_oci_resolves_total",
	"ociSource references resolved to a manifest: from the shared cache, from the registry, or failed.",
	METRIC_COUNTER, { "result" }, NULL, 0, 0, NULL };
static struct metric_desc m_op_time = { "pulumi_controller_pulumi_operation_duration_seconds",
	"Pulumi operations (every CLI call of an up, preview or destroy), by operation and result.",
	METRIC_HISTOGRAM, { "operation", "result" }, LONG_BUCKETS, NB(LONG_BUCKETS), 0, NULL };
static struct metric_desc m_in_flight = { "pulumi_controller_pulumi_operations_in_flight",
	"Pulumi operations running now.", METRIC_GAUGE, { "operation" }, NULL, 0, 0, NULL };

/* ------------------------------------------------------------ reconciles */

static const char *pass_result(const struct stack_pass *p, int rc)
{
	if (rc < 0)
		return "error";
	if (p->gone)
		return "deleted";
	if (p->suspended)
		return "suspended";
	if (!p->v.set)
		return "error";
	return p->v.state == STACK_READY ? "ready" : p->v.state == STACK_STALLED ? "stalled" : "progressing";
}

void stack_metrics_reconciled(const struct stack_pass *p, int rc, double seconds)
{
	const char *result = pass_result(p, rc);
	const char *reason = rc >= 0 && p->v.set && !p->gone && !p->suspended ? p->v.reason : "";

	metric_add(metric_d(&m_reconciles), (const char *[]){ result, reason }, 1);
	metric_observe(metric_d(&m_reconcile_time), (const char *[]){ result }, seconds);
	/* Flux removes a deleted object's series instead of recording it. */
	if (p->gone)
		stack_metrics_forget(p->ns, p->name);
	else
		metric_observe(metric_d(&m_gotk), (const char *[]){ "Stack", p->name, p->ns }, seconds);
}

void stack_metrics_forget(const char *ns, const char *name)
{
	metric_delete(metric_d(&m_gotk), 3, "kind", "Stack", "namespace", ns, "name", name);
}

void stack_metrics_gone(const char *ns, const char *name, double seconds)
{
	metric_add(metric_d(&m_reconciles), (const char *[]){ "deleted", "" }, 1);
	metric_observe(metric_d(&m_reconcile_time), (const char *[]){ "deleted" }, seconds);
	stack_metrics_forget(ns, name);
}

/* ------------------------------------------------------------ artifacts */

void stack_metrics_cache(const char *source, int hit)
{
	metric_add(metric_d(hit ? &m_hits : &m_misses), (const char *[]){ source }, 1);
}

void stack_metrics_fetched(const char *source, const char *result, double seconds, long long bytes)
{
	metric_observe(metric_d(&m_fetch_time), (const char *[]){ source, result }, seconds);
	if (bytes > 0)
		metric_add(metric_d(&m_fetch_bytes), (const char *[]){ source }, (double)bytes);
}

/* The rule a refusal broke, from the extractor's and the limits' messages
 * (docs/unpack.md lists them): a fixed set, so the label stays bounded. */
const char *stack_refusal_rule(const struct err *e)
{
	static const struct {
		const char *text, *rule;
	} rules[] = {
		{ "replaces ", "replace" },
		{ "not a directory", "replace" },
		{ "would overwrite", "replace" },
		{ "symlink", "symlink" },
		{ "hardlink", "hardlink" },
		{ "device node", "entry_type" },
		{ "FIFO", "entry_type" },
		{ "socket", "entry_type" },
		{ "entry type", "entry_type" },
		{ "\"..\"", "path" },
		{ "absolute path", "path" },
		{ "empty path", "path" },
		{ "PATH_MAX", "path" },
		{ "longer than 255", "path" },
		{ "cannot be decoded", "path" },
		{ " entries", "entries_limit" },
		{ "bytes in total", "size_limit" },
		{ "bytes for one file", "size_limit" },
		{ "after the end of the archive", "trailing_data" },
		{ "larger than the limit", "download_size" },
		{ "download limit", "download_size" },
		{ "archive format", "format" },
		{ "compression", "format" },
		{ "not a tar archive", "format" },
	};

	for (size_t i = 0; i < NB(rules); i++)
		if (strstr(e->msg, rules[i].text) != NULL)
			return rules[i].rule;
	return "other";
}

void stack_metrics_refused(const char *source, const struct err *e)
{
	metric_add(metric_d(&m_refusals), (const char *[]){ source, stack_refusal_rule(e) }, 1);
}

void stack_metrics_resolved(const char *result)
{
	metric_add(metric_d(&m_resolves), (const char *[]){ result }, 1);
}

/* ------------------------------------------------------------ pulumi */

void stack_metrics_operation_start(const char *op)
{
	metric_add(metric_d(&m_in_flight), (const char *[]){ op }, 1);
}

void stack_metrics_operation_end(const char *op, enum pl_status status, double seconds)
{
	metric_add(metric_d(&m_in_flight), (const char *[]){ op }, -1);
	metric_observe(metric_d(&m_op_time), (const char *[]){ op, pl_status_name(status) }, seconds);
}

/* ------------------------------------------------------------ at start */

/* The series a dashboard expects before anything happened, at 0. */
void stack_metrics_init(void)
{
	static const char *sources[] = { "flux", "oci" };
	static const char *ops[] = { "up", "preview", "destroy" };

	for (size_t i = 0; i < NB(sources); i++) {
		metric_touch(metric_d(&m_hits), (const char *[]){ sources[i] });
		metric_touch(metric_d(&m_misses), (const char *[]){ sources[i] });
		metric_touch(metric_d(&m_fetch_bytes), (const char *[]){ sources[i] });
	}
	for (size_t i = 0; i < NB(ops); i++)
		metric_set(metric_d(&m_in_flight), (const char *[]){ ops[i] }, 0);
	/* Registered now so that HELP and TYPE are there from the first scrape. */
	metric_d(&m_gotk);
	metric_d(&m_reconciles);
	metric_d(&m_reconcile_time);
	metric_d(&m_fetch_time);
	metric_d(&m_refusals);
	metric_d(&m_resolves);
	metric_d(&m_op_time);
}
