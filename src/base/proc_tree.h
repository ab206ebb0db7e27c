/*
 * proc_tree.h - private to src/base/proc.c and proc_tree.c: the registry
 * of live direct children, the run marker and the sweeps that clean up
 * after a child.  The public interface is proc.h.
 */
#ifndef PC_PROC_TREE_H
#define PC_PROC_TREE_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/proc.h"

/* Held across posix_spawn and proc_kids_add, so that proc_reap_orphans
 * never takes a fast-exiting child for an orphan. */
extern pthread_mutex_t proc_kids_lock;
/* Room for one more pid (lock held), so that registering after a
 * successful spawn cannot fail.  -1 when out of memory. */
int proc_kids_reserve(void);
void proc_kids_add(pid_t pid);
/* Forgets pid once its proc_run has reaped it (takes the lock). */
void proc_kids_remove(pid_t pid);

/* Waits (bounded) until no member of the group is still running,
 * re-sending SIGKILL for any late arrival. */
void proc_wait_group_gone(pid_t pgid);

/* The marker entry ("NAME=value") for one run, unique on the host. */
void proc_make_mark(char *out, size_t n);
/* envp with the marker first; the array is malloc'd (free it only). */
char **proc_env_with_mark(char *const *envp, char *mark);
/* Kills every process carrying the marker until none is left (bounded);
 * returns how many were killed. */
int proc_sweep_marked(const char *mark);

#endif
