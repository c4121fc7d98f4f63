"""What to set ROCBLAS_DEVICE_MEMORY_SIZE (and PyTorch's workspace variable) to, from a
sized session.

    result = size_calls(["rocsolver_dgetrf:m=1024,n=1024"], device="MI210")
    advice = recommend(result, headroom=parse_headroom("10%"), align_bytes=parse_bytes("2MiB"))
    advice.rocblas_device_memory_size_bytes     # plain decimal bytes, as strtoul reads them

rocBLAS reads the variable once per handle: set and > 0, the handle allocates exactly that
and never grows (calls needing more fail); unset or 0, rocBLAS manages the memory, starting
from a default of 32 MiB (128 MiB on gfx94x/gfx950) and reallocating mid-run when a call
needs more.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hipmem._core.byte_sizes import BadSize, KiB, MiB, parse_bytes

from .calls.result import CallResult
from .calls.spec import Call
from .errors import SizingError
from .rocm.releases import rocm_of_rocblas
from .session import SessionResult
from .worker.virtual_device import Arch

DEFAULT_HANDLE_BYTES = 32 * MiB
LARGE_DEFAULT_HANDLE_BYTES = 128 * MiB  # gfx94x (MI300) and gfx950 (MI350)


class Unsatisfiable(SizingError):
    """The recommended value would be more than the device's memory."""


MAX_PERCENT = 10_000  # --headroom: past this a percentage is a typo


@dataclass(frozen=True)
class Headroom:
    """Extra room on top of the session size: a percentage of it, or a fixed size."""

    percent: Fraction = Fraction(0)
    fixed_bytes: int = 0

    def bytes_for(self, session_bytes: int) -> int:
        """The headroom in bytes for a session, rounded up to a whole byte."""
        return math.ceil(session_bytes * self.percent / 100) + self.fixed_bytes

    def __str__(self) -> str:
        return f"{self.percent}%" if self.percent else f"{self.fixed_bytes} bytes"


_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")


def parse_headroom(text: str) -> Headroom:
    """'10%', '12.5%', '64MiB' or '1048576B'; never negative. A bare number other than 0 is
    refused: users mean a percentage as often as bytes."""
    if text.strip().endswith("%"):
        match = _PERCENT.fullmatch(text)
        if match is None:
            raise BadSize(
                "expected a non-negative percentage such as 10% or 12.5%",
                parameter="headroom",
                value=text,
            )
        if len(match.group(1)) > 30 or Fraction(match.group(1)) > MAX_PERCENT:
            raise BadSize(f"more than {MAX_PERCENT:,}%", parameter="headroom")
        return Headroom(percent=Fraction(match.group(1)))
    bare = text.strip()
    # 10 could be 10% or 10 bytes: ask, never guess (no int(): it refuses 5,000 digits)
    if bare.isdigit() and bare.strip("0"):
        number = bare if len(bare) <= 20 else "N"
        raise BadSize(
            f"a number needs a unit; say {number}% (a percentage) or {number}B (bytes)",
            parameter="headroom",
            value=text,
        )
    try:
        return Headroom(fixed_bytes=parse_bytes(text, name="headroom"))
    except BadSize as err:
        if "more than" in str(err):  # a size too large: its own message
            raise
        raise BadSize(
            "expected a non-negative percentage (10%) or size (1048576B, 64MiB)",
            parameter="headroom",
            value=text,
        ) from None


def parse_alignment(text: str) -> int:
    """A rounding unit in bytes, at least 1 ('2MiB', '64KiB', '4096')."""
    align_bytes = parse_bytes(text, name="align")
    if align_bytes < 1:
        raise BadSize("must be at least 1 byte", parameter="align", value=text)
    return align_bytes


def round_up(n_bytes: int, align_bytes: int) -> int:
    return -(-n_bytes // align_bytes) * align_bytes


def arch_default_bytes(arch: Arch) -> int:
    """What a rocBLAS-managed handle allocates at creation, by the vendor's arch rule."""
    large = arch.major == 9 and arch.minor >= 4  # gfx940-942, gfx950
    return LARGE_DEFAULT_HANDLE_BYTES if large else DEFAULT_HANDLE_BYTES


# -- minimum or optimal -------------------------------------------------------------------------
@dataclass(frozen=True)
class QueryKind:
    """Whether a family's size query answers its minimum or its (larger) optimal size."""

    minimum: bool
    why: str


_EXACT = QueryKind(True, "it fails with memory_error with 64 bytes less")
# Measured by running each routine for real (kernels as no-ops) with the queried size S and
# S - 64 bytes (see ../shared/notes/virtual-device.md, "Minimum versus optimal"). Families
# not listed were not measured: no claim is made about them.
QUERY_KINDS: dict[str, QueryKind] = {
    "getrf": _EXACT,
    "geqrf": _EXACT,
    "potrf": _EXACT,
    "syevd": _EXACT,
    "gesvd": _EXACT,
    "nrm2": _EXACT,
    "trsm": QueryKind(
        False, "with less, rocBLAS returns perf_degraded and runs a slower algorithm"
    ),
    # gemm_ex with f16/bf16 inputs and f32 compute ("HPA") consults the tuned kernels.
    "gemm_ex/hpa": QueryKind(
        False, "with less (even 64 bytes), f16/bf16 gemm_ex picks another, slower kernel"
    ),
}
_HPA_INPUTS = ("f16_r", "bf16_r")


def query_kind(call: Call) -> QueryKind | None:
    """The table entry for a call, or None where its family was not measured."""
    family = call.routine.family
    if family == "gemm_ex":
        hpa = call.args.get("a_type") in _HPA_INPUTS and call.args.get("compute_type") == "f32_r"
        family = "gemm_ex/hpa" if hpa else "gemm_ex"
    return QUERY_KINDS.get(family)


# -- the recommendation ---------------------------------------------------------------------------
PYTORCH_VARIABLE = "HIPBLAS_WORKSPACE_CONFIG"
PYTORCH_WHY = (
    "PyTorch ignores ROCBLAS_DEVICE_MEMORY_SIZE: it gives each rocBLAS handle a workspace of "
    "its own through rocblas_set_workspace, sized by CUBLAS_WORKSPACE_CONFIG, else "
    "HIPBLAS_WORKSPACE_CONFIG, else ROCBLAS_WORKSPACE_CONFIG (':SIZE_KiB:COUNT', summed); "
    "that workspace also serves PyTorch's own rocBLAS calls, so set it only when these calls "
    "are all of them"
)


@dataclass(frozen=True)
class Recommendation:
    """The value to set and what it changes, for one sized session. Sizes in bytes."""

    session_bytes: int  # what one handle needs for the whole workload
    headroom_bytes: int
    align_bytes: int
    rocblas_device_memory_size_bytes: int  # session + headroom, rounded up to align
    default_bytes: int  # what the handle allocates without the variable
    default_source: str  # "library" (asked of rocBLAS) or "arch rule"
    arch_rule_bytes: int  # the default by the vendor's arch rule, for comparison
    handles: int
    largest_call: str | None
    pytorch_workspace_config: str  # ':SIZE_KiB:1' for HIPBLAS_/ROCBLAS_WORKSPACE_CONFIG
    rocm: str | None = None  # the ROCm release the figure is for
    library_versions: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    basis: str = "query"  # "query" (the library's sizes) or "minimum" (measured minimums)
    degraded_calls: list[str] = field(default_factory=list)  # run below their optimal with it
    # Swept calls: each one's largest need and where it occurs (SweepResult.summary()).
    sweeps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def saved_bytes_per_handle(self) -> int:
        """Default minus recommendation: positive saves memory, negative adds it."""
        return self.default_bytes - self.rocblas_device_memory_size_bytes

    @property
    def saved_bytes_total(self) -> int:
        return self.saved_bytes_per_handle * self.handles

    @property
    def managed_grows(self) -> bool:
        """Without the variable, would the handle reallocate mid-run for this workload?"""
        return self.session_bytes > self.default_bytes

    def variables(self, *, pytorch: bool = False) -> list[tuple[str, str]]:
        """(name, value) pairs to set, in the order to emit them."""
        pairs = [("ROCBLAS_DEVICE_MEMORY_SIZE", str(self.rocblas_device_memory_size_bytes))]
        if pytorch:
            pairs.append((PYTORCH_VARIABLE, self.pytorch_workspace_config))
        return pairs

    def as_dict(self) -> dict[str, Any]:
        return {
            "rocm": self.rocm,
            "library_versions": self.library_versions,
            "rocblas_device_memory_size_bytes": self.rocblas_device_memory_size_bytes,
            "session_bytes": self.session_bytes,
            "headroom_bytes": self.headroom_bytes,
            "align_bytes": self.align_bytes,
            "default_bytes": self.default_bytes,
            "default_source": self.default_source,
            "arch_rule_bytes": self.arch_rule_bytes,
            "saved_bytes_per_handle": self.saved_bytes_per_handle,
            "handles": self.handles,
            "saved_bytes_total": self.saved_bytes_total,
            "largest_call": self.largest_call,
            "pytorch": {
                "variable": PYTORCH_VARIABLE,
                "value": self.pytorch_workspace_config,
                "why": PYTORCH_WHY,
            },
            "warnings": self.warnings,
            "basis": self.basis,
            "degraded_calls": self.degraded_calls,
            "sweeps": self.sweeps,
        }


def pytorch_workspace_config(n_bytes: int) -> str:
    """':SIZE_KiB:1', SIZE rounded up: PyTorch sums SIZE×COUNT KiB into one workspace."""
    return f":{math.ceil(n_bytes / KiB)}:1"


def recommend(
    result: SessionResult,
    *,
    headroom: Headroom | None = None,
    align_bytes: int = 1,
    handles: int = 1,
    environ: Mapping[str, str] | None = None,
    minimum: bool = False,
) -> Recommendation:
    """The recommendation for a sized session; `environ` (default os.environ) is checked for
    settings that clash with it. `minimum=True` starts from the session's measured minimum
    (`SizingSession.measure_minimum`) instead of the library's sizes, and names the calls
    that then run degraded."""
    if handles < 1:
        raise BadSize("must be at least 1", parameter="handles", value=handles)
    if align_bytes < 1:
        raise BadSize("must be at least 1 byte", parameter="align_bytes", value=align_bytes)
    headroom = headroom or Headroom()
    environ = os.environ if environ is None else environ
    needed_bytes = result.session_bytes
    if minimum:
        if result.session_minimum_bytes is None:
            raise BadSize("no minimums were measured for this session", parameter="minimum")
        needed_bytes = result.session_minimum_bytes
    headroom_bytes = headroom.bytes_for(needed_bytes)
    value_bytes = round_up(needed_bytes + headroom_bytes, align_bytes)
    memory = result.device.memory_bytes
    if value_bytes > memory:  # never emitted: a handle with it could not be created
        raise Unsatisfiable(
            f"the recommendation ({needed_bytes:,} bytes needed + headroom, rounded "
            f"up to {align_bytes:,}) is {value_bytes:,} bytes, more than the "
            f"{result.device.name}'s {memory:,} bytes of memory; nothing emitted"
        )
    default_bytes, source = _default_bytes(result)
    sized = [r for r in result.calls if r.bytes is not None]
    if minimum:  # the call that sets the value: the largest minimum
        largest = max(sized, key=lambda r: r.minimum_or_query_bytes or 0, default=None)
    else:
        largest = max(sized, key=lambda r: r.bytes or 0, default=None)
    advice = Recommendation(
        session_bytes=needed_bytes,
        headroom_bytes=headroom_bytes,
        align_bytes=align_bytes,
        rocblas_device_memory_size_bytes=value_bytes,
        default_bytes=default_bytes,
        default_source=source,
        arch_rule_bytes=arch_default_bytes(result.device.arch),
        handles=handles,
        largest_call=largest.call.label if largest else None,
        pytorch_workspace_config=pytorch_workspace_config(value_bytes),
        rocm=result.library.rocm,
        library_versions=dict(result.library.versions),
        basis="minimum" if minimum else "query",
        degraded_calls=degraded_calls(result.calls, value_bytes),
        sweeps=[swept.summary() for swept in result.sweeps],
    )
    advice.warnings.extend(warnings_for(advice, result, environ))
    return advice


def degraded_calls(calls: list[CallResult], value_bytes: int) -> list[str]:
    """What a workspace of `value_bytes` costs: each call it runs below its optimal, and how
    ("LABEL: perf_degraded below 5,242,880 bytes")."""
    found = []
    for result in calls:
        measured = result.minimum
        if measured is None or measured.minimum_bytes is None or measured.optimal_bytes is None:
            continue
        if measured.minimum_bytes <= value_bytes < measured.optimal_bytes:
            found.append(
                f"{result.call.label}: {measured.between_status} below its optimal "
                f"{measured.optimal_bytes:,} bytes"
            )
    return found


def _default_bytes(result: SessionResult) -> tuple[int, str]:
    # The library's own answer (a fresh handle, asked at start-up) wins; the arch rule is the
    # fallback for a library that allocates nothing up front.
    if result.library.handle_default_bytes > 0:
        return result.library.handle_default_bytes, "library"
    return arch_default_bytes(result.device.arch), "arch rule"


def warnings_for(
    advice: Recommendation, result: SessionResult, environ: Mapping[str, str]
) -> list[str]:
    """Everything about this recommendation a user must know before setting it."""
    found: list[str] = []
    found.extend(
        version_warnings(result.library.versions, result.library.optional_symbols, environ)
    )
    found.extend(_memory_warnings(advice, result))
    found.extend(_optimal_warnings(result.calls))
    found.extend(f"runs degraded: {call}" for call in advice.degraded_calls)
    found.extend(
        f"{r.call.label}: minimum unknown ({r.minimum.reason}); counted with its query size"
        for r in result.calls
        if r.minimum is not None and r.minimum.method == "unknown"
    )
    if advice.rocblas_device_memory_size_bytes == 0:
        found.append(
            "the calls need no workspace; ROCBLAS_DEVICE_MEMORY_SIZE=0 means rocBLAS manages "
            "the memory (it allocates only when a call needs some)"
        )
    if "CUBLAS_WORKSPACE_CONFIG" in environ:
        found.append(
            "CUBLAS_WORKSPACE_CONFIG is set: PyTorch reads it before HIPBLAS_WORKSPACE_CONFIG"
        )
    return found


@dataclass(frozen=True)
class VersionWarning:
    """A warning about rocBLAS's memory API or ROCBLAS_STREAM_ORDER_ALLOC that holds for some
    rocBLAS versions only: it fires for those, and says which they are."""

    first: tuple[int, int, int]  # the first rocBLAS version it applies to
    last: tuple[int, int, int]  # the last one (inclusive)
    applies_to: str  # the versions in words, part of the message
    when: Callable[[Mapping[str, str], Mapping[str, bool]], bool]
    text: str  # with {version} and {rocm}

    def fires(self, version: str, environ: Mapping[str, str], symbols: Mapping[str, bool]) -> bool:
        parsed = _version_tuple(version)
        return (
            parsed is not None and self.first <= parsed <= self.last and self.when(environ, symbols)
        )


def _stream_order(environ: Mapping[str, str]) -> str:
    return environ.get("ROCBLAS_STREAM_ORDER_ALLOC", "").strip()


# Facts from the vendor's release notes and the libraries themselves (see docs/recommend.md).
VERSION_WARNINGS = (
    VersionWarning(
        (4, 4, 0),
        (5, 2, 99),
        "rocBLAS 4.4-5.2, ROCm 6.4-7.2, the releases that read it and hipmem checked",
        lambda environ, _: _stream_order(environ) not in ("", "0"),
        "ROCBLAS_STREAM_ORDER_ALLOC is set: rocBLAS {version} (ROCm {rocm}) then allocates "
        "the workspace stream-ordered, which does not combine safely with "
        "ROCBLAS_DEVICE_MEMORY_SIZE > 0 ({applies_to}); unset one of the two",
    ),
    VersionWarning(
        (5, 1, 0),
        (5, 1, 0),
        "rocBLAS 5.1.0, ROCm 7.1.0 only",
        lambda environ, _: _stream_order(environ) == "",
        "rocBLAS {version} (ROCm {rocm}) allocates the workspace stream-ordered by default "
        "({applies_to}; 7.1.1 made it opt-in again): set ROCBLAS_STREAM_ORDER_ALLOC=0 "
        "beside ROCBLAS_DEVICE_MEMORY_SIZE",
    ),
    VersionWarning(
        (5, 1, 0),
        (5, 1, 0),
        "rocBLAS 5.1.0, ROCm 7.1.0 only",
        lambda _, symbols: symbols.get("rocblas_set_device_memory_size", False),
        "rocBLAS {version} (ROCm {rocm}) ships rocblas_set_device_memory_size and "
        "rocblas_is_user_managing_device_memory as no-op stubs ({applies_to}): programs that "
        "size handles through the API get rocBLAS-managed memory",
    ),
    VersionWarning(
        (0, 0, 0),
        (99, 0, 0),
        "any version without the symbol; rocBLAS 5.x deprecates it, 5.2 still exports it",
        lambda _, symbols: not symbols.get("rocblas_set_device_memory_size", True),
        "rocBLAS {version} (ROCm {rocm}) has no rocblas_set_device_memory_size ({applies_to}): "
        "programs cannot size handles through the API, and this version's handling of "
        "ROCBLAS_DEVICE_MEMORY_SIZE was not verified",
    ),
)


def version_warnings(
    versions: Mapping[str, str], symbols: Mapping[str, bool], environ: Mapping[str, str]
) -> list[str]:
    """The version-keyed warnings that fire for this rocBLAS in this environment."""
    version = versions.get("rocblas", "")
    rocm = rocm_of_rocblas(version) or "?"
    return [
        rule.text.format(version=version, rocm=rocm, applies_to=rule.applies_to)
        for rule in VERSION_WARNINGS
        if rule.fires(version, environ, symbols)
    ]


def _version_tuple(version: str) -> tuple[int, int, int] | None:
    parts = version.split(".")[:3]
    if len(parts) < 2 or not all(part.isdigit() for part in parts):
        return None
    numbers = [int(part) for part in parts] + [0] * (3 - len(parts))
    return numbers[0], numbers[1], numbers[2]


def _memory_warnings(advice: Recommendation, result: SessionResult) -> list[str]:
    memory = result.device.memory_bytes
    value = advice.rocblas_device_memory_size_bytes
    name = result.device.name
    if value * advice.handles > memory:
        return [
            f"{advice.handles} handles × {value:,} bytes is more than the {name}'s "
            f"{memory:,} bytes of memory"
        ]
    return []


def _optimal_warnings(calls: list[CallResult]) -> list[str]:
    found = []
    for result in calls:
        kind = query_kind(result.call)
        if result.minimum is not None and result.minimum.method != "unknown":
            continue  # measured: the degraded list says what running below it costs
        if result.bytes and kind is not None and not kind.minimum:
            found.append(
                f"{result.call.label}: {result.bytes:,} bytes is its optimal size, not its "
                f"minimum ({kind.why})"
            )
    return found
