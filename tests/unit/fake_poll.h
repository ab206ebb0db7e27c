/*
 * fake_poll.h - a poll() that fails on demand, for the unit tests of code
 * that runs children (src/base/proc.c and its callers).  Included by one
 * test file per binary: defined there, it takes precedence over the C
 * library's for the objects linked in; with fake_poll_fail set it fails
 * with fake_poll_errno, otherwise it calls the real one.
 */
#ifndef PC_TEST_FAKE_POLL_H
#define PC_TEST_FAKE_POLL_H

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>

static int fake_poll_fail;
static int fake_poll_errno = ENOMEM;

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	static int (*real)(struct pollfd *, nfds_t, int);

	if (fake_poll_fail) {
		errno = fake_poll_errno;
		return -1;
	}
	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "poll");
	return real(fds, n, timeout);
}

#endif
