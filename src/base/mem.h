/*
 * mem.h - freeing what a structure owns, in one line.
 *
 * Header only.  A structure that owns a dozen strings would otherwise be
 * freed by a dozen free() lines that look alike in every module; a list
 * says the same and reads as one statement:
 *
 *	mem_free_all(c->source, c->server, c->namespace);
 *
 * Only plain heap pointers belong here: members that need their own free
 * function (secret_free, cJSON_Delete...) keep their own line.
 */
#ifndef PC_MEM_H
#define PC_MEM_H

#include <stddef.h>
#include <stdlib.h>

static inline void mem_free_each(void *const ptrs[], size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(ptrs[i]);
}

/* The arguments are evaluated once (sizeof does not evaluate them). */
#define mem_free_all(...) \
	mem_free_each((void *const[]){ __VA_ARGS__ }, sizeof((void *const[]){ __VA_ARGS__ }) / sizeof(void *))

#endif
