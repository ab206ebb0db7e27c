/*
 * test_proc.c - unit tests for src/base/proc.c and proc_tree.c: environment from nothing,
 * stdin feeding, bounded tails, exit statuses, a missing program, and the
 * timeout escalation that leaves nothing alive in the child's group.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/proc.h"
#include "tests/unit/fake_poll.h"

/* ---- waitpid() seen from proc.c ----
 * Defined here, it takes precedence over the C library's for proc.o: every
 * waitpid() records whether the pid's process group still had live
 * members at that moment. */

static pid_t reaped_pid;
static int group_alive_when_reaped;

pid_t waitpid(pid_t pid, int *status, int options)
{
	static pid_t (*real)(pid_t, int *, int);
	int group_alive = pid > 0 && proc_group_alive(pid);
	pid_t got;

	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "waitpid");
	got = real(pid, status, options);
	if (got > 0 && got == pid) {
		reaped_pid = got;
		group_alive_when_reaped = group_alive;
	}
	return got;
}

static char *const base_env[] = { "PATH=/usr/bin:/bin", "ONLY=this", NULL };

static int run_sh(const char *script, const char *in, long timeout_ms, long grace_ms, size_t tail,
		  struct proc_result *r)
{
	char *const argv[] = { "sh", "-c", (char *)script, NULL };
	struct proc_spec s = { .argv = argv, .envp = base_env, .stdin_data = in,
			       .stdin_len = in ? strlen(in) : 0, .timeout_ms = timeout_ms,
			       .grace_ms = grace_ms, .tail_max = tail };
	struct err e = { 0 };

	return proc_run(&s, r, &e);
}

static void test_environment_is_exactly_the_given_one(void **state)
{
	struct proc_result r;

	(void)state;
	setenv("LEAK_ME", "1", 1);
	assert_int_equal(run_sh("env | sort", NULL, 0, 0, 0, &r), 0);
	assert_true(r.exited);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "ONLY=this\n"));
	assert_null(strstr(r.out, "LEAK_ME"));
	proc_result_free(&r);
	unsetenv("LEAK_ME");
}

static void test_stdin_is_fed_and_exit_code_kept(void **state)
{
	struct proc_result r;

	(void)state;
	assert_int_equal(run_sh("cat; echo oops >&2; exit 3", "secret-value", 0, 0, 0, &r), 0);
	assert_string_equal(r.out, "secret-value");
	assert_string_equal(r.errout, "oops\n");
	assert_int_equal(r.exit_code, 3);
	assert_false(r.timed_out);
	proc_result_free(&r);
}

static void test_stdin_ignored_by_child_is_harmless(void **state)
{
	struct proc_result r;
	char *big = malloc(1 << 20);

	(void)state;
	memset(big, 'x', (1 << 20) - 1);
	big[(1 << 20) - 1] = '\0';
	assert_int_equal(run_sh("exit 0", big, 0, 0, 0, &r), 0);
	assert_int_equal(r.exit_code, 0);
	proc_result_free(&r);
	free(big);
}

static void test_tail_keeps_the_last_bytes(void **state)
{
	struct proc_result r;

	(void)state;
	assert_int_equal(run_sh("i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done",
				NULL, 0, 0, 100, &r), 0);
	assert_true(r.out_len <= 100);
	assert_true(r.out_total > 10000);
	assert_non_null(strstr(r.out, "line1999\n"));
	assert_null(strstr(r.out, "line1000\n"));
	proc_result_free(&r);
}

static void test_missing_program(void **state)
{
	char *const argv[] = { "no-such-program-xyz", NULL };
	struct proc_spec s = { .argv = argv, .envp = base_env };
	struct proc_result r;
	struct err e = { 0 };

	(void)state;
	assert_int_equal(proc_run(&s, &r, &e), -1);
	assert_false(r.started);
	assert_int_equal(e.code, ERR_NOTFOUND);
	assert_non_null(strstr(e.msg, "no-such-program-xyz"));
	proc_result_free(&r);
}

static void test_path_comes_from_the_child_environment(void **state)
{
	char out[256];
	struct err e = { 0 };

	(void)state;
	assert_int_equal(proc_find_exe("sh", "/nonexistent:/bin", out, sizeof(out), &e), 0);
	assert_string_equal(out, "/bin/sh");
	assert_int_equal(proc_find_exe("sh", "/nonexistent", out, sizeof(out), &e), -1);
}

static void test_timeout_sigint_is_enough_for_a_polite_child(void **state)
{
	struct proc_result r;

	(void)state;
	assert_int_equal(run_sh("trap 'exit 42' INT; while :; do sleep 0.05; done", NULL, 300,
				5000, 0, &r), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.last_signal, SIGINT);
	assert_false(proc_group_alive(r.pid));
	proc_result_free(&r);
}

static void test_timeout_escalates_and_kills_the_group(void **state)
{
	struct proc_result r;

	(void)state;
	/* Ignores INT and TERM, and leaves a grandchild behind in its group. */
	assert_int_equal(run_sh("trap '' INT TERM; sleep 300 & while :; do sleep 0.05; done", NULL,
				200, 200, 0, &r), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.last_signal, SIGKILL);
	assert_int_equal(r.term_signal, SIGKILL);
	assert_false(proc_group_alive(r.pid));
	proc_result_free(&r);
}

static void test_leftovers_are_killed_when_the_leader_exits(void **state)
{
	struct proc_result r;

	(void)state;
	/* The grandchild keeps stdout open; the leader exits at once. */
	assert_int_equal(run_sh("sleep 300 & echo started", NULL, 0, 0, 0, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_false(r.timed_out);
	assert_non_null(strstr(r.out, "started"));
	assert_false(proc_group_alive(r.pid));
	proc_result_free(&r);
}

/* State letter and parent of a process from /proc/<pid>/stat; 0 on success. */
static int proc_stat(const char *pid, char *st, long *ppid)
{
	char path[300], buf[512];
	const char *p;
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	ok = fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL &&
	     sscanf(p + 1, " %c %ld", st, ppid) == 2;
	fclose(f);
	return ok ? 0 : -1;
}

/* 1 while pid is a live (not zombie) process. */
static int alive(long pid)
{
	char id[32], st;
	long ppid;

	snprintf(id, sizeof(id), "%ld", pid);
	return proc_stat(id, &st, &ppid) == 0 && st != 'Z';
}

/* Runs script with %s replaced by a fresh pid file, which a descendant in a
 * session (and so a process group) of its own fills; returns that pid. */
static long run_with_stray(const char *fmt, long timeout_ms, struct proc_result *r)
{
	char pidfile[] = "/tmp/test_proc_stray_XXXXXX", script[512];
	long pid = 0;
	FILE *f;
	int fd = mkstemp(pidfile);

	assert_true(fd >= 0);
	close(fd);
	snprintf(script, sizeof(script), fmt, pidfile, pidfile);
	assert_int_equal(run_sh(script, NULL, timeout_ms, 100, 0, r), 0);
	f = fopen(pidfile, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%ld", &pid), 1);
	fclose(f);
	unlink(pidfile);
	return pid;
}

/* The pulumi CLI starts each plugin in a process group of its own; what it
 * leaves behind, when it exits or is killed, must not outlive the run. */
static void test_descendants_that_left_the_group_are_killed(void **state)
{
	static const char *exits =
		"setsid sh -c 'echo $$ > %s; exec sleep 300' </dev/null >/dev/null 2>&1 & "
		"while [ ! -s %s ]; do sleep 0.01; done; echo started";
	static const char *hangs =
		"setsid sh -c 'echo $$ > %s; exec sleep 300' </dev/null >/dev/null 2>&1 & "
		"while [ ! -s %s ]; do sleep 0.01; done; sleep 300";
	struct proc_result r;
	long pid;

	(void)state;
	pid = run_with_stray(exits, 0, &r);
	assert_int_equal(r.exit_code, 0);
	assert_false(alive(pid));
	assert_int_equal(r.strays_killed, 1);
	proc_result_free(&r);

	pid = run_with_stray(hangs, 300, &r);
	assert_true(r.timed_out);
	assert_false(alive(pid));
	assert_int_equal(r.strays_killed, 1);
	proc_result_free(&r);
}

static void test_the_marker_is_in_the_environment(void **state)
{
	struct proc_result r;

	(void)state;
	assert_int_equal(run_sh("echo \"$" PROC_MARK_VAR "\"", NULL, 0, 0, 0, &r), 0);
	/* <pid>-<sequence>-<16 hex digits> */
	assert_true(strlen(r.out) > 20);
	assert_non_null(strchr(r.out, '-'));
	proc_result_free(&r);
}

/* Zombie children of this process (what nobody reaped). */
static int zombie_children(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		char st;
		long ppid;

		if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && proc_stat(de->d_name, &st, &ppid) == 0 &&
		    st == 'Z' && ppid == (long)getpid())
			n++;
	}
	closedir(d);
	return n;
}

/* 1 when /proc/<pid> exists at all, zombie or not. */
static int exists(long pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%ld", pid);
	return access(path, F_OK) == 0;
}

/* As PID 1 in its container, the controller inherits what a killed CLI
 * leaves: its plugins, killed by the sweep, must also be reaped. */
static void test_no_zombie_is_left_when_we_are_the_subreaper(void **state)
{
	static const char *hangs =
		"setsid sh -c 'echo $$ > %s; exec sleep 300' </dev/null >/dev/null 2>&1 & "
		"while [ ! -s %s ]; do sleep 0.01; done; sleep 300";
	static const char *exits =
		"setsid sh -c 'echo $$ > %s; exec sleep 300' </dev/null >/dev/null 2>&1 & "
		"while [ ! -s %s ]; do sleep 0.01; done; echo started";
	struct proc_result r;
	struct err e = { 0 };
	long pid;

	(void)state;
	assert_int_equal(proc_become_subreaper(&e), 0);
	assert_int_equal(zombie_children(), 0);
	/* A CLI killed at its timeout, its plugin in a session of its own. */
	pid = run_with_stray(hangs, 300, &r);
	assert_true(r.timed_out);
	assert_int_equal(r.strays_killed, 1);
	assert_false(exists(pid));
	assert_int_equal(zombie_children(), 0);
	proc_result_free(&r);
	/* A CLI that exits and leaves its plugin behind. */
	pid = run_with_stray(exits, 0, &r);
	assert_int_equal(r.exit_code, 0);
	assert_false(exists(pid));
	assert_int_equal(zombie_children(), 0);
	proc_result_free(&r);
	/* A leftover in the leader's own group. */
	assert_int_equal(run_sh("sleep 300 & echo started", NULL, 0, 0, 0, &r), 0);
	assert_int_equal(zombie_children(), 0);
	proc_result_free(&r);
}

/* A failing poll() must not turn into an untimed wait for the child: the
 * group is killed, and, as always, gone before the leader is reaped. */
static void test_poll_failure_kills_the_group_before_reaping(void **state)
{
	char *const argv[] = { "sh", "-c", "sleep 300 & sleep 300; exit 3", NULL };
	struct proc_spec s = { .argv = argv, .envp = base_env };
	struct proc_result r;
	struct err e = { 0 };

	(void)state;
	fake_poll_fail = 1;
	reaped_pid = 0;
	assert_int_equal(proc_run(&s, &r, &e), -1);
	fake_poll_fail = 0;
	assert_non_null(strstr(e.msg, "poll"));
	assert_true(r.started);
	assert_false(r.exited);
	assert_int_equal(r.term_signal, SIGKILL);
	assert_int_equal(reaped_pid, r.pid);
	assert_false(group_alive_when_reaped);
	assert_false(proc_group_alive(r.pid));
	proc_result_free(&r);
}

/* The normal path: the leader exits, a leftover in its group is killed
 * and gone before the leader is reaped. */
static void test_group_is_gone_before_the_leader_is_reaped(void **state)
{
	struct proc_result r;

	(void)state;
	reaped_pid = 0;
	assert_int_equal(run_sh("sleep 300 & echo started", NULL, 0, 0, 0, &r), 0);
	assert_int_equal(reaped_pid, r.pid);
	assert_false(group_alive_when_reaped);
	proc_result_free(&r);
}

static int ticks;

static void count_tick(void *arg)
{
	(void)arg;
	ticks++;
}

static void test_ticks_while_running(void **state)
{
	char *const argv[] = { "sh", "-c", "sleep 0.3", NULL };
	struct proc_spec s = { .argv = argv, .envp = base_env, .on_tick = count_tick, .tick_ms = 20 };
	struct proc_result r;
	struct err e = { 0 };

	(void)state;
	ticks = 0;
	assert_int_equal(proc_run(&s, &r, &e), 0);
	assert_true(ticks >= 3);
	proc_result_free(&r);
}

static atomic_int stop_flag;

static void request_stop(void *arg)
{
	int *n = arg;

	if (++*n == 3)
		atomic_store(&stop_flag, 1);
}

static void test_interrupt_from_outside(void **state)
{
	char *const argv[] = { "sh", "-c", "trap 'exit 42' INT; while :; do sleep 0.05; done", NULL };
	int n = 0;
	struct proc_spec s = { .argv = argv, .envp = base_env, .on_tick = request_stop,
			       .tick_arg = &n, .tick_ms = 20, .interrupt = &stop_flag,
			       .grace_ms = 5000 };
	struct proc_result r;
	struct err e = { 0 };

	(void)state;
	atomic_store(&stop_flag, 0);
	assert_int_equal(proc_run(&s, &r, &e), 0);
	assert_true(r.interrupted);
	assert_false(r.timed_out);
	assert_int_equal(r.last_signal, SIGINT);
	assert_int_equal(r.exit_code, 42);
	proc_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_environment_is_exactly_the_given_one),
		cmocka_unit_test(test_stdin_is_fed_and_exit_code_kept),
		cmocka_unit_test(test_stdin_ignored_by_child_is_harmless),
		cmocka_unit_test(test_tail_keeps_the_last_bytes),
		cmocka_unit_test(test_missing_program),
		cmocka_unit_test(test_path_comes_from_the_child_environment),
		cmocka_unit_test(test_timeout_sigint_is_enough_for_a_polite_child),
		cmocka_unit_test(test_timeout_escalates_and_kills_the_group),
		cmocka_unit_test(test_leftovers_are_killed_when_the_leader_exits),
		cmocka_unit_test(test_descendants_that_left_the_group_are_killed),
		cmocka_unit_test(test_the_marker_is_in_the_environment),
		cmocka_unit_test(test_ticks_while_running),
		cmocka_unit_test(test_interrupt_from_outside),
		cmocka_unit_test(test_poll_failure_kills_the_group_before_reaping),
		cmocka_unit_test(test_group_is_gone_before_the_leader_is_reaped),
		cmocka_unit_test(test_no_zombie_is_left_when_we_are_the_subreaper),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
