/*
 * cmd_pull.c - `pulumi-controller pull oci://HOST/REPO[:TAG|@DIGEST] --out DIR`:
 * resolves the reference (optionally through a semver range), verifies the
 * manifest and the layer digest while streaming, and unpacks with the safe
 * extractor.  Prints the revision (<tag>@sha256:<manifest digest>, as Flux
 * writes it) and the layer digest.  On any failure: exit 1, a message
 * naming the cause, nothing at DIR.
 *
 * This file also holds what pull and push share (src/cmd_oci.h): the
 * registry flags, credentials and the terminal progress line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "cmd.h"
#include "cmd_oci.h"

/* ---------------- shared by pull and push ---------------- */

void cmd_oci_flags_init(struct cmd_oci_flags *f)
{
	memset(f, 0, sizeof(*f));
	f->retries = -1;
	f->log_level = "warn";
	f->log_format = "text";
}

void cmd_oci_flags_free(struct cmd_oci_flags *f)
{
	if (f->creds != NULL) {
		memset(f->creds, 0, strlen(f->creds));
		free(f->creds);
	}
	f->creds = NULL;
}

/* "30s", "500ms", "2m", "10" (seconds) -> milliseconds. */
static int parse_duration_ms(const char *s, long *ms)
{
	char *end;
	double v = strtod(s, &end);
	double mult = 1000;

	if (end == s || v < 0)
		return -1;
	if (strcmp(end, "ms") == 0)
		mult = 1;
	else if (strcmp(end, "m") == 0)
		mult = 60000;
	else if (*end != '\0' && strcmp(end, "s") != 0)
		return -1;
	if (v * mult > 86400000.0 || v * mult < 1)
		return -1;
	*ms = (long)(v * mult);
	return 0;
}

int cmd_oci_flag(struct cmd_oci_flags *f, int code, const char *arg, const char *cmd)
{
	char *end;

	switch (code) {
	case CMD_OCI_CREDS:
		cmd_oci_flags_free(f);
		f->creds = strdup(arg);
		/* Blank the argv copy so the password does not linger in ps. */
		memset((char *)arg, 'x', strlen(arg));
		return f->creds ? 0 : -1;
	case CMD_OCI_PASSWORD_STDIN: f->password_stdin = 1; return 0;
	case CMD_OCI_DOCKER_CONFIG: f->docker_config = arg; return 0;
	case CMD_OCI_CA_FILE: f->ca_file = arg; return 0;
	case CMD_OCI_PLAIN_HTTP: f->plain_http = 1; return 0;
	case CMD_OCI_TIMEOUT:
		if (parse_duration_ms(arg, &f->timeout_ms) < 0) {
			fprintf(stderr, "%s: invalid --timeout \"%s\" (e.g. 30s, 500ms, 2m)\n", cmd, arg);
			return -1;
		}
		return 0;
	case CMD_OCI_RETRIES:
		f->retries = (int)strtol(arg, &end, 10);
		if (*arg == '\0' || *end != '\0' || f->retries < 0 || f->retries > 100) {
			fprintf(stderr, "%s: invalid --retries \"%s\"\n", cmd, arg);
			return -1;
		}
		return 0;
	case CMD_OCI_LOG_LEVEL: f->log_level = arg; return 0;
	case CMD_OCI_LOG_FORMAT: f->log_format = arg; return 0;
	default:
		return 1;
	}
}

/* Reads one line (the password) from stdin. */
static char *read_password_stdin(void)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, stdin);

	if (n < 0) {
		free(line);
		return NULL;
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	return line;
}

static int creds_from_flags(struct cmd_oci_flags *f, struct oci_creds *out, const char *cmd)
{
	char *colon;

	memset(out, 0, sizeof(*out));
	colon = strchr(f->creds, ':');
	if (colon == f->creds) {
		fprintf(stderr, "%s: --creds needs a user name (USER[:PASS])\n", cmd);
		return -1;
	}
	if (colon != NULL && f->password_stdin) {
		fprintf(stderr, "%s: --creds USER:PASS and --password-stdin exclude each other\n", cmd);
		return -1;
	}
	out->username = colon ? strndup(f->creds, (size_t)(colon - f->creds)) : strdup(f->creds);
	if (colon != NULL) {
		out->password = strdup(colon + 1);
	} else if (f->password_stdin) {
		out->password = read_password_stdin();
		if (out->password == NULL) {
			fprintf(stderr, "%s: --password-stdin: nothing to read on standard input\n", cmd);
			oci_creds_free(out);
			return -1;
		}
	} else {
		out->password = strdup("");
	}
	return 0;
}

/* ---- the progress line (only on a terminal) ---- */

struct progress {
	struct timespec start, last;
	int active;
};

static double secs_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

static void show_progress(void *ud, const char *what, int64_t done, int64_t total)
{
	struct progress *p = ud;
	double mib = 1024.0 * 1024.0, el;

	if (!p->active || done == 0) {
		clock_gettime(CLOCK_MONOTONIC, &p->start);
		p->last = p->start;
		p->active = 1;
	}
	if (done != total && secs_since(&p->last) < 0.1)
		return;
	clock_gettime(CLOCK_MONOTONIC, &p->last);
	el = secs_since(&p->start);
	fprintf(stderr, "\r\033[K%s  %.1f / %.1f MiB  %.1f MiB/s", what, (double)done / mib,
	    total >= 0 ? (double)total / mib : 0.0, el > 0 ? (double)done / mib / el : 0.0);
	if (done == total) {
		fputc('\n', stderr);
		p->active = 0;
	}
	fflush(stderr);
}

static struct progress progress_state;

struct oci_client *cmd_oci_client(struct cmd_oci_flags *f, const struct oci_ref *ref,
    const char *cmd, int *usage)
{
	struct oci_client_opts o = { .retries = -1 };
	struct oci_creds creds = { 0 };
	struct oci_client *c;
	struct err e = { 0 };

	*usage = 0;
	if (cmd_setup_logging(f->log_level, f->log_format) < 0) {
		*usage = 1;
		return NULL;
	}
	if (f->password_stdin && f->creds == NULL) {
		fprintf(stderr, "%s: --password-stdin needs --creds USER\n", cmd);
		*usage = 1;
		return NULL;
	}
	if (f->creds != NULL && f->docker_config != NULL) {
		fprintf(stderr, "%s: --creds and --docker-config exclude each other\n", cmd);
		*usage = 1;
		return NULL;
	}
	if (f->creds != NULL) {
		if (creds_from_flags(f, &creds, cmd) < 0) {
			*usage = 1;
			return NULL;
		}
	} else if (oci_docker_config_load(f->docker_config, ref->registry, &creds, &e) < 0) {
		fprintf(stderr, "%s: %s\n", cmd, e.msg);
		return NULL;
	}
	o.plain_http = f->plain_http;
	o.ca_file = f->ca_file;
	o.creds = creds;
	o.timeout_ms = f->timeout_ms;
	o.retries = f->retries;
	if (isatty(STDERR_FILENO)) {
		o.progress = show_progress;
		o.progress_ud = &progress_state;
	}
	c = oci_client_new(ref->registry, &o, &e);
	oci_creds_free(&creds);
	if (c == NULL)
		fprintf(stderr, "%s: %s\n", cmd, e.msg);
	return c;
}

/* ---------------- pull ---------------- */

static void pull_usage(FILE *out)
{
	fprintf(out,
	    "Usage: pulumi-controller pull oci://HOST[:PORT]/REPO[:TAG|@DIGEST] (--out DIR | --store DIR)\n"
	    "           [flags]\n"
	    "\n"
	    "Pulls an OCI artifact (such as one made by `flux push artifact` or\n"
	    "`pulumi-controller push`), verifies the manifest and layer digests while\n"
	    "streaming, and unpacks the layer with the safe extractor into DIR.\n"
	    "DIR must not exist or be empty; on failure nothing is left there.\n"
	    "Prints the revision (<tag>@sha256:<manifest digest>) and the layer digest.\n"
	    "\n"
	    "Flags:\n"
	    "  --out DIR              where to unpack\n"
	    "  --store DIR            instead of --out: keep the layer's tree in the artifact\n"
	    "                         store DIR/artifacts/<algo>/<hex>/ (shared with `fetch`;\n"
	    "                         no download when present) and print its path\n"
	    "  --semver RANGE         pick the highest tag matching RANGE (\">=1.2.0 <2.0.0\",\n"
	    "                         \"~1.2\", \"^1\", \"1.x\"); pre-releases only when RANGE names one\n"
	    "  --media-type TYPE      unpack the first layer of this media type (default: Flux\n"
	    "                         content, then OCI tar+gzip, tar, tar+zstd)\n"
	    "  --max-size BYTES       limit on unpacked bytes (default 100Mi; -1 unlimited)\n"
	    "  --max-entries N        limit on archive entries (default 100000)\n"
	    "  --max-download-size BYTES  limit on the (compressed) layer size (default -1, none)\n"
	    CMD_OCI_HELP
	    "  -h, --help             show this help\n"
	    "\n"
	    "A progress line is shown when standard error is a terminal.\n"
	    "Exit status: 0 success, 1 failure, 2 bad usage.\n");
}

enum { PULL_OUT = 1, PULL_STORE, PULL_SEMVER, PULL_MEDIA_TYPE, PULL_MAX_SIZE, PULL_MAX_ENTRIES, PULL_MAX_DOWNLOAD };

static void print_result(const struct oci_pull_result *r)
{
	printf("revision: %s\n", r->revision);
	printf("digest: %s\n", r->layer_digest);
	if (r->platform != NULL)
		fprintf(stderr, "pull: %s is an index; picked the %s manifest %s\n", r->index_digest,
		    r->platform, r->manifest_digest);
}

/*
 * --store: the layer's tree lives at STORE/artifacts/<algo>/<hex>/, the
 * layout `fetch --store` uses (keyed by the digest of the compressed
 * tarball, which for an OCI layer is the layer digest).  Present means
 * complete: entries only appear by an atomic rename.
 */
static int pull_into_store(struct oci_client *c, const struct oci_ref *ref,
    const struct oci_pull_opts *po, const char *store, struct oci_pull_result *res, struct err *e)
{
	char path[4096];
	const char *colon;
	int cached;

	if (oci_resolve(c, ref, po, res, e) < 0)
		return -1;
	colon = strchr(res->layer_digest, ':');
	snprintf(path, sizeof(path), "%s/artifacts/%.*s/%s", store, (int)(colon - res->layer_digest),
	    res->layer_digest, colon + 1);
	cached = fs_is_dir(path);
	if (!cached && oci_fetch_layer(c, ref->repository, res, po, path, 1, e) < 0) {
		oci_pull_result_free(res);
		return -1;
	}
	printf("path: %s\n", path);
	printf("cached: %s\n", cached ? "true" : "false");
	return 0;
}

int cmd_pull(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "out", required_argument, NULL, PULL_OUT },
		{ "store", required_argument, NULL, PULL_STORE },
		{ "semver", required_argument, NULL, PULL_SEMVER },
		{ "media-type", required_argument, NULL, PULL_MEDIA_TYPE },
		{ "max-size", required_argument, NULL, PULL_MAX_SIZE },
		{ "max-entries", required_argument, NULL, PULL_MAX_ENTRIES },
		{ "max-download-size", required_argument, NULL, PULL_MAX_DOWNLOAD },
		CMD_OCI_LONG_OPTIONS,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cmd_oci_flags f;
	struct oci_pull_opts po;
	struct oci_pull_result res;
	struct oci_ref ref;
	struct oci_client *client;
	const char *out = NULL, *store = NULL;
	struct err e = { 0 };
	long long n;
	int c, rc, usage;

	cmd_oci_flags_init(&f);
	oci_pull_opts_default(&po);
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			pull_usage(stdout);
			cmd_oci_flags_free(&f);
			return 0;
		case PULL_OUT: out = optarg; break;
		case PULL_STORE: store = optarg; break;
		case PULL_SEMVER: po.semver = optarg; break;
		case PULL_MEDIA_TYPE: po.media_type = optarg; break;
		case PULL_MAX_SIZE:
		case PULL_MAX_ENTRIES:
		case PULL_MAX_DOWNLOAD:
			if (cmd_parse_bytes(optarg, &n) < 0) {
				fprintf(stderr, "pull: invalid number \"%s\"\n", optarg);
				goto usage;
			}
			if (c == PULL_MAX_SIZE)
				po.limits.max_total_bytes = n;
			else if (c == PULL_MAX_ENTRIES)
				po.limits.max_entries = n;
			else
				po.max_layer_bytes = n;
			break;
		default:
			if (cmd_oci_flag(&f, c, optarg, "pull") != 0)
				goto usage;
		}
	}
	if (optind != argc - 1 || (out == NULL) == (store == NULL)) {
		fprintf(stderr, "pull: need exactly one reference and one of --out DIR or --store DIR\n");
		goto usage;
	}
	if (oci_ref_parse(argv[optind], &ref, &e) < 0) {
		fprintf(stderr, "pull: %s\n", e.msg);
		goto usage;
	}
	if (po.semver != NULL && ref.digest != NULL) {
		fprintf(stderr, "pull: --semver and a @digest reference exclude each other\n");
		oci_ref_free(&ref);
		goto usage;
	}
	client = cmd_oci_client(&f, &ref, "pull", &usage);
	cmd_oci_flags_free(&f);
	if (client == NULL) {
		oci_ref_free(&ref);
		return usage ? EXIT_USAGE : 1;
	}
	if (store != NULL)
		rc = pull_into_store(client, &ref, &po, store, &res, &e);
	else
		rc = oci_pull(client, &ref, &po, out, &res, &e);
	if (rc < 0) {
		fprintf(stderr, "pull: %s\n", e.msg);
	} else {
		print_result(&res);
		log_info("pulled", "revision", res.revision, "layer", res.layer_digest, NULL);
		oci_pull_result_free(&res);
	}
	oci_client_free(client);
	oci_ref_free(&ref);
	return rc < 0 ? 1 : 0;
usage:
	cmd_oci_flags_free(&f);
	return EXIT_USAGE;
}
