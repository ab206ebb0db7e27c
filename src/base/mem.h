/*
 * mem.h - freeing what a structure owns, in one line.
 *
 * Header only.  A structure that owns a dozen strings would otherwise be
 * freed by a dozen free() lines that look alike in every module; a list
 * says the same and reads as one statement:
 *
 *	mem_free_all(c->source, c->server, c->namespace);
 *
 * Only plain heap pointers belong in mem_free_all.  Members of one type
 * that share a free function of their own (a structure's cJSON trees) are
 * a list too, with mem_release_all:
 *
 *	mem_release_all(cJSON, cJSON_Delete, r->labels, r->env, r->volumes);
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

/* fn(p) for each pointer p, of type type *, in order; NULL is passed on
 * (the free functions it is meant for accept it). */
#define mem_release_all(type, fn, ...) \
	do { \
		type *const mem_release_[] = { __VA_ARGS__ }; \
		for (size_t mem_release_i = 0; mem_release_i < sizeof(mem_release_) / sizeof(mem_release_[0]); \
		    mem_release_i++) \
			fn(mem_release_[mem_release_i]); \
	} while (0)

#endif
