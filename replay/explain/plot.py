"""`explain --plot`: the allocator's segments and their blocks at the refusal, the picture
memory_viz's "allocator state" view gives. One row per segment (the largest first, at most
SEGMENTS_DRAWN), each block drawn to scale: allocated blocks filled, free blocks hatched
(inactive split blocks when the segment is partly in use), the request that was refused drawn
beside them at the same scale. File rules (suffix, atomic write): hipmem/_core/plot_files.py.
"""

from __future__ import annotations

from pathlib import Path

from hipmem._core.plot_files import byte_unit, check_plot_path, plain_text, save_atomically
from hipmem._core.pyplot import pyplot

from ..errors import ReplayError
from .explanation import Explanation

SEGMENTS_DRAWN = 40


def write_state_plot(path: Path, found: Explanation) -> None:
    """Draw the segments and blocks of `found.state` to `path`."""
    check_plot_path(path)
    state, refused = found.state, found.refused
    if state is None or refused is None:
        raise ReplayError("nothing was refused: there is no allocator state to draw")
    segments = sorted(state.segments, key=lambda s: -s.total_bytes)[:SEGMENTS_DRAWN]
    widest = max([refused.size_bytes, *(s.total_bytes for s in segments)])
    scale, unit = byte_unit(widest)
    plt = pyplot()
    rows = len(segments) + 1
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.3 * rows + 1.5)))
    for row, segment in enumerate(segments, start=1):
        start = 0
        for block in segment.blocks:
            used = block.allocated or block.active
            ax.barh(
                row,
                block.size_bytes / scale,
                left=start / scale,
                height=0.7,
                color="tab:blue" if used else "white",
                edgecolor="black",
                linewidth=0.4,
                hatch=None if used else "///",
            )
            start += block.size_bytes
    ax.barh(
        0, refused.size_bytes / scale, height=0.7, color="tab:red", edgecolor="black", linewidth=0.4
    )
    labels = ["refused request"] + [
        f"{'large' if s.is_large else 'small'}{' expandable' if s.is_expandable else ''}"
        for s in segments
    ]
    ax.set_yticks(range(rows), labels, fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    shown = "" if len(state.segments) <= SEGMENTS_DRAWN else f" (largest {SEGMENTS_DRAWN} shown)"
    title = (
        f"Segments at the refusal: {Path(refused.snapshot).name} line {refused.where.line}, "
        f"{refused.size_bytes:,} bytes refused, PyTorch {found.torch_version}\n"
        f"{len(state.segments)} segments{shown}; reserved {state.reserved_bytes:,}, allocated "
        f"{state.allocated_bytes:,} bytes; blue: allocated, hatched: free"
    )
    ax.set_title(plain_text(title), fontsize="small")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    try:
        save_atomically(fig, path)
    finally:
        plt.close(fig)
