"""Speed of RMM's resources on the virtual GPU: events/s, and a --find-capacity of 1 M events.

A synthetic RMM log of 1,000,000 events (500,000 allocations of 256 B to 64 MiB, log-uniform,
about 1,000 live at a time, on 4 streams; fixed seed) is written once; then, each in a fresh
process (`hipmem replay ... --backend virtual`), `RUNS` times:

- a replay of pool, arena and binning (events/s of each, from `--json`);
- `--find-capacity` over pool, arena and binning (wall time, and the process's peak RSS).

Medians are printed with the machine's name. The issue's targets: the search under 30 s,
RSS under 300 MB. Needs a fetched RMM (`hipmem rmm fetch`).

    .venv/bin/python benchmarks/bench_rmm_virtual.py [--runs 3] [--events 1000000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESOURCES = ("pool", "arena", "binning")


def write_log(path: Path, events: int, seed: int = 35) -> None:
    rng = np.random.default_rng(seed)
    allocations = events // 2
    sizes = np.exp(rng.uniform(np.log(256), np.log(64 << 20), allocations)).astype(np.int64)
    live: list[int] = []
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    next_alloc, pointer_of = 0, {}
    streams = rng.integers(0, 4, allocations)
    for step in range(allocations * 2):
        allocate = next_alloc < allocations and (len(live) < 1000 or rng.random() < 0.5)
        if allocate or not live:
            i = next_alloc
            next_alloc += 1
            pointer_of[i] = 0x10000000 + i * 0x1000
            live.append(i)
            action, size = "allocate", int(sizes[i])
        else:
            i = live.pop(int(rng.integers(len(live))))
            action, size = "free", int(sizes[i])
        seconds = step / 1e6
        stream = f"{0x1000 * int(streams[i]):#x}" if streams[i] else "0"  # RMM logs hex
        rows.append(f"1,08:{int(seconds // 60):02d}:{seconds % 60:09.6f},{action},"
                    f"{pointer_of[i]:#x},{size},{stream}")  # fmt: skip
    with gzip.open(path, "wt") as out:
        out.write("\n".join(rows) + "\n")


def hipmem(*args: str) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (bytes) of the child, stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hipmem.cli.main", *args, "--strict"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1) or "Warning" in done.stderr:
        raise SystemExit(done.stderr)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(rss, before) * 1024, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        log = Path(temp) / "synthetic.csv.gz"
        write_log(log, args.events)
        rates: dict[str, list[float]] = {name: [] for name in RESOURCES}
        searches, peaks = [], []
        for _ in range(args.runs):
            specs = [a for name in RESOURCES for a in ("-r", name)]
            _, _, out = hipmem("replay", str(log), *specs, "--backend", "virtual", "--json")
            for report in json.loads(out)["resources"]:
                rates[report["resource"]].append(report["events_per_s"])
            wall, rss, _ = hipmem("replay", str(log), *specs, "--backend", "virtual",
                                  "--find-capacity", "--json")  # fmt: skip
            searches.append(wall)
            peaks.append(rss)
    print(f"machine: {platform.node()} ({platform.processor() or platform.machine()}), "
          f"{args.events:,} events, medians of {args.runs} fresh processes")  # fmt: skip
    for name, values in rates.items():
        print(f"  {name:<8} {statistics.median(values) / 1e6:6.2f} M events/s")
    print(
        f"  --find-capacity of pool, arena, binning: {statistics.median(searches):.1f} s, "
        f"peak RSS {max(peaks) / 2**20:.0f} MiB (the largest of the runs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
