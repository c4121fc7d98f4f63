"""`recommend --from-snapshot --plot`: reserved bytes over the replay of the snapshot that
drives the recommendation, the recommended setting beside PyTorch's defaults.

Both settings are replayed once more with the reserved bytes sampled: the highest point of
each window of ops, so the peak is drawn where it happened. The snapshot's requested bytes are
drawn last, thin and black; the recommended setting string is the title's second line (it is
too long for a legend). Every series is thinned by hipmem/_core/decimate.py, which keeps
every peak. File rules (suffix, atomic write): hipmem/_core/plot_files.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from hipmem._core.decimate import envelope
from hipmem._core.plot_files import byte_unit, check_plot_path, plain_text, save_atomically
from hipmem._core.pyplot import pyplot

from ..engine.report import ReplayReport
from ..engine.run import replay_log
from ..errors import ReplayError
from .candidate import Candidate
from .recommend import AllocatorRecommendation
from .workloads import Workload

SAMPLES = 2000  # windows of ops sampled per replay


def sampled_replays(
    recommendation: AllocatorRecommendation,
) -> tuple[Workload, list[tuple[str, ReplayReport]]]:
    """The driving snapshot, and its replays with reserved bytes sampled: the defaults, then
    the recommended setting when it is another (for this plot and `--html`)."""
    chosen = recommendation.recommended
    if chosen is None or chosen.driving is None:
        raise ReplayError("no setting was recommended: there is nothing to draw")
    workload = next(w for w in recommendation.workloads if w.name == chosen.driving.snapshot)
    options = dataclasses.replace(recommendation.options, plot_samples=SAMPLES, time_calls=False)

    def sampled(candidate: Candidate) -> ReplayReport:
        return replay_log(workload.log, candidate.spec, options, program=workload.program)

    shown = [("defaults", sampled(recommendation.default))]
    if chosen is not recommendation.default:
        shown.append(("recommended", sampled(chosen)))
    return workload, shown


def write_allocator_plot(path: Path, recommendation: AllocatorRecommendation) -> None:
    """Draw the recommended setting and the defaults on the driving snapshot to `path`."""
    check_plot_path(path)
    workload, shown = sampled_replays(recommendation)
    chosen = recommendation.recommended
    assert chosen is not None  # sampled_replays refuses a recommendation without one
    program = workload.program
    tallest = max([program.peak_requested_bytes] + [r.peak_reserved_bytes or 0 for _, r in shown])
    scale, unit = byte_unit(tallest)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 5))
    for label, report in shown:
        samples = report.samples
        if samples is not None and len(samples.op_index):
            peak = report.peak_reserved_bytes or 0
            ops, reserved = envelope(samples.op_index, samples.reserved_bytes)
            ax.plot(ops, reserved / scale, lw=3, alpha=0.6,
                    label=f"reserved, {label} (peak {peak / scale:,.1f} {unit})")  # fmt: skip
    ops, requested = envelope(np.arange(program.op_count), program.live_bytes)
    ax.plot(ops, requested / scale, color="black", lw=0.9, zorder=5,
            label="requested (the snapshot)")  # fmt: skip
    title = (
        f"Reserved bytes: {Path(workload.name).name} ({program.log_events:,} events), "
        f"PyTorch {recommendation.torch_version}\n"
        f"recommended: {chosen.settings or 'PyTorch defaults'}"
    )
    ax.set_title(plain_text(title), fontsize="medium")
    ax.set_xlabel("allocator call (op)")
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0, top=tallest / scale * 1.08)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.01)
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    try:
        save_atomically(fig, path)
    finally:
        plt.close(fig)
