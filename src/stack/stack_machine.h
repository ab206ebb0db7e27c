/*
 * stack_machine.h - the state machine: one pass over one Stack
 * (stack_reconcile.c, whose header comment is the map of the steps).  It
 * calls the layers below it; only the controller (stack_ctl.c) calls it.
 */
#ifndef PC_STACK_MACHINE_H
#define PC_STACK_MACHINE_H

#include "stack/stack_exec.h"

/* The state machine; returns the requeue delay (0: none). */
int stack_reconcile_pass(struct stack_pass *p, struct err *e);

#endif
