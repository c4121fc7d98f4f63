"""Replay speed: hipmem's replay against the C++ floor, same logs, same resources, one run.

Needs an NVIDIA GPU, nvcc and RMM's wheels (rmm-cu13/librmm-cu13/rapids-logger). It builds
`../shared/bench/replay_floor.cu` against the same librmm, runs it on each log (decompressed),
then replays the same logs through the same resource settings with hipmem, and prints one
table:

    log  resource  floor  like-for-like  ratio  logged streams  logged threads  (M events/s)

"like-for-like" is what the floor does: one thread, every call on the default stream, best
of 3 passes. "logged streams" keeps one thread but puts each logged stream on its own real
stream; "logged threads" is `hipmem replay`'s default (a thread per logged thread and a
stream per logged stream). Then, per log, whether each ranks the resources as the floor
does (by wall time, and for the default mode also by the time spent inside allocator calls).
The floor runs twice; a pair of resources whose order the floor's own two runs disagree on is
a tie at the floor's noise, and is not counted against the order.
Target: ratio >= 0.8 for pool, binning, arena and async, and the same order.

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

from hipmem.replay.engine import native
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs.loader import load_log

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
SLOW = ("cuda", "managed")
MODES = {
    "like_for_like": ReplayOptions(backend="cuda", threads="single", streams="default", repeats=3),
    "logged_streams": ReplayOptions(backend="cuda", threads="single", repeats=3),
    "logged_threads": ReplayOptions(backend="cuda", repeats=3),
}  # one cudaMalloc per event: skipped on the long log to save time
_FLOOR_LINE = re.compile(r"^(\w+)\s+([\d.]+) M events/s\s+([\d.]+) ms")


def build_floor(source: Path, work: Path) -> Path:
    try:
        nvcc, rmm_dir, logger_dir = native.rmm_build_inputs()
    except native.NativeCoreUnavailable as missing:
        sys.exit(f"bench_replay: {missing}")
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


def floor_ties(first: dict[str, float], second: dict[str, float]) -> set[frozenset[str]]:
    """Pairs the floor's two runs order differently: ties at the floor's own noise."""
    names = [k for k in first if k in second]
    return {
        frozenset((a, b))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if (first[a] > first[b]) != (second[a] > second[b])
    }


def same_order(
    floor: dict[str, float],
    ours: dict[str, float],
    names: tuple[str, ...],
    ties: set[frozenset[str]],
) -> bool:
    """Whether `ours` orders every pair of `names` as the floor does, ties aside."""
    return all(
        (floor[a] > floor[b]) == (ours[a] > ours[b])
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if frozenset((a, b)) not in ties
    )


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
        floor_rates, floor_again = run_floor(floor, csv), run_floor(floor, csv)
        ties = floor_ties(floor_rates, floor_again)
        log = load_log([csv])
        program = build_program(log)
        ours: dict[str, float] = {}
        default_rates: dict[str, float] = {}
        default_alloc: dict[str, float] = {}
        for resource, text in SPECS.items():
            if name.startswith("long") and resource in SLOW:
                floor_rates.pop(resource, None)
                continue
            runs = {
                mode: replay_log(log, parse_spec(text), options, program=program)
                for mode, options in MODES.items()
                if mode != "logged_streams" or len(program.streams) > 1
            }
            like = runs["like_for_like"]
            ours[resource] = like.events_per_s / 1e6
            default = runs["logged_threads"]
            default_rates[resource] = default.events_per_s / 1e6
            default_alloc[resource] = program.log_events / max(default.allocator_ns or 1, 1) * 1e3
            rows.append(
                {
                    "log": name,
                    "events": program.log_events,
                    "streams": len(program.streams),
                    "threads": len(program.threads),
                    "resource": resource,
                    "floor_mev_s": floor_rates.get(resource),
                    "hipmem_mev_s": ours[resource],
                    "ratio": ours[resource] / floor_rates[resource]
                    if floor_rates.get(resource)
                    else None,
                    "hipmem_logged_streams_mev_s": runs["logged_streams"].events_per_s / 1e6
                    if "logged_streams" in runs
                    else None,
                    "hipmem_logged_threads_mev_s": default_rates[resource],
                    "hipmem_logged_threads_allocator_mev_s": default_alloc[resource],
                    "failures": like.failure_count,
                    "alloc_p50_ns": like.alloc_latency.p50_ns if like.alloc_latency else None,
                }
            )

        rows.append(
            {
                "log": name,
                "rank_floor": ranks(floor_rates),
                "rank_floor_again": ranks(floor_again),
                "floor_ties": sorted(" = ".join(sorted(pair)) for pair in ties),
                "rank_hipmem": ranks(ours),
                "same_order": same_order(floor_rates, ours, tuple(ours), ties),
                "same_order_targets": same_order(floor_rates, ours, TARGETS, ties),
                "rank_logged_threads": ranks(default_rates),
                "same_order_targets_logged_threads": same_order(
                    floor_rates, default_rates, TARGETS, ties
                ),
                "same_order_targets_logged_threads_allocator": same_order(
                    floor_rates, default_alloc, TARGETS, ties
                ),
            }
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench.json").write_text(json.dumps(rows, indent=2))
    print_table(rows)
    shutil.rmtree(work, ignore_errors=True)


def print_table(rows: list[dict[str, object]]) -> None:
    print(
        f"{'log':<16} {'resource':<8} {'floor':>7} {'like-for-like':>13} {'ratio':>6} "
        f"{'logged streams':>14} {'logged threads':>14}   (M events/s)"
    )
    for row in rows:
        if "resource" in row:
            ratio = row["ratio"]
            streams = row["hipmem_logged_streams_mev_s"]
            print(
                f"{row['log']!s:<16} {row['resource']!s:<8} {row['floor_mev_s'] or 0:>7.2f} "
                f"{row['hipmem_mev_s']:>13.2f} {ratio if ratio is not None else 0:>6.2f} "
                f"{'-' if streams is None else f'{streams:.2f}':>14} "
                f"{row['hipmem_logged_threads_mev_s']:>14.2f}"
            )
        else:
            print(
                f"{row['log']!s:<16} floor ties {row['floor_ties']}; rank floor "
                f"{row['rank_floor']} like-for-like "
                f"{row['rank_hipmem']} same order: {row['same_order']} (targets: "
                f"{row['same_order_targets']}); logged threads {row['rank_logged_threads']} "
                f"targets same: by wall {row['same_order_targets_logged_threads']}, by "
                f"allocator time {row['same_order_targets_logged_threads_allocator']}"
            )


if __name__ == "__main__":
    main()
