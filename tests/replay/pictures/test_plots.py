"""What the plots show: checked on the figure itself, from a real replay of a real log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hipmem._core.plot_files import byte_unit
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs import plot as log_plot
from hipmem.replay.logs.analysis import analyze, live_trace
from hipmem.replay.logs.loader import load_log
from hipmem.replay.pictures import plot

SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "serve-first-2000.csv.gz"


def _capture(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Any]:
    figures: list[Any] = []

    def keep(figure: Any, path: Path) -> None:
        figure.canvas.draw()  # a bad title (mathtext) fails here, as in a real save
        figures.append(figure)

    monkeypatch.setattr(module, "save_atomically", keep)
    return figures


def test_replay_plot_names_the_log_marks_limits_and_refusals(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    figures = _capture(monkeypatch, plot)
    log = load_log([SAMPLE])
    program = build_program(log)
    limited = parse_spec("host:limit=200MiB")
    options = ReplayOptions(plot_samples=500)
    reports = [replay_log(log, parse_spec("host"), options, program=program),
               replay_log(log, limited, options, program=program)]  # fmt: skip
    plot.write_plot(tmp_path / "r.png", program, reports, log.sources, {limited.label: 200 << 20})
    (figure,) = figures
    (axes,) = figure.axes
    assert "serve-first-2000.csv.gz" in axes.get_title()
    assert axes.get_ylabel() == byte_unit(program.peak_requested_bytes)[1] == "MiB"
    labels = [line.get_label() for line in axes.get_lines()]
    assert "limit: host:limit=200MiB" in labels
    refused = next(line for line in axes.get_lines() if line.get_label().startswith("refused"))
    assert len(refused.get_xdata()) == min(reports[1].failure_count, 100) > 0
    requested = next(line for line in axes.get_lines() if line.get_label().startswith("requested"))
    reserved = [line for line in axes.get_lines() if line.get_label().startswith("reserved")]
    assert all(requested.get_zorder() > line.get_zorder() for line in reserved)
    assert axes.get_legend().get_bbox_to_anchor().x0 > axes.get_window_extent().x1


def test_per_stream_plot_keeps_its_legend_off_the_data_and_a_dollar_in_the_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    figures = _capture(monkeypatch, log_plot)
    named = tmp_path / "m$\\frac{$x.csv.gz"
    named.write_bytes(SAMPLE.read_bytes())
    log = load_log([named])
    summary = analyze(log)
    log_plot.plot_timeline(log, live_trace(log.events), summary, tmp_path / "t.png",
                           per_stream=True)  # fmt: skip
    (figure,) = figures
    top = figure.axes[0]
    assert "m$\\frac{$x.csv.gz" in top.get_title().replace("\\$", "$")
    assert top.get_legend().get_bbox_to_anchor().x0 > top.get_window_extent().x1
    assert len(top.collections) == summary.streams  # one stacked layer per stream
