"""The analysis goes a block of rows at a time (issue 33: 20 M rows in bounded memory); its
figures must not depend on where the blocks end. Blocks of 1 and 3 rows put an edge between
every pair of rows that could interact; generated logs reuse few pointers, so every anomaly
and every owner crosses block edges."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipmem.replay.logs.analysis import (
    LogSummary,
    analyze,
    live_trace,
    owner_traces,
    previous_allocations,
)
from hipmem.replay.logs.loader import load_log
from hipmem.replay.logs.pointer_links import row_dtype
from tests.log_reference import DATA_LOGS, REAL_LOGS, Row, read_rows
from tests.replay.logs.test_log_analysis import assert_figures_match_walk

ALL_LOGS = REAL_LOGS + sorted(DATA_LOGS.glob("*.csv"))
SMALL_BLOCKS = (1, 3, 64)


@contextlib.contextmanager
def block_rows(rows: int) -> Iterator[None]:
    """Every module of the log analysis that reads `BLOCK_ROWS` reads `rows` instead."""
    with contextlib.ExitStack() as stack:
        for name, module in list(sys.modules.items()):
            if name.startswith("hipmem.replay.logs.") and hasattr(module, "BLOCK_ROWS"):
                stack.enter_context(mock.patch.object(module, "BLOCK_ROWS", rows))
        yield


def _largest_walked(rows: list[Row]) -> list[tuple[int, int, bool]]:
    """(line, size, freed) of the ten largest allocations, the earlier first among equal
    sizes; freed: the next row at the pointer (failures touch none) is a free."""
    touching = [r for r in rows if r.action != "allocate failure"]
    freed = {}
    for i, r in enumerate(touching):
        if r.action == "allocate":
            after = next((n for n in touching[i + 1 :] if n.pointer == r.pointer), None)
            freed[r.line] = after is not None and after.action == "free"
    allocs = sorted((r for r in touching if r.action == "allocate"), key=lambda r: -r.size)
    return [(r.line, r.size, freed[r.line]) for r in allocs[:10]]


def _check(summary: LogSummary, rows: list[Row]) -> None:
    assert_figures_match_walk(summary, rows)
    assert [(a.line, a.size_bytes, a.freed) for a in summary.largest] == _largest_walked(rows)


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_figures_do_not_depend_on_the_block_size(path: Path) -> None:
    log = load_log([path])
    whole = analyze(log).as_dict()
    trace = live_trace(log.events)
    streams = owner_traces(log.events, trace, "stream")
    for rows in SMALL_BLOCKS:
        with block_rows(rows):
            assert analyze(log).as_dict() == whole, rows
            small = live_trace(log.events)
            assert small.live_bytes.tolist() == trace.live_bytes.tolist()
            assert small.prev_alloc.tolist() == trace.prev_alloc.tolist()
            assert small.has_next.tolist() == trace.has_next.tolist()
            assert previous_allocations(log.events).tolist() == trace.prev_alloc.tolist()
            got = owner_traces(log.events, small, "stream")
            assert {k: (r.tolist(), v.tolist()) for k, (r, v) in got.items()} == {
                k: (r.tolist(), v.tolist()) for k, (r, v) in streams.items()
            }


def test_several_files_at_every_block_size() -> None:
    # Rows are late only against the row before in the same file: file edges inside blocks.
    log = load_log(sorted(DATA_LOGS.glob("*.csv")) + REAL_LOGS)
    whole = analyze(log).as_dict()
    assert whole["anomalies"]["out_of_time_order"] > 0
    for rows in SMALL_BLOCKS:
        with block_rows(rows):
            assert analyze(log).as_dict() == whole, rows


def test_largest_allocations_as_walked() -> None:
    for path in ALL_LOGS:
        rows, _ = read_rows(path)
        _check(analyze(load_log([path])), rows)


def test_row_numbers_are_int32_below_two_to_the_31() -> None:
    assert row_dtype((1 << 31) - 1) is np.int32  # every row number and -1 fit
    assert row_dtype(1 << 31) is np.int64
    log = load_log([REAL_LOGS[0]])
    assert previous_allocations(log.events).dtype == np.int32


ACTIONS = st.sampled_from(["allocate"] * 5 + ["free"] * 4 + ["allocate failure"])
ROW = st.tuples(
    st.sampled_from([7, 8, 9]),  # thread
    st.integers(-3, 5),  # microseconds since the row before: a few rows come late
    ACTIONS,
    st.sampled_from(["(nil)", "0x10", "0x20", "0x30", "0x7f0000000040"]),
    st.sampled_from([0, 1, 100, 4096, 1 << 20, (1 << 40) + 3]),
    st.sampled_from(["0", "0x5", "0x7"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROW, min_size=1, max_size=80))
def test_generated_logs_match_the_walk_at_every_block_size(
    rows: list[tuple[int, int, str, str, int, str]],
) -> None:
    lines, micros = ["Thread,Time,Action,Pointer,Size,Stream"], 10**9
    for thread, step, action, pointer, size, stream in rows:
        micros += step
        stamp = f"10:{micros // 60_000_000 % 60:02d}:{micros // 1_000_000 % 60:02d}"
        lines.append(
            f"{thread},{stamp}.{micros % 1_000_000:06d},{action},{pointer},{size},{stream}"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "generated.csv"
        path.write_text("\n".join(lines) + "\n")
        walked, bad = read_rows(path)
        assert not bad
        log = load_log([path])
        whole = analyze(log)
        _check(whole, walked)
        for block in SMALL_BLOCKS[:2]:
            with block_rows(block):
                small = analyze(log)
            _check(small, walked)
            assert small.as_dict() == whole.as_dict()
