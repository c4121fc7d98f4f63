"""One allocator setting of the grid and what it did: its replay on each snapshot (peaks,
segments, refusals), the device it needs, and its rank in the recommendation (reserved peak,
then segment allocations, then the simpler string)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.resources import ResourceSpec, parse_spec
from ..logs.events import LineRef
from .grid import GridEntry


@dataclass(frozen=True)
class SnapshotRun:
    """One setting replayed on one snapshot."""

    snapshot: str
    peak_requested_bytes: int
    peak_reserved_bytes: int
    segment_allocations: int  # cudaMalloc'd segments (0 with expandable segments, which map)
    alloc_retries: int  # the allocator freed its cache and retried a refused call
    refused_count: int
    first_refused: LineRef | None

    def as_dict(self) -> dict[str, object]:
        return {
            "snapshot": self.snapshot,
            "peak_requested_bytes": self.peak_requested_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "segment_allocations": self.segment_allocations,
            "alloc_retries": self.alloc_retries,
            "refused_allocations": self.refused_count,
            "first_refused": None if self.first_refused is None else self.first_refused.as_dict(),
        }


@dataclass
class Candidate:
    """One setting string of the grid and what it did on every snapshot."""

    entry: GridEntry
    runs: list[SnapshotRun] = field(default_factory=list)
    error: str | None = None  # PyTorch refused the setting itself (its words)
    capacity_bytes: int | None = None  # the smallest device, over the snapshots (if searched)
    capacity_snapshot: str | None = None  # the snapshot that needs it
    # Judged at both ends of an inferred cap (replay/explain/recorded_conditions.py): served
    # every request at one end only. Its runs are those of the end that refused, so it is not
    # `replayed`, and never recommended.
    uncertain: bool = False

    @property
    def settings(self) -> str:
        return self.entry.settings

    @property
    def spec(self) -> ResourceSpec:
        """The `-r torch:...` spec that replays this setting (`hipmem replay`, the GPU)."""
        return parse_spec(f"torch:settings={self.settings}" if self.settings else "torch")

    @property
    def capped(self) -> bool:
        """The setting caps the process (a per_process_memory_fraction)."""
        return self.entry.cap_bytes is not None

    @property
    def replayed(self) -> bool:
        """PyTorch took the setting and refused no allocation on any snapshot."""
        return self.error is None and all(run.refused_count == 0 for run in self.runs)

    @property
    def driving(self) -> SnapshotRun | None:
        """The snapshot with the largest reserved peak under this setting."""
        return max(self.runs, key=lambda run: run.peak_reserved_bytes, default=None)

    @property
    def peak_reserved_bytes(self) -> int | None:
        return None if self.driving is None else self.driving.peak_reserved_bytes

    @property
    def fragmentation(self) -> float | None:
        """Reserved over requested at peak, on the snapshot that drives the setting."""
        run = self.driving
        if run is None or run.peak_requested_bytes <= 0:
            return None
        return run.peak_reserved_bytes / run.peak_requested_bytes

    @property
    def segment_allocations(self) -> int:
        return sum(run.segment_allocations for run in self.runs)

    @property
    def refused_count(self) -> int:
        return sum(run.refused_count for run in self.runs)

    def rank(self) -> tuple[int, int, tuple[int, int]]:
        """The order of the recommendation: reserved peak, segment allocations, simplicity."""
        return (self.peak_reserved_bytes or 0, self.segment_allocations, self.entry.simplicity)

    def as_dict(self) -> dict[str, object]:
        return {
            "settings": self.settings,
            "rule": self.entry.rule,
            "cap_bytes": self.entry.cap_bytes,
            "error": self.error,
            "replayed": self.replayed,
            "uncertain": self.uncertain,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "fragmentation": self.fragmentation,
            "segment_allocations": self.segment_allocations,
            "refused_allocations": self.refused_count,
            "capacity_bytes": self.capacity_bytes,
            "capacity_snapshot": self.capacity_snapshot,
            "driving_snapshot": None if self.driving is None else self.driving.snapshot,
            "snapshots": [run.as_dict() for run in self.runs],
        }
