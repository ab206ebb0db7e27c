/*
 * kube_tool.c - a test driver for src/kube/ against the API-server
 * emulator (tests/e2e/test_kube_client.py):
 *
 *   kube_tool crud KUBECONFIG NAMESPACE
 *       create, get, update with a stale resourceVersion (409), merge and
 *       JSON patches, server-side apply with and without force, the status
 *       subresource, list pages, delete with a stale precondition, delete;
 *       prints one "ok <step>" line per step and exits 1 at the first
 *       surprise (the message says which step and what came back).
 *   kube_tool event KUBECONFIG NAMESPACE STACK COUNT
 *       records the same Warning Event COUNT times about the Stack.
 *   kube_tool whoami KUBECONFIG
 *       one GET with the config's credentials (exec plugins included).
 *   kube_tool loop KUBECONFIG
 *       like incluster below, with a kubeconfig.
 *   kube_tool incluster SA_DIR
 *       the in-cluster config from KUBERNETES_SERVICE_HOST/PORT and the
 *       service-account files in SA_DIR; then, for each line read from
 *       stdin, one GET, answered "ok <n>" or "FAIL ..." on stdout, so a
 *       test can rotate the token between requests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/http.h"
#include "kube/kube.h"

static const struct kube_resource stacks = { "pulumi.com", "v1", "stacks", "Stack", 1 };
static const struct kube_resource namespaces = { "", "v1", "namespaces", "Namespace", 0 };

static int fail(const char *step, const struct err *e)
{
	fprintf(stderr, "FAIL %s: %s\n", step, e ? e->msg : "unexpected result");
	return 1;
}

static cJSON *stack_obj(const char *ns, const char *name, const char *stackname)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "{\"apiVersion\":\"pulumi.com/v1\",\"kind\":\"Stack\",\"metadata\":"
	    "{\"name\":\"%s\",\"namespace\":\"%s\",\"labels\":{\"tool\":\"yes\"}},\"spec\":{\"stack\":\"%s\","
	    "\"fluxSource\":{\"sourceRef\":{\"apiVersion\":\"source.toolkit.fluxcd.io/v1\",\"kind\":\"GitRepository\","
	    "\"name\":\"r\"}}}}", name, ns, stackname);
	return cJSON_Parse(buf);
}

#define CHECK(cond, step) do { if (!(cond)) { cJSON_Delete(o); return fail(step, NULL); } } while (0)

static int crud(struct kube_client *c, const char *ns)
{
	struct err e;
	cJSON *in = stack_obj(ns, "tool-a", "dev"), *o, *stale;
	char rv1[64];
	int n;

	o = kube_create(c, &stacks, ns, in, &e);
	if (o == NULL) {
		cJSON_Delete(in);
		return fail("create", &e);
	}
	CHECK(kube_obj_str(o, "metadata.uid") != NULL, "create returns uid");
	snprintf(rv1, sizeof(rv1), "%s", kube_obj_str(o, "metadata.resourceVersion"));
	puts("ok create");
	cJSON_Delete(o);
	o = kube_create(c, &stacks, ns, in, &e);
	CHECK(o == NULL && e.http_status == 409 && strstr(e.msg, "AlreadyExists"), "create twice -> 409 AlreadyExists");
	puts("ok create-conflict");
	cJSON_Delete(in);

	o = kube_get(c, &stacks, ns, "tool-a", NULL, &e);
	if (o == NULL)
		return fail("get", &e);
	stale = cJSON_Duplicate(o, 1);
	cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "spec"), "stack",
	    cJSON_CreateString("prod"));
	{
		cJSON *u = kube_update(c, &stacks, ns, o, NULL, &e);
		cJSON_Delete(o);
		o = u;
	}
	if (o == NULL) {
		cJSON_Delete(stale);
		return fail("update", &e);
	}
	CHECK(strcmp(kube_obj_str(o, "spec.stack"), "prod") == 0, "update applied");
	CHECK(strcmp(kube_obj_str(o, "metadata.resourceVersion"), rv1) != 0, "update bumps RV");
	puts("ok update");
	cJSON_Delete(o);
	o = kube_update(c, &stacks, ns, stale, NULL, &e);
	cJSON_Delete(stale);
	CHECK(o == NULL && e.http_status == 409 && e.code == ERR_CONFLICT && strstr(e.msg, "Conflict"),
	    "stale update -> 409 Conflict");
	puts("ok update-stale");

	o = kube_patch(c, &stacks, ns, "tool-a", NULL, KUBE_PATCH_MERGE,
	    "{\"metadata\":{\"annotations\":{\"a\":\"1\"}}}", "kube-tool", 0, &e);
	if (o == NULL)
		return fail("merge patch", &e);
	CHECK(strcmp(kube_obj_str(o, "metadata.annotations.a"), "1") == 0, "merge patch applied");
	puts("ok merge-patch");
	cJSON_Delete(o);
	o = kube_patch(c, &stacks, ns, "tool-a", NULL, KUBE_PATCH_JSON,
	    "[{\"op\":\"test\",\"path\":\"/spec/stack\",\"value\":\"prod\"},{\"op\":\"replace\",\"path\":\"/spec/stack\",\"value\":\"qa\"}]",
	    NULL, 0, &e);
	if (o == NULL)
		return fail("json patch", &e);
	CHECK(strcmp(kube_obj_str(o, "spec.stack"), "qa") == 0, "json patch applied");
	cJSON_Delete(o);
	o = kube_patch(c, &stacks, ns, "tool-a", NULL, KUBE_PATCH_JSON,
	    "[{\"op\":\"test\",\"path\":\"/spec/stack\",\"value\":\"nope\"}]", NULL, 0, &e);
	CHECK(o == NULL && e.http_status == 422, "failed json patch test -> 422");
	puts("ok json-patch");

	/* Server-side apply: kube-tool takes spec.stack from its previous writer
	 * only with force. */
	in = stack_obj(ns, "tool-a", "applied");
	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(in, "metadata"), "labels");
	{
		char *body = cJSON_PrintUnformatted(in);
		o = kube_patch(c, &stacks, ns, "tool-a", NULL, KUBE_PATCH_APPLY, body, "other-manager", 0, &e);
		CHECK(o == NULL && e.http_status == 409, "apply over another manager's field -> 409");
		o = kube_patch(c, &stacks, ns, "tool-a", NULL, KUBE_PATCH_APPLY, body, "other-manager", 1, &e);
		free(body);
	}
	cJSON_Delete(in);
	if (o == NULL)
		return fail("apply force", &e);
	CHECK(strcmp(kube_obj_str(o, "spec.stack"), "applied") == 0, "forced apply applied");
	puts("ok apply");
	cJSON_Delete(o);
	in = stack_obj(ns, "tool-b", "new");
	{
		char *body = cJSON_PrintUnformatted(in);
		o = kube_patch(c, &stacks, ns, "tool-b", NULL, KUBE_PATCH_APPLY, body, "kube-tool", 1, &e);
		free(body);
	}
	cJSON_Delete(in);
	if (o == NULL)
		return fail("apply create", &e);
	puts("ok apply-create");
	cJSON_Delete(o);

	o = kube_patch(c, &stacks, ns, "tool-a", "status", KUBE_PATCH_MERGE,
	    "{\"status\":{\"observedGeneration\":7},\"spec\":{\"stack\":\"ignored\"}}", "kube-tool", 0, &e);
	if (o == NULL)
		return fail("status patch", &e);
	CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "status"),
	    "observedGeneration")->valuedouble == 7, "status written");
	CHECK(strcmp(kube_obj_str(o, "spec.stack"), "applied") == 0, "status endpoint ignores spec");
	puts("ok status");
	cJSON_Delete(o);

	{
		struct kube_list_opts lo = { "tool=yes", NULL, 1, NULL, NULL };
		char *cont = NULL;
		int pages = 0;
		n = 0;
		do {
			lo.continue_token = cont;
			o = kube_list(c, &stacks, ns, &lo, &e);
			free(cont);
			cont = NULL;
			if (o == NULL)
				return fail("list", &e);
			n += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "items"));
			pages++;
			if (kube_obj_str(o, "metadata.continue") && *kube_obj_str(o, "metadata.continue"))
				cont = strdup(kube_obj_str(o, "metadata.continue"));
			cJSON_Delete(o);
		} while (cont != NULL);
		o = NULL;
		/* Both carry the label: apply only removes fields its own manager
		 * applied before, and other-manager never applied labels. */
		CHECK(n == 2, "label-selected list");
		printf("ok list pages=%d\n", pages);
	}

	CHECK(kube_delete(c, &stacks, ns, "tool-a", "1", &e) < 0 && e.http_status == 409,
	    "delete with stale precondition -> 409");
	if (kube_delete(c, &stacks, ns, "tool-a", NULL, &e) < 0)
		return fail("delete", &e);
	o = kube_get(c, &stacks, ns, "tool-a", NULL, &e);
	CHECK(o == NULL && e.code == ERR_NOTFOUND, "gone after delete");
	CHECK(kube_delete(c, &stacks, ns, "tool-a", NULL, &e) < 0 && e.code == ERR_NOTFOUND, "second delete -> 404");
	puts("ok delete");
	return 0;
}

static int event(struct kube_client *c, const char *ns, const char *name, int count)
{
	struct kube_recorder *r = kube_recorder_new(c, "pulumi-controller", "test-host");
	struct err e;
	cJSON *o = kube_get(c, &stacks, ns, name, NULL, &e);
	int rc = 0;

	if (o == NULL) {
		kube_recorder_free(r);
		return fail("get", &e);
	}
	if (!cJSON_GetObjectItemCaseSensitive(o, "apiVersion"))
		cJSON_AddStringToObject(o, "apiVersion", "pulumi.com/v1");
	for (int i = 0; i < count && rc == 0; i++)
		if (kube_event(r, o, "Warning", "UpdateFailed", "pulumi up failed: exit status 1", &e) < 0)
			rc = fail("event", &e);
	if (rc == 0 && kube_event(r, o, "Normal", "Other", "a different event", &e) < 0)
		rc = fail("event", &e);
	cJSON_Delete(o);
	kube_recorder_free(r);
	if (rc == 0)
		puts("ok event");
	return rc;
}

/* One GET per line read from stdin; frees c. */
static int get_loop(struct kube_client *c)
{
	struct err e;
	char line[64];
	int n = 0;

	while (fgets(line, sizeof(line), stdin) != NULL) {
		cJSON *o = kube_get(c, &namespaces, NULL, "default", NULL, &e);
		n++;
		if (o != NULL)
			printf("ok %d\n", n);
		else
			printf("FAIL %d %s\n", n, e.msg);
		fflush(stdout);
		cJSON_Delete(o);
	}
	kube_client_free(c);
	http_global_cleanup();
	return 0;
}

static int incluster(const char *sa_dir)
{
	struct kube_config *cfg;
	struct kube_client *c;
	struct err e;

	if (http_global_init(&e) < 0 ||
	    kube_config_incluster(getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT"),
	    sa_dir, &cfg, &e) < 0) {
		fprintf(stderr, "FAIL config: %s\n", e.msg);
		return 1;
	}
	printf("server %s namespace %s\n", cfg->server, cfg->namespace);
	fflush(stdout);
	c = kube_client_new(cfg, &e);
	if (c == NULL)
		return fail("client", &e);
	return get_loop(c);
}

int main(int argc, char **argv)
{
	struct kube_config *cfg;
	struct kube_client *c;
	struct err e;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: kube_tool crud|event|whoami KUBECONFIG ... | incluster SA_DIR\n");
		return 2;
	}
	if (strcmp(argv[1], "incluster") == 0)
		return incluster(argv[2]);
	if (http_global_init(&e) < 0 || kube_config_kubeconfig(argv[2], NULL, &cfg, &e) < 0) {
		fprintf(stderr, "FAIL config: %s\n", e.msg);
		return 1;
	}
	c = kube_client_new(cfg, &e);
	if (c == NULL)
		return fail("client", &e);
	if (strcmp(argv[1], "loop") == 0)
		return get_loop(c);
	if (strcmp(argv[1], "crud") == 0 && argc == 4) {
		rc = crud(c, argv[3]);
	} else if (strcmp(argv[1], "event") == 0 && argc == 6) {
		rc = event(c, argv[3], argv[4], atoi(argv[5]));
	} else if (strcmp(argv[1], "whoami") == 0) {
		cJSON *o = kube_get(c, &namespaces, NULL, "default", NULL, &e);
		rc = o ? 0 : fail("get namespace", &e);
		if (o)
			puts("ok whoami");
		cJSON_Delete(o);
	} else {
		fprintf(stderr, "usage: kube_tool crud|event|whoami KUBECONFIG ...\n");
		rc = 2;
	}
	kube_client_free(c);
	http_global_cleanup();
	return rc;
}
