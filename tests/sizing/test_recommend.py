"""Recommendations from sizes the real libraries give through the virtual device."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest

from hipmem._core.byte_sizes import MAX_BYTES, parse_bytes
from hipmem.sizing.calls.spec import parse_call
from hipmem.sizing.recommend import (
    BadSize,
    Headroom,
    Unsatisfiable,
    arch_default_bytes,
    parse_alignment,
    parse_headroom,
    query_kind,
    recommend,
)
from hipmem.sizing.session import SessionResult, SizingSession
from hipmem.sizing.worker.virtual_device import resolve

CALLS = ["rocsolver_dgetrf:m=1024,n=1024", "rocsolver_dgetrs:n=1024,nrhs=1"]
HPA_GEMM = (
    "rocblas_gemm_ex:m=512,n=512,k=512,a_type=f16_r,b_type=f16_r,c_type=f16_r,d_type=f16_r,"
    "compute_type=f32_r"
)


def sized(device: str, calls: list[str]) -> SessionResult:
    with SizingSession(device=device) as session:
        session.size_many(calls)
        return session.result()


@pytest.fixture(scope="module")
def mi210(rocm: object) -> SessionResult:
    return sized("MI210", CALLS)


@pytest.mark.parametrize(
    ("text", "n_bytes"),
    [
        ("4096", 4096),
        ("64KiB", 64 * 1024),
        ("2MiB", 2 * 1024 * 1024),
        ("2 mib", 2 * 1024 * 1024),
        ("1GiB", 1 << 30),
        ("512B", 512),
        ("0", 0),
    ],
)
def test_parse_size(text: str, n_bytes: int) -> None:
    assert parse_bytes(text) == n_bytes


@pytest.mark.parametrize(
    "text", ["2M", "2MB", "-1", "", "MiB", "2 XiB", "0x10", "４０９６", "4_096"]
)
def test_parse_size_refuses_ambiguous_or_malformed(text: str) -> None:
    with pytest.raises(BadSize, match=rf"^--align={text!r}: not a size"):
        parse_bytes(text, name="--align")


def test_sizes_are_exact_and_bounded() -> None:
    assert parse_bytes("1.5MiB") == 3 << 19
    with pytest.raises(BadSize, match="not a whole number of bytes"):
        parse_bytes("0.3KiB")
    assert parse_bytes(str(MAX_BYTES)) == MAX_BYTES
    with pytest.raises(BadSize, match="more than"):
        parse_bytes(str(MAX_BYTES + 1))


def test_parse_headroom_and_alignment() -> None:
    assert parse_headroom("10%") == Headroom(percent=Fraction(10))
    assert parse_headroom("12.5%").bytes_for(1000) == 125
    assert parse_headroom("10%").bytes_for(1001) == 101  # rounded up
    assert parse_headroom("64KiB") == Headroom(fixed_bytes=65536)
    for bad in ("-5%", "10x", "%", "ten%", "-1"):
        with pytest.raises(BadSize, match=rf"^headroom={bad!r}: expected a non-negative"):
            parse_headroom(bad)
    assert parse_alignment("2MiB") == 2 * 1024 * 1024
    with pytest.raises(BadSize, match=r"^align='0': must be at least 1 byte"):
        parse_alignment("0")


def test_arch_rule() -> None:
    assert arch_default_bytes(resolve("MI210").arch) == 32 * 1024 * 1024
    assert arch_default_bytes(resolve("MI300X").arch) == 128 * 1024 * 1024
    assert arch_default_bytes(resolve("MI355X").arch) == 128 * 1024 * 1024
    assert arch_default_bytes(resolve("gfx1100").arch) == 32 * 1024 * 1024


def test_recommend_is_the_session_size_rounded_as_asked(mi210: SessionResult) -> None:
    session_bytes = mi210.session_bytes
    assert session_bytes == max(r.bytes or 0 for r in mi210.calls)
    plain = recommend(mi210, environ={})
    assert plain.rocblas_device_memory_size_bytes == session_bytes
    assert plain.warnings == []

    align = 2 * 1024 * 1024
    advice = recommend(
        mi210, headroom=parse_headroom("10%"), align_bytes=align, handles=4, environ={}
    )
    wanted = session_bytes + math.ceil(session_bytes / 10)
    wanted = (wanted + align - 1) // align * align
    assert advice.rocblas_device_memory_size_bytes == wanted
    assert advice.headroom_bytes == math.ceil(session_bytes / 10)
    assert advice.default_bytes == mi210.library.handle_default_bytes
    assert advice.default_source == "library"
    assert advice.saved_bytes_per_handle == mi210.library.handle_default_bytes - wanted
    assert advice.saved_bytes_total == 4 * advice.saved_bytes_per_handle
    assert advice.pytorch_workspace_config == f":{-(-wanted // 1024)}:1"
    assert advice.largest_call == "rocsolver_dgetrf:m=1024,n=1024"


def test_pytorch_size_rounds_up_to_whole_kib(mi210: SessionResult) -> None:
    advice = recommend(mi210, headroom=Headroom(fixed_bytes=1), environ={})
    value = mi210.session_bytes + 1
    assert advice.pytorch_workspace_config == f":{value // 1024 + 1}:1"
    assert advice.variables(pytorch=True) == [
        ("ROCBLAS_DEVICE_MEMORY_SIZE", str(value)),
        ("HIPBLAS_WORKSPACE_CONFIG", f":{value // 1024 + 1}:1"),
    ]


def test_the_library_default_is_used_and_the_arch_rule_kept_beside_it(rocm: object) -> None:
    result = sized("MI300X", CALLS[:1])
    advice = recommend(result, environ={})
    assert advice.default_bytes == result.library.handle_default_bytes
    assert advice.arch_rule_bytes == 128 * 1024 * 1024
    no_answer = dataclasses.replace(
        result, library=dataclasses.replace(result.library, handle_default_bytes=0)
    )
    fallback = recommend(no_answer, environ={})
    assert (fallback.default_bytes, fallback.default_source) == (128 * 1024 * 1024, "arch rule")


def test_warnings(mi210: SessionResult) -> None:
    advice = recommend(mi210, environ={"ROCBLAS_STREAM_ORDER_ALLOC": "1"})
    release = f"rocBLAS {mi210.library.versions['rocblas']} (ROCm {mi210.library.rocm})"
    assert advice.warnings[0].startswith(f"ROCBLAS_STREAM_ORDER_ALLOC is set: {release}")
    assert recommend(mi210, environ={"ROCBLAS_STREAM_ORDER_ALLOC": "0"}).warnings == []

    old = dataclasses.replace(
        mi210,
        library=dataclasses.replace(
            mi210.library,
            optional_symbols={
                **mi210.library.optional_symbols,
                "rocblas_set_device_memory_size": False,
            },
        ),
    )
    version = mi210.library.versions["rocblas"]
    [missing] = recommend(old, environ={}).warnings
    rocm = mi210.library.rocm
    assert missing.startswith(f"rocBLAS {version} (ROCm {rocm}) has no rocblas_set_device_memory")

    memory = mi210.device.memory_bytes
    with pytest.raises(Unsatisfiable) as too_big:  # never emitted
        recommend(mi210, headroom=Headroom(fixed_bytes=memory), environ={})
    value = mi210.session_bytes + memory
    assert f"is {value:,} bytes, more than the MI210's {memory:,} bytes of memory" in str(
        too_big.value
    )
    quarter = memory // 4
    [too_many] = recommend(
        mi210, headroom=Headroom(fixed_bytes=quarter), handles=4, environ={}
    ).warnings
    assert too_many.startswith("4 handles × ")


def test_optimal_sizes_are_flagged_minimums_are_not(rocm: object) -> None:
    result = sized("MI210", ["rocblas_dtrsm:m=1024,n=1024", *CALLS])
    trsm = next(r for r in result.calls if r.call.routine.family == "trsm")
    assert trsm.bytes
    warnings = recommend(result, environ={}).warnings
    assert warnings == [
        f"{trsm.call.label}: {trsm.bytes:,} bytes is its optimal size, not its minimum "
        "(with less, rocBLAS returns perf_degraded and runs a slower algorithm)"
    ]


def test_query_kind_table() -> None:
    minimum = query_kind(parse_call(CALLS[0]))
    assert minimum is not None and minimum.minimum
    trsm = query_kind(parse_call("rocblas_strsm:m=8,n=8"))
    assert trsm is not None and not trsm.minimum
    hpa = query_kind(parse_call(HPA_GEMM))
    assert hpa is not None and not hpa.minimum
    assert query_kind(parse_call("rocblas_gemm_ex:m=8,n=8,k=8")) is None  # not measured
    assert query_kind(parse_call("rocsolver_dgetrs:n=8,nrhs=1")) is None
