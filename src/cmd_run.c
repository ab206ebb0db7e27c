/*
 * cmd_run.c - `pulumi-controller run`: the controller process.
 *
 * Loads the Kubernetes config, starts an informer for Stacks and for each
 * Flux source kind the server serves, turns changes into keys on the work
 * queue (a Stack change queues that Stack; a source change queues exactly
 * the Stacks whose spec.fluxSource.sourceRef names it, found through a
 * secondary index), optionally waits to be elected leader, and runs
 * --concurrency workers that call the reconciler.
 *
 * The reconciler seam: `reconciler` below is a struct kube_reconciler
 * (kube.h).  Until the Stack reconciler lands (src/stack/, a later issue)
 * the default one only logs the key it was given.
 *
 * Signals: SIGTERM/SIGINT stop taking work, wait up to --shutdown-grace for
 * running reconciles, release the Lease, and exit 0.  SIGUSR1 writes the
 * cache summary to --cache-dump (also written at exit), which the tests
 * compare with the server's state.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd.h"
#include "kube/kube.h"

/* The kinds this controller caches.  Flux serves OCIRepository and Bucket
 * at v1 from Flux 2.6 and at v1beta2 before; the first served wins. */
struct kind {
	struct kube_resource res[2];
	int nres;
	const struct kube_resource *served;
	struct kube_informer *inf;
};

static struct kind stack_kind = {
	{ { "pulumi.com", "v1", "stacks", "Stack", 1 } }, 1, NULL, NULL,
};
static struct kind source_kinds[] = {
	{ { { "source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository", 1 } }, 1, NULL, NULL },
	{ { { "source.toolkit.fluxcd.io", "v1", "ocirepositories", "OCIRepository", 1 },
	    { "source.toolkit.fluxcd.io", "v1beta2", "ocirepositories", "OCIRepository", 1 } }, 2, NULL, NULL },
	{ { { "source.toolkit.fluxcd.io", "v1", "buckets", "Bucket", 1 },
	    { "source.toolkit.fluxcd.io", "v1beta2", "buckets", "Bucket", 1 } }, 2, NULL, NULL },
};
#define NSOURCES (sizeof(source_kinds) / sizeof(source_kinds[0]))

struct run {
	struct kube_client *client;
	struct kube_queue *queue;
	struct kube_leader *leader;
	struct kube_recorder *recorder;   /* Events (core/v1) */
	const char *lease_ns, *lease_name;
	struct kube_workers *workers;
	const char *cache_dump;
	atomic_int lost_lease;
	atomic_int became_leader;
	atomic_ullong changes;
};

/* ------------------------------------------------------------ the seam */

static int log_only_reconcile(void *ud, const char *key, long *requeue_after_ms, struct err *e)
{
	(void)ud; (void)requeue_after_ms; (void)e;
	log_info("reconcile", "stack", key, "note", "no Stack reconciler is wired in yet", NULL);
	return 0;
}

static const struct kube_reconciler default_reconciler = { log_only_reconcile, NULL, NULL };
static const struct kube_reconciler *reconciler = &default_reconciler;

/* ------------------------------------------------------------ wiring */

/* Index "source": "<Kind>/<namespace>/<name>" of the Flux source a Stack uses. */
static int stack_source_index(const cJSON *obj, char **out, int max)
{
	const cJSON *ref = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(
	        cJSON_GetObjectItemCaseSensitive(obj, "spec"), "fluxSource"), "sourceRef");
	const char *kind = kube_obj_str(ref, "kind"), *name = kube_obj_str(ref, "name");
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	size_t n;

	if (kind == NULL || name == NULL || ns == NULL || max < 1)
		return 0;
	n = strlen(kind) + strlen(ns) + strlen(name) + 3;
	out[0] = malloc(n);
	if (out[0] == NULL)
		return 0;
	snprintf(out[0], n, "%s/%s/%s", kind, ns, name);
	return 1;
}

static const char *change_name(enum kube_change c)
{
	return c == KUBE_CHANGE_ADD ? "added" : c == KUBE_CHANGE_UPDATE ? "updated" : "deleted";
}

static void log_change(struct kube_informer *inf, enum kube_change ch, const cJSON *obj)
{
	const struct kube_resource *r = kube_informer_resource(inf);
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	const char *name = kube_obj_str(obj, "metadata.name");
	const char *rv = kube_obj_str(obj, "metadata.resourceVersion");

	log_info("object changed", "kind", r->kind, "change", change_name(ch), "namespace", ns ? ns : "",
	    "name", name ? name : "", "resourceVersion", rv ? rv : "", NULL);
}

static void on_stack(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	struct run *rt = ud;
	char *key = kube_object_key(obj);
	(void)old;

	atomic_fetch_add(&rt->changes, 1);
	log_change(inf, ch, obj);
	if (key != NULL)
		kube_queue_add(rt->queue, key);
	free(key);
}

static void enqueue_key(void *ud, const char *key)
{
	kube_queue_add(((struct run *)ud)->queue, key);
}

static void on_source(void *ud, struct kube_informer *inf, enum kube_change ch, const cJSON *old,
    const cJSON *obj)
{
	struct run *rt = ud;
	const struct kube_resource *r = kube_informer_resource(inf);
	const char *ns = kube_obj_str(obj, "metadata.namespace");
	const char *name = kube_obj_str(obj, "metadata.name");
	char value[600];
	(void)old;

	atomic_fetch_add(&rt->changes, 1);
	log_change(inf, ch, obj);
	if (stack_kind.inf == NULL || ns == NULL || name == NULL)
		return;
	snprintf(value, sizeof(value), "%s/%s/%s", r->kind, ns, name);
	kube_informer_by_index(stack_kind.inf, "source", value, enqueue_key, rt);
}

/* ------------------------------------------------------------ cache dump */

struct dump_ctx {
	cJSON *obj;
};

static void dump_one(void *ud, const char *key, const char *rv)
{
	cJSON_AddStringToObject(((struct dump_ctx *)ud)->obj, key, rv);
}

static void write_cache_dump(const char *path)
{
	cJSON *doc = cJSON_CreateObject();
	struct kind *all[1 + NSOURCES];
	char tmp[4096], *text;
	FILE *f;

	all[0] = &stack_kind;
	for (size_t i = 0; i < NSOURCES; i++)
		all[i + 1] = &source_kinds[i];
	for (size_t i = 0; i < 1 + NSOURCES; i++) {
		struct dump_ctx c;
		if (all[i]->inf == NULL)
			continue;
		c.obj = cJSON_AddObjectToObject(doc, all[i]->served->resource);
		kube_informer_each(all[i]->inf, dump_one, &c);
	}
	text = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (f == NULL || text == NULL) {
		log_error("cannot write the cache dump", "path", path, NULL);
		if (f)
			fclose(f);
		free(text);
		return;
	}
	fputs(text, f);
	free(text);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		log_error("cannot write the cache dump", "path", path, NULL);
		unlink(tmp);
		return;
	}
	log_info("cache dumped", "path", path, NULL);
}

/* ------------------------------------------------------------ probes */

static int ready(void *ud)
{
	(void)ud;
	if (stack_kind.inf == NULL || !kube_informer_synced(stack_kind.inf))
		return 0;
	for (size_t i = 0; i < NSOURCES; i++)
		if (source_kinds[i].inf != NULL && !kube_informer_synced(source_kinds[i].inf))
			return 0;
	return 1;
}

static void metrics(void *ud, FILE *out)
{
	struct run *rt = ud;
	struct kind *all[1 + NSOURCES];
	uint64_t done, failed;

	all[0] = &stack_kind;
	for (size_t i = 0; i < NSOURCES; i++)
		all[i + 1] = &source_kinds[i];
	fputs("# HELP pulumi_controller_cache_objects Objects in the informer cache.\n"
	    "# TYPE pulumi_controller_cache_objects gauge\n", out);
	for (size_t i = 0; i < 1 + NSOURCES; i++)
		if (all[i]->inf)
			fprintf(out, "pulumi_controller_cache_objects{kind=\"%s\"} %zu\n", all[i]->served->kind,
			    kube_informer_count(all[i]->inf));
	/* One family at a time: the text format wants a family's samples together. */
	for (int fam = 0; fam < 3; fam++) {
		static const char *names[] = { "watch_events_total", "lists_total", "watch_errors_total" };
		static const char *helps[] = { "Watch events received.", "Lists (initial and relists).",
			"Failed lists and watches." };
		fprintf(out, "# HELP pulumi_controller_%s %s\n# TYPE pulumi_controller_%s counter\n",
		    names[fam], helps[fam], names[fam]);
		for (size_t i = 0; i < 1 + NSOURCES; i++) {
			struct kube_informer_stats st;
			uint64_t v;
			if (!all[i]->inf)
				continue;
			kube_informer_stats(all[i]->inf, &st);
			v = fam == 0 ? st.events : fam == 1 ? st.lists : st.errors;
			fprintf(out, "pulumi_controller_%s{kind=\"%s\"} %llu\n", names[fam],
			    all[i]->served->kind, (unsigned long long)v);
		}
	}
	kube_workers_counts(rt->workers, &done, &failed);
	fprintf(out, "# TYPE pulumi_controller_workqueue_depth gauge\npulumi_controller_workqueue_depth %zu\n",
	    kube_queue_len(rt->queue));
	fprintf(out, "# TYPE pulumi_controller_reconcile_total counter\npulumi_controller_reconcile_total %llu\n",
	    (unsigned long long)done);
	fprintf(out, "# TYPE pulumi_controller_reconcile_errors_total counter\npulumi_controller_reconcile_errors_total %llu\n",
	    (unsigned long long)failed);
	fprintf(out, "# TYPE pulumi_controller_leader gauge\npulumi_controller_leader %d\n",
	    rt->leader ? kube_leader_is_leader(rt->leader) : 1);
}

/* ------------------------------------------------------------ leader */

/* Like client-go's lock, tell `kubectl describe lease` who took over. */
static void record_leader_event(struct run *rt)
{
	static const struct kube_resource lease_res = { "coordination.k8s.io", "v1", "leases", "Lease", 1 };
	struct err e;
	cJSON *lease = kube_get(rt->client, &lease_res, rt->lease_ns, rt->lease_name, NULL, &e);
	char msg[600];

	if (lease == NULL)
		return;
	if (!cJSON_GetObjectItemCaseSensitive(lease, "apiVersion"))
		cJSON_AddStringToObject(lease, "apiVersion", "coordination.k8s.io/v1");
	if (!cJSON_GetObjectItemCaseSensitive(lease, "kind"))
		cJSON_AddStringToObject(lease, "kind", "Lease");
	snprintf(msg, sizeof(msg), "%s became leader", kube_leader_identity(rt->leader));
	if (kube_event(rt->recorder, lease, "Normal", "LeaderElection", msg, &e) < 0)
		log_warn("cannot record the leader election event", "error", e.msg, NULL);
	cJSON_Delete(lease);
}

static void on_started_leading(void *ud)
{
	struct run *rt = ud;

	record_leader_event(rt);
	atomic_store(&rt->became_leader, 1);
}

static void on_stopped_leading(void *ud)
{
	atomic_store(&((struct run *)ud)->lost_lease, 1);
}

static void on_new_leader(void *ud, const char *id)
{
	(void)ud;
	log_info("leader election: current leader", "identity", id, NULL);
}

/* ------------------------------------------------------------ command */

static void run_usage(FILE *out)
{
	fprintf(out,
	    "Usage: pulumi-controller run [flags]\n"
	    "\n"
	    "Runs the controller: caches Stacks (pulumi.com/v1) and the Flux sources\n"
	    "GitRepository, OCIRepository and Bucket, queues the Stacks affected by each\n"
	    "change and reconciles them with --concurrency workers.\n"
	    "\n"
	    "Flags:\n"
	    "  --kubeconfig F                 kubeconfig file(s) (default: $KUBECONFIG, in-cluster,\n"
	    "                                 then ~/.kube/config)\n"
	    "  --namespace NS                 watch only NS (default: all namespaces)\n"
	    "  --watch-label-selector S       only Stacks matching the label selector S (sharding)\n"
	    "  --watch-idle-timeout D         resume a watch that received nothing for D\n"
	    "                                 (default 2m: two of the server's bookmarks)\n"
	    "  --leader-elect                 run only while holding the Lease\n"
	    "  --leader-election-id ID        Lease name (default pulumi-controller-leader-election)\n"
	    "  --leader-election-namespace NS Lease namespace (default: the config's namespace)\n"
	    "  --lease-duration D             default 15s\n"
	    "  --renew-deadline D             default 10s\n"
	    "  --retry-period D               default 2s\n"
	    "  --concurrency N                reconcile workers (default 4)\n"
	    "  --shutdown-grace D             wait for running work on SIGTERM (default 30s)\n"
	    "  --metrics-addr ADDR            Prometheus /metrics on ADDR (default :8080; 0 disables)\n"
	    "  --health-addr ADDR             /healthz and /readyz on ADDR (default :9440; 0 disables)\n"
	    "  --cache-dump F                 write a cache summary to F on SIGUSR1 and at exit\n"
	    "  --log-level L                  debug, info, warn, error (default info)\n"
	    "  --log-format F                 json or text (default json)\n"
	    "  -h, --help                     show this help\n"
	    "\n"
	    "Durations are Go-style: 500ms, 15s, 1m30s.  Exit status: 0 after SIGTERM,\n"
	    "1 on failure or when the Lease is lost, 2 on bad usage.\n");
}

struct run_flags {
	const char *kubeconfig, *ns, *selector, *le_id, *le_ns, *metrics_addr, *health_addr;
	const char *level, *format, *cache_dump;
	int leader_elect, concurrency;
	long lease_ms, renew_ms, retry_ms, grace_ms, watch_idle_ms;
};

static int parse_flags(int argc, char **argv, struct run_flags *f)
{
	static const struct option longopts[] = {
		{ "kubeconfig", required_argument, NULL, 'k' },
		{ "namespace", required_argument, NULL, 'n' },
		{ "watch-label-selector", required_argument, NULL, 'l' },
		{ "watch-idle-timeout", required_argument, NULL, 'W' },
		{ "leader-elect", no_argument, NULL, 'E' },
		{ "leader-election-id", required_argument, NULL, 'I' },
		{ "leader-election-namespace", required_argument, NULL, 'N' },
		{ "lease-duration", required_argument, NULL, 'D' },
		{ "renew-deadline", required_argument, NULL, 'R' },
		{ "retry-period", required_argument, NULL, 'P' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "shutdown-grace", required_argument, NULL, 'g' },
		{ "metrics-addr", required_argument, NULL, 'm' },
		{ "health-addr", required_argument, NULL, 'H' },
		{ "cache-dump", required_argument, NULL, 'C' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "log-format", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	memset(f, 0, sizeof(*f));
	f->le_id = "pulumi-controller-leader-election";
	f->metrics_addr = ":8080";
	f->health_addr = ":9440";
	f->level = "info";
	f->format = "json";
	f->concurrency = 4;
	f->lease_ms = 15000;
	f->renew_ms = 10000;
	f->retry_ms = 2000;
	f->grace_ms = 30000;
	f->watch_idle_ms = 120000;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		long *dur = NULL;
		switch (ch) {
		case 'k': f->kubeconfig = optarg; break;
		case 'n': f->ns = optarg; break;
		case 'l': f->selector = optarg; break;
		case 'E': f->leader_elect = 1; break;
		case 'I': f->le_id = optarg; break;
		case 'N': f->le_ns = optarg; break;
		case 'D': dur = &f->lease_ms; break;
		case 'R': dur = &f->renew_ms; break;
		case 'P': dur = &f->retry_ms; break;
		case 'g': dur = &f->grace_ms; break;
		case 'W': dur = &f->watch_idle_ms; break;
		case 'c': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end != '\0' || v < 1 || v > 1024) {
				fprintf(stderr, "run: --concurrency: expected 1..1024\n");
				return EXIT_USAGE;
			}
			f->concurrency = (int)v;
			break;
		}
		case 'm': f->metrics_addr = optarg; break;
		case 'H': f->health_addr = optarg; break;
		case 'C': f->cache_dump = optarg; break;
		case 'L': f->level = optarg; break;
		case 'F': f->format = optarg; break;
		case 'h': run_usage(stdout); return 0;
		default: run_usage(stderr); return EXIT_USAGE;
		}
		if (dur != NULL && (*dur = kube_parse_duration_ms(optarg)) <= 0) {
			fprintf(stderr, "run: %s: \"%s\" is not a positive duration (e.g. 15s)\n",
			    argv[optind - 1], optarg);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "run: unexpected argument \"%s\"\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (f->leader_elect && !(f->lease_ms > f->renew_ms && f->renew_ms > f->retry_ms * 12 / 10)) {
		fprintf(stderr, "run: need --lease-duration > --renew-deadline > 1.2 x --retry-period\n");
		return EXIT_USAGE;
	}
	if (cmd_setup_logging(f->level, f->format) < 0)
		return EXIT_USAGE;
	return -1;
}

/* Picks the first served version of a kind; 0 served, 1 not, -1 error. */
static int discover(struct kube_client *c, struct kind *k, struct err *e)
{
	for (int i = 0; i < k->nres; i++) {
		int rc = kube_resource_served(c, &k->res[i], e);
		if (rc < 0)
			return -1;
		if (rc == 1) {
			k->served = &k->res[i];
			return 0;
		}
	}
	return 1;
}

static struct kube_informer *make_informer(struct run *rt, struct kind *k, const struct run_flags *f,
    const char *selector)
{
	struct kube_informer_opts io = {
		.namespace = f->ns,
		.label_selector = selector,
		/* whole seconds: libcurl's stall check counts seconds */
		.watch_idle_timeout_s = f->watch_idle_ms < 1000 ? 1 : f->watch_idle_ms / 1000,
	};
	return kube_informer_new(rt->client, k->served, &io);
}

static void stop_all(struct run *rt, struct kube_serve *probes[2])
{
	kube_serve_stop(probes[0]);
	kube_serve_stop(probes[1]);
	kube_leader_free(rt->leader);   /* releases the Lease if held */
	rt->leader = NULL;
	if (stack_kind.inf)
		kube_informer_request_stop(stack_kind.inf);
	for (size_t i = 0; i < NSOURCES; i++)
		if (source_kinds[i].inf)
			kube_informer_request_stop(source_kinds[i].inf);
	if (stack_kind.inf)
		kube_informer_stop(stack_kind.inf);
	for (size_t i = 0; i < NSOURCES; i++)
		if (source_kinds[i].inf)
			kube_informer_stop(source_kinds[i].inf);
	if (rt->cache_dump)
		write_cache_dump(rt->cache_dump);
	kube_informer_free(stack_kind.inf);
	stack_kind.inf = NULL;
	for (size_t i = 0; i < NSOURCES; i++) {
		kube_informer_free(source_kinds[i].inf);
		source_kinds[i].inf = NULL;
	}
	kube_queue_free(rt->queue);
	kube_recorder_free(rt->recorder);
	kube_client_free(rt->client);
}

static int start_probes(struct run *rt, const struct run_flags *f, struct kube_serve *probes[2],
    struct err *e)
{
	probes[0] = probes[1] = NULL;
	if (f->health_addr && strcmp(f->health_addr, "0") != 0 && *f->health_addr) {
		if ((probes[0] = kube_serve_start(f->health_addr, ready, metrics, rt, e)) == NULL)
			return -1;
		if (kube_serve_port(probes[0]) > 0) {
			char port[16];
			snprintf(port, sizeof(port), "%d", kube_serve_port(probes[0]));
			log_info("serving health probes", "port", port, NULL);
		}
	}
	/* The same address twice means one server for both (the handler serves
	 * every path), unless the port is 0, which asks for two free ports. */
	if (f->metrics_addr && strcmp(f->metrics_addr, "0") != 0 && *f->metrics_addr &&
	    (probes[0] == NULL || strcmp(f->metrics_addr, f->health_addr) != 0 ||
	    strcmp(strrchr(f->metrics_addr, ':') ? strrchr(f->metrics_addr, ':') : "", ":0") == 0)) {
		if ((probes[1] = kube_serve_start(f->metrics_addr, ready, metrics, rt, e)) == NULL)
			return -1;
		{
			char port[16];
			snprintf(port, sizeof(port), "%d", kube_serve_port(probes[1]));
			log_info("serving metrics", "port", port, NULL);
		}
	}
	return 0;
}

int cmd_run(int argc, char **argv)
{
	struct run_flags f;
	struct run rt;
	struct kube_config *cfg = NULL;
	struct kube_serve *probes[2] = { NULL, NULL };
	struct err e;
	sigset_t sigs;
	int rc, exit_code = 0;
	int64_t t0 = kube_mono_ms();

	rc = parse_flags(argc, argv, &f);
	if (rc >= 0)
		return rc;
	memset(&rt, 0, sizeof(rt));
	rt.cache_dump = f.cache_dump;

	/* Signals are taken synchronously by the main thread; every thread
	 * started from here on inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	if (kube_config_load(f.kubeconfig, &cfg, &e) < 0) {
		log_error("cannot load the Kubernetes configuration", "error", e.msg, NULL);
		return 1;
	}
	log_info("kubernetes configuration loaded", "source", cfg->source, "server", cfg->server, NULL);
	rt.client = kube_client_new(cfg, &e);
	if (rt.client == NULL) {
		log_error("cannot create the Kubernetes client", "error", e.msg, NULL);
		return 1;
	}
	rt.queue = kube_queue_new(NULL);
	{
		char host[256] = "";
		gethostname(host, sizeof(host) - 1);
		rt.recorder = kube_recorder_new(rt.client, "pulumi-controller", host);
	}

	if ((rc = discover(rt.client, &stack_kind, &e)) != 0) {
		log_error(rc < 0 ? "cannot discover the Stack API" : "the server does not serve stacks.pulumi.com/v1; install the CRD",
		    "error", rc < 0 ? e.msg : "", NULL);
		stop_all(&rt, probes);
		return 1;
	}
	stack_kind.inf = make_informer(&rt, &stack_kind, &f, f.selector);
	kube_informer_add_index(stack_kind.inf, "source", stack_source_index);
	kube_informer_add_handler(stack_kind.inf, on_stack, &rt);
	for (size_t i = 0; i < NSOURCES; i++) {
		struct kind *k = &source_kinds[i];
		rc = discover(rt.client, k, &e);
		if (rc < 0) {
			log_error("cannot discover the Flux source APIs", "kind", k->res[0].kind, "error", e.msg, NULL);
			stop_all(&rt, probes);
			return 1;
		}
		if (rc == 1) {
			log_info("kind not served by the API server; not watching it", "kind", k->res[0].kind,
			    "group", k->res[0].group, NULL);
			continue;
		}
		k->inf = make_informer(&rt, k, &f, NULL);
		kube_informer_add_handler(k->inf, on_source, &rt);
	}
	if (start_probes(&rt, &f, probes, &e) < 0) {
		log_error("cannot serve probes", "error", e.msg, NULL);
		stop_all(&rt, probes);
		return 1;
	}
	if (kube_informer_start(stack_kind.inf, &e) < 0)
		goto fail;
	for (size_t i = 0; i < NSOURCES; i++)
		if (source_kinds[i].inf && kube_informer_start(source_kinds[i].inf, &e) < 0)
			goto fail;

	if (f.leader_elect) {
		struct kube_leader_opts lo = {
			f.le_ns ? f.le_ns : kube_client_config(rt.client)->namespace, f.le_id, NULL, f.lease_ms, f.renew_ms, f.retry_ms,
			on_started_leading, on_stopped_leading, on_new_leader, &rt,
		};
		rt.lease_ns = lo.namespace;
		rt.lease_name = lo.name;
		rt.leader = kube_leader_new(rt.client, &lo, &e);
		if (rt.leader == NULL || kube_leader_start(rt.leader, &e) < 0)
			goto fail;
		log_info("leader election: waiting for the lease", "identity", kube_leader_identity(rt.leader),
		    "lease", f.le_id, NULL);
	} else {
		atomic_store(&rt.became_leader, 1);
	}

	{
		int synced_logged = 0;
		for (;;) {
			struct timespec ts = { 0, 200 * 1000000L };
			int sig = sigtimedwait(&sigs, NULL, &ts);
			if (sig == SIGTERM || sig == SIGINT) {
				log_info("shutting down", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT", NULL);
				break;
			}
			if (sig == SIGUSR1 && rt.cache_dump)
				write_cache_dump(rt.cache_dump);
			if (!synced_logged && ready(NULL)) {
				char ms[32], n[32];
				snprintf(ms, sizeof(ms), "%lld", (long long)(kube_mono_ms() - t0));
				snprintf(n, sizeof(n), "%zu", kube_informer_count(stack_kind.inf));
				log_info("caches synced", "stacks", n, "ms", ms, NULL);
				synced_logged = 1;
			}
			if (atomic_load(&rt.lost_lease)) {
				exit_code = 1;
				break;
			}
			if (synced_logged && rt.workers == NULL && atomic_load(&rt.became_leader)) {
				rt.workers = kube_workers_start(rt.queue, f.concurrency, reconciler, &e);
				if (rt.workers == NULL)
					goto fail;
				log_info("workers started", NULL);
			}
		}
	}
	if (kube_workers_stop(rt.workers, f.grace_ms, 0) < 0) {
		/* Do not release the Lease: work is still running in this process. */
		log_error("running work did not stop within the grace period; exiting", NULL);
		return 1;
	}
	stop_all(&rt, probes);   /* the probes first: /metrics reads the workers */
	kube_workers_free(rt.workers);
	return exit_code;
fail:
	log_error("cannot start", "error", e.msg, NULL);
	kube_workers_stop(rt.workers, f.grace_ms, 0);
	stop_all(&rt, probes);
	kube_workers_free(rt.workers);
	return 1;
}
