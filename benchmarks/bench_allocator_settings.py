"""The speed of `hipmem recommend --from-snapshot` on a 1M-event snapshot, on a machine with no
GPU (figures in docs/benchmarks.md and docs/allocator-settings.md).

A committed snapshot (train-default, recorded on the H200) is tiled into a snapshot of a
million events (`--events`; benchmarks/bench_virtual_replay.py tiles it the same way), then,
in fresh processes, alternated so that drift on a shared machine hits every side alike:

1. `hipmem recommend --from-snapshot TILED --json` end to end, with the smallest device
   searched for every setting of the grid (`--capacity all`, the default) and for the
   recommended one and the defaults only (`--capacity recommended`). Target: < 60 s.
2. The grid alone (`recommend_allocator_settings(..., capacity="recommended")`, the snapshot
   loaded before the clock starts) with one driver process at a time (`jobs=1`) and with one
   per core (the default): what running candidates side by side buys on this machine.

    python benchmarks/bench_allocator_settings.py [--processes 3] [--events 1000000]

Needs a fetched allocator (`hipmem torch fetch`) or an installed CUDA PyTorch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_virtual_replay import SOURCE, _cpu, spread, tile_snapshot
from hipmem.replay.pytorch.allocator import locate

REPO = Path(__file__).resolve().parents[1]
# One fresh process: load the snapshot, then time the grid alone with `jobs` processes.
GRID_ONLY = """
import sys, time
from hipmem.replay.settings import recommend as allocator_settings
from hipmem.replay.settings.workloads import load_workloads
path, jobs, torch = sys.argv[1], sys.argv[2], sys.argv[3] or None
workloads = load_workloads([path])  # loaded: the clock times the grid
started = time.perf_counter()
advice = allocator_settings.recommend_allocator_settings(
    workloads, torch_version=torch, capacity="recommended", jobs=int(jobs) if jobs else None)
print(time.perf_counter() - started, len(advice.candidates))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per figure")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--torch", default=None, help="PyTorch version (default: search order)")
    args = parser.parse_args()
    allocator = locate(args.torch)
    print(f"machine: {os.cpu_count()} cores, {_cpu()}; {allocator.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hipmem-bench-") as folder:
        tiled = Path(folder) / "tiled.pickle.gz"
        entries = tile_snapshot(SOURCE, args.events, tiled)
        print(
            f"{tiled.name}: {entries:,} trace entries, {tiled.stat().st_size / 1e6:.1f} MB",
            flush=True,
        )
        walls: dict[str, list[float]] = {"all": [], "recommended": []}
        candidates = 0
        for _ in range(args.processes):
            for capacity in walls:
                seconds, payload = _recommend(tiled, capacity, args.torch)
                walls[capacity].append(seconds)
                candidates = len(payload["allocator_settings"]["candidates"])
        for capacity, values in walls.items():
            print(
                f"hipmem recommend --from-snapshot (1M events, {candidates} settings, "
                f"--capacity {capacity}), wall s over {args.processes} fresh processes: "
                f"{spread(values)} (target < 60)",
                flush=True,
            )
        grid: dict[str, list[float]] = {"1": [], "": []}
        for _ in range(args.processes):
            for jobs in grid:
                grid[jobs].append(_grid_only(tiled, jobs, args.torch))
        ratios = [one / many for one, many in zip(grid["1"], grid[""], strict=True)]
        print(
            f"the grid alone, wall s: one driver at a time {spread(grid['1'])}, one per core "
            f"({os.cpu_count()}) {spread(grid[''])}; speed-up {spread(ratios)}"
        )


def _recommend(tiled: Path, capacity: str, torch: str | None) -> tuple[float, dict[str, Any]]:
    command = [
        sys.executable,
        "-m",
        "hipmem.cli.main",
        "recommend",
        "--from-snapshot",
        str(tiled),
        "--capacity",
        capacity,
        "--json",
    ]
    command += ["--torch", torch] if torch else []
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"recommend failed: {done.stderr[-1000:]}")
    payload: dict[str, Any] = json.loads(done.stdout)
    return seconds, payload


def _grid_only(tiled: Path, jobs: str, torch: str | None) -> float:
    done = subprocess.run(
        [sys.executable, "-c", GRID_ONLY, str(tiled), jobs, torch or ""],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise SystemExit(f"the grid failed: {done.stderr[-1000:]}")
    return float(done.stdout.split()[0])


if __name__ == "__main__":
    main()
