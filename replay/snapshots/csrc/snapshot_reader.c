/* The restricted snapshot pickle machine and its trace sink, in C.
 *
 * A port, opcode for opcode, of `replay/snapshots/pickle_machine.py` (`RestrictedPickle._run`)
 * and of the trace sink of `replay/snapshots/reader.py` (`_TraceList.entry` / `other`, and the
 * columns of `_TraceList.made_from_rows`): the Python machine is the reference, and
 * tests/replay/snapshots/test_snapshot_native.py checks that both give the same columns,
 * skipped entries and errors, byte for byte. Why C: the Python machine runs ~4x the time of
 * `pickle.load` (C) on large snapshots; the issue asks for at most that time.
 *
 * What is kept as Python objects is what the Python machine keeps (the snapshot's dicts,
 * lists and scalars, so the code reading segments and settings is shared); a trace entry
 * becomes column values in C buffers (bytearrays handed to the sink at the end, no copy) the
 * moment it is appended to its list, and is dropped. The bounds are the Python machine's:
 * bytes (the caller's cap, checked before any length is read), objects held at once
 * (`max_cells`), open MARKs, nothing recursive. Messages are made by the Python machine's
 * own methods (`_error`, `_refused`, `_cap_error`, `_cells_error`) and `excerpt`, so both
 * say the same words. Memory it allocates is Python's (PyMem_Raw*, bytearrays), so
 * tracemalloc counts it (benchmarks/bench_snapshot_read.py).
 *
 * A plain CPython extension (`hipmem.replay.snapshots._snapshot_reader`), built when hipmem is
 * installed (setup.py) and imported by `replay/snapshots/native.py` with its package.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *ACTION; /* "action", interned at module init: the key that makes an entry */
/* The keys of segments and blocks that device_segments reads, and the prefix of a block
   state that is active; interned at module init. */
enum { K_DEVICE, K_BLOCKS, K_TOTAL_SIZE, K_STREAM, K_STATE, K_ADDRESS, K_REQUESTED_SIZE,
       K_ACTIVE, N_KEYS };
static const char *KEY_NAMES[N_KEYS] = {"device", "blocks", "total_size", "stream", "state",
                                        "address", "requested_size", "active"};
static PyObject *KEYS[N_KEYS];

/* ---------- an open-addressing map, uint64 -> int64 (pointers or addresses) ---------- */

typedef struct {
    uint64_t *keys;
    int64_t *values;
    uint8_t *state; /* 0 empty, 1 full, 2 deleted */
    size_t cap, used, filled;
} Map;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void map_free(Map *m) {
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->values);
    PyMem_RawFree(m->state);
    memset(m, 0, sizeof *m);
}

static int map_resize(Map *m, size_t cap) {
    Map fresh = {0};
    fresh.keys = PyMem_RawMalloc(cap * sizeof(uint64_t));
    fresh.values = PyMem_RawMalloc(cap * sizeof(int64_t));
    fresh.state = PyMem_RawCalloc(cap, 1);
    if (!fresh.keys || !fresh.values || !fresh.state) {
        map_free(&fresh);
        PyErr_NoMemory();
        return -1;
    }
    fresh.cap = cap;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->state[i] != 1) continue;
        size_t j = mix64(m->keys[i]) & (cap - 1);
        while (fresh.state[j]) j = (j + 1) & (cap - 1);
        fresh.state[j] = 1;
        fresh.keys[j] = m->keys[i];
        fresh.values[j] = m->values[i];
        fresh.used++;
    }
    fresh.filled = fresh.used;
    map_free(m);
    *m = fresh;
    return 0;
}

/* The slot of `key`, or -1. */
static Py_ssize_t map_find(const Map *m, uint64_t key) {
    if (!m->cap) return -1;
    size_t j = mix64(key) & (m->cap - 1);
    while (m->state[j]) {
        if (m->state[j] == 1 && m->keys[j] == key) return (Py_ssize_t)j;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

static int map_put(Map *m, uint64_t key, int64_t value) {
    Py_ssize_t at = map_find(m, key);
    if (at >= 0) {
        m->values[at] = value;
        return 0;
    }
    if ((m->filled + 1) * 4 >= m->cap * 3) {
        size_t cap = m->cap ? m->cap : 64;
        while ((m->used + 1) * 2 >= cap) cap *= 2;
        if (map_resize(m, cap) < 0) return -1;
    }
    size_t j = mix64(key) & (m->cap - 1);
    while (m->state[j] == 1) j = (j + 1) & (m->cap - 1);
    if (m->state[j] == 0) m->filled++;
    m->state[j] = 1;
    m->keys[j] = key;
    m->values[j] = value;
    m->used++;
    return 0;
}

/* 1 and the value when `key` was there (and is removed), else 0. */
static int map_pop(Map *m, uint64_t key, int64_t *value) {
    Py_ssize_t at = map_find(m, key);
    if (at < 0) return 0;
    if (value) *value = m->values[at];
    m->state[at] = 2;
    m->used--;
    return 1;
}

/* ---------- a column buffer: a bytearray grown in place, handed over whole ---------- */

typedef struct {
    PyObject *bytes; /* bytearray */
    Py_ssize_t used, cap; /* in values */
} Column;

/* Room for `n` more values of `item` bytes each. */
static int column_room(Column *c, Py_ssize_t n, Py_ssize_t item) {
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
static PyObject *column_take(Column *c, Py_ssize_t item) {
    if (!c->bytes) return PyByteArray_FromStringAndSize(NULL, 0);
    if (PyByteArray_Resize(c->bytes, c->used * item) < 0) return NULL;
    PyObject *out = c->bytes;
    c->bytes = NULL;
    c->used = c->cap = 0;
    return out;
}

/* The event columns of reader.py's DeviceTrace, in its order, and what PyTorch reserved. */
enum { COL_LINE, COL_TIME_NS, COL_ACTION, COL_POINTER, COL_SIZE, COL_STREAM, N_ROW_COLUMNS };
enum { RES_TIME_NS, RES_LEVEL, N_RES_COLUMNS };
/* after the columns: grown, net, peak_at, peak level, peak time (ns) */
enum { N_MADE_COUNTS = 5 };

/* ---------- the trace sink (reader.py's _TraceList, for one list) ---------- */

typedef struct {
    PyObject *py; /* the _TraceList made by new_sink (it keeps the list alive) */
    PyObject *pre, *ooms, *skipped; /* its own lists, appended to here */
    Column rows[N_ROW_COLUMNS]; /* int64 each, but the action's int8 */
    Column reserved[N_RES_COLUMNS];
    /* The reserved level's changes summed as they come (wrapping in uint64, exact whenever
       reader.py's 2**62 check passes), its first maximum, and exact sums for that check. */
    uint64_t level;
    int64_t peak_level, peak_time_ns;
    Py_ssize_t peak_at;
    __int128 grown, net;
    Map live;
    int64_t count, skipped_count;
} Sink;

enum { KIND_ALLOC, KIND_FREE, KIND_OOM, KIND_SEGMENT_ALLOC, KIND_SEGMENT_FREE };

enum { PEND_PAIRS = 16, STRING_SLOTS = 64, SHORT_STRING_BYTES = 16 };

typedef struct {
    /* what the caller passed */
    PyObject *machine, *read, *new_sink, *sinks_dict;
    PyObject *dropped, *bigint_type, *excerpt, *truncated, *snapshot_error;
    int64_t action_codes[3];
    Py_ssize_t kept_skips;
    long long max_time_us, day_us;
    Py_ssize_t chunk, max_chunk, lookahead, max_marks, memo_gap, long_decoded;
    int64_t max_bytes, max_cells, cells;
    int keep_frames;
    /* the stream */
    char *buf;
    Py_ssize_t end, buf_cap;
    int64_t base;
    int eof;
    /* the machine */
    PyObject **stack;
    Py_ssize_t depth, stack_cap;
    Py_ssize_t *marks;
    Py_ssize_t n_marks, marks_cap;
    PyObject **memo;
    Py_ssize_t memo_len, memo_cap;
    Map memo_ids; /* container -> its memo index */
    /* the sinks and what they share */
    Sink *sinks;
    Py_ssize_t n_sinks, sinks_cap;
    Map sink_of; /* list -> index in sinks */
    PyObject *shared, *want_lines;
    int64_t max_entries;
    int have_first;
    int64_t first_us, day_start_us;
    /* keys and names */
    PyObject *k_action; /* "action", interned once (module init) */
    PyObject *zero;
    /* The trace entry last built, held back as its keys and values (see `pend_entry`) */
    PyObject *pend_dict;
    PyObject *pend_items[2 * PEND_PAIRS];
    Py_ssize_t pend_n;
    /* Short strings made lately, by their bytes (see `short_string`) */
    PyObject *strings[STRING_SLOTS];
} Machine;

/* The `{:,}` of an integer, as a new str. */
static PyObject *grouped_ll(long long value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (!number) return NULL;
    PyObject *spec = PyUnicode_FromString(",");
    PyObject *out = spec ? PyObject_Format(number, spec) : NULL;
    Py_XDECREF(spec);
    Py_DECREF(number);
    return out;
}

/* Raise what the exception object `made` (a new reference, or NULL with an error set) is. */
static void raise_made(PyObject *made) {
    if (!made) return;
    PyErr_SetObject((PyObject *)Py_TYPE(made), made);
    Py_DECREF(made);
}

/* machine._error(offset, what), `what` a new reference (stolen). */
static void fail_with(Machine *m, int64_t offset, PyObject *what) {
    if (!what) return;
    raise_made(PyObject_CallMethod(m->machine, "_error", "LO", (long long)offset, what));
    Py_DECREF(what);
}

static void fail(Machine *m, int64_t offset, const char *what) {
    fail_with(m, offset, PyUnicode_FromString(what));
}

static PyObject *excerpt(Machine *m, PyObject *value) {
    return PyObject_CallOneArg(m->excerpt, value);
}

/* what % excerpt(value): `format` holds one %U. */
static void fail_excerpt(Machine *m, int64_t offset, const char *format, PyObject *value) {
    PyObject *shown = excerpt(m, value);
    if (!shown) return;
    PyObject *what = PyUnicode_FromFormat(format, shown);
    Py_DECREF(shown);
    fail_with(m, offset, what);
}

static void refuse(Machine *m, int64_t offset, const char *what, PyObject *name) {
    PyObject *empty = NULL;
    if (!name) name = empty = PyUnicode_FromString("");
    if (!name) return;
    raise_made(PyObject_CallMethod(m->machine, "_refused", "LsO", (long long)offset, what, name));
    Py_XDECREF(empty);
}

static void truncated(Machine *m) { PyErr_SetNone(m->truncated); }

/* `type(value) is int` and 0 <= value < 2**63: 1 with the value, else 0. */
static int count_of(PyObject *value, int64_t *out) {
    if (!value || !PyLong_CheckExact(value)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || v < 0) return 0;
    *out = v;
    return 1;
}

static int is_scalar(Machine *m, PyObject *v) {
    return PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
           PyBool_Check(v) || v == Py_None || PyBytes_CheckExact(v) ||
           Py_TYPE(v) == (PyTypeObject *)m->bigint_type;
}

/* ---------- the sink ---------- */

static int sink_skip(Machine *m, Sink *s, int64_t line, PyObject *reason /* stolen; may be
                                                                           NULL: not kept */) {
    s->skipped_count++;
    if (!reason) return 0;
    PyObject *row = Py_BuildValue("(LN)", (long long)line, reason);
    if (!row) return -1;
    int done = PyList_Append(s->skipped, row);
    Py_DECREF(row);
    return done;
}

/* Whether a skip's reason is kept (else it is counted only, and never made). */
static int keeps(Machine *m, Sink *s) { return PyList_GET_SIZE(s->skipped) < m->kept_skips; }

static int next_line(Machine *m, Sink *s, int64_t *line) {
    *line = ++s->count;
    if (*line > m->max_entries) {
        PyObject *shown = grouped_ll(m->max_entries);
        if (shown) {
            PyErr_Format(m->snapshot_error, "a device has more than %U trace entries", shown);
            Py_DECREF(shown);
        }
        return -1;
    }
    return 0;
}

/* reader.py's _not_an_entry */
static PyObject *not_an_entry(Machine *m, PyObject *item) {
    int shared = item == m->dropped;
    if (!shared && PyDict_CheckExact(item)) {
        shared = PyDict_Contains(item, m->dropped);
        if (shared < 0) return NULL;
    }
    if (shared)
        return PyUnicode_FromString(
            "entry is the same object as an earlier entry (a snapshot never shares one)");
    if (PyDict_CheckExact(item)) return PyUnicode_FromString("entry has no action");
    PyObject *name = PyType_GetName(Py_TYPE(item));
    if (!name) return NULL;
    PyObject *out = PyUnicode_FromFormat("entry is a %U, not a dict", name);
    Py_DECREF(name);
    return out;
}

static int sink_other(Machine *m, Sink *s, PyObject *item) {
    int64_t line;
    if (next_line(m, s, &line) < 0) return -1;
    PyObject *reason = NULL;
    if (keeps(m, s) && !(reason = not_an_entry(m, item))) return -1;
    return sink_skip(m, s, line, reason);
}

static const char *FIELD_NAMES[4] = {"addr", "size", "stream", "time_us"};

/* _TraceList._skip_field: the first field that is not a count names the skip. */
static int skip_field(Machine *m, Sink *s, int64_t line, PyObject *action, PyObject **values) {
    for (int k = 0; k < 4; k++) {
        int64_t v;
        if (count_of(values[k], &v)) continue;
        if (!keeps(m, s)) return sink_skip(m, s, line, NULL);
        PyObject *value = values[k] ? values[k] : Py_None;
        int big = Py_TYPE(value) == (PyTypeObject *)m->bigint_type;
        if (PyLong_CheckExact(value)) big = _PyLong_Sign(value) > 0;
        PyObject *shown = excerpt(m, value);
        if (!shown) return -1;
        PyObject *reason = PyUnicode_FromFormat(
            "%U entry: %s %U %s", action, FIELD_NAMES[k], shown,
            big ? "is past 2**63 - 1" : "is not a non-negative integer");
        Py_DECREF(shown);
        if (!reason) return -1;
        return sink_skip(m, s, line, reason);
    }
    return 0;
}

/* An entry's fields, found in one pass over the dict (borrowed; NULL: missing). */
typedef struct {
    PyObject *action, *time_us, *addr, *size, *stream, *frames, *device_free;
} Fields;

/* Which of the seven names `key` is (0..6), or -1: by length and bytes, no hashing (the keys
   of an entry are one memoized string each, compared here once per entry). */
static int field_index(PyObject *key) {
    if (!PyUnicode_CheckExact(key) || PyUnicode_KIND(key) != PyUnicode_1BYTE_KIND) return -1;
    const char *text = (const char *)PyUnicode_1BYTE_DATA(key);
    switch (PyUnicode_GET_LENGTH(key)) {
    case 4:
        return !memcmp(text, "addr", 4) ? 2 : !memcmp(text, "size", 4) ? 3 : -1;
    case 6:
        return !memcmp(text, "action", 6)   ? 0
               : !memcmp(text, "stream", 6) ? 4
               : !memcmp(text, "frames", 6) ? 5
                                            : -1;
    case 7:
        return !memcmp(text, "time_us", 7) ? 1 : -1;
    case 11:
        return !memcmp(text, "device_free", 11) ? 6 : -1;
    default:
        return -1;
    }
}

static void field_put(Fields *f, PyObject *key, PyObject *value) {
    PyObject **slots[7] = {&f->action, &f->time_us, &f->addr, &f->size,
                           &f->stream, &f->frames, &f->device_free};
    int k = field_index(key);
    if (k >= 0) *slots[k] = value;
}

/* One pass over the dict: cheaper than seven lookups, and the same answer (a dict holds at
   most one key equal to each name). */
static void scan_fields(Machine *m, PyObject *item, Fields *f) {
    memset(f, 0, sizeof *f);
    Py_ssize_t at = 0;
    PyObject *key, *value;
    while (PyDict_Next(item, &at, &key, &value)) field_put(f, key, value);
}

/* reader.py's _TRACKED: the kind of an action (an exact str), or -1 when it is not one the
   columns follow. By length and bytes, as field_index: no hashing per entry. */
static int tracked_kind(PyObject *action) {
    if (PyUnicode_KIND(action) != PyUnicode_1BYTE_KIND) return -1;
    const char *text = (const char *)PyUnicode_1BYTE_DATA(action);
    switch (PyUnicode_GET_LENGTH(action)) {
    case 3: return !memcmp(text, "oom", 3) ? KIND_OOM : -1;
    case 5: return !memcmp(text, "alloc", 5) ? KIND_ALLOC : -1;
    case 11: return !memcmp(text, "segment_map", 11) ? KIND_SEGMENT_ALLOC : -1;
    case 12: return !memcmp(text, "segment_free", 12) ? KIND_SEGMENT_FREE : -1;
    case 13:
        return !memcmp(text, "segment_alloc", 13)   ? KIND_SEGMENT_ALLOC
               : !memcmp(text, "segment_unmap", 13) ? KIND_SEGMENT_FREE
                                                    : -1;
    case 14: return !memcmp(text, "free_completed", 14) ? KIND_FREE : -1;
    default: return -1;
    }
}

static int sink_entry(Machine *m, Sink *s, PyObject *item, const Fields *f) {
    int64_t line;
    if (next_line(m, s, &line) < 0) return -1;
    if (m->want_lines) {
        PyObject *number = PyLong_FromLongLong(line);
        if (!number) return -1;
        int wanted = PySet_Contains(m->want_lines, number);
        Py_DECREF(number);
        if (wanted < 0) return -1;
        if (wanted) {
            PyObject *done = PyObject_CallMethod(s->py, "keep_frames", "LO", (long long)line,
                                                 f->frames ? f->frames : Py_None);
            if (!done) return -1;
            Py_DECREF(done);
        }
    }
    PyObject *action = f->action;
    if (!action) return 0;
    if (!PyUnicode_CheckExact(action)) {
        return sink_skip(m, s, line,
                         keeps(m, s) ? PyUnicode_FromString("entry has no action") : NULL);
    }
    PyObject *values[4];
    values[3] = f->time_us;
    int64_t time_us = 0;
    int time_ok = count_of(values[3], &time_us);
    if (!m->have_first && time_ok && time_us <= m->max_time_us) {
        m->have_first = 1;
        m->first_us = time_us;
        m->day_start_us = time_us - time_us % m->day_us;
    }
    int kind = tracked_kind(action);
    if (kind < 0) return 0;
    values[0] = f->addr ? f->addr : m->zero; /* item.get("addr", 0) */
    values[1] = f->size;
    values[2] = f->stream;
    int64_t address, size, stream;
    if (!(count_of(values[0], &address) && count_of(values[1], &size) &&
          count_of(values[2], &stream) && time_ok))
        return skip_field(m, s, line, action, values);
    if (time_us > m->max_time_us) {
        PyObject *reason = NULL;
        if (keeps(m, s)) {
            reason = PyUnicode_FromFormat(
                "%U entry: time_us %lld is past year 2262 (int64 nanoseconds)", action,
                (long long)time_us);
            if (!reason) return -1;
        }
        return sink_skip(m, s, line, reason);
    }
    int64_t span_us = time_us - m->day_start_us;
    if (kind == KIND_ALLOC) {
        if (map_put(&s->live, (uint64_t)address, size) < 0) return -1;
    } else if (kind == KIND_FREE) {
        if (!map_pop(&s->live, (uint64_t)address, NULL)) {
            PyObject *row = Py_BuildValue("(LLL)", (long long)address, (long long)size,
                                          (long long)stream);
            if (!row) return -1;
            int done = PyList_Append(s->pre, row);
            Py_DECREF(row);
            if (done < 0) return -1;
        }
    } else if (kind == KIND_OOM) {
        address = 0;
        PyObject *free_obj = f->device_free;
        int64_t free_bytes;
        PyObject *row;
        if (count_of(free_obj, &free_bytes))
            row = Py_BuildValue("(LLL)", (long long)line, (long long)size, (long long)free_bytes);
        else
            row = Py_BuildValue("(LLO)", (long long)line, (long long)size, Py_None);
        if (!row) return -1;
        int done = PyList_Append(s->ooms, row);
        Py_DECREF(row);
        if (done < 0) return -1;
    } else {
        /* |span_us| <= MAX_TIME_US, so the nanoseconds fit int64 */
        int64_t delta = kind == KIND_SEGMENT_ALLOC ? size : -size;
        Column *r = s->reserved;
        if (column_room(&r[RES_TIME_NS], 1, 8) < 0 || column_room(&r[RES_LEVEL], 1, 8) < 0)
            return -1;
        s->level += (uint64_t)delta;
        if (s->peak_at < 0 || (int64_t)s->level > s->peak_level) {
            s->peak_at = r[RES_LEVEL].used;
            s->peak_level = (int64_t)s->level;
            s->peak_time_ns = span_us * 1000;
        }
        if (delta > 0) s->grown += delta;
        s->net += delta;
        column_put64(&r[RES_TIME_NS], span_us * 1000);
        column_put64(&r[RES_LEVEL], (int64_t)s->level);
        return 0;
    }
    Column *c = s->rows;
    for (int k = 0; k < N_ROW_COLUMNS; k++)
        if (column_room(&c[k], 1, k == COL_ACTION ? 1 : 8) < 0) return -1;
    column_put64(&c[COL_LINE], line);
    column_put64(&c[COL_TIME_NS], span_us * 1000);
    PyByteArray_AS_STRING(c[COL_ACTION].bytes)[c[COL_ACTION].used++] =
        (char)m->action_codes[kind];
    column_put64(&c[COL_POINTER], address);
    column_put64(&c[COL_SIZE], size);
    column_put64(&c[COL_STREAM], stream);
    return 0;
}

/* The sink of `target` (a list), made with new_sink on its first entry. */
static Sink *sink_for(Machine *m, PyObject *target, int make) {
    Py_ssize_t at = map_find(&m->sink_of, (uint64_t)(uintptr_t)target);
    if (at >= 0) return &m->sinks[m->sink_of.values[at]];
    if (!make) return NULL;
    if (m->n_sinks == m->sinks_cap) {
        Py_ssize_t cap = m->sinks_cap ? m->sinks_cap * 2 : 8;
        Sink *grown = PyMem_RawRealloc(m->sinks, cap * sizeof(Sink));
        if (!grown) return (Sink *)PyErr_NoMemory();
        m->sinks = grown;
        m->sinks_cap = cap;
    }
    Sink *s = &m->sinks[m->n_sinks];
    memset(s, 0, sizeof *s);
    s->peak_at = -1;
    s->py = PyObject_CallOneArg(m->new_sink, target);
    if (!s->py) return NULL;
    m->n_sinks++; /* from here on, freed with the machine */
    PyObject *count = PyObject_GetAttrString(s->py, "count");
    if (!count) return NULL;
    s->count = PyLong_AsLongLong(count);
    Py_DECREF(count);
    if (s->count == -1 && PyErr_Occurred()) return NULL;
    if (!(s->pre = PyObject_GetAttrString(s->py, "pre"))) return NULL;
    if (!(s->ooms = PyObject_GetAttrString(s->py, "ooms"))) return NULL;
    if (!(s->skipped = PyObject_GetAttrString(s->py, "skipped"))) return NULL;
    if (!PyList_CheckExact(s->pre) || !PyList_CheckExact(s->ooms) ||
        !PyList_CheckExact(s->skipped)) {
        PyErr_SetString(PyExc_TypeError, "the trace sink's pre, ooms and skipped are lists");
        return NULL;
    }
    if (!m->shared) {
        if (!(m->shared = PyObject_GetAttrString(s->py, "shared"))) return NULL;
        PyObject *max = PyObject_GetAttrString(m->shared, "max_entries");
        if (!max) return NULL;
        m->max_entries = PyLong_AsLongLong(max);
        Py_DECREF(max);
        if (m->max_entries == -1 && PyErr_Occurred()) return NULL;
        /* The sink's other limits (reader.py's MAX_KEPT_SKIPS, MAX_TIME_US, DAY_US) */
        PyObject *limits = PyObject_GetAttrString(m->shared, "sink_limits");
        if (!limits) return NULL;
        long long kept;
        int parsed = PyArg_ParseTuple(limits, "LLL", &kept, &m->max_time_us, &m->day_us);
        Py_DECREF(limits);
        if (!parsed) return NULL;
        m->kept_skips = (Py_ssize_t)kept;
        PyObject *want = PyObject_GetAttrString(m->shared, "want_lines");
        if (!want) return NULL;
        if (PySet_Size(want) > 0)
            m->want_lines = want;
        else
            Py_DECREF(want);
        if (PyErr_Occurred()) return NULL;
    }
    PyObject *id = PyLong_FromVoidPtr(target);
    if (!id || PyDict_SetItem(m->sinks_dict, id, s->py) < 0) {
        Py_XDECREF(id);
        return NULL;
    }
    Py_DECREF(id);
    if (map_put(&m->sink_of, (uint64_t)(uintptr_t)target, m->n_sinks - 1) < 0) return NULL;
    return s;
}

static PyObject *int128_to_long(__int128 value) {
    unsigned char raw[16];
    for (int k = 0; k < 16; k++) raw[k] = (unsigned char)((unsigned __int128)value >> (8 * k));
    return _PyLong_FromByteArray(raw, 16, 1, 1);
}

/* Hand each sink's columns and counts to its _TraceList (`made`, as its `made_from_rows`
   makes them in Python), and the day to their shared state. */
static int sinks_finish(Machine *m) {
    for (Py_ssize_t i = 0; i < m->n_sinks; i++) {
        Sink *s = &m->sinks[i];
        PyObject *made = PyTuple_New(N_ROW_COLUMNS + N_RES_COLUMNS + N_MADE_COUNTS);
        PyObject *live = PyDict_New();
        int bad = !made || !live;
        for (int k = 0; !bad && k < N_ROW_COLUMNS; k++) {
            PyObject *column = column_take(&s->rows[k], k == COL_ACTION ? 1 : 8);
            bad = !column;
            if (column) PyTuple_SET_ITEM(made, k, column);
        }
        for (int k = 0; !bad && k < N_RES_COLUMNS; k++) {
            PyObject *column = column_take(&s->reserved[k], 8);
            bad = !column;
            if (column) PyTuple_SET_ITEM(made, N_ROW_COLUMNS + k, column);
        }
        PyObject *tail[N_MADE_COUNTS] = {NULL};
        if (!bad) {
            tail[0] = int128_to_long(s->grown);
            tail[1] = int128_to_long(s->net);
            tail[2] = PyLong_FromSsize_t(s->peak_at);
            tail[3] = PyLong_FromLongLong(s->peak_at >= 0 ? s->peak_level : 0);
            tail[4] = PyLong_FromLongLong(s->peak_at >= 0 ? s->peak_time_ns : 0);
            for (int k = 0; k < N_MADE_COUNTS; k++) {
                bad |= !tail[k];
                if (tail[k]) PyTuple_SET_ITEM(made, N_ROW_COLUMNS + N_RES_COLUMNS + k, tail[k]);
            }
        }
        for (size_t j = 0; !bad && j < s->live.cap; j++) {
            if (s->live.state[j] != 1) continue;
            PyObject *k = PyLong_FromLongLong((long long)s->live.keys[j]);
            PyObject *v = PyLong_FromLongLong(s->live.values[j]);
            bad = !k || !v || PyDict_SetItem(live, k, v) < 0;
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        PyObject *count = bad ? NULL : PyLong_FromLongLong(s->count);
        PyObject *skipped = bad ? NULL : PyLong_FromLongLong(s->skipped_count);
        bad = bad || !count || !skipped || PyObject_SetAttrString(s->py, "made", made) < 0 ||
              PyObject_SetAttrString(s->py, "live", live) < 0 ||
              PyObject_SetAttrString(s->py, "count", count) < 0 ||
              PyObject_SetAttrString(s->py, "skipped_count", skipped) < 0;
        Py_XDECREF(made);
        Py_XDECREF(live);
        Py_XDECREF(count);
        Py_XDECREF(skipped);
        if (bad) return -1;
    }
    if (m->shared && m->have_first) {
        PyObject *first = PyLong_FromLongLong(m->first_us);
        PyObject *day = PyLong_FromLongLong(m->day_start_us);
        int bad = !first || !day || PyObject_SetAttrString(m->shared, "first_us", first) < 0 ||
                  PyObject_SetAttrString(m->shared, "day_start_us", day) < 0;
        Py_XDECREF(first);
        Py_XDECREF(day);
        if (bad) return -1;
    }
    return 0;
}

/* ---------- the machine ---------- */

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

static int memo_set(Machine *m, Py_ssize_t index, PyObject *value /* borrowed */) {
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
static void memo_drop(Machine *m, PyObject *container) {
    int64_t index;
    if (map_pop(&m->memo_ids, (uint64_t)(uintptr_t)container, &index))
        memo_set(m, (Py_ssize_t)index, m->dropped);
}

/* A str of at most SHORT_STRING_BYTES bytes, interned: PyTorch writes some anew for every
   entry ("N/A", the compile_context), and the memo keeps each; interned, they are one.
   The last ASCII one made from each slot's bytes is kept, so a repeat costs no decoding
   and no lookup in the interned table. */
static PyObject *short_string(Machine *m, const char *start, Py_ssize_t size) {
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
static int more(Machine *m, Py_ssize_t *pos, unsigned __int128 need) {
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

/* ---------- a trace entry held back ----------
   Nearly every dict of a snapshot is a trace entry, read into columns as soon as the next
   one begins and dropped: filling it only to scan its keys again cost more than the rest
   of the machine. So SETITEMS on a fresh dict with the key "action" keeps the keys and
   values aside, the dict left empty (`pend_entry`), and the entry is read from them
   (`put_items`). Anything else that could see the dict fills it first (`pend_fill`): any
   opcode but those that only push a new value or check for it (`keeps_pending`), a BINGET
   that fetches it, SETITEMS or APPENDS that take it other than as a list's item. So what
   the machine hands out, and every message, is what filling it at once gives. Only plain
   entries are held: keys interned strs (equal only when the same object, and hashing
   cannot fail), none twice, at most PEND_PAIRS, the dict not among its own values. */

static void pend_release(Machine *m) {
    for (Py_ssize_t k = 0; k < m->pend_n; k++) Py_DECREF(m->pend_items[k]);
    m->pend_n = 0;
    Py_CLEAR(m->pend_dict);
}

/* Fill the held-back dict with its keys and values, as SETITEMS would have. */
static int pend_fill(Machine *m) {
    int done = 0;
    for (Py_ssize_t k = 0; !done && k < m->pend_n; k += 2)
        done = PyDict_SetItem(m->pend_dict, m->pend_items[k], m->pend_items[k + 1]);
    pend_release(m);
    return done;
}

/* Fill it when `object` is it. */
static int pend_fill_if(Machine *m, PyObject *object) {
    return m->pend_dict && object == m->pend_dict ? pend_fill(m) : 0;
}

/* SETITEMS's n items onto `target` (a dict): 1 when held back (the stack no longer owns
   them), 0 when not a plain entry on a fresh dict, -1 on an error. */
static int pend_entry(Machine *m, PyObject *target, PyObject **items, Py_ssize_t n) {
    if (PyDict_GET_SIZE(target) || n < 2 || n > 2 * PEND_PAIRS || n % 2) return 0;
    int has_action = 0;
    for (Py_ssize_t k = 0; k < n; k += 2) {
        PyObject *key = items[k];
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CHECK_INTERNED(key) ||
            items[k + 1] == target)
            return 0;
        for (Py_ssize_t j = 0; j < k; j += 2)
            if (items[j] == key) return 0;
        has_action |= key == m->k_action;
    }
    if (!has_action) return 0;
    if (m->pend_dict && pend_fill(m) < 0) return -1; /* one held at a time */
    memcpy(m->pend_items, items, (size_t)n * sizeof *items);
    m->pend_n = n;
    Py_INCREF(target);
    m->pend_dict = target;
    return 1;
}

static void pend_fields(Machine *m, Fields *f) {
    memset(f, 0, sizeof *f);
    for (Py_ssize_t k = 0; k < m->pend_n; k += 2)
        field_put(f, m->pend_items[k], m->pend_items[k + 1]);
}

/* Whether `item` (an exact dict) is a trace entry: it holds "action". */
static int is_entry(Machine *m, PyObject *item) {
    return item == m->pend_dict ? 1 : PyDict_Contains(item, m->k_action);
}

/* The opcodes that leave a held-back entry as it is: they push a new value, or check
   for it themselves. */
static int keeps_pending(int op) {
    switch (op) {
    case 0x68: case 0x6A: case 0x94: case 0x28: case 0x7D: case 0x75: case 0x73:
    case 0x65: case 0x61: case 0x5D: case 0x8F: case 0x95:
    case 0x4B: case 0x4A: case 0x4D: case 0x8A: case 0x47: case 0x88: case 0x89: case 0x4E:
    case 0x8C: case 0x58: case 0x8D: case 0x43: case 0x42: case 0x8E:
        return 1;
    default:
        return 0;
    }
}

static int put_items(Machine *m, PyObject *target, PyObject **items, Py_ssize_t n,
                     int64_t offset) {
    if (pend_fill_if(m, target) < 0) return -1;
    if (!PyList_CheckExact(target)) {
        fail_excerpt(m, offset, "APPENDS to %U, not a list", target);
        return -1;
    }
    Sink *sink = sink_for(m, target, 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = items[i];
        int entry = 0;
        if (PyDict_CheckExact(item)) {
            entry = is_entry(m, item);
            if (entry < 0) return -1;
        }
        if (entry) {
            if (!sink && !(sink = sink_for(m, target, 1))) return -1;
            int held = item == m->pend_dict;
            Fields fields;
            if (held)
                pend_fields(m, &fields);
            else
                scan_fields(m, item, &fields);
            if (sink_entry(m, sink, item, &fields) < 0) return -1;
            m->cells -= (held ? m->pend_n / 2 : PyDict_GET_SIZE(item)) + 1;
            memo_drop(m, item);
            PyObject *frames = fields.frames;
            if (frames && PyList_CheckExact(frames) && !m->keep_frames) {
                /* PyTorch shares one frames list between an alloc and its frees: later
                   references get DROPPED, which no column needs. */
                Py_ssize_t length = PyList_GET_SIZE(frames);
                int64_t index;
                if (map_pop(&m->memo_ids, (uint64_t)(uintptr_t)frames, &index)) {
                    memo_set(m, (Py_ssize_t)index, m->dropped);
                    m->cells -= length + 1;
                }
            }
            if (held) pend_release(m); /* its frames too, when no longer needed */
            /* A second reference to it is not an entry again. Held by nothing else (the
               memo slot just dropped), it dies at once: nothing can see it, leave it. */
            if (Py_REFCNT(item) > 1) {
                PyDict_Clear(item);
                if (PyDict_SetItem(item, m->dropped, Py_None) < 0) return -1;
            }
        } else if (sink) {
            if (sink_other(m, sink, item) < 0) return -1;
        } else {
            if (PyList_Append(target, item) < 0) return -1;
            m->cells += 1;
        }
    }
    return 0;
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

/* Room for `need` more bytes from pos (reading on); 0, or -1 with truncation or an error. */
static int want(Machine *m, Py_ssize_t *pos, Py_ssize_t *safe, unsigned __int128 need) {
    if ((unsigned __int128)*pos + need <= (unsigned __int128)m->end) return 0;
    if (more(m, pos, need) < 0) return -1;
    *safe = m->end - (m->eof ? 1 : m->lookahead);
    if ((unsigned __int128)*pos + need > (unsigned __int128)m->end) {
        truncated(m);
        return -1;
    }
    return 0;
}

#define POP_MARK_OR_FAIL(first)                                                              \
    do {                                                                                     \
        if (!m->n_marks) goto index_error;                                                   \
        first = m->marks[--m->n_marks];                                                      \
    } while (0)

static PyObject *run_machine(Machine *m) {
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
        if (m->cells > m->max_cells) {
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

static void machine_free(Machine *m) {
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
    for (Py_ssize_t i = 0; i < m->n_sinks; i++) {
        Sink *s = &m->sinks[i];
        Py_XDECREF(s->py);
        Py_XDECREF(s->pre);
        Py_XDECREF(s->ooms);
        Py_XDECREF(s->skipped);
        for (int k = 0; k < N_ROW_COLUMNS; k++) Py_XDECREF(s->rows[k].bytes);
        for (int k = 0; k < N_RES_COLUMNS; k++) Py_XDECREF(s->reserved[k].bytes);
        map_free(&s->live);
    }
    PyMem_RawFree(m->sinks);
    Py_XDECREF(m->shared);
    Py_XDECREF(m->want_lines);
    Py_XDECREF(m->zero);
}

/* run(machine, read, max_bytes, max_cells, new_sink, keep_frames, sinks, consts)
   consts: (DROPPED, BigInt, excerpt, _Truncated, SnapshotError, (ALLOCATE, FREE,
   ALLOCATE_FAILURE), chunk, max_chunk, lookahead, max_marks, memo_gap, long_decoded) */
static PyObject *reader_run(PyObject *self, PyObject *args) {
    Machine m;
    memset(&m, 0, sizeof m);
    long long max_bytes, max_cells;
    int keep_frames;
    PyObject *consts;
    if (!PyArg_ParseTuple(args, "OOLLOpO!O!", &m.machine, &m.read, &max_bytes, &max_cells,
                          &m.new_sink, &keep_frames, &PyDict_Type, &m.sinks_dict, &PyTuple_Type,
                          &consts))
        return NULL;
    long long codes[3];
    if (!PyArg_ParseTuple(consts, "OOOOO(LLL)nnnnnn", &m.dropped, &m.bigint_type, &m.excerpt,
                          &m.truncated, &m.snapshot_error, &codes[0], &codes[1], &codes[2],
                          &m.chunk, &m.max_chunk, &m.lookahead, &m.max_marks, &m.memo_gap,
                          &m.long_decoded))
        return NULL;
    for (int k = 0; k < 3; k++) m.action_codes[k] = codes[k];
    m.max_bytes = max_bytes;
    m.max_cells = max_cells;
    m.keep_frames = keep_frames;
    m.k_action = ACTION;
    m.zero = PyLong_FromLong(0);
    PyObject *result = NULL;
    if (!m.zero) goto done;
    /* No cycle collection while the machine runs: what it builds is a tree (a cycle only in
       a hostile pickle, collected afterwards), and the collector would walk the kept
       segments again and again as entries come and go. */
    int collecting = PyGC_Disable();
    result = run_machine(&m);
    if (collecting) PyGC_Enable();
    if (result && sinks_finish(&m) < 0) Py_CLEAR(result);
done:
    machine_free(&m);
    return result;
}

/* ---------- the segments (segments.py's device_segments) ---------- */

typedef struct {
    int64_t device, count;
    __int128 end_bytes;
    PyObject *active; /* list of (address, requested size, stream) */
} DeviceSum;

/* d[key] when d holds it; NULL (borrowed) when not, and on an error (PyErr_Occurred). */
static PyObject *get(PyObject *d, int key) { return PyDict_GetItemWithError(d, KEYS[key]); }

/* The active blocks of one segment, appended to `active`: 0, or -1 on an error. */
static int add_active(PyObject *blocks, int64_t stream, PyObject *active) {
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(blocks); j++) {
        PyObject *block = PyList_GET_ITEM(blocks, j);
        if (!PyDict_CheckExact(block)) continue;
        PyObject *state = get(block, K_STATE);
        if (!state && PyErr_Occurred()) return -1;
        if (!state || !PyUnicode_CheckExact(state)) continue;
        Py_ssize_t starts = PyUnicode_Tailmatch(state, KEYS[K_ACTIVE], 0, PY_SSIZE_T_MAX, -1);
        if (starts < 0) return -1;
        PyObject *address = starts ? get(block, K_ADDRESS) : NULL;
        PyObject *size = address ? get(block, K_REQUESTED_SIZE) : NULL;
        if (PyErr_Occurred()) return -1;
        int64_t a, n;
        if (!count_of(address, &a) || !count_of(size, &n)) continue;
        PyObject *row = Py_BuildValue("(LLL)", (long long)a, (long long)n, (long long)stream);
        int done = row ? PyList_Append(active, row) : -1;
        Py_XDECREF(row);
        if (done < 0) return -1;
    }
    return 0;
}

/* One segment into its device's sum (found or made through `index`): 0, 1 when it counts
   for no device, 2 when `visits` (grown by the segment and its blocks) passes the most, or
   -1 on an error. */
static int add_segment(PyObject *segment, Py_ssize_t devices, Map *index, DeviceSum **sums,
                       Py_ssize_t *n_sums, int64_t *visits, int64_t max_visits) {
    if (!PyDict_CheckExact(segment)) return 1;
    PyObject *device_obj = get(segment, K_DEVICE);
    int64_t device;
    if (!count_of(device_obj, &device) || device >= devices) return PyErr_Occurred() ? -1 : 1;
    PyObject *blocks = get(segment, K_BLOCKS);
    if (!blocks && PyErr_Occurred()) return -1;
    if (blocks && !PyList_CheckExact(blocks)) blocks = NULL;
    *visits += 1 + (blocks ? PyList_GET_SIZE(blocks) : 0);
    if (*visits > max_visits) return 2;
    Py_ssize_t at = map_find(index, (uint64_t)device);
    if (at < 0) {
        DeviceSum *grown = PyMem_RawRealloc(*sums, (size_t)(*n_sums + 1) * sizeof(DeviceSum));
        if (!grown) return PyErr_NoMemory(), -1;
        *sums = grown;
        DeviceSum *fresh = &grown[*n_sums];
        memset(fresh, 0, sizeof *fresh);
        fresh->device = device;
        if (!(fresh->active = PyList_New(0))) return -1;
        if (map_put(index, (uint64_t)device, *n_sums) < 0) return -1;
        at = map_find(index, (uint64_t)device);
        (*n_sums)++;
    }
    DeviceSum *sum = &(*sums)[index->values[at]];
    sum->count++;
    int64_t value;
    if (count_of(get(segment, K_TOTAL_SIZE), &value)) sum->end_bytes += value;
    int64_t stream = 0;
    if (!count_of(get(segment, K_STREAM), &stream)) stream = 0;
    if (PyErr_Occurred()) return -1;
    return blocks ? add_active(blocks, stream, sum->active) : 0;
}

/* device_segments(segments, devices, max_visits): segments.py's walk, the same answer. */
static PyObject *device_segments(PyObject *self, PyObject *args) {
    PyObject *segments;
    Py_ssize_t devices;
    long long max_visits;
    if (!PyArg_ParseTuple(args, "OnL", &segments, &devices, &max_visits)) return NULL;
    Map index;
    memset(&index, 0, sizeof index);
    DeviceSum *sums = NULL;
    Py_ssize_t n_sums = 0;
    int64_t visits = 0;
    int bad = 0, over = 0;
    Py_ssize_t length = PyList_CheckExact(segments) ? PyList_GET_SIZE(segments) : 0;
    for (Py_ssize_t i = 0; !bad && !over && i < length; i++) {
        int done = add_segment(PyList_GET_ITEM(segments, i), devices, &index, &sums, &n_sums,
                               &visits, max_visits);
        bad = done < 0;
        over = done == 2;
    }
    PyObject *found = bad ? NULL : over ? Py_NewRef(Py_None) : PyDict_New();
    for (Py_ssize_t k = 0; k < n_sums; k++) {
        if (found && found != Py_None) {
            PyObject *value = Py_BuildValue("(LNO)", (long long)sums[k].count,
                                            int128_to_long(sums[k].end_bytes), sums[k].active);
            PyObject *key = PyLong_FromLongLong(sums[k].device);
            if (!value || !key || PyDict_SetItem(found, key, value) < 0) Py_CLEAR(found);
            Py_XDECREF(value);
            Py_XDECREF(key);
        }
        Py_DECREF(sums[k].active);
    }
    PyMem_RawFree(sums);
    map_free(&index);
    return found;
}

static PyMethodDef METHODS[] = {
    {"run", reader_run, METH_VARARGS, "Run the restricted snapshot pickle machine."},
    {"device_segments", device_segments, METH_VARARGS,
     "The segments of each device: count, reserved bytes and active blocks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_snapshot_reader", NULL, -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__snapshot_reader(void) {
    if (!ACTION && !(ACTION = PyUnicode_InternFromString("action"))) return NULL;
    for (int k = 0; k < N_KEYS; k++)
        if (!KEYS[k] && !(KEYS[k] = PyUnicode_InternFromString(KEY_NAMES[k]))) return NULL;
    return PyModule_Create(&MODULE);
}
