"""The terminal view of sweeps (`hipmem size --sweep`): per swept call, the largest need,
where it occurs, and a compact table of where the need changes."""

from __future__ import annotations

from ..sizing.sweeps.result import Step, SweepResult
from . import output

STEP_ROWS = 30  # more steps than this: the first and last ones, and those around the maximum
_HEAD_ROWS, _TAIL_ROWS, _MAX_RUNS_SHOWN = 12, 5, 5


def render_sweeps(sweeps: list[SweepResult]) -> None:
    for swept in sweeps:
        render_sweep(swept)


def render_sweep(swept: SweepResult) -> None:
    plan = swept.plan
    asked = f", {swept.asked_count:,} asked" if swept.asked_count != swept.point_count else ""
    output.line("")
    output.heading(f"Sweep {plan.label}: {swept.point_count:,} points{asked}")
    largest = swept.max_bytes
    if largest is None:
        output.line("no point could be sized", style="red")
    else:
        output.line(
            f"largest need {output.human_bytes(largest)} ({largest:,} bytes) at {swept.max_text()}"
        )
    if swept.failed_count:
        output.line(f"{swept.failed_count:,} points could not be sized", style="red")
    steps = swept.steps()
    table = output.Table(
        title=f"where the need changes: {len(steps):,} steps",
        columns=["points", "workspace", "bytes", ""],
        right=["workspace", "bytes"],
        boxed=False,
    )
    previous = -1
    for index in _rows_shown(swept, steps):
        if index != previous + 1:
            table.add_row(_gap(index - previous - 1), "", "", "")
        table.add_row(*_step_cells(swept, steps[index]))
        previous = index
    if previous != len(steps) - 1:
        table.add_row(_gap(len(steps) - previous - 1), "", "", "")
    output.print_table(table)


def _gap(count: int) -> output.Cell:
    return output.Styled(f"… {count:,} more steps", "dim")


def _step_cells(swept: SweepResult, step: Step) -> tuple[output.Cell, ...]:
    where = swept.step_text(step)
    if step.bytes is None:
        return where, output.Styled(step.status, "red"), "", ""
    mark = "◀ largest" if step.bytes == swept.max_bytes else ""
    return where, output.human_bytes(step.bytes), f"{step.bytes:,}", mark


def _rows_shown(swept: SweepResult, steps: list[Step]) -> list[int]:
    """Every step when they are few; else the first and last ones and each run of the
    largest need with its neighbours (a gap row says how many are left out)."""
    if len(steps) <= STEP_ROWS:
        return list(range(len(steps)))
    shown = set(range(_HEAD_ROWS)) | set(range(len(steps) - _TAIL_ROWS, len(steps)))
    largest = swept.max_bytes
    runs = [index for index, step in enumerate(steps) if step.bytes == largest]
    for index in runs[:_MAX_RUNS_SHOWN]:
        shown |= {index - 1, index, index + 1}
    return sorted(index for index in shown if 0 <= index < len(steps))
