/*
 * err.h - the error type shared by every module.
 *
 * A function that can fail returns -1 (or NULL) and fills a caller-owned
 * `struct err` with a code a program can act on and a one-line message a
 * person can read.  Messages name the object at fault (URL, file, archive
 * entry) and never contain secrets: callers must not format credentials or
 * secret values into them.
 *
 * Context is added on the way up with err_prefix(), so the final message
 * reads like "fetch http://x/a.tar.gz: archive entry \"../x\": ...".
 */
#ifndef PC_ERR_H
#define PC_ERR_H

#include <stdarg.h>

enum err_code {
	ERR_OK = 0,
	ERR_INVALID,     /* bad argument or malformed input from a user */
	ERR_IO,          /* local filesystem or system call failed */
	ERR_NOMEM,
	ERR_NET,         /* could not connect, connection reset, TLS failure */
	ERR_TIMEOUT,     /* a connect, transfer or process timeout expired */
	ERR_HTTP,        /* the server answered with an unwanted status */
	ERR_NOTFOUND,    /* HTTP 404 or a missing object */
	ERR_AUTH,        /* HTTP 401/403 or credentials refused */
	ERR_DIGEST,      /* content does not match the expected digest */
	ERR_LIMIT,       /* a configured size or count limit was exceeded */
	ERR_REFUSED,     /* input violates a safety rule (hostile archive...) */
	ERR_UNSUPPORTED, /* a format or feature this program does not accept */
	ERR_CONFLICT,    /* a concurrent writer or a held lock */
	ERR_CANCELED,
};

#define ERR_MSG_MAX 1024

struct err {
	enum err_code code;
	int http_status;           /* the HTTP status when code is HTTP-related */
	char msg[ERR_MSG_MAX];
};

/* Sets code and message; always returns -1 so callers can `return err_set(...)`. */
int err_set(struct err *e, enum err_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int err_vset(struct err *e, enum err_code code, const char *fmt, va_list ap);

/* Prepends "<context>: " to the current message, keeping the code. */
void err_prefix(struct err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void err_clear(struct err *e);

/* A stable lower-case name for a code, for logs and metrics ("digest"). */
const char *err_code_name(enum err_code code);

#endif
