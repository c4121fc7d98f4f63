"""Sweep speed: 100,000 points of one call sized in one worker session (target: seconds).

1. through the Python API (`SizingSession.sweep`), per kind of sweep: a batch count (no
   default depends on it), a dimension (leading dimension and strides recomputed at every
   point), and f16 gemm_ex over k (the library looks up its tuned kernels at every point);
2. `hipmem size --sweep ... --json` end to end, a new process (JSON of every point included);
3. the same sweep again in the session: every point known, none asked.

Run after `hipmem rocm fetch --rocm 7.2`:  python benchmarks/bench_sweep.py [RELEASE]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from hipmem.sizing.session import SizingSession

POINTS = 100_000
SWEEPS = [
    ("batch count", "rocblas_dtrsm_batched:m=512,n=512", f"batch_count=1..{POINTS}"),
    ("dimension", "rocsolver_dgetrf:m=512", f"n=1..{POINTS}"),
    (
        "f16 gemm_ex over k",
        "rocblas_gemm_ex:m=1024,n=1024,a_type=f16_r,b_type=f16_r,c_type=f16_r,d_type=f16_r,"
        "compute_type=f32_r",
        f"k=1..{POINTS}",
    ),
]


def _worker_cpu_s(session: SizingSession) -> float:
    """CPU seconds the worker process has used (Linux /proc): on a shared machine wall time
    says more about the other jobs than about hipmem."""
    pid = session._worker._proc.pid if session._worker._proc else 0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    release = sys.argv[1] if len(sys.argv) > 1 else "7.2"
    print(f"ROCm {release}, virtual MI210, {POINTS:,} points per sweep")
    with SizingSession("MI210", rocm=release) as session:
        for name, call, sweep in SWEEPS:
            worker_cpu_s, cpu_s = _worker_cpu_s(session), time.process_time()
            start = time.perf_counter()
            swept = session.sweep(call, sweep)
            elapsed = time.perf_counter() - start
            cpu_s = time.process_time() - cpu_s
            worker_cpu_s = _worker_cpu_s(session) - worker_cpu_s
            print(
                f"  API, {name:20} {elapsed:6.2f} s  ({elapsed / POINTS * 1e6:5.1f} µs/point; "
                f"CPU: hipmem {cpu_s:.2f} s, worker {worker_cpu_s:.2f} s; "
                f"max {swept.max_bytes:,} bytes at {swept.max_text(most=2)}, "
                f"{len(swept.steps()):,} steps)"
            )
        name, call, sweep = SWEEPS[0]
        start = time.perf_counter()
        again = session.sweep(call, sweep)
        elapsed = time.perf_counter() - start
        print(f"  API, the same again      {elapsed:6.2f} s  ({again.asked_count} points asked)")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"  peak resident memory of this process after {len(SWEEPS) + 1} sweeps: {peak_mib:.0f} MiB"
    )
    name, call, sweep = SWEEPS[0]
    command = [sys.executable, "-m", "hipmem.cli.main", "size", "-d", "MI210", "--rocm",
               release, "--json", "--sweep", sweep, call]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    print(
        f"  hipmem size --sweep --json, {name}, end to end: {elapsed:.2f} s "
        f"({len(done.stdout) / 2**20:.1f} MiB of JSON)"
    )


if __name__ == "__main__":
    main()
