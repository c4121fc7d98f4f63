/* The trace sink: trace_sink.py's TraceRows for one list, in C. Each trace entry appended to a
   list becomes column values the moment it is read (`sink_entry`), anything else appended
   after the first entry a skipped one (`sink_other`); at the end each sink hands its
   columns and counts to its TraceList (`sinks_finish`). */
#include "reader.h"

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

/* trace_sink.py's not_an_entry */
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

int sink_other(Machine *m, Sink *s, PyObject *item) {
    int64_t line;
    if (next_line(m, s, &line) < 0) return -1;
    PyObject *reason = NULL;
    if (keeps(m, s) && !(reason = not_an_entry(m, item))) return -1;
    return sink_skip(m, s, line, reason);
}

static const char *FIELD_NAMES[4] = {"addr", "size", "stream", "time_us"};

/* TraceRows._skip_field: the first field that is not a count names the skip. */
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
void scan_fields(Machine *m, PyObject *item, Fields *f) {
    memset(f, 0, sizeof *f);
    Py_ssize_t at = 0;
    PyObject *key, *value;
    while (PyDict_Next(item, &at, &key, &value)) field_put(f, key, value);
}

/* trace_sink.py's _TRACKED: the kind of an action (an exact str), or -1 when it is not one the
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

int sink_entry(Machine *m, Sink *s, PyObject *item, const Fields *f) {
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
        for (int k = 0; k < N_RES_COLUMNS; k++)
            if (column_room(&r[k], 1, 8) < 0) return -1;
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
        /* segment_alloc (13 characters) and segment_free (12), not segment_map or
           segment_unmap: the places of cudaMalloc's and cudaFree's segments */
        Py_ssize_t length = PyUnicode_GET_LENGTH(action);
        int placed = kind == KIND_SEGMENT_ALLOC ? length == 13 : length == 12;
        column_put64(&r[RES_SEGMENT_ADDRESS], placed ? address : -1);
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
Sink *sink_for(Machine *m, PyObject *target, int make) {
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
        /* The sink's other limits (trace_sink.py's MAX_KEPT_SKIPS, MAX_TIME_US, DAY_US) */
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

/* Hand each sink's columns and counts to its TraceList (`made`, as
   `TraceRows.made_from_rows` makes them in Python), and the day to their shared state. */
int sinks_finish(Machine *m) {
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

/* The first entry's keys, handed to the sink's TraceList (`first_keys`): which PyTorch
   wrote the file shows in them (release_range.py). A held entry's pairs are still pending. */
static int keep_first_keys(Machine *m, Sink *s, PyObject *item, int held) {
    PyObject *keys;
    if (held) {
        keys = PyList_New(m->pend_n / 2);
        for (Py_ssize_t k = 0; keys && k < m->pend_n / 2; k++) {
            Py_INCREF(m->pend_items[2 * k]);
            PyList_SET_ITEM(keys, k, m->pend_items[2 * k]);
        }
    } else {
        keys = PyDict_Keys(item);
    }
    int failed = !keys || PyObject_SetAttrString(s->py, "first_keys", keys) < 0;
    Py_XDECREF(keys);
    s->keys_kept = 1;
    return failed ? -1 : 0;
}

/* APPENDS (or APPEND) of n items to `target`: trace entries into its sink's columns, any
   other item after the first entry a skipped one, items before it into the list. */
int put_items(Machine *m, PyObject *target, PyObject **items, Py_ssize_t n,
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
                item_fields(m->pend_items, m->pend_n, &fields);
            else
                scan_fields(m, item, &fields);
            if (!sink->keys_kept && keep_first_keys(m, sink, item, held) < 0) return -1;
            if (sink_entry(m, sink, item, &fields) < 0) return -1;
            m->cells -= (held ? m->pend_n / 2 : PyDict_GET_SIZE(item)) + 1;
            m->cells -= memo_drop(m, item); /* its memo slot holds nothing now */
            PyObject *frames = fields.frames;
            if (frames && PyList_CheckExact(frames) && !m->keep_frames) {
                /* PyTorch shares one frames list between an alloc and its frees: later
                   references get DROPPED, which no column needs. */
                Py_ssize_t length = PyList_GET_SIZE(frames);
                int64_t index;
                if (map_pop(&m->memo_ids, (uint64_t)(uintptr_t)frames, &index)) {
                    memo_set(m, (Py_ssize_t)index, m->dropped);
                    m->cells -= length + 2; /* its items, itself, its memo slot */
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

/* The fields of an entry held back as key, value items (see pending.c). */
void item_fields(PyObject **items, Py_ssize_t n, Fields *f) {
    memset(f, 0, sizeof *f);
    for (Py_ssize_t k = 0; k < n; k += 2) field_put(f, items[k], items[k + 1]);
}

void sinks_free(Machine *m) {
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
}
