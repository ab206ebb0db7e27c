/*
 * stackctl.c - the plumbing of the operator's commands (stackctl.h):
 * the connection flags, Stack names on the command line, the kube client
 * made from the kubeconfig, API failures turned into messages that name
 * NS/NAME, and safe readers of objects the server sent.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/duration.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/stackctl.h"

const struct kube_resource stackctl_stack_res = { "pulumi.com", "v1", "stacks", "Stack", 1 };

#define DEFAULT_REQUEST_TIMEOUT_MS 30000L
/* A CLI should fail while someone still waits: fewer retries than the
 * controller's five. */
#define CLI_RETRIES 2

/* ------------------------------------------------------------ flags */

void stackctl_flags_init(struct stackctl_flags *f)
{
	memset(f, 0, sizeof(*f));
	f->request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS;
}

int stackctl_namespace_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (!stackctl_valid_name(arg, 63) || strchr(arg, '.') != NULL) {
		cli_errorf("invalid --namespace \"%s\": a namespace is a DNS label (a-z, 0-9, '-')", arg);
		return -1;
	}
	((struct stackctl_flags *)o->target)->namespace = arg;
	return 0;
}

int stackctl_context_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (*arg == '\0') {
		cli_errorf("--context: empty context name");
		return -1;
	}
	((struct stackctl_flags *)o->target)->context = arg;
	return 0;
}

int stackctl_request_timeout_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	long *ms = &((struct stackctl_flags *)o->target)->request_timeout_ms;

	if (duration_parse_ms(arg, ms) < 0 || *ms <= 0) {
		cli_errorf("invalid --request-timeout \"%s\" (a duration such as 30s or 1m)", arg);
		return -1;
	}
	return 0;
}

int stackctl_output_flag(const struct cli_opt *o, const char *arg, const char *cmd)
{
	enum stackctl_output *out = o->target;

	if (strcmp(arg, "json") == 0)
		*out = STACKCTL_OUT_JSON;
	else if (strcmp(arg, "yaml") == 0)
		*out = STACKCTL_OUT_YAML;
	else {
		cli_errorf("invalid -o \"%s\" (json or yaml; the default is a table)", arg);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ names */

int stackctl_valid_name(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!(islower(c) || isdigit(c) || c == '-' || c == '.'))
			return 0;
	}
	return 1;
}

int stackctl_parse_ref(const char *arg, const char *flag_ns, struct stackctl_ref *ref, struct err *e)
{
	const char *slash = strchr(arg, '/');
	const char *name = slash ? slash + 1 : arg;

	memset(ref, 0, sizeof(*ref));
	if (slash != NULL) {
		size_t nl = (size_t)(slash - arg);
		if (nl == 0 || nl > 63)
			return err_set(e, ERR_INVALID, "\"%s\": expected NAMESPACE/NAME", arg);
		memcpy(ref->ns, arg, nl);
		ref->ns[nl] = '\0';
		if (!stackctl_valid_name(ref->ns, 63) || strchr(ref->ns, '.') != NULL)
			return err_set(e, ERR_INVALID, "\"%s\": the namespace \"%s\" is not a DNS label", arg, ref->ns);
		if (flag_ns != NULL && strcmp(flag_ns, ref->ns) != 0)
			return err_set(e, ERR_INVALID, "\"%s\" names namespace %s but --namespace says %s", arg,
			    ref->ns, flag_ns);
	} else if (flag_ns != NULL) {
		snprintf(ref->ns, sizeof(ref->ns), "%s", flag_ns);
	}
	if (!stackctl_valid_name(name, STACKCTL_NAME_MAX))
		return err_set(e, ERR_INVALID, "\"%s\": \"%s\" is not a Stack name (lower-case a-z, 0-9, '-', '.')",
		    arg, name);
	snprintf(ref->name, sizeof(ref->name), "%s", name);
	return 0;
}

int stackctl_parse_one(const struct cli_cmd *cmd, int argc, char **argv, struct stackctl_flags *f, int see_help,
    struct stackctl_ref *ref)
{
	struct err e = { 0 };
	int operand, rc;

	stackctl_flags_init(f);
	if ((rc = cli_parse(cmd, argc, argv, &operand)) != CLI_GO_ON)
		return rc;
	if (argc - operand != 1) {
		if (see_help)
			cli_errorf("%s: expected one Stack, NAMESPACE/NAME or NAME (see pulumi-controller %s --help)",
			    cmd->name, cmd->name);
		else
			cli_errorf("%s: expected one Stack, NAMESPACE/NAME or NAME", cmd->name);
		return EXIT_USAGE;
	}
	if (stackctl_parse_ref(argv[operand], f->namespace, ref, &e) < 0) {
		cli_print_error(cmd->name, e.msg);
		return EXIT_USAGE;
	}
	return CLI_GO_ON;
}

/* ------------------------------------------------------------ the API */

/* kube_config_load with --context: the kubeconfig files are the same
 * (--kubeconfig, $KUBECONFIG, ~/.kube/config); in-cluster config has no
 * contexts. */
static int load_config(const struct stackctl_flags *f, struct kube_config **cfg, struct err *e)
{
	const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
	char path[4096];

	if (f->context == NULL)
		return kube_config_load(f->kubeconfig, cfg, e);
	if (f->kubeconfig != NULL && *f->kubeconfig)
		return kube_config_kubeconfig(f->kubeconfig, f->context, cfg, e);
	if (env != NULL && *env)
		return kube_config_kubeconfig(env, f->context, cfg, e);
	if (home != NULL && fs_join(path, sizeof(path), home, ".kube/config", e) == 0 && fs_exists(path))
		return kube_config_kubeconfig(path, f->context, cfg, e);
	return err_set(e, ERR_NOTFOUND, "--context %s: no kubeconfig (pass --kubeconfig or set KUBECONFIG)",
	    f->context);
}

int stackctl_connect(const struct stackctl_flags *f, const char *cmd, struct stackctl *sc)
{
	struct kube_config *cfg = NULL;
	struct err e = { 0 };
	const char *ns;

	memset(sc, 0, sizeof(*sc));
	/* What the kube client logs (a TLS warning) is for a person here. */
	if (cli_setup_logging("warn", "text") < 0)
		return 1;
	if (load_config(f, &cfg, &e) < 0) {
		cli_print_error(cmd, e.msg);
		return 1;
	}
	ns = f->namespace ? f->namespace : (cfg->namespace && *cfg->namespace ? cfg->namespace : "default");
	sc->namespace = strdup(ns);
	if (sc->namespace == NULL) {
		kube_config_free(cfg);
		cli_print_error(cmd, "out of memory");
		return 1;
	}
	sc->client = kube_client_new(cfg, &e);   /* consumes cfg */
	if (sc->client == NULL) {
		cli_print_error(cmd, e.msg);
		stackctl_close(sc);
		return 1;
	}
	sc->request_timeout_ms = f->request_timeout_ms;
	kube_client_set_timeout_ms(sc->client, f->request_timeout_ms);
	kube_client_set_retries(sc->client, CLI_RETRIES);
	return 0;
}

int stackctl_open(const struct cli_cmd *cmd, int argc, char **argv, struct stackctl_flags *f, int see_help,
    struct stackctl_ref *ref, struct stackctl *sc)
{
	int rc = stackctl_parse_one(cmd, argc, argv, f, see_help, ref);

	if (rc != CLI_GO_ON)
		return rc;
	if (stackctl_connect(f, cmd->name, sc) != 0)
		return 1;
	stackctl_resolve_ref(sc, ref);
	return CLI_GO_ON;
}

void stackctl_close(struct stackctl *sc)
{
	kube_client_free(sc->client);
	free(sc->namespace);
	memset(sc, 0, sizeof(*sc));
}

void stackctl_resolve_ref(const struct stackctl *sc, struct stackctl_ref *ref)
{
	if (ref->ns[0] == '\0')
		snprintf(ref->ns, sizeof(ref->ns), "%s", sc->namespace);
}

/* The server's part of a kube client message: "403 Forbidden: ..." without
 * the "GET /apis/...: " before it. */
static const char *server_part(const struct err *e)
{
	char code[16];
	const char *p;

	if (e->http_status <= 0)
		return e->msg;
	snprintf(code, sizeof(code), ": %d ", e->http_status);
	p = strstr(e->msg, code);
	return p ? p + 2 : e->msg;
}

/* Is this 404 about the path rather than the object?  An object's 404 is a
 * Status naming it ("stacks.pulumi.com \"x\" not found"); an unknown group
 * is a plain "404 page not found", an unknown resource of a known group
 * "the server could not find the requested resource".  A list's 404 is
 * always the path's: a namespace that does not exist lists empty. */
static int kind_not_served(const struct err *e, const char *name)
{
	char quoted[STACKCTL_NAME_MAX + 16];

	if (e->code != ERR_NOTFOUND)
		return 0;
	if (name == NULL)
		return 1;
	snprintf(quoted, sizeof(quoted), "\"%s\" not found", name);
	return strstr(e->msg, quoted) == NULL;
}

void stackctl_print_api_error(const char *cmd, const char *verb, const char *what, const char *name,
    const struct err *e)
{
	char msg[ERR_MSG_MAX + 1024];

	if (kind_not_served(e, name))
		/* The resource path itself is unknown: no CRD, or another version. */
		snprintf(msg, sizeof(msg), "cannot %s %s: the API server does not serve the kind (%s); are the "
		    "CRDs installed? (kubectl apply -k deploy/crds)", verb, what, server_part(e));
	else if (e->code == ERR_NOTFOUND)
		snprintf(msg, sizeof(msg), "%s not found", what);
	else if (e->http_status == 403)
		snprintf(msg, sizeof(msg), "not allowed to %s %s: %s", verb, what, server_part(e));
	else if (e->http_status == 401)
		snprintf(msg, sizeof(msg), "cannot %s %s: the API server refused the credentials (%s); check "
		    "the kubeconfig's user", verb, what, server_part(e));
	else
		snprintf(msg, sizeof(msg), "cannot %s %s: %s", verb, what, e->msg);
	cli_print_error(cmd, msg);
}

void stackctl_print_object_error(const char *cmd, const char *verb, const char *kind, const char *ns,
    const char *name, const struct err *e)
{
	char what[600];

	snprintf(what, sizeof(what), "%s %s/%s", kind, ns, name);
	stackctl_print_api_error(cmd, verb, what, name, e);
}

cJSON *stackctl_get_stack(struct stackctl *sc, const char *cmd, const struct stackctl_ref *ref)
{
	struct err e = { 0 };
	cJSON *obj = kube_get(sc->client, &stackctl_stack_res, ref->ns, ref->name, NULL, &e);

	if (obj == NULL) {
		stackctl_print_object_error(cmd, "get", "Stack", ref->ns, ref->name, &e);
		return NULL;
	}
	if (!cJSON_IsObject(obj)) {
		char msg[700];
		snprintf(msg, sizeof(msg), "Stack %s/%s: the API server's answer is not an object", ref->ns,
		    ref->name);
		cli_print_error(cmd, msg);
		cJSON_Delete(obj);
		return NULL;
	}
	return obj;
}

int stackctl_patch_stack(struct stackctl *sc, const char *cmd, const struct stackctl_ref *ref,
    const char *patch)
{
	struct err e = { 0 };
	cJSON *res = kube_patch(sc->client, &stackctl_stack_res, ref->ns, ref->name, NULL, KUBE_PATCH_MERGE,
	    patch, STACKCTL_FIELD_MANAGER, 0, &e);

	if (res == NULL) {
		stackctl_print_object_error(cmd, "patch", "Stack", ref->ns, ref->name, &e);
		return -1;
	}
	cJSON_Delete(res);
	return 0;
}

void stackctl_request_token(char *buf, size_t n)
{
	struct timespec ts;
	char secs[CLOCK_RFC3339_LEN];

	clock_gettime(CLOCK_REALTIME, &ts);
	clock_format_rfc3339(secs, sizeof(secs), ts.tv_sec);
	/* "...:05Z" with the nanoseconds before its Z. */
	snprintf(buf, n, "%.*s.%09ldZ", (int)strlen(secs) - 1, secs, (long)ts.tv_nsec);
}

/* ------------------------------------------------------------ reading objects */

/* The item at a dotted path ("status.lastUpdate.endTime"), whatever its type. */
static const cJSON *at(const cJSON *obj, const char *path)
{
	char part[128];
	const char *s = path, *dot;

	while (obj != NULL && (dot = strchr(s, '.')) != NULL) {
		size_t n = (size_t)(dot - s);
		if (n >= sizeof(part) || !cJSON_IsObject(obj))
			return NULL;
		memcpy(part, s, n);
		part[n] = '\0';
		obj = cJSON_GetObjectItemCaseSensitive(obj, part);
		s = dot + 1;
	}
	return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, s) : NULL;
}

const char *stackctl_str(const cJSON *obj, const char *path)
{
	const cJSON *v = at(obj, path);

	return cJSON_IsString(v) && v->valuestring != NULL ? v->valuestring : NULL;
}

const cJSON *stackctl_obj(const cJSON *obj, const char *path)
{
	const cJSON *v = at(obj, path);

	return cJSON_IsObject(v) ? v : NULL;
}

const cJSON *stackctl_arr(const cJSON *obj, const char *path)
{
	const cJSON *v = at(obj, path);

	return cJSON_IsArray(v) ? v : NULL;
}

long long stackctl_int(const cJSON *obj, const char *path, long long dflt)
{
	const cJSON *v = at(obj, path);

	/* A hostile 1e300 must not overflow the conversion. */
	if (!cJSON_IsNumber(v) || !(v->valuedouble > -9e15 && v->valuedouble < 9e15))
		return dflt;
	return (long long)v->valuedouble;
}

int stackctl_true(const cJSON *obj, const char *path)
{
	return cJSON_IsTrue(at(obj, path));
}

const cJSON *stackctl_condition(const cJSON *obj, const char *type)
{
	/* conditions that is not a list reads as none, as every field of the
	 * server's here whose type is wrong. */
	return stackctl_arr(obj, "status.conditions") ? kube_condition(obj, type) : NULL;
}

/* ------------------------------------------------------------ lists */

#define PAGE_LIMIT 500
/* A continue chain longer than this is a broken server. */
#define MAX_PAGES 10000

cJSON *stackctl_list_stacks(struct stackctl *sc, const char *cmd, const char *ns)
{
	cJSON *all = cJSON_CreateArray(), *page = NULL;
	char *cont = NULL;
	const char *problem = NULL;
	int pages = 0;

	do {
		struct kube_list_opts o = { .limit = PAGE_LIMIT, .continue_token = cont };
		struct err e = { 0 };
		cJSON *items;
		const char *next;

		cJSON_Delete(page);
		if ((page = kube_list(sc->client, &stackctl_stack_res, ns, &o, &e)) == NULL) {
			char what[300] = "Stacks";
			if (ns != NULL)
				snprintf(what, sizeof(what), "Stacks in namespace %s", ns);
			stackctl_print_api_error(cmd, "list", what, NULL, &e);
			goto fail;
		}
		items = cJSON_GetObjectItemCaseSensitive(page, "items");
		if (!cJSON_IsObject(page) || (items != NULL && !cJSON_IsArray(items) && !cJSON_IsNull(items))) {
			problem = "the API server's Stack list has no items array";
			goto fail;
		}
		while (cJSON_IsArray(items) && items->child != NULL)
			cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(items, items->child));
		next = stackctl_str(page, "metadata.continue");
		if (str_eq(next, cont)) {
			problem = "the API server sent the same continue token twice: the list would never end";
			goto fail;
		}
		free(cont);
		cont = next != NULL && *next ? strdup(next) : NULL;
	} while (cont != NULL && ++pages < MAX_PAGES);
	cJSON_Delete(page);
	free(cont);
	return all;
fail:
	if (problem != NULL)
		cli_print_error(cmd, problem);
	cJSON_Delete(page);
	cJSON_Delete(all);
	free(cont);
	return NULL;
}
