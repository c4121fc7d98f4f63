"""The hip backend's own calls, through hip-python, against the virtual device's stand-in
runtime (host memory capped at the virtual device's memory). No AMD GPU is needed, so CI runs
the AMD code path; the figures are checked against a row-by-row reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hipmem.replay.logs.loader import load_log
from hipmem.sizing.rocm.locator import locate
from hipmem.sizing.worker.shim_build import build_shim
from tests.cli_run import hipmem_process
from tests.conftest import REPO
from tests.replay_reference import reference_failures, reference_peak_bytes

SAMPLE = REPO / "samples" / "serve-first-2000.csv.gz"


@pytest.fixture(scope="module")
def shim(rocm: Path) -> Path:
    include_dir = locate().include_dir
    assert include_dir is not None
    return build_shim(include_dir)


def replay_json(shim: Path, memory_bytes: int, *resources: str) -> dict:
    args = [arg for resource in resources for arg in ("-r", resource)]
    # A process of its own: the loader reads LD_LIBRARY_PATH (the stand-in runtime) at start.
    done = hipmem_process(
        "replay", str(SAMPLE), *args, "--backend", "hip", "--threads", "single", "--json",
        timeout=300, LD_LIBRARY_PATH=str(shim), HIPMEM_VDEV_MEM_BYTES=str(memory_bytes),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_hip_async_and_managed_replay_the_log(shim: Path) -> None:
    report = replay_json(shim, 8 << 30, "hip", "async", "managed")
    peak = reference_peak_bytes(load_log([SAMPLE]))
    assert [r["resource"] for r in report["resources"]] == ["hip", "async", "managed"]
    for resource in report["resources"]:
        assert resource["backend"] == "hip"
        assert resource["outcome"] == "completed" and resource["failure_count"] == 0
        assert resource["ops_done"] == resource["ops"] == 2000
        assert resource["peak_requested_bytes"] == peak
        assert resource["peak_reserved_bytes"] >= peak  # host memory: what was asked for


def test_failures_on_a_small_virtual_device_are_the_reference_rows(shim: Path) -> None:
    limit = 700 << 20
    report = replay_json(shim, limit, "hip")
    (hip,) = report["resources"]
    expected = reference_failures(load_log([SAMPLE]), limit)
    assert expected, "the limit must refuse something for this test to mean anything"
    assert [f["event_index"] for f in hip["failures"]] == expected[: len(hip["failures"])]
    assert hip["failure_count"] == len(expected)
    first = hip["failures"][0]
    assert first["source"].endswith("serve-first-2000.csv.gz")
    assert first["line"] == expected[0] + 2  # the header is line 1
