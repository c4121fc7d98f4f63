"""Freed arrays' memory handed back to the system, not kept by the C allocator.

glibc's malloc serves a block larger than its mmap threshold (128 KiB at first) with an mmap
of its own, returned to the system when freed. But it raises that threshold to the size of
each such block freed (up to 32 MiB), so after the first large NumPy array or CSV buffer is
freed, the next ones of that size come from the heap, and the heap keeps freed memory as long
as anything above it is live. A command that loads a million-event log and builds its replay
program frees tens of arrays of that size: on the 1 M-event logs of docs/rmm-virtual.md the
process kept 60 to 100 MiB it no longer used. Setting the threshold once fixes it where it
is (glibc stops moving it), so large arrays are mapped and unmapped as they come and go.

pyarrow's CSV reader (replay/logs/) allocates through arrow's default pool, mimalloc, which
kept about 50 MiB of the freed reading buffers of a 1 M-event log resident even after
`release_unused()`; arrow's "system" pool is this same malloc, and read as fast there. Arrow
reads ARROW_DEFAULT_MEMORY_POOL when it makes its default pool, so it is set before pyarrow is
first used (a user's own setting wins).
"""

from __future__ import annotations

import ctypes
import os

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold for this process (True), or do nothing where the C library
    is not glibc (False); arrow's pool the system's. Call it once, at the start of a command,
    before pyarrow is imported."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:  # the C library this process already runs with
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS): no mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
