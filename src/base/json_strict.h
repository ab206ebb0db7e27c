/*
 * json_strict.h - reading JSON that a Go program will read too, so that
 * both read the same thing.
 *
 * cJSON keeps every member of an object and finds names case-sensitively,
 * the first duplicate first; Go's encoding/json matches a struct's field
 * names case-insensitively (Unicode folding) and lets a later duplicate
 * win.  A document that holds a name twice, or in two spellings, means one
 * thing here and another there, so wherever a check must agree with what a
 * Go program (cosign, the pulumi CLI) will do, such a document is refused
 * as ambiguous instead of being read.
 */
#ifndef PC_JSON_STRICT_H
#define PC_JSON_STRICT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "base/err.h"

/*
 * Finds member `name` of obj (where: how a message names obj): 0 found
 * (*out), 1 absent (or obj not an object), -1 ambiguous: two members of
 * that name in any spelling (ERR_REFUSED in e).
 */
int json_member(const cJSON *obj, const char *name, const char *where, const cJSON **out, struct err *e);

/*
 * Refuses (-1, ERR_REFUSED in e, naming where and the key) an object that
 * holds two members with one name or, when fold_case, two names that
 * differ only in case or that hold a byte outside ASCII (Go folds some of
 * those onto ASCII letters: U+212A KELVIN SIGN is "k").  For the levels a
 * Go struct is decoded from.  0 when obj is no object.
 */
int json_keys_distinct(const cJSON *obj, int fold_case, const char *where, struct err *e);

/*
 * json_keys_distinct(obj, 1, ) for the level a Go struct is decoded from,
 * and refuses too a key that is one of fields (the struct's JSON names,
 * NULL-terminated) only ignoring ASCII case ("Steps" for "steps"): Go
 * decodes it into that field, a case-sensitive reader would miss it.  Keys
 * that match no field stay allowed (Go ignores them too).
 */
int json_struct_keys(const cJSON *obj, const char *const *fields, const char *where, struct err *e);

/* json_keys_distinct(, 0, ) on every object in the tree under v (v
 * included), at most depth_max levels deep (deeper: refused). */
int json_tree_keys_distinct(const cJSON *v, int depth_max, const char *where, struct err *e);

/*
 * Parses len bytes of text as one JSON value with nothing after it, which
 * must be valid UTF-8 with no NUL (Go's decoder replaces invalid bytes, so
 * two names distinct here could be one there).  Caller frees (cJSON_Delete);
 * NULL with ERR_REFUSED in e naming what.
 */
cJSON *json_parse_exact(const char *text, size_t len, const char *what, struct err *e);

#endif
