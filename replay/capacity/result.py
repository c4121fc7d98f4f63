"""What a capacity search found: the smallest size, and every probe on the way.

Shared by the searches of real resources (replay/capacity/search.py) and of the virtual GPU
(replay/capacity/fits.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ReplayError


class NoCapacityFound(ReplayError):
    """Even a very large pool or limit did not replay the log without failures."""


@dataclass(frozen=True)
class Probe:
    size_bytes: int
    replayed: bool  # True: no failure at this size


@dataclass
class CapacityResult:
    """The smallest size found, and how it was found."""

    resource: str
    # "maximum" (a pool's) or "limit"; on the virtual GPU "device memory" or "memory
    # fraction of H100" (replay.virtual_capacity)
    sized_option: str
    capacity_bytes: int
    peak_requested_bytes: int
    resolution_bytes: int
    confirm_runs: int = 0  # extra replays the final size passed
    sized_spec: str = ""  # the resource with the capacity filled in: what to use
    probes: list[Probe] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "resource": self.resource,
            "sized_option": self.sized_option,
            "capacity_bytes": self.capacity_bytes,
            "sized_spec": self.sized_spec,
            "peak_requested_bytes": self.peak_requested_bytes,
            "resolution_bytes": self.resolution_bytes,
            "confirm_runs": self.confirm_runs,
            "probes": [{"size_bytes": p.size_bytes, "replayed": p.replayed} for p in self.probes],
        }
