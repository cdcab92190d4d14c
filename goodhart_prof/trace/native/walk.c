#include <math.h>
#include <string.h>
#include "walk.h"

const char *X_NAMES[X_N] = {"ts", "dur", "pid", "tid", "cat", "name", "external_id",
                                   "external_id_2021", "correlation", "device", "stream", "bytes",
                                   "flops", "input_types", "input_dims", "concrete_inputs",
                                   "wait_on_stream", "wait_on_correlation"};
const size_t X_WIDTH[X_N] = {8, 8, 8, 8, 4, 4, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 8, 8};
const char *F_NAMES[F_N] = {"ts", "dur", "pid", "tid", "name", "python_id", "python_parent_id"};
const size_t F_WIDTH[F_N] = {8, 8, 8, 8, 4, 8, 8};
const char *M_NAMES[M_N] = {"ts", "pid", "tid", "device_type", "device", "bytes",
                                   "total_allocated", "total_reserved", "addr"};
const size_t M_WIDTH[M_N] = {8, 8, 8, 8, 8, 8, 8, 8, 8};

int col_new(col_t *c, size_t n, size_t width) {
    c->width = width;
    c->buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * width + 1));
    c->data = c->buf ? PyByteArray_AS_STRING(c->buf) : NULL;
    return c->buf ? 0 : -1;
}

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
       A_FLOPS, A_WAIT_STREAM, A_WAIT_CORR, A_NAME, A_COLL, A_IN, A_OUT, A_GROUP, A_DTYPE, A_PG, A_N };
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
        case 14: at = KEY(k, "Out msg nelems") ? A_OUT : KEY(k, "wait_on_stream") ? A_WAIT_STREAM : -1; break;
        case 15: at = KEY(k, "Concrete Inputs") ? A_CONC : KEY(k, "Collective name") ? A_COLL : -1; break;
        case 16: at = KEY(k, "Python parent id") ? A_PYPARENT : -1; break;
        case 18: at = KEY(k, "Process Group Name") ? A_PG : -1; break;
        case 33: at = KEY(k, "wait_on_cuda_event_record_corr_id") ? A_WAIT_CORR : -1; break;
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
    TRY(int_arg(o, G_X, a[A_WAIT_STREAM], &I64(x, X_WAIT_STREAM, r), r, "wait_on_stream"));
    TRY(int_arg(o, G_X, a[A_WAIT_CORR], &I64(x, X_WAIT_CORR, r), r, "wait_on_correlation"));
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

int walk(out_t *o, yyjson_doc *doc) {
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

