"""A snapshot's segments and allocator settings, read as PyTorch writes them: ints, lists and
dicts of exactly those types; anything else is left out (never a silently different size).

The segments give what was reserved when the snapshot was taken and the blocks still active
then (allocations made before recording began, where no trace entry left them live); the
settings are kept one level deep, so the JSON of a recording is always writable. Nothing here
recurses, whatever the pickle nests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

INT64_END = 1 << 63


def count_or_none(value: Any) -> int | None:
    """`value` when it is a non-negative int64 (not a bool), else None."""
    return value if type(value) is int and 0 <= value < INT64_END else None


# Per device: how many segments, the sum of their sizes (what was reserved at dump time), and
# (address, requested size, stream) of each block active then, in the segments' order.
DeviceSegments = tuple[int, int, list[tuple[int, int, int]]]


def device_segments(
    segments: Any, devices: int, max_visits: int
) -> dict[int, DeviceSegments] | None:
    """The segments of each device in [0, devices) as `DeviceSegments`; None when they hold
    more than `max_visits` segments and blocks, counting a shared one at each reference.
    The C machine's module does the same walk (`device_segments`, csrc/segments.c)."""
    found: dict[int, DeviceSegments] = {}
    visits = 0
    for segment in segments if type(segments) is list else []:
        if type(segment) is not dict:
            continue
        device = segment.get("device")
        if type(device) is not int or not 0 <= device < devices:
            continue
        blocks = segment.get("blocks")
        blocks = blocks if type(blocks) is list else []
        visits += 1 + len(blocks)
        if visits > max_visits:
            return None
        count, end_bytes, active = found.get(device, (0, 0, []))
        stream = count_or_none(segment.get("stream")) or 0
        for block in blocks:
            state = block.get("state") if type(block) is dict else None
            if type(state) is not str or not state.startswith("active"):
                continue
            address = count_or_none(block.get("address"))
            size = count_or_none(block.get("requested_size"))
            if address is not None and size is not None:
                active.append((address, size, stream))
        total_bytes = count_or_none(segment.get("total_size")) or 0
        found[device] = (count + 1, end_bytes + total_bytes, active)
    return found


def plain_settings(settings: Any) -> dict[str, Any]:
    """The allocator settings PyTorch writes (str keys; numbers, strings, bools and a dict of
    them): anything else is left out, so the JSON of a recording is always writable. One
    level deep only: nothing here recurses, whatever the pickle nests."""
    kept: dict[str, Any] = {}
    for key, value in settings.items() if type(settings) is dict else ():
        if type(key) is str and (type(value) in _SCALARS or _is_plain_dict(value)):
            kept[key] = value
    return kept


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _is_plain_dict(value: Any) -> bool:
    """A dict of str keys and scalar values (roundup_power2_divisions)."""
    if type(value) is not dict:
        return False
    for key, item in value.items():
        if type(key) is not str or type(item) not in _SCALARS:
            return False
    return True


def no_history_message(path: Path, devices: list[DeviceSegments]) -> str:
    """The one line for a snapshot dumped without the allocator's history: what it can answer
    (the segments at the dump) and what it cannot (anything replayed)."""
    reserved = sum(end_bytes for _, end_bytes, _ in devices)
    blocks = [block for _, _, active in devices for block in active]
    allocated = sum(size for _, size, _ in blocks)
    return (
        f"{path}: no allocator history in this snapshot (dumped with include_traces=False, or "
        "without torch.cuda.memory._record_memory_history): it says only what was reserved when "
        f"it was dumped ({reserved:,} bytes; {allocated:,} bytes in {len(blocks):,} live "
        "blocks); a replay, explain, recommend and check need the allocations in order: record "
        "with _record_memory_history() on"
    )
