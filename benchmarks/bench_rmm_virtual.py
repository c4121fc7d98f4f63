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
        [--against OTHER_CHECKOUT] [--device MI210] [--logs tiled,random] [--search-only]

`--against` runs another checkout's search (its own .venv) in the same rounds, alternating,
and says whether the two print the same JSON: a before/after on one machine at one load.
Peak RSS is the largest process of each command (`ru_maxrss` of its children, per run).
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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


# Runs one command and says what it and its children used: each run's own figures (this
# process's RUSAGE_CHILDREN only grows, so it cannot tell one run's peak from the last's).
_MEASURED = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.stderr.write("\\nMEASURED " + json.dumps({"rc": done.returncode, "rss": used.ru_maxrss * 1024,
                 "cpu": used.ru_utime + used.ru_stime}) + "\\n")
"""


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int  # the largest process of the command (hipmem's own, or a driver)
    stdout: str


def hipmem(*args: str, python: str = sys.executable) -> Run:
    """One fresh `hipmem` process (with `python`: another checkout's), measured."""
    start = time.perf_counter()
    command = [sys.executable, "-c", _MEASURED, python, "-m", "hipmem.cli.main", *args, "--strict"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    said, _, measured = done.stderr.rpartition("MEASURED ")
    figures = json.loads(measured)
    if figures["rc"] not in (0, 1) or "Warning" in said:
        raise SystemExit(said)
    return Run(wall, figures["cpu"], figures["rss"], done.stdout)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(name: str, log: Path, runs: int, pythons: dict[str, str], device: list[str],
            rates_too: bool) -> None:  # fmt: skip
    """`runs` rounds; in each, every checkout's search in turn (side by side, fresh
    processes), and this checkout's events/s if `rates_too`."""
    rates: dict[str, list[float]] = {spec: [] for spec in RESOURCES}
    searches: dict[str, list[Run]] = {who: [] for who in pythons}
    answers: dict[str, set[str]] = {who: set() for who in pythons}
    loads, events = [load_average()], 0
    specs = [a for spec in RESOURCES for a in ("-r", spec)]
    for _ in range(runs):
        if rates_too:
            out = hipmem("replay", str(log), *specs, "--backend", "virtual", *device, "--json")
            for report in json.loads(out.stdout)["resources"]:
                rates[report["resource"]].append(report["events_per_s"])
                events = report["log_events"]
        for who, python in pythons.items():
            run = hipmem("replay", str(log), *specs, "--backend", "virtual", *device,
                         "--find-capacity", "--json", python=python)  # fmt: skip
            searches[who].append(run)
            answers[who].add(run.stdout)
        loads.append(load_average())
    print(f"{name}{' ' + ' '.join(device) if device else ''}: load average {' -> '.join(loads)}")
    if rates_too:
        print(f"  {events:,} events")
        for spec, values in rates.items():
            print(f"  {spec:<8} {statistics.median(values) / 1e6:6.2f} M events/s")
    for who, done in searches.items():
        walls = ", ".join(f"{r.wall_s:.1f}" for r in done)
        print(
            f"  --find-capacity of pool, arena, binning (and the fits on every preset), {who}: "
            f"{statistics.median(r.wall_s for r in done):.1f} s ({walls}), CPU "
            f"{statistics.median(r.cpu_s for r in done):.1f} s, peak RSS "
            f"{max(r.peak_rss_bytes for r in done) / 2**20:.0f} MiB"
            + ("" if len(answers[who]) == 1 else " (ANSWERS DIFFER between runs)")
        )
    if len(pythons) > 1:
        same = len({a for found in answers.values() for a in found}) == 1
        print(f"  the checkouts' JSON answers are {'byte-identical' if same else 'DIFFERENT'}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument(
        "--write", nargs=3, metavar=("KIND", "PATH", "EVENTS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--against", type=Path, help="another checkout (with its .venv): its "
                        "search runs side by side with this one's")  # fmt: skip
    parser.add_argument("--device", help="the virtual GPU (default: the options' default)")
    parser.add_argument("--logs", default="tiled,random")
    parser.add_argument("--search-only", action="store_true", help="no events/s replays")
    args = parser.parse_args()
    if args.write:
        kind, path, events = args.write
        (write_tiled if kind == "tiled" else write_log)(Path(path), int(events))
        return 0
    print(f"machine: {platform.node()} ({platform.processor() or platform.machine()}), "
          f"medians of {args.runs} fresh processes")  # fmt: skip
    with tempfile.TemporaryDirectory() as temp:
        for name in args.logs.split(","):
            log = Path(temp) / f"{name}.csv.gz"
            # Written by a process of its own: a child forked from this one would count this
            # one's memory (the million rows) in its peak RSS until it execs.
            subprocess.run([sys.executable, __file__, "--write", name, str(log),
                            str(args.events)], check=True)  # fmt: skip
            pythons = {"this checkout": sys.executable}
            if args.against:
                pythons[str(args.against)] = str(args.against / ".venv" / "bin" / "python")
            device = ["--device", args.device] if args.device else []
            measure(name, log, args.runs, pythons, device, not args.search_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
