"""Workload files cost what their distinct entries cost, within limits on entries and values
(issue 48: 50,000 identical calls took 44 s; 400,000 ran past a minute at 586 MB). Costs are
counted (parses, schema checks, memory under RLIMIT_AS), never timed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipmem.sizing.calls import spec, workload_reading
from hipmem.sizing.calls.spec import parse_call
from hipmem.sizing.calls.workload_file import (
    MAX_COUNT,
    MAX_WORKLOAD_ENTRIES,
    MAX_WORKLOAD_VALUES,
    read_workload,
    read_workload_entries,
    read_workload_matmuls,
)
from hipmem.sizing.errors import WorkloadError
from tests.bounded import python_bounded

REPO = Path(__file__).parents[3]
SAMPLE = REPO / "samples" / "workload.yaml"
DGETRF = "  - call: rocsolver_dgetrf:m=1024,n=1024\n"


def _workload(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text("version: 1\ncalls:\n" + body)
    return path


def test_identical_entries_are_parsed_and_checked_once(tmp_path: Path, monkeypatch) -> None:
    path = _workload(tmp_path, DGETRF * 20_000 + DGETRF.replace("\n", "\n    count: 5\n"))
    parsed: list[str] = []
    checked: list[int] = []
    real_parse = spec.parse_call
    real_validator = jsonschema.Draft202012Validator

    def counting_parse(text: str, *args: object) -> object:
        parsed.append(text)
        return real_parse(text, *args)  # type: ignore[arg-type]

    class CountingValidator:
        def __init__(self, schema: object) -> None:
            self.validator = real_validator(schema)  # type: ignore[arg-type]

        def iter_errors(self, instance: object) -> object:
            if isinstance(instance, dict) and "calls" in instance:
                checked.append(len(instance["calls"]))
            return self.validator.iter_errors(instance)

    monkeypatch.setattr("hipmem.sizing.calls.workload_file.parse_call", counting_parse)
    monkeypatch.setattr(jsonschema, "Draft202012Validator", CountingValidator)
    calls = read_workload(path)
    assert [(call.key(), count) for call, count in calls] == [
        (parse_call(DGETRF.split("call: ")[1].strip()).key(), 20_005)
    ]
    assert len(parsed) == 1
    assert checked == [1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "rocsolver_dgetrf:m=8,n=8",
                    "rocsolver_dgetrf:n=8,m=8",
                    "rocsolver_dgetrs:n=8,nrhs=1",
                ]
            ),
            st.one_of(st.none(), st.integers(1, 2**40)),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_identical_entries_add_their_counts_in_first_order(entries) -> None:
    """Entries written alike are one call with their counts added, in the order each first
    appears; entries written differently stay apart (the session adds same calls later)."""
    body = "".join(
        f"  - call: {text}\n" + (f"    count: {count}\n" if count is not None else "")
        for text, count in entries
    )
    expected: dict[str, int] = {}
    for text, count in entries:
        expected[text] = expected.get(text, 0) + (1 if count is None else count)
    with tempfile.TemporaryDirectory() as tmp:
        calls = read_workload(_workload(Path(tmp), body))
    assert [(call.key(), count) for call, count in calls] == [
        (parse_call(text).key(), total) for text, total in expected.items()
    ]


def test_an_error_names_the_first_entry_written_so(tmp_path: Path) -> None:
    bad = "  - call: rocsolver_dgetrf:m=8,n=8\n    cuont: 2\n"
    path = _workload(tmp_path, DGETRF * 3 + bad + DGETRF + bad)
    with pytest.raises(WorkloadError) as caught:
        read_workload(path)
    assert str(caught.value).startswith(f"{path}:6: calls/3: Additional properties")
    path = _workload(tmp_path, DGETRF * 3 + "  - call: rocsolver_dgetrf:m=8,n=8,q=1\n" * 2)
    with pytest.raises(WorkloadError) as caught:
        read_workload(path)
    assert str(caught.value).startswith(f"{path}:6: rocsolver_dgetrf has no argument 'q'")


def test_more_entries_than_the_limit_are_refused_within_memory(tmp_path: Path) -> None:
    """400,000 identical entries (16 MB): refused where the limit is passed, in a process
    that may use 1 GiB of address space (before: 586 MB resident, over a minute)."""
    path = _workload(tmp_path, DGETRF * 400_000)
    assert path.stat().st_size < workload_reading.MAX_WORKLOAD_BYTES
    done = python_bounded(
        "from pathlib import Path\n"
        "from hipmem.sizing.calls.workload_file import read_workload\n"
        f"read_workload(Path({str(path)!r}))\n",
        memory_bytes=1 << 30,
    )
    line = MAX_WORKLOAD_ENTRIES + 3  # the entry past the limit
    assert done.stderr.strip().splitlines()[-1] == (
        f"hipmem.sizing.errors.WorkloadError: {path}:{line}: more than "
        f"{MAX_WORKLOAD_ENTRIES:,} calls, the most a workload may hold: give a call made "
        "many times one entry with `count:`"
    )


def test_more_values_than_the_limit_are_refused(tmp_path: Path) -> None:
    """One entry can hold many values (a sweep list): they are bounded too."""
    values = ",".join(["1"] * MAX_WORKLOAD_VALUES)
    entry = f"  - call: rocsolver_dgetrf:m=8,n=8\n    sweep: {{n: [{values}]}}\n"
    path = _workload(tmp_path, entry)
    with pytest.raises(WorkloadError) as caught:
        read_workload_entries(path)
    assert str(caught.value) == (
        f"{path}:4: more than {MAX_WORKLOAD_VALUES:,} YAML values, the most a workload may hold"
    )


@pytest.mark.parametrize(
    ("count", "said"),
    [
        ("9" * 5_000, f"a whole number of 5,000 digits is greater than the maximum of "
         f"{MAX_COUNT:,} (2**63 - 1)"),
        ("-" + "9" * 41, "a whole number of 41 digits is less than the minimum of 1"),
        (str(2**63), f"{2**63} is greater than the maximum of {MAX_COUNT}"),
        ("0", "0 is less than the minimum of 1"),
        ("true", "True is not of type 'integer'"),
    ],
)  # fmt: skip
def test_a_count_out_of_range_says_so(tmp_path: Path, count: str, said: str) -> None:
    entry = f"  - call: rocsolver_dgetrf:m=8,n=8\n    count: {count}\n"
    path = _workload(tmp_path, DGETRF * 2 + entry)
    with pytest.raises(WorkloadError) as caught:
        read_workload(path)
    assert str(caught.value) == f"{path}:6: calls/2/count: {said}"


def test_counts_added_past_int64_name_the_entry(tmp_path: Path) -> None:
    entry = f"  - call: rocsolver_dgetrf:m=8,n=8\n    count: {2**62}\n"
    path = _workload(tmp_path, entry * 2)
    with pytest.raises(WorkloadError) as caught:
        read_workload(path)
    assert str(caught.value) == (
        f"{path}:5: calls/1: this call is counted more than {MAX_COUNT:,} times in all (2**63 - 1)"
    )


def test_a_workload_through_a_pipe_is_read_whole() -> None:
    """`--workload <(...)`: the calls and the hipBLASLt calls of a workload are read from one
    reading; a pipe read twice was empty the second time ("None is not of type 'object'")."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, SAMPLE.read_bytes())  # far less than a pipe holds
        os.close(write_end)
        pipe = Path(f"/dev/fd/{read_end}")
        assert len(read_workload_entries(pipe)) == 4
        assert read_workload_matmuls(pipe) == ({}, 4)
    finally:
        os.close(read_end)
