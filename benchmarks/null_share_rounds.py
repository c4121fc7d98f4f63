"""The null resource's share of the fastest resource, per event, measured again and again.

`bench_threaded_replay.py` measures each of hipmem's modes once per run (median of 5 replays,
best of 3 passes). Where that share sits near the 20% target (serve with logged threads,
whose 5,062 hand-offs cost what the machine's cores take to pass a cache line), one figure
says little: this repeats the same measurement `--rounds` times on one log, in the two
threaded modes, and prints every round and the median. Each round also measures what the
null replay pays per hand-off (logged threads against one thread, streams logged) beside
bare threads passing a turn in the log's own order (`core_to_core_handoff.cpp --sequence`):
what the machine itself charges for those hand-offs. Needs an NVIDIA GPU, nvcc, c++ and
RMM's wheels.

    python benchmarks/null_share_rounds.py [--shared DIR] [--log serve] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_threaded_replay import (
    MODES,
    RESOURCES,
    SEQUENCE_RUNS,
    handoff_binary,
    handoffs,
    per_event_ns,
    sequence_handoff,
)
from hipmem.replay.engine import native
from hipmem.replay.engine.program import ReplayProgram, build_program
from hipmem.replay.logs.events import AllocationLog
from hipmem.replay.logs.loader import load_log
from tests.fleet_logs import read_rows, write_log

THREADED = ("threads=logged streams=default", "threads=logged streams=logged")


def null_share(
    log: AllocationLog, program: ReplayProgram, mode: tuple[str, str]
) -> tuple[float, float]:
    """(null ns per event, fastest resource ns per event), as the bench measures them."""
    per_event = per_event_ns(log, program, mode)
    return per_event["null"], min(per_event[r] for r in RESOURCES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared"
    )
    parser.add_argument("--log", default="serve")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    native.load("rmm")  # build the core before anything is timed
    rows = read_rows(args.shared / "logs" / f"{args.log}.csv.gz")
    work = Path(tempfile.mkdtemp(prefix="null-share-"))
    log = load_log(write_log(work / f"{args.log}-streams.csv", rows))  # the logged streams
    program = build_program(log)
    bare = handoff_binary(work)
    n_handoffs, n_threads = handoffs(program), len(program.threads)
    shares: dict[str, list[float]] = {label: [] for label in THREADED}
    per_handoff: dict[str, list[float]] = {"null replay": [], "bare threads": []}
    for round_index in range(args.rounds):
        cells = []
        null_by_mode: dict[str, float] = {}
        for label in THREADED:
            null_ns, fastest_ns = null_share(log, program, MODES[label])
            null_by_mode[label] = null_ns
            shares[label].append(null_ns / fastest_ns)
            cells.append(f"{label}: null {null_ns:.1f} of {fastest_ns:.1f} ns "
                         f"({null_ns / fastest_ns:.1%})")  # fmt: skip
        if n_handoffs and bare is not None:
            threaded_ns = null_by_mode["threads=logged streams=logged"]
            single_mode = MODES["threads=single streams=logged"]
            single_ns = per_event_ns(log, program, single_mode, specs=("null",))["null"]
            per_handoff["null replay"].append(
                (threaded_ns - single_ns) * len(log.events) / n_handoffs
            )
            per_handoff["bare threads"].append(
                statistics.median(sequence_handoff(bare, program, SEQUENCE_RUNS, work))
            )
            cells.append(f"per hand-off: null replay {per_handoff['null replay'][-1]:.0f} ns, "
                         f"bare threads {per_handoff['bare threads'][-1]:.0f} ns")  # fmt: skip
        print(f"round {round_index + 1}: " + " | ".join(cells), flush=True)
    for label, values in shares.items():
        over = sum(share >= 0.20 for share in values)
        print(f"{label}: median {statistics.median(values):.1%} [{min(values):.1%}-"
              f"{max(values):.1%}], at or over 20% in {over} of {len(values)}")  # fmt: skip
    for name, values in per_handoff.items():
        if values:
            low, middle, high = min(values), statistics.median(values), max(values)
            print(f"per hand-off ({n_handoffs:,} of them, {n_threads} threads), {name}: median "
                  f"{middle:.0f} ns [{low:.0f}-{high:.0f}]")  # fmt: skip


if __name__ == "__main__":
    main()
