/*
 * stack_git_auth.c - the operator's Git credentials (spec.gitAuth,
 * spec.gitAuthSecret) for the GitRepository <name>-program that a
 * projectRepo Stack owns.
 *
 * The controller never clones Git: source-controller does, and it reads its
 * credentials from the GitRepository's spec.secretRef in its own shape
 * (username/password, identity/known_hosts/password, or a GitHub App's
 * githubApp* keys with spec.provider github).  The operator's Secrets have
 * other keys (sshPrivateKey, accessToken, any key a ResourceRef names), so
 * the values are copied into a Secret the controller owns,
 * <name>-git-auth: owner reference to the Stack (deleted with it), labels as
 * the GitRepository's, rewritten when what it is made from changes (the
 * Stack's "ref" index queues it on a change of those Secrets), and then
 * source-controller asked to fetch again (stack_source.c).  A Secret of
 * that name the controller did not make for this Stack is never
 * overwritten.
 *
 * As the operator does: an access token is basic auth as user "git"; a
 * gitAuthSecret is read as sshPrivateKey (and password), else accessToken,
 * else username and password, else no credentials.
 *
 * SSH: source-controller refuses an SSH source without known_hosts, and the
 * operator (v2) checks host keys too, against the known_hosts of its pod
 * images.  The controller takes key known_hosts of the Secret that holds the
 * private key; it never scans host keys itself (a scanned key trusts whoever
 * answers).  Without it the Stack waits, naming Secret and key.
 *
 * No value is ever logged or put in status: the Ready message says which
 * kind of credential came from which Secret.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/secret.h"
#include "base/str.h"
#include "stack/stack_sources.h"

static const struct kube_resource secret_res = { "", "v1", "secrets", "Secret", 1 };

#define MAX_KEYS 4

/* The owned Secret's data being built, values in the clear (wiped). */
struct creds {
	const char *key[MAX_KEYS];
	unsigned char *val[MAX_KEYS];
	size_t len[MAX_KEYS];
	int n;
	char from[256];                   /* "Secret a, Secret b": where they came from */
};

static void creds_free(struct creds *c)
{
	for (int i = 0; i < c->n; i++) {
		secret_wipe(c->val[i], c->len[i]);
		free(c->val[i]);
	}
	memset(c, 0, sizeof(*c));
}

static void note_from(struct creds *c, const char *secret)
{
	char word[300];
	size_t used = strlen(c->from);

	if (secret == NULL)   /* a hostile API's Secret without a name: say nothing of it */
		return;
	snprintf(word, sizeof(word), "Secret %s", secret);
	if (strstr(c->from, word) == NULL)
		snprintf(c->from + used, sizeof(c->from) - used, "%s%s", used ? ", " : "", word);
}

static int add(struct creds *c, const char *key, const void *val, size_t len)
{
	if (c->n >= MAX_KEYS || (c->val[c->n] = malloc(len + 1)) == NULL)
		return -1;
	memcpy(c->val[c->n], val, len);
	c->val[c->n][len] = '\0';
	c->key[c->n] = key;
	c->len[c->n++] = len;
	return 0;
}

/* GETs Secret name: 0 with *out, 1 decided (missing: the Stack waits for it;
 * unreadable: retried). */
static int get_secret(struct stack_pass *p, const char *name, const char *field, cJSON **out)
{
	struct err e;

	if ((*out = kube_get(p->sc->client, &secret_res, p->ns, name, NULL, &e)) != NULL)
		return 0;
	if (e.code == ERR_NOTFOUND)
		stack_verdict(p, STACK_WAITING, "GitCredentialsNotFound", p->sc->o.requeue_dependency_ms,
		    "Secret %s/%s (%s) not found", p->ns, name, field);
	else
		stack_verdict(p, STACK_WAITING, "GitCredentialsFailed", p->sc->o.requeue_dependency_ms,
		    "cannot read Secret %s/%s (%s): %s", p->ns, name, field, e.msg);
	return 1;
}

/* Copies key of a Secret into c as out_key: 0, or 1 decided (the key is
 * missing, and required). */
static int copy_key(struct stack_pass *p, const cJSON *sec, const char *key, const char *field,
    struct creds *c, const char *out_key, int required)
{
	unsigned char *v;
	size_t n;
	struct err e;

	if ((v = kube_secret_value(sec, key, &n, &e)) == NULL) {
		if (!required)
			return 0;
		stack_verdict(p, STACK_WAITING, "GitCredentialsNotFound", p->sc->o.requeue_dependency_ms,
		    "Secret %s/%s has no key \"%s\" (%s)%s", p->ns,
		    kube_obj_str(sec, "metadata.name") ? kube_obj_str(sec, "metadata.name") : "?", key, field,
		    strcmp(key, "known_hosts") == 0 ? ": the SSH server's host keys, which source-controller "
		    "checks the server against" : "");
		return 1;
	}
	if (add(c, out_key, v, n) < 0) {
		secret_wipe(v, n);
		free(v);
		stack_verdict(p, STACK_WAITING, "GitCredentialsFailed", 1000, "out of memory");
		return 1;
	}
	secret_wipe(v, n);
	free(v);
	note_from(c, kube_obj_str(sec, "metadata.name"));
	return 0;
}

/* One ResourceRef of gitAuth into c as out_key; for an SSH key, the
 * known_hosts of its Secret too.  0, or 1 decided. */
static int copy_ref(struct stack_pass *p, const struct stack_value *v, const char *field, struct creds *c,
    const char *out_key, int known_hosts)
{
	cJSON *sec;
	int rc;

	if (v->kind == STACK_VAL_LITERAL) {   /* never an SSH key: stack_spec.c refuses that */
		if (add(c, out_key, v->literal, strlen(v->literal)) < 0) {
			stack_verdict(p, STACK_WAITING, "GitCredentialsFailed", 1000, "out of memory");
			return 1;
		}
		return 0;
	}
	if (get_secret(p, v->object, field, &sec))
		return 1;
	rc = copy_key(p, sec, v->key, field, c, out_key, 1);
	if (rc == 0 && known_hosts)
		rc = copy_key(p, sec, "known_hosts", field, c, "known_hosts", 1);
	cJSON_Delete(sec);   /* Secret data: cJSON frees without wiping; it lived one pass */
	return rc;
}

/* The deprecated gitAuthSecret, read as the operator reads it. */
static int from_auth_secret(struct stack_pass *p, struct creds *c, const char **what)
{
	const char *name = p->spec.git_auth.secret;
	const cJSON *data;
	cJSON *sec;
	int rc;

	if (get_secret(p, name, "spec.gitAuthSecret", &sec))
		return 1;
	data = cJSON_GetObjectItemCaseSensitive(sec, "data");
	if (cJSON_GetObjectItemCaseSensitive(data, "sshPrivateKey") != NULL) {
		*what = "an SSH key (sshPrivateKey)";
		rc = copy_key(p, sec, "sshPrivateKey", "spec.gitAuthSecret", c, "identity", 1) ||
		    copy_key(p, sec, "known_hosts", "spec.gitAuthSecret", c, "known_hosts", 1) ||
		    copy_key(p, sec, "password", "spec.gitAuthSecret", c, "password", 0);
	} else if (cJSON_GetObjectItemCaseSensitive(data, "accessToken") != NULL) {
		*what = "an access token (accessToken)";
		rc = add(c, "username", "git", 3) < 0 ||
		    copy_key(p, sec, "accessToken", "spec.gitAuthSecret", c, "password", 1);
	} else if (cJSON_GetObjectItemCaseSensitive(data, "username") != NULL) {
		*what = "basic auth (username, password)";
		rc = copy_key(p, sec, "username", "spec.gitAuthSecret", c, "username", 1) ||
		    copy_key(p, sec, "password", "spec.gitAuthSecret", c, "password", 1);
	} else {
		/* The operator clones without credentials then, too. */
		*what = "no credentials (none of sshPrivateKey, accessToken, username)";
		note_from(c, name);
		rc = 0;
	}
	cJSON_Delete(sec);
	if (rc && !p->v.set)
		stack_verdict(p, STACK_WAITING, "GitCredentialsFailed", 1000, "out of memory");
	return rc ? 1 : 0;
}

/* spec.gitAuth: the values into c in source-controller's keys.  0, or 1
 * decided. */
static int from_git_auth(struct stack_pass *p, struct creds *c, const char **what, int *github)
{
	const struct stack_git_auth *a = &p->spec.git_auth;

	switch (a->kind) {
	case STACK_GIT_SECRET:
		return from_auth_secret(p, c, what);
	case STACK_GIT_SSH:
		*what = "sshAuth";
		return copy_ref(p, &a->v[0], "spec.gitAuth.sshAuth.sshPrivateKey", c, "identity", 1) ||
		    (a->n > 1 && copy_ref(p, &a->v[1], "spec.gitAuth.sshAuth.password", c, "password", 0));
	case STACK_GIT_TOKEN:
		*what = "accessToken";
		if (add(c, "username", "git", 3) < 0) {
			stack_verdict(p, STACK_WAITING, "GitCredentialsFailed", 1000, "out of memory");
			return 1;
		}
		return copy_ref(p, &a->v[0], "spec.gitAuth.accessToken", c, "password", 0);
	case STACK_GIT_BASIC:
		*what = "basicAuth";
		return copy_ref(p, &a->v[0], "spec.gitAuth.basicAuth.userName", c, "username", 0) ||
		    copy_ref(p, &a->v[1], "spec.gitAuth.basicAuth.password", c, "password", 0);
	case STACK_GIT_APP:
		*what = "githubApp";
		*github = 1;
		return copy_ref(p, &a->v[0], "spec.gitAuth.githubApp.appID", c, "githubAppID", 0) ||
		    copy_ref(p, &a->v[1], "spec.gitAuth.githubApp.installationID", c, "githubAppInstallationID", 0) ||
		    copy_ref(p, &a->v[2], "spec.gitAuth.githubApp.privateKey", c, "githubAppPrivateKey", 0);
	case STACK_GIT_NONE:
		break;
	}
	return 0;
}

cJSON *stack_git_owner_refs(const struct stack_pass *p)
{
	return stack_owner_refs(kube_obj_str(p->obj, "apiVersion"), p->name, kube_obj_str(p->obj, "metadata.uid"));
}

/* The owned Secret as it should be. */
static cJSON *owned_secret(const struct stack_pass *p, const char *name, const struct creds *c)
{
	cJSON *doc = cJSON_CreateObject(), *md, *labels, *data;
	char label[STACK_LABEL_VALUE_MAX];

	cJSON_AddStringToObject(doc, "apiVersion", "v1");
	cJSON_AddStringToObject(doc, "kind", "Secret");
	cJSON_AddStringToObject(doc, "type", "Opaque");
	md = cJSON_AddObjectToObject(doc, "metadata");
	cJSON_AddStringToObject(md, "name", name);
	cJSON_AddStringToObject(md, "namespace", p->ns);
	labels = cJSON_AddObjectToObject(md, "labels");
	stack_label_value(p->name, label);
	cJSON_AddStringToObject(labels, STACK_LABEL_NAME, label);
	cJSON_AddItemToObject(md, "ownerReferences", stack_git_owner_refs(p));
	data = cJSON_AddObjectToObject(doc, "data");
	for (int i = 0; i < c->n; i++) {
		char *b64 = base64_encode(c->val[i], c->len[i]);
		if (b64 == NULL) {
			cJSON_Delete(doc);
			return NULL;
		}
		cJSON_AddStringToObject(data, c->key[i], b64);
		secret_wipe(b64, strlen(b64));
		free(b64);
	}
	return doc;
}

/* Creates or rewrites <name>-git-auth from c; its resourceVersion into
 * out->version.  0, or 1 decided. */
static int write_owned(struct stack_pass *p, const struct creds *c, struct stack_git_creds *out)
{
	cJSON *want, *have, *res = NULL;
	const cJSON *wd, *hd;
	struct err e;

	snprintf(out->secret, sizeof(out->secret), "%s-git-auth", p->name);
	if ((want = owned_secret(p, out->secret, c)) == NULL) {
		stack_verdict(p, STACK_WAITING, "GitCredentialsFailed", 1000, "out of memory");
		return 1;
	}
	have = kube_get(p->sc->client, &secret_res, p->ns, out->secret, NULL, &e);
	if (have == NULL && e.code == ERR_NOTFOUND) {
		res = kube_create(p->sc->client, &secret_res, p->ns, want, &e);
	} else if (have == NULL) {
		;
	} else if (!kube_owned_by(have, "Stack", kube_obj_str(p->obj, "metadata.uid"))) {
		cJSON_Delete(have);
		cJSON_Delete(want);
		stack_verdict(p, STACK_STALLED, "GitCredentialsConflict", 0, "Secret %s/%s exists and was not made "
		    "by the controller for this Stack; it is not overwritten (delete or rename it)", p->ns,
		    out->secret);
		return 1;
	} else {
		wd = cJSON_GetObjectItemCaseSensitive(want, "data");
		hd = cJSON_GetObjectItemCaseSensitive(have, "data");
		/* An empty Secret reads back without data. */
		if ((hd == NULL && cJSON_GetArraySize(wd) == 0) || (hd != NULL && cJSON_Compare(wd, hd, 1))) {
			snprintf(out->version, sizeof(out->version), "%s",
			    kube_obj_str(have, "metadata.resourceVersion") ? kube_obj_str(have, "metadata.resourceVersion") : "");
			cJSON_Delete(have);
			cJSON_Delete(want);
			return 0;
		}
		cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(want, "metadata"), "resourceVersion",
		    kube_obj_str(have, "metadata.resourceVersion"));
		res = kube_update(p->sc->client, &secret_res, p->ns, want, NULL, &e);
	}
	cJSON_Delete(have);
	cJSON_Delete(want);   /* credentials in the clear: cJSON frees without wiping; short-lived */
	if (res == NULL) {
		stack_verdict(p, STACK_WAITING, "GitCredentialsFailed", p->sc->o.requeue_dependency_ms,
		    "cannot write Secret %s/%s for the GitRepository's credentials: %s", p->ns, out->secret, e.msg);
		return 1;
	}
	snprintf(out->version, sizeof(out->version), "%s",
	    kube_obj_str(res, "metadata.resourceVersion") ? kube_obj_str(res, "metadata.resourceVersion") : "");
	out->changed = 1;
	cJSON_Delete(res);
	return 0;
}

int stack_git_auth_prepare(struct stack_pass *p, struct stack_git_creds *out)
{
	struct creds c;
	const char *what = "";
	size_t used = strlen(p->note);
	int rc;

	memset(out, 0, sizeof(*out));
	if (p->spec.git_auth.kind == STACK_GIT_NONE)
		return 0;
	memset(&c, 0, sizeof(c));
	rc = from_git_auth(p, &c, &what, &out->github);
	if (rc == 0)
		rc = write_owned(p, &c, out);
	if (rc == 0)
		snprintf(p->note + used, sizeof(p->note) - used, "%sGit credentials: %s from %s", used ? "; " : "",
		    what, c.from[0] ? c.from : "the spec");
	creds_free(&c);
	return rc;
}
