/* The segments of each device (segments.py's `device_segments`, the reference): how many, the
   bytes they hold, and the blocks active at dump time, walked in C after the C machine. */
#include "reader.h"

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
PyObject *device_segments(PyObject *self, PyObject *args) {
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
