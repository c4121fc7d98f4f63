/* The machine's errors, in the Python machine's words (its own methods make the messages). */
#include "reader.h"

/* The `{:,}` of an integer, as a new str. */
PyObject *grouped_ll(long long value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (!number) return NULL;
    PyObject *spec = PyUnicode_FromString(",");
    PyObject *out = spec ? PyObject_Format(number, spec) : NULL;
    Py_XDECREF(spec);
    Py_DECREF(number);
    return out;
}

/* Raise what the exception object `made` (a new reference, or NULL with an error set) is. */
void raise_made(PyObject *made) {
    if (!made) return;
    PyErr_SetObject((PyObject *)Py_TYPE(made), made);
    Py_DECREF(made);
}

/* machine._error(offset, what), `what` a new reference (stolen). */
void fail_with(Machine *m, int64_t offset, PyObject *what) {
    if (!what) return;
    raise_made(PyObject_CallMethod(m->machine, "_error", "LO", (long long)offset, what));
    Py_DECREF(what);
}

void fail(Machine *m, int64_t offset, const char *what) {
    fail_with(m, offset, PyUnicode_FromString(what));
}

PyObject *excerpt(Machine *m, PyObject *value) {
    return PyObject_CallOneArg(m->excerpt, value);
}

/* what % excerpt(value): `format` holds one %U. */
void fail_excerpt(Machine *m, int64_t offset, const char *format, PyObject *value) {
    PyObject *shown = excerpt(m, value);
    if (!shown) return;
    PyObject *what = PyUnicode_FromFormat(format, shown);
    Py_DECREF(shown);
    fail_with(m, offset, what);
}

void refuse(Machine *m, int64_t offset, const char *what, PyObject *name) {
    PyObject *empty = NULL;
    if (!name) name = empty = PyUnicode_FromString("");
    if (!name) return;
    raise_made(PyObject_CallMethod(m->machine, "_refused", "LsO", (long long)offset, what, name));
    Py_XDECREF(empty);
}

void truncated(Machine *m) { PyErr_SetNone(m->truncated); }

int is_scalar(Machine *m, PyObject *v) {
    return PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
           PyBool_Check(v) || v == Py_None || PyBytes_CheckExact(v) ||
           Py_TYPE(v) == (PyTypeObject *)m->bigint_type;
}

PyObject *int128_to_long(__int128 value) {
    unsigned char raw[16];
    for (int k = 0; k < 16; k++) raw[k] = (unsigned char)((unsigned __int128)value >> (8 * k));
    return _PyLong_FromByteArray(raw, 16, 1, 1);
}
