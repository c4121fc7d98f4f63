"""`explain --html`: the allocator's segments at the refusal as a plotly figure, the page's
counterpart of `explain --plot` (replay/explain/plot.py). One row per segment (the largest
first, at most SEGMENTS_DRAWN), each block a bar to scale: allocated ones filled, free ones
light; the refused request on a row of its own at the same scale. Hovering a block gives its
exact bytes, what was requested of it and its segment's address and stream.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from hipmem._core.plot_files import byte_unit

from .explanation import Explanation
from .plot import SEGMENTS_DRAWN
from .state import Segment

_ALLOCATED, _FREE, _REFUSED = "#1f77b4", "#dde6f0", "#d62728"


def state_figure(found: Explanation) -> Any | None:
    """The segments and blocks at the refusal, or None when nothing was refused."""
    import plotly.graph_objects as go

    state, refused = found.state, found.refused
    if state is None or refused is None:
        return None
    segments = sorted(state.segments, key=lambda s: -s.total_bytes)[:SEGMENTS_DRAWN]
    widest = max([refused.size_bytes, *(s.total_bytes for s in segments)])
    scale, unit = byte_unit(widest)
    bars: dict[bool, dict[str, list[Any]]] = {
        used: {"x": [], "base": [], "y": [], "text": []} for used in (True, False)
    }
    for row, segment in enumerate(segments, start=1):
        _add_blocks(bars, row, segment, scale)
    figure = go.Figure()
    for used, name, color in ((True, "allocated or in use", _ALLOCATED), (False, "free", _FREE)):
        kept = bars[used]
        figure.add_trace(
            go.Bar(
                x=kept["x"], base=kept["base"], y=kept["y"], orientation="h", name=name,
                marker={"color": color, "line": {"color": "#333", "width": 0.5}},
                hovertext=kept["text"], hoverinfo="text",
            )
        )  # fmt: skip
    figure.add_trace(
        go.Bar(
            x=[refused.size_bytes / scale], base=[0], y=[0], orientation="h",
            name=f"refused: {refused.size_bytes:,} bytes", marker={"color": _REFUSED},
            hovertext=[f"refused request: {refused.size_bytes:,} bytes ({refused.where})"],
            hoverinfo="text",
        )
    )  # fmt: skip
    labels = ["refused request"] + [_segment_label(s) for s in segments]
    shown = "" if len(state.segments) <= SEGMENTS_DRAWN else f" (largest {SEGMENTS_DRAWN})"
    figure.update_layout(
        title={
            "text": html.escape(
                f"Segments at the refusal{shown}: {Path(refused.snapshot).name} line "
                f"{refused.where.line}, PyTorch {found.torch_version}"
            ),
            "font": {"size": 14},
        },
        barmode="overlay",
        xaxis_title=unit,
        yaxis={"tickvals": list(range(len(labels))), "ticktext": labels, "autorange": "reversed"},
        hovermode="closest",
        template="plotly_white",
        height=max(320, 26 * len(labels) + 140),
        legend={"orientation": "h", "y": -0.15},
        margin={"l": 120, "r": 20, "t": 50, "b": 40},
    )
    return figure


def _add_blocks(
    bars: dict[bool, dict[str, list[Any]]], row: int, segment: Segment, scale: int
) -> None:
    start = 0
    for block in segment.blocks:
        used = block.allocated or block.active
        kept = bars[used]
        kept["x"].append(block.size_bytes / scale)
        kept["base"].append(start / scale)
        kept["y"].append(row)
        what = "allocated" if block.allocated else "in use" if block.active else "free"
        kept["text"].append(
            f"{what} block: {block.size_bytes:,} bytes"
            + (f" ({block.requested_bytes:,} requested)" if block.allocated else "")
            + f"<br>segment 0x{segment.address:x}, {segment.total_bytes:,} bytes, "
            f"stream {segment.stream}"
        )
        start += block.size_bytes


def _segment_label(segment: Segment) -> str:
    kind = "large" if segment.is_large else "small"
    return f"{kind}{' expandable' if segment.is_expandable else ''}"
