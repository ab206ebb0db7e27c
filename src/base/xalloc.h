/*
 * xalloc.h - allocation that cannot fail: malloc and friends that abort
 * the process when memory runs out, and the out-of-memory policy of the
 * helpers built on them (strbuf.h, strmap.h).
 *
 * The policy, in one place:
 *   - xmalloc, xcalloc, xrealloc, xstrdup, xstrndup, and every strbuf_ and
 *     strmap_ function, abort (after one line on stderr) when an
 *     allocation fails.  They serve the long-running controller's runtime
 *     (src/kube/: the informer caches, the request builders, the queue),
 *     where a failed allocation of a few hundred bytes has no sensible
 *     recovery: the process is restarted by its pod, and the caches are
 *     rebuilt from the API server.  Callers of these never check.
 *   - Everything else returns -1 with ERR_NOMEM (base/err.h): the one-shot
 *     commands, the artifact store, the OCI client and the pulumi driver,
 *     where a failure must reach the user as a message and an exit code.
 *     Those modules use malloc directly and do not call these helpers.
 * Code that reports ERR_NOMEM must not call into this header: it would
 * turn a reportable failure into an abort.
 */
#ifndef PC_XALLOC_H
#define PC_XALLOC_H

#include <stddef.h>

/* Never NULL (a zero size allocates one byte); the caller frees. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
/* Copies of s and of its first n bytes (NUL-terminated); s must not be
 * NULL.  The caller frees. */
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

#endif
