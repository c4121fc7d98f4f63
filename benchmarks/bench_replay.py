"""Replay speed: hipmem's replay against the C++ floor, same logs, same resources, one run.

Needs an NVIDIA GPU, nvcc and RMM's wheels (rmm-cu13/librmm-cu13/rapids-logger). It builds
`../shared/bench/replay_floor.cu` against the same librmm, runs it on each log (decompressed),
then replays the same logs through the same resource settings with hipmem (single thread,
best of 3 passes, as the floor does), and prints one table:

    log  resource  floor M ev/s  hipmem M ev/s  ratio  (logged threads M ev/s)

followed by whether the two rank the resources in the same order. Target: ratio >= 0.8 for
pool, binning, arena and async, and the same order.

    python benchmarks/bench_replay.py [--shared DIR] [--out DIR] [--long-copies 15]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import native
from replay.engine import ReplayOptions, replay
from replay.log_loader import load_log
from replay.program import build_program
from replay.resources import parse_spec

# The floor's resources, as hipmem specs with the floor's settings (16 GiB pools and arena).
SPECS = {
    "cuda": "cuda",
    "async": "async",
    "pool": "pool:initial=16GiB",
    "arena": "arena:size=16GiB",
    "binning": "binning:initial=16GiB,min_exp=18,max_exp=22",
    "managed": "managed",
}
TARGETS = ("pool", "binning", "arena", "async")
SLOW = ("cuda", "managed")  # one cudaMalloc per event: skipped on the long log to save time
_FLOOR_LINE = re.compile(r"^(\w+)\s+([\d.]+) M events/s\s+([\d.]+) ms")


def build_floor(source: Path, work: Path) -> Path:
    rmm_dir = native._package_dir("librmm")
    logger_dir = native._package_dir("rapids_logger")
    nvcc = native.find_nvcc()
    if rmm_dir is None or logger_dir is None or nvcc is None:
        sys.exit("bench_replay: needs nvcc and RMM's wheels (pip install rmm-cu13)")
    binary = work / "replay_floor"
    subprocess.run(
        [
            nvcc,
            "-std=c++20",
            "-O2",
            "--expt-relaxed-constexpr",
            f"-I{rmm_dir}/include",
            f"-I{rmm_dir}/include/rapids",
            f"-I{logger_dir}/include",
            str(source),
            "-o",
            str(binary),
            f"-L{rmm_dir}/lib64",
            "-lrmm",
            f"-L{logger_dir}/lib64",
            "-lrapids_logger",
        ],
        check=True,
    )
    os.environ["LD_LIBRARY_PATH"] = f"{rmm_dir}/lib64:{logger_dir}/lib64:" + os.environ.get(
        "LD_LIBRARY_PATH", ""
    )
    return binary


def run_floor(binary: Path, csv: Path) -> dict[str, float]:
    done = subprocess.run([str(binary), str(csv)], capture_output=True, text=True, check=True)
    rates = {}
    for line in done.stdout.splitlines():
        match = _FLOOR_LINE.match(line.strip())
        if match:
            rates[match.group(1)] = float(match.group(2))
    return rates


def decompress(log: Path, target: Path, copies: int = 1) -> Path:
    """The floor reads plain CSV; `copies` > 1 repeats the rows to make a long log."""
    lines = gzip.decompress(log.read_bytes()).decode().splitlines(keepends=True)
    with target.open("w") as out:
        out.write(lines[0])
        for _ in range(copies):
            out.writelines(lines[1:])
    return target


def ranks(rates: dict[str, float]) -> list[str]:
    return sorted(rates, key=lambda name: -rates[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for bench.json")
    parser.add_argument(
        "--long-copies", type=int, default=15, help="gpt log repeats for the long log"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_replay-"))
    floor = build_floor(args.shared / "bench" / "replay_floor.cu", work)
    logs = {
        p.name.split(".")[0]: decompress(p, work / p.name.replace(".gz", ""))
        for p in sorted((args.shared / "logs").glob("*.csv.gz"))
    }
    logs[f"long (gpt x{args.long_copies})"] = decompress(
        args.shared / "logs" / "gpt.csv.gz", work / "long.csv", args.long_copies
    )
    rows = []
    for name, csv in logs.items():
        floor_rates = run_floor(floor, csv)
        log = load_log([csv])
        program = build_program(log)
        ours: dict[str, float] = {}
        for resource, text in SPECS.items():
            if name.startswith("long") and resource in SLOW:
                floor_rates.pop(resource, None)
                continue
            single = replay(
                log,
                parse_spec(text),
                ReplayOptions(backend="cuda", threads="single", repeats=3),
                program=program,
            )
            logged = replay(
                log,
                parse_spec(text),
                ReplayOptions(backend="cuda", threads="logged", repeats=3),
                program=program,
            )
            ours[resource] = single.events_per_s / 1e6
            rows.append(
                {
                    "log": name,
                    "events": program.log_events,
                    "resource": resource,
                    "floor_mev_s": floor_rates.get(resource),
                    "hipmem_mev_s": ours[resource],
                    "hipmem_logged_threads_mev_s": logged.events_per_s / 1e6,
                    "ratio": ours[resource] / floor_rates[resource]
                    if floor_rates.get(resource)
                    else None,
                    "failures": single.failure_count,
                    "alloc_p50_ns": single.alloc_latency.p50_ns if single.alloc_latency else None,
                }
            )
        same = ranks({k: v for k, v in floor_rates.items() if k in ours}) == ranks(ours)
        same_targets = ranks({k: floor_rates[k] for k in TARGETS}) == ranks(
            {k: ours[k] for k in TARGETS}
        )
        rows.append(
            {
                "log": name,
                "rank_floor": ranks(floor_rates),
                "rank_hipmem": ranks(ours),
                "same_order": same,
                "same_order_targets": same_targets,
            }
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench.json").write_text(json.dumps(rows, indent=2))
    print_table(rows)
    shutil.rmtree(work, ignore_errors=True)


def print_table(rows: list[dict[str, object]]) -> None:
    print(
        f"{'log':<16} {'resource':<8} {'floor M ev/s':>12} {'hipmem M ev/s':>13} {'ratio':>6} "
        f"{'logged thr':>10}"
    )
    for row in rows:
        if "resource" in row:
            ratio = row["ratio"]
            print(
                f"{row['log']!s:<16} {row['resource']!s:<8} {row['floor_mev_s'] or 0:>12.2f} "
                f"{row['hipmem_mev_s']:>13.2f} {ratio if ratio is not None else 0:>6.2f} "
                f"{row['hipmem_logged_threads_mev_s']:>10.2f}"
            )
        else:
            print(
                f"{row['log']!s:<16} rank floor {row['rank_floor']} hipmem {row['rank_hipmem']} "
                f"same order: {row['same_order']} (targets: {row['same_order_targets']})"
            )


if __name__ == "__main__":
    main()
