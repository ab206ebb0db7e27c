/*
 * pl_config.c - pl_apply_config: the declared config planned into CLI
 * calls (plain keys with one `config set-all`, structured values flattened
 * into --path leaves, each secret leaf with `config set --secret` and its
 * value on stdin, only when it changed), then `config rm` for every key of
 * the stack's settings file that is no longer declared; and the plaintext
 * config as `up --config` arguments (pl_up with with_config).
 */
#include "pulumi/pl_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/digest.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/secret.h"

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
		secret_wipe(p->sec_v.v[i], strlen(p->sec_v.v[i]));
	pl_strv_free(&p->sec_k);
	pl_strv_free(&p->sec_v);
	free(p->sec_path);
}

static int cfg_plan_build(struct pl_stack *st, struct cfg_plan *p, char *bad, size_t badlen)
{
	p->sec_path = calloc(1, sizeof(int));
	for (size_t i = 0; i < st->n_cfg; i++) {
		const struct pl_cfg_copy *c = &st->cfg[i];
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
	struct pl_cmd c = { .op = "config set-all", .scope = PL_SCOPE_WORKSPACE };
	int rc;

	if (k->n == 0)
		return 0;
	pl_strv_addl(&a, "config", "set-all", "--stack", st->stack, NULL);
	if (path)
		pl_strv_add(&a, "--path");
	for (size_t i = 0; i < k->n; i++) {
		pl_strv_add(&a, "--plaintext");
		pl_strv_addf(&a, "%s=%s", k->v[i], v->v[i]);
	}
	rc = pl_call(st, &c, &a, r, NULL);
	pl_strv_free(&a);
	return rc;
}

static int set_secret(struct pl_stack *st, const char *key, const char *value, int path,
		      struct pl_result *r)
{
	struct pl_strv a = { 0 };
	struct pl_cmd c = { .op = "config set --secret", .scope = PL_SCOPE_WORKSPACE, .stdin_data = value };
	int rc;

	pl_strv_addl(&a, "config", "set", "--stack", st->stack, NULL);
	if (path)
		pl_strv_add(&a, "--path");
	pl_strv_addl(&a, "--secret", "--", key, NULL);
	rc = pl_call(st, &c, &a, r, NULL);
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
		return pl_fail_internal(st, r, "config", e.msg);
	}
	for (const cJSON *k = keys->child; k && rc == 0; k = k->next) {
		struct pl_cmd rm = { .op = "config rm", .scope = PL_SCOPE_WORKSPACE };

		if (declared(st, project, k->valuestring))
			continue;
		pl_strv_addl(&a, "config", "rm", "--stack", st->stack, "--", k->valuestring, NULL);
		rc = pl_call(st, &rm, &a, r, NULL);
		pl_strv_free(&a);
		if (rc == 0)
			log_info("pulumi config key removed", "stack", st->stack, "key", k->valuestring, NULL);
	}
	cJSON_Delete(keys);
	return rc;
}

/* ---- secret config is set only when it changed ----
 *
 * `config set --secret` costs a CLI call per key on every reconcile.  The
 * driver remembers, in <scratch>/secret-config.json, an HMAC of each secret
 * value it set (keyed with a random key kept in the same private file, so
 * the file tells nothing about a value) and the SHA-256 of the settings
 * file as it left it.  A secret is set again when its value, the
 * passphrase, the secrets provider or the backend changed, or when the
 * settings file is not the one the driver left (a new revision of the
 * program, an edit, a removal): then what is in it is unknown. */

#define SECRET_STATE "secret-config.json"

struct secret_state {
	unsigned char key[32];
	char file[DIGEST_STR_MAX];      /* hex SHA-256 of the settings file we left; "" none */
	cJSON *macs;                    /* "<key>\t<path flag>" -> hex HMAC of the value */
};

static void state_path(struct pl_stack *st, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", st->scratch, SECRET_STATE);
}

/* Hex SHA-256 of the stack's settings file into out; "" when it does not
 * exist or cannot be read (then nothing in it is trusted). */
static void settings_hash(struct pl_stack *st, char *out, size_t n)
{
	char path[4096], *text = NULL;
	struct err e = { 0 };
	struct digest d;
	size_t len;

	out[0] = '\0';
	if (pl_stack_settings_path(st->workdir, st->stack, path, sizeof(path)) <= 0 ||
	    fs_read_file(path, 16u << 20, &text, &len, &e) < 0)
		return;
	digest_bytes(DIGEST_SHA256, text, len, &d);
	digest_hex(&d, out, n);
	free(text);
}

static int hex_decode(const char *hex, unsigned char *out, size_t n)
{
	if (hex == NULL || strlen(hex) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return -1;
		out[i] = (unsigned char)b;
	}
	return 0;
}

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", in[i]);
}

/* Loads the state, or starts a fresh one with a new random key.  -1 when
 * no key could be made (then nothing is skipped). */
static int state_load(struct pl_stack *st, struct secret_state *s)
{
	char path[4096], *text = NULL;
	struct err e = { 0 };
	cJSON *j = NULL;
	size_t len;

	memset(s, 0, sizeof(*s));
	state_path(st, path, sizeof(path));
	if (fs_read_file(path, 1u << 20, &text, &len, &e) == 0) {
		const cJSON *file, *macs;

		j = cJSON_Parse(text);
		free(text);
		file = cJSON_GetObjectItemCaseSensitive(j, "file");
		macs = cJSON_GetObjectItemCaseSensitive(j, "macs");
		if (hex_decode(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "key")), s->key,
			       sizeof(s->key)) == 0 && cJSON_IsString(file) && cJSON_IsObject(macs)) {
			snprintf(s->file, sizeof(s->file), "%s", file->valuestring);
			s->macs = cJSON_Duplicate(macs, 1);
		}
		cJSON_Delete(j);
		if (s->macs)
			return 0;
	}
	s->file[0] = '\0';
	s->macs = cJSON_CreateObject();
	if (s->macs == NULL || RAND_bytes(s->key, sizeof(s->key)) != 1) {
		cJSON_Delete(s->macs);
		s->macs = NULL;
		return -1;
	}
	return 0;
}

/* Writes the state (0600, through a temporary file and rename). */
static void state_save(struct pl_stack *st, const struct secret_state *s)
{
	char path[4096], tmp[4200], key[2 * sizeof(s->key) + 1];
	cJSON *j = cJSON_CreateObject();
	char *text;
	FILE *f;
	int fd;

	hex_encode(s->key, sizeof(s->key), key);
	cJSON_AddStringToObject(j, "key", key);
	cJSON_AddStringToObject(j, "file", s->file);
	cJSON_AddItemToObject(j, "macs", cJSON_Duplicate(s->macs, 1));
	text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	secret_wipe(key, sizeof(key));
	state_path(st, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = text ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (f == NULL && fd >= 0)
		close(fd);
	if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		log_warn("pulumi driver: cannot record the secret config state", "stack", st->stack,
			 "path", path, NULL);
	}
	secret_free(text);
}

static void state_free(struct secret_state *s)
{
	secret_wipe(s->key, sizeof(s->key));
	cJSON_Delete(s->macs);
	s->macs = NULL;
}

/* Hex HMAC-SHA256 of everything a secret's stored form depends on. */
static void secret_mac(struct pl_stack *st, const struct secret_state *s, const char *key,
		       int path, const char *value, char out[65])
{
	const char *parts[] = { st->provider ? st->provider : "", st->passphrase ? st->passphrase : "",
				st->backend ? st->backend : "", key, path ? "path" : "", value };
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mlen = 0;
	size_t len = 0, off = 0;
	char *buf;

	out[0] = '\0';
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
		len += strlen(parts[i]) + 1;
	buf = malloc(len);
	if (buf == NULL)
		return;
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		size_t l = strlen(parts[i]) + 1;   /* with the NUL: parts cannot run together */

		memcpy(buf + off, parts[i], l);
		off += l;
	}
	if (HMAC(EVP_sha256(), s->key, (int)sizeof(s->key), (const unsigned char *)buf, len, mac, &mlen) &&
	    mlen == 32)
		hex_encode(mac, 32, out);
	secret_wipe(buf, len);
	free(buf);
}

static void mac_id(const char *key, int path, char *out, size_t n)
{
	snprintf(out, n, "%s\t%d", key, path);
}

/* Sets each secret of the plan whose value the settings file may not hold
 * already; records what it set. */
static int apply_secrets(struct pl_stack *st, struct cfg_plan *p, int trusted,
			 struct secret_state *s, int have_state, int *changed, struct pl_result *r)
{
	cJSON *macs = cJSON_CreateObject();
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < p->sec_k.n; i++) {
		char mac[65], id[600];
		const char *old;

		secret_mac(st, s, p->sec_k.v[i], p->sec_path[i], p->sec_v.v[i], mac);
		mac_id(p->sec_k.v[i], p->sec_path[i], id, sizeof(id));
		old = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->macs, id));
		if (have_state && trusted && mac[0] && old && strcmp(old, mac) == 0) {
			cJSON_AddStringToObject(macs, id, mac);
			continue;
		}
		if (!*changed) {
			char path[4096];

			/* Until all are set, nothing on disk may vouch for them. */
			state_path(st, path, sizeof(path));
			unlink(path);
			*changed = 1;
		}
		rc = set_secret(st, p->sec_k.v[i], p->sec_v.v[i], p->sec_path[i], r);
		if (rc == 0 && mac[0])
			cJSON_AddStringToObject(macs, id, mac);
	}
	cJSON_Delete(s->macs);
	s->macs = macs;
	return rc;
}

static int apply_config(struct pl_stack *st, int with_plain, struct pl_result *r)
{
	struct cfg_plan p = { 0 };
	struct secret_state s;
	char bad[300] = "", before[DIGEST_STR_MAX], after[DIGEST_STR_MAX];
	int rc = 0, have_state, trusted, changed = 0;

	if (pl_begin(st, r) < 0)
		return -1;
	if (cfg_plan_build(st, &p, bad, sizeof(bad)) < 0) {
		cfg_plan_free(&p);
		return pl_fail_internal(st, r, "config", bad[0] ? bad : "out of memory");
	}
	have_state = state_load(st, &s) == 0;
	settings_hash(st, before, sizeof(before));
	trusted = have_state && s.file[0] && strcmp(s.file, before) == 0;
	if (with_plain) {
		rc = set_all(st, &p.plain_k, &p.plain_v, 0, r);
		if (rc == 0)
			rc = set_all(st, &p.path_k, &p.path_v, 1, r);
	}
	if (rc == 0 && have_state)
		rc = apply_secrets(st, &p, trusted, &s, have_state, &changed, r);
	else
		for (size_t i = 0; rc == 0 && i < p.sec_k.n; i++)
			rc = set_secret(st, p.sec_k.v[i], p.sec_v.v[i], p.sec_path[i], r);
	cfg_plan_free(&p);
	if (rc == 0)
		rc = remove_undeclared(st, r);   /* after the sets: the file exists now */
	if (rc == 0 && have_state) {
		settings_hash(st, after, sizeof(after));
		if (changed || strcmp(after, s.file) != 0) {
			snprintf(s.file, sizeof(s.file), "%s", after);
			state_save(st, &s);
		}
	}
	if (have_state)
		state_free(&s);
	if (rc == 0)
		pl_set_message(r, "config", "applied", NULL, 0);
	return rc;
}

int pl_apply_config(struct pl_stack *st, struct pl_result *r)
{
	return apply_config(st, 1, r);
}

int pl_apply_secret_config(struct pl_stack *st, struct pl_result *r)
{
	return apply_config(st, 0, r);
}

/* ---- plaintext config on `up` ---- */

int pl_config_up_args(struct pl_stack *st, struct pl_strv *a, struct pl_result *r)
{
	struct cfg_plan p = { 0 };
	char bad[300] = "";
	int rc;

	if (cfg_plan_build(st, &p, bad, sizeof(bad)) < 0) {
		cfg_plan_free(&p);
		return pl_fail_internal(st, r, "up", bad[0] ? bad : "out of memory");
	}
	/* `up --config-path` would read every key as a path and type every
	 * value ("5" as a number): structured leaves keep their own call. */
	rc = set_all(st, &p.path_k, &p.path_v, 1, r);
	for (size_t i = 0; rc == 0 && i < p.plain_k.n; i++) {
		pl_strv_add(a, "--config");
		pl_strv_addf(a, "%s=%s", p.plain_k.v[i], p.plain_v.v[i]);
	}
	cfg_plan_free(&p);
	return rc;
}

void pl_config_settings_hash(struct pl_stack *st, char *out, size_t n)
{
	settings_hash(st, out, n);
}

void pl_config_after_up(struct pl_stack *st, const char *before)
{
	struct secret_state s;
	char after[DIGEST_STR_MAX];

	if (state_load(st, &s) < 0)
		return;
	/* The CLI saved the plaintext values into a file whose secrets we
	 * knew: it still holds exactly those. */
	if (s.file[0] && strcmp(s.file, before) == 0) {
		settings_hash(st, after, sizeof(after));
		if (strcmp(after, s.file) != 0) {
			snprintf(s.file, sizeof(s.file), "%s", after);
			state_save(st, &s);
		}
	}
	state_free(&s);
}
