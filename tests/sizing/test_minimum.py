"""Minimum vs optimal workspace, measured by executing calls with the real rocBLAS on the
virtual device (sizing/minimum.py). Expected figures come from rocBLAS's own sizing code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hipmem.sizing.calls.executed_routines import buffers, execution_reason
from hipmem.sizing.calls.result import CallResult
from hipmem.sizing.calls.spec import parse_call
from hipmem.sizing.minimum import MinimumFinder
from hipmem.sizing.session import SizingSession

HPA_GEMM = (
    "rocblas_gemm_ex:m=1024,n=1024,k=16384,a_type=f16_r,b_type=f16_r,c_type=f16_r,"
    "d_type=f16_r,compute_type=f32_r"
)


def _round64(n_bytes: int) -> int:
    return -(-n_bytes // 64) * 64


def trsm_formula(m: int, n: int, *, left: bool, element_bytes: int) -> tuple[int, int]:
    """(optimal, minimum) bytes of a trsm whose triangle is a whole number of 128-blocks,
    as rocBLAS computes them (library/src/blas3/rocblas_trsm.hpp in ROCm/rocBLAS:
    rocblas_internal_trsm_workspace_size and rocblas_internal_trsm_template_mem):
    invA = BLOCK*k elements; c_temp = (k/BLOCK)*(BLOCK/2)^2 for trtri; x_temp = BLOCK*(m+n-k)
    for the chunked solve. The query asks for max(x_temp, c_temp) + invA; when that cannot be
    allocated, rocBLAS retries with the fallback x_temp of BLOCK elements, + invA, and returns
    perf_degraded: that is the minimum."""
    block = 128
    k = m if left else n
    inverse_bytes = block * k * element_bytes
    c_temp_bytes = (k // block) * (block // 2) ** 2 * element_bytes
    x_temp_bytes = block * (m + n - k) * element_bytes
    optimal = _round64(max(x_temp_bytes, c_temp_bytes)) + _round64(inverse_bytes)
    minimum = _round64(block * element_bytes) + _round64(inverse_bytes)
    return optimal, minimum


@pytest.fixture(scope="module")
def session64(rocm64: Path) -> Iterator[SizingSession]:
    with SizingSession("MI210", rocm="6.4") as session:
        yield session


@pytest.fixture(scope="module")
def measured(session64: SizingSession) -> Callable[[str], CallResult]:
    """A call sized and its minimum measured, once per spec for the module: the issue's dtrsm
    is also the formula's first case (the measurement executes it several times)."""
    found: dict[str, CallResult] = {}

    def measure(spec: str) -> CallResult:
        if spec not in found:
            result = session64.size(spec)
            session64.measure_minimum([result])
            found[spec] = result
        return found[spec]

    return measure


@pytest.mark.parametrize(
    ("spec", "left", "element_bytes"),
    [
        ("dtrsm:side=left,uplo=lower,m=4096,n=512", True, 8),
        ("dtrsm:side=right,uplo=upper,m=512,n=4096", False, 8),
        ("strsm:side=left,uplo=lower,m=4096,n=512", True, 4),
        ("dtrsm:side=left,uplo=lower,m=1024,n=256", True, 8),
    ],
)
def test_trsm_minimum_is_rocblas_fallback_formula(
    measured: Callable[[str], CallResult], spec: str, left: bool, element_bytes: int
) -> None:
    result = measured(spec)
    m, n = (int(result.call.args[name]) for name in ("m", "n"))
    optimal, minimum = trsm_formula(m, n, left=left, element_bytes=element_bytes)
    assert result.bytes == optimal
    assert result.minimum is not None
    assert (result.minimum.method, result.minimum.minimum_bytes) == ("measured", minimum)
    assert result.minimum.optimal_bytes == optimal
    assert result.minimum.between_status == "perf_degraded"


def test_issue_example_dtrsm_4096_512(measured: Callable[[str], CallResult]) -> None:
    """The issue's figures, rocBLAS 4.4.1: 5,242,880 wanted, degraded down to 4,195,328."""
    result = measured("dtrsm:side=left,uplo=lower,m=4096,n=512")
    assert result.minimum is not None
    assert (result.bytes, result.minimum.minimum_bytes) == (5_242_880, 4_195_328)


def test_trsm_batched_and_strided_run_with_real_buffers(session64: SizingSession) -> None:
    strided = session64.size("dtrsm_strided_batched:m=512,n=512,batch_count=4")
    batched = session64.size("dtrsm_batched:m=512,n=64,batch_count=3")
    session64.measure_minimum([strided, batched])
    assert strided.minimum is not None and batched.minimum is not None
    assert strided.minimum.method == "measured", strided.minimum.reason
    assert batched.minimum.method == "measured", batched.minimum.reason
    # strided: invA and the fallback buffer per batch (4 × (128·512 + 128) doubles)
    assert strided.minimum.minimum_bytes == 4 * (128 * 512 + 128) * 8
    assert strided.minimum.optimal_bytes == strided.bytes


def test_batched_buffers_are_per_batch_pointer_arrays(session64: SizingSession) -> None:
    call = parse_call("dtrsm_batched:m=512,n=64,batch_count=3", session64.catalog)
    sizes = buffers(call)
    assert sizes["A"].encoded() == ["pointer_array", 512 * 512 * 8, 3]
    assert sizes["B"].encoded() == ["pointer_array", 512 * 64 * 8, 3]
    strided = parse_call("dtrsm_strided_batched:m=512,n=512,batch_count=4", session64.catalog)
    stride_bytes = 512 * 512 * 8
    assert buffers(strided)["A"].encoded() == ["buffer", 3 * stride_bytes + 512 * 512 * 8]


def test_hpa_gemm_ex_minimum_is_zero_with_a_kernel_change(session64: SizingSession) -> None:
    result = session64.size(HPA_GEMM)
    session64.measure_minimum([result])
    assert result.bytes and result.bytes > 0
    assert result.minimum is not None
    assert result.minimum.method == "measured", result.minimum.reason
    assert result.minimum.minimum_bytes == 0
    assert result.minimum.optimal_bytes == result.bytes
    assert result.minimum.between_status == "slower_kernel"


def test_rocsolver_minimum_is_its_query(session64: SizingSession) -> None:
    result = session64.size("rocsolver_dgetrf:m=1024,n=1024")
    session64.measure_minimum([result])
    assert result.minimum is not None
    assert result.minimum.method == "query"
    assert result.minimum.minimum_bytes == result.minimum.optimal_bytes == result.bytes
    assert "exact minimum" in result.minimum.reason


def test_gesvd_is_never_executed(session64: SizingSession) -> None:
    call = parse_call("rocsolver_dgesvd:m=64,n=64", session64.catalog)
    executed, reason = execution_reason(call)
    assert not executed and "device" in reason


def test_unknown_when_the_inner_kernel_lookup_fails(session64: SizingSession) -> None:
    """Without code objects Tensile finds no kernel: the answer is unknown, never a size."""
    tensile = session64.libraries.tensile_dir
    assert tensile is not None and not any(tensile.glob("*.co"))
    finder = MinimumFinder(
        session64.libraries, session64.device, session64.catalog, tensile_library=tensile
    )
    try:
        call = parse_call(HPA_GEMM, session64.catalog)
        found = finder.find(call, 20_971_520)
    finally:
        finder.close()
    assert (found.method, found.minimum_bytes, found.optimal_bytes) == ("unknown", None, None)
    assert "internal_error" in found.reason and "kernel was not found" in found.reason


def test_a_call_past_the_time_limit_is_unknown(session64: SizingSession) -> None:
    finder = MinimumFinder(
        session64.libraries, session64.device, session64.catalog, deadline_s=0.001
    )
    try:
        call = parse_call("dtrsm:side=left,uplo=lower,m=4096,n=512", session64.catalog)
        found = finder.find(call, 5_242_880)
    finally:
        finder.close()
    assert found.method == "unknown" and "timed out" in found.reason


def test_session_minimum_is_the_largest_minimum(session64: SizingSession) -> None:
    calls = ["dtrsm:side=left,uplo=lower,m=4096,n=512", HPA_GEMM]
    results = session64.size_many(calls)
    session64.measure_minimum(results)
    full = session64.result()
    assert full.session_minimum_bytes is not None
    # the session minimum covers every call at its minimum: trsm's, since gemm_ex's is 0
    assert full.session_minimum_bytes >= 4_195_328
    payload = full.as_dict()
    assert payload["session_minimum_bytes"] == full.session_minimum_bytes
    trsm = next(c for c in payload["calls"] if c["routine"] == "rocblas_dtrsm")
    assert trsm["minimum_bytes"] == 4_195_328 and trsm["between_status"] == "perf_degraded"


def test_rocm72_trsm_minimum(rocm72: Path) -> None:
    with SizingSession("MI210", rocm="7.2") as session:
        result = session.size("dtrsm:side=left,uplo=lower,m=4096,n=512")
        session.measure_minimum([result])
    optimal, minimum = trsm_formula(4096, 512, left=True, element_bytes=8)
    assert result.minimum is not None
    assert (result.bytes, result.minimum.minimum_bytes) == (optimal, minimum)


def test_an_empty_call_launches_nothing_and_needs_nothing(session64: SizingSession) -> None:
    result = session64.size("dgemv:m=0,n=0")
    session64.measure_minimum([result])
    assert result.minimum is not None
    assert (result.minimum.method, result.minimum.minimum_bytes) == ("query", 0)
    assert "launches nothing" in result.minimum.reason
