"""Analysis figures against a plain-Python walk over the csv rows (tests/log_reference.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipmem.replay.logs.analysis import (
    ALLOCATE,
    FREE,
    Effect,
    LiveAllocations,
    LogSummary,
    analyze,
    size_histogram,
)
from hipmem.replay.logs.loader import load_log
from tests.log_reference import DATA_LOGS, REAL_LOGS, Row, figures, read_rows

ALL_LOGS = REAL_LOGS + sorted(DATA_LOGS.glob("*.csv"))
ANOMALY_NAMES = [
    "free_unknown_pointer",
    "allocate_live_pointer",
    "allocate_live_pointer_zero_size",
    "free_size_mismatch",
    "out_of_time_order",
    "allocate_failure",
]


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_figures_match_a_plain_walk_over_the_rows(path: Path) -> None:
    rows, _ = read_rows(path)
    assert_figures_match_walk(analyze(load_log([path])), rows)


def assert_figures_match_walk(s: LogSummary, rows: list[Row]) -> None:
    """Every figure of `s` as the plain walk over `rows` (one file's good rows) gives it."""
    expected = figures(rows)
    assert s.events == len(rows)
    assert s.allocate_rows == sum(r.action == "allocate" for r in rows)
    assert s.free_rows == sum(r.action == "free" for r in rows)
    assert s.failure_rows == sum(r.action == "allocate failure" for r in rows)
    assert s.threads == len({r.thread for r in rows})
    assert s.streams == len({r.stream for r in rows})
    assert s.span_ns == max(r.time_ns for r in rows) - min(r.time_ns for r in rows)

    assert s.peak_live_bytes == expected.peak_bytes
    assert (s.peak.line if s.peak else None) == expected.peak_line
    assert (s.live_at_end_count, s.live_at_end_bytes) == (
        expected.live_end_count,
        expected.live_end_bytes,
    )
    assert s.zero_byte_allocations == expected.zero_byte_allocations
    assert s.zero_byte_live_at_end == expected.zero_byte_live_end

    for anomaly in s.anomalies:
        lines = expected.anomalies.get(anomaly.name, [])
        assert anomaly.count == len(lines), anomaly.name
        assert [ref.line for ref in anomaly.first] == lines[:5], anomaly.name
    assert [a.name for a in s.anomalies] == ANOMALY_NAMES
    assert [(f.line, f.live_bytes) for f in s.failures] == expected.failures_live[:20]

    assert {g.key: g.events for g in s.per_thread} == expected.thread_events
    assert {g.key: g.events for g in s.per_stream} == expected.stream_events
    assert {g.key: g.peak_live_bytes for g in s.per_thread} == {
        k: expected.thread_peak.get(k, 0) for k in expected.thread_events
    }
    assert {g.key: g.peak_live_bytes for g in s.per_stream} == {
        k: expected.stream_peak.get(k, 0) for k in expected.stream_events
    }
    assert {b.low_bytes: b.count for b in s.size_histogram} == expected.histogram
    allocs = sorted((r.size for r in rows if r.action == "allocate"), reverse=True)
    assert [a.size_bytes for a in s.largest] == allocs[:10]


def test_crafted_anomalies_are_where_they_were_written() -> None:
    # tests/data/logs/anomalies.csv was written with one case per line (see the file).
    s = analyze(load_log([DATA_LOGS / "anomalies.csv"]))
    lines = {a.name: [ref.line for ref in a.first] for a in s.anomalies}
    assert lines == {
        "free_unknown_pointer": [3, 12],
        "allocate_live_pointer": [4],
        "allocate_live_pointer_zero_size": [6],
        "free_size_mismatch": [8],
        "out_of_time_order": [9],
        "allocate_failure": [10],
    }
    # live before the failure: 3000 (0x1000 re-allocated) + 0 + 7000 (0x4000) = 10000
    assert [(f.line, f.size_bytes, f.live_bytes) for f in s.failures] == [(10, 1_000_000, 10_000)]


def test_per_stream_live_bytes_follow_the_allocating_stream() -> None:
    # In anomalies.csv, 0x1000 is allocated on stream 0 and freed on stream 0x5: the free
    # takes the bytes off stream 0, so stream 0x5 never holds more than its zero-byte blocks.
    s = analyze(load_log([DATA_LOGS / "anomalies.csv"]))
    assert {g.key: g.peak_live_bytes for g in s.per_stream} == {0: 10_000, 5: 0}


def test_rules_one_event_at_a_time() -> None:
    live = LiveAllocations()
    assert live.apply(ALLOCATE, 0x10, 100) is Effect.ALLOCATED
    assert live.apply(ALLOCATE, 0x10, 50) is Effect.REPLACED_LIVE
    assert live.live_bytes == 50
    assert live.apply(FREE, 0x10, 70) is Effect.FREED_SIZE_MISMATCH
    assert live.live_bytes == 0
    assert live.apply(FREE, 0x10, 50) is Effect.FREE_UNKNOWN
    assert live.apply(ALLOCATE, 0, 0) is Effect.ALLOCATED
    assert live.apply(ALLOCATE, 0, 0) is Effect.REPLACED_LIVE_ZERO_SIZE
    assert live.apply(2, 0, 1 << 40) is Effect.FAILED
    assert live.live_bytes == 0


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.name)
def test_vectorised_rules_equal_the_one_event_rules(path: Path) -> None:
    log = load_log([path])
    live = LiveAllocations()
    walked = []
    for action, pointer, size in zip(
        log.events["action"], log.events["pointer"], log.events["size_bytes"], strict=True
    ):
        live.apply(int(action), int(pointer), int(size))
        walked.append(live.live_bytes)
    from hipmem.replay.logs.analysis import live_trace

    assert live_trace(log.events).live_bytes.tolist() == walked


def test_size_histogram_buckets_are_powers_of_two() -> None:
    import numpy as np

    sizes = np.array([0, 1, 2, 3, 4, 1023, 1024, (1 << 53) - 1, 1 << 53], np.int64)
    buckets = {(b.low_bytes, b.high_bytes): (b.count, b.total_bytes) for b in size_histogram(sizes)}
    assert buckets == {
        (1, 2): (1, 1),
        (2, 4): (2, 5),
        (4, 8): (1, 4),
        (512, 1024): (1, 1023),
        (1024, 2048): (1, 1024),
        (1 << 52, 1 << 53): (1, (1 << 53) - 1),
        (1 << 53, 1 << 54): (1, 1 << 53),
    }


def test_empty_log_has_no_peak(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("Thread,Time,Action,Pointer,Size,Stream\n")
    s = analyze(load_log([path]))
    assert (s.events, s.peak, s.peak_live_bytes, s.span_ns) == (0, None, 0, 0)
    assert s.as_dict()["live_at_end"] == {"count": 0, "bytes": 0}
