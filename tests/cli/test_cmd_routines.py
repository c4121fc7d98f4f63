"""`hipmem routines [PATTERN] [--json]` lists catalog routines with their default rules."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hipmem.sizing.defaults import rules_for
from hipmem.sizing.rocm.catalog import load_catalog
from tests.cli_run import hipmem as run_hipmem

REPO = Path(__file__).parents[2]


def _hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO)


def test_json_lists_matching_routines_with_their_rules() -> None:
    run = _hipmem("routines", "dgetrf", "--json")
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    catalog = load_catalog()
    assert [r["name"] for r in listed] == sorted(n for n in catalog.routines if "dgetrf" in n)
    plain = next(r for r in listed if r["name"] == "rocsolver_dgetrf")
    rules = rules_for("getrf")
    assert [(a["name"], a["default"], a["required"]) for a in plain["arguments"]] == [
        ("m", None, True),
        ("n", None, True),
        ("lda", rules["lda"], False),
    ]


def test_glob_pattern_and_table() -> None:
    run = _hipmem("routines", "rocblas_?gemv")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("4 routines")
    for name in ("rocblas_sgemv", "rocblas_dgemv", "rocblas_cgemv", "rocblas_zgemv"):
        assert name in run.stdout
    assert "lda=max(1, m)" in run.stdout and "m*" in run.stdout


def test_no_match_is_a_usage_error() -> None:
    run = _hipmem("routines", "nosuchroutine")
    assert run.returncode == 2
    assert run.stderr.startswith("Error: no routine matches 'nosuchroutine'")
