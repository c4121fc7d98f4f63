"""Plain-Python references for replay tests: figures derived from the log rows one by one,
independently of replay.program's vectorised rules, and crafted logs built from rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hipmem.replay.logs.events import ACTION_NAMES, COLUMNS, AllocationLog

_CODES = {name: code for code, name in ACTION_NAMES.items()}


def log_from_rows(rows: list[tuple], source: str = "crafted.csv") -> AllocationLog:
    """Rows of (thread, action name, pointer, size, stream) -> an AllocationLog (lines from 2)."""
    frame = pd.DataFrame(
        {
            "file_index": np.zeros(len(rows), dtype="int16"),
            "line": np.arange(2, len(rows) + 2, dtype="int64"),
            "thread": np.array([r[0] for r in rows], dtype="int64"),
            "time_ns": np.arange(len(rows), dtype="int64") * 1000,
            "action": np.array([_CODES[r[1]] for r in rows], dtype="int8"),
            "pointer": np.array([r[2] for r in rows], dtype="uint64"),
            "size_bytes": np.array([r[3] for r in rows], dtype="int64"),
            "stream": np.array([r[4] for r in rows], dtype="uint64"),
        }
    )
    assert list(frame.columns) == list(COLUMNS)
    return AllocationLog(events=frame, sources=[source])


def _rows(log: AllocationLog):
    e = log.events
    return zip(e["action"].tolist(), e["pointer"].tolist(), e["size_bytes"].tolist(), strict=True)


def reference_peak_bytes(log: AllocationLog) -> int:
    """Peak of live requested bytes, one row at a time with a dict of live pointers."""
    live: dict[int, int] = {}
    now = peak = 0
    for action, pointer, size in _rows(log):
        if action == 0:
            now += size - live.get(pointer, 0)
            live[pointer] = size
            peak = max(peak, now)
        elif action == 1 and pointer in live:
            now -= live.pop(pointer)
    return peak


def reference_first_failure(log: AllocationLog, limit: int, alignment: int = 1) -> tuple[int, int]:
    """(row, live requested bytes) of the first allocate that a `limit` on aligned bytes refuses."""
    live: dict[int, int] = {}
    for row, (action, pointer, size) in enumerate(_rows(log)):
        if action == 0:
            live.pop(pointer, None)  # a replaced block is freed first
            used = sum(-(-s // alignment) * alignment for s in live.values())
            if used + -(-size // alignment) * alignment > limit:
                return row, sum(live.values())
            live[pointer] = size
        elif action == 1:
            live.pop(pointer, None)
    raise AssertionError("no failure under this limit")


def reference_failures(log: AllocationLog, limit: int) -> list[int]:
    """Rows refused under a host `limit` when refused allocations are skipped (exact bytes)."""
    live: dict[int, int] = {}
    refused: list[int] = []
    for row, (action, pointer, size) in enumerate(_rows(log)):
        if action == 0:
            live.pop(pointer, None)
            if sum(live.values()) + size > limit:
                refused.append(row)
                continue
            live[pointer] = size
        elif action == 1:
            live.pop(pointer, None)
    return refused
