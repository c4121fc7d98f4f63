"""The in-memory form of an allocation log: one typed column per field, one row per event.

This is the contract between the log loader (`replay.log_loader`), the analysis
(`replay.analysis`) and the replay engine (`replay.engine`). Columns are numpy-backed
(no Python object per row) so that ten million events stay fast and small.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

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


@dataclass
class AllocationLog:
    """Events of one or more log files, in the order they happened (file order, then row)."""

    events: pd.DataFrame
    sources: list[str]
    skipped: list[SkippedRow] = field(default_factory=list)
    skipped_count: int = 0  # may exceed len(skipped): only the first few are kept in full

    def line_ref(self, event_index: int) -> LineRef:
        """Where event `event_index` (a row of `events`) stands in its file."""
        row = self.events.iloc[event_index]
        return LineRef(self.sources[int(row["file_index"])], int(row["line"]))
