"""The fits table of RMM's arena on the virtual GPU: which devices replay as the largest one.

Of the devices, an arena meets only its own size: half the free memory at its making (RMM's
`global_arena::default_size`; on a fresh virtual device all of it is free), or `size=`,
aligned down to 256 bytes, taken from cudaMalloc in one call and never grown. Within it, RMM's
global arena (rmm/mr/device/detail/arena.hpp, the same in 24.12 and 25.4) keeps its free
superblocks in address order and carves from the first that fits: a superblock split off an
empty one is max(1 MiB, the request) when at least 1 MiB would be left, else the whole one is
taken. The arena's size changes only the last superblock, the free one that ends at the
arena's end; every other superblock, block and decision is the same in two arenas as long as
every look at that last one goes the same way:

- it fits a request in both, or in neither: where it fitted in the larger arena, the carve
  ended within the reach `E` (below), and the smaller arena reaches past it;
- it is split in both: the smaller arena is at least `E` + 1 MiB, so at least 1 MiB is left
  after any carve within `E`. (Had the larger arena not split, its carve would have taken the
  whole last superblock, to its end: its reach, and so the smaller arena, would be past its
  own size.)

`E` is measured by the driver (rmm_replay.cpp): the greatest offset, in the arena, of an
allocation plus max(1 MiB, its request as the arena rounds it). Every carve is a superblock
whose first block is the allocation that asked for it, so `E` is at least every carve's end.
Frees and defragmenting look only at the blocks carved, the same in both.

So an arena of size A, E + 1 MiB <= A <= the replayed one's, replays exactly as the replayed
one: the same refusals, and the arena (A bytes) its whole reservation. The fits table replays
the largest device and answers each device whose arena passes this from it; the others are
replayed (tests/replay/rmm/test_rmm_virtual.py checks both against each device's own replay).
"""

from __future__ import annotations

from hipmem._core.devices import Device

from ..engine.resources import ResourceSpec
from ..rmm.virtual import RmmProbe

ALIGNMENT_BYTES = 256  # rmm::CUDA_ALLOCATION_ALIGNMENT: the arena's size is aligned down to it
SUPERBLOCK_BYTES = 1 << 20  # superblock::minimum_size


def arena_bytes(spec: ResourceSpec, device: Device) -> int:
    """The size of `spec`'s arena on a fresh `device`."""
    given = spec.option_bytes("size")
    size = device.memory_bytes // 2 if given is None else given
    return size // ALIGNMENT_BYTES * ALIGNMENT_BYTES


def replays_alike(replayed: RmmProbe, replayed_arena_bytes: int, device: Device, size: int) -> bool:
    """Does an arena of `size` bytes on `device` replay exactly as `replayed` did (an arena of
    `replayed_arena_bytes`, with no refused cudaMalloc)?"""
    if replayed.arena_extent_bytes < 0 or replayed.setup_refused is not None:
        return False
    if replayed.device_refusals:
        return False
    if replayed.peak_reserved_bytes != replayed_arena_bytes:  # not the arena's rule: replay
        return False
    pages = -(-size // device.granularity_bytes) * device.granularity_bytes
    if pages > device.memory_bytes:  # the device would refuse the arena itself
        return False
    if size == replayed_arena_bytes:
        return True
    return replayed.arena_extent_bytes + SUPERBLOCK_BYTES <= size < replayed_arena_bytes
