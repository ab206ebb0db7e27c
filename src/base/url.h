/*
 * url.h - URLs made safe to print.
 *
 * A URL that reaches an error message, a log line, an event or a status
 * field may carry a credential: userinfo ("https://user:password@host/"), a
 * presigned object-storage query ("?X-Amz-Signature=..."), a token in the
 * query or the fragment.  url_for_log() is the one function every message
 * passes a URL through: it keeps scheme, host, port and path and drops
 * userinfo, query and fragment; control characters are escaped (see
 * log_printable), so a hostile Location header cannot break a message into
 * several lines.
 *
 *     char safe[URL_LOG_MAX];
 *     err_set(e, ERR_NET, "GET %s: ...", url_for_log(url, safe, sizeof(safe)));
 *
 * Text that does not parse as a URL is printed conservatively: everything up
 * to the last '@' after the scheme and everything from the first '?' or '#'
 * are dropped, so a secret is never printed because its URL was malformed.
 */
#ifndef PC_URL_H
#define PC_URL_H

#include <stddef.h>

/* Enough for any URL we would want to read in a message; longer ones are cut
 * (with "...").  A message line has ERR_MSG_MAX (1024) bytes in all. */
#define URL_LOG_MAX 512

/* Writes the printable form of url (NULL gives "(none)") into out (n > 0
 * bytes, always NUL-terminated) and returns out. */
const char *url_for_log(const char *url, char *out, size_t n);

/* The same, malloc'd (the caller frees); NULL only when out of memory. */
char *url_for_log_dup(const char *url);

#endif
