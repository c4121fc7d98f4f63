"""`hipmem size/recommend/check --minimum` as a user runs them (tests/cli_run.py, the real
rocBLAS 4.4.1 of ROCm 6.4 on a virtual MI210). Expected figures: rocBLAS's trsm formula
(tests/sizing/test_minimum.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli_run import hipmem as run_hipmem
from tests.sizing.test_minimum import trsm_formula

TRSM = "dtrsm:side=left,uplo=lower,m=1024,n=256"
GETRF = "rocsolver_dgetrf:m=256,n=256"
OPTIMAL, MINIMUM = trsm_formula(1024, 256, left=True, element_bytes=8)


def hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, unset=["ROCBLAS_DEVICE_MEMORY_SIZE"], COLUMNS="80")


COMMON = ("--rocm", "6.4", "--device", "MI210", "--minimum")


def test_size_minimum_json_has_both_thresholds(rocm64: Path) -> None:
    done = hipmem("size", *COMMON, TRSM, GETRF, "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    trsm, getrf = payload["calls"]
    assert (trsm["bytes"], trsm["optimal_bytes"], trsm["minimum_bytes"]) == (
        OPTIMAL,
        OPTIMAL,
        MINIMUM,
    )
    assert (trsm["between_status"], trsm["minimum_method"]) == ("perf_degraded", "measured")
    assert getrf["minimum_method"] == "query" and getrf["minimum_bytes"] == getrf["bytes"]
    assert payload["session_minimum_bytes"] == max(MINIMUM, getrf["bytes"])


def test_size_minimum_table_never_cuts_a_number(rocm64: Path) -> None:
    done = hipmem("size", *COMMON, TRSM)
    assert done.returncode == 0, done.stderr
    assert f"{MINIMUM:,}" in done.stdout and f"{OPTIMAL:,}" in done.stdout
    assert "…" not in done.stdout
    assert f"session minimum {_human(MINIMUM)} ({MINIMUM:,} bytes)" in done.stdout


def _human(n_bytes: int) -> str:
    from hipmem.cli.output import human_bytes

    return human_bytes(n_bytes)


def test_recommend_minimum_says_which_calls_run_degraded(rocm64: Path) -> None:
    done = hipmem("recommend", *COMMON, TRSM, GETRF, "--format", "json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["basis"] == "minimum"
    assert payload["rocblas_device_memory_size_bytes"] == payload["session_bytes"]
    assert payload["session_bytes"] >= MINIMUM
    assert any(TRSM.split(":")[1] in call for call in payload["degraded_calls"])
    assert "runs degraded: rocblas_dtrsm" in done.stderr


@pytest.mark.parametrize(
    ("value", "exit_code", "says"),
    [
        (OPTIMAL, 0, "covers the workload"),
        (MINIMUM, 0, "1 call(s) degraded"),
        (MINIMUM - 1, 1, "its measured minimum: below it the call fails"),
    ],
)
def test_check_between_minimum_and_optimal_passes_with_a_warning(
    rocm64: Path, value: int, exit_code: int, says: str
) -> None:
    done = hipmem("check", *COMMON, TRSM, "--value", str(value))
    assert done.returncode == exit_code, done.stderr
    assert says in done.stdout + done.stderr
    degraded = "runs degraded: rocblas_dtrsm" in done.stderr
    assert degraded == (value == MINIMUM)
