/*
 * cmd_run.c - `pulumi-controller run`: the controller process.
 *
 * Wiring only: loads the Kubernetes config, makes the client, work queue
 * and Event recorder, hands them to the Stack controller (src/stack/, which
 * owns the informers, the change filters and the reconciler), serves the
 * health and metrics endpoints, optionally waits to be elected leader, and
 * runs --concurrency workers that call the Stack reconciler.
 *
 * Signals: SIGTERM/SIGINT stop taking work, wait up to --shutdown-grace for
 * running updates (then cancel them the way the CLI expects), release the
 * Lease, and exit 0.  A lost Lease interrupts running updates at once, so no
 * two replicas ever update one stack.  SIGUSR1 writes the cache summary to
 * --cache-dump (also written at exit), which the tests compare with the
 * server's state.
 */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/duration.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/proc.h"
#include "base/url.h"
#include "cli/cli.h"
#include "fluxsource/fluxsource.h"
#include "kube/kube.h"
#include "stack/stack.h"

/* How long cancelled updates may take to end after the shutdown grace. */
#define STOP_CANCEL_MS 35000L
/* How often unused artifacts and workspaces are looked for. */
#define GC_INTERVAL_MS (10L * 60 * 1000)

struct run {
	struct kube_client *client;
	struct kube_queue *queue;
	struct kube_leader *leader;
	struct kube_recorder *recorder;   /* Events (core/v1) */
	struct stack_ctl *stacks;
	struct flux_notify *notify;       /* --events-addr; NULL when off */
	const char *lease_ns, *lease_name;
	char lease_ref[512];              /* "namespace/name", for the Stacks' status */
	/* Read by the metrics thread: set once the workers run, cleared only
	 * after the probe servers stopped. */
	_Atomic(struct kube_workers *) workers;
	const char *cache_dump;
	atomic_int lost_lease;
	atomic_int became_leader;
	atomic_int leader_event_due;
};

static void write_cache_dump(struct run *rt)
{
	if (rt->stacks == NULL || rt->cache_dump == NULL)
		return;
	if (stack_ctl_dump_cache(rt->stacks, rt->cache_dump) < 0)
		log_error("cannot write the cache dump", "path", rt->cache_dump, NULL);
	else
		log_info("cache dumped", "path", rt->cache_dump, NULL);
}

/* ------------------------------------------------------------ probes */

/*
 * Ready once every cache has synced, leader or not.  A standby replica is
 * ready too, as controller-runtime's managers are (their readiness does not
 * depend on the Lease): readiness gates Service endpoints and rollouts, and
 * a standby held unready would stall every rolling update of a Deployment
 * with more than one replica (the new pod never gets the Lease while the old
 * one holds it, so it never becomes ready, so the old one is never
 * replaced).  Who leads is in pulumi_controller_leader.
 */
static int ready(void *ud)
{
	struct run *rt = ud;

	return rt->stacks != NULL && stack_ctl_synced(rt->stacks);
}

/* Everything is read from atomics or under short mutexes (the queue's, a
 * metric family's): a scrape never waits for a reconcile, a pulumi call or
 * an API call. */
static void metrics(void *ud, FILE *out)
{
	struct run *rt = ud;
	struct kube_workers *w = atomic_load(&rt->workers);

	stack_ctl_metrics(rt->stacks, out);
	kube_queue_write_metrics(rt->queue, out);
	kube_workers_write_metrics(w, out);
	metrics_write_header(out, "pulumi_controller_workqueue_depth",
	    "Stacks waiting in the work queue (workqueue_depth{name=\"stack\"}).", METRIC_GAUGE);
	metrics_write_sample(out, "pulumi_controller_workqueue_depth", 0, NULL, NULL, (double)kube_queue_len(rt->queue));
	metrics_write_header(out, "pulumi_controller_leader",
	    "1 while this replica holds the Lease (or leader election is off), else 0.", METRIC_GAUGE);
	metrics_write_sample(out, "pulumi_controller_leader", 0, NULL, NULL,
	    rt->leader ? kube_leader_is_leader(rt->leader) : 1);
	metrics_write_header(out, "pulumi_controller_ready", "1 once every cache has synced (/readyz), else 0.",
	    METRIC_GAUGE);
	metrics_write_sample(out, "pulumi_controller_ready", 0, NULL, NULL, ready(rt));
	metrics_write(metrics_default(), out);
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

/* Called on the leader's renew path: nothing slow may run here (the
 * Event is recorded by the main loop), or the Lease would lapse. */
static void on_started_leading(void *ud)
{
	struct run *rt = ud;

	atomic_store(&rt->leader_event_due, 1);
	atomic_store(&rt->became_leader, 1);
}

/* Another replica may take over at once: every running pulumi operation
 * of ours is interrupted now, not after the main loop notices. */
static void on_stopped_leading(void *ud)
{
	struct run *rt = ud;

	atomic_store(&rt->lost_lease, 1);
	if (rt->stacks != NULL)
		stack_ctl_interrupt(rt->stacks);
}

static void on_new_leader(void *ud, const char *id)
{
	(void)ud;
	log_info("leader election: current leader", "identity", id, NULL);
}

/* ------------------------------------------------------------ command */

struct run_flags {
	const char *kubeconfig, *le_id, *le_ns, *metrics_addr, *health_addr;
	const char *level, *format, *cache_dump;
	const char *events_addr;
	long events_queue;
	int leader_elect, concurrency;
	long lease_ms, renew_ms, retry_ms, grace_ms, watch_idle_ms, discovery_ms, job_ttl_ms;
	struct stack_opts so;
};

/* The one run of this process: the flags' table points into it. */
static struct run_flags flags;

static int runner_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (strcmp(arg, "local") != 0 && strcmp(arg, "job") != 0) {
		cli_errorf("%s: --runner: expected local or job", cmd);
		return -1;
	}
	flags.so.runner_job = strcmp(arg, "job") == 0;
	return 0;
}

static int events_addr_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	struct err e;

	if (flux_notify_check_url(arg, &e) < 0) {
		cli_errorf("%s: --events-addr: %s", cmd, e.msg);
		return -1;
	}
	flags.events_addr = arg;
	return 0;
}

/* Every duration flag of run: Go-style, more than zero. */
#define RUN_DURATION(l, v, h) \
	CLI_DURATION(l, v, 1, LONG_MAX, "D", h, "--" l ": \"%s\" is not a positive duration (e.g. 15s)")
#define RUN_COUNT(l, v, hi, h) CLI_NUMBER(l, v, 1, hi, "N", h, "--" l ": expected 1.." #hi)

static const char run_usage[] =
	    "Usage: pulumi-controller run [flags]\n"
	    "\n"
	    "Runs the controller: keeps every Stack (pulumi.com/v1) in the state its program\n"
	    "declares.  It caches Stacks, the Flux sources GitRepository, OCIRepository and\n"
	    "Bucket, and (metadata only) the ConfigMaps and Secrets Stacks refer to; queues\n"
	    "the Stacks each change concerns, and reconciles them with --concurrency workers\n"
	    "that run the pulumi CLI (docs/run.md, docs/stack-api.md).\n"
	    "\n"
	    "Flags:\n"
	    CLI_FLAGS
	    "\n"
	    "Durations are Go-style: 500ms, 15s, 1m30s.  Exit status: 0 after SIGTERM,\n"
	    "1 on failure or when the Lease is lost, 2 on bad usage.\n";

static const struct cli_opt run_opts[] = {
	CLI_STRING(0, "kubeconfig", &flags.kubeconfig, "F", "kubeconfig file(s) (default: $KUBECONFIG, in-cluster,\n"
	    "then ~/.kube/config)"),
	CLI_STRING(0, "namespace", &flags.so.namespace, "NS", "watch only NS (default: all namespaces)"),
	CLI_STRING(0, "watch-label-selector", &flags.so.label_selector, "S",
	    "only Stacks matching the label selector S (sharding)"),
	{ .kind = CLI_OPT_STRING, .name = "watch-configs-label-selector", .target = &flags.so.configs_selector,
	  .argh = "S", .flags = CLI_EMPTY_IS_UNSET, .help = "only ConfigMaps/Secrets matching S (Flux's\n"
	  "convention: reconcile.fluxcd.io/watch=Enabled;\ndefault: all)" },
	RUN_DURATION("watch-idle-timeout", &flags.watch_idle_ms, "resume a watch that received nothing for D\n"
	    "(default 2m: two of the server's bookmarks)"),
	CLI_STRING(0, "storage-path", &flags.so.storage_path, "DIR", "artifact store, workspaces and PULUMI_HOME\n"
	    "(default /var/lib/pulumi-controller)"),
	CLI_STRING(0, "pulumi-bin", &flags.so.pulumi_bin, "PATH", "the pulumi CLI (default: pulumi from PATH)"),
	CLI_STRING(0, "pulumi-home", &flags.so.pulumi_home, "DIR", "PULUMI_HOME shared by all Stacks (default\n"
	    "STORAGE/pulumi-home)"),
	RUN_DURATION("update-timeout", &flags.so.update_timeout_ms,
	    "one update, unless spec.timeout says (default 30m)"),
	CLI_BYTES("max-artifact-size", &flags.so.max_artifact_bytes, "BYTES",
	    "one artifact download (default 512Mi; -1: none)",
	    "--max-artifact-size: \"%s\" is not a size (e.g. 512Mi, -1)"),
	RUN_DURATION("requeue-dependency", &flags.so.requeue_dependency_ms,
	    "retry while a source or reference is missing\n(default 30s)"),
	RUN_DURATION("discovery-interval", &flags.discovery_ms, "look again this often for Flux kinds and\n"
	    "Program the server did not serve (installed\nlater; default 30s)"),
	RUN_COUNT("max-update-failures", &flags.so.max_failures, 1000,
	    "consecutive failures before Stalled (default 5)"),
	CLI_CALLBACK(0, "runner", NULL, "local|job", "where updates run by default: here, or as a\n"
	    "Kubernetes Job per update (default local;\nspec.runner.type overrides it per Stack)", runner_flag),
	{ .kind = CLI_OPT_STRING, .name = "job-image", .target = &flags.so.job_image, .argh = "IMAGE",
	  .flags = CLI_EMPTY_IS_UNSET, .help = "the image the Jobs run (this controller's own);\n"
	  "required for --runner job or any Stack with\nspec.runner.type Job" },
	RUN_COUNT("max-concurrent-jobs", &flags.so.max_concurrent_jobs, 100000,
	    "Jobs running at once for this shard's Stacks\n(default 10; the rest wait for a slot)"),
	{ .kind = CLI_OPT_STRING, .name = "job-plugins-dir", .target = &flags.so.job_plugins_dir, .argh = "DIR",
	  .flags = CLI_EMPTY_IS_UNSET, .help = "Pulumi plugins the job image carries at DIR\n"
	  "(run-update links them into its PULUMI_HOME)" },
	RUN_DURATION("job-ttl", &flags.job_ttl_ms, "finished Jobs are deleted after D (default 1h)"),
	RUN_DURATION("job-start-timeout", &flags.so.job_start_timeout_ms,
	    "a Job whose pod has not started after D fails\nits update with the pod's reason (default 5m)"),
	CLI_BOOL(0, "leader-elect", &flags.leader_elect, "run only while holding the Lease"),
	CLI_STRING(0, "leader-election-id", &flags.le_id, "ID", "Lease name (default pulumi-controller-leader-election)"),
	CLI_STRING(0, "leader-election-namespace", &flags.le_ns, "NS", "Lease namespace (default: the config's namespace)"),
	RUN_DURATION("lease-duration", &flags.lease_ms, "default 15s"),
	RUN_DURATION("renew-deadline", &flags.renew_ms, "default 10s"),
	RUN_DURATION("retry-period", &flags.retry_ms, "default 2s"),
	RUN_COUNT("concurrency", &flags.concurrency, 1024, "reconcile workers (default 4)"),
	RUN_DURATION("shutdown-grace", &flags.grace_ms, "wait for running updates on SIGTERM before\n"
	    "cancelling them (default 30s)"),
	CLI_STRING(0, "metrics-addr", &flags.metrics_addr, "ADDR", "Prometheus /metrics on ADDR (default :8080; 0 disables)"),
	CLI_STRING(0, "health-addr", &flags.health_addr, "ADDR", "/healthz and /readyz on ADDR (default :9440; 0 disables)"),
	CLI_STRING(0, "cache-dump", &flags.cache_dump, "F", "write a cache summary to F on SIGUSR1 and at exit"),
	CLI_CALLBACK(0, "events-addr", NULL, "URL", "also post every Stack event to Flux's\n"
	    "notification-controller at URL, e.g.\nhttp://notification-controller.flux-system.svc./\n"
	    "(docs/notifications.md; default: off)", events_addr_flag),
	RUN_COUNT("events-queue-size", &flags.events_queue, 1000000, "events waiting to be posted at most; more are\n"
	    "dropped and counted (default 1024)"),
	CLI_LOG_OPTS(&flags.level, &flags.format, "info", "json"),
	CLI_HELP("show this help"),
	CLI_END,
};

static const struct cli_cmd run_cmd = { "run", run_usage, run_opts, 33, CLI_UNKNOWN_USAGE };

static void set_defaults(struct run_flags *f)
{
	*f = (struct run_flags){
		.le_id = "pulumi-controller-leader-election",
		.metrics_addr = ":8080", .health_addr = ":9440",
		.level = "info", .format = "json",
		.concurrency = 4,
		.lease_ms = 15000, .renew_ms = 10000, .retry_ms = 2000, .grace_ms = 30000,
		.watch_idle_ms = 120000, .discovery_ms = 30000,
		.events_queue = FLUX_NOTIFY_DEFAULT_QUEUE,
	};
	stack_opts_default(&f->so);
	f->job_ttl_ms = f->so.job_ttl_s * 1000;
}

/* What no single flag can check, and the values derived from the flags;
 * CLI_GO_ON or EXIT_USAGE. */
static int check_flags(struct run_flags *f)
{
	if (f->so.runner_job && f->so.job_image == NULL) {
		fprintf(stderr, "run: --runner job needs --job-image (the image the update Jobs run)\n");
		return EXIT_USAGE;
	}
	f->so.job_ttl_s = (f->job_ttl_ms + 999) / 1000;
	if (f->leader_elect && !(f->lease_ms > f->renew_ms && f->renew_ms > f->retry_ms * 12 / 10)) {
		fprintf(stderr, "run: need --lease-duration > --renew-deadline > 1.2 x --retry-period\n");
		return EXIT_USAGE;
	}
	/* whole seconds: libcurl's stall check counts seconds */
	f->so.watch_idle_timeout_s = f->watch_idle_ms < 1000 ? 1 : f->watch_idle_ms / 1000;
	if (cli_setup_logging(f->level, f->format) < 0)
		return EXIT_USAGE;
	return CLI_GO_ON;
}

/* The flags into `flags`: CLI_GO_ON, or the exit status. */
static int parse_flags(int argc, char **argv)
{
	int operand, rc;

	set_defaults(&flags);
	if ((rc = cli_parse(&run_cmd, argc, argv, &operand)) != CLI_GO_ON)
		return rc;
	if (operand < argc) {
		fprintf(stderr, "run: unexpected argument \"%s\"\n", argv[operand]);
		return EXIT_USAGE;
	}
	return check_flags(&flags);
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

/* The forwarder of Stack events to notification-controller; stack_event
 * finds it as the process's default. */
static int start_notify(struct run *rt, const struct run_flags *f, const char *host, struct err *e)
{
	struct flux_notify_opts no;
	char safe[URL_LOG_MAX];

	flux_notify_opts_default(&no);
	no.url = f->events_addr;
	no.instance = host;
	no.queue_size = (size_t)f->events_queue;
	if ((rt->notify = flux_notify_start(&no, e)) == NULL)
		return err_prefix(e, "--events-addr: "), -1;
	flux_notify_set_default(rt->notify);
	log_info("forwarding Stack events to notification-controller", "url",
	    url_for_log(f->events_addr, safe, sizeof(safe)), NULL);
	return 0;
}

/* Everything up to the point where the main loop takes over. */
static int start(struct run *rt, struct run_flags *f, struct kube_serve *probes[2], struct err *e)
{
	struct kube_config *cfg = NULL;
	char host[256] = "";

	/* Plugins a killed CLI leaves behind are re-parented to us (we are
	 * PID 1 in a container, or made their reaper here) and reaped. */
	if (proc_become_subreaper(e) < 0)
		log_warn("cannot become the reaper of orphaned plugins", "error", e->msg, NULL);
	err_clear(e);
	if (kube_config_load(f->kubeconfig, &cfg, e) < 0)
		return err_prefix(e, "cannot load the Kubernetes configuration: "), -1;
	{
		char srv[512];
		log_info("kubernetes configuration loaded", "source", cfg->source, "server",
		    kube_config_server_for_log(cfg, srv, sizeof(srv)), NULL);
	}
	if ((rt->client = kube_client_new(cfg, e)) == NULL)
		return err_prefix(e, "cannot create the Kubernetes client: "), -1;
	{
		struct kube_queue_opts qo = { 0, 0, 0, 0, "stack" };
		rt->queue = kube_queue_new(&qo);
	}
	gethostname(host, sizeof(host) - 1);
	rt->recorder = kube_recorder_new(rt->client, "pulumi-controller", host);
	if (f->events_addr != NULL && start_notify(rt, f, host, e) < 0)
		return -1;
	if (f->leader_elect) {
		/* Recorded with each update: a lock left by an earlier holder of
		 * this Lease is recoverable once this process holds it. */
		const char *ns = f->le_ns ? f->le_ns : kube_client_config(rt->client)->namespace;
		snprintf(rt->lease_ref, sizeof(rt->lease_ref), "%s/%s", ns ? ns : "", f->le_id);
		f->so.lease = rt->lease_ref;
		/* The pod that lost this Lease interrupts its updates at its renew
		 * deadline and gives them STOP_CANCEL_MS to end. */
		f->so.lock_grace_ms = STOP_CANCEL_MS + 10000;
	}
	if ((rt->stacks = stack_ctl_new(rt->client, rt->queue, rt->recorder, &f->so, e)) == NULL)
		return -1;
	if (stack_ctl_watch(rt->stacks, e) < 0) {
		if (e->code == ERR_NOTFOUND)   /* the message says what to do */
			log_error("the server does not serve stacks.pulumi.com/v1; install the CRD", "error", e->msg,
			    NULL);
		return -1;
	}
	if (start_probes(rt, f, probes, e) < 0)
		return -1;
	if (!f->leader_elect) {
		atomic_store(&rt->became_leader, 1);
		return 0;
	}
	{
		struct kube_leader_opts lo = {
			f->le_ns ? f->le_ns : kube_client_config(rt->client)->namespace, f->le_id, NULL,
			f->lease_ms, f->renew_ms, f->retry_ms, on_started_leading, on_stopped_leading, on_new_leader, rt,
		};
		rt->lease_ns = lo.namespace;
		rt->lease_name = lo.name;
		rt->leader = kube_leader_new(rt->client, &lo, e);
		if (rt->leader == NULL || kube_leader_start(rt->leader, e) < 0)
			return -1;
		log_info("leader election: waiting for the lease", "identity", kube_leader_identity(rt->leader),
		    "lease", f->le_id, NULL);
	}
	return 0;
}

/* Waits for a signal, the caches, the Lease; starts the workers.  Returns
 * the exit status the process should have. */
static int main_loop(struct run *rt, struct run_flags *f, const sigset_t *sigs, int64_t t0, struct err *e)
{
	int synced_logged = 0, kinds_missing = 1;
	int64_t last_gc = clock_mono_ms(), last_discovery = clock_mono_ms();

	for (;;) {
		struct timespec ts = { 0, 200 * 1000000L };
		int sig = sigtimedwait(sigs, NULL, &ts);
		if (sig == SIGTERM || sig == SIGINT) {
			log_info("shutting down", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT", NULL);
			return 0;
		}
		if (sig == SIGUSR1)
			write_cache_dump(rt);
		if (atomic_exchange(&rt->leader_event_due, 0))
			record_leader_event(rt);
		if (!synced_logged && stack_ctl_synced(rt->stacks)) {
			char ms[32], n[32];
			snprintf(ms, sizeof(ms), "%lld", (long long)(clock_mono_ms() - t0));
			snprintf(n, sizeof(n), "%zu", stack_ctl_stack_count(rt->stacks));
			log_info("caches synced", "stacks", n, "ms", ms, NULL);
			synced_logged = 1;
		}
		if (atomic_load(&rt->workers) != NULL && clock_mono_ms() - last_gc > GC_INTERVAL_MS) {
			stack_ctl_gc(rt->stacks);
			last_gc = clock_mono_ms();
		}
		if (kinds_missing && clock_mono_ms() - last_discovery > f->discovery_ms) {
			kinds_missing = stack_ctl_rediscover(rt->stacks);
			last_discovery = clock_mono_ms();
		}
		if (atomic_load(&rt->lost_lease)) {
			/* Another replica may take over at once: nothing of ours may
			 * go on updating a stack. */
			stack_ctl_interrupt(rt->stacks);
			return 1;
		}
		if (synced_logged && atomic_load(&rt->workers) == NULL && atomic_load(&rt->became_leader)) {
			struct kube_workers *w;
			stack_ctl_leading(rt->stacks);
			w = kube_workers_start(rt->queue, f->concurrency,
			    stack_ctl_reconciler(rt->stacks), e);
			if (w == NULL)
				return -1;
			atomic_store(&rt->workers, w);
			log_info("workers started", NULL);
		}
	}
}

/* In order: the workers (cancelling running updates once the grace is
 * over), the probe servers (their metrics read the workers), the Lease,
 * the informers, and the rest.  No thread of ours runs after this. */
static int stop_all(struct run *rt, struct kube_serve *probes[2], long grace_ms)
{
	struct kube_workers *w = atomic_load(&rt->workers);

	/* After the grace, the workers interrupt running updates (SIGINT, so
	 * the CLI releases its lock) and wait this much longer: the driver's
	 * SIGINT, SIGTERM, SIGKILL spacing. */
	if (w != NULL && kube_workers_stop(w, grace_ms, STOP_CANCEL_MS) < 0) {
		/* Do not release the Lease: work is still running in this process. */
		log_error("running work did not stop after it was cancelled; exiting", NULL);
		return -1;
	}
	/* The probe servers read the workers' counters: they go first. */
	kube_serve_stop(probes[0]);
	kube_serve_stop(probes[1]);
	atomic_store(&rt->workers, NULL);
	kube_workers_free(w);
	kube_leader_free(rt->leader);   /* releases the Lease if held */
	rt->leader = NULL;
	if (rt->stacks)
		stack_ctl_unwatch(rt->stacks);
	write_cache_dump(rt);
	/* No worker runs now, so nothing sends; what is queued gets a bounded
	 * drain. */
	flux_notify_set_default(NULL);
	flux_notify_stop(rt->notify, FLUX_NOTIFY_DEFAULT_DRAIN_MS);
	rt->notify = NULL;
	stack_ctl_free(rt->stacks);
	kube_queue_free(rt->queue);
	kube_recorder_free(rt->recorder);
	kube_client_free(rt->client);
	return 0;
}

int cmd_run(int argc, char **argv)
{
	struct run_flags *f = &flags;
	struct run rt;
	struct kube_serve *probes[2] = { NULL, NULL };
	struct err e;
	sigset_t sigs;
	int rc;
	int64_t t0 = clock_mono_ms();

	if ((rc = parse_flags(argc, argv)) != CLI_GO_ON)
		return rc;
	memset(&rt, 0, sizeof(rt));
	rt.cache_dump = f->cache_dump;
	/* Signals are taken synchronously by the main thread; every thread
	 * started from here on inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	err_clear(&e);
	if (start(&rt, f, probes, &e) < 0)
		rc = -1;
	else
		rc = main_loop(&rt, f, &sigs, t0, &e);
	if (rc < 0)
		log_error("cannot run", "error", e.msg, NULL);
	if (stop_all(&rt, probes, f->grace_ms) < 0) {
		/* Threads of ours still run: no library cleanup (main's
		 * http_global_cleanup) may happen under them, so exit here. */
		fflush(NULL);
		_exit(1);
	}
	return rc < 0 ? 1 : rc;
}
