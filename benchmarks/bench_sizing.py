"""Sizing speed, against the targets of the sizing issue, for every ROCm release in the cache:

1. one-call `hipmem size --rocm R` end to end from a warm cache (a new process each time): <= 1 s;
2. 10,000 distinct calls sized through the Python API in one session: <= 2 s.

Run after `hipmem rocm fetch --rocm 6.4,7.2`:  python benchmarks/bench_sizing.py [RELEASE ...]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from hipmem.sizing.calls.spec import Call, make_call
from hipmem.sizing.rocm.catalog import load_catalog
from hipmem.sizing.rocm.fetch import cached_releases
from hipmem.sizing.session import SizingSession

RUNS = 7
DISTINCT_CALLS = 10_000


def one_call_end_to_end_s(release: str) -> list[float]:
    command = [sys.executable, "-m", "hipmem.cli.main", "size", "-d", "MI210", "--json",
               "--rocm", release, "rocsolver_dgetrf:m=1024,n=1024"]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)  # warm the page cache
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def distinct_calls(count: int, release: str) -> list[Call]:
    """A mix of routines with distinct sizes, built before timing starts."""
    catalog = load_catalog(release)
    makers = [
        lambda i: make_call("rocsolver_dgetrf", {"m": 64 + i, "n": 64 + i}, catalog),
        lambda i: make_call("rocsolver_sgeqrf", {"m": 64 + i, "n": 32 + i}, catalog),
        lambda i: make_call("rocblas_dtrsm", {"m": 16 + i, "n": 16 + i}, catalog),
        lambda i: make_call("rocsolver_zpotrf", {"n": 8 + i}, catalog),
    ]
    return [makers[i % len(makers)](i) for i in range(count)]


def session_of_distinct_calls_s(calls: list[Call], release: str) -> tuple[float, int]:
    with SizingSession("MI210", rocm=release) as session:
        start = time.perf_counter()
        results = session.size_many(calls)
        session_bytes = session.session_bytes
        elapsed = time.perf_counter() - start
    assert len({r.call.key() for r in results}) == len(calls)
    assert all(r.error is None for r in results)
    return elapsed, session_bytes


def hipblaslt_heuristic_ms(release: str) -> tuple[float, float]:
    """The first hipblasLtMatmulAlgoGetHeuristic of a worker (bf16, gfx90a), then the median of
    100 more distinct shapes, each timed alone through the worker protocol."""
    from hipmem.sizing.hipblaslt.locator import hipblaslt_for
    from hipmem.sizing.hipblaslt.matmul import parse_matmul
    from hipmem.sizing.rocm.locator import locate
    from hipmem.sizing.worker.process import WorkerProcess
    from hipmem.sizing.worker.virtual_device import resolve

    build = hipblaslt_for(locate(rocm=release))
    worker = WorkerProcess(build.runs_with, resolve("MI210"))
    try:
        times = []
        for n in range(1, 102):
            call = parse_matmul(f"hipblaslt_matmul:m=4096,n={n},k=4096,transA=T,a_type=bf16_r")
            start = time.perf_counter()
            list(worker.hipblaslt(build.library, [call.encode(call.max_workspace_bytes)]))
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        worker.close()
    return times[0], statistics.median(times[1:])


def main() -> None:
    releases = sys.argv[1:] or cached_releases()
    print(f"{'measure':52} {'value':>10} {'target':>8}")
    for release in releases:
        end_to_end = one_call_end_to_end_s(release)
        calls = distinct_calls(DISTINCT_CALLS, release)
        many_s, session_bytes = session_of_distinct_calls_s(calls, release)
        print(f"ROCm {release}")
        print(
            f"{'  one-call hipmem size, end to end (median of 7)':52} "
            f"{statistics.median(end_to_end):9.3f}s {'<= 1 s':>8}"
        )
        print(f"{'    (fastest of 7)':52} {min(end_to_end):9.3f}s")
        print(f"{f'  {DISTINCT_CALLS:,} distinct calls, one session, Python API':52} "
              f"{many_s:9.3f}s {'<= 2 s':>8}")  # fmt: skip
        print(f"    session size of those calls: {session_bytes:,} bytes")
        first_ms, later_ms = hipblaslt_heuristic_ms(release)
        print(f"{'  hipBLASLt heuristic, first call (reads solution data)':52} {first_ms:8.1f}ms")
        print(f"{'  hipBLASLt heuristic, later calls (median)':52} {later_ms:8.3f}ms")


if __name__ == "__main__":
    main()
