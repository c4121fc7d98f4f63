/* A column buffer: a bytearray grown in place, handed over whole (numpy wraps it, no copy). */
#ifndef HIPMEM_SNAPSHOT_COLUMN_H
#define HIPMEM_SNAPSHOT_COLUMN_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    PyObject *bytes; /* bytearray */
    Py_ssize_t used, cap; /* in values */
} Column;

/* Room for `n` more values of `item` bytes each. */
static inline int column_room(Column *c, Py_ssize_t n, Py_ssize_t item) {
    if (c->used + n <= c->cap) return 0;
    /* array('q')'s growth (1/8 more), not doubling: at 10 M entries a column is 80 MB. The
       first block is small (64 values), so a snapshot of a hundred entries costs ~1 KB. */
    Py_ssize_t cap = c->used + n + (c->used >> 3) + 64;
    if (!c->bytes) {
        c->bytes = PyByteArray_FromStringAndSize(NULL, cap * item);
        if (!c->bytes) return -1;
    } else if (PyByteArray_Resize(c->bytes, cap * item) < 0) {
        return -1;
    }
    c->cap = cap;
    return 0;
}

static inline void column_put64(Column *c, int64_t value) {
    memcpy(PyByteArray_AS_STRING(c->bytes) + c->used * 8, &value, 8);
    c->used++;
}

/* The bytearray of exactly the values written (a new reference). */
static inline PyObject *column_take(Column *c, Py_ssize_t item) {
    if (!c->bytes) return PyByteArray_FromStringAndSize(NULL, 0);
    if (PyByteArray_Resize(c->bytes, c->used * item) < 0) return NULL;
    PyObject *out = c->bytes;
    c->bytes = NULL;
    c->used = c->cap = 0;
    return out;
}

#endif
