"""The speed of `hipmem explain` on a 1M-event snapshot, on a machine with no GPU (figures in
docs/explain.md). Target: under 30 s.

A committed snapshot (train-default, recorded on the H200 with stacks) is tiled into a
snapshot of a million alloc and free events (`--events`; as benchmarks/bench_virtual_replay.py
tiles it), then `hipmem explain TILED --device H200 --cap 570000000 --json` runs end to end in
fresh processes: under that cap PyTorch's defaults refuse a request in the first copy, so the
whole of explain runs (the state at the refusal, the live allocations by frame, the grid of
settings replayed over the million events, the capacity search of the current settings).

    python benchmarks/bench_explain.py [--processes 3] [--events 1000000]

Needs a fetched allocator (`hipmem torch fetch`) or an installed CUDA PyTorch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_virtual_replay import SOURCE, _cpu, spread, tile_snapshot
from hipmem.replay.pytorch.allocator import locate

REPO = Path(__file__).resolve().parents[1]
CAP_BYTES = 570_000_000  # train-default's defaults need 585,105,408 under a cap; expandable less
TARGET_S = 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per figure")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--torch", default=None, help="PyTorch version (default: search order)")
    args = parser.parse_args()
    allocator = locate(args.torch)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {_cpu()}; {allocator.describe()}")
    with tempfile.TemporaryDirectory(prefix="hipmem-bench-") as folder:
        tiled = Path(folder) / "tiled.pickle.gz"
        entries = tile_snapshot(SOURCE, args.events, tiled)
        print(f"snapshot: {entries:,} trace entries ({args.events:,}+ alloc/free events)")
        command = [sys.executable, "-m", "hipmem.cli.main", "explain", str(tiled),
                   "--device", "H200", "--cap", str(CAP_BYTES), "--json"]  # fmt: skip
        if args.torch:
            command += ["--torch", args.torch]
        walls, cpus = [], []
        for _ in range(args.processes):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            # CPU seconds of explain and every driver process it waited for: what the machine's
            # other tenants cannot inflate (the wall time is at most this on one core)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if done.returncode != 0:
                sys.exit(f"explain failed: {done.stderr.strip()[:400]}")
            found = json.loads(done.stdout)
            if found["refused"] is None or not found["avoided_by"]:
                sys.exit("the tiled snapshot was not refused, or nothing avoided it")
        settings = len(found["avoided_by"]) + len(found["not_avoided_by"])
        print(
            f"hipmem explain (1M events, {settings} settings replayed): {spread(walls)} s "
            f"over {args.processes} fresh processes "
            f"(target < {TARGET_S:.0f} s); refused at line {found['refused']['line']}, "
            f"recommended {found['recommended']!r}"
        )
        print(
            f"CPU time (explain and its driver processes): {spread(cpus)} s; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )


if __name__ == "__main__":
    main()
