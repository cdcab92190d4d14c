/* A Kineto/Chrome trace's events array -> columns, in one pass over a yyjson document.

   `events(buffer, lo, hi)` parses the events `buffer[lo:hi]` (`{...}, {...}`, as a JSON array)
   with yyjson and returns the columns decode.py + tables.py would build from them (columnar.py
   turns them into the tables), or None when they hold anything the typed msgspec decode would
   treat in a way of its own: an event that is not an object, an unknown or missing `ph`, a
   field of an unexpected type, a duplicated field, a number beyond 64 bits, nesting deeper than
   MAX_DEPTH, or bytes that are not JSON. The caller then takes the msgspec path, which gives the
   same tables or the error. So this is a fast path only: it never decides anything the msgspec
   path would decide differently.

   Values are cleaned as tables.py cleans them (columns.py `parse_int`, `_gpu_id`, NaN for an
   absent number); what columns.py reads by Python's own rules (text in a number field, a null
   id) is handed over as Python values (odd_ids, odd_args). Names and categories are interned
   (codes in order of first appearance, into lists of str or None); `Input type`, `Input Dims`
   and `Concrete Inputs` are interned by value and written back as compact JSON (op_labels.py
   labels each distinct value once).

   The parse and the walk over the events run without the GIL (two threads read two windows at
   once: native_ranges.py): the walk (walk.c) writes into columns allocated beforehand and notes
   what needs a Python object (a new name: intern.c; an odd value) as a record; the objects are
   made at the end, with the GIL (this file, the module). The parse's memory: arena.c. */
#include "arena.h"
#include "walk.h"

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

static PyObject *release(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t keep = 0;
    if (!PyArg_ParseTuple(args, "|n", &keep)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    release_arenas(keep > 0 ? (size_t)keep : 0);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"release", release, METH_VARARGS, "release(keep=0) -> None: give the memory kept between parses back to the system, but up to `keep` bytes."},
    {"events", events, METH_VARARGS,
     "events(buffer, lo, hi) -> dict of columns, or None: the events `buffer[lo:hi]` (the inside of "
     "a JSON array: events and the commas between them; `buffer` may be a list of buffers, read as "
     "one), read in one pass (None: the typed msgspec "
     "decode must read them). The GIL is released while the bytes are parsed and walked."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cdecoder", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_cdecoder(void) {
    arenas_at_fork();
    return PyModule_Create(&module);
}
