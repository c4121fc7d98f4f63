"""The virtual GPU's speed and memory, on a machine with no GPU (numbers in
docs/pytorch-virtual-gpu.md).

A committed snapshot (train-default, recorded on the H200) is tiled into a snapshot file of
a million events (`--events`: `alloc` and `free_completed` entries, the log rows hipmem
replays; the file has more trace entries, the segment events among them), then, in fresh
processes, alternated so that drift on a shared machine hits both sides alike:

1. events/s of hipmem's replay (`VirtualGpu.replay`: the replay loop with its bookkeeping,
   the refusal records, the stream handles) against a plain C++ loop over the same allocator
   calls (`vcuda_replay --plain`: raw_alloc/raw_delete and nothing else), both one pass in a
   fresh driver process over PyTorch's allocator on the virtual GPU. Target: >= 0.8.
2. the wall time of `hipmem replay TILED -r torch:settings=recorded --find-capacity` (a fresh
   `hipmem` process: loading the snapshot, both searches and the fits table). Target: < 30 s.
3. the peak resident memory (VmHWM) of the driver process replaying it on a 192 GiB (MI300X)
   and a 288 GiB (MI355X) virtual GPU, and of the largest process of a whole
   `hipmem replay --find-capacity` on each. Target: < 300 MB.

    python benchmarks/bench_virtual_replay.py [--processes 5] [--events 1000000] [--torch 2.11]

Needs a fetched allocator (`hipmem torch fetch`) or an installed CUDA PyTorch.
"""

from __future__ import annotations

import argparse
import gzip
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hipmem.replay.engine.program import build_program, program_arrays
from hipmem.replay.logs.loader import load_log
from hipmem.replay.pytorch.allocator import locate
from hipmem.replay.virtual.devices import find_device
from hipmem.replay.virtual.gpu import VirtualGpu

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "data" / "snapshots" / "train-default.pickle.gz"


def tile_snapshot(source: Path, events: int, target: Path) -> int:
    """A snapshot whose trace is the source's trace repeated until it holds `events` alloc and
    free_completed entries, each copy later in time than the one before; returns the number
    of trace entries."""
    with gzip.open(source) as file:
        data = pickle.load(file)  # a committed snapshot of the project's own, not user input
    trace = data["device_traces"][0]
    span_us = trace[-1]["time_us"] - trace[0]["time_us"] + 1
    rows = sum(1 for entry in trace if entry["action"] in ("alloc", "free_completed"))
    copies = -(-events // rows)
    tiled = [
        {**entry, "time_us": entry["time_us"] + copy * span_us}
        for copy in range(copies)
        for entry in trace
    ]
    data["device_traces"] = [tiled]
    with gzip.open(target, "wb", compresslevel=1) as out:
        pickle.dump(data, out, protocol=4)
    return len(tiled)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh processes per figure")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--torch", default=None, help="PyTorch version (default: search order)")
    args = parser.parse_args()
    allocator = locate(args.torch)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {_cpu()}; {allocator.describe()}")
    with tempfile.TemporaryDirectory(prefix="hipmem-bench-") as folder:
        tiled = Path(folder) / "tiled.pickle.gz"
        entries = tile_snapshot(SOURCE, args.events, tiled)
        log = load_log(tiled)
        program = build_program(log)
        arrays = program_arrays(program)
        print(f"{tiled.name}: {program.log_events:,} events (alloc, free_completed) of "
              f"{entries:,} trace entries, {program.op_count:,} allocator calls, "
              f"{tiled.stat().st_size / 1e6:.1f} MB")  # fmt: skip
        streams = len(program.streams)
        for conf in ("", "expandable_segments:True"):
            replay_rates, plain_rates = [], []
            with (
                VirtualGpu(arrays, program.slot_count, streams, conf, find_device("H100"),
                           allocator) as gpu,
                VirtualGpu(arrays, program.slot_count, streams, conf, find_device("H100"),
                           allocator, plain=True) as plain,
            ):  # fmt: skip
                for _ in range(args.processes):
                    run = gpu.replay()
                    replay_rates.append(program.op_count / run.wall_ns * 1e3)
                    plain_rates.append(program.op_count / plain.plain_loop_ns() * 1e3)
            ratios = [r / p for r, p in zip(replay_rates, plain_rates, strict=True)]
            print(f"settings {conf or 'default'!r}: M events/s, median of {args.processes} "
                  f"fresh processes each: replay {spread(replay_rates)}, plain C++ loop "
                  f"{spread(plain_rates)}; replay/plain {spread(ratios)}")  # fmt: skip
        walls = []

        def capacity_command(device: str) -> list[str]:
            command = [
                sys.executable,
                "-m",
                "hipmem.cli.main",
                "replay",
                str(tiled),
                "-r",
                "torch:settings=recorded",
                "--device",
                device,
                "--find-capacity",
                "--json",
            ]
            return command + (["--torch", args.torch] if args.torch else [])  # fmt: skip

        command = capacity_command("MI300X")
        for _ in range(args.processes):
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
            walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"--find-capacity failed: {done.stderr[-1000:]}")
        print(f"hipmem replay --find-capacity (both caps + fits of 8 devices), wall s over "
              f"{args.processes} processes: {spread(walls)} (target < 30)")  # fmt: skip
        for name in ("MI300X", "MI355X"):
            largest = [_largest_process_mb(capacity_command(name)) for _ in range(args.processes)]
            print(f"largest process of hipmem replay --find-capacity on a virtual {name}, MB: "
                  f"{spread(largest)} (target < 300)")  # fmt: skip
            rss = []
            with VirtualGpu(arrays, program.slot_count, streams, "", find_device(name),
                            allocator) as gpu:  # fmt: skip
                for _ in range(args.processes):
                    gpu.peak_rss = None
                    gpu.replay()
                    rss.append((gpu.peak_rss or 0) / 1e6)
            print(f"peak RSS of the driver on a virtual {name} "
                  f"({find_device(name).memory_bytes / 2**30:.0f} GiB), MB: {spread(rss)} "
                  "(target < 300)")  # fmt: skip


def _largest_process_mb(command: list[str]) -> float:
    """The peak RSS of the largest process of `command`'s tree (ru_maxrss of the children of
    a fresh parent, which waits for `command`, which waits for its drivers)."""
    probe = (
        "import resource, subprocess, sys; "
        "done = subprocess.run(sys.argv[1:], capture_output=True); "
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    done = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True,
                          text=True, cwd=REPO)  # fmt: skip
    code, kib = done.stdout.split()
    if code != "0":
        raise SystemExit(f"{' '.join(command)} failed (exit {code})")
    return int(kib) * 1024 / 1e6


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
