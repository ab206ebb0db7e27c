/*
 * store.c - OCI layers in the shared artifact store (oci_store_pull in
 * oci.h).  The layout, the entry lock and the staging rules are the Flux
 * store's (fluxsource/fluxsource.h): an OCI layer digest is the digest of
 * a compressed tarball, just as a Flux artifact's is, so one tree serves
 * both when they are the same bytes.
 */
#include "oci/oci.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/fs.h"
#include "fluxsource/fluxsource.h"
#include "oci/internal.h"

static void set_cached(int *cached, int v)
{
	if (cached != NULL)
		*cached = v;
}

int oci_store_pull(const char *store_root, struct oci_client *c, const struct oci_ref *ref,
    const struct oci_pull_opts *o, struct oci_pull_result *res, char *path_out, size_t path_len,
    int *cached, struct err *e)
{
	struct flux_store_entry en;
	int64_t deadline;
	int rc = -1;

	set_cached(cached, 0);
	if (oci_resolve(c, ref, o, res, e) < 0)
		return -1;
	if (flux_store_entry_init(store_root, res->layer_digest, &en, e) < 0)
		goto fail;
	if ((size_t)snprintf(path_out, path_len, "%s", en.dir) >= path_len) {
		err_set(e, ERR_INVALID, "path buffer too small for %s", en.dir);
		goto fail;
	}
	if (fs_is_dir(en.dir)) {
		set_cached(cached, 1);
		return 0;
	}
	deadline = o->lock_timeout_ms > 0 ? clock_mono_ms() + o->lock_timeout_ms : 0;
	if (flux_store_entry_lock(&en, deadline, oci_client_http(c)->cancel, e) < 0)
		goto fail;
	/* Whoever held the lock before us may have just stored this layer. */
	if (fs_is_dir(en.dir)) {
		set_cached(cached, 1);
		rc = 0;
	} else {
		rc = oci_fetch_layer(c, ref->repository, res, o, en.dir, 1, e);
	}
	flux_store_entry_unlock(&en, rc == 0);
	if (rc == 0)
		return 0;
fail:
	oci_pull_result_free(res);
	return -1;
}
