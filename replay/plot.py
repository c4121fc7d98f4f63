"""`--plot`: requested and reserved bytes over the replay, one line per resource (PNG/SVG/PDF)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hipmem.atomic_write import atomic_output
from hipmem.pyplot import pyplot
from replay.program import ReplayProgram
from replay.report import ReplayReport

_POINTS = 4000  # the requested curve is thinned to about this many points


def write_plot(path: Path, program: ReplayProgram, reports: list[ReplayReport]) -> None:
    """Write the plot atomically (temp file in the same folder, then rename)."""
    plt = pyplot()
    gib = float(1 << 30)
    fig, ax = plt.subplots(figsize=(10, 5))
    step = max(1, program.op_count // _POINTS)
    ops = np.arange(0, program.op_count, step)
    ax.plot(ops, program.live_bytes[ops] / gib, label="requested (log)", color="black", lw=1)
    for report in reports:
        if report.samples is not None and len(report.samples.op_index):
            ax.plot(
                report.samples.op_index,
                report.samples.reserved_bytes / gib,
                label=f"reserved: {report.resource}",
                lw=1,
            )
    ax.set_xlabel("allocator call (op)")
    ax.set_ylabel("GiB")
    ax.set_title("Requested and reserved bytes over the replay")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    suffix = path.suffix or ".png"
    try:
        with atomic_output(path) as temp:
            fig.savefig(temp, format=suffix.lstrip("."))
    finally:
        plt.close(fig)
