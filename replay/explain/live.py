"""Whose memory it was: the allocations live at a refusal, grouped by the line that made them.

The live set is the program's (replay/engine/program.py) up to the refused op: every allocate whose
free had not come yet. Each is traced to its snapshot entry, and the entry's recorded stack
(`_record_memory_history(context=..., stacks="python")`) names the line of the program that
asked: the innermost frame outside PyTorch's own Python (`snapshots.frames.user_frame`), written
`file:line function`. Allocations made before recording began have no entry; a snapshot
recorded without stacks has no frames: each is one group of its own, said as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.program import OP_ALLOCATE, ReplayProgram
from ..logs.events import AllocationLog
from ..snapshots.frames import Frame, user_frame
from ..snapshots.reader import entries_frames

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
    frames = _frames(log, rows, lines, max_bytes)
    groups: dict[str, list[int]] = {}
    for row, line, size in zip(rows, lines, sizes, strict=True):
        where = BEFORE_RECORDING if line == 0 else _where(frames, log, int(row), int(line))
        groups.setdefault(where, []).append(int(size))
    found = [LiveGroup(where, sum(s), len(s), max(s)) for where, s in groups.items()]
    found.sort(key=lambda g: (-g.live_bytes, g.where))
    return LiveAllocations(int(sizes.sum()), len(rows), found[:GROUPS_KEPT])


def _frames(
    log: AllocationLog, rows: np.ndarray, lines: np.ndarray, max_bytes: int | None
) -> dict[str, dict[int, list[Frame]]]:
    """The frames of the live allocations' trace entries, by snapshot source and entry, each
    file read again once (the log itself keeps no frames)."""
    wanted: dict[str, set[int]] = {}
    file_index = log.events["file_index"].to_numpy()
    for row, line in zip(rows, lines, strict=True):
        if line > 0:
            wanted.setdefault(log.sources[int(file_index[row])], set()).add(int(line))
    return {
        source: entries_frames(source, found, max_bytes=max_bytes)
        for source, found in wanted.items()
    }


def _where(
    frames: dict[str, dict[int, list[Frame]]], log: AllocationLog, row: int, line: int
) -> str:
    source = log.sources[int(log.events["file_index"].to_numpy()[row])]
    chosen = user_frame(frames.get(source, {}).get(line, []))
    return NO_STACK if chosen is None else frame_text(chosen)
