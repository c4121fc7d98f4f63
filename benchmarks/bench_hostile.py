"""Benchmark: how fast, and in how much memory, hipmem turns away hostile and damaged input.

Each case runs in a fresh process; its wall time and peak resident memory (ru_maxrss of the
child) are reported. The tests (tests/**/test_hostile_*.py) check the behaviour under generous
limits; this says what the bounded paths actually cost.

    python benchmarks/bench_hostile.py
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "serve-first-2000.csv.gz"
HIPMEM = [sys.executable, "-m", "hipmem.cli.main"]
GEMM = "./rocblas-bench -f gemm -r f32_r --transposeA N --transposeB N -m 64 -n 64 -k 64\n"


def _run(argv: list[str], stdin: int | None = None) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MiB, exit code of one fresh process."""
    started = time.perf_counter()
    child = subprocess.Popen(
        argv, cwd=REPO, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall_s = time.perf_counter() - started
    return wall_s, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def _cases(folder: Path) -> list[tuple[str, list[str]]]:
    trace = folder / "commas.log"  # the 640k-comma line: skipped at the cap
    trace.write_text("rocblas_sgemm," + ",".join(["1"] * 640_000) + "\n" + GEMM)
    capped = folder / "capped.log"  # just under the cap: split, and refused by its fields
    capped.write_text("rocblas_sgemm," + ",".join(["(1"] * 21_000) + "\n" + GEMM)
    profile = folder / "counts.yaml"
    entry = '- {{ rocblas_function: "rocblas_sgemm", M: {m}, N: 8, K: 8, call_count: {c} }}\n'
    profile.write_text("".join(entry.format(m=m, c=2**62) for m in range(1, 101)))
    workload = folder / "bomb.yaml"
    levels = ['a0: &a0 "lol"'] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 13)
    ]
    workload.write_text("version: 1\n" + "\n".join(levels) + "\ncalls:\n  - call: *a12\n")
    plain = gzip.decompress(SAMPLE.read_bytes())
    header, body = plain.split(b"\n", 1)
    damaged = folder / "damaged.csv.gz"  # 1,000,000 rows, two bytes flipped halfway
    packed = bytearray(gzip.compress(header + b"\n" + body * 500, compresslevel=1))
    packed[len(packed) // 2] ^= 0xFF
    packed[len(packed) // 2 + 1] ^= 0xFF
    damaged.write_bytes(bytes(packed))
    long_field = folder / "long-field.csv"  # 1,000,000 rows, one with a 5 MiB field
    rows = body.split(b"\n")
    long_field.write_bytes(
        header + b"\n" + body * 250 + rows[0].replace(b"0x", b"0x" + b"f" * (5 << 20)) + b"\n"
        + body * 250 + b"1,2\n"
    )  # fmt: skip
    # Written a piece at a time: a child's peak RSS counts from the parent's at fork.
    call = "  - call: rocsolver_dgetrf:m=64,n=64\n"
    fifty, repeated = folder / "fifty.yaml", folder / "repeated.yaml"  # 2 MB, 16 MB
    for path, copies in ((fifty, 1), (repeated, 8)):
        with path.open("w") as out:
            out.write("version: 1\ncalls:\n")
            for _ in range(copies):
                out.write(call * 50_000)
    memo = folder / "memo.pickle.gz"  # 15 M memo references to one list (29 KB)
    with gzip.open(memo, "wb", compresslevel=9) as out:
        out.write(b"\x80\x04}(\x8c\x0ddevice_traces]](")
        for _ in range(15):
            out.write(b"K\x07" * 1_000_000)
        out.write(b"ea\x8c\x08segments]u.")
    sizes = ["size", "--device", "MI210"]
    return [
        ("workload, one call 50,000 times (2 MB)", [*HIPMEM, *sizes, "--workload", str(fifty)]),
        (
            "workload, one call 400,000 times (16 MB)",
            [*HIPMEM, *sizes, "--workload", str(repeated)],
        ),
        ("snapshot of 15 M memo references (29 KB)", [*HIPMEM, "log", "inspect", str(memo)]),
        ("trace line of 640,000 commas (1.3 MB)", [*HIPMEM, *sizes, "--from-log", str(trace)]),
        ("trace line of 21,000 '(1' fields (63 KiB)", [*HIPMEM, *sizes, "--from-log", str(capped)]),
        ("profile log, 100 × call_count 2**62", [*HIPMEM, *sizes, "--from-log", str(profile)]),
        ("workload alias bomb (10**12 strings)", [*HIPMEM, *sizes, "--workload", str(workload)]),
        ("endless line through a pipe", [*HIPMEM, *sizes, "--from-log", "/dev/stdin"]),
        ("corrupt gzip, 1,000,000 rows", [*HIPMEM, "log", "inspect", str(damaged), "--json"]),
        ("one 5 MiB field, 1,000,000 rows", [*HIPMEM, "log", "inspect", str(long_field), "--json"]),
    ]


def main() -> None:
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print("| input | exit | seconds | peak RSS |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        # A child writes the inputs: a case's peak RSS (ru_maxrss) counts from what its
        # parent held when it forked, so the parent stays small.
        written = subprocess.run(
            [sys.executable, __file__, "--write", tmp], check=True, capture_output=True, text=True
        )
        for label, argv in json.loads(written.stdout):
            if "pipe" in label:
                with subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE) as zeros:
                    wall_s, rss_mib, code = _run(argv, stdin=zeros.stdout.fileno())  # type: ignore[union-attr]
                    zeros.kill()
            else:
                wall_s, rss_mib, code = _run(argv)
            print(f"| {label} | {code} | {wall_s:.2f} | {rss_mib:,.0f} MiB |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        print(json.dumps(_cases(Path(sys.argv[2]))))
    else:
        main()
