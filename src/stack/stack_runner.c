/*
 * stack_runner.c - one update inside a Job's pod: what `pulumi-controller
 * run-update` (src/cli/cmd_run_update.c) does once its flags are read.
 *
 *     input      PULUMI_CONTROLLER_UPDATE, the JSON the controller put into
 *                the pod's environment (stack_run_input_parse, in
 *                stack_runner_io.c with the termination message)
 *     artifact   the Flux tarball by URL and digest, or the OCI manifest by
 *                its digest, into a store under --work-dir (fluxsource/, oci/)
 *     workspace  the same copy the local runner makes (stack_workspace.c)
 *     driver     the same pulumi sequence as local mode (stack_update.c)
 *     result     the outputs Secret (stack_outputs_write) and the
 *                termination message (stack_run_termination)
 *
 * The local runner's code works on a struct stack_pass of a struct
 * stack_ctl; this file builds a small one of each for the one Stack the
 * pod runs, so that the pod and the controller run the very same code.
 * There is no Stack object in the pod: the pass has no status (so the
 * stack is selected, else created, as on a Stack's first update) and no
 * event recorder (its one event, a stale lock cancelled, is logged only).
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <limits.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/secret.h"
#include "base/xalloc.h"
#include "fluxsource/fluxsource.h"
#include "oci/oci.h"
#include "stack/stack_pod.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

/* ------------------------------------------------------------ result */

static enum stack_run_class class_of(enum pl_status s)
{
	switch (s) {
	case PL_OK: return STACK_RUN_OK;
	case PL_CHANGES_NOT_EXPECTED: return STACK_RUN_OK;   /* a drift check that found drift */
	case PL_CONFLICT: return STACK_RUN_CONFLICT;
	case PL_TIMEOUT: return STACK_RUN_TIMEOUT;
	case PL_POLICY_VIOLATION: return STACK_RUN_POLICY;
	case PL_CLI_MISSING: case PL_CLI_TOO_OLD: return STACK_RUN_CLI;
	case PL_INTERNAL: return STACK_RUN_INTERNAL;
	default: return STACK_RUN_FAILED;
	}
}

void stack_run_result_free(struct stack_run_result *r)
{
	cJSON_Delete(r->changes);
	r->changes = NULL;
	cJSON_Delete(r->drift);
	r->drift = NULL;
}

/* A failure before the CLI ran: class cls, status PL_FAILED (PL_INTERNAL
 * for internal ones). */
static void result_fail(struct stack_run_result *r, enum stack_run_class cls, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void result_fail(struct stack_run_result *r, enum stack_run_class cls, const char *fmt, ...)
{
	va_list ap;

	r->cls = cls;
	r->status = cls == STACK_RUN_INTERNAL ? PL_INTERNAL : PL_FAILED;
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof(r->message), fmt, ap);
	va_end(ap);
}

void stack_run_result_usage(struct stack_run_result *r, const struct err *e)
{
	memset(r, 0, sizeof(*r));
	r->usage = 1;
	result_fail(r, STACK_RUN_INTERNAL, "%s", e->msg);
}

int stack_run_exit_code(const struct stack_run_result *r)
{
	/* A drift check that found drift did its job: its Job is Complete and
	 * the status says drift (a Failed Job is a check that failed). */
	return r->usage ? 2 : r->status == PL_OK || r->status == PL_CHANGES_NOT_EXPECTED ? 0 : 1;
}

/* ------------------------------------------------------------ the pass */

/* The controller and the pass the local runner's code works on. */
struct runner {
	struct stack_ctl sc;
	struct stack_pass p;
	const struct stack_run_input *in;
	const struct stack_run_opts *o;
	struct stack_run_result *r;
	pthread_t watcher;
	int watching;
	atomic_int done;                  /* the run ended: the watcher stops */
};

/* Turns SIGTERM (the Job's deadline, a deleted pod) into the controller's
 * interrupt: the CLI gets SIGINT and releases its lock. */
static void *watch_cancel(void *arg)
{
	struct runner *u = arg;
	const struct timespec tick = { 0, 100 * 1000 * 1000 };

	while (!u->done) {
		if (*u->o->cancel) {
			stack_ctl_interrupt(&u->sc);
			return NULL;
		}
		nanosleep(&tick, NULL);
	}
	return NULL;
}

static char **strings_dup(char *const *v, size_t n)
{
	char **d = xcalloc(n + 1, sizeof(char *));

	for (size_t i = 0; i < n; i++)
		d[i] = xstrdup(v[i]);
	return d;
}

static void runner_init(struct runner *u)
{
	const struct stack_run_input *in = u->in;
	struct stack_spec *s = &u->p.spec;
	long t = in->timeout_seconds;

	stack_opts_default(&u->sc.o);
	u->sc.o.storage_path = u->o->work_dir;
	u->sc.o.pulumi_bin = u->o->pulumi_bin;
	snprintf(u->sc.pulumi_home, sizeof(u->sc.pulumi_home), "%s/pulumi-home", u->o->work_dir);
	if (u->o->identity)
		snprintf(u->sc.identity, sizeof(u->sc.identity), "%s", u->o->identity);
	else if (gethostname(u->sc.identity, sizeof(u->sc.identity) - 1) != 0)
		snprintf(u->sc.identity, sizeof(u->sc.identity), "run-update");
	pthread_mutex_init(&u->sc.lock, NULL);
	u->sc.cancel_lock = in->cancel_lock;

	u->p.sc = &u->sc;
	u->p.exec = &stack_exec_local;   /* the pod runs the CLI itself */
	u->p.phase = STACK_PHASE_UPDATING;   /* what a Job's pod is there for */
	snprintf(u->p.ns, sizeof(u->p.ns), "%s", in->namespace);
	snprintf(u->p.name, sizeof(u->p.name), "%s", in->name);
	/* No kind: the stale-lock event is refused (logged) rather than sent
	 * to a recorder the pod has not got. */
	u->p.obj = cJSON_CreateObject();
	s->stack = xstrdup(in->stack);
	s->source = in->oci ? STACK_SRC_OCI : STACK_SRC_FLUX;
	s->dir = in->dir ? xstrdup(in->dir) : NULL;
	s->backend = in->backend ? xstrdup(in->backend) : NULL;
	s->secrets_provider = in->secrets_provider ? xstrdup(in->secrets_provider) : NULL;
	s->refresh = in->refresh;
	s->preview = strcmp(in->operation, "preview") == 0;
	s->targets = strings_dup(in->targets, in->n_targets);
	s->n_targets = in->n_targets;
	s->policy_packs = strings_dup(in->policy_packs, in->n_policy_packs);
	s->n_policy_packs = in->n_policy_packs;
	s->target_dependents = in->target_dependents;
	s->run_program = in->run_program;
	s->local_stack_only = in->local_stack_only;
	s->environments = strings_dup(in->environments, in->n_environments);
	s->n_environments = in->n_environments;
	/* The driver's own limit falls a little before the Job's deadline, so
	 * that a slow update ends as a timeout the CLI was told about. */
	s->timeout_ms = (t > 60 ? t - (t / 10 < 30 ? t / 10 : 30) : t) * 1000L;
}

static void runner_free(struct runner *u)
{
	if (u->watching) {
		u->done = 1;
		pthread_join(u->watcher, NULL);
	}
	stack_inputs_free(&u->p.in);
	stack_spec_free(&u->p.spec);
	stack_artifact_free(&u->p.art);
	cJSON_Delete(u->p.obj);
	cJSON_Delete(u->p.out.changes);
	cJSON_Delete(u->p.out.outputs);
	cJSON_Delete(u->p.out.outputs_plain);
	stack_safety_free(&u->p.safety);
	pthread_mutex_destroy(&u->sc.lock);
}

/* ------------------------------------------------------------ artifact */

static int fetch_flux_artifact(struct runner *u)
{
	struct flux_fetch_opts fo;
	struct flux_artifact a = { u->in->url, u->in->digest, u->in->revision };
	struct err e;
	int cached = 0;

	flux_fetch_opts_default(&fo);
	if (u->o->max_artifact_bytes != 0)
		fo.http.max_bytes = u->o->max_artifact_bytes;
	fo.cancel = &u->sc.cancel;
	if (flux_store_get(u->o->work_dir, &a, &fo, u->p.tree, sizeof(u->p.tree), &cached, &e) < 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "artifact: %s", e.msg);
		return -1;
	}
	u->p.art.revision = xstrdup(u->in->revision ? u->in->revision : u->in->digest);
	u->p.art.digest = xstrdup(u->in->digest);
	u->p.art.url = xstrdup(u->in->url);
	return 0;
}

/* dir/name into a malloc'd buffer when the file exists (caller frees). */
static char *file_in(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct err e;

	if (dir == NULL || fs_join(path, sizeof(path), dir, name, &e) < 0 || !fs_exists(path))
		return NULL;
	return xstrdup(path);
}

/* Registry credentials and CA from the mounted Secrets, then the client. */
static struct oci_client *registry_client(struct runner *u, const struct oci_ref *ref, struct err *e)
{
	struct oci_client_opts co;
	struct oci_creds creds;
	struct oci_client *c;
	char *cfg_path = file_in(u->o->oci_secret_dir, ".dockerconfigjson");
	char *ca = file_in(u->o->oci_secret_dir, "ca.crt");

	memset(&co, 0, sizeof(co));
	memset(&creds, 0, sizeof(creds));
	co.plain_http = u->in->insecure;
	co.retries = -1;
	co.cancel = &u->sc.cancel;
	co.ca_file = ca;
	if (cfg_path) {
		char *cfg = NULL, *helper = NULL;
		size_t len = 0;
		int rc = fs_read_file(cfg_path, 1 << 20, &cfg, &len, e);
		if (rc == 0)
			rc = oci_docker_config_parse(cfg, len, ref->registry, &creds, &helper, e);
		if (cfg)
			secret_wipe(cfg, len);
		free(cfg);
		if (rc == 0 && helper)
			rc = err_set(e, ERR_UNSUPPORTED, "%s: credential helpers are not supported in a "
			    "pod; put the credentials in the Secret", cfg_path);
		free(helper);
		free(cfg_path);
		if (rc < 0) {
			oci_creds_free(&creds);
			free(ca);
			return NULL;
		}
		co.creds = creds;
	}
	c = oci_client_new(ref->registry, &co, e);
	oci_creds_free(&creds);
	free(ca);
	return c;
}

/* A keyring of every "<name>.pub" in dir (a Secret volume: its keys are
 * links into a timestamped directory, so links are followed; the volume's
 * own "..data" entries are not keys).  Caller frees; NULL + e. */
static struct oci_keyring *keys_from_dir(const char *dir, struct err *e)
{
	struct oci_keyring *k;
	struct dirent *de;
	DIR *d;

	if (dir == NULL)
		return err_set(e, ERR_INVALID, "verify requested but no --verify-keys-dir was given; nothing "
		    "was run"), NULL;
	if ((d = opendir(dir)) == NULL)
		return err_set(e, ERR_NOTFOUND, "verify keys: cannot read %s: %s", dir, strerror(errno)), NULL;
	k = oci_keyring_new();
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name), len;
		char path[PATH_MAX], *pem = NULL;
		if (de->d_name[0] == '.' || n < 5 || strcmp(de->d_name + n - 4, ".pub") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (fs_read_file(path, 1 << 20, &pem, &len, e) < 0 ||
		    oci_keyring_add_pem(k, de->d_name, pem, len, e) < 0) {
			free(pem);
			closedir(d);
			oci_keyring_free(k);
			return NULL;
		}
		free(pem);
	}
	closedir(d);
	if (oci_keyring_count(k) == 0) {
		oci_keyring_free(k);
		return err_set(e, ERR_INVALID, "verify keys: no file ending in .pub in %s", dir), NULL;
	}
	return k;
}

/* The index the controller fell back to (stack_verify.c) vouches for the
 * pulled manifest only if it selects exactly that manifest: resolved here
 * again, by its digest, with the same options as the pull. */
static int index_names_manifest(struct runner *u, struct oci_client *c, const struct oci_pull_opts *po,
    const char *manifest_digest, struct err *e)
{
	struct oci_ref ref;
	struct oci_pull_result res;
	char text[2048];
	int rc = -1;

	memset(&ref, 0, sizeof(ref));
	memset(&res, 0, sizeof(res));
	snprintf(text, sizeof(text), "%s@%s", u->in->url, u->in->index_digest);
	if (oci_ref_parse(text, &ref, e) == 0 && oci_resolve(c, &ref, po, &res, e) == 0) {
		if (res.index_digest == NULL)
			err_set(e, ERR_REFUSED, "the manifest %s has no signature, and source.indexDigest %s is not "
			    "an index; nothing was run", manifest_digest, u->in->index_digest);
		else if (strcmp(res.manifest_digest, manifest_digest) != 0)
			err_set(e, ERR_REFUSED, "the manifest %s has no signature, and index %s selects manifest %s, "
			    "not it; nothing was run", manifest_digest, u->in->index_digest, res.manifest_digest);
		else
			rc = 0;
	}
	oci_ref_free(&ref);
	oci_pull_result_free(&res);
	return rc;
}

/* The manifest's signature; when it has none at all and the controller
 * resolved the tag to an index, the index's (as stack_verify.c). */
static int verify_resolution(struct runner *u, struct oci_client *c, const struct oci_ref *ref,
    const struct oci_pull_opts *po, const char *manifest_digest, const struct oci_keyring *keys,
    struct oci_verify_result *vr, const char **signed_digest, struct err *e)
{
	*signed_digest = manifest_digest;
	if (oci_verify(c, ref->repository, manifest_digest, keys, vr, e) == 0)
		return 0;
	if (e->code != ERR_NOTFOUND || u->in->index_digest == NULL)
		return -1;
	oci_verify_result_free(vr);
	*signed_digest = u->in->index_digest;
	if (index_names_manifest(u, c, po, manifest_digest, e) < 0)
		return -1;
	return oci_verify(c, ref->repository, u->in->index_digest, keys, vr, e);
}

/* The controller verified this digest before it made the Job; the pod
 * checks it again against the same keys (mounted from the verify Secret),
 * on the digest it then pulls, so a Job spec edited by hand, or a registry
 * that changed its answer, cannot run an unsigned program. */
static int verify_signature(struct runner *u, struct oci_client *c, const struct oci_ref *ref,
    const struct oci_pull_opts *po, const char *manifest_digest, struct err *e)
{
	struct oci_verify_result vr;
	struct oci_keyring *keys;
	const char *signed_digest;
	int rc;

	if (!u->in->verify)
		return 0;
	if ((keys = keys_from_dir(u->o->verify_keys_dir, e)) == NULL)
		return -1;
	memset(&vr, 0, sizeof(vr));
	rc = verify_resolution(u, c, ref, po, manifest_digest, keys, &vr, &signed_digest, e);
	if (rc == 0)
		log_info("signature verified", "namespace", u->in->namespace, "name", u->in->name, "digest",
		    signed_digest, "key", vr.key_name ? vr.key_name : "", "scheme", oci_sig_scheme_name(vr.scheme),
		    NULL);
	oci_verify_result_free(&vr);
	oci_keyring_free(keys);
	return rc;
}

static int fetch_oci_artifact(struct runner *u)
{
	struct oci_pull_parts x;
	struct err e;
	char text[2048];
	int rc = -1;

	oci_pull_parts_init(&x);
	if (u->o->max_artifact_bytes != 0)
		x.po.max_layer_bytes = u->o->max_artifact_bytes;
	x.po.media_type = u->in->media_type;
	/* The manifest by its digest: what the controller resolved (and, with
	 * verify, what was signed) is exactly what is pulled. */
	snprintf(text, sizeof(text), "%s@%s", u->in->url, u->in->manifest_digest);
	if (oci_ref_parse(text, &x.ref, &e) < 0 || (x.c = registry_client(u, &x.ref, &e)) == NULL ||
	    oci_resolve(x.c, &x.ref, &x.po, &x.res, &e) < 0 ||
	    verify_signature(u, x.c, &x.ref, &x.po, x.res.manifest_digest, &e) < 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s: %s", u->in->url, e.msg);
		goto out;
	}
	if (u->in->layer_digest && strcmp(u->in->layer_digest, x.res.layer_digest) != 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s@%s: the manifest's layer is %s, not %s as resolved by "
		    "the controller; nothing was run", u->in->url, u->in->manifest_digest, x.res.layer_digest,
		    u->in->layer_digest);
		goto out;
	}
	if (stack_oci_tree_path(u->o->work_dir, x.res.layer_digest, u->p.tree, sizeof(u->p.tree)) < 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s: bad layer digest %s", u->in->url, x.res.layer_digest);
		goto out;
	}
	if (!fs_is_dir(u->p.tree) && oci_fetch_layer(x.c, x.ref.repository, &x.res, &x.po, u->p.tree, 1, &e) < 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s: %s", u->in->url, e.msg);
		goto out;
	}
	u->p.art.revision = xstrdup(u->in->revision ? u->in->revision : x.res.revision);
	u->p.art.digest = xstrdup(x.res.layer_digest);   /* the tree's key, as stack_source.c */
	rc = 0;
out:
	oci_pull_parts_free(&x);
	return rc;
}

/* PULUMI_HOME starts empty in every pod; plugins the image carries are
 * linked in so that no Job downloads them again. */
static int link_plugins(struct runner *u, struct err *e)
{
	char link[PATH_MAX + 16];
	struct stat st;

	if (u->o->plugins_dir == NULL)
		return 0;
	snprintf(link, sizeof(link), "%s/plugins", u->sc.pulumi_home);
	if (fs_exists(link))
		return 0;
	/* stat: an image may well point at its cache through a link */
	if (stat(u->o->plugins_dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return err_set(e, ERR_NOTFOUND, "--plugins-dir %s is not a directory", u->o->plugins_dir), -1;
	if (symlink(u->o->plugins_dir, link) != 0)
		return err_set(e, ERR_IO, "cannot link %s to --plugins-dir: %s", link, strerror(errno)), -1;
	return 0;
}

static int prepare_workspace(struct runner *u)
{
	struct err e;
	char artifacts[PATH_MAX + 16];

	snprintf(artifacts, sizeof(artifacts), "%s/artifacts", u->o->work_dir);
	if (fs_mkdir_p(artifacts, 0700, &e) < 0 || fs_mkdir_p(u->sc.pulumi_home, 0700, &e) < 0 ||
	    link_plugins(u, &e) < 0) {
		result_fail(u->r, STACK_RUN_INTERNAL, "--work-dir: %s", e.msg);
		return -1;
	}
	if ((u->in->oci ? fetch_oci_artifact(u) : fetch_flux_artifact(u)) < 0)
		return -1;
	log_info("artifact ready", "revision", u->p.art.revision, NULL);
	if (stack_workspace_prepare(&u->p) != 0) {
		result_fail(u->r, STACK_RUN_SOURCE, "%s", u->p.v.message);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ inputs */

static int is_structured(const struct stack_run_input *in, const char *key)
{
	for (size_t i = 0; i < in->n_structured; i++)
		if (strcmp(in->structured[i], key) == 0)
			return 1;
	return 0;
}

static void add_config(struct runner *u, const char *key, const char *value, int secret)
{
	struct pl_config_item *c = &u->p.in.config[u->p.in.n_config++];

	c->key = key;   /* borrowed from the input, as stack_inputs.c borrows from the spec */
	c->value = xstrdup(value);
	c->secret = secret;
	c->structured = is_structured(u->in, key);
}

/* *dst = the value of the variable name (backendFromEnv...), when name is
 * set.  -1 with the usage failure in the result when it is not set. */
static int value_from_env(struct runner *u, const char *field, const char *name, char **dst)
{
	const char *v = name ? getenv(name) : NULL;

	if (name == NULL)
		return 0;
	if (v == NULL) {
		result_fail(u->r, STACK_RUN_INTERNAL, "PULUMI_CONTROLLER_UPDATE: %s: the environment "
		    "variable %s is not set", field, name);
		u->r->usage = 1;
		return -1;
	}
	free(*dst);
	*dst = xstrdup(v);
	return 0;
}

/* The config and environment the driver gets: plaintext from the JSON,
 * the rest from the pod's environment under the names the JSON gives. */
static int resolve_inputs(struct runner *u)
{
	const struct stack_run_input *in = u->in;
	size_t n = in->n_config + in->n_secret_config + in->n_config_from_env;

	if (value_from_env(u, "backendFromEnv", in->backend_env, &u->p.spec.backend) < 0 ||
	    value_from_env(u, "secretsProviderFromEnv", in->secrets_provider_env,
	    &u->p.spec.secrets_provider) < 0)
		return -1;

	u->p.in.config = xcalloc(n + 1, sizeof(*u->p.in.config));
	u->p.in.env = xcalloc(in->n_env + 1, sizeof(*u->p.in.env));
	for (size_t i = 0; i < in->n_config; i++)
		add_config(u, in->config[i].key, in->config[i].value, 0);
	for (size_t i = 0; i < in->n_secret_config + in->n_config_from_env; i++) {
		int secret = i < in->n_secret_config;
		const struct stack_run_pair *ref = secret ? &in->secret_config[i] :
		    &in->config_from_env[i - in->n_secret_config];
		const char *v = getenv(ref->value);
		if (v == NULL) {
			/* The pod's spec does not match its input: a usage error. */
			result_fail(u->r, STACK_RUN_INTERNAL, "PULUMI_CONTROLLER_UPDATE: %s.%s: the environment "
			    "variable %s is not set", secret ? "secretConfig" : "configFromEnv", ref->key,
			    ref->value);
			u->r->usage = 1;
			return -1;
		}
		add_config(u, ref->key, v, secret);
	}
	for (size_t i = 0; i < in->n_env; i++) {
		const char *v = getenv(in->env[i]);
		if (v == NULL) {
			/* An optional reference the kubelet left out. */
			log_warn("an environment variable of \"env\" is not set; pulumi runs without it",
			    "variable", in->env[i], NULL);
			continue;
		}
		/* Which of them came from a Secret the pod cannot tell: all are
		 * masked in what the driver returns. */
		u->p.in.env[u->p.in.n_env].name = in->env[i];
		u->p.in.env[u->p.in.n_env].value = xstrdup(v);
		u->p.in.env[u->p.in.n_env++].secret = 1;
	}
	return 0;
}

/* ------------------------------------------------------------ outputs */

/* The outputs Secret the controller created for this Stack: its owner
 * reference to the Stack stands in for the Stack object the pod has not
 * got (stack_outputs_write writes it back as it was). */
static int adopt_owner(struct runner *u, struct kube_client *c, struct err *e)
{
	cJSON *have = kube_get(c, &secret_res, u->p.ns, u->in->outputs_secret, NULL, e);
	const cJSON *o;
	int found = 0;

	if (have == NULL)
		return -1;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(have, "metadata"), "ownerReferences")) {
		const char *k = kube_obj_str(o, "kind"), *n = kube_obj_str(o, "name");
		const char *uid = kube_obj_str(o, "uid"), *api = kube_obj_str(o, "apiVersion");
		if (k && n && uid && api && strcmp(k, "Stack") == 0 && strcmp(n, u->p.name) == 0) {
			cJSON *md = cJSON_AddObjectToObject(u->p.obj, "metadata");
			cJSON_AddStringToObject(u->p.obj, "apiVersion", api);
			cJSON_AddStringToObject(md, "uid", uid);
			found = 1;
			break;
		}
	}
	cJSON_Delete(have);
	if (!found)
		return err_set(e, ERR_CONFLICT, "Secret %s/%s is not owned by the Stack %s; the outputs are not "
		    "written", u->p.ns, u->in->outputs_secret, u->p.name), -1;
	return 0;
}

static enum stack_run_outputs write_outputs(struct runner *u, struct err *e)
{
	struct kube_client *c;
	int rc;

	if (u->in->outputs_secret == NULL || u->p.out.outputs == NULL)
		return STACK_RUN_OUTPUTS_NONE;
	if ((c = stack_run_client(u->o, e)) == NULL)
		return STACK_RUN_OUTPUTS_FAILED;
	u->sc.client = c;
	rc = adopt_owner(u, c, e);
	if (rc == 0 && (rc = stack_outputs_write(&u->p, e)) < 0 && e->code == ERR_CONFLICT &&
	    e->http_status == 409) {
		/* Someone wrote the Secret in between: read it again, once. */
		log_info("the outputs Secret changed while it was written; writing it again", NULL);
		rc = stack_outputs_write(&u->p, e);
	}
	u->sc.client = NULL;
	kube_client_free(c);
	return rc == 0 ? STACK_RUN_OUTPUTS_WRITTEN : STACK_RUN_OUTPUTS_FAILED;
}

/* ------------------------------------------------------------ driver */

static void run_operation(struct runner *u)
{
	const char *op = u->in->operation;

	if (strcmp(op, "destroy") == 0)
		stack_update_destroy(&u->p);
	else if (strcmp(op, "refresh") == 0)
		stack_update_drift_check(&u->p);   /* what local mode's refresh is */
	else if (strcmp(op, "plan") == 0)
		stack_run_plan(&u->p, u->in, u->o);   /* approval: Manual's preview (stack_job_plan.c) */
	else if (u->in->plan_id && stack_run_plan_load(&u->p, u->in, u->o) < 0)
		return;   /* not the approved plan: nothing runs */
	else
		stack_update_run(&u->p);
}

static void take_outcome(struct runner *u)
{
	struct stack_run_result *r = u->r;
	const struct stack_outcome *out = &u->p.out;

	r->status = out->status;
	r->cls = class_of(out->status);
	snprintf(r->message, sizeof(r->message), "%s", out->message);
	r->changes = out->changes ? cJSON_Duplicate(out->changes, 1) : NULL;
	if (out->lock.present) {
		r->lock_present = 1;
		snprintf(r->lock_owner, sizeof(r->lock_owner), "%s", out->lock.owner);
		snprintf(r->lock_created, sizeof(r->lock_created), "%s", out->lock.created);
		r->lock_pid = out->lock.pid;
	}
	/* What the refresh (a drift check's, or an up --refresh's) found:
	 * the controller reports it in status.drift. */
	if (u->p.safety.drift_steps)
		r->drift = cJSON_Duplicate(u->p.safety.drift_steps, 1);
	r->drift_omitted = u->p.safety.drift_omitted;
}

void stack_run(const struct stack_run_input *in, const struct stack_run_opts *o,
    struct stack_run_result *r)
{
	struct runner *u = xcalloc(1, sizeof(*u));
	struct err e;

	memset(r, 0, sizeof(*r));
	u->in = in;
	u->o = o;
	u->r = r;
	runner_init(u);
	if (o->cancel && pthread_create(&u->watcher, NULL, watch_cancel, u) == 0)
		u->watching = 1;
	log_context_set("namespace", in->namespace);
	log_context_set("name", in->name);
	log_info("run-update starting", "operation", in->operation, "stack", in->stack, NULL);
	if (resolve_inputs(u) < 0 || prepare_workspace(u) < 0)
		goto out;
	run_operation(u);
	take_outcome(u);
	if (r->status == PL_OK && strcmp(in->operation, "up") == 0) {
		r->outputs = write_outputs(u, &e);
		if (r->outputs == STACK_RUN_OUTPUTS_FAILED) {
			log_warn("cannot write the outputs Secret", "error", e.msg, NULL);
			snprintf(r->message, sizeof(r->message), "%s; the outputs Secret was not written: %s",
			    u->p.out.message, e.msg);
		}
	}
out:
	log_info("run-update finished", "status", pl_status_name((enum pl_status)r->status),
	    "class", stack_run_class_name(r->cls), NULL);
	log_context_clear();
	runner_free(u);
	free(u);
}
