"""Speed of RMM's resources on the virtual GPU: events/s, and a --find-capacity of 1 M events.

Two logs of about 1,000,000 events are written once:

- `tiled`: the committed tests/data/real/cnn.csv.gz (5,000 events of a CNN's training)
  repeated, each copy's pointers apart and what it left live freed at its end: a training
  loop's steady state;
- `random`: 500,000 allocations of 256 B to 64 MiB, log-uniform, about 1,000 live at a time,
  on 4 streams (fixed seed): hard on a pool, whose free list is a best-fit scan.

Then, for each, each in a fresh process (`hipmem replay ... --backend virtual`), `RUNS` times:

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


def write_tiled(path: Path, events: int) -> None:
    source = Path(__file__).resolve().parents[1] / "tests" / "data" / "real" / "cnn.csv.gz"
    with gzip.open(source, "rt") as text:
        header, *rows = [line.rstrip("\n").split(",") for line in text]
    out = [",".join(header)]
    step = 0
    for copy in range(max(1, events // (len(rows) + 1))):
        offset = copy << 40  # each copy's pointers apart from the others'
        live: dict[int, list[str]] = {}
        for thread, _, action, pointer, size, stream in rows:
            if not pointer.startswith("0x"):  # (nil): a zero-byte request, kept as it is
                out.append(f"{thread},{_time(step)},{action},{pointer},{size},{stream}")
                step += 1
                continue
            address = int(pointer, 16) + offset
            if action == "allocate":
                live[address] = [thread, size, stream]
            elif action == "free":
                live.pop(address, None)
            out.append(f"{thread},{_time(step)},{action},{address:#x},{size},{stream}")
            step += 1
        for address, (thread, size, stream) in live.items():  # the copy's leftovers
            out.append(f"{thread},{_time(step)},free,{address:#x},{size},{stream}")
            step += 1
    with gzip.open(path, "wt") as target:
        target.write("\n".join(out) + "\n")


def _time(step: int) -> str:
    seconds = step / 1e6
    return f"{int(seconds // 3600):02d}:{int(seconds // 60) % 60:02d}:{seconds % 60:09.6f}"


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


def measure(name: str, log: Path, runs: int) -> None:
    rates: dict[str, list[float]] = {spec: [] for spec in RESOURCES}
    searches, peaks, events = [], [], 0
    specs = [a for spec in RESOURCES for a in ("-r", spec)]
    for _ in range(runs):
        _, _, out = hipmem("replay", str(log), *specs, "--backend", "virtual", "--json")
        for report in json.loads(out)["resources"]:
            rates[report["resource"]].append(report["events_per_s"])
            events = report["log_events"]
        wall, rss, _ = hipmem("replay", str(log), *specs, "--backend", "virtual",
                              "--find-capacity", "--json")  # fmt: skip
        searches.append(wall)
        peaks.append(rss)
    print(f"{name}: {events:,} events")
    for spec, values in rates.items():
        print(f"  {spec:<8} {statistics.median(values) / 1e6:6.2f} M events/s")
    print(
        f"  --find-capacity of pool, arena, binning (and the fits on every preset): "
        f"{statistics.median(searches):.1f} s, peak RSS {max(peaks) / 2**20:.0f} MiB"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument(
        "--write", nargs=3, metavar=("KIND", "PATH", "EVENTS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.write:
        kind, path, events = args.write
        (write_tiled if kind == "tiled" else write_log)(Path(path), int(events))
        return 0
    print(f"machine: {platform.node()} ({platform.processor() or platform.machine()}), "
          f"medians of {args.runs} fresh processes")  # fmt: skip
    with tempfile.TemporaryDirectory() as temp:
        for name in ("tiled", "random"):
            log = Path(temp) / f"{name}.csv.gz"
            # Written by a process of its own: a child forked from this one would count this
            # one's memory (the million rows) in its peak RSS until it execs.
            subprocess.run([sys.executable, __file__, "--write", name, str(log),
                            str(args.events)], check=True)  # fmt: skip
            measure(name, log, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
