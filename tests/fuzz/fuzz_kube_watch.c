/*
 * fuzz_kube_watch.c - libFuzzer target for the watch stream: the input is
 * cut into chunks at positions taken from its first bytes (as libcurl may
 * cut a body anywhere) and fed to the line splitter; each line goes to the
 * event decoder and, for objects, to the cache's key and strip functions.
 * Any crash, leak or sanitizer report is a bug.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

static int on_line(void *ud, char *line, size_t len, struct err *e)
{
	struct kube_watch_event ev;
	(void)ud;

	if (kube_watch_event_parse(line, len, &ev, e) < 0)
		return 0;   /* a bad event: the informer would reconnect */
	if (ev.type != KUBE_ERROR && ev.type != KUBE_BOOKMARK) {
		char *key = kube_object_key(ev.object);
		kube_strip_object(ev.object);
		free(key);
	}
	kube_watch_event_clear(&ev);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kube_lines l;
	struct err e;
	size_t pos = 0, cut = 1;

	if (size > 0) {
		cut = (size_t)data[0] % 64 + 1;
		data++;
		size--;
	}
	kube_lines_init(&l, 4096);
	while (pos < size) {
		size_t n = size - pos < cut ? size - pos : cut;
		if (kube_lines_feed(&l, (const char *)data + pos, n, on_line, NULL, &e) < 0)
			break;
		pos += n;
		cut = cut * 3 % 97 + 1;   /* vary the chunk sizes */
	}
	kube_lines_free(&l);
	return 0;
}
