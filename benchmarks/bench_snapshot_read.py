"""Reading a PyTorch memory snapshot: hipmem's streaming reader beside a plain `pickle.load`.

    python benchmarks/bench_snapshot_read.py [--runs 3] [--events 1000000 10000000]
                                             [--inspect] [--keep DIR] [--python-machine]
                                             [--split]

For each committed snapshot (tests/data/snapshots) and each generated one (the trace of
`train-default` repeated until it holds `--events` trace entries, its frames lists shared
the way PyTorch shares them; copies after the second repeat its bytes, times included),
fresh child processes time, side by side (taking turns):

- `pickle.load` of the decompressed stream (what the old reader did before walking the tree);
- `hipmem.replay.snapshots.reader.read_snapshot` (the numpy columns the replay needs), with the C
  machine (`replay/snapshots/csrc/`, an extension built when hipmem was
  installed and imported with its package, as `pickle` imports `_pickle`);
- with `--python-machine`, the same with the Python reference machine
  (`HIPMEM_SNAPSHOT_READER=python`), its time beside the C one's;
- with `--split`, the reading alone (`reader._load`: open, inflate and the C machine, which
  leaves the trace entries as column buffers), without making the result the replay needs
  (the segments walked, the settings, the nine numpy arrays, the `Recording`): what each
  half costs, where a small snapshot's time goes.

Each child imports the same modules first, then reads the file once; it reports the wall
time of the read alone and its peak resident memory (ru_maxrss) above what it held after the
imports (for files under 1 MB, which do not move it, the heap's peak as tracemalloc counts
it, in one more child each). tracemalloc counts what both sides allocate: Python objects,
numpy's arrays, bytearrays, and PyMem_RawMalloc, through which CPython's zlib allocates its
state and window (both sides inflate with it) and the C machine every buffer of its own
(stack, memo, read buffer, maps; it calls no plain `malloc`), so the comparison is like for
like. Before the read the child freezes what the imports left to the cycle collector
(`gc.freeze()`): otherwise whether a collection of those leftovers falls inside a read of a
few hundred entries depends on how many objects the imports happened to leave (five more
objects moved oom's read by 60 µs), not on the reader. A file under 1 MB is then read again
in the same child, without the one-time costs of a first read (first calls). Medians of
`--runs` children, with the fastest and slowest (pickle.load of a file over 1 MB once: a
10 M-entry snapshot needs about 5 GB).
`--inspect` also runs `hipmem log inspect` on the largest generated snapshot and reports the
child's peak memory. Targets (issue 33):
read time <= pickle.load's, read peak <= half of pickle.load's; `log inspect` of 10 M
entries < 1.5 GB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "tests" / "data" / "snapshots"
SOURCE = SNAPSHOTS / "train-default.pickle.gz"

_CHILD = """
import gc, gzip, json, pickle, resource, sys, time
from pathlib import Path
import numpy
from hipmem.replay.snapshots import reader as snapshot
path, how, traced = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "traced"
if traced:
    import tracemalloc
    tracemalloc.start()
def read():
    if how == "pickle":
        with (gzip.open(path) if path.name.endswith(".gz") else path.open("rb")) as file:
            return pickle.load(file)
    if how == "split":
        return snapshot._load(path, None)
    return snapshot.read_snapshot(path)
gc.freeze()  # both reads start from an empty young generation (the docstring says why)
base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
result = read()
wall_s = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
grown_kib = tracemalloc.get_traced_memory()[1] / 1024 if traced else peak_kib - base_kib
again_s = None
if path.stat().st_size < 1 << 20:  # a small file read again: without one-time costs
    del result
    start = time.perf_counter()
    result = read()
    again_s = time.perf_counter() - start
print(json.dumps({"wall_s": wall_s, "peak_mib": grown_kib / 1024,
                  "total_mib": peak_kib / 1024, "again_s": again_s}))
"""


_PurePickler: Any = pickle._Pickler  # pure Python: it has save()


class _TilePickler(_PurePickler):
    """Writes one object at a time into an open pickle, numbering memo slots itself so that
    an entry already written can leave the memo (the generator never holds the tiled trace)."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=4)
        self.framer.current_frame = None  # write straight through, no frames
        self.next_index = 0

    def memoize(self, obj: Any) -> None:
        self.memo[id(obj)] = self.next_index, obj
        self.next_index += 1
        self.write(pickle.MEMOIZE)


def generate(events: int, target: Path) -> int:
    """A snapshot of `events` trace entries: train-default's trace repeated, each copy later
    in time and at other addresses. Written as pickle.dump would, entry by entry."""
    with gzip.open(SOURCE) as file:
        data = pickle.load(file)  # a committed file of our own: no need for the restricted reader
    trace = data["device_traces"][0]
    span_us = trace[-1]["time_us"] - trace[0]["time_us"] + 1
    with gzip.open(target, "wb", compresslevel=1) as out:
        pickler = _TilePickler(out)
        out.write(b"\x80\x04}")
        pickler.memoize(data)
        out.write(b"(")
        pickler.save("segments")
        pickler.save(data["segments"])
        pickler.save("device_traces")
        out.write(b"]")
        pickler.memoize(data["device_traces"])
        out.write(b"(]")
        pickler.memoize(trace)
        written = 0
        copy = 0
        block = b""
        while written < events:
            if written + len(trace) <= events and block:
                out.write(block)  # the pure-Python pickler takes ~1 ms per entry: reuse bytes
                written += len(trace)
                continue
            start = out.tell()
            out.write(b"(")
            for entry in trace[: min(len(trace), events - written)]:
                tiled = {**entry, "time_us": entry["time_us"] + copy * span_us}
                if "addr" in tiled:
                    tiled["addr"] = entry["addr"] + (copy % 64) * (1 << 40)
                pickler.save(tiled)
                del pickler.memo[id(tiled)]
                written += 1
            out.write(b"e")
            if copy == 1:
                # From the second copy on, a copy only refers back to strings and frames
                # lists of the first: its bytes read the same anywhere later (its memo slots
                # are fresh ones, never referred to). Its times repeat from then on.
                block = _bytes_written_since(target, out, start)
            copy += 1
        out.write(b"e")
        for key, value in data.items():
            if key not in ("segments", "device_traces"):
                pickler.save(key)
                pickler.save(value)
        out.write(b"u.")
    return written


def _bytes_written_since(target: Path, out: Any, start: int) -> bytes:
    """The decompressed bytes `out` (a gzip writer of `target`) wrote from offset `start`."""
    end = out.tell()
    out.flush()
    with gzip.open(target) as again:
        again.seek(start)
        return again.read(end - start)


def _child(path: Path, how: str, traced: bool = False) -> dict[str, float]:
    machine = "python" if how == "python" else "native"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), how if how in ("pickle", "split") else "reader",
         "traced" if traced else "rss"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "HIPMEM_SNAPSHOT_READER": machine},
    )  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout)
    return result


_INSPECT = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-m", "hipmem.cli.main", "log", "inspect", sys.argv[1]],
               capture_output=True, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _inspect_peak_mib(path: Path) -> tuple[float, float]:
    """`hipmem log inspect`'s wall time and peak resident memory, measured from a fresh parent
    (this one's RUSAGE_CHILDREN also holds the pickle.load children's peaks)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _INSPECT, str(path)], capture_output=True,
                          text=True, check=True, cwd=REPO)  # fmt: skip
    wall_s = time.perf_counter() - start
    return wall_s, int(done.stdout) / 1024


def _ms(wall_s: float) -> str:
    """Milliseconds to three significant digits (0.26 ms and 34,400 ms alike)."""
    wall_ms = wall_s * 1000
    return f"{wall_ms:,.0f}" if wall_ms >= 100 else f"{wall_ms:.3g}"


def _alternating(
    path: Path, hows: tuple[str, ...], runs: int, big: bool
) -> dict[str, list[dict[str, float]]]:
    """`runs` children of each kind, taking turns (pickle, reader, pickle, ...), so a drift in
    the machine's load falls on both alike; for a file over 1 MB, pickle.load's (and the
    Python machine's) once."""
    found: dict[str, list[dict[str, float]]] = {how: [] for how in hows}
    for turn in range(runs):
        for how in hows:
            if turn == 0 or not big or how in ("reader", "split"):
                found[how].append(_child(path, how))
    return found


def _spread(runs: list[dict[str, float]]) -> str:
    """The median wall time of the children, with the fastest and slowest when several."""
    walls = sorted(r["wall_s"] for r in runs)
    median = _ms(statistics.median(walls))
    return f"{median} ({_ms(walls[0])}–{_ms(walls[-1])})" if len(walls) > 1 else median


def _entries(path: Path) -> int:
    from hipmem.replay.snapshots.reader import read_snapshot

    return sum(part.recording.trace_entries for part in read_snapshot(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, nargs="*", default=[1_000_000])
    parser.add_argument("--inspect", action="store_true")
    parser.add_argument("--keep", type=Path, help="where generated snapshots are kept/reused")
    parser.add_argument("--python-machine", action="store_true",
                        help="also time the Python reference machine")  # fmt: skip
    parser.add_argument("--split", action="store_true",
                        help="also time the reading alone, without making the result")  # fmt: skip
    args = parser.parse_args()
    from hipmem.replay.snapshots.native import load

    load()  # the C machine is built at install (setup.py): say so now if it was not
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-snapshot-"))
    folder.mkdir(parents=True, exist_ok=True)
    files = sorted(SNAPSHOTS.glob("*.pickle.gz"))
    for events in args.events:
        target = folder / f"tiled-{events}.pickle.gz"
        if not target.exists():
            generate(events, target)
        files.append(target)
    print(f"machine: {platform.platform()}, python {platform.python_version()}")
    hows = ("pickle", "reader", *(("python",) if args.python_machine else ()),
            *(("split",) if args.split else ()))  # fmt: skip
    extra = " Python machine ms | its ratio |" if args.python_machine else ""
    extra += " reading alone ms | its ratio |" if args.split else ""
    print("| snapshot | entries | pickle.load ms (range) | reader ms (range) | time ratio | "
          "pickle.load MiB | "
          f"reader MiB | memory ratio | read again: time ratio |{extra}")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * extra.count("|"))
    for path in files:
        big = path.stat().st_size > 1 << 20
        runs = _alternating(path, hows, args.runs, big)
        wall = {how: statistics.median(r["wall_s"] for r in runs[how]) for how in runs}
        if big:  # resident memory grown past what the imports took
            peak = {how: statistics.median(r["peak_mib"] for r in runs[how]) for how in runs}
        else:  # too small to move ru_maxrss: the heap's peak as tracemalloc counts it
            peak = {how: _child(path, how, traced=True)["peak_mib"] for how in runs}
        cells = "".join(f" {_ms(wall[how])} | {wall[how] / wall['pickle']:.2f}x |"
                         for how in ("python", "split") if how in wall)  # fmt: skip
        again = ""
        if not big:
            again_s = {how: statistics.median(r["again_s"] for r in runs[how]) for how in runs}
            again = f"{again_s['reader'] / again_s['pickle']:.2f}x"
        print(
            f"| {path.name} | {_entries(path):,} | {_spread(runs['pickle'])} | "
            f"{_spread(runs['reader'])} | "
            f"{wall['reader'] / wall['pickle']:.2f}x | {peak['pickle']:.1f} | "
            f"{peak['reader']:.1f} | {peak['reader'] / peak['pickle']:.2f} | {again} |{cells}",
            flush=True,
        )
    if args.inspect and args.events:
        target = folder / f"tiled-{max(args.events)}.pickle.gz"
        wall_s, peak_mib = _inspect_peak_mib(target)
        print(f"\nhipmem log inspect {target.name}: {wall_s:.1f} s, peak {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
