"""A sizing request, answered: what `hipmem size`, `recommend` and `check` ask of the sizing
library, in one place. The calls are gathered (CALL specs, --from-log, --workload, sweeps),
the hipBLASLt ones set apart; the device is chosen (before any download, so an unknown one
or a missing GPU is said first); what the cache lacks is fetched; the release(s) are
picked; and every call is sized.

    from hipmem import SizingRequest, size_request

    answer = size_request(SizingRequest(workloads=[Path("workload.yaml")], device="MI210"))
    print(answer.sessions[0].session_bytes)

A command parses its options into a `SizingRequest`, calls `size_request`, and renders the
`SizingAnswer` (check and recommend judge it first: sizing/workspace_check.py,
sizing/recommend.py). The order of the work, and of what is said on the way through `say`,
is the order the command line shows."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .calls.in_release import in_release
from .calls.sources import CallSources, gather_calls
from .device_choice import choose_device
from .errors import SizingUsageError
from .hipblaslt.log import HipblasltLog
from .hipblaslt.matmul import MatmulReport, changed_by_cap
from .hipblaslt.request import SHOWN_SKIPPED, MatmulRequest, size_under_cap, workspace_cap
from .hipblaslt.request import gather as gather_matmuls
from .hipblaslt.request import size_request as size_matmul_request
from .rocm.catalog import load_catalog
from .rocm.choice import one_release, releases, several_cached_warning
from .rocm.locator import Libraries
from .rocm.on_demand import OnDemand, offline_reason
from .rocm.releases import find_release, nearest_release, rocm_of_library
from .say import Say
from .session import SessionResult, size_calls
from .sweeps.plan import SweptCall
from .sweeps.range import DEFAULT_MAX_POINTS, parse_max_points
from .worker.virtual_device import Device

Purpose = Literal["size", "check", "recommend"]
# PyTorch on ROCm reads the CUDA-era names first: set, they silently win.
_CUDA_NAMES = (
    ("CUBLAS_WORKSPACE_CONFIG", "HIPBLAS_WORKSPACE_CONFIG"),
    ("CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE"),
)


@dataclass
class SizingRequest:
    """What the user asked: the calls, where they are sized, with which release(s).

    `purpose`: `size` answers with every release asked for and sizes the hipBLASLt calls;
    `check` and `recommend` answer with one release and, for the hipBLASLt calls, check the
    cap (`hipblaslt_value`, else the environment's) or find the one to recommend; a gate
    reads every line of a call log unless `accept_skipped`."""

    calls: list[str] = field(default_factory=list)
    from_logs: list[Path] = field(default_factory=list)
    workloads: list[Path] = field(default_factory=list)
    strict: bool = False
    accept_skipped: bool = True
    sweeps: list[str] = field(default_factory=list)
    max_points: int | str = DEFAULT_MAX_POINTS  # as typed (--max-points) or a number
    device: str | None = None
    compute_units: int | None = None
    rocm: str | None = None  # "7.2", or "6.4,7.2" (size only); None: $HIPMEM_ROCM, ...
    rocm_dir: Path | None = None
    offline: bool = False
    minimum: bool = False
    purpose: Purpose = "size"
    hipblaslt_value: str | None = None  # check: the HIPBLASLT_WORKSPACE_SIZE to check (KiB)
    sweep_plot: bool = False  # size: the sweeps are to be drawn, so there must be some


@dataclass
class SizingAnswer:
    """What the request found. `sessions`: one per release (empty when the request had only
    hipBLASLt calls, or stopped after them); `matmul_reports`: the hipBLASLt calls, one per
    release (check: one, under the cap named by `cap_source`)."""

    request: SizingRequest
    device: Device
    releases: list[Libraries]
    matmuls: MatmulRequest
    matmul_reports: list[MatmulReport] = field(default_factory=list)
    cap_source: str | None = None
    sources: CallSources = field(default_factory=CallSources)
    sessions: list[SessionResult] = field(default_factory=list)
    swept: bool = False  # sized as sweeps (one release; `sessions[0].sweeps`)

    @property
    def matmuls_failed(self) -> bool:
        return any(report.failed for report in self.matmul_reports)


def size_request(
    request: SizingRequest, say: Say | None = None, ready: Callable[[], None] | None = None
) -> SizingAnswer:
    """Gather, choose, fetch, pick and size, saying what happens through `say`. `ready`
    (check, recommend): called once the device and release are chosen, before any call is
    sized (`recommend` replays its snapshots there, as it always has)."""
    say = say or Say()
    if request.purpose == "size":
        return _size(request, say)
    return _gate(request, say, ready or _nothing)


def _nothing() -> None:
    return None


def _size(request: SizingRequest, say: Say) -> SizingAnswer:
    device = choose_device(request.device, request.compute_units)
    fetch = _fetch(request, device, say)
    chosen = releases(request.rocm, request.rocm_dir, fetch)
    matmuls = _gather_matmuls(request, say)
    answer = SizingAnswer(request, device, chosen, matmuls)
    if matmuls.any:
        for libraries in chosen:
            with say.progress(f"hipBLASLt heuristics with ROCm {libraries.rocm}"):
                matmul_report = size_matmul_request(matmuls, device, libraries, fetch)
            _say_notice(matmul_report, say)
            answer.matmul_reports.append(matmul_report)
        if matmuls.only:
            return answer
    answer.sources = _sources(request, matmuls)
    parsed = gather_calls(answer.sources, load_catalog(chosen[0].rocm), say)
    _say_log_releases(answer.sources, chosen, say)
    answer.swept = any(isinstance(item, SweptCall) for item in parsed)
    if answer.swept or request.sweep_plot:
        if not answer.swept:
            raise SizingUsageError("--plot draws sweeps: give --sweep ARG=RANGE, or a workload "
                                   "whose calls have `sweep:`", parameter="plot")  # fmt: skip
        if len(chosen) > 1:
            raise SizingUsageError(
                "sweeps are sized with one ROCm release at a time: give --rocm R",
                parameter="rocm",
            )
    for libraries in chosen:  # each release's catalog checks the calls just before it sizes
        calls = parsed if answer.swept else in_release(parsed, libraries)
        with say.progress(f"sizing with ROCm {libraries.rocm}") as bar:
            answer.sessions.append(
                size_calls(
                    calls, device, progress=bar, libraries=libraries, minimum=request.minimum
                )
            )
    return answer


def _gate(request: SizingRequest, say: Say, ready: Callable[[], None]) -> SizingAnswer:
    """check and recommend: one release; the hipBLASLt calls first, and when they fail (or,
    checked, the cap changes a first choice) the others are not sized."""
    matmuls = _gather_matmuls(request, say)
    sources = _sources(request, matmuls)
    device = choose_device(request.device, request.compute_units)
    fetch = _fetch(request, device, say)
    libraries = one_release(request.rocm, request.rocm_dir, request.purpose, fetch)
    answer = SizingAnswer(request, device, [libraries], matmuls, sources=sources)
    ready()
    if matmuls.any:
        for name, wins_over in _CUDA_NAMES:
            if os.environ.get(name):
                say.warning(f"{name} is set: PyTorch reads it before {wins_over}, on ROCm "
                            "too; unset it")  # fmt: skip
        if not _matmuls_for_gate(answer, fetch, say):
            return answer
        if matmuls.only and not sources.sweeps:
            return answer
    several = several_cached_warning(libraries)
    if several:
        say.warning(several)
    parsed = gather_calls(sources, load_catalog(libraries.rocm), say)
    _say_log_releases(sources, [libraries], say)
    with say.progress("sizing") as bar:
        answer.sessions.append(
            size_calls(parsed, device, progress=bar, libraries=libraries, minimum=request.minimum)
        )
    return answer


def _matmuls_for_gate(answer: SizingAnswer, fetch: OnDemand, say: Say) -> bool:
    """The hipBLASLt calls checked under the cap (check) or sized for the recommended cap
    (recommend); False when the request goes no further."""
    request, (libraries,) = answer.request, answer.releases
    if request.purpose == "check":
        cap_bytes, answer.cap_source = workspace_cap(request.hipblaslt_value)
        report = size_under_cap(answer.matmuls, cap_bytes, answer.device, libraries, fetch)
    else:
        with say.progress(f"hipBLASLt heuristics with ROCm {libraries.rocm}"):
            report = size_matmul_request(answer.matmuls, answer.device, libraries, fetch)
    _say_notice(report, say)
    answer.matmul_reports.append(report)
    if report.failed:
        return False
    if request.purpose == "check":
        return not changed_by_cap(report)
    say.note(
        f"HIPBLASLT_WORKSPACE_SIZE (KiB): the largest workspace of an uncapped first "
        f"choice among {len(report.results)} hipBLASLt call(s), {report.build.describe()}"
    )
    return True


def _gather_matmuls(request: SizingRequest, say: Say) -> MatmulRequest:
    """The request's hipBLASLt calls, each hipBLASLt log said with its first skipped lines."""

    def said(path: Path, log: HipblasltLog) -> None:
        say.info(
            f"{path}: hipblaslt-bench log, {log.line_count} lines, {log.call_count:,} calls "
            f"({len(log.calls):,} distinct), {len(log.skipped):,} lines skipped"
        )
        for skipped in log.skipped[:SHOWN_SKIPPED]:
            say.warning(skipped.where(path))

    return gather_matmuls(request.calls, request.from_logs, request.workloads, request.strict,
                          request.accept_skipped, on_log=said)  # fmt: skip


def _sources(request: SizingRequest, matmuls: MatmulRequest) -> CallSources:
    """The rocBLAS/rocSOLVER calls' sources: what is left once the hipBLASLt ones are apart."""
    sources = CallSources(matmuls.calls, matmuls.from_log, matmuls.workload, request.strict,
                          request.accept_skipped)  # fmt: skip
    sources.sweeps = list(request.sweeps)
    points = request.max_points
    sources.max_points = parse_max_points(points) if isinstance(points, str) else points
    return sources


def _fetch(request: SizingRequest, device: Device, say: Say) -> OnDemand:
    """How this request fetches what the cache lacks: for the chosen device's arch, said
    through `say`; or, offline, not at all."""
    return OnDemand(
        arch=device.arch.name,
        offline_by=offline_reason(request.offline),
        announce=say.info,
        progress=say.transfer,
        notice=say.warning,
    )


_SHOWN = {"rocsolver": "rocSOLVER", "rocblas": "rocBLAS"}  # a log's header names, read lower


def _say_log_releases(sources: CallSources, chosen: list[Libraries], say: Say) -> None:
    """A call log whose header names other library versions than the release(s) sizing it:
    said once, with the release hipmem has nearest to the log's (sizes change between
    releases). A log sized with its own release among others (`--rocm 6.4,7.2`) is not."""
    for log in sources.logs:
        named = {name: version for name, version in log.versions.items() if name in _SHOWN}
        differing = [(libraries, _differ(named, libraries)) for libraries in chosen]
        if not named or not all(differ for _, differ in differing):
            continue
        libraries, differ = differing[0]
        written = ", ".join(f"{_SHOWN[name]} {version}" for name, version in differ.items())
        have = _versions(libraries)
        sized = ", ".join(f"{_SHOWN[name]} {have[name]}" for name in differ)
        rocm = next(filter(None, (rocm_of_library(*pair) for pair in differ.items())), None)
        nearest = None if rocm is None else nearest_release(rocm).name
        hint = f"; --rocm {nearest} is the nearest release hipmem has" if nearest not in (
            None, libraries.rocm) else ""  # fmt: skip
        say.warning(
            f"{log.path}: written by {written} (ROCm {rocm or 'unknown'}), sized with {sized} "
            f"(ROCm {libraries.rocm}): workspace sizes can differ between releases{hint}"
        )


def _differ(named: dict[str, str], libraries: Libraries) -> dict[str, str]:
    """The libraries of `named` (name: the log's version) the release does not have."""
    have = _versions(libraries)
    return {name: version for name, version in named.items() if have.get(name, version) != version}


def _versions(libraries: Libraries) -> dict[str, str]:
    """What the release's libraries report of themselves (none for an unknown release)."""
    return {} if libraries.rocm is None else find_release(libraries.rocm).versions


def _say_notice(report: MatmulReport, say: Say) -> None:
    """The one line saying the install had no hipBLASLt and which build answered instead."""
    if report.build.notice:
        say.warning(report.build.notice)
