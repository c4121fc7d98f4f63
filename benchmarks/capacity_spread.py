"""How far `--find-capacity` moves between runs, and how often its answer fails later.

    python benchmarks/capacity_spread.py [--log ../shared/logs/serve.csv.gz] [--spec pool]
                                         [--searches 2] [--replays 10]

Needs an NVIDIA GPU and RMM's wheels (the cuda backend). For each threads/streams mode it
runs the capacity search `--searches` times, then replays each size found `--replays` times
and counts the replays that had a failure. On a log with several streams RMM's pools can
answer differently from run to run; on the default stream alone they should not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hipmem.replay.capacity.search import find_capacity
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs.loader import load_log

MODES = (("logged", "logged"), ("single", "logged"), ("single", "default"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_log = Path(__file__).resolve().parents[2] / "shared" / "logs" / "serve.csv.gz"
    parser.add_argument("--log", type=Path, default=default_log)
    parser.add_argument("--spec", default="pool")
    parser.add_argument("--searches", type=int, default=2)
    parser.add_argument("--replays", type=int, default=10)
    args = parser.parse_args()
    log = load_log([args.log])
    program = build_program(log)
    for threads, streams in MODES:
        options = ReplayOptions(backend="cuda", threads=threads, streams=streams)
        for search in range(args.searches):
            found = find_capacity(log, parse_spec(args.spec), options, program=program)
            sized = parse_spec(found.sized_spec)
            failing = sum(
                replay_log(log, sized, options, program=program).failure_count > 0
                for _ in range(args.replays)
            )
            print(
                f"threads={threads} streams={streams} search {search}: capacity "
                f"{found.capacity_bytes} ({len(found.probes)} probes); later replays failing: "
                f"{failing}/{args.replays}",
                flush=True,
            )


if __name__ == "__main__":
    main()
