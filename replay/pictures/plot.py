"""`replay --plot`: requested and reserved bytes over the replay, one line per resource.

What the figure shows, and why:
- the title names the log(s), so a saved image says what it is;
- the y axis unit follows the data (B up to TiB, as `log inspect --plot`);
- each resource's reserved bytes are drawn first, wide and pale; the log's requested bytes are
  drawn last, thin and black, so they stay visible where a resource reserves exactly what is
  requested (host memory, a plain cudaMalloc);
- a resource's limit (`limit=` or a pool's `maximum=`) is a dashed line in its colour, and
  the allocations it refused are marked with an x at the moment they were asked for.
Every series is thinned by hipmem/_core/decimate.py, which keeps every peak. The file
rules (suffixes, atomic write) are those of hipmem/_core/plot_files.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hipmem._core.decimate import envelope
from hipmem._core.plot_files import byte_unit, check_plot_path, plain_text, save_atomically
from hipmem._core.pyplot import pyplot

from ..engine.program import ReplayProgram
from ..engine.report import ReplayReport


def write_plot(
    path: Path,
    program: ReplayProgram,
    reports: list[ReplayReport],
    sources: Sequence[str] = (),
    limits: Mapping[str, int | None] | None = None,
) -> None:
    """Draw the replay to `path` (.png or .svg); `limits` maps a resource label to its cap."""
    check_plot_path(path)
    plt = pyplot()
    limits = limits or {}
    tallest = max(
        [program.peak_requested_bytes]
        + [r.peak_reserved_bytes or 0 for r in reports]
        + [limit for limit in limits.values() if limit]
    )
    scale, unit = byte_unit(tallest)
    fig, ax = plt.subplots(figsize=(12, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, report in enumerate(reports):
        colour = colours[index % len(colours)]
        _draw_resource(ax, program, report, limits.get(report.resource), scale, colour)
    ops, requested = envelope(np.arange(program.op_count), program.live_bytes)
    ax.plot(ops, requested / scale, label="requested (the log)", color="black",
            lw=0.9, zorder=5)  # fmt: skip
    names = ", ".join(Path(s).name for s in sources[:3]) + (" ..." if len(sources) > 3 else "")
    title = f"Requested and reserved bytes: {names}" if names else "Requested and reserved bytes"
    ax.set_title(plain_text(f"{title} ({program.log_events:,} events)"))
    ax.set_xlabel("allocator call (op)")
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0, top=tallest / scale * 1.08)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.01)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    try:
        save_atomically(fig, path)
    finally:
        plt.close(fig)


def _draw_resource(
    ax: Any,
    program: ReplayProgram,
    report: ReplayReport,
    limit_bytes: int | None,
    scale: int,
    colour: str,
) -> None:
    label = plain_text(report.resource)
    if report.samples is not None and len(report.samples.op_index):
        ops, reserved = envelope(report.samples.op_index, report.samples.reserved_bytes)
        ax.plot(ops, reserved / scale, label=f"reserved: {label}", color=colour, lw=3,
                alpha=0.55, zorder=3)  # fmt: skip
    if limit_bytes:
        ax.axhline(limit_bytes / scale, color=colour, ls="--", lw=1,
                   label=f"limit: {label}", zorder=4)  # fmt: skip
    if report.failures:
        rows = np.array([f.event_index for f in report.failures])
        ops = np.searchsorted(program.event_index, rows)
        asked = np.array([f.live_bytes + f.size_bytes for f in report.failures]) / scale
        shown = len(report.failures)
        more = f", the first {shown:,} marked" if report.failure_count > shown else ""
        ax.plot(ops, asked, "x", color=colour, markersize=6, mew=1.5, zorder=6,
                label=f"refused: {label} ({report.failure_count:,}{more})")  # fmt: skip
