"""PyTorch's allocator at the moment it refused a request, as its own snapshot() said it.

The virtual GPU's driver (replay/virtual/vcuda/vcuda_replay.cpp, its `state` line) replays a
program up
to the first allocation the allocator refuses and dumps c10's `CUDACachingAllocator::snapshot()`
there: every segment with its blocks. It is taken after the refusal, once PyTorch has freed
its cached segments and retried (`release_cached_blocks` in c10/cuda/CUDACachingAllocator.cpp):
the state its "CUDA out of memory" message describes. From it, what a user asks:

- reserved, allocated, and reserved but unallocated (PyTorch's own words);
- the largest free block of each pool (large: requests over 1 MiB, small: the rest), since
  a request is served from a free block of its pool or from a new segment;
- inactive split blocks: free pieces of segments still partly in use, which PyTorch cannot
  return to the device (the fragmentation `max_split_size_mb` and expandable segments act on).

The reason is said plainly: no free block of the request's pool is large enough, and a new
segment of the size PyTorch would ask for (`get_allocation_size`: 2 MiB for requests up to
1 MiB, 20 MiB up to 10 MiB, else the request rounded up to 2 MiB) does not fit under the cap
or on the device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hipmem._core.byte_sizes import MiB

SMALL_SIZE_BYTES = 1 * MiB  # kSmallSize: larger requests go to the large pool
SMALL_BUFFER_BYTES = 2 * MiB  # kSmallBuffer: the small pool's segment
MIN_LARGE_ALLOC_BYTES = 10 * MiB  # kMinLargeAlloc
LARGE_BUFFER_BYTES = 20 * MiB  # kLargeBuffer
ROUND_LARGE_BYTES = 2 * MiB  # kRoundLarge


def segment_request_bytes(size_bytes: int) -> int:
    """The segment PyTorch asks the device for when no free block serves `size_bytes`
    (`get_allocation_size` in c10/cuda/CUDACachingAllocator.cpp, without expandable segments)."""
    if size_bytes <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size_bytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-size_bytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


@dataclass(frozen=True)
class Block:
    """One block of a segment: its bytes, the bytes asked for, and whether it is in use."""

    size_bytes: int
    requested_bytes: int
    allocated: bool
    active: bool


@dataclass(frozen=True)
class Segment:
    """One segment (a cudaMalloc, or an expandable segment's mapped range) and its blocks."""

    address: int
    total_bytes: int
    allocated_bytes: int
    is_large: bool
    is_expandable: bool
    stream: int
    blocks: tuple[Block, ...]

    @property
    def free_blocks(self) -> list[Block]:
        return [b for b in self.blocks if not b.allocated and not b.active]

    @property
    def split(self) -> bool:
        """Partly in use: its free blocks are inactive split blocks."""
        return len(self.blocks) > 1 and any(b.allocated or b.active for b in self.blocks)

    def as_dict(self) -> dict[str, object]:
        return {
            "address": self.address,
            "total_bytes": self.total_bytes,
            "allocated_bytes": self.allocated_bytes,
            "pool": "large" if self.is_large else "small",
            "is_expandable": self.is_expandable,
            "stream": self.stream,
            "blocks": [
                {
                    "size_bytes": b.size_bytes,
                    "requested_bytes": b.requested_bytes,
                    "allocated": b.allocated,
                }
                for b in self.blocks
            ],
        }


@dataclass(frozen=True)
class AllocatorState:
    """The allocator's figures and segments at a refusal."""

    reserved_bytes: int
    allocated_bytes: int
    requested_bytes: int
    inactive_split_blocks: int
    inactive_split_bytes: int
    alloc_retries: int
    segments: list[Segment] = field(default_factory=list)

    @property
    def unallocated_bytes(self) -> int:
        """Reserved by PyTorch but not allocated (its OOM message's figure)."""
        return self.reserved_bytes - self.allocated_bytes

    def largest_free_bytes(self, *, large: bool) -> int:
        """The largest free block of the large or the small pool (0: none)."""
        return max(
            (b.size_bytes for s in self.segments if s.is_large == large for b in s.free_blocks),
            default=0,
        )

    def segment_count(self, *, large: bool) -> int:
        return sum(1 for s in self.segments if s.is_large == large)

    def as_dict(self) -> dict[str, object]:
        return {
            "reserved_bytes": self.reserved_bytes,
            "allocated_bytes": self.allocated_bytes,
            "requested_bytes": self.requested_bytes,
            "unallocated_bytes": self.unallocated_bytes,
            "segments": {
                "large": self.segment_count(large=True),
                "small": self.segment_count(large=False),
            },
            "largest_free_bytes": {
                "large": self.largest_free_bytes(large=True),
                "small": self.largest_free_bytes(large=False),
            },
            "inactive_split_blocks": self.inactive_split_blocks,
            "inactive_split_bytes": self.inactive_split_bytes,
            "alloc_retries": self.alloc_retries,
            "segment_list": [s.as_dict() for s in self.segments],
        }


def read_state(raw: dict[str, Any]) -> AllocatorState:
    """The driver's state.json (its own output, so trusted in shape) as an AllocatorState."""
    segments = [
        Segment(
            address=int(s["address"]),
            total_bytes=int(s["total_size"]),
            allocated_bytes=int(s["allocated_size"]),
            is_large=bool(s["is_large"]),
            is_expandable=bool(s["is_expandable"]),
            stream=int(s["stream"]),
            blocks=tuple(Block(int(b[0]), int(b[1]), bool(b[2]), bool(b[3])) for b in s["blocks"]),
        )
        for s in raw["segments"]
    ]
    segments.sort(key=lambda s: s.address)
    return AllocatorState(
        reserved_bytes=int(raw["reserved_bytes"]),
        allocated_bytes=int(raw["allocated_bytes"]),
        requested_bytes=int(raw["requested_bytes"]),
        inactive_split_blocks=int(raw["inactive_split_blocks"]),
        inactive_split_bytes=int(raw["inactive_split_bytes"]),
        alloc_retries=int(raw["num_alloc_retries"]),
        segments=segments,
    )


def refusal_reason(
    state: AllocatorState,
    size_bytes: int,
    *,
    memory_bytes: int,
    cap_bytes: int | None,
    expandable: bool,
) -> str:
    """Why the request was refused, in plain words."""
    large = size_bytes > SMALL_SIZE_BYTES
    pool = "large" if large else "small"
    largest = state.largest_free_bytes(large=large)
    limit, limit_name = (
        (cap_bytes, "the cap") if cap_bytes is not None else (memory_bytes, "the device")
    )
    room = max(0, limit - state.reserved_bytes)
    if expandable:
        grow = -(-size_bytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES
        segment = f"its expandable segment cannot map {grow:,} more bytes"
    else:
        grow = segment_request_bytes(size_bytes)
        segment = f"a new segment of {grow:,} bytes does not fit"
    return (
        f"no free block of {size_bytes:,} bytes in the {pool} pool (its largest is "
        f"{largest:,}), and {segment}: {state.reserved_bytes:,} bytes are reserved and "
        f"{limit_name} allows {limit:,}, leaving {room:,}"
    )
