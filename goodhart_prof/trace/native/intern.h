/* Growable C arrays and the interning of names and raw values (intern.c): no Python object is
   made while interning (the walk runs without the GIL); labels_list makes them at the end. */
#ifndef GOODHART_INTERN_H
#define GOODHART_INTERN_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include "yyjson.h"

typedef struct {
    char *data;
    size_t len, cap, width;
} vec_t;

#define VEC_AT(v, type, i) (((type *)(v).data)[i])

void *vec_push(vec_t *v);

typedef struct {
    const void *key; /* string bytes, or a yyjson_val* for raw values */
    size_t len;
    uint64_t hash;
    int32_t code;
} slot_t;

typedef struct { const char *s; size_t len; char *owned; } label_t; /* s NULL: None; owned: written raw JSON */

typedef struct {
    slot_t *slots;
    size_t cap, count;
    vec_t labels; /* label_t, in code order */
    int32_t none_code;
} table_t;

int table_init(table_t *t);
void table_free(table_t *t);
int32_t intern_none(table_t *t);
/* The code of the text s[:n] (its bytes stay where they are: the parsed document's). -1: no memory. */
int32_t intern_str(table_t *t, const char *s, size_t n);
/* The code of a JSON value, compared by structure and written once as compact JSON. -1: no memory. */
int32_t intern_raw(table_t *t, yyjson_val *v);
/* The labels as a Python list (with the GIL): str, or bytes for raw values; None for a null. */
PyObject *labels_list(table_t *t, int raw);

#endif
