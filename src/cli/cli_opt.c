/*
 * cli_opt.c - the commands' flag tables (cli.h): one declaration per flag
 * gives getopt_long its option, the value its check, and --help its line.
 *
 * getopt_long still reads argv, so what the commands always accepted
 * (abbreviated long names, "--flag=value", flags after the operands) and
 * what getopt says about an unknown flag stay as they were.  A flag's value
 * is checked when getopt returns it, so a bad value is reported before
 * a later --help, as the commands did when each had its own switch.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "cli/cli.h"

/* getopt_long's value for the i-th entry's long name: above any char. */
#define LONG_VAL_BASE 256

int cli_strings_add(struct cli_strings *s, const char *arg, const char *cmd, const char *name)
{
	if (s->n >= s->max) {
		fprintf(stderr, "%s: more than %zu --%s flags\n", cmd, s->max, name);
		return -1;
	}
	s->v[s->n++] = arg;
	return 0;
}

static size_t count_opts(const struct cli_opt *opts)
{
	size_t n = 0;

	while (opts[n].kind != CLI_OPT_END)
		n++;
	return n;
}

static int takes_arg(const struct cli_opt *o)
{
	if (o->kind == CLI_OPT_BOOL || o->kind == CLI_OPT_HELP)
		return no_argument;
	if (o->kind == CLI_OPT_CALLBACK && (o->flags & CLI_NO_ARG))
		return no_argument;
	if (o->kind == CLI_OPT_CALLBACK && (o->flags & CLI_OPTIONAL_ARG))
		return optional_argument;
	return required_argument;
}

/* getopt_long's view of the table: longs[] (n + 1 of them) and the
 * short-option string (3 * n + 1 bytes). */
static void getopt_tables(const struct cli_opt *opts, size_t n, struct option *longs, char *shorts)
{
	size_t nl = 0, ns = 0;

	for (size_t i = 0; i < n; i++) {
		const struct cli_opt *o = &opts[i];
		int has_arg = takes_arg(o);

		if (o->kind == CLI_OPT_GROUP)
			continue;
		if (o->name != NULL)
			longs[nl++] = (struct option){ o->name, has_arg, NULL, LONG_VAL_BASE + (int)i };
		if (o->short_name != 0) {
			shorts[ns++] = (char)o->short_name;
			if (has_arg != no_argument)
				shorts[ns++] = ':';
			if (has_arg == optional_argument)
				shorts[ns++] = ':';
		}
	}
	longs[nl] = (struct option){ NULL, 0, NULL, 0 };
	shorts[ns] = '\0';
}

/* The entry getopt_long's return value names, or NULL (an unknown flag). */
static const struct cli_opt *opt_of(const struct cli_opt *opts, size_t n, int ch)
{
	if (ch >= LONG_VAL_BASE && (size_t)(ch - LONG_VAL_BASE) < n)
		return &opts[ch - LONG_VAL_BASE];
	for (size_t i = 0; i < n; i++)
		if (opts[i].kind != CLI_OPT_GROUP && opts[i].short_name == ch)
			return &opts[i];
	return NULL;
}

/* "<cmd>: " and the entry's message for a bad value; always -1. */
static int bad_value(const char *cmd, const struct cli_opt *o, const char *arg)
{
	char msg[1024];

	snprintf(msg, sizeof(msg), o->bad ? o->bad : "invalid value \"%s\"", arg);
	cli_errorf("%s: %s", cmd, msg);
	return -1;
}

/* Stores v in the int or 64-bit integer target (o->size says which). */
static void store_integer(const struct cli_opt *o, long long v)
{
	if (o->size == sizeof(int)) {
		*(int *)o->target = (int)v;
	} else {
		int64_t x = v;
		memcpy(o->target, &x, sizeof(x));
	}
}

/* A whole number, all of arg, in [lo, hi]. */
static int parse_number(const char *arg, long long lo, long long hi, long long *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(arg, &end, 10);
	if (errno != 0 || end == arg || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Checks and stores one flag's value; 0, or -1 after printing why not. */
static int apply(const char *cmd, const struct cli_opt *o, const char *arg)
{
	long long v;
	long ms;

	switch (o->kind) {
	case CLI_OPT_BOOL:
		*(int *)o->target = 1;
		return 0;
	case CLI_OPT_STRING:
		*(const char **)o->target = (o->flags & CLI_EMPTY_IS_UNSET) && *arg == '\0' ? NULL : arg;
		return 0;
	case CLI_OPT_NUMBER:
		if (parse_number(arg, o->lo, o->hi, &v) < 0)
			return bad_value(cmd, o, arg);
		store_integer(o, v);
		return 0;
	case CLI_OPT_BYTES:
		if (cli_parse_bytes(arg, &v) < 0 || v < o->lo || v > o->hi)
			return bad_value(cmd, o, arg);
		store_integer(o, v);
		return 0;
	case CLI_OPT_DURATION:
		if (((o->flags & CLI_BARE_SECONDS) ? duration_parse_ms_or_seconds(arg, &ms) :
		    duration_parse_ms(arg, &ms)) < 0 || ms < o->lo || ms > o->hi)
			return bad_value(cmd, o, arg);
		*(long *)o->target = ms;
		return 0;
	case CLI_OPT_STRINGS:
		return cli_strings_add(o->target, arg, cmd, o->name);
	case CLI_OPT_CALLBACK:
		return o->cb(o, arg, cmd);
	default:
		return 0;
	}
}

/* What the command prints after getopt's message about a flag. */
static int unknown_flag(const struct cli_cmd *cmd)
{
	if (cmd->unknown == CLI_UNKNOWN_USAGE)
		cli_usage(cmd, stderr);
	else if (cmd->unknown == CLI_UNKNOWN_SEE_HELP)
		cli_errorf("%s: see pulumi-controller %s --help", cmd->name, cmd->name);
	return EXIT_USAGE;
}

int cli_parse(const struct cli_cmd *cmd, int argc, char **argv, int *operand)
{
	const struct cli_opt *opts = cmd->opts;
	size_t n = count_opts(opts);
	struct option *longs = calloc(n + 1, sizeof(*longs));
	char *shorts = calloc(3 * n + 1, 1);
	int ch, rc = CLI_GO_ON;

	if (longs == NULL || shorts == NULL) {
		free(longs);
		free(shorts);
		cli_print_error(cmd->name, "out of memory");
		return 1;
	}
	getopt_tables(opts, n, longs, shorts);
	optind = 1;
	while (rc == CLI_GO_ON && (ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		const struct cli_opt *o = opt_of(opts, n, ch);

		if (o == NULL || (o->flags & CLI_REFUSED)) {
			rc = unknown_flag(cmd);
		} else if (o->kind == CLI_OPT_HELP) {
			cli_usage(cmd, stdout);
			rc = 0;
		} else if (apply(cmd->name, o, optarg) < 0) {
			rc = EXIT_USAGE;
		}
	}
	*operand = optind;
	free(longs);
	free(shorts);
	return rc;
}

/* ------------------------------------------------------------ --help */

/* One flag's lines: "  -s, --name ARGH", its help from column width (two
 * spaces after a longer name), and the help's further lines under it. */
static void print_flag(const struct cli_opt *o, int width, FILE *out)
{
	char left[160];
	const char *p = o->help ? o->help : "", *nl;
	const char *sp = o->argh ? " " : "", *argh = o->argh ? o->argh : "";
	int n;

	if (o->label != NULL)
		n = snprintf(left, sizeof(left), "  %s", o->label);
	else if (o->short_name != 0)
		n = snprintf(left, sizeof(left), "  -%c, --%s%s%s", o->short_name, o->name, sp, argh);
	else
		n = snprintf(left, sizeof(left), "  --%s%s%s", o->name, sp, argh);
	fprintf(out, "%s%*s", left, n + 2 <= width ? width - n : 2, "");
	while ((nl = strchr(p, '\n')) != NULL) {
		fprintf(out, "%.*s\n%*s", (int)(nl - p), p, width, "");
		p = nl + 1;
	}
	fprintf(out, "%s\n", p);
}

void cli_usage(const struct cli_cmd *cmd, FILE *out)
{
	const char *at = strstr(cmd->usage, CLI_FLAGS);

	fprintf(out, "%.*s", at ? (int)(at - cmd->usage) : (int)strlen(cmd->usage), cmd->usage);
	for (const struct cli_opt *o = cmd->opts; o->kind != CLI_OPT_END; o++) {
		if (o->kind == CLI_OPT_GROUP)
			fprintf(out, "%s\n", o->help);
		else if (!(o->flags & (CLI_HIDDEN | CLI_REFUSED)))
			print_flag(o, cmd->width, out);
	}
	if (at != NULL)
		fputs(at + strlen(CLI_FLAGS), out);
}
