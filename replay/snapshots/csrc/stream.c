/* The machine's input: the bytes it reads (`more`, `want`: from the caller's `read`, within
   the cap) and the scalar values it makes of them. */
#include "reader.h"

/* A str of at most SHORT_STRING_BYTES bytes, interned: PyTorch writes some anew for every
   entry ("N/A", the compile_context), and the memo keeps each; interned, they are one.
   The last ASCII one made from each slot's bytes is kept, so a repeat costs no decoding
   and no lookup in the interned table. */
PyObject *short_string(Machine *m, const char *start, Py_ssize_t size) {
    uint32_t hash = 2166136261u ^ (uint32_t)size; /* FNV-1a */
    for (Py_ssize_t k = 0; k < size; k++) hash = (hash ^ (unsigned char)start[k]) * 16777619u;
    PyObject **slot = &m->strings[hash % STRING_SLOTS];
    PyObject *seen = *slot;
    if (seen && PyUnicode_GET_LENGTH(seen) == size && !memcmp(PyUnicode_DATA(seen), start, size)) {
        Py_INCREF(seen);
        return seen;
    }
    PyObject *value = PyUnicode_DecodeUTF8(start, size, "surrogatepass");
    if (!value) return NULL;
    PyUnicode_InternInPlace(&value);
    if (PyUnicode_IS_ASCII(value)) {
        Py_INCREF(value);
        Py_XSETREF(*slot, value);
    }
    return value;
}

/* `buf` from pos on, with at least `need` bytes unless the stream ends first. */
int more(Machine *m, Py_ssize_t *pos, unsigned __int128 need) {
    Py_ssize_t rest = *pos < m->end ? m->end - *pos : 0;
    m->base += *pos;
    if (rest) memmove(m->buf, m->buf + *pos, (size_t)rest);
    m->end = rest;
    *pos = 0;
    if (m->base > m->max_bytes || need > (unsigned __int128)(m->max_bytes - m->base)) {
        uint64_t halves[2] = {(uint64_t)need, (uint64_t)(need >> 64)};
        PyObject *shown = _PyLong_FromByteArray((const unsigned char *)halves, 16, 1, 0);
        if (shown) {
            raise_made(PyObject_CallMethod(m->machine, "_cap_error", "OL", shown,
                                           (long long)m->base));
            Py_DECREF(shown);
        }
        return -1;
    }
    Py_ssize_t wanted = (Py_ssize_t)need;
    if (wanted > m->buf_cap) {
        char *grown = PyMem_RawRealloc(m->buf, (size_t)wanted);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        m->buf = grown;
        m->buf_cap = wanted;
    }
    while (!m->eof && m->end < wanted) {
        Py_ssize_t ask = wanted - m->end > m->chunk ? wanted - m->end : m->chunk;
        PyObject *data = PyObject_CallFunction(m->read, "n", ask);
        if (!data) return -1;
        m->chunk = m->chunk * 2 < m->max_chunk ? m->chunk * 2 : m->max_chunk;
        char *bytes;
        Py_ssize_t length;
        if (PyBytes_AsStringAndSize(data, &bytes, &length) < 0) {
            Py_DECREF(data);
            return -1;
        }
        if (!length) {
            m->eof = 1;
        } else {
            if (m->end + length > m->buf_cap) {
                Py_ssize_t cap = m->end + length;
                char *grown = PyMem_RawRealloc(m->buf, (size_t)cap);
                if (!grown) {
                    Py_DECREF(data);
                    PyErr_NoMemory();
                    return -1;
                }
                m->buf = grown;
                m->buf_cap = cap;
            }
            memcpy(m->buf + m->end, bytes, (size_t)length);
            m->end += length;
        }
        Py_DECREF(data);
    }
    return 0;
}

/* Room for `need` more bytes from pos (reading on); 0, or -1 with truncation or an error. */
int want(Machine *m, Py_ssize_t *pos, Py_ssize_t *safe, unsigned __int128 need) {
    if ((unsigned __int128)*pos + need <= (unsigned __int128)m->end) return 0;
    if (more(m, pos, need) < 0) return -1;
    *safe = m->end - (m->eof ? 1 : m->lookahead);
    if ((unsigned __int128)*pos + need > (unsigned __int128)m->end) {
        truncated(m);
        return -1;
    }
    return 0;
}
