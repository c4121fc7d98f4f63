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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..logs.events import (
    ALLOCATE,
    LineRef,
    OomEvent,
    Recording,
    SkippedRow,
)
from .budget import budget_for
from .frames import Frame
from .native import device_segments_of, restricted_pickle
from .pickle_machine import (
    MAX_BYTES_ENV,
    RestrictedPickle,
    SnapshotError,
    SnapshotRefused,
)
from .release_range import ReleaseRange, snapshot_releases
from .segments import (
    DeviceSegments,
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
from .trace_sink import MAX_KEPT_SKIPS, Shared, TraceList, TraceRows, not_an_entry

__all__ = ["DevicePart", "Frame", "SnapshotError", "SnapshotRefused", "read_snapshot"]

MAX_TRACE_ENTRIES = 20_000_000  # per device: 100x PyTorch's default max_entries (sys.maxsize
# is its default, but users set 100,000 to a few million)
MAX_TOTAL_TRACE_ENTRIES = 50_000_000  # all devices, a shared list once per device using it
MAX_HELD_OBJECTS = 16_000_000  # objects held at once besides the trace: segments, blocks, frames
# (the three are the most for any file; a smaller one may make fewer: budget.py)
# Bounds that keep every sum and time in int64 (docs/hostile-input.md).
MAX_RESERVED_BYTES = 1 << 62


@dataclass
class DevicePart:
    """One device's events (numpy columns, without `file_index`) and what was skipped."""

    columns: dict[str, np.ndarray]
    skipped: list[SkippedRow]
    skipped_count: int
    recording: Recording


def _load(
    path: Path, max_bytes: int | None, want_lines: frozenset[int] = frozenset()
) -> tuple[dict[str, Any], RestrictedPickle, Shared]:
    """The snapshot's top-level dict, its trace entries handed to `TraceList`s as read."""
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
        shared = Shared(want_lines, budget)
        limit = budget.pickle_bytes
        try:
            read = small_file_read(file, limit)
            if read is None:
                gzipped = file.read(2) == GZIP_MAGIC
                file.seek(0)
                read = capped_read((GzipStream(file) if gzipped else file).read, limit, name)
            machine_type = restricted_pickle()  # the C machine, or the reference in Python
            # The C machine fills a list's columns itself; the Python one hands it entries.
            sink_type: Callable[[list[Any], Shared], Any] = (
                TraceRows if machine_type is RestrictedPickle else TraceList
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
        total_entries += entries.count if isinstance(entries, TraceList) else len(trace)
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

    def __init__(self, source: str, device: int, shared: Shared, releases: ReleaseRange) -> None:
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
        stream = entries if isinstance(entries, TraceList) else TraceRows([], self.shared)
        made = list(stream.made_from_rows() if isinstance(stream, TraceRows) else stream.made)
        if last_use:
            stream.made = ()  # the columns below hold the buffers, and nothing else
        # Items appended before the first entry (lines 1..len(trace)) are not entries: the
        # first few named, the rest only counted (15 million memo references to one object
        # were 15 million reasons, 2.9 GB).
        first = enumerate(trace[:MAX_KEPT_SKIPS], start=1)
        skipped = [(line, not_an_entry(item)) for line, item in first]
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
        stream: TraceList,
        made: list[Any],
        last_use: bool,
        trace_entries: int,
        pre_count: int,
        end_bytes: int,
        settings: dict[str, Any],
    ) -> Recording:
        times_ns, changes, addresses, grown_bytes, net_bytes, peak_at, peak_level, peak_time_ns = (
            made
        )
        start_bytes = max(0, end_bytes - net_bytes)
        # Every level lies in [end - grown, start + grown]: below 2**62, no int64 sum wraps.
        if max(end_bytes, start_bytes) + grown_bytes >= MAX_RESERVED_BYTES:
            raise SnapshotError(
                f"{self.source}: the segments add up to more than 2**62 bytes; not a snapshot "
                "of a real device"
            )
        times = np.frombuffer(times_ns, dtype=np.int64)
        levels = np.frombuffer(changes, dtype=np.int64)  # the changes summed from 0
        places = segment_places(np.frombuffer(addresses, dtype=np.int64), levels)
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
            segment_places=places,
        )


def segment_places(addresses: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """(address, size) of each segment_alloc, and (address, -size) of each segment_free, in
    order: where the driver put each segment (replay/virtual/placement.py). `addresses`: each
    reserved change's segment address or -1; `levels`: the changes summed from 0."""
    placed = addresses >= 0
    sizes = np.diff(levels, prepend=np.int64(0))[placed]
    if not len(sizes):
        return np.zeros((0, 2), np.int64)
    return np.stack((addresses[placed], sizes), axis=1)


# The event columns in the order the machines hand them over (`TraceRows.made_from_rows`).
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
    return dict(entries.frames) if isinstance(entries, TraceList) else {}
