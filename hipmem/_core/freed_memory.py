"""Freed arrays' memory handed back to the system, not kept by the C allocators.

glibc's malloc serves a block larger than its mmap threshold (128 KiB at first) with an mmap
of its own, returned to the system when freed. But it raises that threshold to the size of
each such block freed (up to 32 MiB), so after the first large NumPy array or CSV buffer is
freed, the next ones of that size come from the heap, and the heap keeps freed memory as long
as anything above it is live. A command that loads a million-event log and builds its replay
program frees tens of arrays of that size: on the 1 M-event logs of docs/rmm-virtual.md the
process kept 60 to 100 MiB it no longer used. `release_freed_memory` (glibc's `malloc_trim`)
hands those pages back where a stage that frees many large arrays ends (the log's loading, a
replay program's build). Fixing the threshold instead (mallopt) would hand each array back as
it is freed, but maps and faults in fresh pages for every temporary: `log inspect` of 20 M
rows took 1.6x as long.

pyarrow's CSV reader (replay/logs/) allocates through arrow's default pool, mimalloc, which
kept about 50 MiB of the freed reading buffers of a 1 M-event log resident even after
`release_unused()`; arrow's "system" pool is this same malloc, and reads as fast there. Arrow
reads ARROW_DEFAULT_MEMORY_POOL when it makes its default pool, so `use_system_pool` sets it
before pyarrow is first used (a user's own setting wins).
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def use_system_pool() -> None:
    """Arrow's default pool the system's malloc (unless the user chose one). Call it before
    pyarrow is imported: arrow reads the setting once."""
    os.environ.setdefault(ARROW_POOL_ENV, "system")


def release_freed_memory() -> bool:
    """Hand the pages of freed heap memory back to the system (True), or do nothing where the
    C library is not glibc (False). About a millisecond; call it where a stage that freed many
    large arrays ends."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)  # its answer says whether any page was handed back: either is fine
    return True


@cache
def _malloc_trim() -> Any:
    import ctypes  # here: a command that never loads a log does not pay for it

    try:  # the C library this process already runs with
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): no malloc_trim
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim
