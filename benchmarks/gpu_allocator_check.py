"""On a machine with an NVIDIA GPU and a CUDA PyTorch: does the recommended allocator setting
reserve on the GPU what the recommendation promised?

For each committed snapshot, `recommend_allocator_settings` runs the grid on the virtual GPU
with the installed PyTorch's allocator (the first choice of the search order) and a virtual
device of exactly the GPU's memory (torch.cuda.mem_get_info), so that a
per_process_memory_fraction in a setting is the same number of bytes on both. The recommended
setting is then replayed through PyTorch's allocator on the GPU (`-r torch:settings=...`, the
existing GPU path: a worker process with the installed PyTorch, the setting in its
environment), and its reserved peak (reserved_bytes.all.peak) printed beside the promised one,
with the refused allocations. `--all` replays every setting of the grid on the GPU too. Exit 1
on any mismatch.

    python3 benchmarks/gpu_allocator_check.py [--all] [--only NAME ...] [--json OUT.json]
    python3 benchmarks/gpu_allocator_check.py --dry-run   # no GPU: checks this script only

Needs only what the GPU machine has: python3 with torch (CUDA), numpy, pandas and g++;
hipmem need not be installed (the repository root goes on sys.path).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if importlib.util.find_spec("platformdirs") is None:  # the GPU machine's Python lacks it
    os.environ.setdefault("HIPMEM_CACHE_DIR", str(Path.home() / ".cache" / "hipmem"))

from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.run import replay_log
from hipmem.replay.settings.candidate import Candidate
from hipmem.replay.settings.recommend import recommend_allocator_settings
from hipmem.replay.virtual.devices import find_device

SNAPSHOTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "snapshots"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--all", action="store_true", help="every setting of the grid, not only the recommended one"
    )
    parser.add_argument("--only", nargs="*", help="snapshot names (default: all committed)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: the 'gpu' column is the virtual GPU too (an H200's memory); it checks "
        "this script, not the GPU",
    )
    args = parser.parse_args()
    if args.dry_run:
        total, gpu_name, gpu_backend = find_device("H200").memory_bytes, "none (dry run)", "virtual"
    else:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("this check needs a CUDA GPU and a CUDA PyTorch")
        total = torch.cuda.mem_get_info(0)[1]
        gpu_name, gpu_backend = torch.cuda.get_device_name(0), "cuda"
    gpu_options = ReplayOptions(
        backend=gpu_backend, threads="single", device_memory_bytes=total, time_calls=False
    )
    names = args.only or sorted(
        p.name.removesuffix(".pickle.gz") for p in SNAPSHOTS.glob("*.pickle.gz")
    )
    rows: list[dict[str, Any]] = []
    allocator = ""
    for name in names:
        advice = recommend_allocator_settings(
            [SNAPSHOTS / f"{name}.pickle.gz"], device_memory_bytes=total, capacity="recommended"
        )
        allocator = advice.allocator_source
        if not rows:
            print(f"GPU: {gpu_name}, {total:,} bytes; virtual: {allocator}", flush=True)
        if advice.recommended is None:
            rows.append(
                {
                    "snapshot": name,
                    "settings": None,
                    "match": False,
                    "error": "no setting of the grid fits",
                }
            )
            print(f"MISMATCH {name}: no setting of the grid fits", flush=True)
            continue
        checked = advice.candidates if args.all else [advice.recommended]
        for candidate in checked:
            row = _compare(name, candidate, candidate is advice.recommended, advice, gpu_options)
            rows.append(row)
            _print_row(row)
    if args.json:
        payload = {"gpu": gpu_name, "gpu_memory_bytes": total, "allocator": allocator, "rows": rows}
        args.json.write_text(json.dumps(payload, indent=1))
    bad = [r for r in rows if not r["match"]]
    print(f"{len(rows) - len(bad)} of {len(rows)} match" + (": MISMATCH above" if bad else ""))
    raise SystemExit(1 if bad else 0)


def _compare(
    name: str, candidate: Candidate, recommended: bool, advice: Any, options: ReplayOptions
) -> dict[str, Any]:
    workload = advice.workloads[0]
    on_gpu = replay_log(workload.log, candidate.spec, options, program=workload.program)
    promised = candidate.peak_reserved_bytes
    return {
        "snapshot": name,
        "settings": candidate.settings,
        "recommended": recommended,
        "promised_peak_reserved": promised,
        "gpu_peak_reserved": on_gpu.peak_reserved_bytes,
        "promised_refused": candidate.refused_count,
        "gpu_refused": on_gpu.failure_count,
        "match": on_gpu.peak_reserved_bytes == promised
        and on_gpu.failure_count == candidate.refused_count,
    }


def _print_row(row: dict[str, Any]) -> None:
    mark = "ok " if row["match"] else "MISMATCH"
    star = "*" if row["recommended"] else " "
    promised, gpu = row["promised_peak_reserved"], row["gpu_peak_reserved"] or 0
    print(
        f"{mark:8} {row['snapshot']:<18} reserved promised {promised:>14,} / GPU {gpu:>14,}  "
        f"refused {row['promised_refused']} / {row['gpu_refused']}  {star} "
        f"{row['settings'] or '(defaults)'}",
        flush=True,
    )


if __name__ == "__main__":
    main()
