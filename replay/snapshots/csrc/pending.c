/* A trace entry held back.
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
#include "reader.h"

void pend_release(Machine *m) {
    for (Py_ssize_t k = 0; k < m->pend_n; k++) Py_DECREF(m->pend_items[k]);
    m->pend_n = 0;
    Py_CLEAR(m->pend_dict);
}

/* Fill the held-back dict with its keys and values, as SETITEMS would have. */
int pend_fill(Machine *m) {
    int done = 0;
    for (Py_ssize_t k = 0; !done && k < m->pend_n; k += 2)
        done = PyDict_SetItem(m->pend_dict, m->pend_items[k], m->pend_items[k + 1]);
    pend_release(m);
    return done;
}

/* SETITEMS's n items onto `target` (a dict): 1 when held back (the stack no longer owns
   them), 0 when not a plain entry on a fresh dict, -1 on an error. */
int pend_entry(Machine *m, PyObject *target, PyObject **items, Py_ssize_t n) {
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
