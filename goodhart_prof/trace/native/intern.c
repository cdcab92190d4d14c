#include <string.h>
#include "intern.h"

void *vec_push(vec_t *v) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        char *data = realloc(v->data, cap * v->width);
        if (!data) return NULL;
        v->data = data;
        v->cap = cap;
    }
    return v->data + v->width * v->len++;
}


static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w ^ n) * 0x100000001b3ull;
    h ^= h >> 32;
    return h;
}

int table_init(table_t *t) {
    memset(t, 0, sizeof(*t));
    t->cap = 1024;
    t->none_code = -1;
    t->labels.width = sizeof(label_t);
    t->slots = calloc(t->cap, sizeof(slot_t));
    return t->slots ? 0 : -1;
}

void table_free(table_t *t) {
    free(t->slots);
    for (size_t i = 0; i < t->labels.len; i++) free(VEC_AT(t->labels, label_t, i).owned);
    free(t->labels.data);
}

static int table_grow(table_t *t) {
    size_t cap = t->cap * 2;
    slot_t *slots = calloc(cap, sizeof(slot_t));
    if (!slots) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].key) continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].key) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

static int32_t add_label(table_t *t, const char *s, size_t len, char *owned) {
    label_t *l = vec_push(&t->labels);
    if (!l) {
        free(owned);
        return -1;
    }
    *l = (label_t){s, len, owned};
    return (int32_t)(t->labels.len - 1);
}

int32_t intern_none(table_t *t) {
    if (t->none_code < 0) t->none_code = add_label(t, NULL, 0, NULL);
    return t->none_code;
}

int32_t intern_str(table_t *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    size_t j = h & (t->cap - 1);
    while (t->slots[j].key) {
        slot_t *e = &t->slots[j];
        if (e->hash == h && e->len == n && memcmp(e->key, s, n) == 0) return e->code;
        j = (j + 1) & (t->cap - 1);
    }
    int32_t code = add_label(t, s, n, NULL);
    if (code < 0) return -1;
    t->slots[j] = (slot_t){s, n, h, code};
    if (++t->count * 2 > t->cap && table_grow(t)) return -1;
    return code;
}

/* Raw values: hashed and compared by structure (type, subtype, content), written once. */
static uint64_t hash_val(yyjson_val *v) {
    uint64_t h = unsafe_yyjson_get_tag(v) & 0xFF;
    switch (unsafe_yyjson_get_type(v)) {
    case YYJSON_TYPE_STR:
    case YYJSON_TYPE_RAW:
        return h * 31 + hash_bytes(unsafe_yyjson_get_str(v), unsafe_yyjson_get_len(v));
    case YYJSON_TYPE_NUM:
        return h * 31 + v->uni.u64 * 0x9E3779B97F4A7C15ull;
    case YYJSON_TYPE_ARR: {
        size_t i, max;
        yyjson_val *x;
        yyjson_arr_foreach(v, i, max, x) h = (h * 1000003) ^ hash_val(x);
        return h;
    }
    case YYJSON_TYPE_OBJ: {
        size_t i, max;
        yyjson_val *k, *x;
        yyjson_obj_foreach(v, i, max, k, x) h = (h * 1000003) ^ (hash_val(k) * 7 + hash_val(x));
        return h;
    }
    default:
        return h;
    }
}

static int same_val(yyjson_val *a, yyjson_val *b) {
    if ((unsafe_yyjson_get_tag(a) & 0xFF) != (unsafe_yyjson_get_tag(b) & 0xFF)) return 0;
    switch (unsafe_yyjson_get_type(a)) {
    case YYJSON_TYPE_STR:
    case YYJSON_TYPE_RAW:
        return unsafe_yyjson_get_len(a) == unsafe_yyjson_get_len(b) &&
               memcmp(unsafe_yyjson_get_str(a), unsafe_yyjson_get_str(b), unsafe_yyjson_get_len(a)) == 0;
    case YYJSON_TYPE_NUM:
        return a->uni.u64 == b->uni.u64;
    case YYJSON_TYPE_ARR:
    case YYJSON_TYPE_OBJ: {
        if (unsafe_yyjson_get_len(a) != unsafe_yyjson_get_len(b)) return 0;
        /* children are laid out after the container: compare them pairwise in order */
        yyjson_val *x = unsafe_yyjson_get_first(a), *y = unsafe_yyjson_get_first(b);
        size_t n = unsafe_yyjson_get_len(a) * (unsafe_yyjson_get_type(a) == YYJSON_TYPE_OBJ ? 2 : 1);
        for (size_t i = 0; i < n; i++) {
            if (!same_val(x, y)) return 0;
            x = unsafe_yyjson_get_next(x);
            y = unsafe_yyjson_get_next(y);
        }
        return 1;
    }
    default:
        return 1;
    }
}

int32_t intern_raw(table_t *t, yyjson_val *v) {
    uint64_t h = hash_val(v);
    size_t j = h & (t->cap - 1);
    while (t->slots[j].key) {
        slot_t *e = &t->slots[j];
        if (e->hash == h && same_val((yyjson_val *)e->key, v)) return e->code;
        j = (j + 1) & (t->cap - 1);
    }
    size_t len = 0;
    char *text = yyjson_val_write(v, YYJSON_WRITE_NOFLAG, &len);
    if (!text) return -1;
    int32_t code = add_label(t, text, len, text);
    if (code < 0) return -1;
    t->slots[j] = (slot_t){v, 0, h, code};
    if (++t->count * 2 > t->cap && table_grow(t)) return -1;
    return code;
}

/* The labels as a Python list: str (None for a null name) or, for raw values, bytes. NULL with
   a UnicodeDecodeError for text Python's strict decoder refuses (the caller bails). */
PyObject *labels_list(table_t *t, int raw) {
    PyObject *list = PyList_New((Py_ssize_t)t->labels.len);
    if (!list) return NULL;
    for (size_t i = 0; i < t->labels.len; i++) {
        label_t *l = &VEC_AT(t->labels, label_t, i);
        PyObject *o;
        if (!l->s) {
            Py_INCREF(Py_None);
            o = Py_None;
        } else {
            o = raw ? PyBytes_FromStringAndSize(l->s, (Py_ssize_t)l->len)
                    : PyUnicode_DecodeUTF8(l->s, (Py_ssize_t)l->len, "strict");
        }
        if (!o) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, o);
    }
    return list;
}

