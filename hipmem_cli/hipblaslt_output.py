"""hipBLASLt calls on the command line: `hipblaslt_matmul:...` in `hipmem size` (sized apart
from the rocBLAS/rocSOLVER calls: another library, its own version; their own table,
`hipblaslt` in `--json`), and HIPBLASLT_WORKSPACE_SIZE in `recommend --pytorch` and `check`.
The calls are gathered, sized and checked by `hipmem.sizing.request`; this module renders
what it found."""

from __future__ import annotations

from typing import Any

from ..sizing.hipblaslt.matmul import (
    MatmulReport,
    MatmulResult,
    changed_by_cap,
    recommended_hipblaslt_kib,
)
from . import output


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


def recommended_variable(report: MatmulReport) -> tuple[str, str]:
    """(HIPBLASLT_WORKSPACE_SIZE, KiB): the smallest cap keeping every first choice."""
    return ("HIPBLASLT_WORKSPACE_SIZE", str(recommended_hipblaslt_kib(report)))


def render_check(report: MatmulReport, source: str) -> bool:
    """The cap (`source`: where it came from) against each call's first choice: one line per
    call whose choice it changes; False when one does (or a call could not be sized)."""
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
