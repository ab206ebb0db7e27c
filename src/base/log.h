/*
 * log.h - structured logging: one JSON object per line (the default, what a
 * log pipeline in a cluster wants) or a human text format for terminals.
 *
 * A record is a level, a message and string key/value pairs:
 *
 *     log_info("artifact stored", "digest", d, "path", p, NULL);
 *
 * writes {"level":"info","ts":"2026-11-30T10:00:00.123Z","msg":"artifact
 * stored","digest":"sha256:...","path":"..."}.  The pair list ends with NULL.
 * Callers must never pass secret values, and pass URLs through url_for_log
 * (base/url.h).  Thread-safe: records from several threads never interleave.
 * Each record is one line in both formats: the text format escapes control
 * characters, quotes and backslashes in values (log_printable below).
 */
#ifndef PC_LOG_H
#define PC_LOG_H

#include <stdio.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF };
enum log_format { LOG_JSON = 0, LOG_TEXT };

/* Output goes to `out` (not owned; stderr by default). */
void log_setup(enum log_level level, enum log_format format, FILE *out);

/* Parse "debug|info|warn|error|off" / "json|text"; -1 when unknown. */
int log_parse_level(const char *s, enum log_level *out);
int log_parse_format(const char *s, enum log_format *out);

int log_enabled(enum log_level level);

void log_write(enum log_level level, const char *msg, ...);

/*
 * Fields this thread adds to every record it writes until they are cleared:
 * a reconcile sets namespace, name, reconcileID (and revision once known),
 * so every line of that reconcile, the driver's and the fetcher's included,
 * names the Stack and the pass.  A key the record passes itself wins over
 * the context's.  Values are copied (cut at LOG_CONTEXT_VALUE_MAX - 1
 * bytes); at most LOG_CONTEXT_MAX keys; setting a key again replaces it.
 */
#define LOG_CONTEXT_MAX 6
#define LOG_CONTEXT_VALUE_MAX 256
void log_context_set(const char *key, const char *value);
void log_context_clear(void);

/*
 * Copies untrusted text (a server's message, a name from an archive, a
 * command-line value echoed back) into out so that it stays on one line:
 * control characters become \n, \r, \t or \xNN; other bytes, UTF-8
 * included, are kept.  Text that does not fit is cut and ends in "...".
 * out (n > 0 bytes) is always NUL-terminated; returns out.  The text log
 * format applies the same escaping, plus \" and \\ inside quoted values.
 */
const char *log_printable(const char *in, char *out, size_t n);

/* log_printable with more escaped: LOG_ESC_QUOTES adds \" and \\,
 * LOG_ESC_BYTES writes every byte outside printable ASCII as \xNN (for
 * names from an archive, which need not be UTF-8; \n is \x0a there).  Text whose escaped form is longer
 * than n - 4 bytes is cut there and ends in "...". */
#define LOG_ESC_QUOTES    1u
#define LOG_ESC_BYTES 2u
const char *log_escape(const char *in, char *out, size_t n, unsigned flags);

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_write(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
