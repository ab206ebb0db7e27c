/*
 * stack_sources.h - the sources layer: from a Stack's source to a
 * verified tree in the artifact store and the Stack's own workspace.
 * Above the model (stack_model.h), below the gates.
 *
 *   stack_oci.c        an ociSource's registry client; the cache of
 *                      resolutions and of signature checks that passed
 *   stack_verify.c     signatures: ociSource.verify, a Flux source's
 *                      SourceVerified
 *   stack_source.c     the source's artifact: resolve, then fetch
 *   stack_git_auth.c   projectRepo's credentials, in the Secret its
 *                      GitRepository reads
 *   stack_workspace.c  each Stack's own copy of the program tree
 *   stack_gc.c         the artifact store's garbage collection
 *   stack_program.c    a PKO Program (programRef.name) as the Pulumi.yaml
 *                      it means, a revision in the store
 */
#ifndef PC_STACK_SOURCES_H
#define PC_STACK_SOURCES_H

#include "stack/stack_model.h"

/* Fills p->art from the source; 1 when the pass is decided (p->v set:
 * waiting for the source, or stalled), 0 to go on, never -1. */
int stack_source_resolve(struct stack_pass *p);
/* Makes sure the artifact's tree is in the store: p->tree. 1/0 as above. */
int stack_source_fetch(struct stack_pass *p);
/* The Pulumi.yaml (as JSON, which is YAML) of the Program object program
 * (metadata.name, the sections of its top-level `program`); the same
 * stored object gives the same bytes.  Caller frees it; NULL with e set. */
char *stack_program_render(const cJSON *program, struct err *e);
/* The largest rendering of a Program that is used (docs/stack-api.md). */
#define STACK_PROGRAM_MAX_BYTES (1 << 20)
/* spec.programRef {name}: the Program rendered into p->art (its content
 * kept for the fetch), then written into the store as p->tree.  1 when the
 * pass is decided (ProgramMissing, ProgramInvalid, SourceKindNotServed,
 * ArtifactFailed), 0 to go on. */
int stack_program_resolve(struct stack_pass *p);
int stack_program_fetch(struct stack_pass *p);
/* Frees the shared OCI resolutions (at stack_ctl_free). */
void stack_source_cleanup(struct stack_ctl *sc);
/* The cache key of s's ociSource lookups in namespace ns, into out (at
 * least 65 bytes): Stacks share a resolution only when it is the same
 * lookup (reference, credentials, CA, transport). */
void stack_oci_poll_key(const struct stack_spec *s, const char *ns, char *out, size_t n);
/* The shared OCI resolutions (exposed for the unit tests).  A lookup of key
 * younger than max_age_ms copies it into res (caller frees it with
 * oci_pull_result_free) and returns 1; a store replaces key's, for Stacks
 * that look again every interval_ms (0: never), and prunes the cache when
 * it outgrows the Stacks (entries idle past their interval, then the least
 * recently used). */
struct oci_pull_result;
int stack_oci_cache_lookup(struct stack_ctl *sc, const char *key, long max_age_ms,
    struct oci_pull_result *res);
void stack_oci_cache_store(struct stack_ctl *sc, const char *key, long interval_ms,
    const struct oci_pull_result *res);
size_t stack_oci_cache_count(struct stack_ctl *sc);
/* The tree of an OCI layer in the store under root (the controller's
 * --storage-path, or a Job pod's work directory):
 * <root>/artifacts/<algorithm>/<hex>, the layout of Flux artifacts too.
 * -1 when digest is not "<algorithm>:<hex>". */
int stack_oci_tree_path(const char *root, const char *digest, char *out, size_t n);
/* Store paths. */
void stack_store_artifacts_dir(const struct stack_ctl *sc, char *out, size_t n);

/* For stack_verify.c: a client for the ociSource's registry, with its
 * credentials (caller frees it with oci_client_free, and *repo); and the
 * signature checks that passed, kept with the resolution under poll_key
 * while it still names digest.  keys: "<secret>@<resourceVersion>". */
struct oci_client;
struct oci_client *stack_source_oci_client(struct stack_pass *p, char **repo, struct err *e);
struct oci_ref;
/* The spec's ociSource as a reference (url, and the digest or tag the spec
 * pins); 0, or -1 with e set.  oci_ref_free frees it. */
int stack_oci_ref_parse(struct stack_pass *p, struct oci_ref *ref, struct err *e);
/* A registry client for ref with the spec's credentials, CA and transport;
 * NULL with e set.  The caller frees it (oci_client_free). */
struct oci_client *stack_oci_client_for(struct stack_pass *p, const struct oci_ref *ref, struct err *e);
int stack_source_verified_lookup(struct stack_ctl *sc, const char *poll_key, const char *digest,
    const char *keys, char *key_name, size_t n, char *scheme, size_t sn);
void stack_source_verified_store(struct stack_ctl *sc, const char *poll_key, const char *digest,
    const char *keys, const char *key_name, const char *scheme);

/* stack_verify.c.  Each sets p->verified (SourceVerified) and returns 1
 * when the revision is refused (verdict set: nothing may be fetched or
 * applied), 0 when it verified.  Flux: src is the OCIRepository with
 * spec.verify and revision its status.artifact's.  ociSource: the
 * resolution's revision, manifest digest and index digest (or NULL). */
int stack_verify_flux(struct stack_pass *p, const cJSON *src, const char *revision);
int stack_verify_oci(struct stack_pass *p, const char *poll_key, const char *revision, const char *manifest,
    const char *index);

/* stack_git_auth.c.  What the GitRepository <name>-program of a projectRepo
 * Stack authenticates with: secret is its secretRef ("" none), the Secret
 * the controller owns (<name>-git-auth), and version that Secret's
 * resourceVersion; github: spec.provider github (a GitHub App); changed:
 * this pass created or rewrote it. */
struct stack_git_creds {
	char secret[300];
	char version[64];
	int github;
	int changed;
};
/* Writes <name>-git-auth from spec.gitAuth / gitAuthSecret and says in
 * p->note which kind of credential came from which Secret (never a value).
 * 0 to go on with out filled; 1 when decided (p->v: a Secret or key
 * missing, a Secret of that name not the controller's, an API error). */
int stack_git_auth_prepare(struct stack_pass *p, struct stack_git_creds *out);
/* The ownerReferences of an object the Stack owns (controller: true). */
cJSON *stack_git_owner_refs(const struct stack_pass *p);

/* Builds (or reuses) the Stack's workspace from p->tree and spec.dir:
 * p->workdir.  1 when decided (ProgramNotFound...), 0 to go on. */
int stack_workspace_prepare(struct stack_pass *p);
void stack_workspace_paths(const struct stack_ctl *sc, const char *ns, const char *name,
    char *root, size_t n);
/* Removes the Stack's workspace (after it is finalized). */
void stack_workspace_remove(const struct stack_ctl *sc, const char *ns, const char *name);

#endif
