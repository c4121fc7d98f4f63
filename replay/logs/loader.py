"""Load RMM/hipMM allocation logs (every format era, plain or gzip) into an `AllocationLog`.

The log is CSV written by RMM's `logging_resource_adaptor`:

    Thread,Time,Action,Pointer,Size,Stream          (from mid-2020)
    Time,Action,Pointer,Size,Stream                 (before: no Thread column)

Time is time of day, `HH:MM:SS.ffffff` (from 21.06) or `HH:MM:SS:ffffff` (before), and wraps
at midnight; Action is `allocate`, `free` or `allocate failure`; Pointer is hex, `(nil)` or
`0x0`; Stream is `0`, `0x0` or hex. rmm's Python side writes one `<name>.dev<N>.csv` per device.

The parts, one file each: which files a log is (replay/logs/log_files.py); opening them, a
damaged gzip read up to its damage (gzip_salvage.py); the header, which says the file's era
(csv_header.py); the two read paths (csv_reading.py): pyarrow's multithreaded CSV reader
with typed columns, and on any trouble a tolerant read that keeps every line's number; and
the column parsers (csv_columns.py), which convert each record batch on a thread pool
straight into columns allocated by arrow's allocator. This module puts them together.

How it stays fast: pyarrow's multithreaded CSV reader does the parsing, with Thread and Size
read as int64, Time as time64 and the text columns dictionary-encoded, so the hex parsing
(arrow's own integer cast) runs over each chunk's distinct values only.

How it stays honest about bad rows: a row that cannot be read is skipped and recorded with
its line number (header = line 1), whichever path read it; with `strict=True` the first one
is an error instead.

Times are unwrapped per file: whenever time of day jumps back by more than 12 hours the day
advances (and a jump forward by more than 12 hours steps back a day, for a late row that
was stamped before midnight). `time_ns` counts from midnight of the file's first day.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from hipmem._core.freed_memory import release_freed_memory
from hipmem._core.progress import ProgressCallback
from hipmem._core.skipped_input import NothingToAnswer

from ..errors import LogFormatError, ReplayUsageError
from ..snapshots.reader import read_snapshot
from ..snapshots.snapshot_file import is_snapshot
from .bounds import MAX_PLAUSIBLE_BYTES, MAX_TOTAL_BYTES
from .csv_columns import Int64Array, convert_columns, unwrap_midnight, why_bad
from .csv_header import read_layout
from .csv_reading import NeedsTolerantRead, SplitLines, read_fast, read_tolerant
from .events import ALLOCATE, COLUMNS, MAX_KEPT_SKIPS, AllocationLog, Recording, SkippedRow
from .gzip_salvage import open_log
from .log_files import find_log_files


class BadLogRowError(LogFormatError):
    """A row cannot be read and strict loading was asked for."""


@dataclass
class FileEvents:
    """One file's good rows as numpy columns, plus what was skipped."""

    columns: dict[str, np.ndarray]
    skipped: list[SkippedRow]
    skipped_count: int


def load_log_file(path: Path, file_index: int, *, source: str | None = None) -> FileEvents:
    """One file's rows, converted and validated; bad rows skipped with their line numbers."""
    name = source or str(path)
    with open_log(path) as stream:
        layout = read_layout(name, stream)
    try:
        table = read_fast(path, layout)
        numbers: Int64Array | None = None
        lines = SplitLines()
    except NeedsTolerantRead:
        table, numbers, lines = read_tolerant(path, layout)
    held = [table]  # handed over: convert_columns frees each column once converted
    del table
    events, bad, bad_by_column, table = convert_columns(held, layout, numbers, file_index)
    implausible = (events["size_bytes"] > MAX_PLAUSIBLE_BYTES) & ~bad
    bad |= implausible

    skipped = [SkippedRow(name, line, reason) for line, reason in lines.bad]
    bad_rows = np.flatnonzero(bad)
    for row in bad_rows[:MAX_KEPT_SKIPS]:
        line = int(events["line"][row])
        if implausible[row]:
            size = int(events["size_bytes"][row])
            why = f"size {size:,} is more than any device holds (over {MAX_PLAUSIBLE_BYTES:,})"
        else:
            why = why_bad(table, int(row), bad_by_column, len(layout.names))
        skipped.append(SkippedRow(name, line, why))
    skipped.sort(key=lambda s: s.line)
    del table
    pa.default_memory_pool().release_unused()  # arrow keeps freed memory otherwise
    release_freed_memory()  # and so does malloc: the CSV's buffers and columns

    if len(bad_rows):
        keep = ~bad
        events = {key: values[keep] for key, values in events.items()}
    unwrap_midnight(events["time_ns"])
    kept = skipped[:MAX_KEPT_SKIPS]
    if lines.damage is not None and kept[-1].line != lines.damage[0]:  # always said
        kept[-1] = SkippedRow(name, *lines.damage)
    return FileEvents(events, kept, lines.bad_count + len(bad_rows))


# --------------------------------------------------------------------------- many files


def load_log(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    strict: bool = False,
    progress: ProgressCallback | None = None,
) -> AllocationLog:
    """Load one or more log files into one `AllocationLog` (file order, then row order).

    `paths` is one path or a list of them.

    Lenient (default): rows that cannot be read are skipped, counted and kept (the first
    `MAX_KEPT_SKIPS`) with their line numbers. Strict: the first such row raises
    `BadLogRowError` naming file and line. Unreadable files (missing, empty, no header,
    `.gz` that is not gzip) raise in both modes.
    """
    # A lone path is one file, never a sequence of one-character names.
    files = find_log_files([paths] if isinstance(paths, (str, os.PathLike)) else paths)
    if len(files) > np.iinfo(np.int16).max:
        raise ReplayUsageError(f"too many log files ({len(files)}); at most 32767 at once")
    total_bytes = sum(f.stat().st_size for f in files)
    done_bytes = 0
    parts: list[FileEvents] = []
    sources: list[str] = []
    recordings: list[Recording] = []
    for path in files:
        if progress:
            progress(done_bytes, total_bytes, path.name)
        # A PyTorch snapshot is recognised by its content: one source per device it holds.
        if is_snapshot(path):
            for device in read_snapshot(path):
                device.columns["file_index"] = np.full(
                    len(device.columns["line"]), len(sources), dtype=np.int16
                )
                file_part = FileEvents(device.columns, device.skipped, device.skipped_count)
                parts.append(_checked_strict(file_part, strict))
                sources.append(device.recording.source)
                recordings.append(device.recording)
        else:
            parts.append(_checked_strict(load_log_file(path, len(sources)), strict))
            sources.append(str(path))
        done_bytes += path.stat().st_size
    if progress:
        progress(total_bytes, total_bytes, "")
    _check_total(parts, sources)
    log = _join(parts, sources)
    log.recordings = recordings
    _refuse_nothing_readable(log)
    return log


def _refuse_nothing_readable(log: AllocationLog) -> None:
    """Rows were skipped and none read (a snapshot's line-0 rows are blocks allocated before
    recording, not rows it holds): nothing to answer about, in every command."""
    if log.skipped_count and not bool((log.events["line"] > 0).any()):
        raise NothingToAnswer(log.skipped_count, log.skipped_places())


def _checked_strict(part: FileEvents, strict: bool) -> FileEvents:
    if strict and part.skipped_count:
        first = part.skipped[0]
        more = part.skipped_count - 1
        tail = f" (and {more} more bad rows)" if more else ""
        raise BadLogRowError(f"{first.source}:{first.line}: {first.reason}{tail}")
    return part


def _check_total(parts: list[FileEvents], sources: list[str]) -> None:
    """Every sum of sizes fits int64 when all allocations together do (sizes are >= 0)."""
    total = sum(
        float(part.columns["size_bytes"][part.columns["action"] == ALLOCATE].sum(dtype=np.float64))
        for part in parts
    )
    if total >= MAX_TOTAL_BYTES:
        names = ", ".join(sources)
        raise LogFormatError(
            f"{names}: the allocations add up to more than 2**62 bytes; not a log of a real device"
        )


def _join(parts: list[FileEvents], sources: list[str]) -> AllocationLog:
    columns: dict[str, np.ndarray] = {}
    for name, dtype in COLUMNS.items():
        pieces = [part.columns[name] for part in parts]
        joined = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        columns[name] = joined.astype(dtype, copy=False)
    events = pd.DataFrame(columns, copy=False)
    skipped = [row for part in parts for row in part.skipped][:MAX_KEPT_SKIPS]
    return AllocationLog(
        events=events,
        sources=sources,
        skipped=skipped,
        skipped_count=sum(part.skipped_count for part in parts),
    )
