/* The walk over a parsed events array (walk.c): columns written in place, records of what needs
   a Python object; no Python object is made and the GIL is not needed. */
#ifndef GOODHART_WALK_H
#define GOODHART_WALK_H
#include "intern.h"

#define MAX_DEPTH 32
#define BAD_ID (-2)
#define BAIL 1 /* the msgspec path must read it */
#define FAIL 2 /* out of memory */

typedef struct {
    PyObject *buf; /* bytearray, allocated with the GIL before the walk */
    char *data;
    size_t width;
} col_t;

/* The X columns (events other than Python frames). */
enum { X_TS, X_DUR, X_PID, X_TID, X_CAT, X_NAME, X_EXT, X_EXT21, X_CORR, X_DEV, X_STREAM, X_BYTES,
       X_FLOPS, X_TYPES, X_DIMS, X_CONC, X_WAIT_STREAM, X_WAIT_CORR, X_N };
enum { F_TS, F_DUR, F_PID, F_TID, F_NAME, F_PYID, F_PYPARENT, F_N };
enum { M_TS, M_PID, M_TID, M_DTYPE, M_DEV, M_BYTES, M_ALLOC, M_RESERVED, M_ADDR, M_N };
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
} out_t;

#define I64(cols, k, row) (((int64_t *)(cols)[k].data)[row])
#define F64(cols, k, row) (((double *)(cols)[k].data)[row])
#define I32(cols, k, row) (((int32_t *)(cols)[k].data)[row])

extern const char *X_NAMES[X_N];
extern const size_t X_WIDTH[X_N];
extern const char *F_NAMES[F_N];
extern const size_t F_WIDTH[F_N];
extern const char *M_NAMES[M_N];
extern const size_t M_WIDTH[M_N];

/* A column of `n` rows of `width` bytes (a bytearray; with the GIL). */
int col_new(col_t *c, size_t n, size_t width);
/* Fill the columns from the document's events array: 0, BAIL or FAIL (without the GIL). */
int walk(out_t *o, yyjson_doc *doc);

#endif
