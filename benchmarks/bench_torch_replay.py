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
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay.engine import ReplayOptions, _program_arrays, replay
from replay.events import AllocationLog
from replay.log_loader import load_log
from replay.program import build_program
from replay.resources import parse_spec

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "tests" / "data" / "snapshots"
REAL = REPO / "tests" / "data" / "real"
RMM_SPECS = ("pool:initial=16GiB", "binning:initial=16GiB", "arena:size=16GiB", "async")


def _plain_child(source: str) -> None:
    """In a fresh process: the bare loop, best of N passes; prints ns."""
    import torch

    from replay.torch_worker import load_extension

    extension = load_extension(torch)
    with np.load(source) as data:
        op, slot, size = (torch.from_numpy(data[k]) for k in ("op", "slot", "size"))
        n_slots, repeats = int(data["n_slots"]), int(data["repeats"])
    best = min(extension.plain_loop(op, slot, size, n_slots) for _ in range(repeats))
    print(best)


def plain_loop_ns(log: AllocationLog, repeats: int, conf: str) -> int:
    program = build_program(log)
    arrays = _program_arrays(program)
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "in.npz"
        np.savez(source, op=arrays["op"], slot=arrays["slot"], size=arrays["size"],
                 n_slots=program.slot_count, repeats=repeats)  # fmt: skip
        done = subprocess.run(
            [sys.executable, __file__, "--plain-child", str(source)],
            env={**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf},
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    return int(done.stdout.strip().splitlines()[-1])


def logs(copies: int) -> dict[str, list[Path]]:
    found = {p.name.split(".")[0]: [p] for p in sorted(SNAPSHOTS.glob("*.pickle.gz"))}
    found |= {f"rmm-{p.name.split('.')[0]}": [p] for p in sorted(REAL.glob("*.csv.gz"))}
    found["long (gpt x copies)"] = [REAL / "gpt.csv.gz"] * copies
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--rmm", action="store_true", help="also RMM's resources")
    parser.add_argument("--plain-child")
    args = parser.parse_args()
    if args.plain_child:
        _plain_child(args.plain_child)
        return
    options = ReplayOptions(threads="single", streams="default", repeats=args.repeats)
    rows = []
    print(f"{'log':<22} {'resource':<24} {'M events/s':>10} {'vs plain':>8} {'reserved':>14}")
    for name, paths in logs(args.copies).items():
        log = load_log(paths)
        events = len(build_program(log).op)
        plain = plain_loop_ns(log, args.repeats, "")
        figures: dict[str, tuple[float, int | None]] = {
            "torch plain loop": (events / plain * 1e3, None)
        }
        torch_report = replay(log, parse_spec("torch"), options)
        figures["torch"] = (events / torch_report.wall_ns * 1e3, torch_report.peak_reserved_bytes)
        if log.recordings:
            recorded = replay(log, parse_spec("torch:settings=recorded"), options)
            figures["torch:settings=recorded"] = (
                events / recorded.wall_ns * 1e3,
                recorded.peak_reserved_bytes,
            )
        for spec in RMM_SPECS if args.rmm else ():
            report = replay(log, parse_spec(spec), options)
            figures[spec] = (events / report.wall_ns * 1e3, report.peak_reserved_bytes)
        base = figures["torch plain loop"][0]
        for resource, (rate, reserved) in figures.items():
            ratio = rate / base
            shown = "" if reserved is None else f"{reserved:,}"
            print(f"{name:<22} {resource:<24} {rate:>10.2f} {ratio:>8.2f} {shown:>14}")
            rows.append({"log": name, "resource": resource, "m_events_per_s": rate,
                         "vs_plain": ratio, "peak_reserved_bytes": reserved})  # fmt: skip
        recorded_peak = sum(r.peak_reserved_bytes for r in log.recordings)
        if recorded_peak:
            print(f"{name:<22} {'recorded (PyTorch)':<24} {'':>10} {'':>8} {recorded_peak:>14,}")
    out = os.environ.get("OUT")
    if out:
        (Path(out) / "bench_torch_replay.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
