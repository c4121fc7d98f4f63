/* The module `hipmem.replay.snapshots._snapshot_reader`: `run` (the machine) and
   `device_segments`. */
#include "reader.h"

PyObject *ACTION;
PyObject *KEYS[N_KEYS];
static const char *KEY_NAMES[N_KEYS] = {"device", "blocks", "total_size", "stream", "state",
                                        "address", "requested_size", "active"};

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
