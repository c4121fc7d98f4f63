"""What a replay reports, per resource: plain dataclasses with units in their names."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from ..logs.events import AllocationLog, LineRef
from .program import Anomalies

# Where a report's peak reserved figure comes from. The order is replay_core.cu's enum
# hm_reserved_source, which reports an index into this tuple.
RESERVED_FROM_RESOURCE = "resource statistics (bytes taken from upstream)"
RESERVED_FROM_POOL_ATTRIBUTE = "memory pool attribute (ReservedMemHigh)"
RESERVED_FROM_FREE_MEMORY = "device free memory (sampled)"
RESERVED_SOURCES = (RESERVED_FROM_RESOURCE, RESERVED_FROM_POOL_ATTRIBUTE, RESERVED_FROM_FREE_MEMORY)


@dataclass(frozen=True)
class LatencyStats:
    """Latency of allocator calls alone (the replay's bookkeeping is outside the timed span)."""

    count: int
    p50_ns: int
    p99_ns: int
    max_ns: int

    @staticmethod
    def of(latencies_ns: np.ndarray) -> LatencyStats | None:
        if len(latencies_ns) == 0:
            return None
        p50, p99 = np.percentile(latencies_ns, [50, 99], method="higher")
        return LatencyStats(len(latencies_ns), int(p50), int(p99), int(latencies_ns.max()))


@dataclass(frozen=True)
class AllocationFailure:
    """An allocation the resource refused during the replay."""

    event_index: int  # row of the log (position in AllocationLog.events)
    where: LineRef  # the log row
    size_bytes: int
    live_bytes: int  # bytes the replay held at that moment
    reserved_bytes: int | None  # what the resource had taken from the device, when known
    # The request failed when it was recorded too (a snapshot's `oom`, replayed as the request
    # it was: replay/engine/program.py): refused again, as recorded.
    recorded_failed: bool = False


@dataclass
class ReservedSamples:
    """Requested and reserved bytes over the replay, for --plot."""

    op_index: np.ndarray
    live_bytes: np.ndarray
    reserved_bytes: np.ndarray


@dataclass
class ReplayReport:
    """One resource's replay of one log."""

    resource: str
    backend: str  # cuda, hip or host
    engine: str  # native (C++ core) or python (a loop per event)
    threads: str  # logged or single
    thread_count: int
    stream_count: int  # real streams the calls went to (1 with streams="default")
    log_events: int
    ops: int  # allocator calls in the program
    ops_done: int
    wall_ns: int
    # Sum of the timed allocator calls of the first pass: the allocator's own time, free of
    # the replay's bookkeeping and of hand-offs between replay threads (None: not timed).
    allocator_ns: int | None
    peak_requested_bytes: int
    peak_reserved_bytes: int | None
    reserved_source: str
    alloc_latency: LatencyStats | None
    free_latency: LatencyStats | None
    failures: list[AllocationFailure]
    failure_count: int
    outcome: str  # completed | stopped at first failure | cancelled
    returned_at_end_bytes: int  # bytes the log never freed, returned by the replay
    unreturned_bytes: int  # device memory not back after teardown (should be 0)
    anomalies: Anomalies
    samples: ReservedSamples | None = field(default=None, repr=False)
    # The virtual GPU's replays say where they ran ("PyTorch 2.11.0's allocator on a virtual
    # MI300X (...)") and where that allocator came from; None on a real device.
    device: str | None = None
    allocator_source: str | None = None
    # Every pass's wall time, in order (`--repeats`); `wall_ns` is the best of them. The first
    # pass also times each call, so it is the slowest by that much. Empty: the engine reports
    # the best pass only (PyTorch's worker).
    pass_wall_ns: tuple[int, ...] = ()
    # Allocations each pass took from the resource's upstream (a pool's growth); None where
    # nothing counts them (the driver's own pools, plain cudaMalloc, the Python engine).
    pass_upstream_calls: tuple[int, ...] | None = None
    setup_ns: int | None = None  # building the resource stack, up to the first pass's start
    # With several passes, the pass that timed each call (latencies, failures) ran first and
    # apart from them, about a tenth slower for the timing: its wall time. None: it was the one
    # pass, or there was no such pass.
    timed_pass_wall_ns: int | None = None

    @property
    def events_per_s(self) -> float:
        """Log rows per second of wall time, the C++ floor's unit."""
        return self._rate(self.wall_ns)

    def _rate(self, wall_ns: int) -> float:
        return self.log_events / (wall_ns / 1e9) if wall_ns > 0 else 0.0

    @property
    def pass_events_per_s(self) -> list[float]:
        """Events/s of each pass, in order (empty when the engine reports the best pass only)."""
        return [self._rate(ns) for ns in self.pass_wall_ns]

    def pass_spread(self) -> dict[str, float] | None:
        """Events/s over the passes: min, median, max, and spread (max / min); None when the
        engine reports the best pass only."""
        rates = self.pass_events_per_s
        if not rates:
            return None
        low, high = min(rates), max(rates)
        return {
            "min": low,
            "median": statistics.median(rates),
            "max": high,
            "spread": high / low if low > 0 else 0.0,
        }

    @property
    def fragmentation(self) -> float | None:
        """Reserved over requested at peak (1.0 = the resource took nothing beyond requests)."""
        if self.peak_reserved_bytes is None or self.peak_requested_bytes <= 0:
            return None
        return self.peak_reserved_bytes / self.peak_requested_bytes

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: integers in bytes and nanoseconds."""

        def latency(stats: LatencyStats | None) -> dict[str, int] | None:
            if stats is None:
                return None
            return {
                "count": stats.count,
                "p50_ns": stats.p50_ns,
                "p99_ns": stats.p99_ns,
                "max_ns": stats.max_ns,
            }

        return {
            "resource": self.resource,
            "backend": self.backend,
            "engine": self.engine,
            "threads": self.threads,
            "thread_count": self.thread_count,
            "stream_count": self.stream_count,
            "log_events": self.log_events,
            "ops": self.ops,
            "ops_done": self.ops_done,
            "outcome": self.outcome,
            "wall_ns": self.wall_ns,
            "events_per_s": round(self.events_per_s, 1),
            "passes": self._passes_dict(),
            "allocator_ns": self.allocator_ns,
            "alloc_latency": latency(self.alloc_latency),
            "free_latency": latency(self.free_latency),
            "peak_requested_bytes": self.peak_requested_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "reserved_source": self.reserved_source,
            "fragmentation": None if self.fragmentation is None else round(self.fragmentation, 4),
            "failure_count": self.failure_count,
            "failures": [
                {
                    "event_index": f.event_index,
                    **f.where.as_dict(),
                    "size_bytes": f.size_bytes,
                    "live_bytes": f.live_bytes,
                    "reserved_bytes": f.reserved_bytes,
                    "recorded_failed": f.recorded_failed,
                }
                for f in self.failures
            ],
            "returned_at_end_bytes": self.returned_at_end_bytes,
            "unreturned_bytes": self.unreturned_bytes,
            "anomalies": self.anomalies.as_dict(),
            "device": self.device,
            "allocator_source": self.allocator_source,
        }

    def _passes_dict(self) -> dict[str, object] | None:
        spread = self.pass_spread()
        if spread is None:
            return None
        return {
            "count": len(self.pass_wall_ns),
            "wall_ns": list(self.pass_wall_ns),
            "events_per_s_min": round(spread["min"], 1),
            "events_per_s_median": round(spread["median"], 1),
            "events_per_s_max": round(spread["max"], 1),
            "spread": round(spread["spread"], 4),
            "upstream_calls": None
            if self.pass_upstream_calls is None
            else list(self.pass_upstream_calls),
            "setup_ns": self.setup_ns,
            "timed_pass_wall_ns": self.timed_pass_wall_ns,
        }


@dataclass(frozen=True)
class RecordedFigures:
    """What a PyTorch snapshot's own allocator did: the column beside every replayed resource,
    so the first table answers "would this resource reserve less than what I have now?"."""

    alloc_conf: str  # PYTORCH_CUDA_ALLOC_CONF of the recording
    peak_requested_bytes: int
    peak_reserved_bytes: int  # summed over the devices recorded
    failure_count: int  # `oom` entries

    @property
    def fragmentation(self) -> float | None:
        if self.peak_requested_bytes <= 0:
            return None
        return self.peak_reserved_bytes / self.peak_requested_bytes

    def as_dict(self) -> dict[str, object]:
        fragmentation = self.fragmentation
        return {
            "alloc_conf": self.alloc_conf,
            "peak_requested_bytes": self.peak_requested_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "fragmentation": None if fragmentation is None else round(fragmentation, 4),
            "failure_count": self.failure_count,
        }


def recorded_figures(log: AllocationLog, peak_requested_bytes: int) -> RecordedFigures | None:
    """The recording's own figures, when the log came from PyTorch snapshots; else None."""
    if not log.recordings:
        return None
    return RecordedFigures(
        alloc_conf="; ".join(sorted({r.alloc_conf for r in log.recordings})),
        peak_requested_bytes=peak_requested_bytes,
        peak_reserved_bytes=sum(r.peak_reserved_bytes for r in log.recordings),
        failure_count=sum(len(r.ooms) for r in log.recordings),
    )
