/*
 * pl_internal.h - shared between the files of src/pulumi/ only; the public
 * interface is pulumi.h.
 */
#ifndef PC_PL_INTERNAL_H
#define PC_PL_INTERNAL_H

#include "base/proc.h"
#include "pulumi/pulumi.h"

/* A growable NULL-terminated vector of owned strings (argv, envp). */
struct pl_strv {
	char **v;
	size_t n, cap;
	int oom;
};

void pl_strv_add(struct pl_strv *s, const char *str);
void pl_strv_addf(struct pl_strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pl_strv_free(struct pl_strv *s);

/* The keys under `config:` in <workdir>/Pulumi.<stack>.yaml (or .yml; the
 * last "/" segment of stack), as a new cJSON array of strings (caller
 * frees); an empty array when the file does not exist.  -1 + e. */
int pl_stack_config_keys(const char *workdir, const char *stack, cJSON **keys, struct err *e);

/* Reads `name:` from <workdir>/Pulumi.yaml (or .yml) into out.  -1 + e. */
int pl_project_name(const char *workdir, char *out, size_t outlen, struct err *e);

/* 1 when the extended regular expression matches somewhere in hay (NULL: 0). */
int pl_text_matches(const char *hay, const char *pattern);

/* Classifies a finished CLI call and writes r->status and r->message.
 * ev may be NULL (no event log).  op names the operation for the message. */
void pl_classify(const char *op, const struct proc_result *pr, const struct pl_events *ev,
		 const char *const *secrets, size_t n_secrets, struct pl_result *r);

/* Writes a status-fit message: "<op>: <text>", one line, secrets masked,
 * at most 300 bytes. */
void pl_set_message(struct pl_result *r, const char *op, const char *text,
		    const char *const *secrets, size_t n_secrets);

#endif
