/* A Kineto/Chrome trace's events array -> columns, in one pass over a yyjson document.

   `events(buffer, lo, hi)` parses the events `buffer[lo:hi]` (`{...}, {...}`, as a JSON array)
   with yyjson and returns the columns decode.py + tables.py would build from them (columnar.py
   turns them into the tables), or None when they hold anything the typed msgspec decode would
   treat in a way of its own: an event that is not an object, an unknown or missing `ph`, a
   field of an unexpected type, a duplicated field, a number beyond 64 bits, nesting deeper than
   MAX_DEPTH, or bytes that are not JSON. The caller then takes the msgspec path, which gives the
   same tables or the error. So this is a fast path only: it never decides anything the msgspec
   path would decide differently.

   Values are cleaned as tables.py cleans them (columns.py `_parse_int`, `_gpu_id`, NaN for an
   absent number); what columns.py reads by Python's own rules (text in a number field, a null
   id) is handed over as Python values (odd_ids, odd_args). Names and categories are interned
   (codes in order of first appearance, into lists of str or None); `Input type`, `Input Dims`
   and `Concrete Inputs` are interned by value and written back as compact JSON (op_labels.py
   labels each distinct value once).

   The parse and the walk over the events run without the GIL (two threads read two windows at
   once: native_ranges.py): the walk writes into columns allocated beforehand and notes what
   needs a Python object (a new name, an odd value) as a record; the objects are made at the end,
   with the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "yyjson.h"

#define MAX_DEPTH 32
#define BAD_ID (-2)
#define BAIL 1
#define FAIL 2 /* out of memory */

/* ---------- memory for a parse, kept between parses ----------
   A parse needs a copy of its bytes (with the brackets) and yyjson's values (~1.5-2.5 bytes of
   values per byte of JSON): tens of MB of fresh pages each time, whose page faults cost as much
   as the parse. So each parse takes an arena from a small set kept between parses: the bytes at
   its start, yyjson's pool allocator over the rest. A file read window after window faults its
   pages in once per thread. An arena too small for yyjson's values is grown and the parse
   retried. `release()` gives the arenas back (the loader calls it when a load ends). Two threads
   parse at once: a mutex guards the set. */

#define ARENAS 4
#define VALUE_BYTES 3 /* first guess of yyjson's bytes per byte of JSON */
#define ARENA_STEP (16u << 20) /* arena sizes are multiples of this */

typedef struct { char *mem; size_t size; int busy; } arena_t;
static arena_t arenas[ARENAS];

#ifdef _WIN32
static char *map_bytes(size_t size) { return malloc(size); }
static void unmap_bytes(char *p, size_t size) { (void)size; free(p); }
#define LOCK()
#define UNLOCK()
#else
#include <pthread.h>
#include <sys/mman.h>
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&arena_lock)
#define UNLOCK() pthread_mutex_unlock(&arena_lock)
static char *map_bytes(size_t size) {
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
static void unmap_bytes(char *p, size_t size) { munmap(p, size); }

/* A process forked while another thread held the lock or an arena (the loader's release thread,
   a parse) would wait forever: its copy starts with the lock free and every arena free (no
   thread of the child uses them). */
static void child_after_fork(void) {
    pthread_mutex_init(&arena_lock, NULL);
    for (int i = 0; i < ARENAS; i++) arenas[i].busy = 0;
}
#endif

/* An arena of at least `size` bytes (the smallest free one that fits, else a free one remapped
   to that size, else a new one that is not kept): its index, or -1 (not kept), with *mem set. */
static int arena_take(size_t size, char **mem) {
    int at = -1;
    LOCK();
    for (int i = 0; i < ARENAS; i++)
        if (!arenas[i].busy && arenas[i].mem && arenas[i].size >= size && (at < 0 || arenas[i].size < arenas[at].size)) at = i;
    if (at < 0)
        for (int i = 0; i < ARENAS && at < 0; i++)
            if (!arenas[i].busy) at = i;
    if (at >= 0) arenas[at].busy = 1;
    UNLOCK();
    if (at < 0) { /* every arena in use (more threads than arenas): one of its own */
        *mem = map_bytes(size);
        return -1;
    }
    if (!arenas[at].mem || arenas[at].size < size) {
        if (arenas[at].mem) unmap_bytes(arenas[at].mem, arenas[at].size);
        arenas[at].mem = map_bytes(size);
        arenas[at].size = arenas[at].mem ? size : 0;
    }
    *mem = arenas[at].mem;
    return at;
}

static void arena_give(int at, char *mem, size_t size) {
    if (at < 0) {
        if (mem) unmap_bytes(mem, size);
        return;
    }
    LOCK();
    arenas[at].busy = 0;
    UNLOCK();
}

static void release_arenas(void) {
    LOCK();
    for (int i = 0; i < ARENAS; i++) {
        if (!arenas[i].busy && arenas[i].mem) {
            unmap_bytes(arenas[i].mem, arenas[i].size);
            arenas[i].mem = NULL;
            arenas[i].size = 0;
        }
    }
    UNLOCK();
}


/* ---------- growable C arrays (no Python objects during the walk) ---------- */

typedef struct {
    char *data;
    size_t len, cap, width;
} vec_t;

static void *vec_push(vec_t *v) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        char *data = realloc(v->data, cap * v->width);
        if (!data) return NULL;
        v->data = data;
        v->cap = cap;
    }
    return v->data + v->width * v->len++;
}

#define VEC_AT(v, type, i) (((type *)(v).data)[i])

/* ---------- interning ---------- */

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

static int table_init(table_t *t) {
    memset(t, 0, sizeof(*t));
    t->cap = 1024;
    t->none_code = -1;
    t->labels.width = sizeof(label_t);
    t->slots = calloc(t->cap, sizeof(slot_t));
    return t->slots ? 0 : -1;
}

static void table_free(table_t *t) {
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

static int32_t intern_none(table_t *t) {
    if (t->none_code < 0) t->none_code = add_label(t, NULL, 0, NULL);
    return t->none_code;
}

static int32_t intern_str(table_t *t, const char *s, size_t n) {
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

static int32_t intern_raw(table_t *t, yyjson_val *v) {
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
static PyObject *labels_list(table_t *t, int raw) {
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

/* ---------- columns ---------- */

typedef struct {
    PyObject *buf; /* bytearray, allocated with the GIL before the walk */
    char *data;
    size_t width;
} col_t;

static int col_new(col_t *c, size_t n, size_t width) {
    c->width = width;
    c->buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * width + 1));
    c->data = c->buf ? PyByteArray_AS_STRING(c->buf) : NULL;
    return c->buf ? 0 : -1;
}

/* The X columns (events other than Python frames). */
enum { X_TS, X_DUR, X_PID, X_TID, X_CAT, X_NAME, X_EXT, X_EXT21, X_CORR, X_DEV, X_STREAM, X_BYTES,
       X_FLOPS, X_TYPES, X_DIMS, X_CONC, X_N };
static const char *X_NAMES[X_N] = {"ts", "dur", "pid", "tid", "cat", "name", "external_id",
                                   "external_id_2021", "correlation", "device", "stream", "bytes",
                                   "flops", "input_types", "input_dims", "concrete_inputs"};
static const size_t X_WIDTH[X_N] = {8, 8, 8, 8, 4, 4, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4};
enum { F_TS, F_DUR, F_PID, F_TID, F_NAME, F_PYID, F_PYPARENT, F_N };
static const char *F_NAMES[F_N] = {"ts", "dur", "pid", "tid", "name", "python_id", "python_parent_id"};
static const size_t F_WIDTH[F_N] = {8, 8, 8, 8, 4, 8, 8};
enum { M_TS, M_PID, M_TID, M_DTYPE, M_DEV, M_BYTES, M_ALLOC, M_RESERVED, M_ADDR, M_N };
static const char *M_NAMES[M_N] = {"ts", "pid", "tid", "device_type", "device", "bytes",
                                   "total_allocated", "total_reserved", "addr"};
static const size_t M_WIDTH[M_N] = {8, 8, 8, 8, 8, 8, 8, 8, 8};
enum { G_X, G_F, G_M, G_N }; /* the three groups of rows */

/* What needs a Python object, noted during the walk and made at the end. */
enum { R_IDS, R_ARG, R_COMM, R_META };
#define NOT_ODD ((yyjson_val *)1) /* an id the int64 column holds (odd_ids: False) */
typedef struct {
    uint8_t kind, group;
    const char *col;     /* R_ARG: the column name */
    size_t row;
    yyjson_val *v[6];    /* R_IDS: pid, tid (NULL: absent -> None; NOT_ODD); R_ARG: v[0]; R_COMM: 6 fields; R_META: pid, name */
} rec_t;

typedef struct {
    col_t x[X_N], f[F_N], m[M_N];
    size_t nx, nf, nm;
    table_t cats, names, raws;
    vec_t recs;
    int nomem;
} out_t;

#define I64(cols, k, row) (((int64_t *)(cols)[k].data)[row])
#define F64(cols, k, row) (((double *)(cols)[k].data)[row])
#define I32(cols, k, row) (((int32_t *)(cols)[k].data)[row])

static rec_t *rec(out_t *o, int kind, int group, size_t row) {
    rec_t *r = vec_push(&o->recs);
    if (!r) return NULL;
    memset(r, 0, sizeof(*r));
    r->kind = (uint8_t)kind;
    r->group = (uint8_t)group;
    r->row = row;
    return r;
}

/* ---------- values, as the typed decode and tables.py read them ---------- */

static int is_int_val(yyjson_val *v) { return yyjson_is_sint(v) || (yyjson_is_uint(v) && v->uni.u64 <= INT64_MAX); }
static int64_t int_val(yyjson_val *v) { return yyjson_is_sint(v) ? v->uni.i64 : (int64_t)v->uni.u64; }

/* msgspec's Scalar (int | float | str | None): anything else fails its validation. */
static int scalar_ok(yyjson_val *v) {
    return !v || yyjson_is_null(v) || yyjson_is_num(v) || yyjson_is_str(v);
}

/* A number field typed int | float | None (ts, dur): NaN when absent or null. */
static int number_field(yyjson_val *v, double *out) {
    if (!v || yyjson_is_null(v)) { *out = NAN; return 0; }
    if (yyjson_is_real(v)) { *out = v->uni.f64; return 0; }
    if (yyjson_is_sint(v)) { *out = (double)v->uni.i64; return 0; }
    if (yyjson_is_uint(v)) { *out = (double)v->uni.u64; return 0; }
    return BAIL;
}

/* A value tables.py reads through columns.column() by Python's own rules (text, floats, null,
   booleans in an int column; text, booleans in a float column): its Python value goes to the
   group's odd_args, (row, column, value). Containers and bignums: the msgspec path. */
static int odd_arg(out_t *o, int group, size_t row, const char *col, yyjson_val *v) {
    if (yyjson_is_ctn(v) || yyjson_is_raw(v)) return BAIL;
    rec_t *r = rec(o, R_ARG, group, row);
    if (!r) return FAIL;
    r->col = col;
    r->v[0] = v;
    return 0;
}

/* An int column (columns.int_column): ints in int64 as they are, absent -1 (the default);
   anything else -1 here and its value in odd_args. */
static int int_arg(out_t *o, int group, yyjson_val *v, int64_t *out, size_t row, const char *col) {
    if (v && is_int_val(v)) { *out = int_val(v); return 0; }
    *out = -1;
    return v ? odd_arg(o, group, row, col, v) : 0;
}

/* An int arg of a `[memory]` instant (typed Any, absent None): absent reads MEMORY_ABSENT (the
   caller tells it from -1: columns.int_column reads None and -1 differently beside a boolean). */
#define MEMORY_ABSENT INT64_MIN
static int memory_int(out_t *o, yyjson_val *v, int64_t *out, size_t row, const char *col) {
    if (!v) { *out = MEMORY_ABSENT; return 0; }
    if (is_int_val(v) && int_val(v) != MEMORY_ABSENT) { *out = int_val(v); return 0; }
    *out = -1;
    return odd_arg(o, G_M, row, col, v);
}

/* A float column (bytes, flops): numbers as float, absent or null NaN; text or a boolean NaN
   here and its value in odd_args. */
static int float_arg(out_t *o, int group, yyjson_val *v, double *out, size_t row, const char *col) {
    if (!v || yyjson_is_null(v)) { *out = NAN; return 0; }
    if (yyjson_is_num(v)) return number_field(v, out);
    *out = NAN;
    return odd_arg(o, group, row, col, v);
}

/* columns._gpu_id, with the Args default (-1, an int: BAD_ID) for an absent one. */
static int gpu_arg(yyjson_val *v, int64_t *out) {
    if (!v) { *out = BAD_ID; return 0; }
    if (yyjson_is_null(v)) { *out = -1; return 0; }
    if (yyjson_is_sint(v)) { *out = v->uni.i64 >= 0 ? v->uni.i64 : BAD_ID; return 0; }
    if (yyjson_is_uint(v)) { *out = v->uni.u64 <= INT64_MAX ? (int64_t)v->uni.u64 : BAD_ID; return 0; }
    if (yyjson_is_real(v)) {
        double d = v->uni.f64;
        *out = (d == floor(d) && d >= 0.0 && d < 9223372036854775808.0) ? (int64_t)d : BAD_ID;
        return 0;
    }
    if (yyjson_is_str(v)) {
        const char *s = unsafe_yyjson_get_str(v);
        size_t n = unsafe_yyjson_get_len(v);
        if (n == 0) { *out = -1; return 0; }
        for (size_t i = 0; i < n; i++)
            if (s[i] < '0' || s[i] > '9') { *out = -1; return 0; }
        uint64_t acc = 0; /* leading zeros allowed: "007" is 7 */
        for (size_t i = 0; i < n; i++) {
            acc = acc * 10 + (uint64_t)(s[i] - '0');
            if (acc > INT64_MAX) { *out = BAD_ID; return 0; }
        }
        *out = (int64_t)acc;
        return 0;
    }
    return BAIL;
}

/* pid / tid typed int | str | None: an int64 in place; text, None (absent or null) or a bigger
   int go to odd_ids (columns.int_id maps them). *odd: NOT_ODD, or the value (NULL: None). */
static int id_field(yyjson_val *v, int64_t *slot, yyjson_val **odd, int *any) {
    *odd = NOT_ODD;
    if (v && is_int_val(v)) { *slot = int_val(v); return 0; }
    *slot = 0;
    *any = 1;
    if (!v || yyjson_is_null(v)) { *odd = NULL; return 0; }
    if (yyjson_is_str(v) || yyjson_is_uint(v)) { *odd = v; return 0; }
    return BAIL; /* a float id: the loose decode; a bool, a container: malformed */
}

static int ids(out_t *o, int group, size_t row, yyjson_val *pid, yyjson_val *tid, int64_t *pid_slot, int64_t *tid_slot) {
    yyjson_val *p, *t;
    int any = 0;
    if (id_field(pid, pid_slot, &p, &any) || id_field(tid, tid_slot, &t, &any)) return BAIL;
    if (!any) return 0;
    rec_t *r = rec(o, R_IDS, group, row);
    if (!r) return FAIL;
    r->v[0] = p;
    r->v[1] = t;
    return 0;
}

/* ---------- event fields ---------- */

#define KEY(k, lit) (unsafe_yyjson_get_len(k) == sizeof(lit) - 1 && memcmp(unsafe_yyjson_get_str(k), lit, sizeof(lit) - 1) == 0)

enum { E_PH, E_CAT, E_NAME, E_PID, E_TID, E_TS, E_DUR, E_ARGS, E_N };

static int event_fields(yyjson_val *ev, yyjson_val **f) {
    size_t i, max;
    yyjson_val *k, *v;
    memset(f, 0, sizeof(yyjson_val *) * E_N);
    yyjson_obj_foreach(ev, i, max, k, v) {
        int at = -1;
        switch (unsafe_yyjson_get_len(k)) {
        case 2: at = KEY(k, "ph") ? E_PH : KEY(k, "ts") ? E_TS : -1; break;
        case 3: at = KEY(k, "cat") ? E_CAT : KEY(k, "pid") ? E_PID : KEY(k, "tid") ? E_TID : KEY(k, "dur") ? E_DUR : -1; break;
        case 4: at = KEY(k, "name") ? E_NAME : KEY(k, "args") ? E_ARGS : -1; break;
        }
        if (at >= 0) {
            if (f[at]) return BAIL; /* a duplicated field */
            f[at] = v;
        }
    }
    return 0;
}

enum { A_DEVICE, A_STREAM, A_CORR, A_EXT, A_EXT21, A_PYID, A_PYPARENT, A_BYTES, A_TYPES, A_DIMS, A_CONC,
       A_FLOPS, A_NAME, A_COLL, A_IN, A_OUT, A_GROUP, A_DTYPE, A_PG, A_N };
#define A_FIRST_ANY A_COLL

static int args_fields(yyjson_val *args, yyjson_val **f) {
    size_t i, max;
    yyjson_val *k, *v;
    memset(f, 0, sizeof(yyjson_val *) * A_N);
    if (!args || yyjson_is_null(args)) return 0;
    if (!yyjson_is_obj(args)) return BAIL;
    yyjson_obj_foreach(args, i, max, k, v) {
        int at = -1;
        switch (unsafe_yyjson_get_len(k)) {
        case 4: at = KEY(k, "name") ? A_NAME : -1; break;
        case 5: at = KEY(k, "bytes") ? A_BYTES : KEY(k, "flops") ? A_FLOPS : KEY(k, "dtype") ? A_DTYPE : -1; break;
        case 6: at = KEY(k, "device") ? A_DEVICE : KEY(k, "stream") ? A_STREAM : -1; break;
        case 9: at = KEY(k, "Python id") ? A_PYID : -1; break;
        case 10: at = KEY(k, "Input type") ? A_TYPES : KEY(k, "Input Dims") ? A_DIMS : KEY(k, "Group size") ? A_GROUP : -1; break;
        case 11: at = KEY(k, "correlation") ? A_CORR : KEY(k, "External id") ? A_EXT : KEY(k, "external id") ? A_EXT21 : -1; break;
        case 13: at = KEY(k, "In msg nelems") ? A_IN : -1; break;
        case 14: at = KEY(k, "Out msg nelems") ? A_OUT : -1; break;
        case 15: at = KEY(k, "Concrete Inputs") ? A_CONC : KEY(k, "Collective name") ? A_COLL : -1; break;
        case 16: at = KEY(k, "Python parent id") ? A_PYPARENT : -1; break;
        case 18: at = KEY(k, "Process Group Name") ? A_PG : -1; break;
        }
        if (at >= 0) {
            if (f[at]) return BAIL;
            f[at] = v;
        }
    }
    for (int j = 0; j < A_FIRST_ANY; j++) /* Scalar-typed args (the raw ones take anything) */
        if (j != A_TYPES && j != A_DIMS && j != A_CONC && !scalar_ok(f[j])) return BAIL;
    for (int j = A_FIRST_ANY; j < A_N; j++) /* Any-typed: kept as values; no bignums */
        if (f[j] && yyjson_is_raw(f[j])) return BAIL;
    return 0;
}

static int raw_code(table_t *t, yyjson_val *v, int32_t *out) {
    if (!v) { *out = -1; return 0; }
    *out = intern_raw(t, v);
    return *out < 0 ? FAIL : 0;
}

static int str_code(table_t *t, yyjson_val *v, int32_t *out) {
    if (!v || yyjson_is_null(v)) { *out = intern_none(t); return *out < 0 ? FAIL : 0; }
    if (!yyjson_is_str(v)) return BAIL; /* a number as a name: the msgspec path */
    *out = intern_str(t, unsafe_yyjson_get_str(v), unsafe_yyjson_get_len(v));
    return *out < 0 ? FAIL : 0;
}

#define TRY(expr) do { int rc_ = (expr); if (rc_) return rc_; } while (0)

static int comm_rec(out_t *o, size_t row, yyjson_val **a) {
    int any = 0;
    for (int j = A_COLL; j <= A_PG; j++) any |= a[j] != NULL;
    if (!any) return 0;
    rec_t *r = rec(o, R_COMM, G_X, row);
    if (!r) return FAIL;
    for (int j = A_COLL; j <= A_PG; j++) r->v[j - A_COLL] = a[j];
    return 0;
}

static int complete(out_t *o, yyjson_val **e) {
    yyjson_val *a[A_N];
    TRY(args_fields(e[E_ARGS], a));
    if (!scalar_ok(e[E_CAT]) || !scalar_ok(e[E_NAME])) return BAIL;
    int py = e[E_CAT] && yyjson_is_str(e[E_CAT]) && KEY(e[E_CAT], "python_function");
    if (py) {
        col_t *f = o->f;
        size_t r = o->nf;
        TRY(number_field(e[E_TS], &F64(f, F_TS, r)));
        TRY(number_field(e[E_DUR], &F64(f, F_DUR, r)));
        TRY(str_code(&o->names, e[E_NAME], &I32(f, F_NAME, r)));
        TRY(int_arg(o, G_F, a[A_PYID], &I64(f, F_PYID, r), r, "python_id"));
        TRY(int_arg(o, G_F, a[A_PYPARENT], &I64(f, F_PYPARENT, r), r, "python_parent_id"));
        TRY(ids(o, G_F, r, e[E_PID], e[E_TID], &I64(f, F_PID, r), &I64(f, F_TID, r)));
        o->nf++;
        return 0;
    }
    col_t *x = o->x;
    size_t r = o->nx;
    TRY(number_field(e[E_TS], &F64(x, X_TS, r)));
    TRY(number_field(e[E_DUR], &F64(x, X_DUR, r)));
    TRY(str_code(&o->cats, e[E_CAT], &I32(x, X_CAT, r)));
    TRY(str_code(&o->names, e[E_NAME], &I32(x, X_NAME, r)));
    TRY(int_arg(o, G_X, a[A_EXT], &I64(x, X_EXT, r), r, "external_id"));
    TRY(int_arg(o, G_X, a[A_EXT21], &I64(x, X_EXT21, r), r, "external_id_2021"));
    TRY(int_arg(o, G_X, a[A_CORR], &I64(x, X_CORR, r), r, "correlation"));
    TRY(gpu_arg(a[A_DEVICE], &I64(x, X_DEV, r)));
    TRY(gpu_arg(a[A_STREAM], &I64(x, X_STREAM, r)));
    TRY(float_arg(o, G_X, a[A_BYTES], &F64(x, X_BYTES, r), r, "bytes"));
    TRY(float_arg(o, G_X, a[A_FLOPS], &F64(x, X_FLOPS, r), r, "flops"));
    TRY(raw_code(&o->raws, a[A_TYPES], &I32(x, X_TYPES, r)));
    TRY(raw_code(&o->raws, a[A_DIMS], &I32(x, X_DIMS, r)));
    TRY(raw_code(&o->raws, a[A_CONC], &I32(x, X_CONC, r)));
    TRY(comm_rec(o, r, a));
    TRY(ids(o, G_X, r, e[E_PID], e[E_TID], &I64(x, X_PID, r), &I64(x, X_TID, r)));
    o->nx++;
    return 0;
}

/* A metadata event: its fields typed Scalar; `process_name` events kept as (pid, name). */
static int metadata(out_t *o, yyjson_val **e) {
    yyjson_val *a[A_N];
    TRY(args_fields(e[E_ARGS], a));
    if (!scalar_ok(e[E_NAME]) || !scalar_ok(e[E_PID]) || !scalar_ok(e[E_TID])) return BAIL;
    if (!(e[E_NAME] && yyjson_is_str(e[E_NAME]) && KEY(e[E_NAME], "process_name"))) return 0;
    if (!e[E_ARGS] || yyjson_is_null(e[E_ARGS])) return 0;
    rec_t *r = rec(o, R_META, G_X, 0);
    if (!r) return FAIL;
    r->v[0] = e[E_PID];
    r->v[1] = a[A_NAME];
    return 0;
}

/* An instant: only the profiler's `[memory]` ones are kept (memory_table.py). */
static int instant(out_t *o, yyjson_val **e) {
    if (!scalar_ok(e[E_NAME])) return BAIL;
    yyjson_val *args = e[E_ARGS];
    if (args && !yyjson_is_null(args) && !yyjson_is_obj(args)) return BAIL;
    double ts;
    TRY(number_field(e[E_TS], &ts));
    int64_t scratch;
    yyjson_val *odd;
    int any = 0;
    TRY(id_field(e[E_PID], &scratch, &odd, &any));
    TRY(id_field(e[E_TID], &scratch, &odd, &any));
    if (!(e[E_NAME] && yyjson_is_str(e[E_NAME]) && KEY(e[E_NAME], "[memory]"))) return 0;
    yyjson_val *dtype = NULL, *dev = NULL, *bytes = NULL, *addr = NULL, *alloc = NULL, *reserved = NULL;
    if (args && yyjson_is_obj(args)) {
        size_t i, max;
        yyjson_val *k, *v;
        yyjson_obj_foreach(args, i, max, k, v) {
            yyjson_val **at = KEY(k, "Device Type") ? &dtype : KEY(k, "Device Id") ? &dev : KEY(k, "Bytes") ? &bytes
                            : KEY(k, "Addr") ? &addr : KEY(k, "Total Allocated") ? &alloc
                            : KEY(k, "Total Reserved") ? &reserved : NULL;
            if (at) {
                if (*at) return BAIL;
                *at = v;
            }
        }
    }
    col_t *m = o->m;
    size_t r = o->nm;
    F64(m, M_TS, r) = ts;
    TRY(memory_int(o, dtype, &I64(m, M_DTYPE, r), r, "device_type"));
    TRY(memory_int(o, dev, &I64(m, M_DEV, r), r, "device"));
    TRY(memory_int(o, addr, &I64(m, M_ADDR, r), r, "addr"));
    TRY(float_arg(o, G_M, bytes, &F64(m, M_BYTES, r), r, "bytes"));
    TRY(float_arg(o, G_M, alloc, &F64(m, M_ALLOC, r), r, "total_allocated"));
    TRY(float_arg(o, G_M, reserved, &F64(m, M_RESERVED, r), r, "total_reserved"));
    TRY(ids(o, G_M, r, e[E_PID], e[E_TID], &I64(m, M_PID, r), &I64(m, M_TID, r)));
    o->nm++;
    return 0;
}

static const char SKIPPED_PHASES[] = "BEbenstfCPONDRTIcv";

static int event(out_t *o, yyjson_val *ev) {
    if (!yyjson_is_obj(ev)) return BAIL;
    yyjson_val *e[E_N];
    TRY(event_fields(ev, e));
    yyjson_val *ph = e[E_PH];
    if (!ph || !yyjson_is_str(ph) || unsafe_yyjson_get_len(ph) != 1) return BAIL;
    char c = unsafe_yyjson_get_str(ph)[0];
    if (c == 'X') return complete(o, e);
    if (c == 'M') return metadata(o, e);
    if (c == 'i') return instant(o, e);
    if (c && strchr(SKIPPED_PHASES, c)) return 0; /* recognised, its fields skipped */
    return BAIL; /* an unknown phase: the msgspec path counts or skips it */
}

/* Nesting depth of the whole array (msgspec refuses documents nested too deeply, even in
   fields it skips): values are laid out in document order, each container followed by its
   children, so one pass with a stack of container ends tells. */
static int too_deep(yyjson_doc *doc) {
    yyjson_val *v = yyjson_doc_get_root(doc);
    size_t count = yyjson_doc_get_val_count(doc);
    yyjson_val *ends[MAX_DEPTH + 1];
    int depth = 0;
    for (size_t i = 0; i < count; i++, v++) {
        while (depth && v == ends[depth - 1]) depth--;
        if (yyjson_is_ctn(v)) {
            if (depth == MAX_DEPTH) return 1;
            ends[depth++] = unsafe_yyjson_get_next(v);
        }
    }
    return 0;
}

static int walk(out_t *o, yyjson_doc *doc) {
    yyjson_val *root = yyjson_doc_get_root(doc);
    if (!yyjson_is_arr(root) || too_deep(doc)) return BAIL;
    size_t i, max;
    yyjson_val *ev;
    yyjson_arr_foreach(root, i, max, ev) {
        int rc = event(o, ev);
        if (rc) return rc;
    }
    return 0;
}

/* ---------- Python objects, with the GIL ---------- */

/* A JSON value as the Python object msgspec would give: numbers, text, null (and NULL: absent),
   booleans; a container as None (read as absent where kept: op_labels.py). NULL with
   UnicodeDecodeError for text Python's decoder refuses. */
static PyObject *py_value(yyjson_val *v) {
    if (!v) Py_RETURN_NONE;
    switch (yyjson_get_type(v)) {
    case YYJSON_TYPE_BOOL: return PyBool_FromLong(yyjson_get_bool(v));
    case YYJSON_TYPE_STR: return PyUnicode_DecodeUTF8(unsafe_yyjson_get_str(v), (Py_ssize_t)unsafe_yyjson_get_len(v), "strict");
    case YYJSON_TYPE_NUM:
        if (yyjson_is_uint(v)) return PyLong_FromUnsignedLongLong(v->uni.u64);
        if (yyjson_is_sint(v)) return PyLong_FromLongLong(v->uni.i64);
        return PyFloat_FromDouble(v->uni.f64);
    default: Py_RETURN_NONE;
    }
}

static PyObject *id_value(yyjson_val *v) {
    if (v == NOT_ODD) Py_RETURN_FALSE; /* False: the row's int64 is right */
    return py_value(v);
}

static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* The records as lists: per group odd_ids (row, pid, tid) and odd_args (row, column, value);
   comm (row, 6 values); process_names (pid, name). */
static int records(out_t *o, PyObject **odd_ids, PyObject **odd_args, PyObject *comm, PyObject *meta) {
    for (size_t i = 0; i < o->recs.len; i++) {
        rec_t *r = &VEC_AT(o->recs, rec_t, i);
        PyObject *item;
        switch (r->kind) {
        case R_IDS:
            item = Py_BuildValue("(nNN)", (Py_ssize_t)r->row, id_value(r->v[0]), id_value(r->v[1]));
            if (append_new(odd_ids[r->group], item)) return -1;
            break;
        case R_ARG:
            item = Py_BuildValue("(nsN)", (Py_ssize_t)r->row, r->col, py_value(r->v[0]));
            if (append_new(odd_args[r->group], item)) return -1;
            break;
        case R_COMM:
            item = Py_BuildValue("(nNNNNNN)", (Py_ssize_t)r->row, py_value(r->v[0]), py_value(r->v[1]), py_value(r->v[2]),
                                 py_value(r->v[3]), py_value(r->v[4]), py_value(r->v[5]));
            if (append_new(comm, item)) return -1;
            break;
        default:
            item = Py_BuildValue("(NN)", py_value(r->v[0]), py_value(r->v[1]));
            if (append_new(meta, item)) return -1;
        }
    }
    return 0;
}

static PyObject *group_dict(col_t *cols, const char **names, int n, size_t rows, PyObject *odd_ids, PyObject *odd_args) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int k = 0; k < n; k++) {
        if (PyByteArray_Resize(cols[k].buf, (Py_ssize_t)(rows * cols[k].width)) ||
            PyDict_SetItemString(d, names[k], cols[k].buf)) {
            Py_DECREF(d);
            return NULL;
        }
    }
    if (PyDict_SetItemString(d, "odd_ids", odd_ids) || PyDict_SetItemString(d, "odd_args", odd_args)) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static void out_free(out_t *o) {
    for (int k = 0; k < X_N; k++) Py_XDECREF(o->x[k].buf);
    for (int k = 0; k < F_N; k++) Py_XDECREF(o->f[k].buf);
    for (int k = 0; k < M_N; k++) Py_XDECREF(o->m[k].buf);
    table_free(&o->cats);
    table_free(&o->names);
    table_free(&o->raws);
    free(o->recs.data);
}

static int out_init(out_t *o, size_t n) {
    o->recs.width = sizeof(rec_t);
    for (int k = 0; k < X_N; k++) if (col_new(&o->x[k], n, X_WIDTH[k])) return -1;
    for (int k = 0; k < F_N; k++) if (col_new(&o->f[k], n, F_WIDTH[k])) return -1;
    for (int k = 0; k < M_N; k++) if (col_new(&o->m[k], n, M_WIDTH[k])) return -1;
    if (table_init(&o->cats) || table_init(&o->names) || table_init(&o->raws)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The result dict, or NULL (a Python error: MemoryError, or a UnicodeDecodeError the caller
   turns into None). */
static PyObject *result_of(out_t *o, size_t n) {
    PyObject *lists[10] = {NULL};
    for (int i = 0; i < 8; i++) lists[i] = PyList_New(0);
    PyObject *result = NULL, *x = NULL, *f = NULL, *m = NULL, *cats = NULL, *names = NULL, *raws = NULL;
    for (int i = 0; i < 8; i++) if (!lists[i]) goto done;
    PyObject **odd_ids = lists, **odd_args = lists + 3;
    if (records(o, odd_ids, odd_args, lists[6], lists[7])) goto done;
    if (!(cats = labels_list(&o->cats, 0)) || !(names = labels_list(&o->names, 0)) || !(raws = labels_list(&o->raws, 1))) goto done;
    if (!(x = group_dict(o->x, X_NAMES, X_N, o->nx, odd_ids[G_X], odd_args[G_X]))) goto done;
    if (!(f = group_dict(o->f, F_NAMES, F_N, o->nf, odd_ids[G_F], odd_args[G_F]))) goto done;
    if (!(m = group_dict(o->m, M_NAMES, M_N, o->nm, odd_ids[G_M], odd_args[G_M]))) goto done;
    result = Py_BuildValue("{s:n,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "events", (Py_ssize_t)n, "complete", x, "frames", f,
                           "memory", m, "cat_labels", cats, "name_labels", names, "raw_labels", raws, "comm", lists[6],
                           "process_names", lists[7]);
done:
    for (int i = 0; i < 8; i++) Py_XDECREF(lists[i]);
    Py_XDECREF(x);
    Py_XDECREF(f);
    Py_XDECREF(m);
    Py_XDECREF(cats);
    Py_XDECREF(names);
    Py_XDECREF(raws);
    return result;
}

#define MAX_PARTS 1024

/* The buffers of `obj` (one bytes-like object, or a list of them read as one) and their total. */
static int get_parts(PyObject *obj, Py_buffer *parts, Py_ssize_t *count, Py_ssize_t *total) {
    int list = PyList_Check(obj) || PyTuple_Check(obj);
    Py_ssize_t n = list ? PySequence_Fast_GET_SIZE(obj) : 1;
    if (n > MAX_PARTS) {
        PyErr_SetString(PyExc_ValueError, "too many buffers");
        return -1;
    }
    *total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = list ? PySequence_Fast_GET_ITEM(obj, i) : obj;
        if (PyObject_GetBuffer(item, &parts[i], PyBUF_SIMPLE)) {
            for (Py_ssize_t j = 0; j < i; j++) PyBuffer_Release(&parts[j]);
            return -1;
        }
        *total += parts[i].len;
    }
    *count = n;
    return 0;
}

/* Bytes lo..hi of the parts, read as one, into dst. */
static void copy_parts(char *dst, Py_buffer *parts, Py_ssize_t count, Py_ssize_t lo, Py_ssize_t hi) {
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < count && at < hi; i++) {
        Py_ssize_t a = at, b = at + parts[i].len;
        Py_ssize_t from = lo > a ? lo : a, to = hi < b ? hi : b;
        if (from < to) {
            memcpy(dst, (char *)parts[i].buf + (from - a), (size_t)(to - from));
            dst += to - from;
        }
        at = b;
    }
}

static PyObject *events(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj;
    Py_ssize_t lo, hi, count = 0, total = 0;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &lo, &hi)) return NULL;
    Py_buffer *parts = PyMem_Malloc(sizeof(Py_buffer) * MAX_PARTS);
    if (!parts) return PyErr_NoMemory();
    if ((PyList_Check(obj) || PyTuple_Check(obj)) && !(obj = PySequence_Fast(obj, "buffers"))) {
        PyMem_Free(parts);
        return NULL;
    } else if (!(PyList_Check(obj) || PyTuple_Check(obj))) {
        Py_INCREF(obj);
    }
    int bad = get_parts(obj, parts, &count, &total);
    Py_DECREF(obj);
    if (bad) {
        PyMem_Free(parts);
        return NULL;
    }
    if (lo < 0 || hi < lo || hi > total) {
        for (Py_ssize_t i = 0; i < count; i++) PyBuffer_Release(&parts[i]);
        PyMem_Free(parts);
        PyErr_SetString(PyExc_ValueError, "range outside the buffer");
        return NULL;
    }
    out_t o;
    memset(&o, 0, sizeof(o));
    /* "[" + the range + "]" at the start of an arena, parsed in place (yyjson would copy the
       bytes anyway, and the caller's buffer stays as it was: the msgspec path may need it);
       yyjson's values in the rest of the arena. */
    size_t len = (size_t)(hi - lo) + 2, head = (len + YYJSON_PADDING_SIZE + 63) & ~(size_t)63;
    size_t size = head + len * VALUE_BYTES + (1u << 20);
    size = (size + ARENA_STEP - 1) / ARENA_STEP * ARENA_STEP; /* windows of a file differ by a few bytes */
    yyjson_doc *doc = NULL;
    char *mem = NULL;
    int at = -1, tries = 0, rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        at = arena_take(size, &mem);
        if (!mem) break;
        copy_parts(mem + 1, parts, count, lo, hi);
        mem[0] = '[';
        mem[len - 1] = ']';
        memset(mem + len, 0, YYJSON_PADDING_SIZE);
        yyjson_alc alc;
        yyjson_read_err err;
        yyjson_alc_pool_init(&alc, mem + head, size - head);
        doc = yyjson_read_opts(mem, len, YYJSON_READ_INSITU | YYJSON_READ_BIGNUM_AS_RAW, &alc, &err);
        if (doc || err.code != YYJSON_READ_ERROR_MEMORY_ALLOCATION || ++tries > 3) break;
        arena_give(at, mem, size); /* yyjson's values did not fit: a bigger arena */
        mem = NULL;
        size = head + (size - head) * 2;
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) PyBuffer_Release(&parts[i]);
    PyMem_Free(parts);
    /* the columns, one row per event at most, made with the GIL; then the walk without it */
    size_t n = doc ? yyjson_arr_size(yyjson_doc_get_root(doc)) : 0;
    if (doc && out_init(&o, n)) rc = -1;
    if (doc && !rc) {
        Py_BEGIN_ALLOW_THREADS
        rc = walk(&o, doc);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = NULL;
    if (!mem || rc == FAIL) {
        PyErr_NoMemory();
    } else if (rc == -1) {
        /* out_init's error is set */
    } else if (!doc || rc == BAIL) {
        Py_INCREF(Py_None); /* not JSON (or a cut inside a value), or odd: the msgspec path */
        result = Py_None;
    } else {
        result = result_of(&o, n);
        if (!result && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    out_free(&o);
    if (doc) yyjson_doc_free(doc);
    if (mem) arena_give(at, mem, size);
    return result;
}

static PyObject *release(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    release_arenas();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"release", release, METH_NOARGS, "release() -> None: give the memory kept between parses back to the system."},
    {"events", events, METH_VARARGS,
     "events(buffer, lo, hi) -> dict of columns, or None: the events `buffer[lo:hi]` (the inside of "
     "a JSON array: events and the commas between them; `buffer` may be a list of buffers, read as "
     "one), read in one pass (None: the typed msgspec "
     "decode must read them). The GIL is released while the bytes are parsed and walked."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columnar", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columnar(void) {
#ifndef _WIN32
    pthread_atfork(NULL, NULL, child_after_fork);
#endif
    return PyModule_Create(&module);
}
