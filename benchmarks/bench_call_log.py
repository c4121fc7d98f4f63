"""Benchmark: size a 1,000,000-line rocBLAS bench log with 5,000 distinct calls, end to end.

Target (issue 4): <= 10 s. Writes the log to a temporary directory, then times
  1. reading it (stream, count identical lines, parse each distinct line once),
  2. the whole `hipmem size --device MI210 --from-log LOG --json --top 10` command.

    HIPMEM_CACHE_DIR=... python benchmarks/bench_call_log.py [--lines N] [--distinct N]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hipmem.sizing.calls.logs import read_call_log

_TRANS = ("N", "T")


def distinct_lines(count: int, seed: int = 4) -> list[str]:
    """`count` different rocblas-bench lines: gemm, HPA gemm_ex, trsm, gemv and nrm2."""
    rng = random.Random(seed)
    lines: set[str] = set()
    while len(lines) < count:
        m, n, k = (rng.choice((16, 32, 64, 128, 256, 512, 1024, 2048)) * rng.randint(1, 4)
                   for _ in range(3))  # fmt: skip
        kind = rng.randrange(5)
        if kind == 0:
            ta, tb = rng.choice(_TRANS), rng.choice(_TRANS)
            lda, ldb = (m if ta == "N" else k), (k if tb == "N" else n)
            lines.add(
                f"./rocblas-bench -f gemm -r f32_r --transposeA {ta} --transposeB {tb} -m {m} "
                f"-n {n} -k {k} --alpha 1 --lda {lda} --ldb {ldb} --beta 0 --ldc {m}"
            )
        elif kind == 1:
            lines.add(
                f"./rocblas-bench -f gemm_ex --transposeA N --transposeB N -m {m} -n {n} -k {k} "
                f"--alpha 1 --a_type f16_r --lda {m} --b_type f16_r --ldb {k} --beta 0 "
                f"--c_type f16_r --ldc {m} --d_type f16_r --ldd {m} --compute_type f32_r "
                "--algo 0 --solution_index 0 --flags 0"
            )
        elif kind == 2:
            lines.add(
                f"./rocblas-bench -f trsm -r f64_r --side L --uplo L --transposeA N --diag N "
                f"-m {m} -n {n} --alpha 1 --lda {m} --ldb {m}"
            )
        elif kind == 3:
            lines.add(
                f"./rocblas-bench -f gemv -r f32_r --transposeA N -m {m} -n {n} --alpha 1 "
                f"--lda {m} --incx 1 --beta 0 --incy 1"
            )
        else:
            lines.add(f"./rocblas-bench -f nrm2 -r f64_r -n {m * n} --incx 1")
    return sorted(lines)


def write_log(path: Path, total_lines: int, distinct: int) -> None:
    """Every distinct line at least once, the rest drawn at random (as an application repeats)."""
    rng = random.Random(7)
    pool = distinct_lines(distinct)
    order = pool + [rng.choice(pool) for _ in range(total_lines - len(pool))]
    rng.shuffle(order)
    path.write_text("\n".join(order) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--distinct", type=int, default=5_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        log_path = Path(directory) / "rocblas-bench.log"
        write_log(log_path, options.lines, options.distinct)
        size_mib = log_path.stat().st_size / 2**20
        print(f"log: {options.lines:,} lines, {options.distinct:,} distinct, {size_mib:.0f} MiB")

        started = time.perf_counter()
        log = read_call_log(log_path)
        read_s = time.perf_counter() - started
        assert log.call_count == options.lines and len(log.calls) == options.distinct
        print(f"read + count + parse: {read_s:.2f} s")

        command = [sys.executable, "-m", "hipmem.cli.main", "size", "--device", "MI210"]
        command += ["--from-log", str(log_path), "--json", "--top", "10"]
        started = time.perf_counter()
        run = subprocess.run(command, capture_output=True, text=True, check=False)
        total_s = time.perf_counter() - started
        if run.returncode not in (0, 1):
            sys.exit(f"hipmem size failed ({run.returncode}): {run.stderr.strip()}")
        result = json.loads(run.stdout)
    print(f"hipmem size end to end: {total_s:.2f} s (target <= 10 s)")
    print(f"session: {result['session_bytes']:,} bytes over {result['distinct_calls']:,} calls")
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}")


if __name__ == "__main__":
    main()
