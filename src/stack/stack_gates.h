/*
 * stack_gates.h - the gates: what decides whether an operation may run
 * now (prerequisites, plan-bound approval, drift).  A gate that needs an
 * operation run (a plan's preview, a drift check) asks the pass's executor
 * through the seam (p->exec, stack_model.h) and never names one.
 *
 *   stack_prereq.c    prerequisites: the index, the wait, cycles
 *   stack_approval.c  approval: Manual: plans, status.preview, approvals
 *   stack_drift.c     drift checks: status.drift, the Drifted condition
 */
#ifndef PC_STACK_GATES_H
#define PC_STACK_GATES_H

#include "stack/stack_sources.h"

/* Before decide: a plan for these inputs awaits approval (1, verdict set). */
int stack_approval_gate(struct stack_pass *p);
/* After workspace: makes (or reuses) the plan and lets the update apply it
 * once approved.  1 decided (awaiting), 0 go on, -1 the preview failed
 * (p->out holds it). */
int stack_approval_plan(struct stack_pass *p);
/* After the update: clears an applied plan, or replaces one that no longer
 * applies with a fresh preview. */
void stack_approval_after_update(struct stack_pass *p);

/* Before decide: the drift check when due (1 with a verdict when drift is
 * left unrepaired); sets p->safety.remediate when an update must repair it. */
int stack_drift_gate(struct stack_pass *p);
/* When the next drift check is due, in ms from now (0: no drift checks). */
long stack_drift_next_ms(const struct stack_pass *p, int64_t now_us);
/* After the update: a remediating update that succeeded clears Drifted. */
void stack_drift_after_update(struct stack_pass *p);
/* A Job's termination message (res, may be NULL): its "drift" into
 * p->safety.drift_steps / drift_omitted, bounded as a local refresh is. */
void stack_drift_from_result(struct stack_pass *p, const cJSON *res);
/* One drifted resource into p->safety.drift_steps, at most
 * STACK_DRIFT_STEPS_MAX of them (the rest counted in drift_omitted). */
#define STACK_DRIFT_STEPS_MAX 50
void stack_drift_add(struct stack_pass *p, const char *op, const char *urn);

/* stack_prereq.c: the "prereq" index of the Stack cache (Stack/<ns>/<name>
 * of each prerequisite), whether a Stack's readiness changed (its
 * dependents are queued then), and the step that waits for them. */
int stack_prereq_index(const cJSON *obj, char **out, int max);
int stack_prereq_readiness_changed(const cJSON *old, const cJSON *obj);
int stack_prereq_gate(struct stack_pass *p);

#endif
