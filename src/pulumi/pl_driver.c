/*
 * pl_driver.c - the operations of the pulumi driver (see pulumi.h).
 *
 * Each operation is one or more CLI calls made through call(): it builds
 * the child's environment from nothing (scope decides which Automation API
 * variables are present, reference/pulumi-cli.md §1.3/§1.6), prepends
 * --non-interactive as the Go SDK does, refuses to put a known secret on
 * the command line, runs the CLI under proc_run with the stack's timeout,
 * tails the --event-log file for progress while it runs, and classifies
 * the outcome.  Secret values enter the CLI only through stdin
 * (`config set --secret KEY`), and every text handed back or logged is
 * passed through pl_redact with all secrets known so far.
 */
#include "pulumi/pl_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/fs.h"
#include "base/log.h"

#define DEFAULT_PATH     "/usr/local/bin:/usr/bin:/bin"
#define DEFAULT_TIMEOUT  (60L * 60 * 1000)
#define JSON_TAIL_MAX    (16u * 1024 * 1024)   /* stdout of JSON-reading calls */
/* The CLI writes a log file into $PULUMI_HOME/logs for every command
 * (v3.274.1: `pulumi-<time>-<command>.log`, `<org>+<project>+<stack>-<time>.log`)
 * and never removes one; PULUMI_HOME is shared by every stack, so a controller
 * would fill its disk.  After each call only this many, the newest, are kept. */
#define CLI_LOGS_KEEP    64

struct env_copy {
	char *name, *value;
	int secret;
};

struct cfg_copy {
	char *key, *value;
	int secret, structured;
};

struct pl_stack {
	char *bin, *search_path, *home, *pulumi_home, *workdir, *scratch, *stack;
	char *backend, *provider, *passphrase, *min_version;
	struct env_copy *env;
	size_t n_env;
	struct cfg_copy *cfg;
	size_t n_cfg;
	long timeout_ms, grace_ms;
	size_t tail_max;
	int skip_version_check;
	char **secrets;          /* every known secret value, owned */
	size_t n_secrets, cap_secrets;
	int oom;
	atomic_int interrupt;    /* pl_interrupt was called */
};

enum scope {
	SCOPE_PROBE,      /* `pulumi version`: no Automation API variables */
	SCOPE_WORKSPACE,  /* stack select/init, config, install, stack output */
	SCOPE_STACK,      /* preview/up/refresh/destroy/history/cancel: + PULUMI_DEBUG_COMMANDS */
};

/* ---- spec copying and validation ---- */

static char *dup_or_null(const char *s, int *oom)
{
	char *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	if (d == NULL)
		*oom = 1;
	return d;
}

static void add_secret(struct pl_stack *st, const char *v)
{
	char *copy;

	if (v == NULL || *v == '\0')
		return;
	for (size_t i = 0; i < st->n_secrets; i++)
		if (strcmp(st->secrets[i], v) == 0)
			return;
	if (st->n_secrets == st->cap_secrets) {
		size_t cap = st->cap_secrets ? st->cap_secrets * 2 : 8;
		char **nv = realloc(st->secrets, cap * sizeof(*nv));

		if (nv == NULL) {
			st->oom = 1;
			return;
		}
		st->secrets = nv;
		st->cap_secrets = cap;
	}
	copy = strdup(v);
	if (copy == NULL) {
		st->oom = 1;
		return;
	}
	st->secrets[st->n_secrets++] = copy;
}

/* Every string and number leaf of a JSON value is a secret when the whole
 * value is: the CLI may print any of them. */
static void add_secret_leaves(struct pl_stack *st, const cJSON *v)
{
	if (cJSON_IsString(v)) {
		add_secret(st, v->valuestring);
	} else if (cJSON_IsNumber(v) || cJSON_IsBool(v)) {
		char *p = cJSON_PrintUnformatted(v);

		if (p && strlen(p) >= 4)   /* masking "1" or "true" everywhere helps no one */
			add_secret(st, p);
		free(p);
	} else {
		for (const cJSON *c = v ? v->child : NULL; c; c = c->next)
			add_secret_leaves(st, c);
	}
}

/* 1 when a query parameter's name says its value is a credential: a
 * token, a key, an Azure SAS signature (sig=), a password. */
static int credential_param(const char *name, size_t len)
{
	static const char *const words[] = {
		"token", "secret", "password", "passwd", "pwd", "key", "sig", "credential", "auth",
	};
	char low[64];

	if (len == 0 || len >= sizeof(low))
		return len > 0;   /* an absurdly long name: assume the worst */
	for (size_t i = 0; i < len; i++)
		low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
	low[len] = '\0';
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strstr(low, words[i]))
			return 1;
	return 0;
}

/* Adds s and, when it differs, its percent-decoded form. */
static void add_secret_and_decoded(struct pl_stack *st, const char *s, size_t len)
{
	char *raw = strndup(s, len);
	int dlen = 0;
	char *dec = raw ? curl_easy_unescape(NULL, raw, 0, &dlen) : NULL;

	if (raw == NULL || dec == NULL) {
		st->oom = 1;
	} else {
		add_secret(st, raw);
		if ((size_t)dlen == strlen(dec))   /* no NUL smuggled in */
			add_secret(st, dec);
	}
	free(raw);
	curl_free(dec);
}

/* The credential query values of query (not decoded); returns how many. */
static int add_query_credentials(struct pl_stack *st, const char *query)
{
	int found = 0;

	while (query && *query) {
		size_t len = strcspn(query, "&");
		const char *eq = memchr(query, '=', len);

		if (eq && credential_param(query, (size_t)(eq - query)) && eq + 1 < query + len) {
			add_secret_and_decoded(st, eq + 1, (size_t)(query + len - eq - 1));
			found++;
		}
		query += len;
		if (*query == '&')
			query++;
	}
	return found;
}

/*
 * A backend URL may carry credentials: userinfo (postgres://user:pw@host/db,
 * https://TOKEN@host) or a query credential (azblob SAS sig=, ?token=).
 * Then the whole URL is a secret, and so is each credential part (raw and
 * percent-decoded), for the CLI may print either.  A URL without any is
 * left visible: it names the backend in messages.
 */
static void add_backend_secrets(struct pl_stack *st, const char *url)
{
	CURLU *u;
	char *user = NULL, *pw = NULL, *query = NULL;
	int creds = 0;

	if (url == NULL || *url == '\0')
		return;
	u = curl_url();
	if (u == NULL) {
		st->oom = 1;
		return;
	}
	if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS) != CURLUE_OK) {
		/* Unparseable: whatever it holds, do not print it. */
		creds = strchr(url, '@') != NULL || strchr(url, '?') != NULL;
	} else {
		if (curl_url_get(u, CURLUPART_PASSWORD, &pw, 0) == CURLUE_OK && pw && *pw) {
			add_secret_and_decoded(st, pw, strlen(pw));
			creds++;
		} else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK && user && *user) {
			add_secret_and_decoded(st, user, strlen(user));   /* a token as user name */
			creds++;
		}
		if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK)
			creds += add_query_credentials(st, query);
	}
	if (creds > 0)
		add_secret(st, url);
	if (pw)
		explicit_bzero(pw, strlen(pw));
	curl_free(pw);
	curl_free(user);
	curl_free(query);
	curl_url_cleanup(u);
}

static int valid_env_name(const char *n)
{
	if (n == NULL || !((*n >= 'A' && *n <= 'Z') || (*n >= 'a' && *n <= 'z') || *n == '_'))
		return 0;
	for (; *n; n++)
		if (!((*n >= 'A' && *n <= 'Z') || (*n >= 'a' && *n <= 'z') || *n == '_' ||
		      (*n >= '0' && *n <= '9')))
			return 0;
	return 1;
}

static int reserved_env_name(const char *n)
{
	static const char *const names[] = {
		"PATH", "HOME", "PULUMI_HOME", "PULUMI_SKIP_UPDATE_CHECK", "PULUMI_AUTOMATION_API",
		"PULUMI_DEBUG_COMMANDS", "PULUMI_EXPERIMENTAL", PROC_MARK_VAR,
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(n, names[i]) == 0)
			return 1;
	return 0;
}

static int valid_stack_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 200)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '-' || *s == '_' || *s == '.' || *s == '/'))
			return 0;
	return 1;
}

static int valid_config_key(const char *k)
{
	if (k == NULL || *k == '\0' || *k == '-')
		return 0;
	for (; *k; k++)
		if ((unsigned char)*k < 0x20 || *k == '=' || *k == 0x7f)
			return 0;
	return 1;
}

static int copy_env(struct pl_stack *st, const struct pl_spec *sp, struct err *e)
{
	st->env = calloc(sp->n_env ? sp->n_env : 1, sizeof(*st->env));
	if (st->env == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < sp->n_env; i++) {
		const struct pl_env_var *v = &sp->env[i];

		if (!valid_env_name(v->name) || v->value == NULL)
			return err_set(e, ERR_INVALID, "stack %s: invalid environment variable name \"%.100s\"",
				       sp->stack, v->name ? v->name : "");
		if (reserved_env_name(v->name))
			return err_set(e, ERR_INVALID, "stack %s: environment variable %s is set by the driver",
				       sp->stack, v->name);
		/* The passphrase and the backend may also come as env values. */
		if (strcmp(v->name, "PULUMI_CONFIG_PASSPHRASE") == 0) {
			if (st->passphrase == NULL)
				st->passphrase = dup_or_null(v->value, &st->oom);
			continue;
		}
		if (strcmp(v->name, "PULUMI_BACKEND_URL") == 0) {
			if (st->backend == NULL)
				st->backend = dup_or_null(v->value, &st->oom);
			if (v->secret)
				add_secret(st, v->value);
			continue;
		}
		st->env[st->n_env].name = dup_or_null(v->name, &st->oom);
		st->env[st->n_env].value = dup_or_null(v->value, &st->oom);
		st->env[st->n_env].secret = v->secret;
		if (v->secret)
			add_secret(st, v->value);
		st->n_env++;
	}
	return 0;
}

static int copy_config(struct pl_stack *st, const struct pl_spec *sp, struct err *e)
{
	st->cfg = calloc(sp->n_config ? sp->n_config : 1, sizeof(*st->cfg));
	if (st->cfg == NULL)
		return err_set(e, ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < sp->n_config; i++) {
		const struct pl_config_item *c = &sp->config[i];

		if (!valid_config_key(c->key) || c->value == NULL)
			return err_set(e, ERR_INVALID, "stack %s: invalid config key \"%.100s\"", sp->stack,
				       c->key ? c->key : "");
		if (c->structured) {
			cJSON *j = cJSON_Parse(c->value);

			if (j == NULL)
				return err_set(e, ERR_INVALID, "stack %s: config %s: value is not JSON",
					       sp->stack, c->key);
			if (c->secret)
				add_secret_leaves(st, j);
			cJSON_Delete(j);
		} else if (c->secret) {
			add_secret(st, c->value);
		}
		st->cfg[i].key = dup_or_null(c->key, &st->oom);
		st->cfg[i].value = dup_or_null(c->value, &st->oom);
		st->cfg[i].secret = c->secret;
		st->cfg[i].structured = c->structured;
		st->n_cfg++;
	}
	return 0;
}

void pl_close(struct pl_stack *st)
{
	if (st == NULL)
		return;
	free(st->bin);
	free(st->search_path);
	free(st->home);
	free(st->pulumi_home);
	free(st->workdir);
	free(st->scratch);
	free(st->stack);
	free(st->backend);
	free(st->provider);
	if (st->passphrase)
		explicit_bzero(st->passphrase, strlen(st->passphrase));
	free(st->passphrase);
	free(st->min_version);
	for (size_t i = 0; i < st->n_env; i++) {
		free(st->env[i].name);
		if (st->env[i].secret && st->env[i].value)
			explicit_bzero(st->env[i].value, strlen(st->env[i].value));
		free(st->env[i].value);
	}
	free(st->env);
	for (size_t i = 0; i < st->n_cfg; i++) {
		free(st->cfg[i].key);
		if (st->cfg[i].secret && st->cfg[i].value)
			explicit_bzero(st->cfg[i].value, strlen(st->cfg[i].value));
		free(st->cfg[i].value);
	}
	free(st->cfg);
	for (size_t i = 0; i < st->n_secrets; i++) {
		explicit_bzero(st->secrets[i], strlen(st->secrets[i]));
		free(st->secrets[i]);
	}
	free(st->secrets);
	free(st);
}

struct pl_stack *pl_open(const struct pl_spec *sp, struct err *e)
{
	struct pl_stack *st;
	int dummy;

	if (sp == NULL || sp->pulumi_home == NULL || sp->workdir == NULL || sp->scratch_dir == NULL ||
	    sp->stack == NULL) {
		err_set(e, ERR_INVALID, "pulumi driver: pulumi_home, workdir, scratch_dir and stack are required");
		return NULL;
	}
	if (!valid_stack_name(sp->stack)) {
		err_set(e, ERR_INVALID, "invalid stack name \"%.100s\"", sp->stack);
		return NULL;
	}
	st = calloc(1, sizeof(*st));
	if (st == NULL) {
		err_set(e, ERR_NOMEM, "out of memory");
		return NULL;
	}
	st->bin = dup_or_null(sp->pulumi_bin ? sp->pulumi_bin : "pulumi", &st->oom);
	st->search_path = dup_or_null(sp->search_path ? sp->search_path : DEFAULT_PATH, &st->oom);
	st->pulumi_home = dup_or_null(sp->pulumi_home, &st->oom);
	st->home = dup_or_null(sp->home ? sp->home : sp->pulumi_home, &st->oom);
	st->workdir = dup_or_null(sp->workdir, &st->oom);
	st->scratch = dup_or_null(sp->scratch_dir, &st->oom);
	st->stack = dup_or_null(sp->stack, &st->oom);
	st->backend = dup_or_null(sp->backend_url, &st->oom);
	st->provider = dup_or_null(sp->secrets_provider, &st->oom);
	st->passphrase = dup_or_null(sp->passphrase, &st->oom);
	st->min_version = dup_or_null(sp->min_version ? sp->min_version : PL_MIN_VERSION, &st->oom);
	st->timeout_ms = sp->timeout_ms > 0 ? sp->timeout_ms : DEFAULT_TIMEOUT;
	st->grace_ms = sp->grace_ms;
	st->tail_max = sp->tail_max;
	st->skip_version_check = sp->skip_version_check;
	if (copy_env(st, sp, e) < 0 || copy_config(st, sp, e) < 0)
		goto fail;
	add_secret(st, st->passphrase);
	add_backend_secrets(st, st->backend);
	if (st->oom) {
		err_set(e, ERR_NOMEM, "out of memory");
		goto fail;
	}
	if (pl_parse_version(st->min_version, &dummy, &dummy, &dummy) < 0) {
		err_set(e, ERR_INVALID, "invalid minimum pulumi version \"%.50s\"", st->min_version);
		goto fail;
	}
	if (fs_mkdir_p(st->scratch, 0700, e) < 0) {
		err_prefix(e, "stack %s: scratch directory", st->stack);
		goto fail;
	}
	return st;
fail:
	pl_close(st);
	return NULL;
}

/* ---- results ---- */

void pl_result_free(struct pl_result *r)
{
	if (r == NULL)
		return;
	cJSON_Delete(r->summary.changes);
	cJSON_Delete(r->outputs);
	cJSON_Delete(r->outputs_plain);
	cJSON_Delete(r->history);
	free(r->out_tail);
	free(r->err_tail);
	memset(r, 0, sizeof(*r));
}

static void result_reset(struct pl_result *r)
{
	memset(r, 0, sizeof(*r));
	r->exit_code = -1;
}

/* Keeps the redacted tails of the latest call only. */
static void set_tails(struct pl_stack *st, struct pl_result *r, const struct proc_result *pr)
{
	free(r->out_tail);
	free(r->err_tail);
	r->out_tail = pl_redact_tail(pr->out, pr->out_total > pr->out_len,
				     (const char *const *)st->secrets, st->n_secrets);
	r->err_tail = pl_redact_tail(pr->errout, pr->err_total > pr->err_len,
				     (const char *const *)st->secrets, st->n_secrets);
}

static int fail_internal(struct pl_stack *st, struct pl_result *r, const char *op, const char *msg)
{
	r->status = PL_INTERNAL;
	pl_set_message(r, op, msg, (const char *const *)st->secrets, st->n_secrets);
	log_error("pulumi driver failure", "stack", st->stack, "op", op, "message", r->message, NULL);
	return -1;
}

/* ---- environment and argv ---- */

static void build_env(struct pl_stack *st, enum scope scope, int experimental, struct pl_strv *env)
{
	/* As the SDK does for an absolute binary: its directory goes first on
	 * PATH so the language hosts shipped beside it are found. */
	const char *slash = strrchr(st->bin, '/');

	if (slash && slash != st->bin)
		pl_strv_addf(env, "PATH=%.*s:%s", (int)(slash - st->bin), st->bin, st->search_path);
	else
		pl_strv_addf(env, "PATH=%s", st->search_path);
	pl_strv_addf(env, "HOME=%s", st->home);
	pl_strv_addf(env, "PULUMI_HOME=%s", st->pulumi_home);
	pl_strv_add(env, "PULUMI_SKIP_UPDATE_CHECK=true");
	if (scope == SCOPE_PROBE)
		return;
	pl_strv_add(env, "PULUMI_AUTOMATION_API=true");
	if (scope == SCOPE_STACK)
		pl_strv_add(env, "PULUMI_DEBUG_COMMANDS=true");
	if (experimental)
		pl_strv_add(env, "PULUMI_EXPERIMENTAL=true");
	if (st->backend)
		pl_strv_addf(env, "PULUMI_BACKEND_URL=%s", st->backend);
	if (st->passphrase)
		pl_strv_addf(env, "PULUMI_CONFIG_PASSPHRASE=%s", st->passphrase);
	for (size_t i = 0; i < st->n_env; i++)
		pl_strv_addf(env, "%s=%s", st->env[i].name, st->env[i].value);
}

/* A secret must never reach argv, where any process can read it from
 * /proc: refuse an argument equal to a secret or ending in "=<secret>". */
static const char *secret_in_argv(struct pl_stack *st, char *const *argv)
{
	for (; *argv; argv++) {
		const char *eq = strchr(*argv, '=');

		for (size_t i = 0; i < st->n_secrets; i++)
			if (strcmp(*argv, st->secrets[i]) == 0 || (eq && strcmp(eq + 1, st->secrets[i]) == 0))
				return *argv;
	}
	return NULL;
}

static char *join_args(char *const *argv)
{
	size_t len = 1;
	char *s, *w;

	for (char *const *a = argv; *a; a++)
		len += strlen(*a) + 1;
	s = malloc(len);
	if (s == NULL)
		return NULL;
	w = s;
	for (char *const *a = argv; *a; a++) {
		size_t l = strlen(*a);

		if (w != s)
			*w++ = ' ';
		memcpy(w, *a, l);
		w += l;
	}
	*w = '\0';
	return s;
}

/* ---- the event log, read while the CLI runs ---- */

struct evtail {
	const char *path;
	int fd;
	struct pl_events *ev;
};

static void evtail_pump(void *arg)
{
	struct evtail *t = arg;
	char buf[16384];
	ssize_t n;

	if (t->fd < 0)
		t->fd = open(t->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (t->fd < 0)
		return;
	while ((n = read(t->fd, buf, sizeof(buf))) > 0)
		pl_events_feed(t->ev, buf, (size_t)n);
}

/* ---- one CLI call ---- */

struct call {
	const char *op;              /* for messages and logs: "up", "config set" */
	enum scope scope;
	int experimental;
	const char *stdin_data;      /* secret value for `config set --secret` */
	struct pl_events *ev;        /* when an --event-log is read */
	const char *evlog;
	size_t tail_max;             /* 0: the stack's */
	int quiet_ok;                /* a failure here is expected (select before init) */
};

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void log_call(struct pl_stack *st, const struct call *c, char *const *argv,
		     const struct pl_result *r, long ms)
{
	char *args = join_args(argv);
	char *masked = args ? pl_redact(args, (const char *const *)st->secrets, st->n_secrets) : NULL;
	char code[16], dur[24];

	snprintf(code, sizeof(code), "%d", r->exit_code);
	snprintf(dur, sizeof(dur), "%ld", ms);
	if (r->status == PL_OK || c->quiet_ok)
		log_debug("pulumi command", "stack", st->stack, "op", c->op, "args", masked ? masked : "",
			  "status", pl_status_name(r->status), "exit", code, "ms", dur, NULL);
	else
		log_warn("pulumi command failed", "stack", st->stack, "op", c->op, "args",
			 masked ? masked : "", "status", pl_status_name(r->status), "exit", code, "ms", dur,
			 "message", r->message, NULL);
	free(args);
	free(masked);
}

/* Runs `pulumi [--non-interactive] <args>` and classifies the outcome into r
 * (status, message, exit code, tails).  *out receives stdout for callers
 * that parse it (caller frees), when out is not NULL and the call ran. */
struct log_file {
	char *name;
	struct timespec mtime;
};

static int newest_first(const void *a, const void *b)
{
	const struct log_file *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
	return strcmp(y->name, x->name);
}

/* Removes all but the CLI_LOGS_KEEP newest *.log files of <pulumi_home>/logs.
 * Best effort: another stack's call may be pruning the same directory, so a
 * file already gone is fine, and a failure here never fails the call (a CLI
 * still writing to a removed file keeps writing to its open inode). */
static void prune_cli_logs(const char *pulumi_home)
{
	struct log_file *files = NULL;
	size_t n = 0, cap = 0;
	char dir[PATH_MAX];
	struct dirent *de;
	struct err e;
	DIR *d;
	int fd;

	if (fs_join(dir, sizeof(dir), pulumi_home, "logs", &e) < 0 || (d = opendir(dir)) == NULL)
		return;
	fd = dirfd(d);
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		struct stat sb;

		if (len < 5 || strcmp(de->d_name + len - 4, ".log") != 0 ||
		    fstatat(fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 128;
			struct log_file *nf = realloc(files, ncap * sizeof(*files));

			if (nf == NULL)
				break;
			files = nf;
			cap = ncap;
		}
		files[n].name = strdup(de->d_name);
		if (files[n].name == NULL)
			break;
		files[n++].mtime = sb.st_mtim;
	}
	if (n > CLI_LOGS_KEEP) {
		qsort(files, n, sizeof(*files), newest_first);
		for (size_t i = CLI_LOGS_KEEP; i < n; i++)
			unlinkat(fd, files[i].name, 0);
	}
	for (size_t i = 0; i < n; i++)
		free(files[i].name);
	free(files);
	closedir(d);
}

static int call(struct pl_stack *st, const struct call *c, struct pl_strv *args,
		struct pl_result *r, char **out)
{
	struct pl_strv argv = { 0 }, env = { 0 };
	struct proc_result pr;
	struct evtail tail = { .path = c->evlog, .fd = -1, .ev = c->ev };
	struct proc_spec ps = { 0 };
	struct err e = { 0 };
	const char *leak;
	long t0 = now_ms();

	if (out)
		*out = NULL;
	pl_strv_add(&argv, st->bin);
	if (c->scope != SCOPE_PROBE)
		pl_strv_add(&argv, "--non-interactive");
	for (size_t i = 0; i < args->n; i++)
		pl_strv_add(&argv, args->v[i]);
	build_env(st, c->scope, c->experimental, &env);
	if (argv.oom || env.oom || st->oom) {
		pl_strv_free(&argv);
		pl_strv_free(&env);
		return fail_internal(st, r, c->op, "out of memory");
	}
	if ((leak = secret_in_argv(st, argv.v)) != NULL) {
		pl_strv_free(&argv);
		pl_strv_free(&env);
		return fail_internal(st, r, c->op, "refusing to pass a secret value on the command line");
	}
	if (atomic_load(&st->interrupt)) {
		pl_strv_free(&argv);
		pl_strv_free(&env);
		r->status = PL_CANCELED;
		pl_set_message(r, c->op, "not started: the driver was interrupted", NULL, 0);
		return -1;
	}
	if (c->evlog)
		unlink(c->evlog);
	ps.file = st->bin;
	ps.argv = argv.v;
	ps.envp = env.v;
	ps.cwd = st->workdir;
	ps.stdin_data = c->stdin_data;
	ps.stdin_len = c->stdin_data ? strlen(c->stdin_data) : 0;
	ps.tail_max = c->tail_max ? c->tail_max : st->tail_max;
	ps.timeout_ms = st->timeout_ms;
	ps.grace_ms = st->grace_ms;
	ps.interrupt = &st->interrupt;
	if (c->ev) {
		ps.on_tick = evtail_pump;
		ps.tick_arg = &tail;
	}
	proc_run(&ps, &pr, &e);
	prune_cli_logs(st->pulumi_home);
	if (pr.strays_killed > 0) {
		char n[16];

		/* Plugins of a CLI that was killed (or that did not close them). */
		snprintf(n, sizeof(n), "%d", pr.strays_killed);
		log_warn("pulumi: killed processes the CLI left behind", "command", c->op,
			 "count", n, NULL);
	}
	if (c->ev) {
		evtail_pump(&tail);
		pl_events_finish(c->ev);
		if (tail.fd >= 0)
			close(tail.fd);
	}
	pl_classify(c->op, &pr, c->ev, (const char *const *)st->secrets, st->n_secrets, r);
	if (!pr.started) {
		/* Only a missing program is a missing CLI; a bad workdir is ours. */
		r->status = e.code == ERR_NOTFOUND ? PL_CLI_MISSING : PL_INTERNAL;
		pl_set_message(r, c->op, e.msg, (const char *const *)st->secrets, st->n_secrets);
	}
	set_tails(st, r, &pr);
	if (c->ev) {
		cJSON_Delete(r->summary.changes);
		r->summary = c->ev->summary;
		c->ev->summary.changes = NULL;
		r->steps = c->ev->steps;
		r->failed_steps = c->ev->failed_steps;
		r->policy_violations = c->ev->policy_violations;
	}
	log_call(st, c, argv.v, r, now_ms() - t0);
	if (out && pr.started) {
		*out = pr.out;
		pr.out = NULL;
	}
	proc_result_free(&pr);
	pl_strv_free(&argv);
	pl_strv_free(&env);
	return r->status == PL_OK ? 0 : -1;
}

/* ---- version ---- */

struct vcache {
	char *exe;
	int major, minor, patch;
	struct vcache *next;
};

static pthread_mutex_t vlock = PTHREAD_MUTEX_INITIALIZER;
static struct vcache *vhead;

static int version_cmp(int a1, int b1, int c1, int a2, int b2, int c2)
{
	if (a1 != a2)
		return a1 < a2 ? -1 : 1;
	if (b1 != b2)
		return b1 < b2 ? -1 : 1;
	return c1 < c2 ? -1 : c1 > c2;
}

static int cached_version(const char *exe, int *v)
{
	int found = 0;

	pthread_mutex_lock(&vlock);
	for (struct vcache *c = vhead; c; c = c->next)
		if (strcmp(c->exe, exe) == 0) {
			v[0] = c->major;
			v[1] = c->minor;
			v[2] = c->patch;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&vlock);
	return found;
}

static void remember_version(const char *exe, const int *v)
{
	struct vcache *c = calloc(1, sizeof(*c));

	if (c == NULL || (c->exe = strdup(exe)) == NULL) {
		free(c);
		return;
	}
	c->major = v[0];
	c->minor = v[1];
	c->patch = v[2];
	pthread_mutex_lock(&vlock);
	c->next = vhead;
	vhead = c;
	pthread_mutex_unlock(&vlock);
}

static int check_min(struct pl_stack *st, const int *v, struct pl_result *r)
{
	int m[3];
	char text[160];

	pl_parse_version(st->min_version, &m[0], &m[1], &m[2]);
	if (version_cmp(v[0], v[1], v[2], m[0], m[1], m[2]) >= 0) {
		r->status = PL_OK;
		snprintf(text, sizeof(text), "pulumi v%d.%d.%d", v[0], v[1], v[2]);
		pl_set_message(r, "version", text, NULL, 0);
		return 0;
	}
	r->status = PL_CLI_TOO_OLD;
	snprintf(text, sizeof(text), "pulumi v%d.%d.%d is older than the minimum supported v%s",
		 v[0], v[1], v[2], st->min_version);
	pl_set_message(r, "version", text, NULL, 0);
	log_error("pulumi CLI too old", "stack", st->stack, "message", r->message, NULL);
	return -1;
}

int pl_check_version(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv args = { 0 };
	struct call c = { .op = "version", .scope = SCOPE_PROBE };
	char exe[4096], *out = NULL;
	struct err e = { 0 };
	int v[3];
	const char *slash = strrchr(st->bin, '/');
	char path[8192];

	result_reset(r);
	if (slash && slash != st->bin)
		snprintf(path, sizeof(path), "%.*s:%s", (int)(slash - st->bin), st->bin, st->search_path);
	else
		snprintf(path, sizeof(path), "%s", st->search_path);
	if (proc_find_exe(st->bin, path, exe, sizeof(exe), &e) < 0) {
		r->status = PL_CLI_MISSING;
		pl_set_message(r, "version", e.msg, NULL, 0);
		log_error("pulumi CLI missing", "stack", st->stack, "message", r->message, NULL);
		return -1;
	}
	if (st->skip_version_check) {
		r->status = PL_OK;
		pl_set_message(r, "version", "check skipped", NULL, 0);
		return 0;
	}
	if (cached_version(exe, v))
		return check_min(st, v, r);
	pl_strv_add(&args, "version");
	if (call(st, &c, &args, r, &out) < 0) {
		pl_strv_free(&args);
		free(out);
		return -1;
	}
	pl_strv_free(&args);
	if (pl_parse_version(out, &v[0], &v[1], &v[2]) < 0) {
		free(out);
		r->status = PL_CLI_MISSING;
		pl_set_message(r, "version", "`pulumi version` printed no version", NULL, 0);
		return -1;
	}
	free(out);
	remember_version(exe, v);
	return check_min(st, v, r);
}

/* Every operation starts here: the version check (cached) on a fresh result. */
static int begin(struct pl_stack *st, struct pl_result *r)
{
	if (pl_check_version(st, r) < 0)
		return -1;
	pl_result_free(r);
	result_reset(r);
	return 0;
}

/* ---- stack selection ---- */


int pl_ensure_stack(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct call sel = { .op = "stack select", .scope = SCOPE_WORKSPACE, .quiet_ok = 1 };
	struct call init = { .op = "stack init", .scope = SCOPE_WORKSPACE };
	int rc;

	if (begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "stack");
	pl_strv_add(&a, "select");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	rc = call(st, &sel, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0 || r->status != PL_NOT_FOUND)
		return rc;
	pl_strv_add(&a, "stack");
	pl_strv_add(&a, "init");
	pl_strv_add(&a, st->stack);
	if (st->provider) {
		pl_strv_add(&a, "--secrets-provider");
		pl_strv_add(&a, st->provider);
	}
	rc = call(st, &init, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0) {
		log_info("pulumi stack created", "stack", st->stack, NULL);
		return 0;
	}
	/* Created by someone else since our select (reference §3.1
	 * IsCreateStack409Error): select it after all. */
	if (pl_text_matches(r->err_tail, "stack.*already exists")) {
		pl_strv_add(&a, "stack");
		pl_strv_add(&a, "select");
		pl_strv_add(&a, "--stack");
		pl_strv_add(&a, st->stack);
		sel.quiet_ok = 0;
		rc = call(st, &sel, &a, r, NULL);
		pl_strv_free(&a);
	}
	return rc;
}

/* ---- config ---- */

static int simple_segment(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '_' || *s == '-'))
			return 0;
	return 1;
}

/* Flattens a structured value into --path keys ("k.a[0]", `k["x.y"]`) and
 * their leaf values.  -1 for a member name the path syntax cannot carry. */
static int flatten(const char *prefix, const cJSON *v, struct pl_strv *keys, struct pl_strv *vals)
{
	if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
		int i = 0;

		for (const cJSON *c = v->child; c; c = c->next, i++) {
			char *k = NULL;
			int n;

			if (cJSON_IsArray(v))
				n = asprintf(&k, "%s[%d]", prefix, i);
			else if (c->string && simple_segment(c->string))
				n = asprintf(&k, "%s.%s", prefix, c->string);
			else if (c->string && !strpbrk(c->string, "\"\\") && c->string[0])
				n = asprintf(&k, "%s[\"%s\"]", prefix, c->string);
			else
				return -1;
			if (n < 0)
				return -1;
			n = flatten(k, c, keys, vals);
			free(k);
			if (n < 0)
				return -1;
		}
		return 0;
	}
	if (cJSON_IsNull(v))
		return 0;
	pl_strv_add(keys, prefix);
	if (cJSON_IsString(v)) {
		pl_strv_add(vals, v->valuestring);
	} else {
		char *p = cJSON_PrintUnformatted(v);

		pl_strv_add(vals, p ? p : "");
		free(p);
	}
	return 0;
}

/* Splits the declared config into plain pairs, --path pairs, and secrets
 * (each with its own path flag). */
struct cfg_plan {
	struct pl_strv plain_k, plain_v, path_k, path_v, sec_k, sec_v;
	int *sec_path;
	size_t n_sec_path;
};

static void cfg_plan_free(struct cfg_plan *p)
{
	pl_strv_free(&p->plain_k);
	pl_strv_free(&p->plain_v);
	pl_strv_free(&p->path_k);
	pl_strv_free(&p->path_v);
	for (size_t i = 0; i < p->sec_v.n; i++)
		explicit_bzero(p->sec_v.v[i], strlen(p->sec_v.v[i]));
	pl_strv_free(&p->sec_k);
	pl_strv_free(&p->sec_v);
	free(p->sec_path);
}

static int cfg_plan_build(struct pl_stack *st, struct cfg_plan *p, char *bad, size_t badlen)
{
	p->sec_path = calloc(1, sizeof(int));
	for (size_t i = 0; i < st->n_cfg; i++) {
		const struct cfg_copy *c = &st->cfg[i];
		size_t before = p->sec_k.n;

		if (!c->structured) {
			pl_strv_add(c->secret ? &p->sec_k : &p->plain_k, c->key);
			pl_strv_add(c->secret ? &p->sec_v : &p->plain_v, c->value);
		} else {
			cJSON *j = cJSON_Parse(c->value);
			int rc = j ? flatten(c->key, j, c->secret ? &p->sec_k : &p->path_k,
					     c->secret ? &p->sec_v : &p->path_v) : -1;

			cJSON_Delete(j);
			if (rc < 0) {
				snprintf(bad, badlen, "config %s: a member name cannot be expressed as a --path key",
					 c->key);
				return -1;
			}
		}
		int *np = realloc(p->sec_path, (p->sec_k.n + 1) * sizeof(int));

		if (np == NULL)
			return -1;
		p->sec_path = np;
		for (size_t k = before; k < p->sec_k.n; k++)
			p->sec_path[k] = c->structured;
	}
	return p->plain_k.oom || p->plain_v.oom || p->path_k.oom || p->sec_k.oom || p->sec_v.oom ? -1 : 0;
}

static int set_all(struct pl_stack *st, struct pl_strv *k, struct pl_strv *v, int path,
		   struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct call c = { .op = "config set-all", .scope = SCOPE_WORKSPACE };
	int rc;

	if (k->n == 0)
		return 0;
	pl_strv_add(&a, "config");
	pl_strv_add(&a, "set-all");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	if (path)
		pl_strv_add(&a, "--path");
	for (size_t i = 0; i < k->n; i++) {
		pl_strv_add(&a, "--plaintext");
		pl_strv_addf(&a, "%s=%s", k->v[i], v->v[i]);
	}
	rc = call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	return rc;
}

static int set_secret(struct pl_stack *st, const char *key, const char *value, int path,
		      struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct call c = { .op = "config set --secret", .scope = SCOPE_WORKSPACE, .stdin_data = value };
	int rc;

	pl_strv_add(&a, "config");
	pl_strv_add(&a, "set");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	if (path)
		pl_strv_add(&a, "--path");
	pl_strv_add(&a, "--secret");
	pl_strv_add(&a, "--");
	pl_strv_add(&a, key);
	rc = call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	return rc;
}

static int declared(struct pl_stack *st, const char *project, const char *full)
{
	for (size_t i = 0; i < st->n_cfg; i++) {
		const char *k = st->cfg[i].key;
		size_t pl = strlen(project);

		if (strcmp(k, full) == 0)
			return 1;
		if (!strchr(k, ':') && strncmp(full, project, pl) == 0 && full[pl] == ':' &&
		    strcmp(full + pl + 1, k) == 0)
			return 1;
	}
	return 0;
}

static int remove_undeclared(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	char project[256];
	struct err e = { 0 };
	cJSON *keys = NULL;
	int rc = 0;

	if (pl_project_name(st->workdir, project, sizeof(project), &e) < 0 ||
	    pl_stack_config_keys(st->workdir, st->stack, &keys, &e) < 0) {
		cJSON_Delete(keys);
		return fail_internal(st, r, "config", e.msg);
	}
	for (const cJSON *k = keys->child; k && rc == 0; k = k->next) {
		struct call rm = { .op = "config rm", .scope = SCOPE_WORKSPACE };

		if (declared(st, project, k->valuestring))
			continue;
		pl_strv_add(&a, "config");
		pl_strv_add(&a, "rm");
		pl_strv_add(&a, "--stack");
		pl_strv_add(&a, st->stack);
		pl_strv_add(&a, "--");
		pl_strv_add(&a, k->valuestring);
		rc = call(st, &rm, &a, r, NULL);
		pl_strv_free(&a);
		if (rc == 0)
			log_info("pulumi config key removed", "stack", st->stack, "key", k->valuestring, NULL);
	}
	cJSON_Delete(keys);
	return rc;
}

int pl_apply_config(struct pl_stack *st, struct pl_result *r)
{
	struct cfg_plan p = { 0 };
	char bad[300] = "";
	int rc = 0;

	if (begin(st, r) < 0)
		return -1;
	if (cfg_plan_build(st, &p, bad, sizeof(bad)) < 0) {
		cfg_plan_free(&p);
		return fail_internal(st, r, "config", bad[0] ? bad : "out of memory");
	}
	rc = set_all(st, &p.plain_k, &p.plain_v, 0, r);
	if (rc == 0)
		rc = set_all(st, &p.path_k, &p.path_v, 1, r);
	for (size_t i = 0; rc == 0 && i < p.sec_k.n; i++)
		rc = set_secret(st, p.sec_k.v[i], p.sec_v.v[i], p.sec_path[i], r);
	cfg_plan_free(&p);
	if (rc == 0)
		rc = remove_undeclared(st, r);   /* after the sets: the file exists now */
	if (rc == 0)
		pl_set_message(r, "config", "applied", NULL, 0);
	return rc;
}

/* ---- install ---- */

int pl_install(struct pl_stack *st, const char *revision, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct call c = { .op = "install", .scope = SCOPE_WORKSPACE };
	char marker[4096], *prev = NULL;
	struct err e = { 0 };
	size_t len;
	int rc;

	if (begin(st, r) < 0)
		return -1;
	snprintf(marker, sizeof(marker), "%s/installed-revision", st->scratch);
	if (revision && fs_read_file(marker, 4096, &prev, &len, &e) == 0 && strcmp(prev, revision) == 0) {
		free(prev);
		pl_set_message(r, "install", "already installed for this revision", NULL, 0);
		return 0;
	}
	free(prev);
	unlink(marker);
	pl_strv_add(&a, "install");
	rc = call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0 && revision) {
		FILE *f = fopen(marker, "we");

		if (f == NULL || fputs(revision, f) < 0 || fclose(f) != 0) {
			if (f)
				fclose(f);
			return fail_internal(st, r, "install", "cannot record the installed revision");
		}
	}
	return rc;
}

/* ---- stack operations with an event log ---- */

static void add_common(struct pl_strv *a, const struct pl_op_opts *o)
{
	if (o == NULL)
		return;
	if (o->expect_no_changes)
		pl_strv_add(a, "--expect-no-changes");
	for (size_t i = 0; i < o->n_targets; i++)
		pl_strv_addf(a, "--target=%s", o->targets[i]);
}

static void add_policy(struct pl_strv *a, const struct pl_op_opts *o)
{
	for (size_t i = 0; o && i < o->n_policy_packs; i++)
		pl_strv_addf(a, "--policy-pack=%s", o->policy_packs[i]);
}

static int run_logged(struct pl_stack *st, const char *op, struct pl_strv *a,
		      const struct pl_op_opts *o, int experimental, struct pl_result *r)
{
	struct pl_events ev;
	char evlog[4096];
	struct call c = { .op = op, .scope = SCOPE_STACK, .experimental = experimental, .ev = &ev,
			  .evlog = evlog };
	int rc;

	snprintf(evlog, sizeof(evlog), "%s/events-%s.jsonl", st->scratch, op);
	pl_events_init(&ev);
	ev.secrets = (const char *const *)st->secrets;
	ev.n_secrets = st->n_secrets;
	if (o) {
		ev.progress = o->progress;
		ev.progress_arg = o->progress_arg;
	}
	pl_strv_add(a, "--exec-kind=auto.local");
	pl_strv_add(a, "--event-log");
	pl_strv_add(a, evlog);
	pl_strv_add(a, "--stack");
	pl_strv_add(a, st->stack);
	rc = call(st, &c, a, r, NULL);
	pl_events_free(&ev);
	return rc;
}

int pl_preview(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	int rc;

	if (begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "preview");
	add_common(&a, o);
	add_policy(&a, o);
	if (o && o->plan_file)
		pl_strv_addf(&a, "--save-plan=%s", o->plan_file);
	if (o && o->refresh)
		pl_strv_add(&a, "--refresh");
	rc = run_logged(st, "preview", &a, o, o && o->plan_file, r);
	pl_strv_free(&a);
	return rc;
}

int pl_up(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	int rc;

	if (begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "up");
	pl_strv_add(&a, "--yes");
	pl_strv_add(&a, "--skip-preview");
	add_common(&a, o);
	add_policy(&a, o);
	if (o && o->plan_file)
		pl_strv_addf(&a, "--plan=%s", o->plan_file);
	if (o && o->refresh)
		pl_strv_add(&a, "--refresh");
	rc = run_logged(st, "up", &a, o, o && o->plan_file, r);
	pl_strv_free(&a);
	return rc;
}

int pl_refresh(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	int rc;

	if (begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "refresh");
	if (o && o->preview_only) {
		pl_strv_add(&a, "--preview-only");
	} else {
		pl_strv_add(&a, "--yes");
		pl_strv_add(&a, "--skip-preview");
	}
	add_common(&a, o);
	rc = run_logged(st, "refresh", &a, o, 0, r);
	pl_strv_free(&a);
	return rc;
}

int pl_destroy(struct pl_stack *st, const struct pl_op_opts *o, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	int rc;

	if (begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "destroy");
	for (size_t i = 0; o && i < o->n_targets; i++)
		pl_strv_addf(&a, "--target=%s", o->targets[i]);
	if (o && o->refresh)
		pl_strv_add(&a, "--refresh");
	if (o && o->preview_only) {
		pl_strv_add(&a, "--preview-only");
	} else {
		pl_strv_add(&a, "--yes");
		pl_strv_add(&a, "--skip-preview");
	}
	rc = run_logged(st, "destroy", &a, o, 0, r);
	pl_strv_free(&a);
	return rc;
}

int pl_cancel(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct call c = { .op = "cancel", .scope = SCOPE_STACK };
	int rc;

	if (begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "cancel");
	pl_strv_add(&a, "--yes");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	rc = call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	if (rc == 0)
		log_warn("pulumi stack lock cancelled", "stack", st->stack, NULL);
	return rc;
}

void pl_interrupt(struct pl_stack *st)
{
	atomic_store(&st->interrupt, 1);
}

/* ---- outputs and history ---- */

/* Where the masked outputs say "[secret]", the plaintext value's leaves
 * become known secrets. */
static void learn_secret_outputs(struct pl_stack *st, const cJSON *masked, const cJSON *plain)
{
	if (cJSON_IsString(masked) && strcmp(masked->valuestring, "[secret]") == 0) {
		if (!(cJSON_IsString(plain) && strcmp(plain->valuestring, "[secret]") == 0))
			add_secret_leaves(st, plain);
		return;
	}
	if (cJSON_IsObject(masked)) {
		for (const cJSON *c = masked->child; c; c = c->next)
			learn_secret_outputs(st, c, cJSON_GetObjectItemCaseSensitive(plain, c->string));
	} else if (cJSON_IsArray(masked)) {
		int i = 0;

		for (const cJSON *c = masked->child; c; c = c->next, i++)
			learn_secret_outputs(st, c, cJSON_GetArrayItem(plain, i));
	}
}

static int read_outputs(struct pl_stack *st, int show, cJSON **dst, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct call c = { .op = "stack output", .scope = SCOPE_WORKSPACE, .tail_max = JSON_TAIL_MAX };
	char *out = NULL;
	int rc;

	pl_strv_add(&a, "stack");
	pl_strv_add(&a, "output");
	pl_strv_add(&a, "--json");
	if (show)
		pl_strv_add(&a, "--show-secrets");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	rc = call(st, &c, &a, r, &out);
	pl_strv_free(&a);
	if (rc == 0 && (*dst = pl_parse_outputs(out)) == NULL)
		rc = fail_internal(st, r, "stack output", "`pulumi stack output --json` did not print a JSON object");
	if (out) {
		explicit_bzero(out, strlen(out));
		free(out);
	}
	return rc;
}

int pl_outputs(struct pl_stack *st, int show_secrets, struct pl_result *r)
{
	cJSON *masked = NULL, *plain = NULL;

	if (begin(st, r) < 0)
		return -1;
	if (read_outputs(st, 0, &masked, r) < 0)
		return -1;
	r->outputs = masked;
	if (!show_secrets)
		return 0;
	if (read_outputs(st, 1, &plain, r) < 0)
		return -1;
	learn_secret_outputs(st, masked, plain);
	r->outputs_plain = plain;
	/* The plaintext call's tails were masked before its secrets were known. */
	{
		char *o = pl_redact(r->out_tail, (const char *const *)st->secrets, st->n_secrets);

		free(r->out_tail);
		r->out_tail = o;
	}
	return st->oom ? fail_internal(st, r, "stack output", "out of memory") : 0;
}

int pl_last_history(struct pl_stack *st, struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct call c = { .op = "stack history", .scope = SCOPE_STACK, .tail_max = JSON_TAIL_MAX };
	char *out = NULL;
	int rc, empty = 0;

	if (begin(st, r) < 0)
		return -1;
	pl_strv_add(&a, "stack");
	pl_strv_add(&a, "history");
	pl_strv_add(&a, "--json");
	pl_strv_add(&a, "--page-size");
	pl_strv_add(&a, "1");
	pl_strv_add(&a, "--page");
	pl_strv_add(&a, "1");
	pl_strv_add(&a, "--stack");
	pl_strv_add(&a, st->stack);
	rc = call(st, &c, &a, r, &out);
	pl_strv_free(&a);
	if (rc == 0) {
		r->history = pl_parse_history(out, &empty);
		if (r->history == NULL && !empty)
			rc = fail_internal(st, r, "stack history", "`pulumi stack history --json` did not print a JSON array");
	}
	free(out);
	return rc;
}
