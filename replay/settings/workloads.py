"""The workloads an allocator setting is replayed on: every device of every PyTorch memory
snapshot given, each read once into its events and replay program (a rank, a day: each a
workload of its own), and what reading them skipped."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hipmem._core.skipped_input import SkippedInput, refuse_skipped

from ..engine.program import ReplayProgram, build_program
from ..errors import ReplayUsageError
from ..logs.events import AllocationLog
from ..logs.loader import load_log
from ..snapshots.release_range import outside_notes
from ..snapshots.snapshot_file import is_snapshot


@dataclass(frozen=True)
class Workload:
    """One device of one snapshot: what a setting is replayed on."""

    name: str  # the snapshot's source, `run.pickle#dev0`
    log: AllocationLog
    program: ReplayProgram


Snapshots = Sequence["str | os.PathLike[str] | Workload"]


def load_workloads(
    paths: Snapshots, *, accept_skipped: bool = False, strict: bool = False
) -> list[Workload]:
    """Every device of every snapshot, each a workload of its own (a rank, a day); workloads
    already loaded are taken as they are (to replay one snapshot under several options).
    An entry that cannot be read is an error (`SkippedInputError`) unless `accept_skipped`
    (`strict`: the first one is, whatever `accept_skipped` says)."""
    return load_snapshots(paths, accept_skipped=accept_skipped, strict=strict)[0]


def load_snapshots(
    paths: Snapshots, *, accept_skipped: bool = False, strict: bool = False
) -> tuple[list[Workload], SkippedInput]:
    """The workloads of `load_workloads`, and what was skipped reading them: a gate answers
    about the whole input or not at all, so skipped entries raise `SkippedInputError` unless
    `accept_skipped` (the answer then says how many it did without)."""
    if not paths:
        raise ReplayUsageError("give at least one snapshot", parameter="snapshots")
    found = []
    skipped = SkippedInput()
    for given in paths:
        if isinstance(given, Workload):
            found.append(given)
            continue
        path = Path(given)
        if path.is_file() and not is_snapshot(path):
            raise ReplayUsageError(
                "not a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot writes one); "
                "`hipmem replay LOG -r torch:...` replays other logs through PyTorch's allocator",
                parameter="snapshots",
                value=str(path),
            )
        log = load_log(path, strict=strict)
        skipped += SkippedInput(log.skipped_count, tuple(log.skipped_places()))
        for index, source in enumerate(log.sources):
            events = log.events[log.events["file_index"] == index].reset_index(drop=True)
            recordings = [r for r in log.recordings if r.source == source]
            part = AllocationLog(events, log.sources, recordings=recordings)
            found.append(Workload(source, part, build_program(part)))
    refuse_skipped(skipped.count, skipped.first, accept=accept_skipped)
    return found, skipped


def release_notes(workloads: Sequence[Workload], version: str) -> list[str]:
    """A line for each snapshot whose fields exclude PyTorch `version`, the release replaying
    it (`release_range.outside_notes`)."""
    recorded = [(r.source, r.written_by) for w in workloads for r in w.log.recordings]
    return outside_notes(recorded, version)
