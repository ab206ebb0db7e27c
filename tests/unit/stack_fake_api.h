/*
 * stack_fake_api.h - a scripted Kubernetes API server on 127.0.0.1
 * (libmicrohttpd) for the stack unit tests (test_stack_status.c,
 * test_stack_inputs.c), included by each test file (one binary per file,
 * so the definitions are static here).
 *
 * GET answers from routes the test sets (fake_route: a path and the JSON
 * to answer with), anything else is a NotFound Status.  A write (PUT,
 * POST, PATCH) is kept (method, path, content type, body) and answered,
 * unless fake_put_answer set another status (409: a Conflict) or
 * fake_put_conflicts the next few, with the
 * body it was sent and a new resourceVersion "next", as the API server
 * does; a PATCH of a routed path answers with the route (status, body).
 * A watch (GET ?watch=1) ends at once with no event, logged as "WATCH
 * path", so an informer on the fake lists once and then waits out its
 * backoff.  Every request is counted by method and path.
 *
 * fake_start also builds the stack_ctl the passes use: a kube_client on
 * the fake, the Stack resource as served, identity "controller-a";
 * fake_pass_new builds a pass over a Stack on it.
 */
#ifndef TEST_STACK_FAKE_API_H
#define TEST_STACK_FAKE_API_H

#include <microhttpd.h>
#include <pthread.h>

#include "kube/kube.h"
#include "stack/stack_machine.h"

/* Not every test file uses every helper. */
#define FAKE_API static __attribute__((unused))

#define FAKE_ROUTES 16
#define FAKE_LOG 64

#define FAKE_STATUS(code, reason, msg) "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{}," \
	"\"status\":\"Failure\",\"message\":\"" msg "\",\"reason\":\"" reason "\",\"code\":" #code "}"

struct fake_route {
	char path[256];
	unsigned status;
	char *body;
};

struct fake {
	struct MHD_Daemon *d;
	int port;
	pthread_mutex_t lock;
	unsigned put_status;
	int put_conflicts;           /* the next writes answered 409 whatever put_status */
	struct fake_route routes[FAKE_ROUTES];
	int nroutes;
	char log[FAKE_LOG][300];     /* "METHOD path" */
	int nlog;
	char write_method[8], write_path[256], write_ctype[64];
	char *put_body;              /* the last write's body (owned) */
};

static struct fake F;
static const struct kube_resource fake_stacks_res = { "pulumi.com", "v1", "stacks", "Stack", 1 };
static struct stack_ctl sc;

struct fake_upload {
	char *buf;
	size_t len;
};

/* The PUT answer: the object as written, with a new resourceVersion. */
static char *fake_echo(const char *body)
{
	cJSON *o = cJSON_Parse(body), *md;
	char *out;

	if (o == NULL)
		return strdup("{}");
	md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
	cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
	cJSON_AddStringToObject(md, "resourceVersion", "next");
	out = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return out;
}

static const struct fake_route *fake_route_of(const char *url)
{
	for (int i = 0; i < F.nroutes; i++)
		if (strcmp(F.routes[i].path, url) == 0)
			return &F.routes[i];
	return NULL;
}

/* What to answer (malloc'd) and with which status; F.lock held. */
static char *fake_answer(const char *method, const char *url, const char *ctype, const char *body,
    unsigned *status)
{
	const struct fake_route *r = fake_route_of(url);

	if (strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0 || strcmp(method, "PATCH") == 0) {
		snprintf(F.write_method, sizeof(F.write_method), "%s", method);
		snprintf(F.write_path, sizeof(F.write_path), "%s", url);
		snprintf(F.write_ctype, sizeof(F.write_ctype), "%s", ctype ? ctype : "");
		free(F.put_body);
		F.put_body = strdup(body);
		*status = F.put_conflicts > 0 ? (F.put_conflicts--, 409) : F.put_status;
		if (*status != 200)
			return strdup(FAKE_STATUS(409, "Conflict",
			    "Operation cannot be fulfilled: the object has been modified"));
		if (strcmp(method, "PATCH") == 0 && r) {
			*status = r->status;
			return strdup(r->body);
		}
		if (strcmp(method, "POST") == 0)
			*status = 201;
		return fake_echo(body);
	}
	if (r != NULL) {
		*status = r->status;
		return strdup(r->body);
	}
	*status = 404;
	return strdup(FAKE_STATUS(404, "NotFound", "not found"));
}

static enum MHD_Result fake_handler(void *cls, struct MHD_Connection *c, const char *url,
    const char *method, const char *version, const char *data, size_t *data_len, void **st)
{
	struct fake_upload *u = *st;
	struct MHD_Response *r;
	char *answer;
	unsigned status;
	enum MHD_Result rc;
	(void)cls;
	(void)version;

	if (u == NULL) {
		*st = calloc(1, sizeof(struct fake_upload));
		return *st ? MHD_YES : MHD_NO;
	}
	if (*data_len > 0) {
		char *b = realloc(u->buf, u->len + *data_len + 1);
		if (b == NULL)
			return MHD_NO;
		memcpy(b + u->len, data, *data_len);
		u->buf = b;
		u->len += *data_len;
		u->buf[u->len] = '\0';
		*data_len = 0;
		return MHD_YES;
	}
	pthread_mutex_lock(&F.lock);
	if (MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "watch") != NULL) {
		if (F.nlog < FAKE_LOG)
			snprintf(F.log[F.nlog++], sizeof(F.log[0]), "WATCH %s", url);
		answer = strdup("");
		status = 200;
	} else {
		if (F.nlog < FAKE_LOG)
			snprintf(F.log[F.nlog++], sizeof(F.log[0]), "%s %s", method, url);
		answer = fake_answer(method, url, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"),
		    u->buf ? u->buf : "", &status);
	}
	pthread_mutex_unlock(&F.lock);
	r = MHD_create_response_from_buffer(strlen(answer), answer, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static void fake_completed(void *cls, struct MHD_Connection *c, void **st,
    enum MHD_RequestTerminationCode t)
{
	struct fake_upload *u = *st;
	(void)cls;
	(void)c;
	(void)t;
	if (u)
		free(u->buf);
	free(u);
	*st = NULL;
}

/* Starts the server and fills sc; 0, or -1 (the group setup fails). */
FAKE_API int fake_start(void)
{
	const union MHD_DaemonInfo *info;
	struct kube_config *cfg;
	char url[64];
	struct err e;

	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.lock, NULL);
	F.put_status = 200;
	F.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, fake_handler, NULL,
	    MHD_OPTION_NOTIFY_COMPLETED, fake_completed, NULL, MHD_OPTION_END);
	if (F.d == NULL)
		return -1;
	info = MHD_get_daemon_info(F.d, MHD_DAEMON_INFO_BIND_PORT);
	F.port = info->port;

	if ((cfg = calloc(1, sizeof(*cfg))) == NULL)
		return -1;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", F.port);
	cfg->server = strdup(url);
	cfg->namespace = strdup("default");
	cfg->source = strdup("test");
	memset(&sc, 0, sizeof(sc));
	stack_opts_default(&sc.o);
	if ((sc.client = kube_client_new(cfg, &e)) == NULL)
		return -1;
	kube_client_set_retries(sc.client, 1);
	sc.stacks.served = &fake_stacks_res;
	snprintf(sc.identity, sizeof(sc.identity), "controller-a");
	return 0;
}

FAKE_API void fake_stop(void)
{
	kube_client_free(sc.client);
	MHD_stop_daemon(F.d);
	free(F.put_body);
	for (int i = 0; i < F.nroutes; i++)
		free(F.routes[i].body);
	pthread_mutex_destroy(&F.lock);
}

/* As a cmocka group setup and teardown. */
FAKE_API int fake_setup(void **state)
{
	(void)state;
	return fake_start();
}

FAKE_API int fake_teardown(void **state)
{
	(void)state;
	fake_stop();
	return 0;
}

/* Forgets routes and the request log; PUTs succeed again. */
FAKE_API void fake_reset(void)
{
	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < F.nroutes; i++)
		free(F.routes[i].body);
	F.nroutes = 0;
	F.nlog = 0;
	F.put_status = 200;
	F.put_conflicts = 0;
	F.write_method[0] = F.write_path[0] = '\0';
	free(F.put_body);
	F.put_body = NULL;
	pthread_mutex_unlock(&F.lock);
}

/* GET path answers status with body (single quotes become double). */
FAKE_API void fake_route(const char *path, unsigned status, const char *body)
{
	struct fake_route *r;

	pthread_mutex_lock(&F.lock);
	assert_true(F.nroutes < FAKE_ROUTES);
	r = &F.routes[F.nroutes++];
	snprintf(r->path, sizeof(r->path), "%s", path);
	r->status = status;
	r->body = strdup(body);
	for (char *c = r->body; *c; c++)
		if (*c == '\'')
			*c = '"';
	pthread_mutex_unlock(&F.lock);
}

FAKE_API void fake_put_answer(unsigned status)
{
	pthread_mutex_lock(&F.lock);
	F.put_status = status;
	F.nlog = 0;
	pthread_mutex_unlock(&F.lock);
}

/* The next n writes answer 409 (a Conflict), those after put_status. */
FAKE_API void fake_put_conflicts(int n)
{
	pthread_mutex_lock(&F.lock);
	F.put_conflicts = n;
	pthread_mutex_unlock(&F.lock);
}

/* Requests since the last reset, all of them (method NULL) or of one
 * method and path. */
FAKE_API int fake_count(const char *method, const char *path)
{
	char want[300];
	int n = 0;

	snprintf(want, sizeof(want), "%s %s", method ? method : "", path ? path : "");
	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < F.nlog; i++)
		if (method == NULL || strcmp(F.log[i], want) == 0)
			n++;
	pthread_mutex_unlock(&F.lock);
	return n;
}

/* The last write was method to path with content type ctype (NULL: any). */
FAKE_API void fake_assert_write(const char *method, const char *path, const char *ctype)
{
	pthread_mutex_lock(&F.lock);
	assert_string_equal(F.write_method, method);
	assert_string_equal(F.write_path, path);
	if (ctype)
		assert_string_equal(F.write_ctype, ctype);
	pthread_mutex_unlock(&F.lock);
}

/* 1 when the last write's body contains needle. */
FAKE_API int fake_put_contains(const char *needle)
{
	int found;

	pthread_mutex_lock(&F.lock);
	found = F.put_body != NULL && strstr(F.put_body, needle) != NULL;
	pthread_mutex_unlock(&F.lock);
	return found;
}

/* The last write's body, parsed; caller frees. */
FAKE_API cJSON *fake_put_json(void)
{
	cJSON *body;

	pthread_mutex_lock(&F.lock);
	body = F.put_body ? cJSON_Parse(F.put_body) : NULL;
	pthread_mutex_unlock(&F.lock);
	return body;
}

/* ------------------------------------------------------------ passes */

/* A pass over apps/web (uid u-1, generation 2, resourceVersion 41) as the
 * controller's worker builds it: spec (single-quoted JSON), extra metadata
 * members and status (NULL: none); deleting from a deletionTimestamp,
 * requested/request from the annotations.  fake_pass_free. */
FAKE_API struct stack_pass *fake_pass_new(const char *spec, const char *metadata, const char *status)
{
	struct stack_pass *p = calloc(1, sizeof(*p));
	const cJSON *ann;
	char text[8192];

	assert_non_null(p);
	snprintf(text, sizeof(text), "{'apiVersion': 'pulumi.com/v1', 'kind': 'Stack', 'metadata': {'name': 'web', "
	    "'namespace': 'apps', 'uid': 'u-1', 'generation': 2, 'resourceVersion': '41'%s%s}, 'spec': %s%s%s}",
	    metadata ? ", " : "", metadata ? metadata : "", spec, status ? ", 'status': " : "", status ? status : "");
	for (char *c = text; *c; c++)
		if (*c == '\'')
			*c = '"';
	p->obj = cJSON_Parse(text);
	if (p->obj == NULL)
		fail_msg("not JSON: %s", text);
	p->status = cJSON_GetObjectItemCaseSensitive(p->obj, "status");
	p->sc = &sc;
	snprintf(p->ns, sizeof(p->ns), "apps");
	snprintf(p->name, sizeof(p->name), "web");
	snprintf(p->id, sizeof(p->id), "test");
	p->generation = 2;
	p->deleting = kube_obj_str(p->obj, "metadata.deletionTimestamp") != NULL;
	ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p->obj, "metadata"), "annotations");
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ann, STACK_ANN_REQUESTED)))
		p->requested = cJSON_GetObjectItemCaseSensitive(ann, STACK_ANN_REQUESTED)->valuestring;
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ann, STACK_ANN_REQUEST)))
		p->request = cJSON_GetObjectItemCaseSensitive(ann, STACK_ANN_REQUEST)->valuestring;
	return p;
}

FAKE_API void fake_pass_free(struct stack_pass *p)
{
	stack_spec_free(&p->spec);
	stack_artifact_free(&p->art);
	stack_inputs_free(&p->in);
	cJSON_Delete(p->out.changes);
	cJSON_Delete(p->out.outputs);
	cJSON_Delete(p->out.outputs_plain);
	cJSON_Delete(p->obj);
	free(p);
}

#endif
