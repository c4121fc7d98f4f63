"""Answers in a blink (issue 37): a repeated `size`, `recommend` or `check` of calls, answered
from the cache of answers, against `hipmem --version`, in fresh processes, side by side.

Each round runs, in a new process each, and in this order: `hipmem --version`; the query as
before the cache of answers (`--debug` never consults it); the query with its kept answer
removed (the first answer: answered, then kept); the same query again (a hit). Medians over
the rounds; the target is a hit at most 1.5x `--version`, and a first answer no slower than
before the cache of answers.

`--baseline HIPMEM` also times, in each round, another installation's `hipmem --debug` query
(`today`: for example a checkout of the commit before a change, installed in its own venv):
a first answer now beside the same query answered by that code, side by side.

Run after `hipmem rocm fetch --rocm 7.2`:
    python benchmarks/bench_answer_cache.py [ROUNDS] [--baseline PATH/TO/bin/hipmem]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HIPMEM = str(Path(sys.executable).with_name("hipmem"))
QUERIES = {
    "size": ["size", "--rocm", "7.2", "-d", "MI300X",
             "rocsolver_dgetrf:m=1024,n=1024", "rocsolver_dgetrs:n=1024,nrhs=1"],
    "recommend": ["recommend", "--rocm", "7.2", "-d", "MI210", "rocsolver_dgetrf:m=1024,n=1024"],
    "check": ["check", "--rocm", "7.2", "-d", "MI210", "rocsolver_dgetrf:m=1024,n=1024",
              "--value", "4194304"],
}  # fmt: skip


def run_s(argv: list[str], env: dict[str, str], hipmem: str = HIPMEM) -> float:
    start = time.perf_counter()
    subprocess.run([hipmem, *argv], env=env, capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    from hipmem._core.answer_cache import answers_dir, key_for
    from hipmem._core.cache_root import cache_dir

    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=9)
    parser.add_argument("--baseline", help="another installation's hipmem: its --debug query")
    args = parser.parse_args()
    env = dict(os.environ)
    root = cache_dir()
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    today = f" {'today':>8}" if args.baseline else ""
    print(f"{'query':10} {'--version':>10}{today} {'before':>8} {'first':>8} {'repeated':>9} "
          f"{'repeated/--version':>19} {'first/before':>13}"
          + (f" {'first/today':>12}" if args.baseline else ""))  # fmt: skip
    for name, argv in QUERIES.items():
        run_s(argv, env)  # builds and page cache warm, as in any repeated CI run
        # The key after that run: one that built the HIP stand-in changed it.
        key = key_for(argv, root, env)
        assert key is not None
        kept = answers_dir(root) / f"{key}.json"
        times: dict[str, list[float]] = {"version": [], "before": [], "first": [], "hit": [],
                                         "today": []}  # fmt: skip
        for _ in range(args.rounds):
            times["version"].append(run_s(["--version"], env))
            if args.baseline:
                times["today"].append(run_s(["--debug", *argv], env, args.baseline))
            # --debug never consults the cache of answers: the query as it was before it.
            times["before"].append(run_s(["--debug", *argv], env))
            kept.unlink(missing_ok=True)  # only this query's kept answer
            times["first"].append(run_s(argv, env))
            assert kept.is_file(), "the first answer was not kept"
            times["hit"].append(run_s(argv, env))
        med = {what: statistics.median(t) if t else 0.0 for what, t in times.items()}
        today_s = f" {med['today']:8.3f}" if args.baseline else ""
        ratio = f" {med['first'] / med['today']:12.2f}" if args.baseline else ""
        print(f"{name:10} {med['version']:10.3f}{today_s} {med['before']:8.3f} "
              f"{med['first']:8.3f} {med['hit']:9.3f} {med['hit'] / med['version']:19.2f} "
              f"{med['first'] / med['before']:13.2f}{ratio}")  # fmt: skip


if __name__ == "__main__":
    main()
