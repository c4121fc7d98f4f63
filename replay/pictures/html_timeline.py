"""The timelines of `--html` pages (replay/pictures/html_page.py): plotly figures, zoomable,
peaks exact.

Each series is thinned by hipmem/_core/decimate.py to the lowest and highest op of each of
`COLUMNS` runs, so the drawn peak is the reported one and a million-event page stays a few
MB; every point kept is a real op, so hovering it names that op: what it did, its size, its
stream, the log row and, when the snapshot recorded them, the frames of its stack. The y axis
is in the unit the peak reads best in (as the PNG plots); hover texts give exact bytes.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hipmem._core.byte_sizes import format_bytes
from hipmem._core.decimate import peak_rows
from hipmem._core.plot_files import byte_unit

from ..engine.program import ReplayProgram
from ..engine.report import ReplayReport
from ..logs.analysis import LiveTrace, LogSummary
from ..logs.events import ACTION_NAMES, AllocationLog
from ..snapshots.reader import entries_frames
from .html_page import PageTable

COLUMNS = 5000  # runs per series: two points each, enough to zoom in tenfold
FRAMES_SHOWN = 8  # innermost frames in a hover; the count of the others is said
# Frames are not kept with the log (they would double its memory): the page reads the
# snapshot again for them, which for a million events takes longer than the page's target
# (benchmarks/bench_html_page.py). Above this many events the hovers go without frames.
FRAMES_MAX_EVENTS = 250_000
_BLACK = "#111"


def bytes_text(n_bytes: int) -> str:
    """`9.7 GiB (10,438,138,024 bytes)`: readable, and exact to copy."""
    return f"{format_bytes(n_bytes)} ({n_bytes:,} bytes)"


def replay_headline(
    log: AllocationLog, program: ReplayProgram, reports: Sequence[tuple[str, ReplayReport]]
) -> list[str]:
    """The peaks, above a replay's timeline: the requested one with its op and log row, then
    each (label, report)'s reserved one."""
    lines = []
    if program.op_count:
        where = log.line_ref(int(program.event_index[program.peak_op]))
        lines.append(
            f"peak requested: {bytes_text(program.peak_requested_bytes)} at op "
            f"{program.peak_op:,} ({where})"
        )
    lines += [
        f"peak reserved, {label}: {bytes_text(r.peak_reserved_bytes)}"
        for label, r in reports
        if r.peak_reserved_bytes is not None
    ]
    return lines


def replay_figure(
    log: AllocationLog,
    program: ReplayProgram,
    reports: Sequence[tuple[str, ReplayReport]],
    limits: Mapping[str, int | None] | None = None,
    title: str = "",
) -> Any:
    """Requested bytes (the log) and each report's reserved bytes over the ops, with the
    refused allocations marked and each resource's limit dashed; `reports` are (label, report)."""
    import plotly.graph_objects as go

    limits = limits or {}
    tallest = max(
        [program.peak_requested_bytes]
        + [r.peak_reserved_bytes or 0 for _, r in reports]
        + [limit for limit in limits.values() if limit]
    )
    scale, unit = byte_unit(tallest)
    figure = go.Figure()
    for label, report in reports:
        samples = report.samples
        if samples is not None and len(samples.op_index):
            rows = peak_rows(samples.reserved_bytes, COLUMNS)
            ops, reserved = samples.op_index[rows], samples.reserved_bytes[rows]
            peak = report.peak_reserved_bytes or 0
            figure.add_trace(
                go.Scatter(
                    x=ops,
                    y=reserved / scale,
                    mode="lines",
                    line={"width": 4},
                    opacity=0.6,
                    name=f"reserved: {label} (peak {format_bytes(peak)})",
                    hovertext=[
                        f"{html.escape(label)}<br>op {op:,}: reserved {bytes_text(b)}"
                        for op, b in zip(ops.tolist(), reserved.tolist(), strict=True)
                    ],
                    hoverinfo="text",
                )
            )
        limit = limits.get(report.resource)
        if limit:
            figure.add_trace(
                go.Scatter(
                    x=[0, max(program.op_count - 1, 0)],
                    y=[limit / scale] * 2,
                    mode="lines",
                    line={"dash": "dash", "width": 1},
                    name=f"limit: {label} ({format_bytes(limit)})",
                    hovertext=[f"limit of {html.escape(label)}: {bytes_text(limit)}"] * 2,
                    hoverinfo="text",
                )
            )
        if report.failures:
            refused = report.failures
            ops_refused = np.searchsorted(program.event_index, [f.event_index for f in refused])
            more = (
                f", the first {len(refused):,} marked"
                if report.failure_count > len(refused)
                else ""
            )
            figure.add_trace(
                go.Scatter(
                    x=ops_refused,
                    y=[(f.live_bytes + f.size_bytes) / scale for f in refused],
                    mode="markers",
                    marker={"symbol": "x", "size": 9},
                    name=f"refused: {label} ({report.failure_count:,}{more})",
                    hovertext=[
                        f"{html.escape(label)} refused {bytes_text(f.size_bytes)}<br>"
                        f"with {bytes_text(f.live_bytes)} live<br>{html.escape(str(f.where))}"
                        for f in refused
                    ],
                    hoverinfo="text",
                )
            )
    ops = peak_rows(program.live_bytes, COLUMNS)
    rows = program.event_index[ops]
    hover = _event_hover(log, rows, program.live_bytes[ops], ops)
    figure.add_trace(
        go.Scatter(
            x=ops,
            y=program.live_bytes[ops] / scale,
            mode="lines",
            line={"color": _BLACK, "width": 1.2},
            name="requested (the log)",
            hovertext=hover,
            hoverinfo="text",
        )
    )
    if program.op_count:
        _mark_peak(figure, program.peak_op, program.peak_requested_bytes, scale, "requested")
    _layout(figure, title, "allocator call (op)", unit)
    return figure


def log_figure(log: AllocationLog, trace: LiveTrace, summary: LogSummary, title: str = "") -> Any:
    """A log's live bytes over its rows, with a snapshot's own reserved bytes under them."""
    import plotly.graph_objects as go

    live = trace.live_bytes
    recorded_peak = max((r.peak_reserved_bytes for r in log.recordings), default=0)
    scale, unit = byte_unit(max(summary.peak_live_bytes, recorded_peak))
    figure = go.Figure()
    times = log.events["time_ns"].to_numpy()
    for recording in log.recordings:
        levels = np.concatenate(([recording.start_reserved_bytes], recording.reserved_bytes))
        at = np.concatenate(([0], np.searchsorted(times, recording.reserved_time_ns)))
        at, levels = np.append(at, max(len(live) - 1, 0)), np.append(levels, levels[-1])
        kept = peak_rows(levels, COLUMNS)
        figure.add_trace(
            go.Scatter(
                x=at[kept],
                y=levels[kept] / scale,
                mode="lines",
                line_shape="hv",
                line={"dash": "dash", "color": "purple", "width": 1.5},
                name=f"reserved by PyTorch (peak {format_bytes(recording.peak_reserved_bytes)})",
                hovertext=[
                    f"row {r:,}: reserved {bytes_text(b)}"
                    for r, b in zip(at[kept].tolist(), levels[kept].tolist(), strict=True)
                ],
                hoverinfo="text",
            )
        )
    rows = peak_rows(live, COLUMNS)
    figure.add_trace(
        go.Scatter(
            x=rows,
            y=live[rows] / scale,
            mode="lines",
            line={"color": _BLACK, "width": 1.2},
            name="live bytes",
            hovertext=_event_hover(log, rows, live[rows]),
            hoverinfo="text",
        )
    )
    if summary.peak is not None:
        _mark_peak(figure, summary.peak.event_index, summary.peak.live_bytes, scale, "live")
    _layout(figure, title, "event (row of the log)", unit)
    return figure


def _mark_peak(figure: Any, x: int, peak_bytes: int, scale: int, what: str) -> None:
    import plotly.graph_objects as go

    figure.add_trace(
        go.Scatter(
            x=[x],
            y=[peak_bytes / scale],
            mode="markers",
            marker={"color": "red", "size": 10},
            name=f"peak {what}: {format_bytes(peak_bytes)}",
            hovertext=[f"peak {what}: {bytes_text(peak_bytes)}"],
            hoverinfo="text",
        )
    )


def _layout(figure: Any, title: str, x_title: str, unit: str) -> None:
    figure.update_layout(
        title={"text": html.escape(title), "font": {"size": 14}},
        xaxis_title=x_title,
        yaxis_title=unit,
        yaxis={"rangemode": "tozero"},
        hovermode="closest",
        template="plotly_white",
        legend={"orientation": "h", "y": -0.18},
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
    )


def _event_hover(
    log: AllocationLog,
    rows: np.ndarray,
    live_bytes: np.ndarray,
    ops: np.ndarray | None = None,
) -> list[str]:
    """One hover text per log row: op or row, what it did and its size, the stream, the live
    bytes after it, where it is in its file, and the frames a snapshot recorded with it."""
    events = log.events
    file_index = events["file_index"].to_numpy()[rows]
    lines = events["line"].to_numpy()[rows]
    actions = events["action"].to_numpy()[rows]
    sizes = events["size_bytes"].to_numpy()[rows]
    streams = events["stream"].to_numpy()[rows]
    frames = _frames(log, file_index, lines)
    texts = []
    for k, row in enumerate(rows.tolist()):
        source = log.sources[int(file_index[k])]
        head = f"op {int(ops[k]):,} (row {row:,})" if ops is not None else f"row {row:,}"
        stream = int(streams[k])
        text = (
            f"{head}: {ACTION_NAMES.get(int(actions[k]), '?')} {bytes_text(int(sizes[k]))}"
            f"<br>stream {stream:#x}<br>live after: {bytes_text(int(live_bytes[k]))}"
            f"<br>{html.escape(source)}:{int(lines[k])}"
        )
        stack = frames.get((int(file_index[k]), int(lines[k])))
        if stack:
            text += "".join(f"<br>  {html.escape(str(f))}" for f in stack[:FRAMES_SHOWN])
            if len(stack) > FRAMES_SHOWN:
                text += f"<br>  ({len(stack) - FRAMES_SHOWN:,} more frames)"
        texts.append(text)
    return texts


def _frames(
    log: AllocationLog, file_index: np.ndarray, lines: np.ndarray
) -> dict[tuple[int, int], Any]:
    """Frames by (file index, entry), for the rows that come from a snapshot: each snapshot
    file read once more (the log keeps no frames: they would double its memory)."""
    found: dict[tuple[int, int], Any] = {}
    if len(log.events) > FRAMES_MAX_EVENTS:
        return found
    for index in np.unique(file_index).tolist():
        source = log.sources[index]
        if "#dev" not in source:
            continue
        wanted = lines[file_index == index].tolist()
        for line, stack in entries_frames(source, wanted).items():
            found[(index, line)] = stack
    return found


def frames_left_out(log: AllocationLog) -> str | None:
    """Why hovers show no frames although the snapshot may hold them (None: they show)."""
    if len(log.events) > FRAMES_MAX_EVENTS and any("#dev" in s for s in log.sources):
        return (
            f"Hover texts show no stack frames: the log has {len(log.events):,} events, over "
            f"{FRAMES_MAX_EVENTS:,}, and reading the snapshot again for them would take longer "
            "than the page."
        )
    return None


def refusals_table(reports: Sequence[ReplayReport]) -> PageTable | None:
    """The refused allocations each report kept in full, one row each (None: no refusal)."""
    rows = [
        [
            report.resource,
            str(f.where),
            bytes_text(f.size_bytes),
            bytes_text(f.live_bytes),
            "n/a"
            if f.reserved_bytes is None or f.reserved_bytes < 0
            else bytes_text(f.reserved_bytes),
        ]
        for report in reports
        for f in report.failures
    ]
    if not rows:
        return None
    counts = ", ".join(f"{r.resource} {r.failure_count:,}" for r in reports if r.failure_count)
    return PageTable(
        f"Refused allocations ({counts}; the first of each listed)",
        ["resource", "where", "size", "live then", "reserved then"],
        rows,
        frozenset({2, 3, 4}),
    )
