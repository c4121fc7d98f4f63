"""Size queries against the real rocBLAS/rocSOLVER through the virtual device."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hipmem.sizing.calls.spec import make_call, parse_call
from hipmem.sizing.rocm.catalog import Catalog, Param, Routine, load_catalog
from hipmem.sizing.session import SizingSession, size_calls

# Known answers, keyed by the versions the libraries report (rocBLAS, rocSOLVER).
# rocSOLVER's memory-model documentation example: dgetrf 1024x1024 then dgetrs with 1 rhs.
DOC_EXAMPLE_BYTES = {("4.4.1", "3.28.2"): 4_732_160, ("5.2.0", "3.32.0"): 4_732_160}

ISSUE_ROUTINES = [
    "{p}getrf:m=300,n=200",
    "{p}getrf_npvt:m=300,n=200",
    "{p}getrs:n=300,nrhs=7",
    "{p}geqrf:m=300,n=200",
    "{p}potrf:n=300",
    "{p}getrf_batched:m=100,n=100,batch_count=9",
    "{p}getrf_strided_batched:m=100,n=100,batch_count=9",
    "{p}geqrf_strided_batched:m=120,n=80,batch_count=3",
    "{p}potrf_batched:n=150,batch_count=4,uplo=L",
    "{p}getrs_strided_batched:n=90,nrhs=3,batch_count=5",
]
REAL_ONLY = ["{p}syevd:n=300,evect=V", "{p}gesvd:m=300,n=200,left_svect=A,right_svect=S"]
BLAS = [
    "dtrsm:m=500,n=300",
    "ztrsm_strided_batched:m=64,n=64,batch_count=8,side=R,uplo=L,transA=C,diag=U",
    "dgemm:m=128,n=128,k=128",
    "gemm_ex:m=512,n=512,k=512,a_type=f16_r",
    "dnrm2:n=100000",
    "scnrm2_strided_batched:n=5000,batch_count=10",
    "ddot:n=1000000",
    "zdotc:n=70000",
]


@pytest.fixture(scope="module")
def session(rocm: Path) -> Iterator[SizingSession]:
    with SizingSession("MI210") as opened:
        yield opened


def all_issue_calls() -> list[str]:
    calls = [text.format(p=p) for text in ISSUE_ROUTINES for p in "sdcz"]
    calls += [text.format(p=p) for text in REAL_ONLY for p in "sd"]
    return calls + BLAS


def test_documentation_example_gives_the_known_answer(session: SizingSession) -> None:
    versions = (session.versions["rocblas"], session.versions["rocsolver"])
    if versions not in DOC_EXAMPLE_BYTES:
        pytest.skip(f"no known answer recorded for rocBLAS/rocSOLVER {versions}")
    with SizingSession("MI210") as fresh:
        fresh.size("rocsolver_dgetrf:m=1024,n=1024")
        fresh.size("rocsolver_dgetrs:n=1024,nrhs=1")
        assert fresh.session_bytes == DOC_EXAMPLE_BYTES[versions]


def test_every_issue_routine_answers_a_multiple_of_64(session: SizingSession) -> None:
    results = session.size_many(all_issue_calls())
    failures = [str(result.error) for result in results if result.error is not None]
    assert failures == []
    for result in results:
        assert result.bytes is not None and result.bytes % 64 == 0, result.call.label
    # Not every routine may answer 0: the query really ran.
    assert sum(1 for result in results if result.bytes) > len(results) // 2


def test_session_size_is_the_largest_call(rocm: Path) -> None:
    calls = ["dgetrf:m=2000,n=2000", "dgeqrf:m=3000,n=100", "dtrsm:m=800,n=800", "ddot:n=10"]
    result = size_calls(calls, "MI300X")
    per_call = [r.bytes for r in result.calls]
    assert all(b is not None for b in per_call)
    assert result.session_bytes == max(b for b in per_call if b is not None)
    assert len(set(per_call)) > 1  # a test of a maximum needs different values


def test_getrf_grows_linearly_and_single_precision_is_about_half(session: SizingSession) -> None:
    sizes = {n: session.size(f"dgetrf:m={n},n={n}").bytes for n in (1024, 2048, 4096)}
    assert sizes[1024] and sizes[2048] and sizes[4096]
    step_small, step_large = sizes[2048] - sizes[1024], sizes[4096] - sizes[2048]
    assert step_large == pytest.approx(2 * step_small, rel=0.05)  # linear in n
    single = session.size("sgetrf:m=4096,n=4096").bytes
    assert single is not None
    assert single / sizes[4096] == pytest.approx(0.5, abs=0.05)


def test_identical_calls_are_sized_once_and_counted(session: SizingSession) -> None:
    results = session.size_many(["dpotrf:n=777", "dpotrf:n=777", "rocsolver_dpotrf:n=777,lda=777"])
    assert results[0] is results[1] is results[2]  # defaults make the third identical too
    assert results[0].count == 3


def test_a_vendor_abort_is_reported_and_the_other_calls_answered(rocm: Path) -> None:
    # No Debian build has gemm data for gfx950: rocBLAS aborts the process on an HPA gemm_ex.
    # (gfx942 aborts on ROCm 6.4 only: tests/sizing/rocm/test_rocm_versions.py.)
    calls = ["dgetrf:m=512,n=512", "gemm_ex:m=64,n=64,k=4096,a_type=f16_r", "dgeqrf:m=512,n=512"]
    result = size_calls(calls, "MI355X")
    before, crashed, after = result.calls
    assert crashed.status == "crashed" and crashed.bytes is None
    message = str(crashed.error)
    assert message.startswith("rocblas_gemm_ex:m=64,n=64,k=4096,a_type=f16_r: ")
    assert "aborted (SIGABRT)" in message and "gfx950" in message
    assert before.bytes and after.bytes  # answered by the worker before and after the crash
    assert result.session_bytes == max(before.bytes, after.bytes)


def test_hpa_gemm_on_an_arch_with_data_is_answered(session: SizingSession) -> None:
    result = session.size("gemm_ex:m=512,n=512,k=512,a_type=bf16_r")
    assert result.error is None and result.bytes is not None


def test_sizes_the_library_rejects_are_named(session: SizingSession) -> None:
    result = session.size("dgetrf:m=8,n=5,lda=4")
    assert result.status == "invalid_size"
    assert "rocblas_status_invalid_size (4)" in str(result.error)


def test_a_routine_the_library_lacks_is_a_missing_symbol(rocm: Path) -> None:
    real = load_catalog()
    getrf = real.lookup("dgetrf")
    ghost = Routine(**{**getrf.__dict__, "name": "rocsolver_dghost", "params": getrf.params})
    catalog = Catalog(routines={**real.routines, ghost.name: ghost}, enums=real.enums)
    with SizingSession("gfx90a", catalog=catalog) as session:
        result = session.size(make_call(ghost, {"m": 4, "n": 4}, catalog))
    assert result.status == "missing_symbol"
    assert "has no rocsolver_dghost" in str(result.error)


def test_library_versions_and_paths_are_reported(session: SizingSession) -> None:
    info = session.library_info()
    assert set(info.versions) == {"rocblas", "rocsolver"}
    assert Path(info.rocblas_path).is_file()
    assert info.found_in


def test_default_workspace_follows_the_arch(rocm: Path) -> None:
    # rocBLAS-managed handles start with 32 MiB, or 128 MiB on gfx94x/gfx950.
    with SizingSession("MI210") as mi210, SizingSession("MI300X") as mi300x:
        assert mi210.library_info().handle_default_bytes == 32 << 20
        assert mi300x.library_info().handle_default_bytes == 128 << 20


def test_default_leading_dimension_is_the_smallest_valid() -> None:
    assert parse_call("dgemm:m=10,n=20,k=30,transA=T").args["lda"] == 30
    assert parse_call("dgemm:m=10,n=20,k=30").args["lda"] == 10
    assert parse_call("dtrsm:m=10,n=20,side=right").args["lda"] == 20
    assert parse_call("dgetrf_strided_batched:m=7,n=5").args["strideA"] == 35


def test_params_of_a_routine_come_from_the_header() -> None:
    getrf = load_catalog().lookup("rocsolver_dgetrf")
    assert [p.name for p in getrf.params] == ["handle", "m", "n", "A", "lda", "ipiv", "info"]
    assert getrf.params[1] == Param("m", "const rocblas_int", "i32")
