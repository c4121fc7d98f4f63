"""Which rows of a log are requests that failed when they were recorded, and replay as such.

A PyTorch snapshot's `oom` entry is the request the allocator refused: PyTorch records it
(`record_trace(TraceEntry::OOM, device_free, params.size(), ...)` in
c10/cuda/CUDACachingAllocator.cpp) with the size it searched for, already rounded, and the
device's free memory in place of an address. The snapshot reader turns it into an
`allocate failure` row of its device's source; the program (replay/engine/program.py) replays such a
row as the request it was. An RMM log's `allocate failure` rows are not: RMM logs the failure
of a resource that may not be the one replayed, and their figures stay as they were.
"""

from __future__ import annotations

import numpy as np

from ..logs.events import ALLOCATE_FAILURE, AllocationLog


def recorded_failed_rows(log: AllocationLog) -> np.ndarray:
    """A bool per row of `log.events`: an `oom` entry of a snapshot's device."""
    events = log.events
    action = events["action"].to_numpy(dtype=np.int8)
    recorded = {r.source for r in log.recordings}
    snapshot_files = [i for i, source in enumerate(log.sources) if source in recorded]
    if not snapshot_files or not (action == ALLOCATE_FAILURE).any():
        return np.zeros(len(action), dtype=bool)
    file_index = events["file_index"].to_numpy()
    return (action == ALLOCATE_FAILURE) & np.isin(file_index, snapshot_files)
