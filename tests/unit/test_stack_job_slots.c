/*
 * test_stack_job_slots.c - --max-concurrent-jobs bookkeeping
 * (stack_job_slots.c): taking and freeing slots, and which waiting Stacks a
 * freed slot wakes (as many as slots are free, oldest first, a woken one
 * holding its place, a forgotten one leaving the queue and handing its wake
 * on; which Jobs the informer saw count), seen through the work queue.
 * Without a Stack informer every Stack counts as this controller's (and
 * no uid is compared); the per-shard count
 * (only Stacks in the shard's cache) is tests/e2e/test_stack_job_shards.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "stack/stack_machine.h"

static struct stack_ctl sc;

static int setup(void **state)
{
	(void)state;
	memset(&sc, 0, sizeof(sc));
	sc.o.max_concurrent_jobs = 2;
	sc.queue = kube_queue_new(NULL);
	assert_non_null(sc.queue);
	assert_int_equal(stack_job_slots_new(&sc), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	stack_job_slots_free(&sc);
	kube_queue_free(sc.queue);
	return 0;
}

/* The next queued key, which must be want (the pass of it is over). */
static void next_queued_is(const char *want)
{
	char *key;

	assert_true(kube_queue_len(sc.queue) > 0);
	key = kube_queue_get(sc.queue);
	assert_string_equal(key, want);
	kube_queue_done(sc.queue, key);
	free(key);
}

static void take(const char *job, const char *stack, int want)
{
	assert_int_equal(stack_job_slot_take(&sc, job, stack), want);
}

/* Two slots taken, five Stacks waiting. */
static void fill(void)
{
	char job[32], stack[32];

	take("apps/j0", "apps/s0", 0);
	take("apps/j1", "apps/s1", 0);
	for (int i = 2; i < 7; i++) {
		snprintf(job, sizeof(job), "apps/j%d", i);
		snprintf(stack, sizeof(stack), "apps/s%d", i);
		take(job, stack, 1);
	}
	assert_int_equal(stack_job_slots_used(&sc), 2);
	assert_int_equal((int)stack_job_slots_waiting(&sc), 5);
	assert_int_equal((int)kube_queue_len(sc.queue), 0);
}

static void test_a_freed_slot_wakes_the_oldest_waiting_stack_only(void **state)
{
	(void)state;
	fill();
	stack_job_slot_release(&sc, "apps/j0");
	assert_int_equal((int)kube_queue_len(sc.queue), 1);
	next_queued_is("apps/s2");
	take("apps/j2", "apps/s2", 0);
	assert_int_equal((int)stack_job_slots_waiting(&sc), 4);
	/* The Job informer's view of a finished Job frees the same way. */
	stack_job_slot_seen(&sc, "apps/j1", "apps/s1", 0);
	assert_int_equal((int)kube_queue_len(sc.queue), 1);
	next_queued_is("apps/s3");
}

static void test_a_woken_stack_holds_its_slot_until_its_pass(void **state)
{
	(void)state;
	fill();
	stack_job_slot_release(&sc, "apps/j0");
	stack_job_slot_release(&sc, "apps/j1");
	/* Two free slots: s2 (woken first, not run yet) and s3, not s4. */
	assert_int_equal((int)kube_queue_len(sc.queue), 2);
	next_queued_is("apps/s2");
	next_queued_is("apps/s3");
	/* A Stack that never waited takes one first: s3 finds none, and keeps
	 * its place at the head for the next freed slot. */
	take("apps/jx", "apps/sx", 0);
	take("apps/j2", "apps/s2", 0);
	take("apps/j3", "apps/s3", 1);
	stack_job_slot_release(&sc, "apps/jx");
	assert_int_equal((int)kube_queue_len(sc.queue), 1);
	next_queued_is("apps/s3");
}

static void test_a_release_of_an_unknown_job_wakes_nobody(void **state)
{
	(void)state;
	fill();
	stack_job_slot_release(&sc, "apps/other");
	stack_job_slot_seen(&sc, "apps/other", "apps/so", 0);
	assert_int_equal((int)kube_queue_len(sc.queue), 0);
	/* A Job the informer saw running counts, and taking it again is free. */
	stack_job_slot_release(&sc, "apps/j0");
	stack_job_slot_seen(&sc, "apps/seen", "apps/s9", 1);
	assert_int_equal(stack_job_slots_used(&sc), 2);
	take("apps/seen", "apps/s9", 0);
	assert_int_equal(stack_job_slots_used(&sc), 2);
}

static void test_a_stack_further_back_polls_less_often(void **state)
{
	(void)state;
	fill();
	/* Two slots: the head polls every 5 min; the fifth waiter, with two
	 * slots' worth (four Stacks) ahead of it, every 15. */
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/s2"), STACK_JOB_SLOT_POLL_MS);
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/s3"), STACK_JOB_SLOT_POLL_MS);
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/s4"), 2 * STACK_JOB_SLOT_POLL_MS);
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/s6"), 3 * STACK_JOB_SLOT_POLL_MS);
	/* Never more than an hour, however long the queue. */
	sc.o.max_concurrent_jobs = 1;
	for (int i = 0; i < 40; i++) {
		char stack[32];
		snprintf(stack, sizeof(stack), "apps/t%d", i);
		take("apps/jt", stack, 1);
	}
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/t39"), 60L * 60 * 1000);
}

static void test_a_forgotten_waiter_hands_its_wake_to_the_next_at_once(void **state)
{
	(void)state;
	fill();
	/* s2 is woken for the freed slot, then is deleted (or suspended) before
	 * its pass takes it: s3 gets the wake now, not after the hold. */
	stack_job_slot_release(&sc, "apps/j0");
	next_queued_is("apps/s2");
	stack_job_slot_forget(&sc, "apps/s2");
	assert_int_equal((int)kube_queue_len(sc.queue), 1);
	next_queued_is("apps/s3");
	take("apps/j3", "apps/s3", 0);
	assert_int_equal((int)stack_job_slots_waiting(&sc), 3);
	/* Forgetting a Stack that does not wait, or one that holds no wake,
	 * wakes nobody. */
	stack_job_slot_forget(&sc, "apps/nobody");
	stack_job_slot_forget(&sc, "apps/s5");
	assert_int_equal((int)kube_queue_len(sc.queue), 0);
	assert_int_equal((int)stack_job_slots_waiting(&sc), 2);
}

static void test_a_pass_that_asks_for_no_slot_gives_its_place_up(void **state)
{
	unsigned long mark;

	(void)state;
	fill();
	/* s3's pass asks again and finds none: it keeps its place, whatever
	 * verdict the pass then gives (a drift check stays Ready). */
	mark = stack_job_slot_mark(&sc);
	take("apps/j3", "apps/s3", 1);
	stack_job_slot_pass_done(&sc, "apps/s3", mark);
	assert_int_equal((int)stack_job_slots_waiting(&sc), 5);
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/s4"), 2 * STACK_JOB_SLOT_POLL_MS);
	/* s2's next pass needs no Job (suspended, nothing due): it goes, and
	 * those behind it move up. */
	mark = stack_job_slot_mark(&sc);
	stack_job_slot_pass_done(&sc, "apps/s2", mark);
	assert_int_equal((int)stack_job_slots_waiting(&sc), 4);
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/s4"), STACK_JOB_SLOT_POLL_MS);
	stack_job_slot_release(&sc, "apps/j0");
	next_queued_is("apps/s3");
}

static void test_forgotten_waiters_no_longer_push_the_others_back(void **state)
{
	(void)state;
	sc.o.max_concurrent_jobs = 1;
	take("apps/j", "apps/running", 0);
	/* Stacks come, wait and go (deleted, suspended, no longer due): the
	 * queue does not grow with them, and a live waiter behind them is at
	 * the head again. */
	for (int i = 0; i < 200; i++) {
		char stack[32];
		snprintf(stack, sizeof(stack), "apps/gone%d", i);
		take("apps/jg", stack, 1);
	}
	take("apps/jl", "apps/live", 1);
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/live"), 60L * 60 * 1000);
	for (int i = 0; i < 200; i++) {
		char stack[32];
		snprintf(stack, sizeof(stack), "apps/gone%d", i);
		stack_job_slot_forget(&sc, stack);
	}
	assert_int_equal((int)stack_job_slots_waiting(&sc), 1);
	assert_int_equal(stack_job_slot_poll_ms(&sc, "apps/live"), STACK_JOB_SLOT_POLL_MS);
	/* The freed slot goes to it at once. */
	stack_job_slot_release(&sc, "apps/j");
	next_queued_is("apps/live");
	take("apps/jl", "apps/live", 0);
	assert_int_equal((int)stack_job_slots_waiting(&sc), 0);
}

/* A Job the informer sees counts only when it is named as its owner
 * Stack's Jobs are and has the owner's uid, and one per Stack: anyone may
 * make Jobs that look like the controller's.  (The uid is compared with the
 * cached Stack's: tests/e2e/test_stack_job_slots.py.) */
static void test_a_stack_takes_at_most_one_slot_whatever_jobs_claim_it(void **state)
{
	(void)state;
	stack_job_slot_seen_job(&sc, "apps/hog", "apps/tenant", "uid-t", 1);
	stack_job_slot_seen_job(&sc, "apps/tenant-up-0123456789", "apps/tenant", NULL, 1);
	stack_job_slot_seen_job(&sc, "apps/tenant-up-0123456789", "", "uid-t", 1);
	assert_int_equal(stack_job_slots_used(&sc), 0);
	stack_job_slot_seen_job(&sc, "apps/tenant-up-0123456789", "apps/tenant", "uid-t", 1);
	stack_job_slot_seen_job(&sc, "apps/tenant-destroy-abcdef0123", "apps/tenant", "uid-t", 1);
	assert_int_equal(stack_job_slots_used(&sc), 1);
	/* The controller's own Jobs of other Stacks still get the other slot. */
	take("apps/j0", "apps/s0", 0);
	take("apps/j1", "apps/s1", 1);
	/* One of the tenant's two finishing frees nothing: the other counts. */
	stack_job_slot_seen_job(&sc, "apps/tenant-up-0123456789", "apps/tenant", "uid-t", 0);
	assert_int_equal(stack_job_slots_used(&sc), 2);
	stack_job_slot_seen_job(&sc, "apps/tenant-destroy-abcdef0123", "apps/tenant", "uid-t", 0);
	assert_int_equal(stack_job_slots_used(&sc), 1);
	next_queued_is("apps/s1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_freed_slot_wakes_the_oldest_waiting_stack_only, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_a_woken_stack_holds_its_slot_until_its_pass, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_release_of_an_unknown_job_wakes_nobody, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_stack_further_back_polls_less_often, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_forgotten_waiter_hands_its_wake_to_the_next_at_once, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_a_pass_that_asks_for_no_slot_gives_its_place_up, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_forgotten_waiters_no_longer_push_the_others_back, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_a_stack_takes_at_most_one_slot_whatever_jobs_claim_it, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
