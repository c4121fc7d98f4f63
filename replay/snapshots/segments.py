"""A snapshot's segments and allocator settings, read as PyTorch writes them: ints, lists and
dicts of exactly those types; anything else is left out (never a silently different size).

The segments give what was reserved when the snapshot was taken and the blocks still active
then (allocations made before recording began); the settings are kept one level deep, so the
JSON of a recording is always writable. Nothing here recurses, whatever the pickle nests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .pickle_machine import SnapshotError

INT64_END = 1 << 63


def is_count(value: Any) -> bool:
    """`value` is a non-negative int64 (not a bool)."""
    return type(value) is int and 0 <= value < INT64_END


def count_or_none(value: Any) -> int | None:
    """`value` when it is a non-negative int64 (not a bool), else None."""
    return value if type(value) is int and 0 <= value < INT64_END else None


def blocks_active_at_dump(
    segments: list[dict[str, Any]], live: dict[int, int]
) -> list[tuple[int, int, int]]:
    """(address, requested size, stream) of each block still active when the snapshot was
    taken that no trace entry left live (`live`): allocations made before recording began."""
    found = []
    for segment in segments:
        stream = segment.get("stream")
        blocks = segment.get("blocks")
        for block in blocks if type(blocks) is list else []:
            if type(block) is not dict:
                continue
            state = block.get("state")
            if type(state) is not str or not state.startswith("active"):
                continue
            address = count_or_none(block.get("address"))
            size = count_or_none(block.get("requested_size"))
            if address is None or size is None or address in live:
                continue
            found.append((address, size, count_or_none(stream) or 0))
    return found


def segments_by_device(
    path: Path, segments: Any, devices: int, max_visits: int
) -> dict[int, list[dict[str, Any]]]:
    """Segments per device. Walking them visits every block of every segment, shared ones
    once per reference, so the visits are counted against the held-objects cap."""
    found: dict[int, list[dict[str, Any]]] = {}
    visits = 0
    for segment in segments if type(segments) is list else []:
        if type(segment) is not dict:
            continue
        device = segment.get("device")
        if type(device) is not int or not 0 <= device < devices:
            continue
        blocks = segment.get("blocks")
        visits += 1 + (len(blocks) if type(blocks) is list else 0)
        if visits > max_visits:
            raise SnapshotError(
                f"{path}: the segments hold more than {max_visits:,} blocks, counting "
                "each shared one every time it is referenced"
            )
        found.setdefault(device, []).append(segment)
    return found


def plain_settings(settings: Any) -> dict[str, Any]:
    """The allocator settings PyTorch writes (str keys; numbers, strings, bools and a dict of
    them): anything else is left out, so the JSON of a recording is always writable. One
    level deep only: nothing here recurses, whatever the pickle nests."""
    if type(settings) is not dict:
        return {}
    scalar = (str, int, float, bool, type(None))
    return {
        key: value
        for key, value in settings.items()
        if type(key) is str
        and (
            type(value) in scalar
            or (type(value) is dict and all(type(k) is str and type(v) in scalar
                                            for k, v in value.items()))
        )
    }  # fmt: skip
