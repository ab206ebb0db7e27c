/*
 * proc.c - child processes with a built environment, stdin feeding, bounded
 * output tails, timeouts and whole-group cleanup (see proc.h).
 *
 * posix_spawn is used rather than fork: it is safe in the threaded
 * controller (no async-signal-safety traps between fork and exec) and glibc
 * reports exec failures back to the caller.  The child is made leader of a
 * new process group so one kill(-pgid) reaches everything it started
 * (language hosts, plugins).  The leader's exit is observed with
 * waitid(WNOWAIT): the zombie keeps the group id reserved while we kill the
 * stragglers and wait until none runs, and only then is it reaped.
 * Descendants that left the group (setsid/setpgid, as the pulumi CLI does
 * for its plugins) are found by the marker variable every child inherits,
 * and killed after the group.  What was killed and re-parented to us (PID 1
 * in a container, or a subreaper) is reaped by proc_reap_orphans, which
 * knows every live direct child from a registry and never waits for one.
 * The registry, the marker and the sweeps are in proc_tree.c.
 */
#include "base/clock.h"
#include "base/proc.h"
#include "base/proc_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TAIL  (64 * 1024)
#define DEFAULT_GRACE 10000
#define DEFAULT_TICK  200
/* After the leader exited and its group was killed, how long we still wait
 * for pipe EOF (a process outside the group could hold the pipe open). */
#define DRAIN_MS      2000
/* How long, after SIGKILL, we wait for a leader that has not exited (a
 * failed poll(), a child stuck in the kernel) before giving up on it. */
#define KILL_WAIT_MS  5000

struct tail {
	char *buf;
	size_t len, cap, max, total;
};

static int tail_init(struct tail *t, size_t max)
{
	t->max = max;
	t->cap = 2 * max < 4096 ? 2 * max : 4096;
	t->len = t->total = 0;
	t->buf = malloc(t->cap);
	return t->buf ? 0 : -1;
}

/* Grows the buffer toward its ceiling of 2*max, so a large limit costs
 * memory only when a child is actually that chatty. */
static void tail_grow(struct tail *t, size_t need)
{
	size_t cap = t->cap;
	char *nb;

	while (cap < need && cap < 2 * t->max)
		cap = cap * 2 < 2 * t->max ? cap * 2 : 2 * t->max;
	if (cap == t->cap || (nb = realloc(t->buf, cap)) == NULL)
		return;
	t->buf = nb;
	t->cap = cap;
}

/* Appends, keeping at least the last `max` bytes; memmove only when the
 * buffer (at most 2*max) is full, so the cost stays linear. */
static void tail_add(struct tail *t, const char *d, size_t n)
{
	t->total += n;
	if (t->len + n > t->cap)
		tail_grow(t, n >= t->max ? t->max : t->len + n);
	if (n >= t->max && t->cap >= t->max) {
		memcpy(t->buf, d + n - t->max, t->max);
		t->len = t->max;
		return;
	}
	if (n >= t->cap) {  /* could not grow: keep what fits */
		memcpy(t->buf, d + n - t->cap, t->cap);
		t->len = t->cap;
		return;
	}
	if (t->len + n > t->cap) {
		size_t keep = t->cap - n < t->max ? t->cap - n : t->max;

		if (keep > t->len)
			keep = t->len;
		memmove(t->buf, t->buf + t->len - keep, keep);
		t->len = keep;
	}
	memcpy(t->buf + t->len, d, n);
	t->len += n;
}

/* Moves the last `max` bytes into a NUL-terminated string owned by the caller. */
static char *tail_take(struct tail *t, size_t *len)
{
	size_t n = t->len < t->max ? t->len : t->max;
	char *s = malloc(n + 1);

	if (s != NULL) {
		memcpy(s, t->buf + t->len - n, n);
		s[n] = '\0';
		*len = n;
	} else {
		*len = 0;
	}
	free(t->buf);
	t->buf = NULL;
	return s;
}

int proc_find_exe(const char *name, const char *search_path, char *out, size_t outlen,
		  struct err *e)
{
	struct stat st;

	if (name == NULL || *name == '\0')
		return err_set(e, ERR_INVALID, "empty program name");
	if (strchr(name, '/') != NULL) {
		if (stat(name, &st) == 0 && S_ISREG(st.st_mode) && access(name, X_OK) == 0) {
			if ((size_t)snprintf(out, outlen, "%s", name) >= outlen)
				return err_set(e, ERR_INVALID, "program path too long: %.200s", name);
			return 0;
		}
		return err_set(e, ERR_NOTFOUND, "program %s: not an executable file", name);
	}
	const char *p = search_path ? search_path : "";
	while (*p != '\0') {
		const char *colon = strchr(p, ':');
		size_t dl = colon ? (size_t)(colon - p) : strlen(p);
		char cand[PATH_MAX];

		if (dl > 0 && (size_t)snprintf(cand, sizeof(cand), "%.*s/%s", (int)dl, p, name) < sizeof(cand)
		    && stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
			if ((size_t)snprintf(out, outlen, "%s", cand) >= outlen)
				return err_set(e, ERR_INVALID, "program path too long: %.200s", cand);
			return 0;
		}
		if (colon == NULL)
			break;
		p = colon + 1;
	}
	return err_set(e, ERR_NOTFOUND, "program %s not found in PATH", name);
}

void proc_result_free(struct proc_result *r)
{
	if (r == NULL)
		return;
	free(r->out);
	free(r->errout);
	r->out = r->errout = NULL;
}

static const char *env_lookup(char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* Builds spawn attributes: new process group, clean signal mask and
 * default dispositions, whatever this thread had blocked or ignored. */
static int spawn_attrs(posix_spawnattr_t *a)
{
	sigset_t none, defs;

	if (posix_spawnattr_init(a) != 0)
		return -1;
	sigemptyset(&none);
	sigemptyset(&defs);
	sigaddset(&defs, SIGINT);
	sigaddset(&defs, SIGTERM);
	sigaddset(&defs, SIGPIPE);
	sigaddset(&defs, SIGHUP);
	sigaddset(&defs, SIGQUIT);
	sigaddset(&defs, SIGCHLD);
	posix_spawnattr_setpgroup(a, 0);
	posix_spawnattr_setsigmask(a, &none);
	posix_spawnattr_setsigdefault(a, &defs);
	posix_spawnattr_setflags(a, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
				 POSIX_SPAWN_SETSIGDEF);
	return 0;
}

struct run {
	const struct proc_spec *spec;
	struct proc_result *r;
	int in_w, out_r, err_r;
	size_t in_off;
	struct tail out, err;
	int leader_done;       /* its exit was observed (it is a zombie until reap) */
	int poll_errno;        /* poll() failed: the group was killed */
	char mark[96];         /* PROC_MARK_VAR=<unique value>, in the child's environment */
	int phase;             /* 0 running, 1 SIGINT sent, 2 SIGTERM sent, 3 SIGKILL sent */
	long next_step;        /* when to escalate next */
	long drain_until;
};

static void signal_group(struct run *x, int sig)
{
	kill(-x->r->pid, sig);
	x->r->last_signal = sig;
}

/* Observes the leader's exit without reaping it, then kills what is left
 * of its group while the zombie still reserves the group id. */
static void check_leader(struct run *x)
{
	siginfo_t si;

	if (x->leader_done)
		return;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)x->r->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
		return;
	x->leader_done = 1;
	kill(-x->r->pid, SIGKILL);
	x->drain_until = clock_mono_ms() + DRAIN_MS;
}

/* Phase 0 waits for the timeout or an interrupt request; from then on
 * each grace period steps SIGINT -> SIGTERM -> SIGKILL. */
static void escalate(struct run *x, long now)
{
	const struct proc_spec *s = x->spec;
	long grace = s->grace_ms > 0 ? s->grace_ms : DEFAULT_GRACE;

	if (x->leader_done)
		return;
	if (x->phase == 0) {
		int timed = s->timeout_ms > 0 && now >= x->next_step;
		int asked = s->interrupt != NULL && atomic_load(s->interrupt) != 0;

		if (!timed && !asked)
			return;
		if (timed)
			x->r->timed_out = 1;
		else
			x->r->interrupted = 1;
	} else if (now < x->next_step) {
		return;
	}
	switch (x->phase) {
	case 0:
		signal_group(x, SIGINT);
		break;
	case 1:
		signal_group(x, SIGTERM);
		break;
	case 2:
		signal_group(x, SIGKILL);
		break;
	default:
		return;
	}
	x->phase++;
	x->next_step = now + grace;
}

static void pump_read(int *fd, struct tail *t)
{
	char buf[16384];

	for (;;) {
		ssize_t n = read(*fd, buf, sizeof(buf));

		if (n > 0) {
			tail_add(t, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		close_fd(fd);  /* EOF or a real error */
		return;
	}
}

static void pump_write(struct run *x)
{
	const struct proc_spec *s = x->spec;

	while (x->in_off < s->stdin_len) {
		ssize_t n = write(x->in_w, s->stdin_data + x->in_off, s->stdin_len - x->in_off);

		if (n > 0) {
			x->in_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		break;  /* EPIPE: the child does not read stdin */
	}
	close_fd(&x->in_w);
}

static long poll_wait(struct run *x, long now, long next_tick)
{
	long w = next_tick - now;

	if ((x->spec->timeout_ms > 0 || x->phase > 0) && !x->leader_done && x->next_step - now < w)
		w = x->next_step - now;
	if (x->out_r < 0 && x->err_r < 0 && x->in_w < 0)
		w = w < 2 ? w : 2;  /* nothing to wait on but the leader: short naps */
	else if (!x->leader_done && w > 50)
		w = 50;             /* notice an exit whose pipes are held by others,
		                     * and interrupt requests */
	return w < 0 ? 0 : w;
}

static void event_loop(struct run *x)
{
	const struct proc_spec *s = x->spec;
	long tick = s->tick_ms > 0 ? s->tick_ms : DEFAULT_TICK;
	long next_tick = clock_mono_ms() + tick;

	for (;;) {
		struct pollfd p[3];
		nfds_t n = 0;
		long now;

		check_leader(x);
		now = clock_mono_ms();
		if (x->leader_done && ((x->out_r < 0 && x->err_r < 0) || now >= x->drain_until))
			break;
		escalate(x, now);
		if (now >= next_tick) {
			if (s->on_tick)
				s->on_tick(s->tick_arg);
			next_tick = now + tick;
		}
		if (x->out_r >= 0)
			p[n++] = (struct pollfd){ .fd = x->out_r, .events = POLLIN };
		if (x->err_r >= 0)
			p[n++] = (struct pollfd){ .fd = x->err_r, .events = POLLIN };
		if (x->in_w >= 0)
			p[n++] = (struct pollfd){ .fd = x->in_w, .events = POLLOUT };
		if (poll(p, n, (int)poll_wait(x, now, next_tick)) < 0 && errno != EINTR) {
			/* Without poll we can neither read nor time the child:
			 * stop it now rather than wait for it without a bound. */
			x->poll_errno = errno;
			signal_group(x, SIGKILL);
			break;
		}
		for (nfds_t i = 0; i < n; i++) {
			if (p[i].revents == 0)
				continue;
			if (p[i].fd == x->out_r)
				pump_read(&x->out_r, &x->out);
			else if (p[i].fd == x->err_r)
				pump_read(&x->err_r, &x->err);
			else if (p[i].fd == x->in_w)
				pump_write(x);
		}
	}
}

/* After the event loop: a leader whose exit was not seen (the loop ended
 * on a poll() failure) is killed with its group and waited for, bounded. */
static void await_leader(struct run *x)
{
	long end = clock_mono_ms() + KILL_WAIT_MS;

	while (!x->leader_done && clock_mono_ms() < end) {
		signal_group(x, SIGKILL);
		clock_sleep_ms(5);
		check_leader(x);
	}
}

/* Reaps the leader, last of all: until now its zombie kept the group id
 * reserved.  A leader that never exited (stuck in the kernel past
 * KILL_WAIT_MS) is left to proc_reap_orphans once it does. */
static void reap(struct run *x)
{
	int status = 0;
	pid_t got;

	while ((got = waitpid(x->r->pid, &status, x->leader_done ? 0 : WNOHANG)) < 0 && errno == EINTR)
		;
	proc_kids_remove(x->r->pid);
	if (got != x->r->pid)
		return;
	if (WIFEXITED(status)) {
		x->r->exited = 1;
		x->r->exit_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		x->r->term_signal = WTERMSIG(status);
	}
}

static int spawn(struct run *x, const char *exe, int in_r, int out_w, int err_w, struct err *e)
{
	const struct proc_spec *s = x->spec;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	char **envp;
	pid_t pid;
	int rc;

	if (posix_spawn_file_actions_init(&fa) != 0)
		return err_set(e, ERR_NOMEM, "spawn %s: out of memory", s->argv[0]);
	if (in_r >= 0)
		posix_spawn_file_actions_adddup2(&fa, in_r, 0);
	else
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out_w, 1);
	posix_spawn_file_actions_adddup2(&fa, err_w, 2);
	if (s->cwd)
		posix_spawn_file_actions_addchdir_np(&fa, s->cwd);
	if (spawn_attrs(&attr) != 0) {
		posix_spawn_file_actions_destroy(&fa);
		return err_set(e, ERR_NOMEM, "spawn %s: out of memory", s->argv[0]);
	}
	proc_make_mark(x->mark, sizeof(x->mark));
	envp = proc_env_with_mark(s->envp, x->mark);
	/* Registered under the lock in the same step as the spawn, so that
	 * proc_reap_orphans never takes a fast-exiting child for an orphan. */
	pthread_mutex_lock(&proc_kids_lock);
	if (envp == NULL || proc_kids_reserve() < 0) {
		rc = ENOMEM;
	} else {
		rc = posix_spawn(&pid, exe, &fa, &attr, s->argv, envp);
		if (rc == 0)
			proc_kids_add(pid);
	}
	pthread_mutex_unlock(&proc_kids_lock);
	free(envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc != 0) {
		x->r->spawn_errno = rc;
		return err_set(e, rc == ENOENT ? ERR_NOTFOUND : ERR_IO, "start %s%s%s: %s", exe,
			       s->cwd ? " in " : "", s->cwd ? s->cwd : "", strerror(rc));
	}
	x->r->pid = pid;
	x->r->started = 1;
	return 0;
}

static int open_pipes(int in[2], int out[2], int errp[2], int want_in, struct err *e)
{
	in[0] = in[1] = out[0] = out[1] = errp[0] = errp[1] = -1;
	if ((want_in && pipe2(in, O_CLOEXEC) < 0) || pipe2(out, O_CLOEXEC) < 0 ||
	    pipe2(errp, O_CLOEXEC) < 0) {
		int saved = errno;

		for (int i = 0; i < 2; i++) {
			close_fd(&in[i]);
			close_fd(&out[i]);
			close_fd(&errp[i]);
		}
		return err_set(e, ERR_IO, "pipe: %s", strerror(saved));
	}
	return 0;
}

/* A child that exits without reading stdin must not kill us with SIGPIPE:
 * block it in this thread and swallow any that became pending. */
static void sigpipe_block(sigset_t *old)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &s, old);
}

static void sigpipe_restore(const sigset_t *old)
{
	sigset_t s;
	struct timespec zero = { 0, 0 };

	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	while (sigtimedwait(&s, NULL, &zero) > 0)
		;
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

int proc_run(const struct proc_spec *s, struct proc_result *r, struct err *e)
{
	struct run x = { .spec = s, .r = r, .in_w = -1, .out_r = -1, .err_r = -1 };
	size_t tmax = s->tail_max ? s->tail_max : DEFAULT_TAIL;
	int in[2], out[2], errp[2];
	char exe[PATH_MAX];
	sigset_t oldmask;
	int rc;

	memset(r, 0, sizeof(*r));
	if (s->argv == NULL || s->argv[0] == NULL || s->envp == NULL)
		return err_set(e, ERR_INVALID, "proc_run: argv and envp are required");
	if (proc_find_exe(s->file ? s->file : s->argv[0], env_lookup(s->envp, "PATH"), exe,
			  sizeof(exe), e) < 0) {
		r->spawn_errno = ENOENT;
		return -1;
	}
	if (s->cwd && !(access(s->cwd, X_OK) == 0)) {
		r->spawn_errno = errno;
		return err_set(e, ERR_IO, "working directory %s: %s", s->cwd, strerror(errno));
	}
	if (tail_init(&x.out, tmax) < 0 || tail_init(&x.err, tmax) < 0) {
		free(x.out.buf);
		free(x.err.buf);
		return err_set(e, ERR_NOMEM, "out of memory for output buffers");
	}
	if (open_pipes(in, out, errp, s->stdin_data != NULL, e) < 0) {
		free(x.out.buf);
		free(x.err.buf);
		return -1;
	}
	sigpipe_block(&oldmask);
	rc = spawn(&x, exe, in[0], out[1], errp[1], e);
	close_fd(&in[0]);
	close_fd(&out[1]);
	close_fd(&errp[1]);
	x.in_w = in[1];
	x.out_r = out[0];
	x.err_r = errp[0];
	if (rc == 0) {
		set_nonblock(x.out_r);
		set_nonblock(x.err_r);
		if (x.in_w >= 0) {
			set_nonblock(x.in_w);
			pump_write(&x);
		}
		x.next_step = clock_mono_ms() + s->timeout_ms;
		event_loop(&x);
		await_leader(&x);
		/* The leader's zombie reserves the group id until reap(). */
		proc_wait_group_gone(r->pid);
		r->strays_killed = proc_sweep_marked(x.mark);
		/* Killed members and strays are zombies now, and those whose
		 * parent died are ours when we are PID 1 or a subreaper. */
		proc_reap_orphans();
		reap(&x);
		if (x.poll_errno != 0)
			rc = err_set(e, ERR_IO, "poll: %s; the child's process group was killed",
				     strerror(x.poll_errno));
	}
	close_fd(&x.in_w);
	close_fd(&x.out_r);
	close_fd(&x.err_r);
	sigpipe_restore(&oldmask);
	r->out = tail_take(&x.out, &r->out_len);
	r->out_total = x.out.total;
	r->errout = tail_take(&x.err, &r->err_len);
	r->err_total = x.err.total;
	if (rc == 0 && (r->out == NULL || r->errout == NULL))
		return err_set(e, ERR_NOMEM, "out of memory for output tails");
	return rc;
}
