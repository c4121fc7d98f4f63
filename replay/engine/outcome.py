"""What a replay loop hands back (`LoopRun`), and the one place it becomes a `ReplayReport`.

Each loop (the native core, the Python loop, the torch worker on a GPU, PyTorch's allocator
and RMM's resources on the virtual GPU) measures what it can in its own way; it says it in a
`LoopRun`, and `make_report` turns every one into the same report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ReplayError
from ..logs.events import ALLOCATE_FAILURE, AllocationLog
from .program import OP_ALLOCATE, OP_FREE, ReplayProgram
from .report import AllocationFailure, LatencyStats, ReplayReport, ReservedSamples

FAILURES_IN_FULL = 100  # failures reported one by one; the rest are counted
COMPLETED = "completed"
STOPPED = "stopped at first failure"
CANCELLED = "cancelled"


class ReplayCrashed(ReplayError):
    """The allocator or the runtime raised an error that is not an out-of-memory refusal."""


@dataclass(frozen=True)
class Passes:
    """What a loop says of each pass: its wall time, what it took from upstream."""

    wall_ns: tuple[int, ...]
    upstream_calls: tuple[int, ...] | None = None
    setup_ns: int | None = None
    timed_pass_wall_ns: int | None = None  # the pass that timed each call, when run apart


@dataclass(frozen=True)
class LoopRun:
    """One replay as a loop measured it, before it is a report."""

    backend: str  # what the report says in "backend / engine": cuda, virtual, torch (H100)...
    engine: str  # native, python, torch 2.11.0+cu130, RMM 25.4
    threads: str  # the threads the loop ran: logged or single
    latency_ns: np.ndarray  # per op; -1 where not timed
    wall_ns: int
    ops_done: int
    peak_reserved_bytes: int | None  # None (or negative): not known
    reserved_source: str
    failures: list[AllocationFailure]
    failure_count: int
    outcome: str  # COMPLETED, STOPPED, CANCELLED, or why the resource was not made
    returned_bytes: int  # held at the end, returned by the replay
    unreturned_bytes: int
    samples: ReservedSamples | None
    passes: Passes | None = None  # None: one pass, of `wall_ns`
    device: str | None = None  # where a virtual GPU replay ran, said plainly
    allocator_source: str | None = None  # the release it ran, and where it was found


def failure_at(
    log: AllocationLog, program: ReplayProgram, op: int, live_bytes: int, reserved_bytes: int
) -> AllocationFailure:
    """The refused allocation at `op` (reserved bytes below 0: not known)."""
    event = int(program.event_index[op])
    return AllocationFailure(
        event_index=event,
        where=log.line_ref(event),
        size_bytes=int(program.size_bytes[op]),
        live_bytes=live_bytes,
        reserved_bytes=reserved_bytes if reserved_bytes >= 0 else None,
        recorded_failed=int(log.events["action"].to_numpy()[event]) == ALLOCATE_FAILURE,
    )


def failures_of(
    log: AllocationLog,
    program: ReplayProgram,
    ops: Any,
    live_bytes: Any,
    reserved_bytes: Any = None,
    count: int | None = None,
) -> list[AllocationFailure]:
    """The first FAILURES_IN_FULL refusals of a loop's arrays (`count` of them filled: the
    native core's arrays have room for every op); reserved bytes None: not known."""
    n = min(len(ops) if count is None else count, FAILURES_IN_FULL)
    reserved = [-1] * n if reserved_bytes is None else reserved_bytes
    return [
        failure_at(log, program, int(op), int(live), int(held))
        # (a loop may hand back longer arrays than it filled: zip stops at the shortest)
        for op, live, held in zip(ops[:n], live_bytes[:n], reserved[:n], strict=False)
    ]


def stopped_or_completed(stop_on_failure: bool, failure_count: int) -> str:
    return STOPPED if stop_on_failure and failure_count > 0 else COMPLETED


def make_report(spec_label: str, program: ReplayProgram, run: LoopRun) -> ReplayReport:
    """The report of `run`: latencies split by call, the peak, failures, passes."""
    passes = run.passes or Passes(wall_ns=(run.wall_ns,))
    latency_ns = run.latency_ns
    timed = latency_ns >= 0
    threads = run.threads if len(program.threads) > 1 else "single"
    calls_ns = latency_ns[timed]
    peak = run.peak_reserved_bytes
    return ReplayReport(
        resource=spec_label,
        backend=run.backend,
        engine=run.engine,
        threads=threads,
        thread_count=len(program.threads) if threads == "logged" else 1,
        stream_count=len(program.streams),
        log_events=program.log_events,
        ops=program.op_count,
        ops_done=run.ops_done,
        wall_ns=run.wall_ns,
        allocator_ns=int(calls_ns.sum()) if len(calls_ns) else None,
        peak_requested_bytes=program.peak_requested_bytes,
        peak_reserved_bytes=peak if peak is not None and peak >= 0 else None,
        reserved_source=run.reserved_source,
        alloc_latency=LatencyStats.of(latency_ns[timed & (program.op == OP_ALLOCATE)]),
        free_latency=LatencyStats.of(latency_ns[timed & (program.op == OP_FREE)]),
        failures=run.failures,
        failure_count=run.failure_count,
        outcome=run.outcome,
        returned_at_end_bytes=run.returned_bytes,
        unreturned_bytes=run.unreturned_bytes,
        anomalies=program.anomalies,
        samples=run.samples,
        device=run.device,
        allocator_source=run.allocator_source,
        pass_wall_ns=passes.wall_ns,
        pass_upstream_calls=passes.upstream_calls,
        setup_ns=passes.setup_ns,
        timed_pass_wall_ns=passes.timed_pass_wall_ns,
    )


def untimed(program: ReplayProgram, latency_ns: np.ndarray | None) -> np.ndarray:
    """A loop's latencies, or none timed (-1 for every op) when it timed nothing."""
    return latency_ns if latency_ns is not None else np.full(program.op_count, -1)
