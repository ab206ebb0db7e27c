/*
 * test_cli_opt.c - the commands' flag tables (src/cli/cli_opt.c): each kind
 * stores and checks its value as the commands did by hand, a bad value or an
 * unknown flag is a usage error, a refused sibling flag is told apart, and
 * --help's lines come out of the same table at the command's column.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cli/cli.h"

static struct {
	int yes, count;
	const char *name, *empty;
	long ms, secs;
	int64_t bytes;
	const char *list_v[2];
	struct cli_strings list;
	const char *seen;
} t;

static int remember(const struct cli_opt *o, const char *arg, const char *cmd)
{
	if (arg != NULL && strcmp(arg, "bad") == 0) {
		cli_errorf("%s: --%s: bad", cmd, o->name);
		return -1;
	}
	t.seen = arg ? arg : "(none)";
	return 0;
}

static const char usage[] = "Usage: t [flags]\n\nFlags:\n" CLI_FLAGS "\nThe end.\n";

static const struct cli_opt opts[] = {
	CLI_BOOL('y', "yes", &t.yes, "say yes"),
	CLI_STRING(0, "name", &t.name, "N", "a name\nover two lines"),
	{ .kind = CLI_OPT_STRING, .name = "empty", .target = &t.empty, .argh = "S", .flags = CLI_EMPTY_IS_UNSET,
	  .help = "empty is unset" },
	CLI_NUMBER("count", &t.count, 1, 10, "N", "1..10", "--count: expected 1..10"),
	CLI_DURATION("ms", &t.ms, 1, 60000, "D", "positive", "bad duration \"%s\""),
	{ .kind = CLI_OPT_DURATION, .name = "secs", .target = &t.secs, .size = sizeof(long), .argh = "S",
	  .help = "bare seconds too", .bad = "bad \"%s\"", .lo = 0, .hi = 86400000, .flags = CLI_BARE_SECONDS },
	CLI_BYTES("size", &t.bytes, "BYTES", "a size", "not a size \"%s\""),
	CLI_STRINGS("item", &t.list, "X", "repeatable"),
	CLI_CALLBACK(0, "cb", NULL, "V", "a callback", remember),
	{ .kind = CLI_OPT_CALLBACK, .name = "opt", .cb = remember, .flags = CLI_OPTIONAL_ARG | CLI_HIDDEN },
	CLI_REFUSE(CLI_OPT_BOOL, "sibling", 0),
	CLI_GROUP("More:"),
	{ .kind = CLI_OPT_BOOL, .name = "a-very-long-flag-name", .target = &t.yes, .help = "two spaces after it" },
	CLI_HELP("show this help"),
	CLI_END,
};

static const struct cli_cmd cmd = { "t", usage, opts, 20, CLI_UNKNOWN_QUIET };

/* Parses the words after "t"; returns cli_parse's result, *operand set. */
static int parse(int *operand, ...)
{
	char *argv[32] = { "t" };
	int argc = 1;
	va_list ap;
	char *a;

	memset(&t, 0, sizeof(t));
	t.list = (struct cli_strings){ t.list_v, 0, 2 };
	va_start(ap, operand);
	while ((a = va_arg(ap, char *)) != NULL && argc < 31)
		argv[argc++] = a;
	va_end(ap);
	return cli_parse(&cmd, argc, argv, operand);
}

static void every_kind_stores_its_value(void **state)
{
	int op;

	(void)state;
	assert_int_equal(parse(&op, "-y", "--name", "n", "--empty=", "--count", "7", "--ms", "1m",
	    "--secs", "90", "--size", "2Ki", "--item", "a", "--item", "b", "--cb", "v", "--opt", "rest", NULL),
	    CLI_GO_ON);
	assert_int_equal(t.yes, 1);
	assert_string_equal(t.name, "n");
	assert_null(t.empty);
	assert_int_equal(t.count, 7);
	assert_int_equal(t.ms, 60000);
	assert_int_equal(t.secs, 90000);
	assert_int_equal(t.bytes, 2048);
	assert_int_equal(t.list.n, 2);
	assert_string_equal(t.list.v[1], "b");
	assert_string_equal(t.seen, "(none)");   /* --opt without =value */
	assert_int_equal(op, 20);                /* "rest", the last word */
}

static void abbreviations_and_operands_anywhere_as_getopt_reads_them(void **state)
{
	int op;

	(void)state;
	assert_int_equal(parse(&op, "first", "--na", "x", "--opt=v", NULL), CLI_GO_ON);
	assert_string_equal(t.name, "x");
	assert_string_equal(t.seen, "v");
	assert_int_equal(op, 4);
}

static void bad_values_and_unknown_flags_are_usage_errors(void **state)
{
	int op;

	(void)state;
	assert_int_equal(parse(&op, "--count", "0", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--count", "7x", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--count", "", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--ms", "0s", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--ms", "90", NULL), EXIT_USAGE);    /* no bare seconds here */
	assert_int_equal(parse(&op, "--size", "5X", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--item", "a", "--item", "b", "--item", "c", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--cb", "bad", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--nope", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--sibling", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--name", NULL), EXIT_USAGE);        /* value missing */
	/* A bad value before --help is reported; --help first wins. */
	assert_int_equal(parse(&op, "--count", "0", "--help", NULL), EXIT_USAGE);
	assert_int_equal(parse(&op, "--help", "--count", "0", NULL), 0);
}

static void help_comes_from_the_table(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	(void)state;
	cli_usage(&cmd, out);
	fclose(out);
	assert_string_equal(text,
	    "Usage: t [flags]\n\nFlags:\n"
	    "  -y, --yes         say yes\n"
	    "  --name N          a name\n"
	    "                    over two lines\n"
	    "  --empty S         empty is unset\n"
	    "  --count N         1..10\n"
	    "  --ms D            positive\n"
	    "  --secs S          bare seconds too\n"
	    "  --size BYTES      a size\n"
	    "  --item X          repeatable\n"
	    "  --cb V            a callback\n"
	    "More:\n"
	    "  --a-very-long-flag-name  two spaces after it\n"
	    "  -h, --help        show this help\n"
	    "\nThe end.\n");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_kind_stores_its_value),
		cmocka_unit_test(abbreviations_and_operands_anywhere_as_getopt_reads_them),
		cmocka_unit_test(bad_values_and_unknown_flags_are_usage_errors),
		cmocka_unit_test(help_comes_from_the_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
