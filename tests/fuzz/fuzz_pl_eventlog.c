/*
 * fuzz_pl_eventlog.c - libFuzzer target for the pulumi driver's event-log
 * reader (pl_events_feed in src/pulumi/pl_parse.c): arbitrary bytes, fed in
 * chunks whose sizes come from the input itself, must never crash, leak or
 * leave the reader inconsistent.  Secrets are set, so every diagnostic also
 * goes through the masking (multi-line and JSON secrets), and the root
 * stack's outputs through the secret-value masking.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pulumi/pulumi.h"

static void on_step(void *arg, const struct pl_step *s)
{
	size_t *n = arg;

	*n += strlen(s->op) + strlen(s->urn) + (s->type ? strlen(s->type) : 0);
}

static const char *const secrets[] = {
	"-----BEGIN KEY-----\nMIIEvQIBADANBgkq\n-----END KEY-----\n",
	"{\"private_key\": \"line-one-x\\nline-two-y\", \"k\": [\"leafvalue\"]}",
	"pw",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pl_events ev;
	size_t seen = 0, off = 0, chunk;

	if (size == 0)
		return 0;
	chunk = (size_t)data[0] % 64 + 1;
	pl_events_init(&ev);
	ev.progress = on_step;
	ev.progress_arg = &seen;
	ev.secrets = secrets;
	ev.n_secrets = sizeof(secrets) / sizeof(secrets[0]);
	for (off = 1; off < size; off += chunk)
		pl_events_feed(&ev, (const char *)data + off, size - off < chunk ? size - off : chunk);
	pl_events_finish(&ev);
	if (ev.summary.count < 0 || strlen(ev.first_error) >= sizeof(ev.first_error) ||
	    (ev.outputs != NULL && !cJSON_IsObject(ev.outputs)) || strstr(ev.first_error, "MIIEvQIBADANBgkq"))
		__builtin_trap();
	pl_events_free(&ev);
	return 0;
}
