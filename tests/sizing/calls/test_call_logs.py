"""Call logs written by the real rocBLAS/rocSOLVER (through the virtual device) read back into
the calls that produced them; bad lines counted with line numbers; the `hipmem size` reports."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from hipmem.sizing.calls.log_formats import (
    BAD_ARGUMENT,
    BENCH_COMMANDS,
    NEWER_LIBRARY,
    NOT_A_CALL,
    ROCBLAS_BENCH,
    ROCBLAS_PROFILE,
    ROCBLAS_TRACE,
    ROCSOLVER_BENCH,
    TRUNCATED,
    UNKNOWN_FUNCTION,
)
from hipmem.sizing.calls.log_recorder import record_call_logs as record
from hipmem.sizing.calls.logs import read_call_log
from hipmem.sizing.calls.spec import Call, make_call, parse_call
from hipmem.sizing.defaults import rules_for
from hipmem.sizing.errors import CallLogError
from hipmem.sizing.rocm.catalog import load_catalog
from tests.call_log_recorder import FIXTURE_CALLS, FIXTURES
from tests.cli_run import hipmem as run_hipmem
from tests.terminal import unwrapped

REPO = Path(__file__).parents[3]
SAMPLES = REPO / "samples"


def _expected(library: str, rename: dict[str, str] | None = None, skip: tuple[str, ...] = ()):
    """The fixture calls of one library as {call key: count}, from FIXTURE_CALLS alone."""
    counts: Counter[tuple] = Counter()
    for text in FIXTURE_CALLS:
        call = parse_call(text)
        if call.routine.library != library or call.routine.family in skip:
            continue
        name = (rename or {}).get(call.routine.name)
        if name is not None:
            call = make_call(name, call.args)
        counts[call.key()] += 1
    return dict(counts)


def _read(name: str):
    log = read_call_log(FIXTURES / name)
    return log, {call.key(): count for call, count in log.calls}


def test_rocblas_bench_log_gives_back_the_calls() -> None:
    log, calls = _read("rocblas-bench.log")
    assert log.format == ROCBLAS_BENCH
    assert log.problems == []
    # rocBLAS's bench log leaves trtri out and writes zdotc as `-f dot -r f64_c` (zdotu).
    expected = _expected(
        "rocblas",
        rename={"rocblas_zdotc_strided_batched": "rocblas_zdotu_strided_batched"},
        skip=("trtri",),
    )
    assert calls == expected


def test_rocblas_profile_yaml_counts_with_call_count() -> None:
    log, calls = _read("rocblas-profile.yaml")
    assert log.format == ROCBLAS_PROFILE
    assert log.problems == []
    # The profile keeps no alpha/beta: those are the defaults (1) anyway.
    assert calls == _expected("rocblas")
    assert log.line_count == len(calls)  # one line per distinct call, counted in call_count


def test_rocblas_trace_log() -> None:
    log, calls = _read("rocblas-trace.log")
    assert log.format == ROCBLAS_TRACE
    assert log.no_workspace == {"rocblas_create_handle": 1}
    # nrm2, isamax and zdotc leave their result pointer out of the trace: still read.
    assert calls == _expected("rocblas")
    assert log.problems == []


def test_rocsolver_bench_log_with_its_header() -> None:
    log, calls = _read("rocsolver-bench.log")
    assert log.format == ROCSOLVER_BENCH
    assert log.versions == load_catalog("6.4").versions  # recorded with ROCm 6.4
    assert log.ignored_line_count == 3  # ROCSOLVER LOG FILE and two version lines
    assert calls == _expected("rocsolver")


def test_rocsolver_trace_log_is_refused_with_the_reason() -> None:
    with pytest.raises(CallLogError, match=r"records no call arguments.*ROCSOLVER_LAYER=2"):
        read_call_log(FIXTURES / "rocsolver-trace.log")


def _distinct_dimension_calls(library: str) -> list[Call]:
    """Every catalog routine of a library, with different values for m, n and k, so a field
    read into the wrong argument shows."""
    dimensions = {"m": 37, "n": 41, "k": 43}
    catalog = load_catalog()
    calls = []
    for routine in catalog.routines.values():
        if routine.library != library or routine.family.startswith("csrrf"):
            continue
        rules = rules_for(routine.family)
        given = {
            p.name: dimensions.get(p.name, 64 if library == "rocsolver" else 29)
            for p in routine.params
            if p.user_settable and p.name not in rules
        }
        if library == "rocsolver":  # the rocSOLVER walk values are all valid
            given = {name: 64 for name in given}
        calls.append(make_call(routine, given, catalog))
    return calls


def test_every_rocblas_routine_logged_by_the_library_reads_back(tmp_path: Path) -> None:
    calls = _distinct_dimension_calls("rocblas")
    written = record(calls, tmp_path)
    expected = {call.key() for call in calls}
    names = {call.routine.name for call in calls}
    recovered: set[tuple] = set()
    for file in ("rocblas-bench.log", "rocblas-trace.log", "rocblas-profile.yaml"):
        log = read_call_log(written[file])
        got = {call.key() for call, _ in log.calls}
        assert got <= expected, f"{file}: a call read with a wrong argument"
        recovered |= got
        # Lines that are not read are counted, never dropped: every call is accounted for.
        accounted = log.call_count + sum(p.count for p in log.problems)
        assert accounted + sum(log.no_workspace.values()) >= len(log.calls)
    missing = {call.routine.name for call in calls if call.key() not in recovered}
    # rocBLAS logs trsm_ex as a plain trsm in every format it writes.
    assert missing == {name for name in names if name.startswith("rocblas_trsm_")}


def test_every_rocsolver_routine_logged_by_the_library_reads_back(tmp_path: Path) -> None:
    calls = _distinct_dimension_calls("rocsolver")
    written = record(calls, tmp_path)
    log = read_call_log(written["rocsolver-bench.log"])
    assert log.problems == []
    # rocsolver-bench lines do not say ILP64: the _64 routines read back as the 32-bit ones.
    expected = Counter(make_call(c.routine.name.removesuffix("_64"), c.args).key() for c in calls)
    assert {call.key(): count for call, count in log.calls} == dict(expected)


_GEMM = "./rocblas-bench -f gemm -r f32_r --transposeA N --transposeB N -m 128 -n 128 -k 128"
BAD_LOG = f"""\
rocBLAS info: tensile library loaded
{_GEMM} --alpha 1 --lda 128 --ldb 128 --beta 0 --ldc 128
{_GEMM} --alpha 1 --lda 128 --ldb 128 --beta 0 --ldc 128
{_GEMM} --alpha 1 --lda 'trunc
./rocblas-bench -f frobnicate -r f32_r -n 12
./rocblas-bench -f nrm2 -r f64_r -n 99999999999 --incx 1
./rocblas-bench -f axpy -r f32_r -n 100 --alpha 1 --incx 1 --incy 1

rocBLAS info: tensile library loaded
"""


def test_bad_lines_are_counted_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "bad.log"
    path.write_text(BAD_LOG)
    log = read_call_log(path)
    assert [(p.line_number, p.kind, p.count) for p in log.problems] == [
        (1, NOT_A_CALL, 2),  # the same text again on line 9
        (4, TRUNCATED, 1),
        (5, UNKNOWN_FUNCTION, 1),
        (6, BAD_ARGUMENT, 1),
    ]
    assert "out of range" in log.problems[3].message
    assert log.no_workspace == {"rocblas_saxpy": 1}  # a real routine that needs no workspace
    assert [count for _, count in log.calls] == [2]


def test_a_newer_library_header_is_reported(tmp_path: Path) -> None:
    newer = tmp_path / "newer.log"
    text = (FIXTURES / "rocsolver-bench.log").read_text()
    newer.write_text(text.replace("rocSOLVER Version: 3.28.2.", "rocSOLVER Version: 3.99.0."))
    log = read_call_log(newer)
    assert [(p.line_number, p.kind) for p in log.problems] == [(2, NEWER_LIBRARY)]
    assert "3.99.0" in log.problems[0].message and len(log.calls) == 8


def test_pasted_bench_commands_are_data(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    pasted = tmp_path / "pasted.txt"
    pasted.write_text(
        f"rocsolver-bench -f getrf -r d -m 64 -n 64; touch {marker}\n"
        f"$(touch {marker}) rocblas-bench -f nrm2 -r f32_r -n 64 --incx 1 && touch {marker}\n"
    )
    log = read_call_log(pasted)
    assert not marker.exists()
    assert log.format == BENCH_COMMANDS
    assert sorted(call.routine.name for call, _ in log.calls) == [
        "rocblas_snrm2",
        "rocsolver_dgetrf",
    ]
    sample = read_call_log(SAMPLES / "bench-commands.txt")
    assert sample.format == BENCH_COMMANDS and sample.problems == [] and len(sample.calls) == 6


def _hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO)


def test_size_from_a_bench_log_as_json() -> None:
    run = _hipmem("size", "--device", "MI210", "--from-log", "samples/rocsolver-bench.log",
                  "--json", "--top", "3")  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["distinct_calls"] == 8
    sizes = [call["bytes"] for call in result["calls"]]
    assert len(sizes) == 3 and sizes == sorted(sizes, reverse=True)
    assert result["session_bytes"] == sizes[0]
    getrf = [c for c in result["calls"] if c["routine"] == "rocsolver_dgetrf"]
    assert getrf and getrf[0]["count"] == 2
    # rocSOLVER's documented example: dgetrf 1024x1024 then dgetrs on one handle.
    assert getrf[0]["bytes"] == 4_732_160
    assert result["logs"][0]["format"] == ROCSOLVER_BENCH
    assert "samples/rocsolver-bench.log: rocSOLVER bench log, 12 lines, 9 calls" in unwrapped(
        run.stderr
    )


def test_size_reports_skipped_lines_and_strict_stops(tmp_path: Path) -> None:
    path = tmp_path / "bad.log"
    path.write_text(BAD_LOG)
    run = _hipmem("size", "--device", "MI210", "--from-log", str(path))
    assert run.returncode == 0, run.stderr
    assert f"{path}:4: truncated:" in run.stderr
    assert f"{path}:1: not a call: rocBLAS info" in run.stderr
    assert "5 lines skipped" in unwrapped(run.stderr)
    strict = _hipmem("size", "--device", "MI210", "--strict", "--from-log", str(path))
    assert strict.returncode == 1
    assert strict.stderr.startswith(f"Error: {path}:1: not a call:")
    assert strict.stderr.count("\n") == 1 and "Traceback" not in strict.stderr


def test_rocsolver_trace_log_is_a_one_line_error() -> None:
    run = _hipmem("size", "--device", "MI210", "--from-log",
                  str(FIXTURES / "rocsolver-trace.log"))  # fmt: skip
    assert run.returncode == 1
    assert "records no call arguments" in run.stderr and run.stderr.count("\n") == 1
