/*
 * strmap.h - a hash map from string keys to opaque pointers, small per
 * entry because the informer caches hold thousands of objects: the key is
 * copied into the entry itself, the value is not owned.
 *
 * Out of memory aborts (the policy is stated in base/xalloc.h): no strmap_
 * function fails.  Not thread-safe: the caller locks.
 */
#ifndef PC_STRMAP_H
#define PC_STRMAP_H

#include <stddef.h>

struct strmap_entry {
	struct strmap_entry *next;
	void *value;
	char key[];
};

/* Zero-initialised (or strmap_init) is an empty map; count is the number
 * of entries. */
struct strmap {
	struct strmap_entry **slots;
	size_t nslots, count;
};

void strmap_init(struct strmap *m);
/* The value for key, or NULL. */
void *strmap_get(const struct strmap *m, const char *key);
/* Inserts or replaces; returns the previous value (or NULL). */
void *strmap_put(struct strmap *m, const char *key, void *value);
/* Removes; returns the value that was there (or NULL). */
void *strmap_del(struct strmap *m, const char *key);
/* Calls fn for every entry, in no particular order; fn may not modify the
 * map. */
void strmap_each(const struct strmap *m, void (*fn)(void *ud, const char *key, void *value),
    void *ud);
/* Frees the map; values are passed to free_value when it and they are not
 * NULL.  The map is empty (and usable) afterwards. */
void strmap_free(struct strmap *m, void (*free_value)(void *value));

#endif
