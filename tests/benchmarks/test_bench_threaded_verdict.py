"""The verdict of `benchmarks/bench_threaded_replay.py`, read from results as a device run saves
them: what counts as "the reference is slower than RMM's binary" and as a ranking that
disagrees. The measuring itself needs an NVIDIA GPU and RMM's binary; this is the part that
turns its figures into met / not met, and it runs anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_threaded_replay as bench

ROOT = Path(__file__).resolve().parents[2]


def saved_log(rmm: list[float], as_rmm: list[float]) -> dict[str, Any]:
    """One log's results in the shape the bench saves; only `arena` differs between calls."""
    steady = [50.0, 52.0, 51.0]
    return {
        "events": 1000,
        "threads": 2,
        "handoffs": 10,
        "hipmem": {"pool": [20.0, 21.0], "binning": [18.0, 19.0], "arena": [30.0, 31.0]},
        "reference": {"pool": [60.0, 70.0], "binning": [55.0, 65.0], "arena": [80.0, 90.0]},
        "rmm": {"pool": steady, "binning": steady, "arena": rmm},
        "reference_as_rmm": {"pool": steady, "binning": steady, "arena": as_rmm},
        "modes": {
            label: {"pool": 400.0, "binning": 380.0, "arena": 600.0, "null": 20.0}
            for label in bench.MODES
        },
    }


def test_sign_test_tail_is_the_binomial_tail() -> None:
    assert bench.sign_test_p(0, 11) == 1.0
    assert bench.sign_test_p(11, 11) == pytest.approx(1 / 2048)
    assert bench.sign_test_p(9, 11) == pytest.approx((55 + 11 + 1) / 2048)  # 0.0327
    assert bench.sign_test_p(8, 11) > bench.SIGNIFICANCE > bench.sign_test_p(9, 11)


def test_pairs_not_medians_decide_which_is_faster() -> None:
    # Drift moves every pair by more than the tools differ: the reference wins 10 of 11 pairs
    # although its median is the higher one (serve with binning, 2026-11-22).
    rmm = [86, 89, 88, 84, 87, 90, 96, 112, 107, 101, 127]
    as_rmm = [77, 80, 92, 76, 83, 89, 95, 111, 95, 95, 112]
    paired = bench.against_rmm([float(x) for x in rmm], [float(x) for x in as_rmm])
    assert paired["reference_faster"] == 10 and paired["pairs"] == 11
    assert paired["speed_ratio"] > 1.0
    assert paired["p_reference_slower"] == pytest.approx(1 - 1 / 2048)


def test_verdict_flags_a_reference_slower_in_nearly_every_pair(
    capsys: pytest.CaptureFixture[str],
) -> None:
    slower = saved_log(rmm=[50.0 + i for i in range(11)], as_rmm=[55.0 + i for i in range(11)])
    bench.verdict({"logs": {"gpt": slower}})
    out = capsys.readouterr().out
    assert "reference surely slower than RMM on ['arena']" in out
    assert "NOT all targets met" in out


def test_verdict_counts_a_tie_as_level(capsys: pytest.CaptureFixture[str]) -> None:
    rmm = [100.0, 96.0, 120.0, 89.0, 97.0, 103.0]  # slower in 3 of 6 pairs: chance
    as_rmm = [101.0, 95.0, 121.0, 88.0, 98.0, 102.0]
    bench.verdict({"logs": {"serve": saved_log(rmm, as_rmm)}})
    assert "ALL TARGETS MET" in capsys.readouterr().out


def test_ranking_counts_only_where_the_reference_ranges_are_apart() -> None:
    ours = {"pool": [10.0], "binning": [5.0], "arena": [30.0]}
    apart = {"pool": [50.0, 52.0], "binning": [60.0, 70.0], "arena": [90.0]}
    overlapping = {"pool": [50.0, 65.0], "binning": [60.0, 70.0], "arena": [90.0]}
    assert bench.agreeing_order(apart, ours) == ["pool/binning"]
    assert bench.agreeing_order(overlapping, ours) == []


def test_from_json_reprints_a_saved_run_without_a_gpu(tmp_path: Path) -> None:
    saved = tmp_path / "bench_threaded_replay.json"
    saved.write_text(json.dumps({"logs": {"gpt": saved_log([50.0, 51.0], [49.0, 50.0])}}))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_threaded_replay.py"),
         "--from-json", str(saved)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| arena | 50.50 [50.00-51.00] | 49.50 [49.00-50.00] |" in done.stdout
    assert "faster in 2 of 2 pairs" in done.stdout
    assert "ALL TARGETS MET" in done.stdout


def test_hand_offs_are_priced_only_where_frequent(capsys: pytest.CaptureFixture[str]) -> None:
    found = saved_log([50.0] * 3, [50.0] * 3)
    found["modes"]["threads=logged streams=logged"]["null"] = 60.0  # single: 20.0
    found["bare_sequence_ns_per_handoff"] = [150.0, 170.0, 160.0]
    bench.print_handoffs(found)  # 10 in 1,000 events
    assert "too few to price" in capsys.readouterr().out
    found["handoffs"] = 200  # 0.2 per event: 40 ns per event more is 200 ns per hand-off
    bench.print_handoffs(found)
    out = capsys.readouterr().out
    assert "streams=logged: 200 ns" in out and "streams=default: 0 ns" in out
    assert "160 ns per hand-off [150-170]" in out
