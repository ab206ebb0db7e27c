/*
 * err.c - filling and decorating `struct err` (see err.h).
 */
#include "base/err.h"

#include <stdio.h>
#include <string.h>

int err_vset(struct err *e, enum err_code code, const char *fmt, va_list ap)
{
	if (e == NULL)
		return -1;
	e->code = code;
	e->http_status = 0;
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	return -1;
}

int err_set(struct err *e, enum err_code code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(e, code, fmt, ap);
	va_end(ap);
	return -1;
}

void err_prefix(struct err *e, const char *fmt, ...)
{
	char ctx[ERR_MSG_MAX], old[ERR_MSG_MAX];
	va_list ap;

	if (e == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(ctx, sizeof(ctx), fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof(old));
	snprintf(e->msg, sizeof(e->msg), "%s: %s", ctx, old);
}

void err_clear(struct err *e)
{
	if (e == NULL)
		return;
	e->code = ERR_OK;
	e->http_status = 0;
	e->msg[0] = '\0';
}

const char *err_code_name(enum err_code code)
{
	switch (code) {
	case ERR_OK: return "ok";
	case ERR_INVALID: return "invalid";
	case ERR_IO: return "io";
	case ERR_NOMEM: return "nomem";
	case ERR_NET: return "network";
	case ERR_TIMEOUT: return "timeout";
	case ERR_HTTP: return "http";
	case ERR_NOTFOUND: return "notfound";
	case ERR_AUTH: return "auth";
	case ERR_DIGEST: return "digest";
	case ERR_LIMIT: return "limit";
	case ERR_REFUSED: return "refused";
	case ERR_UNSUPPORTED: return "unsupported";
	case ERR_CONFLICT: return "conflict";
	case ERR_CANCELED: return "canceled";
	}
	return "unknown";
}
