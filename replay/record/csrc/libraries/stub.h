/*
 * What every stand-in library of a recording shares (replay/record/build.py generates one C
 * file per library: this header, the library's own answers from libraries/<library>.c when
 * there is one, then a stub for each other name PyTorch imports from it).
 *
 * A stub returns 0, the success status of every CUDA library, and touches no argument: the
 * calls PyTorch checks succeed, and work asked of a library (a matmul, a convolution) is done
 * as the runtime's kernels are: not at all. A function whose answer PyTorch reads through an
 * argument (a handle created, a version, a heuristic's choice) is written by hand in the
 * library's own file. HIPMEM_VCUDA_TRACE=1 names each stub on its first call.
 */
#ifndef HIPMEM_RECORD_STUB_H
#define HIPMEM_RECORD_STUB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* A new opaque object (a handle, a descriptor): distinct, never read by its holder. */
static inline void* stub_object(void) { return calloc(1, 256); }

static inline void stub_called(const char* name, int* seen) {
  if (!*seen) {
    *seen = 1;
    const char* trace = getenv("HIPMEM_VCUDA_TRACE");
    if (trace && *trace == '1') fprintf(stderr, "vcuda stub: %s\n", name);
  }
}

/* Defined under the library's names with asm labels, so that a header's prototype of the
   same function (cuda.h, in the driver's file) never conflicts. */
#define STUB(name)                                              \
  EXPORT long stub_##name(void) __asm__(#name);                 \
  long stub_##name(void) {                                      \
    static int seen;                                            \
    stub_called(#name, &seen);                                  \
    return 0;                                                   \
  }

/* An error-string function: a text to print, never a null pointer. */
#define STUB_STRING(name)                                                     \
  EXPORT const char* stub_##name(void) __asm__(#name);                        \
  const char* stub_##name(void) { return "(no description: hipmem's stand-in library)"; }

#endif
