/*
 * kube_rt_tool.c - a test driver for the controller runtime of src/kube/
 * (leader election and informers) against the API-server emulator, the real
 * kube-apiserver or a hostile server a test runs on loopback
 * (tests/e2e/test_kube_runtime_hardening.py):
 *
 *   kube_rt_tool leader KUBECONFIG NAMESPACE LEASE LEASE_MS RENEW_MS RETRY_MS BLOCK_MS [NEW_MS]
 *       campaigns for the Lease; on_started prints "started", then blocks
 *       for BLOCK_MS (a slow callback, as an API call to a slow server is)
 *       and prints "callback-returned"; "lost" when the Lease is lost.
 *       With NEW_MS, on_new_leader prints "new-leader", blocks NEW_MS and
 *       prints "new-leader-returned".
 *       Runs until stdin ends, then stops (releasing the Lease).
 *   kube_rt_tool informer KUBECONFIG GROUP VERSION RESOURCE KIND NAMESPACED [FLAGS]
 *       one informer on all namespaces; FLAGS: metadata-only, page=N,
 *       max-pages=N.
 *       Commands on stdin, one answer line each on stdout:
 *         wait-synced MS   "synced" or "not-synced"
 *         dump             the cache as one JSON array
 *         stats            {"lists":..,"watches":..,"events":..,"relists_410":..,"errors":..}
 *       Stops at the end of stdin.
 *   kube_rt_tool serve
 *       the health and metrics server on 127.0.0.1, a free port (printed as
 *       "port N"), until stdin ends.
 *
 * Log lines (JSON) go to stderr, so a test can check what was logged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/http.h"
#include "base/log.h"
#include "kube/kube.h"

static long block_ms, new_leader_ms;

static void say(const char *line)
{
	puts(line);
	fflush(stdout);
}

static void on_started(void *ud)
{
	(void)ud;
	say("started");
	usleep((useconds_t)block_ms * 1000);
	say("callback-returned");
}

static void on_new_leader(void *ud, const char *id)
{
	(void)ud; (void)id;
	if (new_leader_ms <= 0)
		return;
	say("new-leader");
	usleep((useconds_t)new_leader_ms * 1000);
	say("new-leader-returned");
}

static void on_stopped(void *ud)
{
	(void)ud;
	say("lost");
}

static void wait_stdin_end(void)
{
	char line[256];

	while (fgets(line, sizeof(line), stdin) != NULL)
		;
}

static int leader(struct kube_client *c, char **argv)
{
	struct kube_leader_opts o = { 0 };
	struct kube_leader *l;
	struct err e;

	o.namespace = argv[0];
	o.name = argv[1];
	o.lease_ms = atol(argv[2]);
	o.renew_ms = atol(argv[3]);
	o.retry_ms = atol(argv[4]);
	block_ms = atol(argv[5]);
	new_leader_ms = argv[6] ? atol(argv[6]) : 0;
	o.on_started = on_started;
	o.on_new_leader = on_new_leader;
	o.on_stopped = on_stopped;
	l = kube_leader_new(c, &o, &e);
	if (l == NULL || kube_leader_start(l, &e) < 0) {
		fprintf(stderr, "FAIL leader: %s\n", e.msg);
		kube_leader_free(l);
		return 1;
	}
	wait_stdin_end();
	kube_leader_free(l);
	say("stopped");
	return 0;
}

struct dump_ctx {
	struct kube_informer *inf;
	cJSON *arr;
};

static void dump_one(void *ud, const char *key, const char *rv)
{
	struct dump_ctx *d = ud;
	(void)rv;
	cJSON_AddItemToArray(d->arr, cJSON_CreateString(key));
}

/* The cache: keys under the lock (kube_informer_each), objects after. */
static void dump(struct kube_informer *inf)
{
	struct dump_ctx d = { inf, cJSON_CreateArray() };
	cJSON *out = cJSON_CreateArray(), *k;
	char *text;

	kube_informer_each(inf, dump_one, &d);
	cJSON_ArrayForEach(k, d.arr) {
		const char *key = k->valuestring, *slash = strchr(key, '/');
		char ns[256] = "";
		cJSON *obj;
		if (slash != NULL)
			snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
		obj = kube_informer_get(inf, ns, slash ? slash + 1 : key);
		if (obj != NULL)
			cJSON_AddItemToArray(out, obj);
	}
	text = cJSON_PrintUnformatted(out);
	say(text);
	free(text);
	cJSON_Delete(out);
	cJSON_Delete(d.arr);
}

static void stats(struct kube_informer *inf)
{
	struct kube_informer_stats st;
	char line[256];

	kube_informer_stats(inf, &st);
	snprintf(line, sizeof(line), "{\"lists\":%llu,\"watches\":%llu,\"events\":%llu,"
	    "\"relists_410\":%llu,\"errors\":%llu}", (unsigned long long)st.lists,
	    (unsigned long long)st.watches, (unsigned long long)st.events,
	    (unsigned long long)st.relists_410, (unsigned long long)st.errors);
	say(line);
}

static int informer(struct kube_client *c, int argc, char **argv)
{
	struct kube_resource r = { argv[0], argv[1], argv[2], argv[3], atoi(argv[4]) };
	struct kube_informer_opts o = { 0 };
	struct kube_informer *inf;
	struct err e;
	char line[256];

	if (strcmp(r.group, "core") == 0)
		r.group = "";
	for (int i = 5; i < argc; i++) {
		if (strcmp(argv[i], "metadata-only") == 0)
			o.metadata_only = 1;
		else if (strncmp(argv[i], "page=", 5) == 0)
			o.page_size = atol(argv[i] + 5);
		else if (strncmp(argv[i], "max-pages=", 10) == 0)
			o.max_list_pages = atol(argv[i] + 10);
	}
	inf = kube_informer_new(c, &r, &o);
	if (kube_informer_start(inf, &e) < 0) {
		fprintf(stderr, "FAIL informer: %s\n", e.msg);
		kube_informer_free(inf);
		return 1;
	}
	while (fgets(line, sizeof(line), stdin) != NULL) {
		if (strncmp(line, "wait-synced ", 12) == 0)
			say(kube_informer_wait_synced(inf, atol(line + 12)) == 0 ? "synced" : "not-synced");
		else if (strcmp(line, "dump\n") == 0)
			dump(inf);
		else if (strcmp(line, "stats\n") == 0)
			stats(inf);
		else
			say("unknown command");
	}
	kube_informer_free(inf);
	return 0;
}

static void metrics(void *ud, FILE *out)
{
	(void)ud;
	fputs("# TYPE up gauge\nup 1\n", out);
}

static int serve(void)
{
	struct err e;
	struct kube_serve *s = kube_serve_start("127.0.0.1:0", NULL, metrics, NULL, &e);
	char line[64];

	if (s == NULL) {
		fprintf(stderr, "FAIL serve: %s\n", e.msg);
		return 1;
	}
	snprintf(line, sizeof(line), "port %d", kube_serve_port(s));
	say(line);
	wait_stdin_end();
	kube_serve_stop(s);
	return 0;
}

int main(int argc, char **argv)
{
	struct kube_config *cfg;
	struct kube_client *c;
	struct err e;
	int rc = 2;

	log_setup(LOG_DEBUG, LOG_JSON, stderr);
	if (argc == 2 && strcmp(argv[1], "serve") == 0)
		return serve();
	if (argc < 3) {
		fprintf(stderr, "usage: kube_rt_tool leader|informer KUBECONFIG ... | serve\n");
		return 2;
	}
	if (http_global_init(&e) < 0 || kube_config_kubeconfig(argv[2], NULL, &cfg, &e) < 0) {
		fprintf(stderr, "FAIL config: %s\n", e.msg);
		return 1;
	}
	c = kube_client_new(cfg, &e);
	if (c == NULL) {
		fprintf(stderr, "FAIL client: %s\n", e.msg);
		return 1;
	}
	if (strcmp(argv[1], "leader") == 0 && (argc == 9 || argc == 10))
		rc = leader(c, argv + 3);
	else if (strcmp(argv[1], "informer") == 0 && argc >= 8)
		rc = informer(c, argc - 3, argv + 3);
	else
		fprintf(stderr, "usage: kube_rt_tool leader|informer KUBECONFIG ...\n");
	kube_client_free(c);
	http_global_cleanup();
	return rc;
}
