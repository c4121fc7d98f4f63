"""How fast `--html` pages are written and opened for a million-event snapshot (figures in
docs/replay.md).

A committed snapshot (train-default, recorded on the H200) is tiled into a snapshot of a
million `alloc`/`free_completed` events (as benchmarks/bench_virtual_replay.py does). Then,
each in a fresh process, alternated:

1. the page of `log inspect`: the figure (the thinned timeline and its hover texts) and the
   page written, the log already loaded (what `--html` adds to the command). Target: < 10 s.
2. the page of `replay -r host`: the same for a replay's figure, the replay already done.
3. the whole `hipmem log inspect TILED --html PAGE`, loading included.
4. with Chromium installed: headless Chromium opening the page until its scripts ran
   (`--dump-dom`). Target: a few seconds.

Wall time and CPU time (user + sys) are both given: on a shared machine the wall time of a
process waiting for a core says more about the neighbours than about the page.

    python benchmarks/bench_html_page.py [--processes 5] [--events 1000000]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_virtual_replay import SOURCE, tile_snapshot

_PAGE_STEP = """
import os, sys, time
from pathlib import Path
from hipmem.replay.logs.analysis import analyze, live_trace
from hipmem.replay.pictures.html_page import Page, write_page
from hipmem.replay.logs.loader import load_log
log = load_log([Path(sys.argv[1])])
kind, page = sys.argv[2], Path(sys.argv[3])
if kind == "replay":
    from hipmem.replay.engine.run import replay_log
    from hipmem.replay.engine.options import ReplayOptions
    from hipmem.replay.pictures.html_timeline import replay_figure
    from hipmem.replay.engine.program import build_program
    from hipmem.replay.engine.resources import parse_spec
    program = build_program(log)
    report = replay_log(log, parse_spec("host"), ReplayOptions(backend="host", plot_samples=10_000),
                    program=program)
else:
    from hipmem.replay.pictures.html_timeline import log_figure
    summary, trace = analyze(log), live_trace(log.events)
wall0, cpu0 = time.perf_counter(), os.times()
if kind == "replay":
    figure = replay_figure(log, program, [("host", report)])
else:
    figure = log_figure(log, trace, summary)
write_page(page, Page("bench", figure=figure))
cpu1 = os.times()
print(time.perf_counter() - wall0, cpu1.user - cpu0.user + cpu1.system - cpu0.system)
"""


def _page_step(snapshot: Path, kind: str, page: Path) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", _PAGE_STEP, str(snapshot), kind, str(page)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall, cpu = done.stdout.split()
    return float(wall), float(cpu)


def _timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + sys) of a child process."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True)
    wall = time.perf_counter() - t0
    after = os.times()
    cpu = (
        after.children_user - before.children_user + after.children_system - before.children_system
    )
    return wall, cpu


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh processes per figure")
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    hipmem = str(Path(sys.executable).with_name("hipmem"))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        snapshot = tmp / "tiled.pickle.gz"
        entries = tile_snapshot(SOURCE, args.events, snapshot)
        figures: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.processes):
            for kind in ("log", "replay"):
                page = tmp / f"{kind}.html"
                figures.setdefault(f"page of {kind}", []).append(_page_step(snapshot, kind, page))
            whole = [hipmem, "log", "inspect", str(snapshot), "--html", str(tmp / "whole.html")]
            figures.setdefault("hipmem log inspect --html", []).append(_timed(whole))
            if chromium:
                with tempfile.TemporaryDirectory() as profile:
                    opened = _timed([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                     "--disable-quic", "--no-first-run",
                                     "--disable-background-networking",
                                     "--disable-component-update", "--disable-sync",
                                     f"--user-data-dir={profile}", "--window-size=1280,900",
                                     "--dump-dom", (tmp / "log.html").as_uri()])  # fmt: skip
                figures.setdefault("Chromium opens the log page", []).append(opened)
        sizes = {kind: (tmp / f"{kind}.html").stat().st_size for kind in ("log", "replay")}
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}")  # fmt: skip
    print(f"snapshot: {args.events:,} events ({entries:,} trace entries), "
          f"{args.processes} fresh processes each")  # fmt: skip
    for name, pairs in figures.items():
        walls, cpus = [w for w, _ in pairs], [c for _, c in pairs]
        # Chromium's renderer is not our child: its CPU time would be left out, so none.
        cpu = "" if name.startswith("Chromium") else f"; CPU {_spread(cpus)}"
        print(f"{name}: wall {_spread(walls)}{cpu}")
    for kind, size in sizes.items():
        print(f"page of {kind}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
