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

A pickle can run any code while it loads, and snapshots come from other machines: the
unpickler here admits only the builtin containers and scalars a snapshot holds and refuses
every global by name, and reading is capped in decompressed bytes and in trace entries.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hipmem._core.byte_sizes import GiB, parse_bytes
from hipmem.replay.errors import LogFormatError
from hipmem.replay.events import (
    ALLOCATE,
    ALLOCATE_FAILURE,
    FREE,
    LineRef,
    OomEvent,
    Recording,
    SkippedRow,
)

MAX_BYTES_ENV = "HIPMEM_SNAPSHOT_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 * GiB  # decompressed pickle; a real training snapshot is a few MB
MAX_TRACE_ENTRIES = 20_000_000  # per device: bounds the per-entry work whatever sharing does
DAY_US = 86_400 * 10**6
_GZIP_MAGIC = b"\x1f\x8b"
_PICKLE_PROTO = 0x80  # protocol 2+ pickles (PyTorch writes 4) start with PROTO


class SnapshotError(LogFormatError):
    """A snapshot cannot be read; the message names the file and what is wrong."""


class SnapshotRefused(SnapshotError):
    """The pickle asks for a global (code), which a snapshot never needs."""


def is_snapshot(path: Path) -> bool:
    """True when the file (plain or gzip) starts like a pickle rather than a CSV."""
    with path.open("rb") as file:
        head = file.read(2)
    if head == _GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as file:
                head = file.read(1)
        except (OSError, EOFError):
            return False
    return bool(head) and head[0] == _PICKLE_PROTO


def max_bytes_from_env() -> int:
    """The decompressed-size cap: HIPMEM_SNAPSHOT_MAX_BYTES (byte grammar), else 2 GiB."""
    text = os.environ.get(MAX_BYTES_ENV)
    return DEFAULT_MAX_BYTES if not text else parse_bytes(text, name=MAX_BYTES_ENV)


class _CappedReader(io.RawIOBase):
    """Reads from `raw`, refusing to hand out more than `limit_bytes` in total."""

    def __init__(self, raw: Any, limit_bytes: int, name: str) -> None:
        self._raw, self._left, self._limit, self._name = raw, limit_bytes, limit_bytes, name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._raw.read(min(len(view), self._left + 1))
        if len(data) > self._left:
            raise SnapshotError(
                f"{self._name}: more than {self._limit:,} bytes once decompressed "
                f"(raise {MAX_BYTES_ENV} if this snapshot is genuine)"
            )
        self._left -= len(data)
        view[: len(data)] = data
        return len(data)


class _SnapshotUnpickler(pickle.Unpickler):
    """Builds only dicts, lists, tuples, sets, strings, bytes, numbers, bools and None."""

    def __init__(self, file: Any, name: str) -> None:
        super().__init__(file)
        self._name = name

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotRefused(
            f"{self._name}: refusing to load the global {module}.{name}: a memory snapshot "
            "holds only plain data, so this pickle is not one (or was tampered with)"
        )


def load_snapshot_dict(path: Path, *, max_bytes: int | None = None) -> dict[str, Any]:
    """The snapshot's top-level dict, loaded safely and within the size cap."""
    name = str(path)
    limit = max_bytes_from_env() if max_bytes is None else max_bytes
    opener = gzip.open if path.open("rb").read(2) == _GZIP_MAGIC else open
    try:
        with opener(path, "rb") as raw:
            reader = io.BufferedReader(_CappedReader(raw, limit, name))
            data = _SnapshotUnpickler(reader, name).load()
    except SnapshotError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, OSError, IndexError) as err:
        raise SnapshotError(f"{name}: not a readable snapshot pickle ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("device_traces"), list):
        raise SnapshotError(f"{name}: a pickle, but not a memory snapshot (no device_traces)")
    return data


@dataclass
class DevicePart:
    """One device's events (numpy columns, without `file_index`) and what was skipped."""

    columns: dict[str, np.ndarray]
    skipped: list[SkippedRow]
    skipped_count: int
    recording: Recording


def read_snapshot(path: Path, *, max_bytes: int | None = None) -> list[DevicePart]:
    """Every device of the snapshot that holds a trace or segments, in device order."""
    data = load_snapshot_dict(path, max_bytes=max_bytes)
    traces: list[Any] = data["device_traces"]
    raw_segments = data.get("segments")
    segments: list[Any] = raw_segments if isinstance(raw_segments, list) else []
    settings = data.get("allocator_settings")
    settings = settings if isinstance(settings, dict) else {}
    first_us = _first_time_us(traces)
    parts = []
    for device, trace in enumerate(traces):
        device_segments = [s for s in segments if isinstance(s, dict) and s.get("device") == device]
        if not isinstance(trace, list) or not (trace or device_segments):
            continue
        if len(trace) > MAX_TRACE_ENTRIES:
            raise SnapshotError(
                f"{path}: device {device} has {len(trace):,} trace entries, more than "
                f"{MAX_TRACE_ENTRIES:,}"
            )
        day_start_us = first_us - first_us % DAY_US
        reader = _DeviceTrace(f"{path}#dev{device}", device, day_start_us)
        parts.append(reader.read(trace, device_segments, settings))
    if not parts:
        raise SnapshotError(f"{path}: the snapshot holds no trace (was _record_memory_history on?)")
    return parts


def _first_time_us(traces: list[Any]) -> int:
    for trace in traces:
        for entry in trace if isinstance(trace, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("time_us"), int):
                return int(entry["time_us"])
    return 0


class _DeviceTrace:
    """Turns one device's trace entries into event rows, one pass."""

    def __init__(self, source: str, device: int, day_start_us: int) -> None:
        self.source, self.device, self.day_start_us = source, device, day_start_us
        self.rows: list[tuple[int, int, int, int, int, int]] = []  # line time action ptr size strm
        self.pre: list[tuple[int, int, int]] = []  # (pointer, size, stream) before recording
        self.live: dict[int, int] = {}
        self.reserved: list[tuple[int, int]] = []  # (time_ns, delta)
        self.ooms: list[OomEvent] = []
        self.skipped: list[SkippedRow] = []
        self.skipped_count = 0

    def read(
        self, trace: list[Any], segments: list[dict[str, Any]], settings: dict[str, Any]
    ) -> DevicePart:
        for line, entry in enumerate(trace, start=1):
            self._entry(line, entry)
        self._blocks_active_at_dump(segments)
        first_ns = self.rows[0][1] if self.rows else 0
        rows = [(0, first_ns, ALLOCATE, ptr, size, stream) for ptr, size, stream in self.pre]
        rows += self.rows
        return DevicePart(
            _columns(rows), self.skipped, self.skipped_count, self._recording(trace, segments,
                                                                              settings)
        )  # fmt: skip

    def _entry(self, line: int, entry: Any) -> None:
        fields = _fields(entry)
        if fields is None:
            return
        if isinstance(fields, str):
            self._skip(line, fields)
            return
        action, address, size, stream, time_us = fields
        time_ns = self.time_ns(time_us)
        if action == "alloc":
            self.rows.append((line, time_ns, ALLOCATE, address, size, stream))
            self.live[address] = size
        elif action == "free_completed":
            if self.live.pop(address, None) is None:
                self.pre.append((address, size, stream))
            self.rows.append((line, time_ns, FREE, address, size, stream))
        elif action == "oom":
            self.rows.append((line, time_ns, ALLOCATE_FAILURE, 0, size, stream))
            free = entry.get("device_free")
            where = LineRef(self.source, line)
            self.ooms.append(OomEvent(where, size, free if isinstance(free, int) else None))
        elif action in ("segment_alloc", "segment_map"):
            self.reserved.append((time_ns, size))
        elif action in ("segment_free", "segment_unmap"):
            self.reserved.append((time_ns, -size))

    def _skip(self, line: int, reason: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < 100:
            self.skipped.append(SkippedRow(self.source, line, reason))

    def _blocks_active_at_dump(self, segments: list[dict[str, Any]]) -> None:
        for segment in segments:
            stream = segment.get("stream")
            for block in segment.get("blocks") or []:
                if not isinstance(block, dict) or not str(block.get("state", "")).startswith(
                    "active"
                ):
                    continue
                address, size = _count(block.get("address")), _count(block.get("requested_size"))
                if address is None or size is None or address in self.live:
                    continue
                self.pre.append((address, size, _count(stream) or 0))

    def _recording(
        self, trace: list[Any], segments: list[dict[str, Any]], settings: dict[str, Any]
    ) -> Recording:
        end_bytes = sum(s["total_size"] for s in segments if _is_count(s.get("total_size")))
        times = np.array([t for t, _ in self.reserved], dtype=np.int64)
        deltas = np.array([d for _, d in self.reserved], dtype=np.int64)
        start_bytes = max(0, end_bytes - int(deltas.sum()))
        levels = start_bytes + np.cumsum(deltas, dtype=np.int64)
        peak_at = int(np.argmax(levels)) if len(levels) else -1
        peak_bytes = max(start_bytes, int(levels[peak_at]) if peak_at >= 0 else 0)
        conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
        return Recording(
            source=self.source,
            device=self.device,
            alloc_conf=conf if isinstance(conf, str) else "",
            allocator_settings=dict(settings),
            trace_entries=len(trace),
            pre_recording_allocations=len(self.pre),
            start_reserved_bytes=start_bytes,
            peak_reserved_bytes=peak_bytes,
            peak_reserved_time_ns=(
                int(times[peak_at]) if peak_at >= 0 and peak_bytes > start_bytes else None
            ),
            reserved_time_ns=times,
            reserved_bytes=levels,
            ooms=self.ooms,
        )

    def time_ns(self, time_us: int) -> int:
        return (time_us - self.day_start_us) * 1000


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _count(value: Any) -> int | None:
    """`value` when it is a non-negative int64 (not a bool), else None."""
    return int(value) if _is_count(value) else None


_TRACKED = {"alloc", "free_completed", "oom", "segment_alloc", "segment_map", "segment_free",
            "segment_unmap"}  # fmt: skip


def _fields(entry: Any) -> tuple[str, int, int, int, int] | str | None:
    """(action, address, size, stream, time_us) of an entry, why it cannot be read, or None
    for the entries the allocator's view does not need (free_requested, snapshot, ...)."""
    if not isinstance(entry, dict):
        return f"entry is a {type(entry).__name__}, not a dict"
    action = entry.get("action")
    if not isinstance(action, str):
        return "entry has no action"
    if action not in _TRACKED:
        return None
    keys = ("addr", "size", "stream", "time_us")
    raw = [entry.get(key, 0 if key == "addr" else None) for key in keys]  # oom has no addr
    address, size, stream, time_us = (_count(value) for value in raw)
    if address is None or size is None or stream is None or time_us is None:
        key, value = next((k, v) for k, v in zip(keys, raw, strict=True) if _count(v) is None)
        return f"{action} entry: {key} {value!r} is not a non-negative integer"
    return action, address, size, stream, time_us


def _columns(rows: list[tuple[int, int, int, int, int, int]]) -> dict[str, np.ndarray]:
    table = np.array(rows, dtype=np.uint64).reshape(-1, 6) if rows else np.zeros((0, 6), np.uint64)
    return {
        "line": table[:, 0].astype(np.int64),
        "thread": np.zeros(len(rows), dtype=np.int64),
        "time_ns": table[:, 1].astype(np.int64),
        "action": table[:, 2].astype(np.int8),
        "pointer": table[:, 3].astype(np.uint64),
        "size_bytes": table[:, 4].astype(np.int64),
        "stream": table[:, 5].astype(np.uint64),
    }


@dataclass(frozen=True)
class Frame:
    """One stack frame PyTorch recorded with a trace entry (`context` and `stacks` on)."""

    filename: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line} in {self.name}"


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
    if not sep or not device_text.isdigit():
        return {}
    data = load_snapshot_dict(Path(path_text), max_bytes=max_bytes)
    traces = data["device_traces"]
    device = int(device_text)
    trace = traces[device] if device < len(traces) else None
    if not isinstance(trace, list):
        return {}
    found: dict[int, list[Frame]] = {}
    for line in lines:
        if 1 <= line <= len(trace):
            entry = trace[line - 1]
            frames = _frames(entry.get("frames") if isinstance(entry, dict) else None)
            if frames:
                found[line] = frames
    return found


def _frames(frames: Any) -> list[Frame]:
    found = []
    for frame in frames if isinstance(frames, list) else []:
        if not isinstance(frame, dict):
            continue
        filename, line, name = frame.get("filename"), _count(frame.get("line")), frame.get("name")
        if isinstance(filename, str) and line is not None and isinstance(name, str):
            found.append(Frame(filename, line, name))
    return found


def user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame outside PyTorch's own Python (`.../torch/...`): the line of the
    program that asked; the innermost frame when all are PyTorch's."""
    for frame in frames:
        if "/torch/" not in frame.filename.replace("\\", "/"):
            return frame
    return frames[0] if frames else None
