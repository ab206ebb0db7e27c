/*
 * stack_pod.h - run-update, the program a Job's pod runs
 * (stack_runner*.c): it shares the model, the sources and the executors'
 * code with the controller, never the controller or the state machine.
 *
 *   stack_runner.c       the pod's update, from its inputs to its result
 *   stack_runner_io.c    what it reads and writes back (stack.h types)
 *   stack_runner_plan.c  approval: Manual in the pod
 */
#ifndef PC_STACK_POD_H
#define PC_STACK_POD_H

#include "stack/stack_exec.h"

struct stack_run_input;
struct stack_run_opts;
/* In the pod: `preview --save-plan`, then the plan into in->plan_secret
 * (p->out holds the result). */
void stack_run_plan(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o);
/* The pod's own client: the in-cluster config and its ServiceAccount token
 * (stack_runner_io.c); caller frees, NULL with e. */
struct kube_client *stack_run_client(const struct stack_run_opts *o, struct err *e);
/* In the pod, before `up`: the mounted plan must be in->plan_id; sets
 * p->safety.plan_file.  0, or -1 with the refusal in p->out. */
int stack_run_plan_load(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o);

#endif
