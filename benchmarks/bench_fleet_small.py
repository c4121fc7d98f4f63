"""`hipmem fleet` over many small logs, piped: when each line comes, and the whole sweep.

A sweep of many small logs is where the fleet's own costs show (starting, finding the logs,
a Dask task's cost of its own): the replays are milliseconds. It

1. writes `--logs` logs of two events each (an allocation and its free) into a temporary
   folder;
2. runs `hipmem fleet FOLDER -r host --workers W --results FILE` as a user would, stderr piped
   (not a terminal: the lines a CI log gets), and stamps each line of stderr with the seconds
   since the command started;
3. prints the lines with their times, the time to the first line, the longest silence once
   the sweep is going, and the whole sweep's time.

Targets: the first line within 2 s of starting, whatever the number of logs; once the logs
are found, never more than a few seconds without a line while the sweep works (the piped
progress: a line at most every 5 s, and one as each step starts).

    python benchmarks/bench_fleet_small.py [--logs 10000] [--workers 2]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def write_logs(folder: Path, count: int) -> None:
    for i in range(count):
        pointer = hex(0x1000 + i)
        (folder / f"log-{i:05d}.csv").write_text(
            HEADER + f"1,10:00:00.000001,allocate,{pointer},4096,0x0\n"
            f"1,10:00:00.000002,free,{pointer},4096,0x0\n"
        )


def sweep(folder: Path, workers: int) -> tuple[list[tuple[float, str]], float, int]:
    """(stderr lines with their seconds since the start, the whole time, exit code)."""
    command = [sys.executable, "-m", "hipmem.cli.main", "fleet", str(folder), "-r", "host",
               "--workers", str(workers), "--results", str(folder / "results.jsonl")]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=REPO, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    stamped = [(time.perf_counter() - started, line.rstrip("\n")) for line in process.stderr]
    code = process.wait()
    return stamped, time.perf_counter() - started, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hipmem-bench-fleet-") as folder:
        write_logs(Path(folder), args.logs)
        stamped, whole_s, code = sweep(Path(folder), args.workers)
    for seconds, line in stamped:
        print(f"{seconds:7.2f} s  {line}")
    going = stamped[2:]  # from the line that the logs are found
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(going)]
    first_s = stamped[0][0] if stamped else float("nan")
    print(f"\n{args.logs:,} logs, {args.workers} workers: exit {code}")
    print(f"first line after {first_s:.2f} s (target 2 s)")
    print(f"longest silence once the logs were found: {max(gaps, default=0):.2f} s")
    print(f"the whole sweep: {whole_s:.1f} s")


if __name__ == "__main__":
    main()
