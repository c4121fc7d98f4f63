"""`hipblaslt_matmul:...` calls in `hipmem size`: sized apart from the rocBLAS/rocSOLVER calls
(another library, its own version), shown in their own table, `hipblaslt` in `--json`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hipmem_cli import output
from sizing.hipblaslt_matmul import (
    MatmulReport,
    MatmulResult,
    is_matmul_spec,
    parse_matmul,
    size_matmuls,
)
from sizing.library_locator import Libraries
from sizing.session import _choose_device


def split_specs(specs: list[str]) -> tuple[list[str], list[str]]:
    """(rocBLAS/rocSOLVER specs, hipBLASLt specs), each in the order given."""
    others = [spec for spec in specs if not is_matmul_spec(spec)]
    return others, [spec for spec in specs if is_matmul_spec(spec)]


def size_specs(
    specs: list[str], chosen: list[Libraries], device: str | None, cus: int | None
) -> list[MatmulReport]:
    calls = [parse_matmul(spec) for spec in specs]
    target = _choose_device(device, cus)
    reports = []
    for libraries in chosen:
        with output.progress(f"hipBLASLt heuristics with ROCm {libraries.rocm}"):
            reports.append(size_matmuls(calls, target, libraries))
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
    table = Table(title=title, title_justify="left")
    table.add_column("call", overflow="fold")
    for report in reports:
        table.add_column(f"hipBLASLt {report.hipblaslt_version}", justify="right")
    table.add_column("cap changed choice", justify="right")
    table.add_column("count", justify="right")
    by_call = [{r.call: r for r in report.results} for report in reports]
    shown = [result.call for result in _largest_first(reports[-1])][:top]
    for call in shown:
        cells = []
        changed = []
        for results in by_call:
            result = results[call]
            cells.append(
                f"{result.bytes:,}" if result.bytes is not None else f"[red]{result.status}[/red]"
            )
            flag = result.cap_changed_choice
            changed.append("" if flag is None else ("yes" if flag else "no"))
        table.add_row(call.label, *cells, " / ".join(changed), str(results[call].count))
    unbounded = output.stdout.options.update(max_width=1 << 16)
    from rich.measure import Measurement

    width = output.stdout.width
    output.stdout.width = max(Measurement.get(output.stdout, unbounded, table).maximum, width)
    try:
        output.stdout.print(table)
    finally:
        output.stdout.width = width
    output.stdout.print(
        "[dim]bytes: the workspace of the heuristic's first algorithm within max_workspace "
        "(what an application that takes the first choice uses)[/dim]"
    )


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
