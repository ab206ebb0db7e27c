/*
 * proc_tree.c - what a child leaves behind (see proc.h): the registry of
 * live direct children, reaping orphans re-parented to us, the run marker
 * and the sweep of marked strays, and the /proc reading they share.
 *
 * Every child this process starts goes through proc_run (proc.c), which
 * registers its pid from just before posix_spawn until it has reaped it.
 * Any other zombie child is an orphan re-parented to us (we are PID 1 in a
 * container, or a subreaper): a plugin of a killed CLI, killed by the
 * sweep.  Nobody waits for those, so proc_reap_orphans does; it never
 * touches a registered pid, whose exit status belongs to its proc_run.
 */
#include "base/proc_tree.h"

#include "base/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How much of a process's environment is read when looking for the marker:
 * the kernel caps argv + envp at a quarter of the stack limit, usually 2 MiB. */
#define ENVIRON_MAX   (4u << 20)

pthread_mutex_t proc_kids_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t *kids;
static size_t n_kids, cap_kids;

/* Room for one more pid, so that registering after a successful spawn
 * cannot fail.  Called with proc_kids_lock held; -1 when out of memory. */
int proc_kids_reserve(void)
{
	if (n_kids == cap_kids) {
		size_t cap = cap_kids ? cap_kids * 2 : 16;
		pid_t *nk = realloc(kids, cap * sizeof(*nk));

		if (nk == NULL)
			return -1;
		kids = nk;
		cap_kids = cap;
	}
	return 0;
}

/* Registers pid; with proc_kids_lock held, after proc_kids_reserve. */
void proc_kids_add(pid_t pid)
{
	kids[n_kids++] = pid;
}

void proc_kids_remove(pid_t pid)
{
	pthread_mutex_lock(&proc_kids_lock);
	for (size_t i = 0; i < n_kids; i++)
		if (kids[i] == pid) {
			kids[i] = kids[--n_kids];
			break;
		}
	if (n_kids == 0) {
		free(kids);
		kids = NULL;
		cap_kids = 0;
	}
	pthread_mutex_unlock(&proc_kids_lock);
}

static int kids_has(pid_t pid)
{
	for (size_t i = 0; i < n_kids; i++)
		if (kids[i] == pid)
			return 1;
	return 0;
}

/* Reads "pid (comm) S ppid pgrp" from /proc/<pid>/stat; comm may hold
 * spaces and parentheses.  0 on success. */
static int read_stat(const char *pid, char *state, long *ppid, long *pgrp)
{
	char path[64], buf[512];
	const char *p;
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	f = fopen(path, "re");
	if (f == NULL)
		return -1;
	ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	p = ok ? strrchr(buf, ')') : NULL;
	return p && sscanf(p + 1, " %c %ld %ld", state, ppid, pgrp) == 3 ? 0 : -1;
}

int proc_become_subreaper(struct err *e)
{
	if (prctl(PR_SET_CHILD_SUBREAPER, 1L, 0L, 0L, 0L) != 0)
		return err_set(e, ERR_IO, "prctl(PR_SET_CHILD_SUBREAPER): %s", strerror(errno));
	return 0;
}

int proc_reap_orphans(void)
{
	long self = (long)getpid();
	struct dirent *de;
	int n = 0;
	DIR *d;

	pthread_mutex_lock(&proc_kids_lock);   /* no child is spawned unregistered meanwhile */
	d = opendir("/proc");
	while (d && (de = readdir(d)) != NULL) {
		char st;
		long ppid, pgrp, pid;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		pid = strtol(de->d_name, NULL, 10);
		if (read_stat(de->d_name, &st, &ppid, &pgrp) != 0 || st != 'Z' || ppid != self ||
		    kids_has((pid_t)pid))
			continue;
		if (waitpid((pid_t)pid, NULL, WNOHANG) == (pid_t)pid)
			n++;
	}
	if (d)
		closedir(d);
	pthread_mutex_unlock(&proc_kids_lock);
	return n;
}

/* kill(-pgid, 0) also succeeds for zombies, which an init that does not
 * reap (common in containers) may keep forever: only live members count. */
int proc_group_alive(pid_t pgid)
{
	DIR *d;
	struct dirent *de;
	int alive = 0;

	if (pgid <= 0 || kill(-pgid, 0) != 0)
		return 0;
	d = opendir("/proc");
	if (d == NULL)
		return 1;
	while (!alive && (de = readdir(d)) != NULL) {
		char st;
		long ppid, pg;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		if (read_stat(de->d_name, &st, &ppid, &pg) == 0 && pg == (long)pgid && st != 'Z')
			alive = 1;
	}
	closedir(d);
	return alive;
}

/* SIGKILL is delivered asynchronously: wait (bounded) until no member of
 * the group is still running, re-sending it for any late arrival. */
void proc_wait_group_gone(pid_t pgid)
{
	long end = clock_mono_ms() + 2000;

	while (proc_group_alive(pgid) && clock_mono_ms() < end) {
		kill(-pgid, SIGKILL);
		clock_sleep_ms(5);
	}
}

/* The marker entry ("NAME=value") for one run: our pid, a per-process
 * sequence number and random bits, so that no two runs on the host, in any
 * PID namespace, share one. */
void proc_make_mark(char *out, size_t n)
{
	static atomic_ulong seq;
	unsigned long long rnd = 0;

	if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		rnd = (unsigned long long)clock_mono_ms();
	snprintf(out, n, "%s=%ld-%lu-%016llx", PROC_MARK_VAR, (long)getpid(),
		 atomic_fetch_add(&seq, 1) + 1, rnd);
}

/* envp with the marker put first (the first of duplicate names wins for
 * getenv and for Go's os.Getenv).  The array is malloc'd, its strings are
 * not copied: free the array only. */
char **proc_env_with_mark(char *const *envp, char *mark)
{
	size_t n = 0;
	char **out;

	while (envp[n])
		n++;
	out = malloc((n + 2) * sizeof(*out));
	if (out == NULL)
		return NULL;
	out[0] = mark;
	memcpy(out + 1, envp, n * sizeof(*out));
	out[n + 1] = NULL;
	return out;
}

/* 1 when process `pid`'s initial environment holds the entry `mark`
 * exactly.  Processes of other users (EACCES) and gone ones are skipped. */
static int environ_has(const char *pid, const char *mark)
{
	char path[64];
	size_t mlen = strlen(mark), len = 0, cap = 0;
	char *buf = NULL;
	int fd, found = 0;

	snprintf(path, sizeof(path), "/proc/%s/environ", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	for (;;) {
		ssize_t got;

		if (len == cap) {
			char *nb;

			if (cap >= ENVIRON_MAX)
				break;
			cap = cap ? cap * 2 : 16384;
			nb = realloc(buf, cap + 1);
			if (nb == NULL)
				break;
			buf = nb;
		}
		got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	for (size_t i = 0; buf && i < len; ) {
		size_t elen = strnlen(buf + i, len - i);

		if (elen == mlen && memcmp(buf + i, mark, mlen) == 0) {
			found = 1;
			break;
		}
		i += elen + 1;
	}
	free(buf);
	return found;
}

/* SIGKILLs every live process carrying the marker; returns how many. */
static int kill_marked(const char *mark)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	if (d == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		char st = 'Z';
		long pid, ppid, pgrp;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		pid = strtol(de->d_name, NULL, 10);
		if (pid <= 1 || pid == (long)getpid())
			continue;
		if (read_stat(de->d_name, &st, &ppid, &pgrp) != 0 || st == 'Z' ||
		    !environ_has(de->d_name, mark))
			continue;
		if (kill((pid_t)pid, SIGKILL) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Kills marked strays until a pass finds none (bounded: one that keeps
 * forking is stopped by the kill of its parent on the next pass); returns
 * how many were killed. */
int proc_sweep_marked(const char *mark)
{
	long end = clock_mono_ms() + 2000;
	int total = 0, n;

	while ((n = kill_marked(mark)) > 0) {
		total += n;
		if (clock_mono_ms() >= end)
			break;
		clock_sleep_ms(5);
	}
	return total;
}
