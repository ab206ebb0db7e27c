/*
 * stack_spec_runner.c - spec.runner: which runner a Stack's updates use and
 * what its Job's pod may carry (docs/stack-api.md, "runner").
 *
 * The pod template is an allow-list, not a pass-through: the controller
 * owns the pod's security (non-root, read-only root, no privilege, seccomp,
 * no capabilities), its service-account token, its volumes at /tmp, /work
 * and /var/run/pulumi-controller, and its labels.  A user may add
 * scheduling (nodeSelector, tolerations, affinity), resources, env and
 * volumes of the kinds the "restricted" Pod Security Standard allows.
 * Anything else (securityContext, hostNetwork, hostPath, containers ...) is
 * refused with the field named, so a Stack cannot turn its Job into a
 * privileged pod.  Every list and map is bounded: a Job spec must stay far
 * below the API server's object size limit, and the Stack's writer is not
 * trusted to keep it small.
 */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "stack/stack_model.h"

#define MAX_MAP_ENTRIES 32
#define MAX_LIST_ITEMS 32
#define MAX_ENV 64
#define MAX_VOLUMES 16
#define MAX_VALUE_BYTES 4096
#define MAX_BLOB_BYTES 16384    /* affinity, resources, one volume: as printed JSON */
#define LABEL_VALUE_MAX 63
#define KEY_MAX 253

static const cJSON *item(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static int present(const cJSON *v)
{
	return v != NULL && !cJSON_IsNull(v);
}

/* Printed size of v, to bound what the Job spec carries. */
static size_t json_size(const cJSON *v)
{
	char *t = cJSON_PrintUnformatted(v);
	size_t n = t ? strlen(t) : (size_t)-1;

	free(t);
	return n;
}

/* A DNS-1123 label: what a volume or service account name must be. */
static int dns_label(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		    (max > 63 && s[i] == '.')))
			return 0;
	return 1;
}

/* Keys the controller sets itself on the Job and its pod. */
static int reserved_label(const char *k)
{
	return strcmp(k, STACK_JOB_LABEL_MANAGED) == 0 || strncmp(k, "pulumi.com/", 11) == 0 ||
	    strncmp(k, "batch.kubernetes.io/", 20) == 0 || strcmp(k, "job-name") == 0 ||
	    strcmp(k, "controller-uid") == 0;
}

/* A map of strings: at most MAX_MAP_ENTRIES, keys and values bounded. */
static int string_map(const cJSON *v, const char *field, size_t value_max, int labels, struct err *e)
{
	const cJSON *it;
	int n = 0;

	if (!cJSON_IsObject(v))
		return err_set(e, ERR_INVALID, "%s: must be a map of strings", field), -1;
	cJSON_ArrayForEach(it, v) {
		if (++n > MAX_MAP_ENTRIES)
			return err_set(e, ERR_INVALID, "%s: at most %d entries", field, MAX_MAP_ENTRIES), -1;
		if (!cJSON_IsString(it))
			return err_set(e, ERR_INVALID, "%s.%s: must be a string", field, it->string), -1;
		if (it->string[0] == '\0' || strlen(it->string) > KEY_MAX)
			return err_set(e, ERR_INVALID, "%s: a key must be 1..%d characters", field, KEY_MAX), -1;
		if (strlen(it->valuestring) > value_max)
			return err_set(e, ERR_INVALID, "%s.%s: at most %zu characters", field, it->string,
			    value_max), -1;
		if (labels && reserved_label(it->string))
			return err_set(e, ERR_INVALID, "%s.%s: reserved (the controller sets it)", field,
			    it->string), -1;
	}
	return 0;
}

/* Only the keys in allowed[] (NULL-terminated); hostile ones named. */
static int only_keys(const cJSON *obj, const char *field, const char *const *allowed, struct err *e)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, obj) {
		int ok = 0;
		for (size_t i = 0; allowed[i] && !ok; i++)
			ok = strcmp(it->string, allowed[i]) == 0;
		if (!ok)
			return err_set(e, ERR_INVALID, "%s.%s: not allowed (the controller sets the pod's "
			    "security, containers and service-account token)", field, it->string), -1;
	}
	return 0;
}

static int bounded_blob(const cJSON *v, const char *field, struct err *e)
{
	if (!cJSON_IsObject(v))
		return err_set(e, ERR_INVALID, "%s: must be an object", field), -1;
	if (json_size(v) > MAX_BLOB_BYTES)
		return err_set(e, ERR_INVALID, "%s: larger than %d bytes", field, MAX_BLOB_BYTES), -1;
	return 0;
}

static int bounded_array(const cJSON *v, const char *field, int max, struct err *e)
{
	if (!cJSON_IsArray(v))
		return err_set(e, ERR_INVALID, "%s: must be a list", field), -1;
	if (cJSON_GetArraySize(v) > max)
		return err_set(e, ERR_INVALID, "%s: at most %d items", field, max), -1;
	return 0;
}

static int check_resources(const cJSON *v, struct err *e)
{
	static const char *const keys[] = { "limits", "requests", NULL };
	const cJSON *it;

	if (bounded_blob(v, "spec.runner.podTemplate.spec.resources", e) < 0 ||
	    only_keys(v, "spec.runner.podTemplate.spec.resources", keys, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, v) {
		const cJSON *q;
		if (!cJSON_IsObject(it))
			return err_set(e, ERR_INVALID, "spec.runner.podTemplate.spec.resources.%s: must be a map",
			    it->string), -1;
		cJSON_ArrayForEach(q, it)
			if (!cJSON_IsString(q) && !cJSON_IsNumber(q))
				return err_set(e, ERR_INVALID, "spec.runner.podTemplate.spec.resources.%s.%s: must be "
				    "a quantity", it->string, q->string), -1;
	}
	return 0;
}

static int check_tolerations(const cJSON *v, struct err *e)
{
	static const char *const keys[] = { "key", "operator", "value", "effect", "tolerationSeconds", NULL };
	const char *field = "spec.runner.podTemplate.spec.tolerations";
	const cJSON *it;

	if (bounded_array(v, field, MAX_LIST_ITEMS, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, v)
		if (!cJSON_IsObject(it) || only_keys(it, field, keys, e) < 0 || json_size(it) > MAX_VALUE_BYTES)
			return e->msg[0] ? -1 : (err_set(e, ERR_INVALID, "%s: each item must be a toleration",
			    field), -1);
	return 0;
}

static int check_affinity(const cJSON *v, struct err *e)
{
	static const char *const keys[] = { "nodeAffinity", "podAffinity", "podAntiAffinity", NULL };

	return bounded_blob(v, "spec.runner.podTemplate.spec.affinity", e) < 0 ||
	    only_keys(v, "spec.runner.podTemplate.spec.affinity", keys, e) < 0 ? -1 : 0;
}

/* Checks each item of the list v (at most max), with the item's index for
 * the messages, by check(item, field, index, ctx). */
static int each_item(const cJSON *v, const char *field, int max,
    int (*check)(const cJSON *it, const char *field, int i, const cJSON *ctx, struct err *e),
    const cJSON *ctx, struct err *e)
{
	const cJSON *it;
	int i = 0;

	if (bounded_array(v, field, max, e) < 0)
		return -1;
	cJSON_ArrayForEach(it, v)
		if (check(it, field, i++, ctx, e) < 0)
			return -1;
	return 0;
}

/* env: literal values and references (the kubelet resolves them), never
 * a name the controller's own contract with the pod uses. */
static int env_item(const cJSON *it, const char *field, int i, const cJSON *ctx, struct err *e)
{
	static const char *const keys[] = { "name", "value", "valueFrom", NULL };
	static const char *const from_keys[] = { "secretKeyRef", "configMapKeyRef", "fieldRef",
		"resourceFieldRef", NULL };
	const char *name = kube_obj_str(it, "name");
	const cJSON *val = item(it, "value"), *from = item(it, "valueFrom");

	if (!cJSON_IsObject(it) || name == NULL || name[0] == '\0' || strlen(name) > KEY_MAX)
		return err_set(e, ERR_INVALID, "%s[%d].name: is required", field, i), -1;
	if (only_keys(it, field, keys, e) < 0)
		return -1;
	if (stack_env_reserved(name))
		return err_set(e, ERR_INVALID, "%s[%d].name \"%s\": reserved (the controller sets it)",
		    field, i, name), -1;
	if (present(val) && (!cJSON_IsString(val) || strlen(val->valuestring) > MAX_VALUE_BYTES))
		return err_set(e, ERR_INVALID, "%s[%d].value: a string of at most %d bytes", field, i,
		    MAX_VALUE_BYTES), -1;
	if (present(val) && present(from))
		return err_set(e, ERR_INVALID, "%s[%d]: value and valueFrom are exclusive", field, i), -1;
	if (present(from) && (!cJSON_IsObject(from) ||
	    only_keys(from, "spec.runner.podTemplate.spec.env[].valueFrom", from_keys, e) < 0 ||
	    json_size(from) > MAX_VALUE_BYTES))
		return e->msg[0] ? -1 : (err_set(e, ERR_INVALID, "%s[%d].valueFrom: must be an object",
		    field, i), -1);
	return 0;
}

/* Volume names the controller's own volumes use. */
static int reserved_volume(const char *name)
{
	return strcmp(name, "tmp") == 0 || strcmp(name, "work") == 0 || strncmp(name, "pulumi-controller", 17) == 0;
}

/* The volume kinds "restricted" allows; hostPath and the rest refused. */
static int volume_item(const cJSON *it, const char *field, int i, const cJSON *ctx, struct err *e)
{
	static const char *const kinds[] = { "name", "secret", "configMap", "emptyDir", "projected",
		"persistentVolumeClaim", "downwardAPI", "csi", "ephemeral", NULL };
	const char *name = kube_obj_str(it, "name");

	if (!cJSON_IsObject(it) || name == NULL || !dns_label(name, 63))
		return err_set(e, ERR_INVALID, "%s[%d].name: must be a DNS label", field, i), -1;
	if (reserved_volume(name))
		return err_set(e, ERR_INVALID, "%s[%d].name \"%s\": reserved (the controller's own volume)",
		    field, i, name), -1;
	if (present(item(it, "hostPath")))
		return err_set(e, ERR_INVALID, "%s[%d].hostPath: not allowed (a Job must not reach "
		    "into its node)", field, i), -1;
	if (only_keys(it, field, kinds, e) < 0)
		return -1;
	if (cJSON_GetArraySize(it) != 2)
		return err_set(e, ERR_INVALID, "%s[%d]: exactly one volume source", field, i), -1;
	if (json_size(it) > MAX_BLOB_BYTES)
		return err_set(e, ERR_INVALID, "%s[%d]: larger than %d bytes", field, i, MAX_BLOB_BYTES), -1;
	return 0;
}

static int has_volume(const cJSON *volumes, const char *name)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, volumes) {
		const char *n = kube_obj_str(it, "name");
		if (n && strcmp(n, name) == 0)
			return 1;
	}
	return 0;
}

/* A mount path the controller's own mounts do not use: absolute, no "..". */
static int mount_path_ok(const char *path)
{
	static const char *const own[] = { "/tmp", "/work", "/var/run/pulumi-controller",
		"/var/run/secrets", "/usr", "/bin", "/lib", "/etc", "/proc", "/sys", "/dev", NULL };

	if (path[0] != '/' || strstr(path, "..") != NULL || strlen(path) > 1024 || strcmp(path, "/") == 0)
		return 0;
	for (size_t i = 0; own[i]; i++) {
		size_t n = strlen(own[i]);
		if (strncmp(path, own[i], n) == 0 && (path[n] == '\0' || path[n] == '/'))
			return 0;
	}
	return 1;
}

/* volumeMounts: of the pod's own volumes, outside the controller's paths. */
static int mount_item(const cJSON *it, const char *field, int i, const cJSON *volumes, struct err *e)
{
	static const char *const keys[] = { "name", "mountPath", "readOnly", "subPath", NULL };
	const char *name = kube_obj_str(it, "name"), *path = kube_obj_str(it, "mountPath");
	const char *sub = kube_obj_str(it, "subPath");

	if (!cJSON_IsObject(it) || only_keys(it, field, keys, e) < 0)
		return e->msg[0] ? -1 : (err_set(e, ERR_INVALID, "%s[%d]: must be an object", field, i), -1);
	if (name == NULL || !has_volume(volumes, name))
		return err_set(e, ERR_INVALID, "%s[%d].name: must name one of podTemplate.spec.volumes",
		    field, i), -1;
	if (path == NULL || !mount_path_ok(path))
		return err_set(e, ERR_INVALID, "%s[%d].mountPath: an absolute path without \"..\" outside "
		    "/tmp, /work, /var/run and the system directories", field, i), -1;
	if (sub && (sub[0] == '/' || strstr(sub, "..")))
		return err_set(e, ERR_INVALID, "%s[%d].subPath: a relative path without \"..\"", field, i), -1;
	return 0;
}

static int keep(cJSON **out, const cJSON *v, struct err *e)
{
	if (!present(v))
		return 0;
	if ((*out = cJSON_Duplicate(v, 1)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	return 0;
}

static int parse_pod_spec(const cJSON *ps, struct stack_runner *r, struct err *e)
{
	static const char *const keys[] = { "resources", "nodeSelector", "tolerations", "affinity", "env",
		"volumes", "volumeMounts", NULL };
	const char *field = "spec.runner.podTemplate.spec";

	if (!cJSON_IsObject(ps))
		return err_set(e, ERR_INVALID, "%s: must be an object", field), -1;
	/* The hostile ones by name, so the message says why. */
	if (present(item(ps, "hostNetwork")) || present(item(ps, "hostPID")) || present(item(ps, "hostIPC")))
		return err_set(e, ERR_INVALID, "%s.hostNetwork/hostPID/hostIPC: not allowed (a Job shares "
		    "nothing with its node)", field), -1;
	if (present(item(ps, "securityContext")))
		return err_set(e, ERR_INVALID, "%s.securityContext: not allowed (the pod always runs "
		    "restricted: non-root, no privilege escalation, all capabilities dropped)", field), -1;
	if (only_keys(ps, field, keys, e) < 0)
		return -1;
	if ((present(item(ps, "resources")) && check_resources(item(ps, "resources"), e) < 0) ||
	    (present(item(ps, "nodeSelector")) && string_map(item(ps, "nodeSelector"),
	        "spec.runner.podTemplate.spec.nodeSelector", LABEL_VALUE_MAX, 0, e) < 0) ||
	    (present(item(ps, "tolerations")) && check_tolerations(item(ps, "tolerations"), e) < 0) ||
	    (present(item(ps, "affinity")) && check_affinity(item(ps, "affinity"), e) < 0) ||
	    (present(item(ps, "env")) && each_item(item(ps, "env"), "spec.runner.podTemplate.spec.env", MAX_ENV,
	        env_item, NULL, e) < 0) ||
	    (present(item(ps, "volumes")) && each_item(item(ps, "volumes"), "spec.runner.podTemplate.spec.volumes",
	        MAX_VOLUMES, volume_item, NULL, e) < 0) ||
	    (present(item(ps, "volumeMounts")) && each_item(item(ps, "volumeMounts"),
	        "spec.runner.podTemplate.spec.volumeMounts", MAX_VOLUMES, mount_item, item(ps, "volumes"), e) < 0))
		return -1;
	return keep(&r->resources, item(ps, "resources"), e) < 0 ||
	    keep(&r->node_selector, item(ps, "nodeSelector"), e) < 0 ||
	    keep(&r->tolerations, item(ps, "tolerations"), e) < 0 ||
	    keep(&r->affinity, item(ps, "affinity"), e) < 0 || keep(&r->env, item(ps, "env"), e) < 0 ||
	    keep(&r->volumes, item(ps, "volumes"), e) < 0 ||
	    keep(&r->volume_mounts, item(ps, "volumeMounts"), e) < 0 ? -1 : 0;
}

static int parse_template(const cJSON *pt, struct stack_runner *r, struct err *e)
{
	static const char *const keys[] = { "metadata", "spec", NULL };
	static const char *const md_keys[] = { "labels", "annotations", NULL };
	const cJSON *md = item(pt, "metadata");

	if (!cJSON_IsObject(pt))
		return err_set(e, ERR_INVALID, "spec.runner.podTemplate: must be an object"), -1;
	if (only_keys(pt, "spec.runner.podTemplate", keys, e) < 0)
		return -1;
	if (present(md)) {
		if (!cJSON_IsObject(md) || only_keys(md, "spec.runner.podTemplate.metadata", md_keys, e) < 0)
			return e->msg[0] ? -1 : (err_set(e, ERR_INVALID, "spec.runner.podTemplate.metadata: must "
			    "be an object"), -1);
		if ((present(item(md, "labels")) && string_map(item(md, "labels"),
		        "spec.runner.podTemplate.metadata.labels", LABEL_VALUE_MAX, 1, e) < 0) ||
		    (present(item(md, "annotations")) && string_map(item(md, "annotations"),
		        "spec.runner.podTemplate.metadata.annotations", MAX_VALUE_BYTES, 0, e) < 0) ||
		    keep(&r->labels, item(md, "labels"), e) < 0 || keep(&r->annotations, item(md, "annotations"), e) < 0)
			return -1;
	}
	return present(item(pt, "spec")) ? parse_pod_spec(item(pt, "spec"), r, e) : 0;
}

static int parse_runner(const cJSON *rn, struct stack_runner *r, struct err *e)
{
	static const char *const keys[] = { "type", "serviceAccountName", "podTemplate", NULL };
	const char *type = kube_obj_str(rn, "type"), *sa = kube_obj_str(rn, "serviceAccountName");

	if (!cJSON_IsObject(rn))
		return err_set(e, ERR_INVALID, "spec.runner: must be an object"), -1;
	if (only_keys(rn, "spec.runner", keys, e) < 0)
		return -1;
	if (present(item(rn, "type")) && (type == NULL || (strcmp(type, "Local") != 0 && strcmp(type, "Job") != 0)))
		return err_set(e, ERR_INVALID, "spec.runner.type: must be Local or Job"), -1;
	r->type = type == NULL ? STACK_RUNNER_DEFAULT : strcmp(type, "Job") == 0 ? STACK_RUNNER_JOB :
	    STACK_RUNNER_LOCAL;
	if (present(item(rn, "serviceAccountName"))) {
		if (sa == NULL || !dns_label(sa, 253))
			return err_set(e, ERR_INVALID, "spec.runner.serviceAccountName: must be a DNS subdomain "
			    "of at most 253 characters"), -1;
		if (strcmp(sa, "default") == 0)
			return err_set(e, ERR_INVALID, "spec.runner.serviceAccountName: \"default\" is the namespace's "
			    "shared ServiceAccount, which other pods run as; the runner is granted this Stack's outputs "
			    "Secret, so it needs a ServiceAccount of its own (leave the field unset and the controller "
			    "makes <name>-runner and <name>-planner)"), -1;
		if ((r->service_account = strdup(sa)) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
	}
	return present(item(rn, "podTemplate")) ? parse_template(item(rn, "podTemplate"), r, e) : 0;
}

int stack_runner_parse(const cJSON *spec, const struct stack_opts *o, struct stack_spec *s,
    struct err *e)
{
	const cJSON *rn = item(spec, "runner");

	if (present(rn) && parse_runner(rn, &s->runner, e) < 0)
		return -1;
	s->job_mode = s->runner.type == STACK_RUNNER_JOB || (s->runner.type == STACK_RUNNER_DEFAULT && o->runner_job);
	if (!s->job_mode)
		return 0;
	/* The Job's pod fetches its program from a URL or a registry; a
	 * rendered Program exists only in this controller's store. */
	if (s->source == STACK_SRC_PROGRAM_OBJECT)
		return err_set(e, ERR_INVALID, "spec.programRef.name: a Program's Stack runs with the local "
		    "runner only (spec.runner.type: Local), not yet in a Job"), -1;
	if (o->job_image == NULL)
		return err_set(e, ERR_INVALID, "spec.runner.type: Job, but this controller runs without "
		    "--job-image (the image the Job's pod runs)"), -1;
	return 0;
}

void stack_runner_free(struct stack_runner *r)
{
	free(r->service_account);
	mem_release_all(cJSON, cJSON_Delete, r->labels, r->annotations, r->resources, r->node_selector,
	    r->tolerations, r->affinity, r->env, r->volumes, r->volume_mounts);
	memset(r, 0, sizeof(*r));
}

int stack_env_reserved(const char *name)
{
	return strncmp(name, "PULUMI_CONTROLLER_", 18) == 0 || strcmp(name, "HOME") == 0 ||
	    strncmp(name, "KUBERNETES_", 11) == 0;
}
