"""`hipmem size --sweep ... --plot F.png|.svg`: the need against the swept argument.

One panel per swept call. The need is drawn as steps (it holds its value until the next
point), the largest need is marked with its value and where it occurs, and points the
library could not size leave gaps. A grid draws one line per value of the other swept
arguments (up to `_MAX_LINES`; beyond, the largest need over them). A long sweep is thinned
by hipmem/_core/decimate.py, which keeps every peak. Written atomically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hipmem._core.decimate import envelope
from hipmem._core.plot_files import byte_unit, check_plot_path, plain_text, save_atomically
from hipmem._core.pyplot import pyplot

from .sweep import SweepResult

_MAX_LINES = 8


def write_sweep_plot(path: Path, sweeps: Sequence[SweepResult], title: str) -> None:
    check_plot_path(path)
    plt = pyplot()
    figure, axes_list = plt.subplots(
        len(sweeps), 1, figsize=(10, 3.6 * len(sweeps) + 0.6), squeeze=False
    )
    for swept, axes in zip(sweeps, axes_list[:, 0], strict=True):
        _draw(axes, swept)
    figure.suptitle(plain_text(title), fontsize="medium")
    figure.tight_layout()
    try:
        save_atomically(figure, path)
    finally:
        plt.close(figure)


def _draw(axes: Any, swept: SweepResult) -> None:
    last = swept.plan.sweeps[-1]
    row = len(last.values)
    rows = swept.point_count // row
    scale, unit = byte_unit(swept.max_bytes or 0)
    powers = len(last.values) > 2 and last.text.count("*") == 1
    # One more x, so that the last point's step has a width of its own, as the others do.
    xs = [*last.values, _next_x(list(last.values), powers)]
    lines = [_row(swept, start * row, row, scale) for start in range(rows)]
    lines = [[*ys, ys[-1]] for ys in lines]
    if rows > _MAX_LINES:  # too many to tell apart: the largest need over the others
        columns = zip(*lines, strict=True)
        largest = [max((y for y in ys if not math.isnan(y)), default=math.nan) for ys in columns]
        others = ", ".join(str(sweep) for sweep in swept.plan.sweeps[:-1])
        axes.step(*envelope(xs, largest), where="post", lw=1.2, label=f"largest over {others}")
    else:
        for start, ys in enumerate(lines):
            label = _others_text(swept, start * row) or None
            axes.step(*envelope(xs, ys), where="post", lw=1.2, label=label)
    _mark_maximum(axes, swept, scale, unit)
    if powers:  # a log axis spaces them evenly
        axes.set_xscale("log", base=last.values[1] // last.values[0])
    axes.set_xlabel(last.arg)
    axes.set_ylabel(f"workspace ({unit})")
    axes.set_title(swept.plan.label, fontsize="small", loc="left")
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="best", fontsize="small")


def _next_x(values: list[int], powers: bool) -> float:
    if len(values) < 2:
        return values[0] + 1
    if powers:
        return values[-1] * values[-1] / values[-2]
    return 2 * values[-1] - values[-2]


def _row(swept: SweepResult, start: int, length: int, scale: int) -> list[float]:
    """One line's needs in the axis unit; NaN (a gap) where the point has no size."""
    values = []
    for index in range(start, start + length):
        n_bytes = swept.bytes_of(index)
        values.append(float("nan") if n_bytes is None else n_bytes / scale)
    return values


def _others_text(swept: SweepResult, index: int) -> str:
    pairs = zip(swept.plan.sweeps[:-1], swept.values_at(index)[:-1], strict=True)
    return ", ".join(f"{sweep.arg}={value}" for sweep, value in pairs)


def _mark_maximum(axes: Any, swept: SweepResult, scale: int, unit: str) -> None:
    largest = swept.max_bytes
    if largest is None:
        return
    index = next(swept.max_indices())
    x = swept.values_at(index)[-1]
    axes.plot([x], [largest / scale], marker="o", color="red", zorder=5)
    axes.annotate(
        f"max {largest:,} bytes at {swept.max_text(most=3)}",
        xy=(x, largest / scale),
        xytext=(0.02, 0.92),
        textcoords="axes fraction",
        fontsize="small",
        color="red",
        arrowprops={"arrowstyle": "->", "color": "red", "lw": 0.8},
    )
