"""`replay --torch 2.11,2.14`: the releases asked for (each one's column is replayed by
hipmem.replay.engine.releases), and the line that says a snapshot's fields exclude one."""

from __future__ import annotations

from ..replay.engine.preflight import Targets
from ..replay.errors import ReplayUsageError
from ..replay.logs.events import AllocationLog
from ..replay.snapshots.release_range import outside_notes
from . import output


def split_releases(torch: str | None, capacity: bool) -> list[str | None]:
    """`2.11,2.14` -> ["2.11", "2.14"]; none given -> [None] (the search order decides)."""
    releases: list[str | None] = [n.strip() for n in (torch or "").split(",") if n.strip()]
    if len(releases) > 1 and capacity:
        raise ReplayUsageError("--find-capacity searches with one PyTorch: give one --torch")
    return releases or [None]


def say_recording_release(log: AllocationLog, targets: Targets) -> None:
    """A snapshot whose fields exclude a release that replayed it, one line each (a snapshot
    does not name its release; its fields bound it: replay/snapshots/release_range.py)."""
    versions = {t.allocator.version for t in targets.by_key.values() if t.allocator is not None}
    recorded = [(r.source, r.written_by) for r in log.recordings]
    for version in sorted(versions):
        for note in outside_notes(recorded, version):
            output.warning(note)
