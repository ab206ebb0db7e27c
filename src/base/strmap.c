/*
 * strmap.c - the string-keyed hash map (see strmap.h): separate chaining,
 * a power-of-two table doubled at load factor 1, FNV-1a hashes.
 * Allocation failure aborts through xalloc.h.
 */
#include "base/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"


static size_t hash_str(const char *s)
{
	size_t h = 1469598103934665603ULL;   /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

void strmap_init(struct strmap *m)
{
	memset(m, 0, sizeof(*m));
}

static struct strmap_entry **strmap_find(const struct strmap *m, const char *key)
{
	struct strmap_entry **pp;

	if (m->nslots == 0)
		return NULL;
	for (pp = &m->slots[hash_str(key) & (m->nslots - 1)]; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->key, key) == 0)
			return pp;
	return NULL;
}

void *strmap_get(const struct strmap *m, const char *key)
{
	struct strmap_entry **pp = strmap_find(m, key);
	return pp ? (*pp)->value : NULL;
}

static void strmap_rehash(struct strmap *m)
{
	size_t n = m->nslots ? m->nslots * 2 : 16;
	struct strmap_entry **slots = xcalloc(n, sizeof(*slots));

	for (size_t i = 0; i < m->nslots; i++) {
		struct strmap_entry *en = m->slots[i], *next;
		for (; en; en = next) {
			next = en->next;
			size_t h = hash_str(en->key) & (n - 1);
			en->next = slots[h];
			slots[h] = en;
		}
	}
	free(m->slots);
	m->slots = slots;
	m->nslots = n;
}

void *strmap_put(struct strmap *m, const char *key, void *value)
{
	struct strmap_entry **pp = strmap_find(m, key), *en;
	size_t klen = strlen(key), h;

	if (pp != NULL) {
		void *old = (*pp)->value;
		(*pp)->value = value;
		return old;
	}
	if (m->count + 1 > m->nslots)   /* load factor <= 1 */
		strmap_rehash(m);
	en = xmalloc(sizeof(*en) + klen + 1);
	memcpy(en->key, key, klen + 1);
	en->value = value;
	h = hash_str(key) & (m->nslots - 1);
	en->next = m->slots[h];
	m->slots[h] = en;
	m->count++;
	return NULL;
}

void *strmap_del(struct strmap *m, const char *key)
{
	struct strmap_entry **pp = strmap_find(m, key), *en;
	void *v;

	if (pp == NULL)
		return NULL;
	en = *pp;
	*pp = en->next;
	v = en->value;
	free(en);
	m->count--;
	return v;
}

void strmap_each(const struct strmap *m, void (*fn)(void *ud, const char *key, void *value), void *ud)
{
	for (size_t i = 0; i < m->nslots; i++)
		for (struct strmap_entry *en = m->slots[i]; en; en = en->next)
			fn(ud, en->key, en->value);
}

void strmap_free(struct strmap *m, void (*free_value)(void *value))
{
	for (size_t i = 0; i < m->nslots; i++) {
		struct strmap_entry *en = m->slots[i], *next;
		for (; en; en = next) {
			next = en->next;
			if (free_value && en->value)
				free_value(en->value);
			free(en);
		}
	}
	free(m->slots);
	strmap_init(m);
}
