/*
 * stack_spec_git.c - a Stack whose program is in Git, in either shape:
 *
 *   programRef {repo, ref, dir}       the classic shape
 *   programRef {name}                 the operator's: a Program, not Git at
 *                                     all (stack_program.c renders it)
 *   projectRepo, branch|commit,       the operator's (PKO) shape, with its
 *   repoDir, gitAuth|gitAuthSecret    credentials
 *
 * The controller never clones Git: both become the Flux GitRepository
 * <name>-program that stack_source.c makes and source-controller fetches,
 * and the operator's credentials the Secret <name>-git-auth in
 * source-controller's shape (stack_git_auth.c).  Here they are only parsed
 * and checked; every message names the field at fault.
 */
#include <stdlib.h>
#include <string.h>

#include "stack/stack_model.h"

/* A DNS subdomain starts and ends with a letter or digit. */
static int dns_end(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* programRef {name}: a Program of the Stack's own namespace.  The
 * operator's ProgramReference has no namespace, and none is taken: a Stack
 * never reads another namespace's Program. */
static int parse_program_object(const cJSON *pr, struct stack_spec *s, struct err *e)
{
	static const char *classic[] = { "repo", "ref", "dir" };

	s->source = STACK_SRC_PROGRAM_OBJECT;
	if (stack_field_present(pr, "namespace"))
		return err_set(e, ERR_INVALID, "spec.programRef.namespace: the Program must be in the Stack's "
		    "namespace (programRef has no namespace)"), -1;
	for (size_t i = 0; i < sizeof(classic) / sizeof(classic[0]); i++)
		if (stack_field_present(pr, classic[i]))
			return err_set(e, ERR_INVALID, "spec.programRef.%s: not with programRef.name (a Program "
			    "names no repository; set name or repo, not both)", classic[i]), -1;
	if (stack_field_str(pr, "name", "spec.programRef.name", &s->src_name, e) < 0)
		return -1;
	if (s->src_name == NULL || !stack_object_name_ok(s->src_name) || !dns_end(s->src_name[0]) ||
	    !dns_end(s->src_name[strlen(s->src_name) - 1]))
		return err_set(e, ERR_INVALID, "spec.programRef.name: must be the name of a Program (a DNS "
		    "subdomain: lower-case letters, digits, '-' and '.', at most 253)"), -1;
	if ((s->src_kind = strdup("Program")) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	return 0;
}

int stack_spec_parse_program_ref(const cJSON *pr, const char *name, struct stack_spec *s, struct err *e)
{
	size_t n = strlen(name) + sizeof("-program");

	if (stack_field_present(pr, "name"))
		return parse_program_object(pr, s, e);
	s->source = STACK_SRC_PROGRAM;
	if (stack_field_str(pr, "repo", "spec.programRef.repo", &s->prog_repo, e) < 0 ||
	    stack_field_str(pr, "ref", "spec.programRef.ref", &s->prog_ref, e) < 0 ||
	    stack_field_str(pr, "dir", "spec.programRef.dir", &s->dir, e) < 0)
		return -1;
	if (s->prog_repo == NULL || s->prog_repo[0] == '\0')
		return err_set(e, ERR_INVALID, "spec.programRef.repo: is required"), -1;
	if ((s->src_kind = strdup("GitRepository")) == NULL || (s->src_name = malloc(n)) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	snprintf(s->src_name, n, "%s-program", name);
	return 0;
}

/* One credential value of gitAuth: a ResourceRef (Secret, or Literal, which
 * the operator's schema takes too). */
static int git_auth_ref(const cJSON *o, const char *k, const char *field, const char *ns,
    struct stack_git_auth *a, struct err *e)
{
	const cJSON *ref = stack_field(o, k);

	if (ref == NULL || cJSON_IsNull(ref))
		return err_set(e, ERR_INVALID, "%s: is required", field), -1;
	return stack_spec_resource_ref(ref, field, ns, &a->v[a->n++], e);
}

/* gitAuthSecret, else gitAuth's first of sshAuth, accessToken, githubApp and
 * basicAuth: the order in which the operator picks one. */
static int parse_git_auth(const cJSON *spec, const char *ns, struct stack_spec *s, struct err *e)
{
	struct stack_git_auth *a = &s->git_auth;
	const cJSON *ga = NULL, *sub = NULL;

	if (stack_field_str(spec, "gitAuthSecret", "spec.gitAuthSecret", &a->secret, e) < 0 ||
	    stack_field_obj(spec, "gitAuth", "spec.gitAuth", &ga, e) < 0)
		return -1;
	if (a->secret != NULL && a->secret[0] != '\0') {
		if (!stack_object_name_ok(a->secret))
			return err_set(e, ERR_INVALID, "spec.gitAuthSecret: must be the name of a Secret"), -1;
		a->kind = STACK_GIT_SECRET;
		return 0;
	}
	if (ga == NULL)
		return 0;
	if (stack_field_present(ga, "sshAuth")) {
		a->kind = STACK_GIT_SSH;
		if (stack_field_obj(ga, "sshAuth", "spec.gitAuth.sshAuth", &sub, e) < 0 ||
		    git_auth_ref(sub, "sshPrivateKey", "spec.gitAuth.sshAuth.sshPrivateKey", ns, a, e) < 0)
			return -1;
		/* source-controller needs the server's host keys beside the key. */
		if (a->v[0].kind != STACK_VAL_SECRET)
			return err_set(e, ERR_INVALID, "spec.gitAuth.sshAuth.sshPrivateKey: must be type Secret; "
			    "its Secret holds the server's host keys in key known_hosts too"), -1;
		return stack_field_present(sub, "password") ?
		    git_auth_ref(sub, "password", "spec.gitAuth.sshAuth.password", ns, a, e) : 0;
	}
	if (stack_field_present(ga, "accessToken")) {
		a->kind = STACK_GIT_TOKEN;
		return git_auth_ref(ga, "accessToken", "spec.gitAuth.accessToken", ns, a, e);
	}
	if (stack_field_present(ga, "githubApp")) {
		a->kind = STACK_GIT_APP;
		if (stack_field_obj(ga, "githubApp", "spec.gitAuth.githubApp", &sub, e) < 0 ||
		    git_auth_ref(sub, "appID", "spec.gitAuth.githubApp.appID", ns, a, e) < 0 ||
		    git_auth_ref(sub, "installationID", "spec.gitAuth.githubApp.installationID", ns, a, e) < 0)
			return -1;
		return git_auth_ref(sub, "privateKey", "spec.gitAuth.githubApp.privateKey", ns, a, e);
	}
	if (stack_field_present(ga, "basicAuth")) {
		a->kind = STACK_GIT_BASIC;
		if (stack_field_obj(ga, "basicAuth", "spec.gitAuth.basicAuth", &sub, e) < 0 ||
		    git_auth_ref(sub, "userName", "spec.gitAuth.basicAuth.userName", ns, a, e) < 0)
			return -1;
		return git_auth_ref(sub, "password", "spec.gitAuth.basicAuth.password", ns, a, e);
	}
	return err_set(e, ERR_INVALID, "spec.gitAuth: set one of sshAuth, accessToken, githubApp and "
	    "basicAuth"), -1;
}

/* The operator's Git source: projectRepo with exactly one of branch and
 * commit (the operator refuses both and neither), the program in repoDir.
 * It becomes the GitRepository <name>-program, as the classic programRef
 * does; shallow is accepted and changes nothing (source-controller fetches
 * one commit's tree whatever it says). */
int stack_spec_parse_project_repo(const cJSON *spec, const char *name, const char *ns, struct stack_spec *s,
    struct err *e)
{
	size_t n = strlen(name) + sizeof("-program"), hex = 0;
	char *branch = NULL, *commit = NULL;
	int shallow = 0, rc = -1;

	s->source = STACK_SRC_PROGRAM;
	s->project_repo = 1;
	if (stack_field_str(spec, "projectRepo", "spec.projectRepo", &s->prog_repo, e) < 0 ||
	    stack_field_str(spec, "branch", "spec.branch", &branch, e) < 0 ||
	    stack_field_str(spec, "commit", "spec.commit", &commit, e) < 0 ||
	    stack_field_str(spec, "repoDir", "spec.repoDir", &s->dir, e) < 0 ||
	    stack_field_bool(spec, "shallow", "spec.shallow", &shallow, e) < 0)
		goto out;
	/* The operator joins repoDir to the clone's root, so "/infra" is the
	 * repository's infra: its examples write it that way. */
	if (s->dir != NULL && s->dir[0] == '/') {
		memmove(s->dir, s->dir + strspn(s->dir, "/"), strlen(s->dir + strspn(s->dir, "/")) + 1);
		if (s->dir[0] == '\0') {
			free(s->dir);
			s->dir = NULL;
		}
	}
	if (s->prog_repo == NULL || s->prog_repo[0] == '\0') {
		err_set(e, ERR_INVALID, "spec.projectRepo: must be the URL of a Git repository");
		goto out;
	}
	if (branch != NULL && branch[0] != '\0' && commit != NULL && commit[0] != '\0') {
		err_set(e, ERR_INVALID, "spec.branch, spec.commit: set one of them, not both");
		goto out;
	}
	if (commit != NULL && commit[0] != '\0') {
		while (commit[hex] && strchr("0123456789abcdefABCDEF", commit[hex]))
			hex++;
		if (hex != 40 || commit[hex] != '\0') {
			err_set(e, ERR_INVALID, "spec.commit: must be a full commit SHA (40 hexadecimal digits)");
			goto out;
		}
		for (size_t i = 0; i < hex; i++)    /* GitRepository's ref.commit is lower case */
			if (commit[i] >= 'A' && commit[i] <= 'F')
				commit[i] = (char)(commit[i] - 'A' + 'a');
		s->prog_ref = commit;
		commit = NULL;
	} else if (branch != NULL && branch[0] != '\0') {
		/* "refs/heads/x" or "x": stack_source.c's ref rules then read it as a branch. */
		size_t m = strlen(branch) + sizeof("refs/heads/");
		if ((s->prog_ref = malloc(m)) == NULL) {
			err_set(e, ERR_NOMEM, "out of memory");
			goto out;
		}
		snprintf(s->prog_ref, m, "%s%s", strncmp(branch, "refs/", 5) == 0 ? "" : "refs/heads/", branch);
	} else {
		err_set(e, ERR_INVALID, "spec.branch: with spec.projectRepo, set branch (to follow) or commit "
		    "(to pin)");
		goto out;
	}
	if (parse_git_auth(spec, ns, s, e) < 0)
		goto out;
	if ((s->src_kind = strdup("GitRepository")) == NULL || (s->src_name = malloc(n)) == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto out;
	}
	snprintf(s->src_name, n, "%s-program", name);
	rc = 0;
out:
	free(branch);
	free(commit);
	return rc;
}
