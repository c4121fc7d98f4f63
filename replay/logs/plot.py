"""Timeline of a log's live bytes: over events and over time, optionally one line per stream.

(`replay.plot` draws replay results; this draws the log alone, for `hipmem log inspect`.)
Ten million events are too many to draw one by one; each pixel column keeps the lowest and
highest live bytes of its events (an envelope, hipmem/_core/decimate.py), so the peak and the
sawtooth of training steps survive the reduction; the stacked streams are drawn at the rows
where any of them, or their total, is lowest or highest. The image format follows the file
suffix (.png or .svg), and the file is written atomically (a temporary file in the same
folder, then os.replace).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hipmem._core.decimate import envelope, peak_rows
from hipmem._core.plot_files import byte_unit, check_plot_path, plain_text, save_atomically
from hipmem._core.pyplot import pyplot

from .analysis import LiveTrace, LogSummary, owner_traces
from .events import AllocationLog, Recording

_READABLE = {"boxstyle": "round", "fc": "white", "ec": "none", "alpha": 0.85}  # text over data


def plot_timeline(
    log: AllocationLog,
    trace: LiveTrace,
    summary: LogSummary,
    path: Path,
    *,
    per_stream: bool = False,
) -> None:
    """Draw live bytes over events (top) and over seconds since the first event (bottom);
    with `per_stream`, the top panel stacks each stream's live bytes under the total."""
    check_plot_path(path)
    plt = pyplot()
    events = log.events
    live = trace.live_bytes
    seconds = (events["time_ns"].to_numpy() - (summary.first_time_ns or 0)) / 1e9
    recorded_peak = max((r.peak_reserved_bytes for r in log.recordings), default=0)
    scale, unit = byte_unit(max(summary.peak_live_bytes, recorded_peak))

    figure, (by_event, by_time) = plt.subplots(2, 1, figsize=(12, 7), constrained_layout=True)
    if per_stream:  # stacked, so that the streams add up to the total instead of tangling
        _stack_streams(by_event, events, trace, scale)
    xs, ys = envelope(np.arange(len(live)), live)
    label = "all streams" if per_stream else "live bytes"
    by_event.plot(xs, ys / scale, linewidth=0.8, label=label, color="black" if per_stream else None)
    by_time.plot(seconds[xs], ys / scale, linewidth=0.8, label=label)
    for recording in log.recordings:
        _draw_recorded(by_event, by_time, log, recording, summary.first_time_ns or 0, scale)

    if summary.peak:
        peak_y = summary.peak.live_bytes / scale
        text = f"peak {peak_y:,.2f} {unit}\n(line {summary.peak.line})"
        peak_xs = (summary.peak.event_index, seconds[summary.peak.event_index])
        for axes, peak_x in zip((by_event, by_time), peak_xs, strict=True):
            axes.plot([peak_x], [peak_y], "o", color="red", markersize=7, zorder=5, label="peak")
            axes.annotate(text, (peak_x, peak_y), textcoords="offset points", xytext=(10, -28),
                          color="red", fontsize=9, zorder=6, bbox=_READABLE)  # fmt: skip
    names = ", ".join(Path(s).name for s in log.sources[:3])
    names += " ..." if len(log.sources) > 3 else ""
    by_event.set_title(plain_text(f"Live bytes of {names} ({summary.events:,} events)"))
    _style(by_event, "event (row of the log)", unit)
    _style(by_time, "seconds since the first event", unit)
    if per_stream or log.recordings:  # beside the plot, never over the data
        by_event.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    try:
        save_atomically(figure, path)
    finally:
        plt.close(figure)


def _draw_recorded(
    by_event: Any, by_time: Any, log: AllocationLog, recording: Recording, t0_ns: int, scale: int
) -> None:
    """A PyTorch snapshot's own reserved memory, as a step line under the live bytes."""
    times = np.concatenate(([t0_ns], recording.reserved_time_ns))
    levels = np.concatenate(([recording.start_reserved_bytes], recording.reserved_bytes)) / scale
    end_ns = int(log.events["time_ns"].max()) if len(log.events) else t0_ns
    times, levels = np.append(times, max(end_ns, int(times[-1]))), np.append(levels, levels[-1])
    kept = peak_rows(levels)
    times, levels = times[kept], levels[kept]
    rows = np.searchsorted(log.events["time_ns"].to_numpy(), times)
    label = plain_text(f"reserved by PyTorch ({Path(recording.source).name})")
    # dashed purple: apart from the stream colours and the black total
    style = {"where": "post", "linewidth": 1.2, "color": "tab:purple", "ls": "--", "label": label}
    by_event.step(rows, levels, **style)
    by_time.step((times - t0_ns) / 1e9, levels, **style)


def _stack_streams(axes: Any, events: Any, trace: LiveTrace, scale: int) -> None:
    """Each stream's live bytes, stacked, at the rows that keep every stream's peaks and
    the total's (hipmem/_core/decimate.py): the top of the stack reaches the peak."""
    streams = owner_traces(events, trace, "stream")
    kept = [peak_rows(trace.live_bytes)]
    kept += [rows[peak_rows(stream_live)] for rows, stream_live in streams.values()]
    samples = np.unique(np.concatenate(kept))
    labels, layers = [], []
    for stream, (rows, stream_live) in streams.items():
        at = np.searchsorted(rows, samples, side="right") - 1
        layers.append(np.where(at >= 0, stream_live[np.maximum(at, 0)], 0) / scale)
        labels.append(f"stream {stream:#x}" if stream else "default stream")
    axes.stackplot(samples, *layers, labels=labels, alpha=0.8, linewidth=0)


def _style(axes: Any, xlabel: str, unit: str) -> None:
    axes.set_xlabel(xlabel)
    axes.set_ylabel(f"live {unit}")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.margins(x=0.01)
