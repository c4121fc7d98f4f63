"""Sweeps against the real libraries through the virtual device: a need whose maximum is not
at the end of its range (f16 gemm_ex over k on gfx90a, ROCm 7.2), a grid of two arguments,
identical points asked once, workloads with sweeps, recommend and check over a sweep, the
range grammar's strict rules, and the CLI's one-line errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hipmem.sizing.session import SizingSession
from hipmem.sizing.sweeps.range import BadSweep, check_grid, parse_max_points, parse_sweep
from tests.cli_run import hipmem as run_hipmem

# The HPA gemm (f16 in, f32 compute) picks its kernel, and so its workspace, from the tuned
# gemm data of the arch: on gfx90a with ROCm 7.2 the need over k rises to 64 MiB, then falls.
GEMM = (
    "rocblas_gemm_ex:m=1024,n=1024,a_type=f16_r,b_type=f16_r,c_type=f16_r,d_type=f16_r,"
    "compute_type=f32_r"
)
PEAK_BYTES = 67_108_864  # k=10450..13595
PEAK_FIRST_K, PEAK_LAST_K = 10_450, 13_595


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, **env)


# -- the range grammar -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("batch_count=1..5", [1, 2, 3, 4, 5]),
        ("n=64..300:64", [64, 128, 192, 256]),
        ("k=1..100*2", [1, 2, 4, 8, 16, 32, 64]),
        ("k=3..81*3", [3, 9, 27, 81]),
        ("batch_count=64,1,20,8", [1, 8, 20, 64]),
        ("incx=-2..2", [-2, -1, 0, 1, 2]),
        (" n = 7 ", [7]),
    ],
)
def test_range_forms(text: str, values: list[int]) -> None:
    assert list(parse_sweep(text).values) == values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("batch_count", "expected ARG=RANGE"),
        ("=1..4", "expected ARG=RANGE"),
        ("n=", "expected ARG=RANGE"),
        ("n=１..4", "is not a whole number in plain decimal digits"),
        ("n=1_000..2000", "is not a whole number in plain decimal digits"),
        ("n=0x10..0x20", "is not a whole number in plain decimal digits"),
        ("n=1e3..2e3", "is not a whole number in plain decimal digits"),
        ("n=1..8.0", "is not a whole number in plain decimal digits"),
        ("n=64..1", "the start 64 is above the end 1"),
        ("n=1..64:0", "the step 0 must be at least 1"),
        ("n=1..64*1", "powers need a start of at least 1 and a factor of 2+"),
        ("n=0..64*2", "powers need a start of at least 1 and a factor of 2+"),
        ("n=1,8,8", "8 is listed twice"),
        ("n=1,,8", "is not a whole number"),
        ("n=1..99999999999999999999", "out of range for a 64-bit integer"),
        ("n=1.." + "9" * 50, "is not a whole number in plain decimal digits"),
        ("n=1.." + "9" * 100, "a range is at most 80 characters"),
        ("n=" + "1," * 200_000 + "2", "more than 100,000 values"),
    ],
)
def test_bad_ranges_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(BadSweep, match="sweep") as caught:
        parse_sweep(text)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300  # a long input is never echoed whole


def test_grid_limits() -> None:
    sweeps = [parse_sweep("n=1..2000"), parse_sweep("batch_count=1..1000")]
    assert check_grid(sweeps, max_points=2_000_000) == 2_000_000
    with pytest.raises(BadSweep, match=r"2,000,000 points .* more than the limit of 1,000,000"):
        check_grid(sweeps)
    with pytest.raises(BadSweep, match="n is swept twice"):
        check_grid([parse_sweep("n=1..4"), parse_sweep("n=5..8")])
    assert parse_max_points("5000000") == 5_000_000
    for bad in ("0", "1_000", "１０", "1e6", "1000000000000"):
        with pytest.raises(BadSweep, match="max_points"):
            parse_max_points(bad)


# -- the real libraries ------------------------------------------------------------------------
def test_the_largest_need_is_not_at_the_end_of_the_range(rocm72: Path) -> None:
    with SizingSession("MI210", rocm="7.2") as session:
        swept = session.sweep(GEMM, "k=10000..14000")
        assert swept.max_bytes == PEAK_BYTES
        assert swept.max_text() == f"k={PEAK_FIRST_K}..{PEAK_LAST_K}"
        last = swept.bytes_of(swept.point_count - 1)
        assert last is not None and last < PEAK_BYTES  # sizing k=14000 alone misses the peak
        # The sweep's answers are the library's: the same as sizing each call alone.
        for k in (10_000, PEAK_FIRST_K - 1, PEAK_FIRST_K, PEAK_LAST_K, PEAK_LAST_K + 1, 14_000):
            alone = session.size(f"{GEMM},k={k}")
            assert swept.bytes_of(k - 10_000) == alone.bytes, k
        steps = swept.steps()
        assert [swept.step_text(step) for step in steps][1:3] == [
            f"k={PEAK_FIRST_K}..{PEAK_LAST_K}",
            f"k={PEAK_LAST_K + 1}..14000",
        ]
        # The maximum joins the session's calls, so the session size is the peak.
        result = session.result()
        assert result.session_bytes == PEAK_BYTES
        assert f"k={PEAK_FIRST_K}," in max(result.calls, key=lambda r: r.bytes or 0).call.label


def test_a_grid_of_two_arguments(rocm72: Path) -> None:
    with SizingSession("MI210", rocm="7.2") as session:
        swept = session.sweep("rocsolver_dgetrf_batched:m=256", "n=16,64,256", "batch_count=1..8")
        assert swept.point_count == 24
        for index in range(swept.point_count):
            n, batch = swept.values_at(index)
            alone = session.size(f"rocsolver_dgetrf_batched:m=256,n={n},batch_count={batch}")
            assert swept.bytes_of(index) == alone.bytes, (n, batch)
        assert swept.max_text() == "n=256,batch_count=8"
        # A step never runs across a value of the first argument.
        assert all(swept.values_at(s.first)[0] == swept.values_at(s.last)[0] for s in swept.steps())


def test_identical_points_are_asked_once(rocm72: Path) -> None:
    with SizingSession("MI210", rocm="7.2") as session:
        session.size("rocblas_strsm_batched:m=1024,n=128,side=right,batch_count=40")
        first = session.sweep("rocblas_strsm_batched:m=1024,n=128,side=right", "batch_count=1..64")
        assert first.asked_count == 63  # batch_count=40 was sized before
        again = session.sweep("rocblas_strsm_batched:m=1024,n=128,side=right", "batch_count=1..64")
        assert again.asked_count == 0 and list(again.bytes_at) == list(first.bytes_at)
        more = session.sweep("rocblas_strsm_batched:m=1024,n=128,side=right", "batch_count=33..96")
        assert more.asked_count == 32


def test_a_library_that_crashes_is_asked_no_more_after_three_crashes(rocm64: Path) -> None:
    # Debian's ROCm 6.4 has no gemm data for gfx942: rocBLAS aborts on every f16 gemm_ex.
    with SizingSession("MI300X", rocm="6.4") as session:
        swept = session.sweep(GEMM, "k=1..50")
        assert swept.max_bytes is None and swept.gave_up
        assert swept.failed_count == 50 and swept.asked_count == 50
        failure = swept.first_failure()
        assert failure is not None and failure.status == "crashed"
        assert "aborted" in str(failure.error) and "49 more of the 50 points" in str(failure.error)
        assert session.size("rocsolver_dgetrf:m=8,n=8").bytes is not None  # still answering


# -- the command line --------------------------------------------------------------------------
def test_size_sweep_json_lists_every_point(rocm72: Path) -> None:
    done = hipmem("size", "--rocm", "7.2", "-d", "MI210", "--json", "--sweep", "k=10440..10460",
                  GEMM)  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (swept,) = payload["sweeps"]
    assert [point["args"]["k"] for point in swept["points"]] == list(range(10440, 10461))
    assert swept["max_bytes"] == PEAK_BYTES == payload["session_bytes"]
    assert swept["max_at"] == {"k": PEAK_FIRST_K}
    assert swept["steps"][-1] == {
        "from": {"k": PEAK_FIRST_K}, "to": {"k": 10460}, "bytes": PEAK_BYTES, "status": "success"
    }  # fmt: skip


def test_size_sweep_terminal_report_and_plot(rocm72: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "need.png"
    done = hipmem("size", "--rocm", "7.2", "-d", "MI210", "--sweep", "k=10000..14000:50",
                  GEMM, "--plot", str(plot))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"largest need 64.0 MiB ({PEAK_BYTES:,} bytes) at k=10450..13550" in done.stdout
    assert "◀ largest" in done.stdout and "where the need changes: 3 steps" in done.stdout
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_workload_with_sweeps(rocm72: Path, tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "version: 1\n"
        "calls:\n"
        "  - call: rocsolver_dgetrf:m=1024,n=1024\n"
        "  - call: rocblas_strsm_batched:m=1024,n=128,side=right\n"
        "    sweep: {batch_count: 1..16}\n"
        "  - routine: rocsolver_dgetrf_batched\n"
        "    args: {m: 256}\n"
        "    sweep: {n: [16, 64], batch_count: '1,4'}\n"
        "    count: 3\n"
    )
    done = hipmem("size", "--rocm", "7.2", "-d", "MI210", "--json", "--workload", str(workload))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    trsm, getrf = payload["sweeps"]
    assert trsm["call"] == "rocblas_strsm_batched:side=right,m=1024,n=128,batch_count=1..16"
    assert trsm["point_count"] == 16 and trsm["max_at"] == {"batch_count": 16}
    assert getrf["point_count"] == 4 and getrf["count"] == 3
    assert [p["args"] for p in getrf["points"]][1] == {"n": 16, "batch_count": 4}
    labels = {call["routine"] for call in payload["calls"]}
    assert labels == {"rocsolver_dgetrf", "rocblas_strsm_batched", "rocsolver_dgetrf_batched"}


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ("sweep: {batch_count: 0..x}", "w.yaml:4: sweep='batch_count=0..x': the end 'x' is"),
        ("sweep: {batch_count: 1..4, n: 1..4}", "w.yaml:3: rocblas_strsm_batched: n is given"),
        ("sweep: {batch: 1..4}", "w.yaml:3: rocblas_strsm_batched has no argument 'batch'"),
        ("sweep: {}", "w.yaml:4: calls/0/sweep: {} should be non-empty"),
    ],
)
def test_workload_sweep_errors_name_file_and_line(
    rocm72: Path, tmp_path: Path, sweep: str, message: str
) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(
        f"version: 1\ncalls:\n  - call: rocblas_strsm_batched:m=1024,n=128\n    {sweep}\n"
    )
    done = hipmem("size", "--rocm", "7.2", "-d", "MI210", "--workload", str(workload))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert message in line, line


def test_recommend_and_check_cover_the_maximum_of_a_sweep(rocm72: Path) -> None:
    done = hipmem("recommend", "--rocm", "7.2", "-d", "MI210", "--format", "json",
                  "--sweep", "k=10000..14000", GEMM)  # fmt: skip
    assert done.returncode == 0, done.stderr
    advice = json.loads(done.stdout)
    assert advice["rocblas_device_memory_size_bytes"] == PEAK_BYTES
    assert f"k={PEAK_FIRST_K}," in advice["largest_call"]
    assert advice["sweeps"][0]["max_at"] == {"k": PEAK_FIRST_K}
    # The value that covers the end of the range (k=14000) does not cover the sweep.
    end_bytes = 20_971_520
    done = hipmem("check", "--rocm", "7.2", "-d", "MI210", "--value", str(end_bytes),
                  "--sweep", "k=10000..14000", GEMM)  # fmt: skip
    assert done.returncode == 1
    assert f"k={PEAK_FIRST_K}," in done.stderr and f"needs {PEAK_BYTES:,} bytes" in done.stderr
    said = " ".join(done.stderr.split())  # prose wraps at 80 columns, piped too
    assert f"3,146 points need more than {end_bytes:,} bytes, the first at k=10450" in said
    done = hipmem("check", "--rocm", "7.2", "-d", "MI210", "--value", str(PEAK_BYTES),
                  "--sweep", "k=10000..14000", GEMM)  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert f"the largest need, {PEAK_BYTES:,} bytes, is at k=10450..13595" in said


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "batch_count=1..x", "dtrsm_batched:m=8,n=8"],
         "Error: --sweep 'batch_count=1..x': the end 'x' is not a whole number"),
        (["--sweep", "batch_count=1..2000000", "dtrsm_batched:m=8,n=8"],
         "Error: --max-points: rocblas_dtrsm_batched: 2,000,000 points (batch_count=1..2000000)"),
        (["--sweep", "batch_count=1..4", "--max-points", "1e6", "dtrsm_batched:m=8,n=8"],
         "Error: --max-points '1e6': expected a whole number in plain decimal digits"),
        (["--sweep", "batch_count=1..4"], "Error: --sweep sweeps the CALL arguments"),
        (["--sweep", "n=1..4", "dtrsm_batched:m=8,n=8"],
         "Error: rocblas_dtrsm_batched: n is given in the call and swept (n=1..4); give one"),
        (["--sweep", "side=1..2", "dtrsm_batched:m=8,n=8"],
         "Error: rocblas_dtrsm_batched: side is not a whole-number argument"),
        (["--sweep", "m=-4..4", "dtrsm_batched:n=8"],
         "Error: rocblas_dtrsm_batched: m=-4 (in m=-4..4): a dimension cannot be negative"),
        (["--sweep", "batch=1..4", "dtrsm_batched:m=8,n=8"],
         "Error: rocblas_dtrsm_batched has no argument 'batch'; did you mean 'batch_count'?"),
        (["--plot", "x.png", "dgetrf:m=8,n=8"], "Error: --plot: --plot draws sweeps"),
        (["--plot", "x.pdf", "--sweep", "n=1..4", "dgetrf:m=8"], "Error: --plot 'x.pdf': must end"),
        (["--rocm", "6.4,7.2", "--sweep", "n=1..4", "dgetrf:m=8"],
         "Error: --rocm: sweeps are sized with one ROCm release at a time"),
    ],
)  # fmt: skip
def test_cli_errors_are_one_line(rocm72: Path, args: list[str], message: str) -> None:
    done = hipmem("size", "-d", "MI210", *args)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(message), line


def test_rule_closures_compute_what_simpleeval_computes() -> None:
    """Every default rule of every family, on sample arguments: the sweep's fast closures
    and simpleeval (which make_call uses) agree, or the closure is not used (None)."""
    import simpleeval

    from hipmem.sizing.defaults import COMMON, FAMILY, FUNCTIONS
    from hipmem.sizing.rocm.rule_closures import closure_of

    samples = [
        {"m": 7, "n": 300, "k": 12, "nrhs": 3, "nb": 4, "nblocks": 5, "batch_count": 9},
        {"m": 1, "n": 0, "k": 4096, "nrhs": 0, "nb": 1, "nblocks": 1, "batch_count": 1},
    ]
    enums = {
        "transA": "none", "transB": "transpose", "side": "right", "left_svect": "all",
        "right_svect": "singular", "a_type": "f16_r", "trans": "none", "uplo": "upper",
    }  # fmt: skip
    rules = {rule for table in [COMMON, *FAMILY.values()] for rule in table.values()}
    compiled = 0
    for rule in sorted(rules):
        closure = closure_of(rule)
        if closure is None:
            continue
        compiled += 1
        for sample in samples:
            names: dict[str, Any] = dict.fromkeys(
                ["lda", "ldb", "ldc", "ldd", "ldz", "ldu", "ldv", "ldx"], 5
            )
            names |= {name: 3 for name in ("inca", "incb", "incc", "incx", "incy")}
            names |= sample | enums
            evaluator = simpleeval.EvalWithCompoundTypes(functions=FUNCTIONS, names=names)
            try:
                expected = evaluator.eval(rule)
            except simpleeval.NameNotDefined:
                continue
            assert closure(names) == expected, rule
    assert compiled >= 0.9 * len(rules)
