/* An open-addressing map, uint64 -> int64 (pointers or addresses), in PyMem_Raw memory. */
#ifndef HIPMEM_SNAPSHOT_MAP_H
#define HIPMEM_SNAPSHOT_MAP_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t *keys;
    int64_t *values;
    uint8_t *state; /* 0 empty, 1 full, 2 deleted */
    size_t cap, used, filled;
} Map;

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline void map_free(Map *m) {
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->values);
    PyMem_RawFree(m->state);
    memset(m, 0, sizeof *m);
}

static inline int map_resize(Map *m, size_t cap) {
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
static inline Py_ssize_t map_find(const Map *m, uint64_t key) {
    if (!m->cap) return -1;
    size_t j = mix64(key) & (m->cap - 1);
    while (m->state[j]) {
        if (m->state[j] == 1 && m->keys[j] == key) return (Py_ssize_t)j;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

static inline int map_put(Map *m, uint64_t key, int64_t value) {
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
static inline int map_pop(Map *m, uint64_t key, int64_t *value) {
    Py_ssize_t at = map_find(m, key);
    if (at < 0) return 0;
    if (value) *value = m->values[at];
    m->state[at] = 2;
    m->used--;
    return 1;
}

#endif
