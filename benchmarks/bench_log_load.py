"""Load speed and memory of `replay.log_loader` on a 10,000,000-row log, beside pyarrow alone.

    python benchmarks/bench_log_load.py [--rows 10000000] [--rounds 3] [--source LOG]

Builds the log in a temporary directory by concatenating copies of a real log (default
`../shared/logs/gpt.csv.gz`), each copy shifted past the previous one in time (so the log
crosses midnight several times) and in address (so pointers stay distinct per copy). Then,
in alternating fresh subprocesses, it times `pyarrow.csv.read_csv(path)` with its defaults
and `load_log([path])`, keeping the best of the rounds for each, and reads each child's
peak resident memory (ru_maxrss). Targets: >= 3 M rows/s, loader time <= 1.5 x pyarrow's,
loader peak memory < 2 GB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "logs" / "gpt.csv.gz"
DAY_US = 86_400 * 1_000_000
TARGET_ROWS_PER_S = 3_000_000
TARGET_RATIO = 1.5
TARGET_PEAK_BYTES = 2 * 1024**3


def _time_us(text: str) -> int:
    hours, minutes, rest = text.split(":", 2)
    seconds, micros = rest.replace(":", ".").split(".")
    return ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + int(micros)


def _time_text(us: int) -> str:
    us %= DAY_US
    seconds, micros = divmod(us, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def build_log(source: Path, rows: int, target: Path) -> None:
    """Write `rows` data rows: shifted copies of `source` (Thread-era log) one after another."""
    with gzip.open(source, "rt") as f:
        header = f.readline().strip()
        base = [line.rstrip("\n").split(",") for line in f if line.strip()]
    times = [_time_us(r[1]) for r in base]
    span_us = max(times) - min(times) + 1_000_000
    # Shift each copy by a span plus a few hours so that 10M rows cross midnight a few times.
    step_us = span_us + 5 * 3600 * 1_000_000
    written = 0
    with target.open("w") as out:
        out.write(header + "\n")
        copy = 0
        while written < rows:
            shift_us, shift_ptr = copy * step_us, copy << 48
            lines = []
            for (thread, _, action, pointer, size, stream), t_us in zip(base, times, strict=True):
                if pointer not in ("(nil)", "0x0"):
                    pointer = hex(int(pointer, 16) + shift_ptr)
                when = _time_text(t_us + shift_us)
                lines.append(f"{thread},{when},{action},{pointer},{size},{stream}\n")
            take = min(len(lines), rows - written)
            out.writelines(lines[:take])
            written += take
            copy += 1


def measure(kind: str, path: str) -> dict[str, float]:
    """Run in a child: time one load, report seconds, rows and peak RSS bytes."""
    if kind == "pyarrow":
        import pyarrow.csv as pa_csv

        start = time.perf_counter()
        rows = pa_csv.read_csv(path).num_rows
    else:
        from hipmem.replay.logs.loader import load_log

        start = time.perf_counter()
        rows = len(load_log([path]).events)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"seconds": seconds, "rows": rows, "peak_bytes": peak}


def _child(kind: str, path: Path) -> dict[str, float]:
    command = [sys.executable, __file__, "--measure", kind, str(path)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return

    with tempfile.TemporaryDirectory(prefix="hipmem-bench-") as tmp:
        path = Path(tmp) / "big.csv"
        start = time.perf_counter()
        build_log(args.source, args.rows, path)
        size_mb = path.stat().st_size / 1e6
        build_s = time.perf_counter() - start
        print(f"built {args.rows:,} rows ({size_mb:,.0f} MB) in {build_s:.1f} s")
        _child("pyarrow", path)  # warm the page cache so both read from memory
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for kind in ("pyarrow", "loader"):
                result = _child(kind, path)
                if kind not in best or result["seconds"] < best[kind]["seconds"]:
                    best[kind] = result
                best[kind]["peak_bytes"] = max(best[kind]["peak_bytes"], result["peak_bytes"])
    report(best)


def report(best: dict[str, dict[str, float]]) -> None:
    machine = f"{platform.system()} {platform.release()}, {_cpus()} CPUs"
    machine += f", Python {platform.python_version()}"
    print(f"machine: {machine}")
    print(f"{'reader':<28}{'rows':>12}{'seconds':>10}{'M rows/s':>10}{'peak MB':>10}")
    readers = (("pyarrow", "pyarrow.csv.read_csv alone"), ("loader", "hipmem.replay.logs.loader"))
    for kind, label in readers:
        r = best[kind]
        print(
            f"{label:<28}{int(r['rows']):>12,}{r['seconds']:>10.2f}"
            f"{r['rows'] / r['seconds'] / 1e6:>10.2f}{r['peak_bytes'] / 1e6:>10,.0f}"
        )
    loader = best["loader"]
    rate = loader["rows"] / loader["seconds"]
    ratio = loader["seconds"] / best["pyarrow"]["seconds"]
    checks = [
        (f"loader >= {TARGET_ROWS_PER_S / 1e6:.0f} M rows/s", rate >= TARGET_ROWS_PER_S),
        (f"loader / pyarrow = {ratio:.2f} <= {TARGET_RATIO}", ratio <= TARGET_RATIO),
        (
            f"loader peak {loader['peak_bytes'] / 1024**3:.2f} GiB < 2 GiB",
            loader["peak_bytes"] < TARGET_PEAK_BYTES,
        ),
    ]
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
