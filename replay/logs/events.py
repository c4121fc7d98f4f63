"""The in-memory form of an allocation log: one typed column per field, one row per event.

This is the contract between the log loader (`replay.logs.loader`), the analysis
(`replay.logs.analysis`) and the replay engine (`replay.engine`). Columns are numpy-backed
(no Python object per row) so that ten million events stay fast and small.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from hipmem._core.alloc_conf import validate_alloc_conf
from hipmem._core.skipped_input import SkippedPlace

from ..snapshots.release_range import ReleaseRange

# Values of the `action` column (int8).
ALLOCATE = 0
FREE = 1
ALLOCATE_FAILURE = 2

ACTION_NAMES = {ALLOCATE: "allocate", FREE: "free", ALLOCATE_FAILURE: "allocate failure"}

# Column name -> numpy dtype. Every AllocationLog.events frame has exactly these, in order.
COLUMNS: dict[str, str] = {
    "file_index": "int16",  # index into AllocationLog.sources
    "line": "int64",  # 1-based line number in that file (the header is line 1)
    "thread": "int64",  # OS thread id as logged; 0 when the log era has no Thread column
    "time_ns": "int64",  # nanoseconds since the first event's midnight, unwrapped past midnight
    "action": "int8",  # ALLOCATE, FREE or ALLOCATE_FAILURE
    "pointer": "uint64",  # 0 for `(nil)` / `0x0`
    "size_bytes": "int64",
    "stream": "uint64",  # 0 for the default stream (`0` or `0x0`), else the hex id
}

#: Skipped rows kept in full in `AllocationLog.skipped`; the rest are only counted.
MAX_KEPT_SKIPS = 100


@dataclass(frozen=True)
class LineRef:
    """A place in the input: file and 1-based line (header = 1). JSON: `source` and `line`."""

    source: str
    line: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}"

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "line": self.line}


@dataclass(frozen=True)
class SkippedRow:
    """A row the lenient loader could not read, kept so nothing is dropped silently."""

    source: str
    line: int
    reason: str


@dataclass(frozen=True)
class OomEvent:
    """An `oom` entry of a PyTorch snapshot: the request refused and the device's free bytes."""

    where: LineRef
    size_bytes: int
    device_free_bytes: int | None


@dataclass
class Recording:
    """What a PyTorch memory snapshot says beyond the allocation events, for one device.

    `reserved_*` is the memory PyTorch's allocator held over time (segment_alloc/segment_map
    minus segment_free/segment_unmap, from the reserved bytes at the start): the "recorded"
    figure every replayed resource is compared with.
    """

    source: str  # the log source this device's events carry (`run.pickle#dev0`)
    device: int
    alloc_conf: str  # PYTORCH_CUDA_ALLOC_CONF in force
    allocator_settings: dict[str, object]
    trace_entries: int
    pre_recording_allocations: int  # made before recording began (line 0 in the events)
    start_reserved_bytes: int
    peak_reserved_bytes: int
    peak_reserved_time_ns: int | None
    reserved_time_ns: np.ndarray  # int64: when the reserved bytes changed
    reserved_bytes: np.ndarray  # int64: the reserved bytes from then on
    ooms: list[OomEvent] = field(default_factory=list)
    written_by: ReleaseRange | None = None  # the PyTorch releases its fields allow
    # int64 (n, 2): each segment_alloc's address and size, each segment_free's address and
    # -size, in order (replay/virtual/placement.py)
    segment_places: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))

    def checked_alloc_conf(self) -> str:
        """The recorded settings, once held to PyTorch's grammar: a snapshot is input, and what
        it says is never handed to the allocator unread (PyTorch's own refusal names no file)."""
        where = f"{self.source}: the recorded allocator settings"
        return validate_alloc_conf(self.alloc_conf, where)

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "device": self.device,
            "alloc_conf": self.alloc_conf,
            "allocator_settings": self.allocator_settings,
            "trace_entries": self.trace_entries,
            "pre_recording_allocations": self.pre_recording_allocations,
            "start_reserved_bytes": self.start_reserved_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "peak_reserved_time_ns": self.peak_reserved_time_ns,
            "ooms": [
                {**o.where.as_dict(), "size_bytes": o.size_bytes, "device_free_bytes":
                 o.device_free_bytes} for o in self.ooms
            ],
            "written_by": None if self.written_by is None else self.written_by.as_dict(),
        }  # fmt: skip


@dataclass
class AllocationLog:
    """Events of one or more log files, in the order they happened (file order, then row)."""

    events: pd.DataFrame
    sources: list[str]
    skipped: list[SkippedRow] = field(default_factory=list)
    skipped_count: int = 0  # may exceed len(skipped): only the first few are kept in full
    recordings: list[Recording] = field(default_factory=list)  # one per snapshot device read

    def rename_file(self, old: str, new: str) -> None:
        """Name the file `old` as `new` everywhere the log names it (sources, skipped rows, the
        snapshot recordings and their refusals), as one name: a recording is matched to its
        events by its source."""

        def renamed(source: str) -> str:
            return new + source[len(old) :] if source.startswith(old) else source

        self.sources = [renamed(s) for s in self.sources]
        self.skipped = [replace(s, source=renamed(s.source)) for s in self.skipped]
        for recording in self.recordings:
            recording.source = renamed(recording.source)
            recording.ooms = [
                replace(o, where=replace(o.where, source=renamed(o.where.source)))
                for o in recording.ooms
            ]

    def skipped_places(self) -> list[SkippedPlace]:
        """The rows kept in `skipped`, as every command names them (`FILE:LINE`, and
        `FILE#devN:ENTRY` for a snapshot's device)."""
        return [SkippedPlace(f"{s.source}:{s.line}", s.reason) for s in self.skipped]

    def line_ref(self, event_index: int) -> LineRef:
        """Where event `event_index` (a row of `events`) stands in its file."""
        row = self.events.iloc[event_index]
        return LineRef(self.sources[int(row["file_index"])], int(row["line"]))
