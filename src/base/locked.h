/*
 * locked.h - reading one value that other threads write under a mutex.
 *
 * Header only.  Counts and flags that workers change under their lock
 * (a queue's length, an informer's store size, the Job slots' waiters)
 * are read from other threads for metrics, status and tests.  A plain
 * read would be a data race, so each such getter takes the lock for the
 * one load; written out that is the same four lines in every module.
 *
 *	return locked_size(&q->lock, &q->len);
 *
 * Only for a single scalar: a reader that needs two fields to agree takes
 * the lock itself around both.
 */
#ifndef PC_LOCKED_H
#define PC_LOCKED_H

#include <pthread.h>
#include <stddef.h>

/* One body for each type: a getter per type would be this written thrice. */
#define LOCKED_READER(name, type) \
	static inline type name(pthread_mutex_t *lock, const type *v) \
	{ \
		type n; \
		pthread_mutex_lock(lock); \
		n = *v; \
		pthread_mutex_unlock(lock); \
		return n; \
	}

LOCKED_READER(locked_size, size_t)
LOCKED_READER(locked_ulong, unsigned long)
LOCKED_READER(locked_int, int)

#undef LOCKED_READER

#endif
