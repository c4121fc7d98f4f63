"""On a machine with an NVIDIA GPU and a CUDA PyTorch: does the virtual GPU answer as the GPU?

For each committed snapshot and each setting below, the same program is replayed through
PyTorch's caching allocator twice: on the GPU (`-r torch`, the existing path: a worker
process with the installed PyTorch) and on the virtual GPU (the same PyTorch's libc10_cuda.so
over hipmem's stand-in runtime, the first choice of the search order), with a virtual device
of exactly the GPU's memory (torch.cuda.mem_get_info), so that a memory fraction is the same
number of bytes on both. It prints peak reserved, refused allocations and, with
`--capacity`, the smallest per-process memory cap (`limit=`, bisected to 2 MiB on both)
side by side, with each side's events/s, and exits 1 on any mismatch.

    python3 benchmarks/gpu_virtual_check.py [--capacity] [--only NAME ...] [--json OUT.json]
    python3 benchmarks/gpu_virtual_check.py --dry-run   # no GPU: checks this script only

Needs only what the GPU machine has: python3 with torch (CUDA), numpy, pandas and g++;
hipmem need not be installed (the repository root goes on sys.path).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if importlib.util.find_spec("platformdirs") is None:  # the GPU machine's Python lacks it
    os.environ.setdefault("HIPMEM_CACHE_DIR", str(Path.home() / ".cache" / "hipmem"))

from hipmem.replay.capacity.search import find_capacity
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs.loader import load_log
from hipmem.replay.pytorch.allocator import locate
from hipmem.replay.virtual.devices import find_device

MiB = 1 << 20
SNAPSHOTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "snapshots"
# The settings of issue 27's check; gc threshold only acts under a memory fraction, so it
# runs with a cap of 1.25 x the snapshot's peak requested bytes (LIMIT below).
SETTINGS = (
    "torch:settings=recorded",
    "torch",
    "torch:expandable_segments=1",
    "torch:max_split_size=64MiB",
    "torch:roundup_power2_divisions=4",
    "torch:garbage_collection_threshold=0.6,limit=LIMIT",
)
CAPACITY_SETTINGS = ("torch", "torch:expandable_segments=1")


def _spec(text: str, peak_requested: int) -> str:
    return text.replace("LIMIT", str(-(-peak_requested * 5 // 4 // MiB) * MiB))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", action="store_true", help="also compare capacities")
    parser.add_argument("--only", nargs="*", help="snapshot names (default: all committed)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: the 'gpu' column is the virtual GPU too (an H200's memory); it checks "
        "this script, not the virtual GPU",
    )
    args = parser.parse_args()
    if args.dry_run:
        total, gpu_name, gpu_backend = find_device("H200").memory_bytes, "none (dry run)", "virtual"
    else:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("this check needs a CUDA GPU and a CUDA PyTorch")
        total, gpu_name, gpu_backend = (
            torch.cuda.mem_get_info(0)[1],
            torch.cuda.get_device_name(0),
            "cuda",
        )
    allocator = locate()
    print(f"GPU: {gpu_name}, {total:,} bytes; virtual: {allocator.describe()}")
    gpu_options = ReplayOptions(backend=gpu_backend, threads="single", device_memory_bytes=total)
    virtual_options = ReplayOptions(backend="virtual", device_memory_bytes=total)
    rows: list[dict[str, Any]] = []
    names = args.only or sorted(
        p.name.removesuffix(".pickle.gz") for p in SNAPSHOTS.glob("*.pickle.gz")
    )
    for name in names:
        log = load_log(SNAPSHOTS / f"{name}.pickle.gz")
        program = build_program(log)
        for text in SETTINGS:
            spec = parse_spec(_spec(text, program.peak_requested_bytes))
            on_gpu = replay_log(log, spec, gpu_options, program=program)
            virtual = replay_log(log, spec, virtual_options, program=program)
            row = {
                "snapshot": name,
                "spec": spec.label,
                "gpu_peak_reserved": on_gpu.peak_reserved_bytes,
                "virtual_peak_reserved": virtual.peak_reserved_bytes,
                "gpu_refused": on_gpu.failure_count,
                "virtual_refused": virtual.failure_count,
                "gpu_refused_at": [f.event_index for f in on_gpu.failures],
                "virtual_refused_at": [f.event_index for f in virtual.failures],
                "gpu_events_per_s": round(on_gpu.events_per_s),
                "virtual_events_per_s": round(virtual.events_per_s),
            }
            if args.capacity and text in CAPACITY_SETTINGS:
                row.update(_capacities(log, spec, program, gpu_options, virtual_options))
            row["match"] = all(
                row[f"gpu_{key}"] == row[f"virtual_{key}"]
                for key in ("peak_reserved", "refused", "refused_at", "capacity")
                if f"gpu_{key}" in row
            )
            rows.append(row)
            _print_row(row)
    if args.json:
        payload = {"gpu": gpu_name, "gpu_memory_bytes": total,
                   "allocator": allocator.describe(), "rows": rows}  # fmt: skip
        args.json.write_text(json.dumps(payload, indent=1))
    bad = [r for r in rows if not r["match"]]
    print(f"{len(rows) - len(bad)} of {len(rows)} match" + (": MISMATCH above" if bad else ""))
    raise SystemExit(1 if bad else 0)


def _capacities(
    log: Any, spec: Any, program: Any, gpu: ReplayOptions, virtual: ReplayOptions
) -> dict[str, Any]:
    started = time.perf_counter()
    on_gpu = find_capacity(log, spec, gpu, program=program, resolution_bytes=2 * MiB,
                           confirm_runs=1, cap="fraction")  # fmt: skip
    gpu_s = time.perf_counter() - started
    started = time.perf_counter()
    on_virtual = find_capacity(log, spec, virtual, program=program, resolution_bytes=2 * MiB,
                               confirm_runs=1, cap="fraction")  # fmt: skip
    return {
        "gpu_capacity": on_gpu.capacity_bytes,
        "virtual_capacity": on_virtual.capacity_bytes,
        "gpu_capacity_s": round(gpu_s, 1),
        "virtual_capacity_s": round(time.perf_counter() - started, 2),
    }


def _print_row(row: dict[str, Any]) -> None:
    mark = "ok " if row["match"] else "MISMATCH"
    text = (f"{mark:8} {row['snapshot']:<18} {row['spec']:<50} reserved "
            f"{row['gpu_peak_reserved']:>14,} / {row['virtual_peak_reserved']:>14,}  refused "
            f"{row['gpu_refused']:>4} / "
            f"{row['virtual_refused']:<4} events/s {row['gpu_events_per_s']:>10,} / "
            f"{row['virtual_events_per_s']:>10,}")  # fmt: skip
    if "gpu_capacity" in row:
        text += (f"  capacity {row['gpu_capacity']:>14,} / {row['virtual_capacity']:>14,} "
                 f"({row['gpu_capacity_s']} s / {row['virtual_capacity_s']} s)")  # fmt: skip
    print(text, flush=True)


if __name__ == "__main__":
    main()
