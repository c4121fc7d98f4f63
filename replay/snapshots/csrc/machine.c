/* The restricted pickle machine: the opcode loop of `pickle_machine.py`'s `RestrictedPickle._run`,
   its stack, marks and memo, the snapshot's plain data kept as Python objects and each trace
   entry handed to its sink as it is appended. */
#include "reader.h"

static int push(Machine *m, PyObject *value /* stolen */) {
    if (!value) return -1;
    if (m->depth == m->stack_cap) {
        Py_ssize_t cap = m->stack_cap ? m->stack_cap * 2 : 256;
        PyObject **grown = PyMem_RawRealloc(m->stack, cap * sizeof(PyObject *));
        if (!grown) {
            Py_DECREF(value);
            PyErr_NoMemory();
            return -1;
        }
        m->stack = grown;
        m->stack_cap = cap;
    }
    m->stack[m->depth++] = value;
    return 0;
}

/* Drop stack[first:] (Python's `del stack[first:]`; first may be past the end). */
static void drop_from(Machine *m, Py_ssize_t first) {
    while (m->depth > first) {
        m->depth--;
        Py_DECREF(m->stack[m->depth]);
    }
}

int memo_set(Machine *m, Py_ssize_t index, PyObject *value /* borrowed */) {
    PyObject *old = m->memo[index];
    Py_INCREF(value);
    m->memo[index] = value;
    Py_XDECREF(old);
    return 0;
}

static int memo_grow(Machine *m, Py_ssize_t length) {
    if (length > m->memo_cap) {
        Py_ssize_t cap = m->memo_cap ? m->memo_cap : 64; /* grown by doubling */
        while (cap < length) cap *= 2;
        PyObject **grown = PyMem_RawRealloc(m->memo, cap * sizeof(PyObject *));
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        m->memo = grown;
        m->memo_cap = cap;
    }
    while (m->memo_len < length) {
        Py_INCREF(Py_None);
        m->memo[m->memo_len++] = Py_None;
    }
    return 0;
}

/* A memoized container was read (an entry, or its frames): its slot now holds DROPPED. */
int memo_drop(Machine *m, PyObject *container) {
    int64_t index;
    if (!map_pop(&m->memo_ids, (uint64_t)(uintptr_t)container, &index)) return 0;
    memo_set(m, (Py_ssize_t)index, m->dropped);
    return 1;
}

/* Python's `int.from_bytes(raw, "little", signed=True)` */
static PyObject *int_from_bytes(const unsigned char *raw, Py_ssize_t size) {
    if (size <= 8) {
        uint64_t v = 0;
        for (Py_ssize_t k = 0; k < size; k++) v |= (uint64_t)raw[k] << (8 * k);
        if (size && size < 8 && (raw[size - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * size);
        return PyLong_FromLongLong((long long)v);
    }
    return _PyLong_FromByteArray(raw, (size_t)size, 1, 1);
}

static uint32_t u32(const char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static const char *code_opcode(int op) {
    switch (op) {
    case 0x52: return "REDUCE";
    case 0x62: return "BUILD";
    case 0x69: return "INST";
    case 0x6F: return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x50: return "PERSID";
    case 0x51: return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    default: return NULL;
    }
}

/* How the Python machine names an IndexError: the stream's end, a memo miss or a short
   stack, by where `pos` stood when it was raised. */
static void index_error(Machine *m, int op, Py_ssize_t pos) {
    if (pos >= m->end)
        truncated(m);
    else if (op == 0x68 || op == 0x6A)
        fail(m, m->base + pos - 1, "a memo reference past the memo's end");
    else
        fail(m, m->base + pos - 1, "an opcode with too few values on the stack");
}

#define POP_MARK_OR_FAIL(first)                                                              \
    do {                                                                                     \
        if (!m->n_marks) goto index_error;                                                   \
        first = m->marks[--m->n_marks];                                                      \
    } while (0)

PyObject *run_machine(Machine *m) {
    Py_ssize_t pos = 0, safe = -1;
    int op = 0;
    m->end = 0;
    for (;;) {
        if (pos > safe) {
            if (!m->eof && more(m, &pos, (unsigned __int128)m->lookahead) < 0) return NULL;
            safe = m->end - (m->eof ? 1 : m->lookahead);
            if (pos >= m->end) {
                truncated(m);
                return NULL;
            }
        }
        const char *buf = m->buf;
        op = (unsigned char)buf[pos++];
        if (m->pend_dict && !keeps_pending(op) && pend_fill(m) < 0) return NULL;
        switch (op) {
        case 0x68: /* BINGET */
            if (pos >= m->end) goto index_error;
            if ((unsigned char)buf[pos] >= m->memo_len) goto index_error;
            if (pend_fill_if(m, m->memo[(unsigned char)buf[pos]]) < 0) return NULL;
            Py_INCREF(m->memo[(unsigned char)buf[pos]]);
            if (push(m, m->memo[(unsigned char)buf[pos]]) < 0) return NULL;
            pos += 1;
            break;
        case 0x94: { /* MEMOIZE */
            if (!m->depth) goto index_error;
            PyObject *top = m->stack[m->depth - 1];
            if (PyDict_CheckExact(top) || PyList_CheckExact(top))
                if (map_put(&m->memo_ids, (uint64_t)(uintptr_t)top, m->memo_len) < 0)
                    return NULL;
            if (memo_grow(m, m->memo_len + 1) < 0) return NULL;
            memo_set(m, m->memo_len - 1, top);
            m->cells += 1;
            break;
        }
        case 0x8A: { /* LONG1 */
            if (pos >= m->end) goto index_error;
            Py_ssize_t size = (unsigned char)buf[pos];
            if (want(m, &pos, &safe, 1 + size) < 0) return NULL;
            if (push(m, int_from_bytes((unsigned char *)m->buf + pos + 1, size)) < 0)
                return NULL;
            pos += 1 + size;
            break;
        }
        case 0x6A: { /* LONG_BINGET */
            if (pos + 4 > m->end) {
                truncated(m);
                return NULL;
            }
            uint32_t index = u32(buf + pos);
            if (index >= (uint64_t)m->memo_len) goto index_error;
            if (pend_fill_if(m, m->memo[index]) < 0) return NULL;
            Py_INCREF(m->memo[index]);
            if (push(m, m->memo[index]) < 0) return NULL;
            pos += 4;
            break;
        }
        case 0x28: /* MARK */
            if (m->n_marks >= m->max_marks) {
                PyObject *shown = grouped_ll(m->max_marks);
                if (shown) fail_with(m, m->base + pos - 1,
                                     PyUnicode_FromFormat("more than %U open MARKs", shown));
                Py_XDECREF(shown);
                return NULL;
            }
            if (m->n_marks == m->marks_cap) {
                Py_ssize_t cap = m->marks_cap ? m->marks_cap * 2 : 64;
                Py_ssize_t *grown = PyMem_RawRealloc(m->marks, cap * sizeof(Py_ssize_t));
                if (!grown) return PyErr_NoMemory();
                m->marks = grown;
                m->marks_cap = cap;
            }
            m->marks[m->n_marks++] = m->depth;
            break;
        case 0x4B: /* BININT1 */
            if (pos >= m->end) goto index_error;
            if (push(m, PyLong_FromLong((unsigned char)buf[pos])) < 0) return NULL;
            pos += 1;
            break;
        case 0x8C: case 0x58: case 0x8D: /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
        case 0x43: case 0x42: case 0x8E: { /* SHORT_BINBYTES, BINBYTES, BINBYTES8 */
            int is_str = op == 0x8C || op == 0x58 || op == 0x8D;
            Py_ssize_t head = (op == 0x8C || op == 0x43) ? 1 : (op == 0x58 || op == 0x42) ? 4 : 8;
            if (pos + head > m->end) { /* IndexError (at the end) or struct.error */
                truncated(m);
                return NULL;
            }
            uint64_t size;
            if (head == 1)
                size = (unsigned char)buf[pos];
            else if (head == 4)
                size = u32(buf + pos);
            else
                memcpy(&size, buf + pos, 8);
            if (want(m, &pos, &safe, (unsigned __int128)head + size) < 0) return NULL;
            const char *start = m->buf + pos + head;
            PyObject *value;
            if (is_str && size <= SHORT_STRING_BYTES) {
                value = short_string(m, start, (Py_ssize_t)size);
                if (!value && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    fail(m, m->base + pos, "a string that is not UTF-8");
                    return NULL;
                }
            } else if (is_str) {
                value = PyUnicode_DecodeUTF8(start, (Py_ssize_t)size, "surrogatepass");
                if (!value && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    fail(m, m->base + pos, "a string that is not UTF-8");
                    return NULL;
                }
            } else {
                value = PyBytes_FromStringAndSize(start, (Py_ssize_t)size);
            }
            if (push(m, value) < 0) return NULL;
            pos += head + (Py_ssize_t)size;
            break;
        }
        case 0x7D: { /* EMPTY_DICT */
            /* A dict begins after a trace entry in a list's batch: the batch so far is
               appended now (pickle_machine.py: one entry held at a time, not 1,000). */
            Py_ssize_t first = m->n_marks ? m->marks[m->n_marks - 1] : 0;
            if (first > 0 && first < m->depth && PyList_CheckExact(m->stack[first - 1]) &&
                PyDict_CheckExact(m->stack[m->depth - 1])) {
                int entry = is_entry(m, m->stack[m->depth - 1]);
                if (entry < 0) return NULL;
                if (entry) {
                    int done = put_items(m, m->stack[first - 1], m->stack + first,
                                         m->depth - first, m->base + pos - 1);
                    drop_from(m, first);
                    if (done < 0) return NULL;
                }
            }
            if (push(m, PyDict_New()) < 0) return NULL;
            m->cells += 1;
            break;
        }
        case 0x75: case 0x73: { /* SETITEMS, SETITEM */
            Py_ssize_t first;
            if (op == 0x75) {
                POP_MARK_OR_FAIL(first);
            } else {
                if (m->depth < 3) goto index_error; /* stack[-1] after the pair is gone */
                first = m->depth - 2;
            }
            if (first > m->depth) first = m->depth;
            Py_ssize_t n = m->depth - first;
            if (first == 0) { /* no target below the items */
                drop_from(m, first);
                goto index_error;
            }
            PyObject **items = m->stack + first;
            PyObject *target = m->stack[first - 1];
            int64_t offset = m->base + pos - 1;
            if (!PyDict_CheckExact(target)) {
                fail_excerpt(m, offset, "SETITEMS on %U, not a dict", target);
                return NULL;
            }
            if (n % 2) {
                fail(m, offset, "a key without a value");
                return NULL;
            }
            if (m->pend_dict) { /* the one held back, seen here as other than an entry */
                int seen = target == m->pend_dict;
                for (Py_ssize_t k = 0; k < n; k++) seen |= items[k] == m->pend_dict;
                if (seen && pend_fill(m) < 0) return NULL;
            }
            if (op == 0x75) {
                int held = pend_entry(m, target, items, n);
                if (held < 0) return NULL;
                if (held) { /* the items are the held-back entry's now */
                    m->depth = first;
                    m->cells += n >> 1;
                    break;
                }
            }
            for (Py_ssize_t k = 0; k < n; k += 2) {
                if (PyDict_SetItem(target, items[k], items[k + 1]) < 0) {
                    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
                    PyErr_Clear();
                    PyObject *key = items[0];
                    for (Py_ssize_t j = 0; j < n; j += 2) {
                        PyObject *v = items[j];
                        if (!(is_scalar(m, v) || PyTuple_CheckExact(v) ||
                              PyFrozenSet_CheckExact(v))) {
                            key = v;
                            break;
                        }
                    }
                    PyObject *name = PyType_GetName(Py_TYPE(key));
                    PyObject *shown = name ? excerpt(m, key) : NULL;
                    if (shown)
                        fail_with(m, offset,
                                  PyUnicode_FromFormat(
                                      "a dict key of unhashable type: '%U' (%U)", name, shown));
                    Py_XDECREF(name);
                    Py_XDECREF(shown);
                    return NULL;
                }
            }
            drop_from(m, first);
            m->cells += n >> 1;
            break;
        }
        case 0x4A: { /* BININT */
            if (pos + 4 > m->end) {
                truncated(m);
                return NULL;
            }
            int32_t v;
            memcpy(&v, buf + pos, 4);
            if (push(m, PyLong_FromLong(v)) < 0) return NULL;
            pos += 4;
            break;
        }
        case 0x5D: /* EMPTY_LIST */
            if (push(m, PyList_New(0)) < 0) return NULL;
            m->cells += 1;
            break;
        case 0x65: case 0x61: { /* APPENDS, APPEND */
            Py_ssize_t first;
            if (op == 0x65) {
                POP_MARK_OR_FAIL(first);
                if (first > m->depth) first = m->depth;
            } else {
                if (!m->depth) goto index_error;
                first = m->depth - 1;
            }
            if (first == 0) {
                drop_from(m, first);
                goto index_error;
            }
            PyObject *target = m->stack[first - 1];
            int done = put_items(m, target, m->stack + first, m->depth - first, m->base + pos - 1);
            drop_from(m, first);
            if (done < 0) return NULL;
            break;
        }
        case 0x4D: /* BININT2 */
            if (pos + 2 > m->end) {
                truncated(m);
                return NULL;
            }
            if (push(m, PyLong_FromLong((unsigned char)buf[pos] |
                                        ((long)(unsigned char)buf[pos + 1] << 8))) < 0)
                return NULL;
            pos += 2;
            break;
        case 0x88: /* NEWTRUE */
            Py_INCREF(Py_True);
            if (push(m, Py_True) < 0) return NULL;
            break;
        case 0x89: /* NEWFALSE */
            Py_INCREF(Py_False);
            if (push(m, Py_False) < 0) return NULL;
            break;
        case 0x4E: /* NONE */
            Py_INCREF(Py_None);
            if (push(m, Py_None) < 0) return NULL;
            break;
        case 0x47: { /* BINFLOAT */
            if (pos + 8 > m->end) {
                truncated(m);
                return NULL;
            }
            double v = PyFloat_Unpack8(buf + pos, 0);
            if (v == -1.0 && PyErr_Occurred()) return NULL;
            if (push(m, PyFloat_FromDouble(v)) < 0) return NULL;
            pos += 8;
            break;
        }
        case 0x85: case 0x86: case 0x87: case 0x74: case 0x29: { /* TUPLE1,2,3, TUPLE, () */
            Py_ssize_t first;
            if (op == 0x74) {
                POP_MARK_OR_FAIL(first);
                if (first > m->depth) first = m->depth;
            } else {
                first = m->depth - (op == 0x85 ? 1 : op == 0x86 ? 2 : op == 0x87 ? 3 : 0);
                if (first < 0) goto index_error;
            }
            Py_ssize_t n = m->depth - first;
            for (Py_ssize_t k = 0; k < n; k++) {
                if (!is_scalar(m, m->stack[first + k])) {
                    fail_excerpt(m, m->base + pos - 1, "a tuple holding %U", m->stack[first + k]);
                    return NULL;
                }
            }
            PyObject *tuple = PyTuple_New(n);
            if (!tuple) return NULL;
            for (Py_ssize_t k = 0; k < n; k++) {
                PyTuple_SET_ITEM(tuple, k, m->stack[first + k]); /* the stack's reference */
            }
            m->depth = first;
            if (push(m, tuple) < 0) return NULL;
            m->cells += n + 1;
            break;
        }
        case 0x71: case 0x72: { /* BINPUT, LONG_BINPUT */
            uint64_t index;
            if (op == 0x71) {
                if (pos >= m->end) goto index_error;
                index = (unsigned char)buf[pos];
                pos += 1;
            } else {
                if (pos + 4 > m->end) {
                    truncated(m);
                    return NULL;
                }
                index = u32(buf + pos);
                pos += 4;
            }
            if (!m->depth) goto index_error;
            PyObject *top = m->stack[m->depth - 1];
            if (index >= (uint64_t)m->memo_len) {
                if (index > (uint64_t)(m->memo_len + m->memo_gap)) {
                    PyObject *shown = grouped_ll((long long)index);
                    if (shown) fail_with(m, m->base + pos - 1,
                                         PyUnicode_FromFormat("a memo index %U far past its end",
                                                              shown));
                    Py_XDECREF(shown);
                    return NULL;
                }
                m->cells += (int64_t)index - m->memo_len; /* the empty slots skipped */
                if (memo_grow(m, (Py_ssize_t)index + 1) < 0) return NULL;
            }
            /* The slot's former container no longer sits there: forget where it was. */
            PyObject *old = m->memo[index];
            Py_ssize_t at = map_find(&m->memo_ids, (uint64_t)(uintptr_t)old);
            if (at >= 0 && m->memo_ids.values[at] == (int64_t)index)
                map_pop(&m->memo_ids, (uint64_t)(uintptr_t)old, NULL);
            memo_set(m, (Py_ssize_t)index, top);
            if (PyDict_CheckExact(top) || PyList_CheckExact(top))
                if (map_put(&m->memo_ids, (uint64_t)(uintptr_t)top, (int64_t)index) < 0)
                    return NULL;
            m->cells += 1;
            break;
        }
        case 0x8B: { /* LONG4 */
            if (pos + 4 > m->end) {
                truncated(m);
                return NULL;
            }
            int32_t size;
            memcpy(&size, buf + pos, 4);
            if (size < 0) {
                fail(m, m->base + pos - 1, "a negative LONG4 length");
                return NULL;
            }
            if (want(m, &pos, &safe, 4 + (unsigned __int128)size) < 0) return NULL;
            PyObject *value;
            if (size > m->long_decoded)
                value = PyObject_CallFunction(m->bigint_type, "i", size);
            else
                value = int_from_bytes((unsigned char *)m->buf + pos + 4, size);
            if (push(m, value) < 0) return NULL;
            pos += 4 + size;
            break;
        }
        case 0x8F: /* EMPTY_SET */
            if (push(m, PySet_New(NULL)) < 0) return NULL;
            m->cells += 1;
            break;
        case 0x90: case 0x91: { /* ADDITEMS, FROZENSET */
            Py_ssize_t first;
            POP_MARK_OR_FAIL(first);
            if (first > m->depth) first = m->depth;
            Py_ssize_t n = m->depth - first;
            for (Py_ssize_t k = 0; k < n; k++) {
                if (!is_scalar(m, m->stack[first + k])) {
                    fail_excerpt(m, m->base + pos - 1, "a set holding %U", m->stack[first + k]);
                    return NULL;
                }
            }
            PyObject *set;
            if (op == 0x91) {
                set = PyFrozenSet_New(NULL);
            } else {
                if (first == 0) {
                    drop_from(m, first);
                    goto index_error;
                }
                set = m->stack[first - 1];
                if (!PySet_CheckExact(set)) {
                    fail_excerpt(m, m->base + pos - 1, "ADDITEMS to %U", set);
                    return NULL;
                }
                Py_INCREF(set);
            }
            if (!set) return NULL;
            for (Py_ssize_t k = 0; k < n; k++) {
                if (PySet_Add(set, m->stack[first + k]) < 0) {
                    Py_DECREF(set);
                    return NULL;
                }
            }
            drop_from(m, first);
            if (op == 0x91) {
                if (push(m, set) < 0) return NULL;
            } else {
                Py_DECREF(set);
            }
            m->cells += n;
            break;
        }
        case 0x95: /* FRAME: a hint of the next frame's size, nothing to do */
            pos += 8;
            break;
        case 0x80: /* PROTO */
            if (pos >= m->end) goto index_error;
            if ((unsigned char)buf[pos] < 2) {
                fail_with(m, m->base + pos - 1,
                          PyUnicode_FromFormat("pickle protocol %d", (unsigned char)buf[pos]));
                return NULL;
            }
            pos += 1;
            break;
        case 0x30: /* POP */
            if (m->n_marks && m->marks[m->n_marks - 1] == m->depth) {
                m->n_marks--;
            } else {
                if (!m->depth) goto index_error;
                drop_from(m, m->depth - 1);
            }
            break;
        case 0x31: { /* POP_MARK */
            Py_ssize_t first;
            POP_MARK_OR_FAIL(first);
            drop_from(m, first);
            break;
        }
        case 0x2E: /* STOP */
            if (!m->depth) goto index_error;
            return m->stack[--m->depth];
        case 0x63: { /* GLOBAL: module and name on two lines */
            Py_ssize_t limit = pos + 512 < m->end ? pos + 512 : m->end;
            const char *line_end = pos < limit ? memchr(buf + pos, '\n', limit - pos) : NULL;
            const char *second = NULL;
            if (line_end) {
                Py_ssize_t from = line_end - buf + 1;
                Py_ssize_t to = from + 512 < m->end ? from + 512 : m->end;
                second = from < to ? memchr(buf + from, '\n', to - from) : NULL;
            }
            if (!second) {
                refuse(m, m->base + pos - 1, "a global", NULL);
                return NULL;
            }
            PyObject *module = PyUnicode_DecodeUTF8(buf + pos, line_end - (buf + pos), "replace");
            PyObject *name = module ? PyUnicode_DecodeUTF8(line_end + 1, second - line_end - 1,
                                                           "replace")
                                    : NULL;
            PyObject *both = name ? PyUnicode_FromFormat("%U.%U", module, name) : NULL;
            if (both) refuse(m, m->base + pos - 1, "the global", both);
            Py_XDECREF(module);
            Py_XDECREF(name);
            Py_XDECREF(both);
            return NULL;
        }
        case 0x93: { /* STACK_GLOBAL */
            if (m->depth < 2) {
                if (m->depth) drop_from(m, m->depth - 1);
                goto index_error;
            }
            PyObject *name = m->stack[m->depth - 1], *module = m->stack[m->depth - 2];
            if (PyUnicode_CheckExact(module) && PyUnicode_CheckExact(name)) {
                PyObject *both = PyUnicode_FromFormat("%U.%U", module, name);
                if (both) refuse(m, m->base + pos - 1, "the global", both);
                Py_XDECREF(both);
            } else {
                refuse(m, m->base + pos - 1, "a global", NULL);
            }
            return NULL;
        }
        default: {
            const char *code = code_opcode(op);
            if (code) {
                PyObject *what = PyUnicode_FromFormat("the opcode %s", code);
                if (what) refuse(m, m->base + pos - 1, PyUnicode_AsUTF8(what), NULL);
                Py_XDECREF(what);
                return NULL;
            }
            char byte = (char)op;
            PyObject *raw = PyBytes_FromStringAndSize(&byte, 1);
            PyObject *shown = raw ? PyObject_Repr(raw) : NULL;
            Py_XDECREF(raw);
            if (shown)
                fail_with(m, m->base + pos - 1,
                          PyUnicode_FromFormat("the opcode %U, which pickle does not write for "
                                               "the plain data of a snapshot",
                                               shown));
            Py_XDECREF(shown);
            return NULL;
        }
        }
        if (m->cells + m->depth > m->max_cells) { /* what the stack holds is held too */
            raise_made(PyObject_CallMethod(m->machine, "_cells_error", "L",
                                           (long long)(m->base + pos)));
            return NULL;
        }
        continue;
    index_error:
        index_error(m, op, pos);
        return NULL;
    }
}

void machine_free(Machine *m) {
    pend_release(m);
    for (int k = 0; k < STRING_SLOTS; k++) Py_XDECREF(m->strings[k]);
    drop_from(m, 0);
    PyMem_RawFree(m->stack);
    for (Py_ssize_t i = 0; i < m->memo_len; i++) Py_DECREF(m->memo[i]);
    PyMem_RawFree(m->memo);
    PyMem_RawFree(m->marks);
    PyMem_RawFree(m->buf);
    map_free(&m->memo_ids);
    map_free(&m->sink_of);
    sinks_free(m);
    Py_XDECREF(m->shared);
    Py_XDECREF(m->want_lines);
    Py_XDECREF(m->zero);
}
