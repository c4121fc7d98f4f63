"""Peak memory of `hipmem log inspect` (and `replay -r host`) on a highly compressed `.csv.gz`.

    python benchmarks/bench_csv_memory.py [--rows 20000000] [--rounds 3] [--replay]
        [--hipmem "OTHER/.venv/bin/python -m hipmem.cli.main" ...] [--keep BIG.csv.gz]

The log (issue 33's case): an allocate and a free of one pointer, the same two rows repeated
`--rows` times in all, gzip level 6 (20,000,000 rows: 3.3 MB on disk, about 1 GB inflated).
Each command runs in fresh processes, the commands alternating round by round (side by side,
so the machine's load falls on each alike); the figure is each child's peak resident memory
(ru_maxrss, what `/usr/bin/time -v` reports). Several `--hipmem` commands (another checkout's
interpreter, say) are compared, and their outputs must be the same bytes. Target: `log inspect
--json` of 20,000,000 rows under 1.6e9 bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HIPMEM = f"{shlex.quote(sys.executable)} -m hipmem.cli.main"
TARGET_PEAK_BYTES = 1.6e9
PAIR = (
    b"140213,10:00:00.000001,allocate,0x7f3a4c000000,1048576,0x0\n"
    b"140213,10:00:00.000002,free,0x7f3a4c000000,1048576,0x0\n"
)
HEADER = b"Thread,Time,Action,Pointer,Size,Stream\n"


def build_log(rows: int, target: Path) -> None:
    """`rows` data rows: the allocate/free pair repeated (an odd count ends on the allocate)."""
    block = PAIR * 50_000
    with gzip.open(target, "wb", compresslevel=6) as out:
        out.write(HEADER)
        pairs = rows // 2
        for _ in range(pairs // 50_000):
            out.write(block)
        out.write(PAIR * (pairs % 50_000))
        if rows % 2:
            out.write(PAIR.split(b"\n", 1)[0] + b"\n")


def run_once(command: str, args: list[str]) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS bytes, exit code and output digest of one fresh process."""
    argv = [*shlex.split(command), *args]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        wall_s = time.perf_counter() - started
        out.seek(0)
        digest = hashlib.sha256(out.read()).hexdigest()[:16]
    return wall_s, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hipmem", action="append", help="command that runs hipmem (repeatable)")
    parser.add_argument("--replay", action="store_true", help="also `replay LOG -r host`")
    parser.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = parser.parse_args()
    commands = args.hipmem or [HIPMEM]

    with tempfile.TemporaryDirectory(prefix="hipmem-bench-") as tmp:
        path = args.keep or Path(tmp) / "big.csv.gz"
        build_log(args.rows, path)
        print(f"built {args.rows:,} rows, {path.stat().st_size / 1e6:.1f} MB gzip")
        cases = [("log inspect --json", ["log", "inspect", str(path), "--json"])]
        if args.replay:
            cases.append(("replay -r host", ["replay", str(path), "-r", "host"]))
        print(f"machine: {platform.system()} {platform.release()}, {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at the start")  # fmt: skip
        for label, case_args in cases:
            results: dict[str, list[tuple[float, int, int, str]]] = {c: [] for c in commands}
            for _ in range(args.rounds):
                for command in commands:
                    results[command].append(run_once(command, case_args))
            report(label, results)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


def report(label: str, results: dict[str, list[tuple[float, int, int, str]]]) -> None:
    print(f"\n{label}")
    digests = set()
    for command, runs in results.items():
        peaks = [peak for _, peak, _, _ in runs]
        walls = [wall for wall, _, _, _ in runs]
        codes = sorted({code for _, _, code, _ in runs})
        digests |= {digest for _, _, _, digest in runs}
        print(f"  {command}")
        print(f"    peak RSS: {', '.join(f'{p / 2**30:.2f}' for p in peaks)} GiB; "
              f"median {statistics.median(peaks) / 1e9:.2f} GB "
              f"({statistics.median(peaks) / 2**30:.2f} GiB)")  # fmt: skip
        print(f"    wall: {', '.join(f'{w:.1f}' for w in walls)} s; exit {codes}")
        if label.startswith("log inspect"):
            ok = statistics.median(peaks) < TARGET_PEAK_BYTES
            print(f"    {'PASS' if ok else 'FAIL'}  median peak < {TARGET_PEAK_BYTES:.1e} bytes")
    if label.startswith("replay"):  # its table holds wall times and latencies
        print("  outputs: not compared (they hold timings)")
    else:
        print(f"  outputs: {'the same bytes' if len(digests) == 1 else 'DIFFER: ' + str(digests)}")


if __name__ == "__main__":
    main()
