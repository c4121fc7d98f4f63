"""`benchmarks/core_to_core_handoff.cpp`, built and run for real: the machine's own cost of a
hand-off, which the threaded bench sets beside what the null replay pays per hand-off. Its
matrix and its ring must say what they measured, whatever the machine (2 cores here)."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import bench_threaded_replay as bench

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None, reason="needs a C++ compiler"
)


@pytest.fixture(scope="module")
def handoff(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = bench.handoff_binary(tmp_path_factory.mktemp("handoff"))
    assert binary is not None and binary.exists()
    return binary


def test_turn_owners_are_the_thread_of_each_run() -> None:
    program = SimpleNamespace(thread_index=np.array([0, 0, 1, 2, 2, 2, 0, 1, 1], dtype=np.int32))
    assert bench.turn_owners(program).tolist() == [0, 1, 2, 0, 1]
    assert bench.handoffs(program) == 4


def test_bare_threads_pass_the_turn_in_the_programs_order(handoff: Path, tmp_path: Path) -> None:
    # Two threads, as many as this machine's cores: a third would spin on a core another
    # spinner holds, and each hand-off would wait for the scheduler.
    owners = np.tile(np.array([0, 1], dtype=np.int32), 500)
    program = SimpleNamespace(thread_index=np.repeat(owners, 2))  # runs of two ops
    ns_per_handoff = bench.sequence_handoff(handoff, program, runs=3, work=tmp_path)
    assert len(ns_per_handoff) == 3
    assert all(ns > 0.0 and math.isfinite(ns) for ns in ns_per_handoff)
    assert (tmp_path / "turn_owners.txt").read_text().split() == [str(t) for t in owners]


def test_one_thread_has_no_hand_off_to_time(handoff: Path, tmp_path: Path) -> None:
    program = SimpleNamespace(thread_index=np.zeros(10, dtype=np.int32))
    assert bench.sequence_handoff(handoff, program, runs=2, work=tmp_path) == []
    assert bench.sequence_handoff(None, program, runs=2, work=tmp_path) == []


def test_sequence_file_without_two_owners_is_refused(handoff: Path, tmp_path: Path) -> None:
    sequence = tmp_path / "one.txt"
    sequence.write_text("0\n")
    done = subprocess.run([str(handoff), "--sequence", str(sequence), "2"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "at least two thread indices" in done.stderr


def test_matrix_has_every_pair_of_allowed_cpus(handoff: Path) -> None:
    found = bench.bare_handoff(handoff, rounds=2_000)
    assert found is not None
    matrix = found["matrix_ns"]
    assert len(matrix) == found["cpus"] and all(len(row) == found["cpus"] for row in matrix)
    for a, row in enumerate(matrix):
        for b, cell in enumerate(row):
            assert (cell is None) == (a == b)
    if found["cpus"] > 1:
        assert 0.0 < found["min_ns"] <= found["median_ns"] <= found["max_ns"]
