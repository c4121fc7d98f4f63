"""Answers in a blink (issue 37): a repeated `size`, `recommend` or `check` of calls, answered
from the cache of answers, against `hipmem --version`, in fresh processes, side by side.

Each round runs, in a new process each, and in this order: `hipmem --version`; the query as
before the cache of answers (`--debug` never consults it); the query with its kept answer
removed (the first answer: answered, then kept); the same query again (a hit). Medians over
the rounds; the target is a hit at most 1.5x `--version`, and a first answer no slower than
before the cache of answers.

Run after `hipmem rocm fetch --rocm 7.2`:  python benchmarks/bench_answer_cache.py [ROUNDS]
"""

from __future__ import annotations

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


def run_s(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([HIPMEM, *argv], env=env, capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    from hipmem._core.answer_cache import answers_dir, key_for
    from hipmem._core.cache_root import cache_dir

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    env = dict(os.environ)
    root = cache_dir()
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"{'query':10} {'--version':>10} {'before':>8} {'first':>8} {'repeated':>9} "
          f"{'repeated/--version':>19}")  # fmt: skip
    for name, argv in QUERIES.items():
        key = key_for(argv, root, env)
        assert key is not None
        kept = answers_dir(root) / f"{key}.json"
        times: dict[str, list[float]] = {"version": [], "before": [], "first": [], "hit": []}
        run_s(argv, env)  # builds and page cache warm, as in any repeated CI run
        for _ in range(rounds):
            times["version"].append(run_s(["--version"], env))
            # --debug never consults the cache of answers: the query as it was before it.
            times["before"].append(run_s(["--debug", *argv], env))
            kept.unlink(missing_ok=True)  # only this query's kept answer
            times["first"].append(run_s(argv, env))
            assert kept.is_file(), "the first answer was not kept"
            times["hit"].append(run_s(argv, env))
        version, before, first, hit = (statistics.median(t) for t in times.values())
        print(f"{name:10} {version:10.3f} {before:8.3f} {first:8.3f} {hit:9.3f} "
              f"{hit / version:19.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
