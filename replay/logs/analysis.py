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
from .owner_figures import owner_figures, owner_live_bytes
from .pointer_links import BLOCK_ROWS, BoolArray, RowArray, pointer_links
from .row_figures import RowFigures, SizeBuckets, live_blocks, row_figures

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
    prev_alloc: RowArray  # row of the live allocation an event meets at its pointer, or -1
    has_next: BoolArray  # a later row (not a failure) touches the same pointer


def live_trace(events: pd.DataFrame) -> LiveTrace:
    """Apply the rules to every row at once.

    Rows that touch the same pointer are linked in order (failures touch none); a row's
    effect depends only on the row before it at that pointer: if that row is an allocate,
    the pointer is live with that size; otherwise (a free, or none) it is not live.
    """
    action = events["action"].to_numpy()
    size = events["size_bytes"].to_numpy()
    links = pointer_links(action, events["pointer"].to_numpy())
    live = np.empty(len(action), np.int64)
    for start, block in live_blocks(action, size, links.prev_alloc):
        live[start : start + len(block)] = block
    return LiveTrace(live, links.prev_alloc, links.has_next)


def previous_allocations(events: pd.DataFrame) -> RowArray:
    """`live_trace(events).prev_alloc` alone (what a replay program needs), in less memory."""
    action = events["action"].to_numpy()
    return pointer_links(action, events["pointer"].to_numpy(), want_next=False).prev_alloc


def _at(events: pd.DataFrame, column: str, row: int) -> int:
    """One cell as a Python int."""
    return int(events[column].to_numpy()[row])


def _ref(events: pd.DataFrame, sources: list[str], row: int) -> LineRef:
    return LineRef(sources[_at(events, "file_index", row)], _at(events, "line", row))


#: The anomaly kinds `row_figures` counts, by the names they are reported under, in order.
ANOMALY_NAMES = {
    "free_unknown": Effect.FREE_UNKNOWN.value,
    "replaced": Effect.REPLACED_LIVE.value,
    "replaced_zero": Effect.REPLACED_LIVE_ZERO_SIZE.value,
    "size_mismatch": Effect.FREED_SIZE_MISMATCH.value,
    "late": "out_of_time_order",
    "failed": Effect.FAILED.value,
}


def analyze(log: AllocationLog) -> LogSummary:
    """All figures of `hipmem log inspect`: every row read once, a block at a time, beside
    the pointer links (memory near one int32 column on top of the log's own)."""
    events = log.events
    sources = log.sources
    action = events["action"].to_numpy()
    size = events["size_bytes"].to_numpy()
    time_ns = events["time_ns"].to_numpy()
    n = len(events)
    links = pointer_links(action, events["pointer"].to_numpy())
    rows = row_figures(
        action, size, time_ns, events["file_index"].to_numpy(), links.prev_alloc,
        links.has_next, names=ANOMALY_NAMES, first_kept=FIRST_LINES,
        failures_kept=FAILURES_KEPT, largest_kept=LARGEST,
    )  # fmt: skip
    anomalies = [
        Anomaly(
            name,
            ANOMALY_DESCRIPTIONS[name],
            rows.anomaly_counts[name],
            [_ref(events, sources, r) for r in rows.anomaly_rows[name]],
        )
        for name in ANOMALY_NAMES.values()
    ]
    per_thread = _groups(events, links.prev_alloc, "thread")
    per_stream = _groups(events, links.prev_alloc, "stream")
    return LogSummary(
        sources=list(sources),
        events=n,
        allocate_rows=rows.allocate_rows,
        free_rows=rows.free_rows,
        failure_rows=rows.failure_rows,
        first_time_ns=int(time_ns.min()) if n else None,
        last_time_ns=int(time_ns.max()) if n else None,
        span_ns=int(time_ns.max() - time_ns.min()) if n else 0,
        threads=len(per_thread),
        streams=len(per_stream),
        peak=_peak(events, sources, rows),
        live_at_end_count=rows.live_at_end_count,
        live_at_end_bytes=rows.live_at_end_bytes,
        zero_byte_allocations=rows.zero_byte_allocations,
        zero_byte_live_at_end=rows.zero_byte_live_at_end,
        per_thread=per_thread,
        per_stream=per_stream,
        size_histogram=_buckets(rows.buckets),
        largest=_largest(events, sources, links.prev_alloc, rows.largest_rows),
        anomalies=anomalies,
        failures=_failures(events, sources, rows.failures),
        skipped_count=log.skipped_count,
        skipped=[LineRef(s.source, s.line) for s in log.skipped],
        skipped_reasons=[s.reason for s in log.skipped],
        recordings=list(log.recordings),
    )


def _peak(events: pd.DataFrame, sources: list[str], rows: RowFigures) -> PeakPoint | None:
    if rows.peak_row < 0:  # no row with live bytes above 0
        return None
    row = rows.peak_row
    ref = _ref(events, sources, row)
    return PeakPoint(rows.peak_live_bytes, row, ref.source, ref.line, _at(events, "time_ns", row))


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


def _groups(events: pd.DataFrame, prev_alloc: RowArray, column: str) -> list[GroupFigures]:
    owners = owner_figures(
        events[column].to_numpy(),
        events["action"].to_numpy(),
        events["size_bytes"].to_numpy(),
        prev_alloc,
    )
    return [
        GroupFigures(
            key=int(key),
            events=int(row.sum()),
            allocate_rows=int(row[ALLOCATE]),
            free_rows=int(row[FREE]),
            failure_rows=int(row[ALLOCATE_FAILURE]),
            peak_live_bytes=int(peak),
        )
        for key, row, peak in zip(
            owners.keys, owners.action_rows, owners.peak_live_bytes, strict=True
        )
    ]


def size_histogram(sizes_bytes: Int64Array) -> list[SizeBucket]:
    """Power-of-two buckets [2^k, 2^(k+1)) of non-zero sizes, lowest first; empty ones left out."""
    buckets = SizeBuckets()
    for start in range(0, len(sizes_bytes), BLOCK_ROWS):
        buckets.add(sizes_bytes[start : start + BLOCK_ROWS])
    return _buckets(buckets)


def _buckets(buckets: SizeBuckets) -> list[SizeBucket]:
    return [
        SizeBucket(
            1 << int(b), 1 << (int(b) + 1), int(buckets.counts[b]), int(buckets.totals_bytes[b])
        )
        for b in np.flatnonzero(buckets.counts)
    ]


def _largest(
    events: pd.DataFrame, sources: list[str], prev_alloc: RowArray, rows: list[int]
) -> list[LargeAllocation]:
    action = events["action"].to_numpy()
    result = []
    for row in rows:
        # The row after an allocate at its pointer is the one that meets it there.
        after = np.flatnonzero(prev_alloc == row)
        ref = _ref(events, sources, row)
        result.append(
            LargeAllocation(
                source=ref.source,
                line=ref.line,
                size_bytes=_at(events, "size_bytes", row),
                pointer=_at(events, "pointer", row),
                thread=_at(events, "thread", row),
                stream=_at(events, "stream", row),
                freed=len(after) > 0 and int(action[after[0]]) == FREE,
            )
        )
    return result


def _failures(
    events: pd.DataFrame, sources: list[str], failures: list[tuple[int, int]]
) -> list[FailureRow]:
    return [
        FailureRow(
            source=_ref(events, sources, r).source,
            line=_ref(events, sources, r).line,
            size_bytes=_at(events, "size_bytes", r),
            live_bytes=live,  # a failure changes nothing: after == before
            time_ns=_at(events, "time_ns", r),
        )
        for r, live in failures
    ]
