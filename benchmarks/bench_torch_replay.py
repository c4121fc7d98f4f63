"""`-r torch` speed and fidelity, side by side in one run, on a machine with PyTorch and a GPU.

For each log (the committed PyTorch snapshots and the real RMM log excerpts, each also
repeated into a longer log), one table row per resource:

- `torch plain loop`: the yardstick, PyTorch's raw_alloc/raw_delete in a bare C++ loop (the
  extension's `plain_loop`: no timing, no bookkeeping), in its own process, best of N passes;
- `torch` through `hipmem replay` (`-r torch`, the same process model, best of N passes);
- RMM's resources through hipmem (`--rmm`: needs the RMM wheels and nvcc), to show that the
  others' ranking is unchanged.

Events/s of hipmem's torch resource over the plain loop's: the target is >= 0.8. For each
snapshot it also checks that `torch:settings=recorded` reserves what the recording did.

    python benchmarks/bench_torch_replay.py [--repeats 5] [--copies 20] [--rmm]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program, program_arrays
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs.events import AllocationLog
from hipmem.replay.logs.loader import load_log

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "tests" / "data" / "snapshots"
REAL = REPO / "tests" / "data" / "real"
RMM_SPECS = ("pool:initial=16GiB", "binning:initial=16GiB", "arena:size=16GiB", "async")


def _plain_child(source: str) -> None:
    """In a fresh process: the bare loop, best of N passes; prints ns."""
    import torch

    from hipmem.replay.pytorch.worker import load_extension

    torch.cuda.set_device(0)  # initialises CUDA and the caching allocator, as the worker does
    extension = load_extension(torch)
    with np.load(source) as data:
        op, slot, size = (torch.from_numpy(data[k]) for k in ("op", "slot", "size"))
        n_slots, repeats = int(data["n_slots"]), int(data["repeats"])
    best = min(extension.plain_loop(op, slot, size, n_slots) for _ in range(repeats))
    print(best)


def plain_loop_ns(log: AllocationLog, repeats: int, conf: str) -> int:
    program = build_program(log)
    arrays = program_arrays(program)
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "in.npz"
        np.savez(source, op=arrays["op"], slot=arrays["slot"], size=arrays["size"],
                 n_slots=program.slot_count, repeats=repeats)  # fmt: skip
        done = subprocess.run(
            [sys.executable, __file__, "--plain-child", str(source)],
            env={**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf},
            capture_output=True, text=True,
        )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the plain loop failed: {done.stderr[-2000:]}")
    return int(done.stdout.strip().splitlines()[-1])


def logs(min_events: int) -> dict[str, tuple[list[Path], int]]:
    """Every committed snapshot and real log excerpt, and how many copies make it long enough
    to time (a few thousand events take a millisecond or two: noise, not a measurement)."""
    found = {p.name.split(".")[0]: p for p in sorted(SNAPSHOTS.glob("*.pickle.gz"))}
    found |= {f"rmm-{p.name.split('.')[0]}": p for p in sorted(REAL.glob("*.csv.gz"))}
    tiled = {}
    for name, path in found.items():
        events = len(load_log(path).events)
        tiled[name] = ([path], max(1, -(-min_events // max(events, 1))))
    return tiled


def fidelity() -> None:
    """`torch:settings=recorded` against what each snapshot's own allocator reserved."""
    print(f"{'snapshot':<18} {'recorded':>14} {'settings=recorded':>18}  trace")
    for path in sorted(SNAPSHOTS.glob("*.pickle.gz")):
        log = load_log(path)
        report = replay_log(log, parse_spec("torch:settings=recorded"))
        recorded = sum(r.peak_reserved_bytes for r in log.recordings)
        partial = sum(r.pre_recording_allocations for r in log.recordings)
        trace = f"partial ({partial} allocations before recording)" if partial else "complete"
        print(f"{path.name.split('.')[0]:<18} {recorded:>14,} {report.peak_reserved_bytes:>18,}"
              f"  {trace}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="passes in one process")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two")
    parser.add_argument("--min-events", type=int, default=100_000)
    parser.add_argument("--rmm", action="store_true", help="also RMM's resources")
    parser.add_argument("--plain-child")
    args = parser.parse_args()
    if args.plain_child:
        _plain_child(args.plain_child)
        return
    fidelity()
    options = ReplayOptions(threads="single", streams="default", repeats=args.repeats)
    print(f"\n{'log':<18} {'events':>8} {'resource':<22} {'M events/s':>10} {'vs plain':>8}")
    for name, (paths, copies) in logs(args.min_events).items():
        log = load_log(paths * copies)
        events = len(build_program(log).op)
        plain_ns, torch_ns = [], []
        for _ in range(args.rounds):  # alternated, so drift on the machine hits both alike
            plain_ns.append(plain_loop_ns(log, args.repeats, ""))
            torch_ns.append(replay_log(log, parse_spec("torch"), options).wall_ns)
        figures = {"torch plain loop": min(plain_ns), "torch": min(torch_ns)}
        for spec in RMM_SPECS if args.rmm else ():
            figures[spec] = replay_log(log, parse_spec(spec), options).wall_ns
        for resource, wall_ns in figures.items():
            rate, ratio = events / wall_ns * 1e3, figures["torch plain loop"] / wall_ns
            print(f"{name:<18} {events:>8,} {resource:<22} {rate:>10.2f} {ratio:>8.2f}")


if __name__ == "__main__":
    main()
