"""hipBLASLt calls on the command line: `hipblaslt_matmul:...` in `hipmem size` (sized apart
from the rocBLAS/rocSOLVER calls: another library, its own version; their own table,
`hipblaslt` in `--json`), and HIPBLASLT_WORKSPACE_SIZE in `recommend --pytorch` and `check`.
The calls are gathered, sized and checked by `hipmem.sizing.hipblaslt.request`; this module
says what it does and renders what it found."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sizing.hipblaslt.log import HipblasltLog
from ..sizing.hipblaslt.matmul import MatmulReport, MatmulResult
from ..sizing.hipblaslt.request import (
    SHOWN_SKIPPED,
    MatmulRequest,
    size_request,
    size_under_cap,
    workspace_cap,
)
from ..sizing.hipblaslt.request import gather as gather_request
from ..sizing.rocm.locator import Libraries
from ..sizing.rocm.on_demand import OnDemand
from ..sizing.worker.virtual_device import Device
from . import output


def gather(
    calls: list[str] | None,
    from_log: list[Path] | None,
    workload: list[Path] | None,
    strict: bool,
    accept_skipped: bool = True,
) -> MatmulRequest:
    """The request's hipBLASLt calls, each hipBLASLt log said on stderr with its first
    skipped lines."""
    return gather_request(calls, from_log, workload, strict, accept_skipped, on_log=_say_log)


def _say_log(path: Path, log: HipblasltLog) -> None:
    output.info(
        f"{path}: hipblaslt-bench log, {log.line_count} lines, "
        f"{output.count(log.call_count)} calls ({output.count(len(log.calls))} distinct), "
        f"{output.count(len(log.skipped))} lines skipped"
    )
    for skipped in log.skipped[:SHOWN_SKIPPED]:
        output.warning(skipped.where(path))


def size_specs(
    request: MatmulRequest,
    chosen: list[Libraries],
    device: Device,
    fetch: OnDemand | None = None,
) -> list[MatmulReport]:
    """The request's calls sized with each release's hipBLASLt (`fetch`: how a build the
    cache lacks is fetched)."""
    reports = []
    for libraries in chosen:
        with output.progress(f"hipBLASLt heuristics with ROCm {libraries.rocm}"):
            report = size_request(request, device, libraries, fetch)
        warn_notice(report)
        reports.append(report)
    return reports


def _largest_first(report: MatmulReport) -> list[MatmulResult]:
    return sorted(
        report.results, key=lambda r: (-(r.bytes if r.bytes is not None else -1), -r.count)
    )


def render(reports: list[MatmulReport], top: int | None) -> None:
    first = reports[0]
    device = first.device
    title = (
        f"hipBLASLt workspace (first algorithm under the cap) on "
        f"{'virtual ' if device.virtual else ''}{device.name} "
        f"({device.arch.arch_features}, {device.compute_units} CUs)"
    )
    names = [report.build.label for report in reports]
    # The call (a long spec) last: too wide, it gets a line of its own under its row.
    table = output.Table(
        title=title,
        columns=[*names, "cap changed choice", "count", "call"],
        right=[*names, "cap changed choice", "count"],
    )
    by_call = [{r.call: r for r in report.results} for report in reports]
    shown = [result.call for result in _largest_first(reports[-1])][:top]
    for call in shown:
        cells: list[output.Cell] = []
        changed = []
        for results in by_call:
            result = results[call]
            if result.bytes is not None:
                cells.append(output.count(result.bytes))
            else:
                cells.append(output.Styled(result.status, "red"))
            flag = result.cap_changed_choice
            changed.append("" if flag is None else ("yes" if flag else "no"))
        table.add_row(*cells, " / ".join(changed), output.count(results[call].count), call.label)
    output.print_table(table)
    output.note(
        "bytes: the workspace of the heuristic's first algorithm within max_workspace "
        "(what an application that takes the first choice uses)"
    )
    for report in reports:
        output.note(report.build.describe())


def warn_notice(report: MatmulReport) -> None:
    """The one line saying the install had no hipBLASLt and which build answered instead."""
    if report.build.notice:
        output.warning(report.build.notice)


def as_json(reports: list[MatmulReport]) -> Any:
    if len(reports) == 1:
        return reports[0].as_dict()
    return [report.as_dict() for report in reports]


def report_failures(reports: list[MatmulReport]) -> bool:
    failed = False
    for report in reports:
        for result in report.failed:
            output.error(str(result.error))
            failed = True
    return failed


# ---- recommend --pytorch / check: HIPBLASLT_WORKSPACE_SIZE ------------------------------


def warn_cuda_variables() -> None:
    """PyTorch on ROCm reads the CUDA-era names first: set, they silently win."""
    import os

    for name, wins_over in (
        ("CUBLAS_WORKSPACE_CONFIG", "HIPBLAS_WORKSPACE_CONFIG"),
        ("CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE"),
    ):
        if os.environ.get(name):
            output.warning(
                f"{name} is set: PyTorch reads it before {wins_over}, on ROCm too; unset it"
            )


def recommend_variable(
    found: MatmulRequest, libraries: Libraries, device: Device, fetch: OnDemand | None = None
) -> tuple[str, str]:
    """(HIPBLASLT_WORKSPACE_SIZE, KiB): the smallest cap keeping every first choice."""
    from ..sizing.hipblaslt.matmul import recommended_kib

    (report,) = size_specs(found, [libraries], device, fetch)
    if report_failures([report]):
        import typer

        raise typer.Exit(1)
    kib = recommended_kib(report)
    output.note(
        f"HIPBLASLT_WORKSPACE_SIZE (KiB): the largest workspace of an uncapped first "
        f"choice among {len(report.results)} hipBLASLt call(s), {report.build.describe()}",
        err=True,
    )
    return ("HIPBLASLT_WORKSPACE_SIZE", str(kib))


def check_specs(
    found: MatmulRequest,
    value: str | None,
    libraries: Libraries,
    device: Device,
    fetch: OnDemand | None = None,
) -> bool:
    """Re-ask each call's heuristic with the value as its cap; False (and one line per call)
    when a first choice changes."""
    from ..sizing.hipblaslt.matmul import changed_by_cap

    cap_bytes, source = workspace_cap(value)
    report = size_under_cap(found, cap_bytes, device, libraries, fetch)
    warn_notice(report)
    if report_failures([report]):
        return False
    changed = changed_by_cap(report)
    for result in changed:
        assert result.uncapped is not None
        got = f"{result.algorithms[0].workspace_bytes:,}" if result.algorithms else "no algorithm"
        output.error(
            f"HIPBLASLT_WORKSPACE_SIZE ({source}) changes the first choice of "
            f"{result.call.shape_label()}: it needs {result.uncapped.workspace_bytes:,} bytes "
            f"(gets {got} bytes' algorithm instead; {report.build.label})"
        )
    if changed:
        output.note(report.build.describe(), err=True)
    else:
        output.ok(
            f"HIPBLASLT_WORKSPACE_SIZE ({source}) keeps the first choice of all "
            f"{len(report.results)} hipBLASLt call(s) ({report.build.describe()})"
        )
    return not changed
