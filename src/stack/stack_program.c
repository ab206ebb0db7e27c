/*
 * stack_program.c - the operator's Program kind (pulumi.com/v1, kind
 * Program) as a source: spec.programRef {name} names one in the Stack's
 * namespace, and its Pulumi.yaml is the program.
 *
 *   resolve  the Program from the informer cache (never another
 *            namespace's: the lookup is the Stack's own), rendered here;
 *            the revision is "<name>/<generation>@sha256:<hex>", the
 *            digest that of the rendered bytes;
 *   fetch    the store entry of that digest: a directory holding only
 *            Pulumi.yaml, written once (staging, then rename, under the
 *            entry's lock, as Flux artifacts are), so every Stack using the
 *            same rendering shares one entry, and the workspace, the
 *            fingerprint and everything after work as for other sources.
 *
 * An edit of the Program moves its generation: the informer queues the
 * Stacks that name it (stack_ctl.c), which resolve a new revision and run
 * an update.  A Program not there yet is waited for (ProgramMissing); one
 * that cannot be rendered, or renders to more than STACK_PROGRAM_MAX_BYTES,
 * is Stalled ProgramInvalid until it is edited.
 *
 * The project file is written as JSON, which is YAML too, so no YAML
 * emitter decides quoting: a string stays a string ("yes", "1.0").  The
 * sections come in a fixed order and each keeps its keys in the order the
 * API server stored them, so the same stored Program renders to the same
 * bytes, and its digest names it as a revision.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"
#include "fluxsource/fluxsource.h"
#include "stack/stack_sources.h"

/* How long a fetch waits for another filler of the same entry. */
#define PROGRAM_LOCK_TIMEOUT_MS 30000

static const char *sections[] = { "configuration", "resources", "variables", "outputs", "packages" };

char *stack_program_render(const cJSON *program, struct err *e)
{
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(program, "metadata");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(meta, "name");
	const cJSON *body = cJSON_GetObjectItemCaseSensitive(program, "program");
	cJSON *out;
	char *text;

	if (!cJSON_IsString(name) || name->valuestring[0] == '\0')
		return err_set(e, ERR_INVALID, "Program: metadata.name is missing"), NULL;
	if (!cJSON_IsObject(body))
		return err_set(e, ERR_INVALID, "Program %s: program: must be an object", name->valuestring), NULL;
	if ((out = cJSON_CreateObject()) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	if (cJSON_AddStringToObject(out, "name", name->valuestring) == NULL ||
	    cJSON_AddStringToObject(out, "runtime", "yaml") == NULL)
		goto nomem;
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, sections[i]);
		cJSON *copy;

		if (v == NULL || cJSON_IsNull(v))
			continue;
		if (!cJSON_IsObject(v)) {
			err_set(e, ERR_INVALID, "Program %s: program.%s: must be an object", name->valuestring,
			    sections[i]);
			return cJSON_Delete(out), NULL;
		}
		if ((copy = cJSON_Duplicate(v, 1)) == NULL || !cJSON_AddItemToObject(out, sections[i], copy)) {
			cJSON_Delete(copy);
			goto nomem;
		}
	}
	text = cJSON_PrintUnformatted(out);
	cJSON_Delete(out);
	if (text == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), NULL;
	return text;
nomem:
	cJSON_Delete(out);
	return err_set(e, ERR_NOMEM, "out of memory"), NULL;
}

/* ------------------------------------------------------------ the source */

static long long program_generation(const cJSON *prog)
{
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(prog, "metadata"),
	    "generation");

	return cJSON_IsNumber(g) ? (long long)g->valuedouble : 0;
}

/* The Program named by the spec, rendered into p->art; 1 when decided. */
int stack_program_resolve(struct stack_pass *p)
{
	const char *name = p->spec.src_name;
	char dig[DIGEST_STR_MAX], *rev = NULL, *text;
	long long gen;
	struct digest d;
	struct err e;
	size_t len, n;
	cJSON *prog;

	if (!atomic_load(&p->sc->programs.live) || p->sc->programs.inf == NULL) {
		stack_verdict(p, STACK_STALLED, "SourceKindNotServed", 0, "Program (pulumi.com/v1) is not served "
		    "by the API server: install its CRD (deploy/crds/pulumi.com_programs.yaml) for "
		    "spec.programRef.name");
		return 1;
	}
	if ((prog = kube_informer_get(p->sc->programs.inf, p->ns, name)) == NULL) {
		stack_verdict(p, STACK_WAITING, "ProgramMissing", p->sc->o.requeue_dependency_ms,
		    "Program %s/%s not found (spec.programRef.name); the Stack runs when it is created", p->ns, name);
		return 1;
	}
	text = stack_program_render(prog, &e);
	gen = program_generation(prog);
	n = strlen(name) + 32 + sizeof(dig);
	if (text != NULL && (len = strlen(text)) > STACK_PROGRAM_MAX_BYTES) {
		err_set(&e, ERR_LIMIT, "Program %s: program: renders to %zu bytes, more than the limit of %d "
		    "(1 MiB)", name, len, STACK_PROGRAM_MAX_BYTES);
		free(text);
		text = NULL;
	}
	cJSON_Delete(prog);
	if (text == NULL) {
		stack_verdict(p, e.code == ERR_NOMEM ? STACK_WAITING : STACK_STALLED, e.code == ERR_NOMEM ?
		    "ArtifactFailed" : "ProgramInvalid", e.code == ERR_NOMEM ? 1000 : 0, "%s (namespace %s); "
		    "the Stack waits for the Program to be fixed", e.msg, p->ns);
		return 1;
	}
	digest_bytes(DIGEST_SHA256, text, len, &d);
	digest_format(&d, dig, sizeof(dig));
	if ((rev = malloc(n)) != NULL)
		snprintf(rev, n, "%s/%lld@%s", name, gen, dig);
	stack_artifact_free(&p->art);
	p->art.revision = rev;
	p->art.digest = strdup(dig);
	p->art.content = text;
	p->verified_none = 1;
	if (rev == NULL || p->art.digest == NULL) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 1000, "out of memory");
		return 1;
	}
	return 0;
}

/* Writes the entry en (locked) from text: staging, then one rename. */
static int fill_entry(const struct flux_store_entry *en, const char *text, struct err *e)
{
	char staging[PATH_MAX], file[PATH_MAX];
	struct err ce;

	if (fs_staging_dir(en->dir, staging, sizeof(staging), e) < 0)
		return -1;
	if (fs_join(file, sizeof(file), staging, "Pulumi.yaml", e) < 0 ||
	    fs_write_file(file, text, strlen(text), 0644, e) < 0)
		goto fail;
	if (rename(staging, en->dir) < 0) {
		err_set(e, ERR_IO, "cannot move %s into place: %s", en->dir, strerror(errno));
		goto fail;
	}
	return 0;
fail:
	fs_rm_rf(staging, &ce);
	return -1;
}

/* The store entry of the rendering resolve made: p->tree; 1 when decided. */
int stack_program_fetch(struct stack_pass *p)
{
	struct flux_store_entry en;
	struct err e;
	int rc = 0;

	if (p->art.content == NULL || flux_store_entry_init(p->sc->o.storage_path, p->art.digest, &en, &e) < 0) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", 1000, "Program %s/%s: %s", p->ns,
		    p->spec.src_name, p->art.content == NULL ? "not rendered in this pass" : e.msg);
		return 1;
	}
	snprintf(p->tree, sizeof(p->tree), "%s", en.dir);
	if (fs_is_dir(en.dir))
		return 0;
	if (flux_store_entry_lock(&en, clock_mono_ms() + PROGRAM_LOCK_TIMEOUT_MS, &p->sc->cancel, &e) < 0)
		rc = -1;
	else {
		/* Whoever held the lock before may have just written it. */
		rc = fs_is_dir(en.dir) ? 0 : fill_entry(&en, p->art.content, &e);
		flux_store_entry_unlock(&en, rc == 0);
	}
	if (rc < 0) {
		stack_verdict(p, STACK_WAITING, "ArtifactFailed", p->sc->o.requeue_dependency_ms,
		    "Program %s/%s: cannot write its revision into the store: %s; retrying", p->ns,
		    p->spec.src_name, e.msg);
		p->v.event = 1;
		return 1;
	}
	log_debug("program rendered into the store", "revision", p->art.revision, NULL);
	return 0;
}
