"""Whose memory it was: the allocations live at a refusal, grouped by the line that made them.

The live set is the program's (replay/program.py) up to the refused op: every allocate whose
free had not come yet. Each is traced to its snapshot entry, and the entry's recorded stack
(`_record_memory_history(context=..., stacks="python")`) names the line of the program that
asked: the innermost frame outside PyTorch's own Python (`snapshot.user_frame`), written
`file:line function`. Allocations made before recording began have no entry; a snapshot
recorded without stacks has no frames: each is one group of its own, said as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hipmem.replay.events import AllocationLog
from hipmem.replay.program import OP_ALLOCATE, ReplayProgram
from hipmem.replay.snapshot import Frame, load_snapshot_dict, user_frame

NO_STACK = "(no stack recorded)"
BEFORE_RECORDING = "(allocated before recording began)"
GROUPS_KEPT = 10


@dataclass(frozen=True)
class LiveGroup:
    """Live allocations made at one place of the program."""

    where: str  # `file:line function`, or NO_STACK / BEFORE_RECORDING
    live_bytes: int
    count: int
    largest_bytes: int

    def as_dict(self) -> dict[str, object]:
        return {
            "where": self.where,
            "live_bytes": self.live_bytes,
            "count": self.count,
            "largest_bytes": self.largest_bytes,
        }


@dataclass(frozen=True)
class LiveAllocations:
    """What was live at the refusal: totals and the largest groups."""

    live_bytes: int
    count: int
    groups: list[LiveGroup]  # the largest GROUPS_KEPT, by bytes

    def as_dict(self) -> dict[str, object]:
        return {
            "live_bytes": self.live_bytes,
            "count": self.count,
            "groups": [g.as_dict() for g in self.groups],
        }


def live_events(program: ReplayProgram, before_op: int) -> np.ndarray:
    """The log rows of the allocations live just before op `before_op`."""
    op, slot = program.op[:before_op], program.slot[:before_op]
    live = np.zeros(program.slot_count, dtype=np.int8)
    np.add.at(live, slot[op == OP_ALLOCATE], 1)
    np.add.at(live, slot[op != OP_ALLOCATE], -1)
    alloc_ops = np.flatnonzero(op == OP_ALLOCATE)
    kept = alloc_ops[live[slot[alloc_ops]] > 0]
    return program.event_index[kept]


def frame_text(frame: Frame) -> str:
    return f"{frame.filename}:{frame.line} {frame.name}"


def live_allocations(
    log: AllocationLog, program: ReplayProgram, before_op: int, *, max_bytes: int | None = None
) -> LiveAllocations:
    """The allocations live just before op `before_op`, grouped by where they were made."""
    rows = live_events(program, before_op)
    events = log.events
    lines = events["line"].to_numpy()[rows]
    sizes = events["size_bytes"].to_numpy()[rows]
    traces = _traces(log, rows, max_bytes)
    groups: dict[str, list[int]] = {}
    for row, line, size in zip(rows, lines, sizes, strict=True):
        where = BEFORE_RECORDING if line == 0 else _where(traces, log, int(row), int(line))
        groups.setdefault(where, []).append(int(size))
    found = [LiveGroup(where, sum(s), len(s), max(s)) for where, s in groups.items()]
    found.sort(key=lambda g: (-g.live_bytes, g.where))
    return LiveAllocations(int(sizes.sum()), len(rows), found[:GROUPS_KEPT])


def _traces(log: AllocationLog, rows: np.ndarray, max_bytes: int | None) -> dict[str, list[Any]]:
    """Each snapshot device's trace entries, read again from its file (only when some live
    allocation has an entry: the log itself keeps no frames)."""
    if not len(rows):
        return {}
    traces: dict[str, list[Any]] = {}
    files = {int(i) for i in log.events["file_index"].to_numpy()[rows]}
    for index in files:
        source = log.sources[index]
        path_text, sep, device_text = source.rpartition("#dev")
        if not sep or not device_text.isdigit():
            continue
        data = load_snapshot_dict(Path(path_text), max_bytes=max_bytes)
        device = int(device_text)
        trace = data["device_traces"][device] if device < len(data["device_traces"]) else None
        traces[source] = trace if isinstance(trace, list) else []
    return traces


def _where(traces: dict[str, list[Any]], log: AllocationLog, row: int, line: int) -> str:
    source = log.sources[int(log.events["file_index"].to_numpy()[row])]
    trace = traces.get(source, [])
    entry = trace[line - 1] if 0 < line <= len(trace) else None
    raw = entry.get("frames") if isinstance(entry, dict) else None
    frames = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        filename, number, name = item.get("filename"), item.get("line"), item.get("name")
        if isinstance(filename, str) and isinstance(number, int) and isinstance(name, str):
            frames.append(Frame(filename, number, name))
    chosen = user_frame(frames)
    return NO_STACK if chosen is None else frame_text(chosen)
