/* The restricted snapshot pickle machine and its trace sink, in C: what its files share.
 *
 * A port, opcode for opcode, of `replay/snapshots/pickle_machine.py` (`RestrictedPickle._run`)
 * and of the trace sink of `replay/snapshots/trace_sink.py` (`TraceRows.entry` / `other`, and the
 * columns of `TraceRows.made_from_rows`): the Python machine is the reference, and
 * tests/replay/snapshots/test_snapshot_native.py checks that both give the same columns,
 * skipped entries and errors, byte for byte. Why C: the Python machine runs 7x to 10x the
 * time of `pickle.load` (C); issue 33 asks for at most that time.
 *
 * What is kept as Python objects is what the Python machine keeps (the snapshot's dicts,
 * lists and scalars, so the code reading the settings is shared; the segments are walked in C
 * too, segments.c, with segments.py's `device_segments` its reference); a trace entry
 * becomes column values in C buffers (bytearrays handed to the sink at the end, no copy) the
 * moment it is appended to its list, and is dropped, its dict never filled (pending.c). The
 * bounds are the Python machine's: bytes (the caller's cap, checked before any length is
 * read), objects held at once (`max_cells`), open MARKs, nothing recursive. Messages are
 * made by the Python machine's own methods (`_error`, `_refused`, `_cap_error`,
 * `_cells_error`) and `excerpt`, so both say the same words. Memory it allocates is Python's
 * (PyMem_Raw*, bytearrays), so tracemalloc counts it (benchmarks/bench_snapshot_read.py).
 *
 * A plain CPython extension (`hipmem.replay.snapshots._snapshot_reader`), built when hipmem is
 * installed (setup.py) and imported by `replay/snapshots/native.py` with its package. Its
 * files: machine.c (the opcode loop), stream.c (its input), pending.c (a trace entry held
 * back), sink.c (trace entries into columns), segments.c (the segments of each device),
 * messages.c (errors in the Python machine's words), module.c; map.h and column.h, its
 * containers. Built with hidden symbols (setup.py): only the module's init is exported.
 */
#ifndef HIPMEM_SNAPSHOT_READER_H
#define HIPMEM_SNAPSHOT_READER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "column.h"
#include "map.h"

extern PyObject *ACTION; /* "action", interned at module init: the key that makes an entry */
/* The keys of segments and blocks that device_segments reads, and the prefix of a block
   state that is active; interned at module init. */
enum { K_DEVICE, K_BLOCKS, K_TOTAL_SIZE, K_STREAM, K_STATE, K_ADDRESS, K_REQUESTED_SIZE,
       K_ACTIVE, N_KEYS };
extern PyObject *KEYS[N_KEYS];

/* The event columns of reader.py's DeviceTrace, in its order, and what PyTorch reserved. */
enum { COL_LINE, COL_TIME_NS, COL_ACTION, COL_POINTER, COL_SIZE, COL_STREAM, N_ROW_COLUMNS };
/* RES_SEGMENT_ADDRESS: a segment_alloc's or segment_free's address (where the driver put the
   segment: replay/virtual/placement.py), -1 for the changes of expandable segments */
enum { RES_TIME_NS, RES_LEVEL, RES_SEGMENT_ADDRESS, N_RES_COLUMNS };
/* after the columns: grown, net, peak_at, peak level, peak time (ns) */
enum { N_MADE_COUNTS = 5 };

/* The trace sink of one list (trace_sink.py's TraceRows; sink.c) */

typedef struct {
    PyObject *py; /* the TraceList made by new_sink, which gets the results (it keeps the
                     list alive) */
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
    int keys_kept; /* the first entry's keys were handed to `py` (trace_sink.py's first_keys) */
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

/* An entry's fields, found in one pass over the dict (borrowed; NULL: missing). */
typedef struct {
    PyObject *action, *time_us, *addr, *size, *stream, *frames, *device_free;
} Fields;

/* `type(value) is int` and 0 <= value < 2**63: 1 with the value, else 0. */
static inline int count_of(PyObject *value, int64_t *out) {
    if (!value || !PyLong_CheckExact(value)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || v < 0) return 0;
    *out = v;
    return 1;
}

/* messages.c */
PyObject *grouped_ll(long long value);
void raise_made(PyObject *made);
void fail_with(Machine *m, int64_t offset, PyObject *what);
void fail(Machine *m, int64_t offset, const char *what);
PyObject *excerpt(Machine *m, PyObject *value);
void fail_excerpt(Machine *m, int64_t offset, const char *format, PyObject *value);
void refuse(Machine *m, int64_t offset, const char *what, PyObject *name);
void truncated(Machine *m);
int is_scalar(Machine *m, PyObject *v);
PyObject *int128_to_long(__int128 value);

/* sink.c */
int sink_other(Machine *m, Sink *s, PyObject *item);
void scan_fields(Machine *m, PyObject *item, Fields *f);
void item_fields(PyObject **items, Py_ssize_t n, Fields *f);
int sink_entry(Machine *m, Sink *s, PyObject *item, const Fields *f);
Sink *sink_for(Machine *m, PyObject *target, int make);
int sinks_finish(Machine *m);
void sinks_free(Machine *m);
int put_items(Machine *m, PyObject *target, PyObject **items, Py_ssize_t n, int64_t offset);

/* stream.c */
PyObject *short_string(Machine *m, const char *start, Py_ssize_t size);
int more(Machine *m, Py_ssize_t *pos, unsigned __int128 need);
int want(Machine *m, Py_ssize_t *pos, Py_ssize_t *safe, unsigned __int128 need);

/* pending.c */
void pend_release(Machine *m);
int pend_fill(Machine *m);
int pend_entry(Machine *m, PyObject *target, PyObject **items, Py_ssize_t n);

/* machine.c */
int memo_set(Machine *m, Py_ssize_t index, PyObject *value);
int memo_drop(Machine *m, PyObject *container); /* 1: its slot was dropped */
PyObject *run_machine(Machine *m);
void machine_free(Machine *m);

/* segments.c */
PyObject *device_segments(PyObject *self, PyObject *args);

/* Fill it when `object` is it. */
static inline int pend_fill_if(Machine *m, PyObject *object) {
    return m->pend_dict && object == m->pend_dict ? pend_fill(m) : 0;
}

/* Whether `item` (an exact dict) is a trace entry: it holds "action". */
static inline int is_entry(Machine *m, PyObject *item) {
    return item == m->pend_dict ? 1 : PyDict_Contains(item, m->k_action);
}

/* The opcodes that leave a held-back entry as it is: they push a new value, or check
   for it themselves. */
static inline int keeps_pending(int op) {
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

#endif
