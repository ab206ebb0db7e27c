/*
 * stack_exec.c - which executor runs a Stack's operations, and what holds
 * for a Stack whatever executor ran it last.
 *
 * The executors are listed here once; a spec may switch between them while
 * an operation still runs (runner.type changed during a Job), so a deletion
 * waits for, and collects, an operation of any of them.
 */
#include "stack/stack_exec.h"

static const struct stack_exec *const executors[] = { &stack_exec_local, &stack_exec_job };
#define N_EXECUTORS (sizeof(executors) / sizeof(executors[0]))

const struct stack_exec *stack_exec_for(const struct stack_spec *s)
{
	return s->job_mode ? &stack_exec_job : &stack_exec_local;
}

int stack_exec_running(struct stack_pass *p, char *out, size_t n)
{
	for (size_t i = 0; i < N_EXECUTORS; i++)
		if (executors[i]->running(p, out, n))
			return 1;
	return 0;
}

int stack_exec_destroyed(struct stack_pass *p, struct err *e)
{
	int rc = 0;

	for (size_t i = 0; i < N_EXECUTORS && rc == 0; i++)
		rc = executors[i]->destroyed(p, e);
	return rc;
}

void stack_exec_recorded(struct stack_pass *p)
{
	for (size_t i = 0; i < N_EXECUTORS; i++)
		executors[i]->recorded(p);
}
