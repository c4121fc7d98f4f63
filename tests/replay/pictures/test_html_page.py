"""`--html FILE` pages (issue 38): the figure they hold draws the exact peaks and names the
op under the cursor; the commands write one self-contained page, atomically, after checking
the path before any work; and a real browser (headless Chromium) renders it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hipmem._core.plot_files import byte_unit
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs.analysis import analyze, live_trace
from hipmem.replay.logs.loader import load_log
from hipmem.replay.pictures.html_timeline import bytes_text, log_figure, replay_figure
from tests.cli_run import hipmem as run_hipmem
from tests.spike_data import SPIKE_BYTES, spike_csv, spike_snapshot
from tests.terminal import unwrapped

SNAPSHOTS = Path(__file__).resolve().parents[2] / "data" / "snapshots"


def hipmem(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=cwd, COLUMNS="200")


def _trace(figure: Any, prefix: str) -> Any:
    return next(t for t in figure.data if t.name.startswith(prefix))


def test_replay_figure_draws_exact_peaks_and_names_the_spike_op(tmp_path: Path) -> None:
    log = load_log([spike_csv(tmp_path / "spike.csv")])
    program = build_program(log)
    options = ReplayOptions(backend="host", plot_samples=10_000)
    reports = [replay_log(log, parse_spec(s), options, program=program)
               for s in ("host", "host:limit=2GiB")]  # fmt: skip
    figure = replay_figure(
        log, program, [(r.resource, r) for r in reports], {"host:limit=2GiB": 2 << 30}
    )
    scale = byte_unit(max(r.peak_reserved_bytes or 0 for r in reports))[0]
    requested = _trace(figure, "requested")
    assert max(requested.y) == program.peak_requested_bytes / scale
    assert len(requested.x) <= 2 * 5000 < program.op_count  # thinned, the spike kept
    top = int(np.argmax(requested.y))
    assert requested.x[top] == program.peak_op
    assert f"op {program.peak_op:,}" in requested.hovertext[top]
    assert f"allocate 3.0 GiB ({SPIKE_BYTES:,} bytes)" in requested.hovertext[top]
    assert "spike.csv:" in requested.hovertext[top] and "stream 0x0" in requested.hovertext[top]
    for report in reports:
        drawn = max(_trace(figure, f"reserved: {report.resource}").y)
        assert drawn == (report.peak_reserved_bytes or 0) / scale
    refused = _trace(figure, "refused: host:limit=2GiB")
    assert len(refused.x) == len(reports[1].failures) > 0
    assert _trace(figure, "limit: host:limit=2GiB").y[0] == 2


def test_log_figure_hovers_name_the_frames_of_a_snapshot(tmp_path: Path) -> None:
    log = load_log([spike_snapshot(tmp_path / "spike.pickle.gz")])
    summary = analyze(log)
    figure = log_figure(log, live_trace(log.events), summary)
    (recording,) = log.recordings
    scale = byte_unit(max(summary.peak_live_bytes, recording.peak_reserved_bytes))[0]
    live = _trace(figure, "live bytes")
    assert max(live.y) == summary.peak_live_bytes / scale
    assert max(_trace(figure, "reserved by PyTorch").y) == recording.peak_reserved_bytes / scale
    top = int(np.argmax(live.y))
    assert "/work/spike.py:38 in spike" in live.hovertext[top]


def test_replay_html_writes_one_self_contained_page(tmp_path: Path) -> None:
    log = spike_csv(tmp_path / "spike.csv")
    page = tmp_path / "replay.html"
    done = hipmem("replay", str(log), "-r", "host", "-r", "host:limit=2GiB", "--html", str(page))
    assert done.returncode == 1, done.stderr  # the limited resource refused the spike
    assert f"page written to {page}" in unwrapped(done.stderr)
    text = page.read_text()
    peak = build_program(load_log([log])).peak_requested_bytes
    assert f"peak requested: 3.0 GiB ({peak:,} bytes)" in text
    assert "Replay, side by side" in text and "Refused allocations" in text
    assert re.search(r"<(script|link)[^>]+(src|href)=", text) is None  # plotly is inline
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay.html", "spike.csv"]  # no temp
    assert len(text) < 20_000_000


def test_find_capacity_page_holds_the_capacity_table(tmp_path: Path) -> None:
    log = spike_csv(tmp_path / "spike.csv", rows=3_000, spike_row=1_500)
    page = tmp_path / "cap.html"
    done = hipmem("replay", str(log), "-r", "host", "--find-capacity", "--html", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "Smallest size that replays the log with no failure" in text
    peak = build_program(load_log([log])).peak_requested_bytes
    assert f"peak requested: {bytes_text(peak)}" in text


def test_virtual_find_capacity_page_holds_the_fits_table(tmp_path: Path, torch211: object) -> None:
    page = tmp_path / "fits.html"
    snapshot = str(SNAPSHOTS / "train-default.pickle.gz")
    done = hipmem("replay", snapshot, "-r", "torch:settings=recorded", "--find-capacity",
                  "--html", str(page))  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "<h2>Smallest capacity that replays the log with no refused allocation</h2>" in text
    assert "<h2>Fits: the log on each device, headroom at the reserved peak</h2>" in text
    assert "peak requested: 464.8 MiB (487,395,016 bytes) at op 1,329" in text


@pytest.mark.parametrize(
    ("name", "why"),
    [("page.txt", "must end in .html or .htm"), ("no/such/page.html", "does not exist")],
)
def test_a_bad_html_path_is_refused_before_any_work(tmp_path: Path, name: str, why: str) -> None:
    missing_log = tmp_path / "never-read.csv"  # never opened: the path is checked first
    done = hipmem("log", "inspect", str(missing_log), "--html", str(tmp_path / name))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: --html ") and why in line
    assert "Traceback" not in done.stderr


def test_log_inspect_html_and_json_together(tmp_path: Path) -> None:
    page = tmp_path / "log.html"
    log = spike_csv(tmp_path / "s.csv")
    done = hipmem("log", "inspect", str(log), "--json", "--html", str(page))
    assert done.returncode == 0, done.stderr
    peak = analyze(load_log([log])).peak_live_bytes
    assert json.loads(done.stdout)["peak"]["live_bytes"] == peak  # stdout stays JSON
    assert f"peak live: {bytes_text(peak)}" in page.read_text()


def test_recommend_html_shows_the_settings_table(tmp_path: Path, torch211: object) -> None:
    page = tmp_path / "rec.html"
    done = hipmem(
        "recommend", "--from-snapshot", str(SNAPSHOTS / "train-default.pickle.gz"),
        "--device", "MI300X", "--capacity", "recommended", "--html", str(page),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "export PYTORCH_HIP_ALLOC_CONF='expandable_segments:True'" in done.stdout
    text = page.read_text()
    assert "recommended: expandable_segments:True" in text
    assert "peak reserved, defaults: 900.0 MiB (943,718,400 bytes)" in text
    assert "peak reserved, recommended: 688.0 MiB (721,420,288 bytes)" in text
    assert "roundup_power2_divisions" in text  # the grid's table, though stdout is a pipe


def test_explain_html_draws_the_segments_at_the_refusal(tmp_path: Path, torch211: object) -> None:
    page = tmp_path / "why.html"
    snapshot = str(SNAPSHOTS / "multistream-oom.pickle.gz")
    done = hipmem("explain", snapshot, "--device", "H200", "--cap", "750549401",
                  "--torch", "2.11.0", "--html", str(page))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"page written to {page}" in unwrapped(done.stdout + done.stderr)
    text = page.read_text()
    assert "refused: 78,643,200 bytes at " in text  # the headline
    assert "largest free block, large pool" in text  # the allocator-state table
    assert "refused request: 78,643,200 bytes" in text  # the figure's hover
    # Every block of every segment drawn: the figure's bars add up to the reserved bytes.
    from hipmem.replay.explain.explanation import explain
    from hipmem.replay.explain.html import state_figure

    found = explain(snapshot, device="H200", cap_bytes=750_549_401, torch_version="2.11.0")
    figure = state_figure(found)
    assert figure is not None and found.state is not None
    blocks = [t for t in figure.data if not t.name.startswith("refused")]
    drawn = sum(sum(t.x) for t in blocks) * (1 << 20)  # MiB on the axis
    assert round(drawn) == found.state.reserved_bytes


# -- a real browser ----------------------------------------------------------------------------
def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium installed (apt-get install chromium)")


def _browse(browser: str, page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,900",
             "--virtual-time-budget=5000", *extra, page.as_uri()],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip


def test_the_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    log = spike_snapshot(tmp_path / "spike.pickle.gz")
    page = tmp_path / "spike.html"
    done = hipmem("log", "inspect", str(log), "--html", str(page))
    assert done.returncode == 0, done.stderr
    dom = _browse(browser, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    # After the scripts ran: plotly drew its SVG, and the peak figure is on the page.
    assert 'class="main-svg"' in dom.stdout
    peak = analyze(load_log([log])).peak_live_bytes
    assert f"peak live: 3.3 GiB ({peak:,} bytes)" in dom.stdout
    shot = tmp_path / "shot.png"
    taken = _browse(browser, page, f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (900, 1280)
    colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50, len(colours)  # a blank or unstyled page has a handful
    # the black requested line is drawn: dark pixels where the timeline is
    timeline = pixels[150:600, 60:1250, :3]
    assert (timeline.max(axis=2) < 0.2).sum() > 500
