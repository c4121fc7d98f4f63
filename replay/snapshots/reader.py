"""PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`) read as allocation logs.

Each device's `device_traces[N]` becomes one source of an `AllocationLog`, named
`<file>#dev<N>`, with these rules:

- `alloc` is an allocate and `free_completed` a free. Not `free_requested`: that is when Python
  let the tensor go; the block is reusable only once the stream's pending work is done, at
  `free_completed`, which is what the allocator (and so a replay through another one) sees.
- `oom` is a logged allocate failure (its `device_free` is kept in the `Recording`).
- An allocation made before recording began (a `free_completed` of an address with no `alloc`
  before it, or a block still active in `segments` at dump time with no `alloc` in the trace)
  is placed at the start of the log with line 0, and counted, so a partial trace (recording
  started late, or `max_entries` was reached) shows as such.
- `segment_alloc`/`segment_map` minus `segment_free`/`segment_unmap` is what PyTorch's
  allocator reserved; working back from the segments held at dump time gives its level at the
  start. There are no thread ids (thread 0); streams keep their ids. `line` is the 1-based
  entry number in `device_traces[N]`.
- Fields PyTorch writes as ints are read only as ints (`addr`, `size`, `stream`, `time_us`:
  0 <= value < 2**63, and `time_us` within 292 years of the first entry's day, so every time
  in nanoseconds fits int64); an entry with a value of another type is skipped, counted and
  named, never read as a different size. Sums are Python integers, checked against 2**63.

A pickle can run any code while it loads, and snapshots come from other machines: the reader
(`pickle_machine.py`) runs the pickle machine itself, admits only the plain data a snapshot
holds, and turns each trace entry into column values as soon as it is complete (no object
tree of the whole file); see docs/hostile-input.md for the bounds.
"""

from __future__ import annotations

import os
import zlib
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..logs.events import (
    ALLOCATE,
    ALLOCATE_FAILURE,
    FREE,
    LineRef,
    OomEvent,
    Recording,
    SkippedRow,
)
from .budget import SnapshotBudget, budget_for
from .frames import Frame
from .native import device_segments_of, restricted_pickle
from .pickle_machine import (
    DROPPED,
    MAX_BYTES_ENV,
    BigInt,
    RestrictedPickle,
    SnapshotError,
    SnapshotRefused,
    excerpt,
)
from .release_range import ReleaseRange, snapshot_releases
from .segments import (
    INT64_END,
    DeviceSegments,
    count_or_none,
    no_history_message,
    plain_settings,
)
from .snapshot_file import (
    GZIP_MAGIC,
    GzipStream,
    capped_read,
    max_bytes_from_env,
    small_file_read,
)

__all__ = ["DevicePart", "Frame", "SnapshotError", "SnapshotRefused", "read_snapshot"]

MAX_TRACE_ENTRIES = 20_000_000  # per device: 100x PyTorch's default max_entries (sys.maxsize
# is its default, but users set 100,000 to a few million)
MAX_TOTAL_TRACE_ENTRIES = 50_000_000  # all devices, a shared list once per device using it
MAX_HELD_OBJECTS = 16_000_000  # objects held at once besides the trace: segments, blocks, frames
# (the three are the most for any file; a smaller one may make fewer: budget.py)
MAX_KEPT_SKIPS = 100
MAX_FRAMES = 10_000  # frames kept for the one entry `entry_frames` asks about
DAY_US = 86_400 * 10**6
# Bounds that keep every sum and time in int64 (docs/hostile-input.md).
MAX_RESERVED_BYTES = 1 << 62
MAX_TIME_US = (2**63 - 1) // 1000  # so any time_ns, and any difference of two, fits int64

_TRACKED = {"alloc": 0, "free_completed": 1, "oom": 2, "segment_alloc": 3, "segment_map": 3,
            "segment_free": 4, "segment_unmap": 4}  # fmt: skip
_ACTIONS = {0: ALLOCATE, 1: FREE, 2: ALLOCATE_FAILURE}


@dataclass
class DevicePart:
    """One device's events (numpy columns, without `file_index`) and what was skipped."""

    columns: dict[str, np.ndarray]
    skipped: list[SkippedRow]
    skipped_count: int
    recording: Recording


class _Shared:
    """What every trace list of one file shares: the first entry's day, the caps."""

    def __init__(self, want_lines: frozenset[int], budget: SnapshotBudget) -> None:
        self.first_us: int | None = None
        self.day_start_us = 0
        self.budget = budget  # the bounds of this file (budget.py)
        self.max_entries = budget.trace_entries  # what both machines read
        self.want_lines = want_lines  # entries whose frames are kept (entries_frames)
        self.sink_limits = (MAX_KEPT_SKIPS, MAX_TIME_US, DAY_US)  # for the C sink


class _TraceList:
    """What one list's trace entries came to: counts, what was skipped, the blocks live at
    the end and those freed that were allocated before recording, OOMs, the frames kept, and
    `made`, the finished columns. The C machine fills it as it reads; `_TraceRows` is the
    Python machine's sink, which fills the same fields."""

    __slots__ = ("count", "first_keys", "frames", "live", "made", "ooms", "pre", "shared",
                 "skipped", "skipped_count", "target")  # fmt: skip

    def __init__(self, target: list[Any], shared: _Shared) -> None:
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
        # Line, time_ns, action, pointer, size, stream columns; the reserved level's times
        # and levels; its sums and peak (`_TraceRows.made_from_rows` says what each is).
        self.made: tuple[Any, ...] = ()

    def keep_frames(self, line: int, frames: Any) -> None:
        """Keep the frames of entry `line` (one `entries_frames` asks about)."""
        found = _frames_of(frames)
        if found:
            self.frames[line] = found


class _TraceRows(_TraceList):
    """The Python machine's sink for one list: each trace entry as it streams past becomes a
    row (line, time_us, action, address, size, stream, interleaved int64) or a reserved-bytes
    change, made into the columns the C machine makes at the end (`made_from_rows`)."""

    __slots__ = ("reserved", "rows")

    def __init__(self, target: list[Any], shared: _Shared) -> None:
        super().__init__(target, shared)
        self.rows = array("q")
        self.reserved = array("q")  # time_us, delta (interleaved)

    def made_from_rows(self) -> tuple[Any, ...]:
        """The Python machine's rows as the C machine hands its columns over: line, time_ns,
        action (int8), pointer, size, stream; the reserved level's times (ns) and changes
        summed from 0 (wrapping in int64, exact when `_recording`'s check passes), the
        exact sums of its growth and of its changes, and the index of its first maximum with
        that maximum and its time (ns), so no reader indexes the arrays for them."""
        table = np.frombuffer(self.rows, dtype=np.int64).reshape(-1, 6)
        pairs = np.frombuffer(self.reserved, dtype=np.int64).reshape(-1, 2)
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
        self.skip(self._next_line(), _not_an_entry(item))

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
            self.reserved.extend((span_us, size if kind == 3 else -size))
            return
        self.rows.extend((line, span_us, _ACTIONS[kind], address, size, stream))


def _not_an_entry(item: Any) -> str:
    if item is DROPPED or (type(item) is dict and DROPPED in item):
        return "entry is the same object as an earlier entry (a snapshot never shares one)"
    if type(item) is dict:
        return "entry has no action"
    return f"entry is a {type(item).__name__}, not a dict"


def _frames_of(frames: Any) -> list[Frame]:
    found = []
    for frame in frames[:MAX_FRAMES] if type(frames) is list else []:
        if type(frame) is not dict:
            continue
        filename, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        number = count_or_none(line)
        if type(filename) is str and number is not None and type(name) is str:
            found.append(Frame(filename, number, name))
    return found


def _load(
    path: Path, max_bytes: int | None, want_lines: frozenset[int] = frozenset()
) -> tuple[dict[str, Any], RestrictedPickle, _Shared]:
    """The snapshot's top-level dict, its trace entries handed to `_TraceList`s as read."""
    name = str(path)
    # One open, unbuffered: gzip and the machine read in chunks of their own.
    with path.open("rb", buffering=0) as file:
        budget = budget_for(
            os.fstat(file.fileno()).st_size,  # the module's caps read now: tests lower them
            max_pickle_bytes=max_bytes_from_env() if max_bytes is None else max_bytes,
            vouched=max_bytes is not None or bool(os.environ.get(MAX_BYTES_ENV)),
            max_held_objects=MAX_HELD_OBJECTS,
            max_trace_entries=MAX_TRACE_ENTRIES,
            max_total_entries=MAX_TOTAL_TRACE_ENTRIES,
        )
        shared = _Shared(want_lines, budget)
        limit = budget.pickle_bytes
        try:
            read = small_file_read(file, limit)
            if read is None:
                gzipped = file.read(2) == GZIP_MAGIC
                file.seek(0)
                read = capped_read((GzipStream(file) if gzipped else file).read, limit, name)
            machine_type = restricted_pickle()  # the C machine, or the reference in Python
            # The C machine fills a list's columns itself; the Python one hands it entries.
            sink_type: Callable[[list[Any], _Shared], Any] = (
                _TraceRows if machine_type is RestrictedPickle else _TraceList
            )
            machine = machine_type(
                read,
                name,
                max_bytes=limit,
                # entry_frames keeps every frames list (one may be shared with the entry
                # asked about); the file was read once already within the usual cap.
                max_cells=budget.held_objects * (4 if want_lines else 1),
                new_sink=lambda target: sink_type(target, shared),
                keep_frames=bool(want_lines),
            )
            data = machine.load()
        except SnapshotError as err:
            said = str(err) if str(err).startswith(name) else f"{name}: {err}"
            raise type(err)(budget.explained(said)) from None
        except (EOFError, OSError, ValueError, zlib.error) as err:  # a damaged gzip stream
            raise SnapshotError(f"{name}: not a readable snapshot ({err})") from None
    if type(data) is not dict or type(data.get("device_traces")) is not list:
        raise SnapshotError(f"{name}: a pickle, but not a memory snapshot (no device_traces)")
    return data, machine, shared


def read_snapshot(path: Path, *, max_bytes: int | None = None) -> list[DevicePart]:
    """Every device of the snapshot that holds a trace or segments, in device order."""
    data, machine, shared = _load(path, max_bytes)
    traces: list[Any] = data["device_traces"]
    settings = plain_settings(data.get("allocator_settings"))
    budget = shared.budget
    segments = device_segments_of(machine)(data.get("segments"), len(traces), budget.held_objects)
    if segments is None:
        said = f"{path}: the segments hold more than {budget.held_objects:,} blocks"
        raise SnapshotError(budget.explained(f"{said}, counting a shared one at each reference"))
    releases = snapshot_releases(
        data, [getattr(s, "first_keys", None) for s in machine.sinks.values()]
    )
    total_entries = 0
    parts = []
    uses: dict[int, int] = {}  # devices per trace list (a list may be shared)
    for trace in traces:
        if type(trace) is list:
            uses[id(trace)] = uses.get(id(trace), 0) + 1
    for device, trace in enumerate(traces):
        if type(trace) is not list:
            continue
        segment_count, end_bytes, active = segments.get(device, _NO_SEGMENTS)
        entries = machine.sinks.get(id(trace))
        # A list shared between devices is read once but made into columns per device.
        total_entries += entries.count if isinstance(entries, _TraceList) else len(trace)
        if total_entries > budget.total_trace_entries:
            said = f"{path}: the devices hold more than {budget.total_trace_entries:,} trace"
            said += " entries in all, counting a list shared by several devices once for each"
            raise SnapshotError(budget.explained(said))
        if not (trace or segment_count or entries):
            continue
        uses[id(trace)] -= 1
        reader = _DeviceTrace(f"{path}#dev{device}", device, shared, releases)
        last_use = not uses[id(trace)]
        parts.append(reader.read(trace, entries, end_bytes, active, settings, last_use))
    if not parts:
        raise SnapshotError(f"{path}: the snapshot holds no trace (was _record_memory_history on?)")
    if total_entries == 0:  # segments only: what was reserved at the dump, not how it got there
        raise SnapshotError(
            no_history_message(path, [segments.get(d, _NO_SEGMENTS) for d in range(len(traces))])
        )
    return parts


_NO_SEGMENTS: DeviceSegments = (0, 0, [])


class _DeviceTrace:
    """One device's streamed entries, the items kept before them, and its segments, made
    into event columns and a `Recording`."""

    def __init__(self, source: str, device: int, shared: _Shared, releases: ReleaseRange) -> None:
        self.source, self.device, self.shared = source, device, shared
        self.releases = releases

    def read(
        self,
        trace: list[Any],
        entries: Any,
        end_bytes: int,
        active: list[tuple[int, int, int]],
        settings: dict[str, Any],
        last_use: bool,
    ) -> DevicePart:
        """`end_bytes`: what the device's segments held at dump time; `active`: (address,
        requested size, stream) of each block active then (`segments.device_segments`)."""
        stream = entries if isinstance(entries, _TraceList) else _TraceRows([], self.shared)
        made = list(stream.made_from_rows() if isinstance(stream, _TraceRows) else stream.made)
        if last_use:
            stream.made = ()  # the columns below hold the buffers, and nothing else
        # Items appended before the first entry (lines 1..len(trace)) are not entries: the
        # first few named, the rest only counted (15 million memo references to one object
        # were 15 million reasons, 2.9 GB).
        first = enumerate(trace[:MAX_KEPT_SKIPS], start=1)
        skipped = [(line, _not_an_entry(item)) for line, item in first]
        skipped_count = len(trace) + stream.skipped_count
        kept = (skipped + stream.skipped)[:MAX_KEPT_SKIPS]
        live = stream.live  # blocks active at dump time that no trace entry left live:
        pre = stream.pre + [block for block in active if block[0] not in live]
        columns: dict[str, np.ndarray] = {}
        first_ns = 0
        for name, k, dtype in _ROW_COLUMNS:
            column = np.frombuffer(made[k], dtype=dtype)  # the machine's buffer, no copy
            made[k] = None
            if name == "time_ns" and len(column) and pre:
                first_ns = int(column[0])
            if pre:  # column by column: at most one column is held twice at a time
                column = np.concatenate((_pre_column(pre, name, first_ns, dtype), column))
            elif not last_use:  # a list shared by devices: each device's columns its own
                column = column.copy()
            columns[name] = column
            if name == "line":
                columns["thread"] = np.zeros(len(column), dtype=np.int64)
        recording = self._recording(stream, made[len(_ROW_COLUMNS):], last_use,
                                    len(trace) + stream.count - len(stream.target),
                                    len(pre), end_bytes, settings)  # fmt: skip
        rows = [SkippedRow(self.source, line, reason) for line, reason in kept]
        return DevicePart(columns, rows, skipped_count, recording)

    def _recording(
        self,
        stream: _TraceList,
        made: list[Any],
        last_use: bool,
        trace_entries: int,
        pre_count: int,
        end_bytes: int,
        settings: dict[str, Any],
    ) -> Recording:
        times_ns, changes, grown_bytes, net_bytes, peak_at, peak_level, peak_time_ns = made
        start_bytes = max(0, end_bytes - net_bytes)
        # Every level lies in [end - grown, start + grown]: below 2**62, no int64 sum wraps.
        if max(end_bytes, start_bytes) + grown_bytes >= MAX_RESERVED_BYTES:
            raise SnapshotError(
                f"{self.source}: the segments add up to more than 2**62 bytes; not a snapshot "
                "of a real device"
            )
        times = np.frombuffer(times_ns, dtype=np.int64)
        levels = np.frombuffer(changes, dtype=np.int64)  # the changes summed from 0
        if start_bytes or not last_use:  # else the machine's sums are the levels already
            levels = levels + start_bytes
        peak_bytes = max(start_bytes, start_bytes + peak_level if peak_at >= 0 else 0)
        conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
        where = self.source
        return Recording(
            source=self.source,
            device=self.device,
            alloc_conf=conf if isinstance(conf, str) else "",
            allocator_settings=dict(settings),
            trace_entries=trace_entries,
            pre_recording_allocations=pre_count,
            start_reserved_bytes=start_bytes,
            peak_reserved_bytes=peak_bytes,
            peak_reserved_time_ns=peak_time_ns
            if peak_at >= 0 and peak_bytes > start_bytes
            else None,
            reserved_time_ns=times if last_use else times.copy(),
            reserved_bytes=levels,
            ooms=[OomEvent(LineRef(where, line), size, free) for line, size, free in stream.ooms],
            written_by=self.releases,
        )


# The event columns in the order the machines hand them over (`_TraceRows.made_from_rows`).
_ROW_COLUMNS = (
    ("line", 0, np.int64),
    ("time_ns", 1, np.int64),
    ("action", 2, np.int8),
    ("pointer", 3, np.uint64),  # every value is in [0, 2**63)
    ("size_bytes", 4, np.int64),
    ("stream", 5, np.uint64),
)


def _pre_column(
    pre: list[tuple[int, int, int]], name: str, first_ns: int, dtype: Any
) -> np.ndarray:
    """Column `name` of the allocations made before recording began (line 0, at the time
    of the first entry)."""
    if name == "line":
        return np.zeros(len(pre), dtype=dtype)
    if name == "time_ns":
        return np.full(len(pre), first_ns, dtype=dtype)
    if name == "action":
        return np.full(len(pre), ALLOCATE, dtype=dtype)
    k = {"pointer": 0, "size_bytes": 1, "stream": 2}[name]
    return np.array([row[k] for row in pre], dtype=dtype)


def entry_frames(where: LineRef, *, max_bytes: int | None = None) -> list[Frame]:
    """The frames recorded with the trace entry at `where` (a snapshot source `FILE#devN` and
    its 1-based entry number), innermost first; [] when none were recorded or `where` is not
    a snapshot's entry. Read again from the file, within the same caps as the log."""
    return entries_frames(where.source, [where.line], max_bytes=max_bytes).get(where.line, [])


def entries_frames(
    source: str, lines: Iterable[int], *, max_bytes: int | None = None
) -> dict[int, list[Frame]]:
    """The frames of several trace entries of one snapshot source (`FILE#devN`), by 1-based
    entry number, the file read once; entries with no frames are left out."""
    path_text, sep, device_text = source.rpartition("#dev")
    wanted = frozenset(line for line in lines if line >= 1)
    if not sep or not device_text.isdigit() or not wanted:
        return {}
    data, machine, _ = _load(Path(path_text), max_bytes, wanted)
    traces = data["device_traces"]
    device = int(device_text)
    trace = traces[device] if device < len(traces) else None
    entries = machine.sinks.get(id(trace)) if type(trace) is list else None
    return dict(entries.frames) if isinstance(entries, _TraceList) else {}
