/*
 * proc.h - running a child program safely: the pulumi driver's only way to
 * start a process.
 *
 * A child gets exactly the environment the caller built (nothing is
 * inherited from this process) plus one marker variable, PROC_MARK_VAR, its
 * own process group, stdin fed from a caller buffer (how secret values reach
 * a CLI without touching argv) or /dev/null, and stdout/stderr captured as
 * bounded tails.  A timeout (or an interrupt request from another thread)
 * escalates SIGINT -> SIGTERM -> SIGKILL to the whole group, and when
 * proc_run returns nothing the child started is left: whatever it left
 * behind in its group is killed (and waited for) before the child itself is
 * reaped, so the group id cannot be reused while we still signal it; every
 * process still carrying this run's marker in its environment is killed
 * too, and whatever of it was re-parented to us is reaped.  The marker is what catches descendants that moved to a process
 * group of their own: the pulumi CLI starts each plugin that way, and a
 * plugin orphaned by a killed CLI would otherwise live on.
 */
#ifndef PC_PROC_H
#define PC_PROC_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/err.h"

/* Name of the marker variable proc_run adds to every child's environment;
 * its value is unique to one proc_run call.  Callers that take variable
 * names from users should refuse this one. */
#define PROC_MARK_VAR "PULUMI_CONTROLLER_RUN_ID"

struct proc_spec {
	/* Executable: a path containing '/', or a name looked up in the PATH
	 * given in envp (never in this process's PATH).  Not owned. */
	const char *file;
	char *const *argv;       /* NULL-terminated, argv[0] included; not owned */
	char *const *envp;       /* complete child environment; not owned */
	const char *cwd;         /* NULL: inherit the current directory */
	const char *stdin_data;  /* written to the child's stdin, then closed;
	                          * NULL: stdin is /dev/null.  Not owned. */
	size_t stdin_len;
	size_t tail_max;         /* bytes of stdout and of stderr kept (last ones); 0: 64 KiB */
	long timeout_ms;         /* 0: no timeout */
	/* When another thread sets *interrupt to non-zero, the same escalation
	 * as a timeout starts (SIGINT first: the CLI cancels gracefully).  May
	 * be NULL; not owned. */
	atomic_int *interrupt;
	long grace_ms;           /* wait after SIGINT, then after SIGTERM; 0: 10 s */
	/* Called about every tick_ms while the child runs (progress readers);
	 * may be NULL. */
	void (*on_tick)(void *arg);
	void *tick_arg;
	long tick_ms;            /* 0: 200 ms */
};

struct proc_result {
	int started;             /* 1 when the program was executed */
	int spawn_errno;         /* errno of a failed start (ENOENT: not found) */
	int exited;              /* 1: exit_code is valid */
	int exit_code;
	int term_signal;         /* signal that ended the child, 0 if none */
	int timed_out;           /* the timeout expired */
	int interrupted;         /* stopped because *interrupt was set */
	int last_signal;         /* strongest signal sent to the group, 0 if none */
	int strays_killed;       /* marked processes outside the group killed at the end */
	pid_t pid;               /* the child's pid (= its process group id) */
	char *out;               /* NUL-terminated tail of stdout; owned, proc_result_free */
	size_t out_len;
	size_t out_total;        /* bytes the child wrote to stdout in all */
	char *errout;            /* same for stderr */
	size_t err_len;
	size_t err_total;
};

/*
 * Runs the program to completion (or to the end of the timeout escalation).
 * Returns 0 when the child was started and reaped, whatever its exit status;
 * -1 when it could not be started (r->spawn_errno says why) or on a system
 * failure.  r is always filled and must be released with proc_result_free.
 */
int proc_run(const struct proc_spec *spec, struct proc_result *r, struct err *e);

void proc_result_free(struct proc_result *r);

/*
 * Finds `name` in a colon-separated search path (the child's PATH) and
 * writes the full path of the first executable regular file to out.
 * A name containing '/' is checked as is.  Returns 0, or -1 with ENOENT-like
 * ERR_NOTFOUND.
 */
int proc_find_exe(const char *name, const char *search_path, char *out, size_t outlen,
		  struct err *e);

/* 1 when some process still belongs to process group pgid (kill(-pgid, 0)). */
int proc_group_alive(pid_t pgid);

/*
 * Makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER):
 * descendants orphaned by a killed child (plugins of a killed pulumi CLI)
 * are re-parented to it rather than to init, so proc_run can kill and reap
 * them.  PID 1 in a container is that already.  Call it once at start,
 * before any thread starts children.  -1 + e on failure.
 */
int proc_become_subreaper(struct err *e);

/*
 * Reaps every zombie child of this process that no proc_run is waiting
 * for: orphans re-parented to us (as PID 1 or a subreaper).  The pids of
 * live proc_run children are registered, so their exit status is never
 * taken.  proc_run calls it after each sweep; a long-lived caller may also
 * call it periodically (other code must not start children except through
 * proc_run, or must hold them registered).  Returns how many were reaped.
 */
int proc_reap_orphans(void);

#endif
