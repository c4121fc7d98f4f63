"""The sinks of a snapshot's trace lists: what one list's entries come to as the pickle machine
reads them (counts, skipped entries, the blocks live at the end, out-of-memory errors, the
first entry's keys, and the event columns), so that no object tree of the whole trace is ever
built. The C machine (csrc/sink.c) fills a `TraceList` itself; `TraceRows` is the Python
machine's, which fills the same fields. reader.py turns them into each device's events.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from ..logs.events import ALLOCATE, ALLOCATE_FAILURE, FREE
from .budget import SnapshotBudget
from .frames import Frame
from .pickle_machine import DROPPED, BigInt, SnapshotError, excerpt
from .segments import INT64_END, count_or_none

MAX_KEPT_SKIPS = 100
MAX_FRAMES = 10_000  # frames kept for the one entry `entry_frames` asks about
DAY_US = 86_400 * 10**6
# Bounds that keep every sum and time in int64 (docs/hostile-input.md).
MAX_TIME_US = (2**63 - 1) // 1000  # so any time_ns, and any difference of two, fits int64

_TRACKED = {"alloc": 0, "free_completed": 1, "oom": 2, "segment_alloc": 3, "segment_map": 3,
            "segment_free": 4, "segment_unmap": 4}  # fmt: skip
_ACTIONS = {0: ALLOCATE, 1: FREE, 2: ALLOCATE_FAILURE}


class Shared:
    """What every trace list of one file shares: the first entry's day, the caps."""

    def __init__(self, want_lines: frozenset[int], budget: SnapshotBudget) -> None:
        self.first_us: int | None = None
        self.day_start_us = 0
        self.budget = budget  # the bounds of this file (budget.py)
        self.max_entries = budget.trace_entries  # what both machines read
        self.want_lines = want_lines  # entries whose frames are kept (entries_frames)
        self.sink_limits = (MAX_KEPT_SKIPS, MAX_TIME_US, DAY_US)  # for the C sink


class TraceList:
    """What one list's trace entries came to: counts, what was skipped, the blocks live at
    the end and those freed that were allocated before recording, OOMs, the frames kept, and
    `made`, the finished columns. The C machine fills it as it reads; `TraceRows` is the
    Python machine's sink, which fills the same fields."""

    __slots__ = ("count", "first_keys", "frames", "live", "made", "ooms", "pre", "shared",
                 "skipped", "skipped_count", "target")  # fmt: skip

    def __init__(self, target: list[Any], shared: Shared) -> None:
        self.target = target  # kept alive, so its id names no other list while read
        self.shared = shared
        self.count = len(target)  # items appended before the first entry stay in the list
        self.pre: list[tuple[int, int, int]] = []  # (pointer, size, stream) before recording
        self.live: dict[int, int] = {}
        self.ooms: list[tuple[int, int, int | None]] = []  # line, size, device_free
        self.skipped: list[tuple[int, str]] = []
        self.skipped_count = 0
        self.frames: dict[int, list[Frame]] = {}
        self.first_keys: list[Any] | None = None  # the first entry's keys (release_range.py)
        # Line, time_ns, action, pointer, size, stream columns; the reserved level's times,
        # levels and segment addresses; its sums and peak (`TraceRows.made_from_rows` says
        # what each is).
        self.made: tuple[Any, ...] = ()

    def keep_frames(self, line: int, frames: Any) -> None:
        """Keep the frames of entry `line` (one `entries_frames` asks about)."""
        found = frames_of(frames)
        if found:
            self.frames[line] = found


class TraceRows(TraceList):
    """The Python machine's sink for one list: each trace entry as it streams past becomes a
    row (line, time_us, action, address, size, stream, interleaved int64) or a reserved-bytes
    change, made into the columns the C machine makes at the end (`made_from_rows`)."""

    __slots__ = ("reserved", "rows")

    def __init__(self, target: list[Any], shared: Shared) -> None:
        super().__init__(target, shared)
        self.rows = array("q")
        self.reserved = array("q")  # time_us, delta, segment address or -1 (interleaved)

    def made_from_rows(self) -> tuple[Any, ...]:
        """The Python machine's rows as the C machine hands its columns over: line, time_ns,
        action (int8), pointer, size, stream; the reserved level's times (ns), its changes
        summed from 0 (wrapping in int64, exact when `_recording`'s check passes) and each
        change's segment address (-1 for expandable segments' maps and unmaps), the
        exact sums of its growth and of its changes, and the index of its first maximum with
        that maximum and its time (ns), so no reader indexes the arrays for them."""
        table = np.frombuffer(self.rows, dtype=np.int64).reshape(-1, 6)
        pairs = np.frombuffer(self.reserved, dtype=np.int64).reshape(-1, 3)
        deltas = pairs[:, 1]
        # Each delta is below 2**63, so 32-bit halves of the sums add up exactly in int64.
        growth = deltas[deltas > 0]
        grown_bytes = (int((growth >> 32).sum()) << 32) + int((growth & 0xFFFFFFFF).sum())
        net_bytes = (int((deltas >> 32).sum()) << 32) + int((deltas & 0xFFFFFFFF).sum())
        levels = np.cumsum(deltas, dtype=np.int64)
        peak_at = int(np.argmax(levels)) if len(levels) else -1
        return (
            np.ascontiguousarray(table[:, 0]),
            table[:, 1] * 1000,  # |span_us| <= MAX_TIME_US: fits int64
            table[:, 2].astype(np.int8),
            *(np.ascontiguousarray(table[:, k]) for k in (3, 4, 5)),
            pairs[:, 0] * 1000,
            levels,
            np.ascontiguousarray(pairs[:, 2]),
            grown_bytes,
            net_bytes,
            peak_at,
            int(levels[peak_at]) if peak_at >= 0 else 0,
            int(pairs[peak_at, 0]) * 1000 if peak_at >= 0 else 0,
        )

    def _next_line(self) -> int:
        self.count += 1
        if self.count > self.shared.max_entries:
            raise SnapshotError(f"a device has more than {self.shared.max_entries:,} trace entries")
        return self.count

    def skip(self, line: int, reason: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_KEPT_SKIPS:
            self.skipped.append((line, reason))

    def other(self, item: Any) -> None:
        self.skip(self._next_line(), not_an_entry(item))

    def _skip_field(self, line: int, action: str, values: tuple[Any, ...]) -> None:
        for key, value in zip(("addr", "size", "stream", "time_us"), values, strict=True):
            if type(value) is not int or not 0 <= value < INT64_END:
                big = (type(value) is int and value > 0) or type(value) is BigInt
                why = "is past 2**63 - 1" if big else "is not a non-negative integer"
                reason = f"{action} entry: {key} {excerpt(value)} {why}"
                self.skip(line, reason)
                return

    def entry(self, item: dict[Any, Any]) -> None:
        shared = self.shared
        self.count = line = self.count + 1
        if line > shared.max_entries:
            raise SnapshotError(f"a device has more than {shared.max_entries:,} trace entries")
        if shared.want_lines and line in shared.want_lines:
            self.keep_frames(line, item.get("frames"))
        if self.first_keys is None:
            self.first_keys = list(item)
        action = item["action"]
        if type(action) is not str:
            self.skip(line, "entry has no action")
            return
        time_us: Any = item.get("time_us")
        if shared.first_us is None and type(time_us) is int and 0 <= time_us <= MAX_TIME_US:
            shared.first_us = time_us
            shared.day_start_us = time_us - time_us % DAY_US
        kind = _TRACKED.get(action)
        if kind is None:
            return
        # Any: each is checked to be an int just below, once, in the loop.
        address: Any = item.get("addr", 0)
        size: Any = item.get("size")
        stream: Any = item.get("stream")
        if not (
            type(address) is int
            and type(size) is int
            and type(stream) is int
            and type(time_us) is int
            and 0 <= address < INT64_END
            and 0 <= size < INT64_END
            and 0 <= stream < INT64_END
            and 0 <= time_us < INT64_END
        ):
            self._skip_field(line, action, (address, size, stream, time_us))
            return
        if time_us > MAX_TIME_US:
            past = f"time_us {time_us} is past year 2262 (int64 nanoseconds)"
            self.skip(line, f"{action} entry: {past}")
            return
        span_us = time_us - shared.day_start_us  # may be negative: a time before the first's day
        if kind == 0:
            self.live[address] = size
        elif kind == 1:
            if self.live.pop(address, None) is None:
                self.pre.append((address, size, stream))
        elif kind == 2:
            address = 0
            free: Any = item.get("device_free")
            free_ok = type(free) is int and 0 <= free < INT64_END
            self.ooms.append((line, size, free if free_ok else None))
        else:
            # cudaMalloc's and cudaFree's segments, not expandable segments' maps
            placed = address if action in ("segment_alloc", "segment_free") else -1
            self.reserved.extend((span_us, size if kind == 3 else -size, placed))
            return
        self.rows.extend((line, span_us, _ACTIONS[kind], address, size, stream))


def not_an_entry(item: Any) -> str:
    if item is DROPPED or (type(item) is dict and DROPPED in item):
        return "entry is the same object as an earlier entry (a snapshot never shares one)"
    if type(item) is dict:
        return "entry has no action"
    return f"entry is a {type(item).__name__}, not a dict"


def frames_of(frames: Any) -> list[Frame]:
    found = []
    for frame in frames[:MAX_FRAMES] if type(frames) is list else []:
        if type(frame) is not dict:
            continue
        filename, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        number = count_or_none(line)
        if type(filename) is str and number is not None and type(name) is str:
            found.append(Frame(filename, number, name))
    return found
