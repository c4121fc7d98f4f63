"""Every picture hipmem draws keeps every peak (issue 38): each plot kind is drawn on data with
a one-op spike, and the highest point of each series it drew, read back from the figure,
is the peak the report gives. The data is checked to be a case a stride would miss."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hipmem._core.decimate import MAX_COLUMNS, envelope, peak_rows
from hipmem._core.plot_files import byte_unit
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.fleet import plot as fleet_plot
from hipmem.replay.logs import plot as log_plot
from hipmem.replay.logs.analysis import analyze, live_trace
from hipmem.replay.logs.loader import load_log
from hipmem.replay.pictures import plot
from hipmem.replay.settings import plot as allocator_plot
from tests.spike_data import SPIKE_BYTES, spike_csv, spike_snapshot


def _capture(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Any]:
    figures: list[Any] = []

    def keep(figure: Any, path: Path) -> None:
        figure.canvas.draw()
        figures.append(figure)

    monkeypatch.setattr(module, "save_atomically", keep)
    return figures


def _line(axes: Any, prefix: str) -> Any:
    return next(line for line in axes.get_lines() if str(line.get_label()).startswith(prefix))


def _strided_max(values: np.ndarray) -> int:
    """What the plots drew before issue 38: every Nth point of about 4,000."""
    return int(values[:: max(1, len(values) // 4000)].max())


# -- the one helper ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_peak_rows_keep_every_run_s_extremes_in_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << 40, size=50_000 + seed * 7919)
    values[rng.integers(len(values))] = 1 << 45  # one spike
    rows = peak_rows(values, columns=1000)
    assert len(rows) <= 2000 and np.all(np.diff(rows) > 0)
    assert values[rows].max() == values.max() and values[rows].min() == values.min()
    starts = np.linspace(0, len(values), 1001).astype(np.int64)
    kept = set(values[rows].tolist())
    for start, end in itertools.pairwise(starts):
        run = values[start:end]
        assert int(run.max()) in kept and int(run.min()) in kept


def test_few_points_are_kept_exactly_and_gaps_stay_gaps() -> None:
    xs, ys = envelope(np.arange(10), np.arange(10) * 2)
    assert xs.tolist() == list(range(10)) and ys.tolist() == [2 * i for i in range(10)]
    floats = np.full(3 * MAX_COLUMNS, np.nan)
    floats[:MAX_COLUMNS] = np.linspace(0, 1, MAX_COLUMNS)
    floats[-1] = 7.0
    rows = peak_rows(floats)
    assert np.nanmax(floats[rows]) == 7.0 and np.isnan(floats[rows]).any()


# -- every plot kind ---------------------------------------------------------------------------
def test_replay_plot_draws_the_requested_and_reserved_peaks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    figures = _capture(monkeypatch, plot)
    log = load_log([spike_csv(tmp_path / "spike.csv")])
    program = build_program(log)
    assert program.peak_requested_bytes >= SPIKE_BYTES
    assert _strided_max(program.live_bytes) < program.peak_requested_bytes  # a stride misses it
    options = ReplayOptions(backend="host", plot_samples=2000)
    reports = [replay_log(log, parse_spec(spec), options, program=program)
               for spec in ("host", "host:limit=2GiB")]  # fmt: skip
    plot.write_plot(tmp_path / "r.png", program, reports, log.sources)
    (axes,) = figures[0].axes
    scale = byte_unit(max(r.peak_reserved_bytes or 0 for r in reports))[0]
    assert max(_line(axes, "requested").get_ydata()) == program.peak_requested_bytes / scale
    for report in reports:
        drawn = max(_line(axes, f"reserved: {report.resource}").get_ydata())
        assert drawn == (report.peak_reserved_bytes or 0) / scale, report.resource


def test_log_plot_draws_the_peak_of_the_total_and_of_each_stream(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    figures = _capture(monkeypatch, log_plot)
    log = load_log([spike_csv(tmp_path / "spike.csv")])
    summary, trace = analyze(log), live_trace(log.events)
    log_plot.plot_timeline(log, trace, summary, tmp_path / "t.png", per_stream=True)
    top, by_time = figures[0].axes
    scale = byte_unit(summary.peak_live_bytes)[0]
    assert max(_line(top, "all streams").get_ydata()) == summary.peak_live_bytes / scale
    assert max(_line(by_time, "all streams").get_ydata()) == summary.peak_live_bytes / scale
    # Stacked: the top layer reaches the total's peak, and each layer is as tall as its
    # stream at that stream's peak (a fill_between polygon: start, one edge, end, the other
    # edge backwards, closing point).
    top_edge = np.max(top.collections[-1].get_paths()[0].vertices[:, 1])
    assert top_edge == pytest.approx(summary.peak_live_bytes / scale, rel=1e-12)
    assert len(top.collections) == len(summary.per_stream) == 2
    stream_peaks = sorted(stream.peak_live_bytes / scale for stream in summary.per_stream)
    heights = []
    for layer in top.collections:
        vertices = layer.get_paths()[0].vertices
        n = (len(vertices) - 3) // 2
        edge, other = vertices[1 : 1 + n, 1], vertices[2 + n : 2 + 2 * n, 1][::-1]
        heights.append(np.max(np.abs(edge - other)))
    assert sorted(heights) == pytest.approx(stream_peaks, rel=1e-12)


def test_log_plot_draws_a_snapshot_s_recorded_reserved_peak(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    figures = _capture(monkeypatch, log_plot)
    log = load_log([spike_snapshot(tmp_path / "spike.pickle.gz")])
    summary = analyze(log)
    log_plot.plot_timeline(log, live_trace(log.events), summary, tmp_path / "t.png")
    top = figures[0].axes[0]
    (recording,) = log.recordings
    scale = byte_unit(max(summary.peak_live_bytes, recording.peak_reserved_bytes))[0]
    assert max(_line(top, "live bytes").get_ydata()) == summary.peak_live_bytes / scale
    reserved = max(_line(top, "reserved by PyTorch").get_ydata())
    assert reserved == recording.peak_reserved_bytes / scale


def test_recommend_plot_draws_the_snapshot_s_spike(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, torch211: object
) -> None:
    from hipmem.replay.settings.recommend import recommend_allocator_settings

    figures = _capture(monkeypatch, allocator_plot)
    path = spike_snapshot(tmp_path / "spike.pickle.gz")
    advice = recommend_allocator_settings([path], device="MI300X", capacity="recommended")
    allocator_plot.write_allocator_plot(tmp_path / "a.png", advice)
    (axes,) = figures[0].axes
    workload = advice.workloads[0]
    program = workload.program
    assert _strided_max(program.live_bytes) < program.peak_requested_bytes  # a stride misses it
    lines = {str(line.get_label()).split(" (")[0]: line for line in axes.get_lines()}
    peaks = {
        label: report.peak_reserved_bytes or 0
        for label, report in allocator_plot.sampled_replays(advice)[1]
    }
    scale = byte_unit(max([program.peak_requested_bytes, *peaks.values()]))[0]
    assert max(lines["requested"].get_ydata()) == program.peak_requested_bytes / scale
    for label, peak in peaks.items():
        assert max(lines[f"reserved, {label}"].get_ydata()) == peak / scale, label


def test_fleet_plot_draws_the_largest_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    figures: list[Any] = []
    real_subplots = fleet_plot.pyplot().subplots

    def subplots(*args: Any, **kwargs: Any) -> Any:
        made = real_subplots(*args, **kwargs)
        figures.append(made[0])
        return made

    monkeypatch.setattr(fleet_plot.pyplot(), "subplots", subplots)
    rng = np.random.default_rng(1)
    sizes = rng.integers(1 << 30, 2 << 30, size=20_000).tolist()
    sizes[12_345] = 9 << 30  # one log needs far more
    records = [{"spec": "host", "status": "ok", "peak_reserved_bytes": s, "log": str(i)}
               for i, s in enumerate(sizes)]  # fmt: skip
    fleet_plot.write_fleet_plot(tmp_path / "f.png", records, ["host"])
    (line,) = [ln for ln in figures[0].axes[0].get_lines() if ln.get_label().startswith("host")]
    assert max(line.get_xdata()) == (9 << 30) / float(1 << 30)
    assert len(line.get_xdata()) <= 2 * MAX_COLUMNS  # thinned, yet the largest is drawn


def test_sweep_plot_draws_the_largest_need(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rocm72: Path
) -> None:
    from hipmem.sizing.session import SizingSession
    from hipmem.sizing.sweeps import plot as sweep_plot
    from tests.sizing.sweeps.test_sweeps import GEMM, PEAK_BYTES

    figures = _capture(monkeypatch, sweep_plot)
    with SizingSession("MI210", rocm="7.2") as session:
        swept = session.sweep(GEMM, "k=10000..14000")
    sweep_plot.write_sweep_plot(tmp_path / "s.png", [swept], "sweep")
    (axes,) = figures[0].axes
    (need,) = [line for line in axes.get_lines() if line.get_drawstyle() == "steps-post"]
    scale = byte_unit(PEAK_BYTES)[0]
    assert swept.max_bytes == PEAK_BYTES
    assert np.nanmax(need.get_ydata()) == PEAK_BYTES / scale
