"""hipmem's own workload file: the sample sizes, and every schema error names file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hipmem.sizing.calls.spec import make_call, parse_call
from hipmem.sizing.calls.workload_file import read_workload
from hipmem.sizing.errors import WorkloadError
from tests.cli_run import hipmem as run_hipmem

REPO = Path(__file__).parents[3]
SAMPLE = REPO / "samples" / "workload.yaml"


def test_the_sample_workload() -> None:
    calls = read_workload(SAMPLE)
    entries = yaml.safe_load(SAMPLE.read_text())["calls"]
    assert len(calls) == len(entries)
    for (call, count), entry in zip(calls, entries, strict=True):
        expected = (
            parse_call(entry["call"])
            if "call" in entry
            else make_call(entry["routine"], entry["args"])
        )
        assert call.key() == expected.key()
        assert count == entry.get("count", 1)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("version: 1\ncalls:\n  - call: rocsolver_dgetrf:m=8,n=8\n    cuont: 3\n", 3,
         "Additional properties are not allowed ('cuont'"),
        ("version: 1\ncalls:\n  - call: rocsolver_dgetrf:m=8,n=8\n    count: 0\n", 4,
         "0 is less than the minimum of 1"),
        ("calls:\n  - call: rocsolver_dgetrf:m=8,n=8\n", 1, "'version' is a required property"),
        ("version: 1\ncalls:\n  - note: nothing\n  - routine: rocsolver_dgetrf\n", 3,
         "is not valid under any of the given schemas"),
        ("version: 1\ncalls:\n  - call: rocsolver_dgetrf:m=8,n=8\n"
         "  - routine: rocsolver_dgetrf\n    args: {m: 8, nn: 8}\n", 4,
         "rocsolver_dgetrf has no argument 'nn'"),
        ("version: 1\ncalls:\n  - call: rocsolver_dgetrf:m=8,n=8\n  - call: [\n", 5,
         "not valid YAML"),
        ("version: 2\ncalls: [call: x]\n", 1, "version: 1 was expected"),
        ("version: 1\ncalls: []\n", 2, "calls: [] should be non-empty"),
    ],
)  # fmt: skip
def test_schema_errors_name_the_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        read_workload(path)
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert message in str(caught.value)


def test_cli_sizes_a_workload_and_counts(tmp_path: Path) -> None:
    command = ["size", "--device", "MI210", "--workload", str(SAMPLE), "--json"]
    run = run_hipmem(*command, cwd=REPO)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    counts = {c["routine"]: c["count"] for c in result["calls"]}
    assert counts["rocsolver_dgetrs"] == 100
    assert counts["rocsolver_spotrf_strided_batched"] == 10
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ncalls:\n  - call: rocsolver_dgetrf:m=8,n=8\n    count: -1\n")
    command[-3:] = ["--workload", str(bad)]
    run = run_hipmem(*command, cwd=REPO)
    assert run.returncode == 2
    assert run.stderr == f"Error: {bad}:4: calls/0/count: -1 is less than the minimum of 1\n"
