"""The fleet answer: per resource, what its logs did, in a few figures a platform team can use.

Per resource, over the sweep's logs:

- how many replayed with no refused allocation, how many refused some, how many pairs
  failed outright (a damaged log, a worker that died past the retry limit);
- peak reserved bytes, total and p50/p95/max across the logs that replayed with no failure,
  and fragmentation (reserved over requested at peak) p50/p95/max across the same logs;
- with a capacity search, the capacity per log, and the single size that covers 95% of the
  logs and the one that covers all of them;
- the logs that drive the maximum, named.

Percentiles are taken "higher": each is the figure of a real log, so the p95 capacity is a size
under which 95% or more of the logs replayed with no failure, never an interpolation that no
log was tried at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .records import STATUS_OK


@dataclass(frozen=True)
class Spread:
    """p50, p95 and max of a figure across logs (and the total, where a sum means something)."""

    p50: float
    p95: float
    max: float
    total: float

    @staticmethod
    def of(values: list[int] | list[float]) -> Spread | None:
        """Byte figures come as Python ints and stay exact: a total past 2**63 is that total,
        never a wrapped or rounded one (percentiles: numpy's method="higher", by index)."""
        if not values:
            return None
        ordered = sorted(values)
        last = len(ordered) - 1
        p50, p95 = (ordered[math.ceil(q * last)] for q in (0.50, 0.95))
        return Spread(p50, p95, ordered[-1], sum(ordered))

    def as_bytes(self) -> dict[str, int]:
        return {
            "p50_bytes": int(self.p50),
            "p95_bytes": int(self.p95),
            "max_bytes": int(self.max),
            "total_bytes": int(self.total),
        }

    def as_ratio(self) -> dict[str, float]:
        return {"p50": round(self.p50, 4), "p95": round(self.p95, 4), "max": round(self.max, 4)}


@dataclass
class ResourceSummary:
    """One resource across the fleet."""

    resource: str
    logs: int
    no_failure: int  # replayed every allocation
    with_refusals: int  # replayed, but the resource refused some allocations
    failed: int  # no figures: the pair failed (reason in its record)
    events: int
    replay_wall_ns: int
    peak_reserved: Spread | None
    fragmentation: Spread | None
    capacity: Spread | None  # with --find-capacity
    peak_reserved_drivers: list[str] = field(default_factory=list)  # logs at the maximum
    capacity_drivers: list[str] = field(default_factory=list)
    refusing_logs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "logs": self.logs,
            "logs_with_no_failure": self.no_failure,
            "logs_with_refused_allocations": self.with_refusals,
            "failed_pairs": self.failed,
            "events": self.events,
            "replay_wall_ns": self.replay_wall_ns,
            "peak_reserved": self.peak_reserved.as_bytes() if self.peak_reserved else None,
            "fragmentation": self.fragmentation.as_ratio() if self.fragmentation else None,
            "capacity": None
            if self.capacity is None
            else {
                "p50_bytes": int(self.capacity.p50),
                "covers_p95_bytes": int(self.capacity.p95),
                "covers_all_bytes": int(self.capacity.max),
            },
            "peak_reserved_max_logs": self.peak_reserved_drivers,
            "capacity_max_logs": self.capacity_drivers,
            "refusing_logs": self.refusing_logs,
        }


def summarize_fleet(records: list[dict[str, Any]], resources: list[str]) -> list[ResourceSummary]:
    """One summary per resource, in the order given."""
    return [_summary(name, [r for r in records if r["spec"] == name]) for name in resources]


def _summary(resource: str, records: list[dict[str, Any]]) -> ResourceSummary:
    ok = [r for r in records if r["status"] == STATUS_OK]
    refusing = [r for r in ok if r.get("failure_count")]
    # A replay with refused allocations served less than the log asked for: its reserved
    # bytes describe another workload, so the spreads are over logs with no failure.
    clean = [r for r in ok if not r.get("failure_count")]
    reserved = [r for r in clean if r.get("peak_reserved_bytes") is not None]
    fragmented = [r for r in clean if r.get("fragmentation") is not None]
    sized = [r for r in ok if r.get("capacity_bytes") is not None]
    return ResourceSummary(
        resource=resource,
        logs=len(records),
        no_failure=len(ok) - len(refusing),
        with_refusals=len(refusing),
        failed=len(records) - len(ok),
        events=sum(int(r.get("events") or 0) for r in ok),
        replay_wall_ns=sum(int(r.get("wall_ns") or 0) for r in ok),
        peak_reserved=Spread.of([int(r["peak_reserved_bytes"]) for r in reserved]),
        fragmentation=Spread.of([float(r["fragmentation"]) for r in fragmented]),
        capacity=Spread.of([int(r["capacity_bytes"]) for r in sized]),
        peak_reserved_drivers=_at_max(reserved, "peak_reserved_bytes"),
        capacity_drivers=_at_max(sized, "capacity_bytes"),
        refusing_logs=[str(r["log"]) for r in refusing],
    )


def _at_max(records: list[dict[str, Any]], key: str) -> list[str]:
    if not records:
        return []
    top = max(int(r[key]) for r in records)
    return [str(r["log"]) for r in records if int(r[key]) == top]
