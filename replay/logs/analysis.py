"""What an allocation log holds, from the log alone: counts, demand, anomalies.

Live bytes follow these rules (the replay engine follows the same ones; `LiveAllocations`
states them one event at a time, and `analyze` applies them vectorised):

- `allocate P S`: S bytes become live at P. If P is still live (allocated and not freed),
  that is an anomaly (`allocate_live_pointer`, or `allocate_live_pointer_zero_size` when the
  old or the new allocation has size 0, as RMM logs do for zero-byte requests sharing one
  address); the old record is replaced: its size stops counting first.
- `free P S`: if P is live, its recorded size stops counting (a different S is the anomaly
  `free_size_mismatch`; the recorded size is what counts). If P is not live, the anomaly is
  `free_unknown_pointer` and nothing changes.
- `allocate failure`: nothing changes; the row is reported with the live bytes at that point.
- Rows whose time is earlier than the row before (same file) are `out_of_time_order`.

Per thread and per stream, live bytes belong to the thread / stream that allocated them:
a free on another thread takes the bytes from the allocating thread's account.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from .events import ALLOCATE, ALLOCATE_FAILURE, FREE, AllocationLog, LineRef, Recording
from .owner_figures import action_counts, owner_live_bytes

#: How many line numbers each anomaly keeps, and how many largest allocations are listed.
FIRST_LINES = 5
LARGEST = 10
FAILURES_KEPT = 20

Int64Array = npt.NDArray[np.int64]


# --------------------------------------------------------------------------- the rules


class Effect(Enum):
    """What one event did to the set of live allocations."""

    ALLOCATED = "allocated"
    REPLACED_LIVE = "allocate_live_pointer"
    REPLACED_LIVE_ZERO_SIZE = "allocate_live_pointer_zero_size"
    FREED = "freed"
    FREED_SIZE_MISMATCH = "free_size_mismatch"
    FREE_UNKNOWN = "free_unknown_pointer"
    FAILED = "allocate_failure"


@dataclass
class LiveAllocations:
    """The live-bytes rules for one event at a time (reference for the replay engine)."""

    sizes_bytes: dict[int, int] = field(default_factory=dict)  # pointer -> recorded size
    live_bytes: int = 0

    def apply(self, action: int, pointer: int, size_bytes: int) -> Effect:
        """Apply one event; returns what it did (anomalies included)."""
        if action == ALLOCATE_FAILURE:
            return Effect.FAILED
        old = self.sizes_bytes.get(pointer)
        if action == ALLOCATE:
            self.sizes_bytes[pointer] = size_bytes
            self.live_bytes += size_bytes - (old or 0)
            if old is None:
                return Effect.ALLOCATED
            zero = old == 0 or size_bytes == 0
            return Effect.REPLACED_LIVE_ZERO_SIZE if zero else Effect.REPLACED_LIVE
        if old is None:
            return Effect.FREE_UNKNOWN
        del self.sizes_bytes[pointer]
        self.live_bytes -= old
        return Effect.FREED if old == size_bytes else Effect.FREED_SIZE_MISMATCH


# --------------------------------------------------------------------------- results


@dataclass
class Anomaly:
    name: str
    description: str
    count: int
    first: list[LineRef]


@dataclass
class FailureRow:
    source: str
    line: int
    size_bytes: int
    live_bytes: int  # live just before the failed request
    time_ns: int


@dataclass
class PeakPoint:
    live_bytes: int
    event_index: int  # row of AllocationLog.events after which the peak holds
    source: str
    line: int
    time_ns: int


@dataclass
class GroupFigures:
    """One thread or one stream."""

    key: int
    events: int
    allocate_rows: int
    free_rows: int
    failure_rows: int
    peak_live_bytes: int


@dataclass
class SizeBucket:
    """Allocations with low_bytes <= size < high_bytes (powers of two)."""

    low_bytes: int
    high_bytes: int
    count: int
    total_bytes: int


@dataclass
class LargeAllocation:
    source: str
    line: int
    size_bytes: int
    pointer: int
    thread: int
    stream: int
    freed: bool


@dataclass
class LogSummary:
    """Everything `hipmem log inspect` reports; `to_json` gives integers in bytes and ns."""

    sources: list[str]
    events: int
    allocate_rows: int
    free_rows: int
    failure_rows: int
    first_time_ns: int | None
    last_time_ns: int | None
    span_ns: int
    threads: int
    streams: int
    peak: PeakPoint | None
    live_at_end_count: int  # zero-byte allocations excluded
    live_at_end_bytes: int
    zero_byte_allocations: int  # allocate rows of size 0
    zero_byte_live_at_end: int
    per_thread: list[GroupFigures]
    per_stream: list[GroupFigures]
    size_histogram: list[SizeBucket]
    largest: list[LargeAllocation]
    anomalies: list[Anomaly]
    failures: list[FailureRow]
    skipped_count: int
    skipped: list[LineRef]
    skipped_reasons: list[str]
    recordings: list[Recording] = field(default_factory=list)  # PyTorch snapshots read

    @property
    def peak_live_bytes(self) -> int:
        return self.peak.live_bytes if self.peak else 0

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict: the keys `--json` promises plus the details."""
        return {
            "sources": self.sources,
            "events": self.events,
            "allocate_rows": self.allocate_rows,
            "free_rows": self.free_rows,
            "failure_rows": self.failure_rows,
            "first_time_ns": self.first_time_ns,
            "last_time_ns": self.last_time_ns,
            "span_ns": self.span_ns,
            "threads": self.threads,
            "streams": self.streams,
            "peak_live_bytes": self.peak_live_bytes,
            "peak": asdict(self.peak) if self.peak else None,
            "live_at_end": {"count": self.live_at_end_count, "bytes": self.live_at_end_bytes},
            "zero_byte_allocations": self.zero_byte_allocations,
            "zero_byte_live_at_end": self.zero_byte_live_at_end,
            "anomalies": {a.name: a.count for a in self.anomalies},
            "anomaly_first_lines": {
                a.name: [asdict(ref) for ref in a.first] for a in self.anomalies
            },
            "failures": [asdict(f) for f in self.failures],
            "per_thread": [asdict(g) for g in self.per_thread],
            "per_stream": [asdict(g) for g in self.per_stream],
            "size_histogram": [asdict(b) for b in self.size_histogram],
            "largest": [asdict(a) for a in self.largest],
            "skipped_rows": {
                "count": self.skipped_count,
                "first": [
                    {**asdict(ref), "reason": reason}
                    for ref, reason in zip(self.skipped, self.skipped_reasons, strict=True)
                ],
            },
            # PyTorch snapshots only: what the recording's own allocator reserved, and more.
            "recorded": [r.as_dict() for r in self.recordings],
        }


ANOMALY_DESCRIPTIONS = {
    Effect.FREE_UNKNOWN.value: "free of a pointer that is not live",
    Effect.REPLACED_LIVE.value: "allocate at a pointer that is still live",
    Effect.REPLACED_LIVE_ZERO_SIZE.value: "allocate at a still-live pointer, zero-byte",
    Effect.FREED_SIZE_MISMATCH.value: "free whose size differs from its allocation",
    "out_of_time_order": "row stamped earlier than the row before it",
    Effect.FAILED.value: "allocate failure",
}


# --------------------------------------------------------------------------- vectorised


@dataclass
class LiveTrace:
    """Live bytes after each event, and the pointer links the rules were applied through."""

    live_bytes: Int64Array  # after each event (int64, one per row)
    prev_alloc: Int64Array  # row of the live allocation an event meets at its pointer, or -1
    next_event: Int64Array  # next row touching the same pointer, or -1


def live_trace(events: pd.DataFrame) -> LiveTrace:
    """Apply the rules to every row at once.

    Rows that touch the same pointer are linked in order (failures touch none); a row's
    effect depends only on the row before it at that pointer: if that row is an allocate,
    the pointer is live with that size; otherwise (a free, or none) it is not live.
    """
    n = len(events)
    action = events["action"].to_numpy()
    size = events["size_bytes"].to_numpy()
    prev_event = _previous_rows(events)
    # The next row at a pointer is the one whose previous row it is (links form chains);
    # arrays are reused in place: 20 M rows are 160 MB a column.
    has_prev = prev_event >= 0
    next_event = np.full(n, -1, np.int64)
    next_event[prev_event[has_prev]] = np.flatnonzero(has_prev)
    prev_alloc = _allocations_only(prev_event, action, has_prev)
    old_size = np.zeros(n, np.int64)
    old_size[has_prev] = size[prev_alloc[has_prev]]
    del has_prev
    is_alloc = action == ALLOCATE
    delta = np.where(is_alloc, size, 0).astype(np.int64, copy=False)
    np.subtract(delta, old_size, out=delta, where=is_alloc | (action == FREE))
    del old_size
    return LiveTrace(np.cumsum(delta, out=delta), prev_alloc, next_event)  # in place


def previous_allocations(events: pd.DataFrame) -> Int64Array:
    """`live_trace(events).prev_alloc` alone (what a replay program needs), in less memory."""
    prev_event = _previous_rows(events)
    return _allocations_only(prev_event, events["action"].to_numpy(), prev_event >= 0)


def _previous_rows(events: pd.DataFrame) -> Int64Array:
    """The row before each row at its pointer (failures touch none), or -1.

    By a stable sort of the pointers: rows of one pointer end up side by side in log order,
    and each follows its previous one. (A group-by of the pointers' codes answered the same
    with three times the memory: 80 MiB above the log for a million rows.)"""
    action = events["action"].to_numpy()
    pointer = events["pointer"].to_numpy()
    failures = action == ALLOCATE_FAILURE
    rows = np.flatnonzero(~failures) if failures.any() else None
    del failures
    order = np.argsort(pointer if rows is None else pointer[rows], kind="stable")
    sorted_pointers = pointer[order] if rows is None else pointer[rows[order]]
    follows = np.flatnonzero(sorted_pointers[1:] == sorted_pointers[:-1])  # at order[i + 1]
    del sorted_pointers
    if rows is not None:
        order = rows[order]
    prev_event = np.full(len(pointer), -1, np.int64)
    for start in range(0, len(follows), _BLOCK_ROWS):  # in blocks: no whole-length temporaries
        at = follows[start : start + _BLOCK_ROWS]
        prev_event[order[at + 1]] = order[at]
    return prev_event


_BLOCK_ROWS = 1 << 16


def _allocations_only(
    prev_event: Int64Array, action: np.ndarray, has_prev: npt.NDArray[np.bool_]
) -> Int64Array:
    """`prev_event` where that row is an allocate, else -1, in place; `has_prev` (prev_event
    >= 0) becomes that mask."""
    has_prev[has_prev] = action[prev_event[has_prev]] == ALLOCATE
    prev_event[~has_prev] = -1
    return prev_event


def owner_traces(
    events: pd.DataFrame, trace: LiveTrace, column: str
) -> dict[int, tuple[Int64Array, Int64Array]]:
    """Live bytes per owner (the `thread` or `stream` that allocated them): for each owner,
    the rows where its live bytes changed and its live bytes after each of them."""
    return owner_live_bytes(
        events[column].to_numpy(),
        events["action"].to_numpy(),
        events["size_bytes"].to_numpy(),
        trace.prev_alloc,
    )


def _at(events: pd.DataFrame, column: str, row: int) -> int:
    """One cell as a Python int."""
    return int(events[column].to_numpy()[row])


def _ref(events: pd.DataFrame, sources: list[str], row: int) -> LineRef:
    return LineRef(sources[_at(events, "file_index", row)], _at(events, "line", row))


def _anomaly(
    name: str, mask: npt.NDArray[np.bool_], events: pd.DataFrame, sources: list[str]
) -> Anomaly:
    rows = np.flatnonzero(mask)
    first = [_ref(events, sources, int(r)) for r in rows[:FIRST_LINES]]
    return Anomaly(name, ANOMALY_DESCRIPTIONS[name], len(rows), first)


def analyze(log: AllocationLog) -> LogSummary:
    """All figures of `hipmem log inspect`, computed over whole columns."""
    events = log.events
    sources = log.sources
    action = events["action"].to_numpy()
    size = events["size_bytes"].to_numpy()
    time_ns = events["time_ns"].to_numpy()
    file_index = events["file_index"].to_numpy()
    n = len(events)
    trace = live_trace(events)
    prev = trace.prev_alloc
    is_alloc = action == ALLOCATE
    is_free = action == FREE
    is_failure = action == ALLOCATE_FAILURE
    safe_prev = np.maximum(prev, 0)

    replaced = is_alloc & (prev >= 0)
    replaced_zero = replaced & ((size == 0) | (size[safe_prev] == 0))
    late = np.zeros(n, np.bool_)
    late[1:] = (time_ns[1:] < time_ns[:-1]) & (file_index[1:] == file_index[:-1])
    anomalies = [
        _anomaly(Effect.FREE_UNKNOWN.value, is_free & (prev < 0), events, sources),
        _anomaly(Effect.REPLACED_LIVE.value, replaced & ~replaced_zero, events, sources),
        _anomaly(Effect.REPLACED_LIVE_ZERO_SIZE.value, replaced_zero, events, sources),
        _anomaly(
            Effect.FREED_SIZE_MISMATCH.value,
            is_free & (prev >= 0) & (size != size[safe_prev]),
            events,
            sources,
        ),
        _anomaly("out_of_time_order", late, events, sources),
        _anomaly(Effect.FAILED.value, is_failure, events, sources),
    ]

    # An allocation is live at the end when no later row touches its pointer.
    live_end = is_alloc & (trace.next_event < 0)
    zero = size == 0
    return LogSummary(
        sources=list(sources),
        events=n,
        allocate_rows=int(is_alloc.sum()),
        free_rows=int(is_free.sum()),
        failure_rows=int(is_failure.sum()),
        first_time_ns=int(time_ns.min()) if n else None,
        last_time_ns=int(time_ns.max()) if n else None,
        span_ns=int(time_ns.max() - time_ns.min()) if n else 0,
        threads=int(events["thread"].nunique()),
        streams=int(events["stream"].nunique()),
        peak=_peak(events, sources, trace.live_bytes),
        live_at_end_count=int((live_end & ~zero).sum()),
        live_at_end_bytes=int(size[live_end].sum()),
        zero_byte_allocations=int((is_alloc & zero).sum()),
        zero_byte_live_at_end=int((live_end & zero).sum()),
        per_thread=_groups(events, trace, "thread"),
        per_stream=_groups(events, trace, "stream"),
        size_histogram=size_histogram(size[is_alloc]),
        largest=_largest(events, sources, trace),
        anomalies=anomalies,
        failures=_failures(events, sources, trace.live_bytes),
        skipped_count=log.skipped_count,
        skipped=[LineRef(s.source, s.line) for s in log.skipped],
        skipped_reasons=[s.reason for s in log.skipped],
        recordings=list(log.recordings),
    )


def _peak(events: pd.DataFrame, sources: list[str], live: Int64Array) -> PeakPoint | None:
    if not len(live) or live.max() <= 0:
        return None
    row = int(np.argmax(live))  # the first row where the maximum is reached
    ref = _ref(events, sources, row)
    return PeakPoint(int(live[row]), row, ref.source, ref.line, _at(events, "time_ns", int(row)))


def _groups(events: pd.DataFrame, trace: LiveTrace, column: str) -> list[GroupFigures]:
    keys, counts = action_counts(events[column].to_numpy(), events["action"].to_numpy())
    traces = owner_traces(events, trace, column)
    peaks = {key: int(max(0, live.max())) for key, (_, live) in traces.items()}
    return [
        GroupFigures(
            key=int(key),
            events=int(row.sum()),
            allocate_rows=int(row[0]),
            free_rows=int(row[1]),
            failure_rows=int(row[2]),
            peak_live_bytes=peaks.get(int(key), 0),
        )
        for key, row in zip(keys, counts, strict=True)
    ]


def size_histogram(sizes_bytes: Int64Array) -> list[SizeBucket]:
    """Power-of-two buckets [2^k, 2^(k+1)) of non-zero sizes, lowest first; empty ones left out."""
    sizes = sizes_bytes[sizes_bytes > 0]
    if not len(sizes):
        return []
    _, exponent = np.frexp(sizes.astype(np.float64))
    k = exponent.astype(np.int64) - 1
    # float64 rounding can lift a size just under 2^k above 53 bits into bucket k: fix it.
    k -= (np.left_shift(np.int64(1), k) > sizes).astype(np.int64)
    counts = np.bincount(k)
    totals = pd.Series(sizes).groupby(k).sum()  # exact int64 sums
    return [
        SizeBucket(1 << int(b), 1 << (int(b) + 1), int(counts[b]), int(totals[b]))
        for b in np.flatnonzero(counts)
    ]


def _largest(events: pd.DataFrame, sources: list[str], trace: LiveTrace) -> list[LargeAllocation]:
    action = events["action"].to_numpy()
    size = events["size_bytes"].to_numpy()
    rows = np.flatnonzero(action == ALLOCATE)
    if not len(rows):
        return []
    top = rows[np.argsort(-size[rows], kind="stable")[:LARGEST]]
    result = []
    for row in top:
        nxt = int(trace.next_event[row])
        ref = _ref(events, sources, int(row))
        result.append(
            LargeAllocation(
                source=ref.source,
                line=ref.line,
                size_bytes=int(size[row]),
                pointer=_at(events, "pointer", int(row)),
                thread=_at(events, "thread", int(row)),
                stream=_at(events, "stream", int(row)),
                freed=nxt >= 0 and int(action[nxt]) == FREE,
            )
        )
    return result


def _failures(events: pd.DataFrame, sources: list[str], live: Int64Array) -> list[FailureRow]:
    rows = np.flatnonzero(events["action"].to_numpy() == ALLOCATE_FAILURE)[:FAILURES_KEPT]
    return [
        FailureRow(
            source=_ref(events, sources, int(r)).source,
            line=_ref(events, sources, int(r)).line,
            size_bytes=_at(events, "size_bytes", int(r)),
            live_bytes=int(live[r]),  # a failure changes nothing: after == before
            time_ns=_at(events, "time_ns", int(r)),
        )
        for r in rows
    ]
