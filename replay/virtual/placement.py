"""Where the recording's driver put each segment, for the virtual GPU to put them there too.

PyTorch's caching allocator keeps its free blocks ordered by stream, size and address, and
takes the first that fits: between blocks of one size on one stream, the lowest address wins.
So where the CUDA driver put each segment decides which block a request gets, and from there
which segments the run allocates. The driver's order is its own: in an FSDP2 snapshot recorded
on the H200, 20 MiB segments alternated above and below the first, and the virtual GPU's
top-down placement broke one tie the other way and reserved 4 MiB more than the GPU had.

A snapshot's trace says where each `segment_alloc` went and which `segment_free` gave a
segment back. The plan is those calls in order, each segment at an offset in the virtual
GPU's address range that keeps the recorded order of addresses (ranges that overlapped in the
recording, one freed before another took its place, keep their recorded distance; ranges
apart are packed one granule apart, whatever the distance between them was). The virtual GPU
follows it while the allocator's calls are the recorded ones: each cudaMalloc of the recorded
size, its place free, each cudaFree of the recorded segment
(replay/virtual/vcuda/virtual_cuda.c). At the first call that is not, the run has gone its own
way (another setting, a smaller device that made the allocator free its cache), the driver
would have seen other calls too, and segments are placed top down from there.
"""

from __future__ import annotations

import numpy as np

from ..logs.events import AllocationLog

GRANULE_BYTES = 2 << 20  # the driver's allocation granularity on the H100 and H200


def placement_plan(log: AllocationLog) -> np.ndarray:
    """uint64 (size, offset) pairs, flat, for the virtual GPU's cudaMalloc calls: those of the
    log's one recording; none for a log of several recordings or of none (an RMM log)."""
    if len(log.recordings) != 1:
        return np.zeros(0, np.uint64)
    return plan_of(log.recordings[0].segment_places)


def plan_of(places: np.ndarray) -> np.ndarray:
    """The plan of (address, size) rows in the order the driver saw them: a segment_alloc's
    size, a segment_free's size negated. A cudaMalloc step is (size, offset), a cudaFree step
    (0, offset); a free of a segment the trace never allocated (made before recording began)
    gets an offset that no call matches, so the plan ends there."""
    if not len(places):
        return np.zeros(0, np.uint64)
    addresses, sizes = places[:, 0], places[:, 1]
    made = sizes > 0
    offsets = np.full(len(places), np.iinfo(np.int64).max, np.int64)
    offsets[made] = _packed(addresses[made], sizes[made])
    # A free's offset is that of the segment allocated at its address (the last one before it).
    known = dict(zip(addresses[made].tolist(), offsets[made].tolist(), strict=True))
    for at in np.flatnonzero(~made):
        offsets[at] = known.get(int(addresses[at]), offsets[at])
    steps = np.where(made, sizes, 0)
    return np.stack((steps, offsets), axis=1).astype(np.uint64).ravel()


def _packed(addresses: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each range's offset: the recorded order of addresses kept, ranges that overlapped (one
    freed before another took its place) at their recorded distance, clusters apart packed one
    granule apart."""
    order = np.lexsort((-sizes, addresses))
    starts, ends = addresses[order], addresses[order] + sizes[order]
    # A range starts a new cluster where it begins past every range before it.
    reach = np.maximum.accumulate(ends)
    new_cluster = np.ones(len(starts), dtype=bool)
    new_cluster[1:] = starts[1:] >= reach[:-1]
    cluster = np.cumsum(new_cluster) - 1
    first = np.flatnonzero(new_cluster)
    low = starts[first]
    span = np.maximum.reduceat(ends, first) - low
    # Each cluster one granule past the last, aligned as it was (low % granule).
    granules = (span + (low % GRANULE_BYTES) + GRANULE_BYTES - 1) // GRANULE_BYTES + 1
    before = np.concatenate(([0], np.cumsum(granules)[:-1]))  # granules of the clusters below
    base = GRANULE_BYTES * (1 + before) + low % GRANULE_BYTES
    offsets = np.empty(len(order), np.int64)
    offsets[order] = base[cluster] + (starts - low[cluster])
    return offsets
