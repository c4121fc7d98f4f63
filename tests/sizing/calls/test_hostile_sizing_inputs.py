"""Hostile and damaged call logs, workload files and call specs (issue 12): each input is
generated here and run in a subprocess under an address-space limit and a deadline
(tests/bounded.py), so a regression fails the test instead of taking the machine down."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hipmem.sizing.calls.log_formats import BAD_ARGUMENT, TOO_LONG, split_trace_fields
from hipmem.sizing.calls.logs import read_call_log
from hipmem.sizing.calls.spec import parse_call
from hipmem.sizing.calls.workload_file import read_workload
from hipmem.sizing.errors import BadArgument, CallLogError, WorkloadError
from tests.bounded import hipmem_bounded, python_bounded

GEMM = "./rocblas-bench -f gemm -r f32_r --transposeA N --transposeB N -m 64 -n 64 -k 64"


def _billion_laughs(depth: int = 12) -> str:
    """~1 KB of YAML that expands to 10**depth strings."""
    lines = ['a0: &a0 "lol"']
    for level in range(1, depth + 1):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


# -- must not take the machine down ------------------------------------------------------------
def test_a_yaml_alias_bomb_in_a_workload_is_refused_before_expansion(tmp_path: Path) -> None:
    bomb = _billion_laughs()
    workload = tmp_path / "bomb.yaml"
    workload.write_text(f"version: 1\n{bomb}calls:\n  - call: *a12\n")
    done = hipmem_bounded("size", "--device", "MI210", "--workload", str(workload))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"Error: {workload}:3: YAML alias *a0 refused"), done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_a_yaml_alias_bomb_in_a_profile_log_is_refused(tmp_path: Path) -> None:
    bomb = _billion_laughs().replace("\n", ", ").rstrip(", ")
    log = tmp_path / "profile.yaml"
    good = '- { rocblas_function: "rocblas_sgemm", M: 64, N: 64, K: 64, call_count: 2 }'
    log.write_text(f"{good}\n- {{ rocblas_function: rocblas_sgemm, {bomb}, M: *a12 }}\n")
    done = hipmem_bounded("size", "--device", "MI210", "--from-log", str(log))
    assert done.returncode == 2, done.stderr
    assert f"Error: {log}:2: YAML alias *a0 refused" in done.stderr


def test_counts_stay_integers_in_workloads(tmp_path: Path, rocm: Path) -> None:
    workload = tmp_path / "many.yaml"
    workload.write_text(
        "version: 1\ncalls:\n"
        "  - call: rocsolver_dgetrf:m=64,n=64\n    count: 1000000000000\n"
        "  - call: rocsolver_dgetrf:m=64,n=64\n    count: 4\n"
        f"  - call: rocsolver_dgetrs:n=64,nrhs=1\n    count: {2**63 - 1}\n"
    )
    done = hipmem_bounded(
        "size", "--device", "MI210", "--workload", str(workload), "--json", memory_bytes=8 << 30
    )
    assert done.returncode == 0, done.stderr
    counts = [call["count"] for call in json.loads(done.stdout)["calls"]]
    assert counts == [1_000_000_000_004, 2**63 - 1]


@pytest.mark.parametrize("count", [2**63, 10**29])
def test_a_count_past_int64_is_one_line(tmp_path: Path, count: int) -> None:
    workload = tmp_path / "huge.yaml"
    workload.write_text(f"version: 1\ncalls:\n  - call: dgetrf:m=8,n=8\n    count: {count}\n")
    done = hipmem_bounded("size", "--device", "MI210", "--workload", str(workload))
    assert done.returncode == 2
    assert done.stderr.startswith(f"Error: {workload}:4: calls/0/count: {count} is greater than")


def test_counts_added_past_int64_are_one_line(tmp_path: Path) -> None:
    workload = tmp_path / "sum.yaml"
    entry = f"  - call: rocsolver_dgetrf:m=8,n=8\n    count: {2**62}\n"
    workload.write_text("version: 1\ncalls:\n" + entry * 2)
    done = hipmem_bounded("size", "--device", "MI210", "--workload", str(workload))
    assert done.returncode == 2
    assert "counted more than 9,223,372,036,854,775,807 times" in done.stderr


def test_profile_call_counts_stay_integers(tmp_path: Path) -> None:
    log = tmp_path / "profile.yaml"
    entry = '- {{ rocblas_function: "rocblas_sgemm", M: 64, N: 64, K: 64, call_count: {} }}\n'
    log.write_text(entry.format(30_000_000) + entry.format(2**63 - 1 - 30_000_000))
    log.write_text(log.read_text() + entry.format(2**63))
    done = python_bounded(
        "from pathlib import Path; from hipmem.sizing.calls.logs import read_call_log\n"
        f"log = read_call_log(Path({str(log)!r}))\n"
        "print([count for _, count in log.calls], [(p.line_number, p.message) "
        "for p in log.problems])",
        memory_bytes=1 << 30,
        deadline_s=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"[{2**63 - 1}] [(3, 'call_count {2**63} is not a whole number 1..2**63-1')]"
    )


def test_a_trace_line_of_many_commas_is_skipped_in_linear_time(tmp_path: Path) -> None:
    log = tmp_path / "trace.log"
    long_line = "rocblas_sgemm," + ",".join(["1"] * 640_000)  # 1.3 MB
    log.write_text(f"{long_line}\nrocblas_sgemm,N,N,64,64,64,1,0x1,64,0x2,64,0,0x3,64\n")
    started = time.monotonic()
    done = hipmem_bounded(
        "size", "--device", "MI210", "--from-log", str(log), "--strict", deadline_s=60
    )
    assert time.monotonic() - started < 60
    assert done.returncode == 1
    assert f"Error: {log}:1: too long: longer than 65,536 bytes, skipped unread" in done.stderr


def test_trace_splitting_is_linear_below_the_cap() -> None:
    pieces = ["(1,2)", "x", "(3"] * 5_000  # 60 KB, every kind of piece
    text = ",".join(pieces)
    started = time.monotonic()
    fields = split_trace_fields(text)
    assert time.monotonic() - started < 1.0
    assert fields[:2] == ["(1,2)", "x"]
    assert split_trace_fields("f,(1.5,2),N,(3") == ["f", "(1.5,2)", "N", "(3"]
    assert split_trace_fields("f,(1,2,3") == ["f", "(1", "2", "3"]


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (["size", "--device", "MI210", "--from-log"], "not a file"),
        (["recommend", "--device", "MI210", "--from-log"], "not a file"),
        (["size", "--device", "MI210", "--workload"], "not a file"),
        (["log", "inspect"], "not a log file"),
        (["replay", "-r", "host", "--backend", "host"], "not a log file"),
    ],
)
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_character_device_is_usage_in_every_command(
    command: list[str], what: str, device: str
) -> None:
    """Issue 48: `--from-log /dev/urandom` exited 1 where every other command exits 2."""
    done = hipmem_bounded(*command, device)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]  # a gate may warn of the release first
    assert last == f"Error: {device}: is a character device, {what}"


def test_an_endless_line_through_a_pipe_is_refused_at_the_cap(tmp_path: Path) -> None:
    fifo = tmp_path / "zeros"
    os.mkfifo(fifo)
    feeder = subprocess.Popen(  # endless zeros into the FIFO until the reader goes away
        ["sh", "-c", f"cat /dev/zero > {fifo}"], stderr=subprocess.DEVNULL
    )
    try:
        done = hipmem_bounded(
            "size", "--device", "MI210", "--from-log", str(fifo), memory_bytes=1 << 30
        )
    finally:
        feeder.kill()
        feeder.wait()
    assert done.returncode == 1
    assert "a line with no end after 64 MiB: not a call log, reading stopped" in done.stderr


def test_a_fifo_nobody_writes_to_reads_as_empty_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "silent"
    os.mkfifo(fifo)
    done = hipmem_bounded("size", "--device", "MI210", "--from-log", str(fifo), deadline_s=30)
    assert done.returncode == 2
    assert "no calls to size" in done.stderr


def test_a_fifo_is_read_like_a_pipe(tmp_path: Path) -> None:
    fifo = tmp_path / "calls"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("w") as writer:
            writer.write(f"{GEMM}\n" * 3)

    thread = threading.Thread(target=feed)
    thread.start()
    time.sleep(1.0)  # let the writer reach open(): a FIFO with no writer yet reads as empty
    log = read_call_log(fifo)
    thread.join(timeout=10)
    assert [count for _, count in log.calls] == [3]


def test_distinct_calls_are_capped(tmp_path: Path) -> None:
    log = tmp_path / "many.log"
    log.write_text("".join(f"{GEMM.replace('-m 64', f'-m {m}')}\n" for m in range(1, 40)))
    done = python_bounded(
        "from pathlib import Path; import hipmem.sizing.calls.logs as c\n"
        "c.MAX_DISTINCT_CALLS = 25; c._DISTINCT_LINES_HELD = 10\n"
        f"c.read_call_log(Path({str(log)!r}))",
        memory_bytes=1 << 30,
    )
    assert done.returncode != 0
    assert f"CallLogError: {log}:26: more than 25 distinct calls" in done.stderr


def test_lines_met_again_in_a_later_batch_are_counted_once(tmp_path: Path) -> None:
    import hipmem.sizing.calls.logs as call_logs

    log = tmp_path / "repeat.log"
    log.write_text(
        "".join(f"{GEMM.replace('-m 64', f'-m {m % 7 + 1}')}\nnoise\n" for m in range(70))
    )
    held = call_logs._DISTINCT_LINES_HELD
    call_logs._DISTINCT_LINES_HELD = 3
    try:
        read = read_call_log(log)
    finally:
        call_logs._DISTINCT_LINES_HELD = held
    assert sorted(count for _, count in read.calls) == [10] * 7
    assert [(p.line_number, p.count) for p in read.problems] == [(2, 70)]


# -- nothing echoed raw: the promised line instead of an internal error ------------------------
def test_a_workload_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    workload = tmp_path / "latin1.yaml"
    workload.write_bytes(b"version: 1\n# caf\xe9\ncalls:\n  - call: dgetrf:m=8,n=8\n")
    done = hipmem_bounded("size", "--device", "MI210", "--workload", str(workload))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"Error: {workload}:2: not UTF-8 text (byte 0xe9 at offset 16)")


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("  - routine: dgetrf\n    args: {5: 3}\n", 4, "calls/0/args: 5 is not an argument name"),
        ("  - routine: dgetrf\n    args: {m: 8, n: 8, m: 9}\n", 4, "key 'm' given twice"),
        ("  - call: dgetrf:m=8,n=8\n    count: 2\n    count: 3\n", 5, "key 'count' given twice"),
        ("  - routine: dgetrf\n    args: {m: 4_000, n: 8}\n", 3, "m=4_000: expected a whole"),
        ("  - routine: dgetrf\n    args: {m: '0x10', n: 8}\n", 3, "m=0x10: expected a whole"),
        ("  - routine: dgetrf\n    args: {m: -8, n: 8}\n", 3, "m=-8: a dimension cannot be"),
        ("  - routine: dgetrf\n    args: {m: 1:30, n: 8}\n", 3, "m=1:30: expected a whole"),
        ("  - routine: dgetrf\n    args: {m: 8.0, n: 8}\n", 3, "m=8.0: expected a whole number,"),
    ],
)  # fmt: skip
def test_workload_rules(tmp_path: Path, body: str, line: int, message: str) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text("version: 1\ncalls:\n" + body)
    with pytest.raises(WorkloadError) as caught:
        read_workload(workload)
    assert str(caught.value).startswith(f"{workload}:{line}: ")
    assert message in str(caught.value)


def test_a_workload_is_capped_in_size_and_devices_are_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="is a character device, not a file"):
        read_workload(Path("/dev/zero"))
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (17 << 20))
    with pytest.raises(WorkloadError, match="longer than 16,777,216 bytes, refused"):
        read_workload(big)


def test_a_deeply_nested_workload_is_one_line(tmp_path: Path) -> None:
    workload = tmp_path / "deep.yaml"
    workload.write_text("version: 1\ncalls: " + "[" * 100_000 + "]" * 100_000 + "\n")
    done = hipmem_bounded("size", "--device", "MI210", "--workload", str(workload))
    assert done.returncode == 2
    # libyaml stops at its depth bound on line 2; PyYAML's own parser, where libyaml is
    # missing, at the recursion limit (line 1)
    assert done.stderr.startswith(f"Error: {workload}:"), done.stderr
    assert done.stderr.endswith(": YAML nested too deeply\n"), done.stderr


# -- loose parsing: one rule everywhere -----------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dgetrf:m=４０,n=8", "m=４０: expected a whole number in plain decimal digits"),
        ("dgetrf:m=4_000,n=8", "m=4_000: expected a whole number in plain decimal digits"),
        ("dgetrf:m=0x10,n=8", "m=0x10: expected a whole number in plain decimal digits"),
        ("dgetrf:m=-1,n=8", "m=-1: a dimension cannot be negative"),
        ("dgemv:m=8,n=8,lda=-8", "lda=-8: a dimension cannot be negative"),
        ("dgetrf:m=8,n=8,m=9", "argument 'm' given twice"),
        ("rocblas_gemm_ex:m=8,n=8,k=8,a_type=f16_r,b_type=f16_r,c_type=f16_r,d_type=f16_r,"
         "compute_type=i8_r", "is not a type combination rocBLAS implements"),
        ("rocblas_gemm_ex:m=8,n=8,k=8,a_type=invalid,b_type=f16_r,c_type=f16_r,d_type=f16_r",
         "a_type=invalid is not a data type"),
        ("rocblas_gemm_ex:m=8,n=8,k=8,a_type=f17_r", "a_type=f17_r: not a rocblas_datatype"),
        ("rocblas_trsm_ex:m=8,n=8,compute_type=f16_r", "compute_type=f16_r is not one of"),
    ],
)  # fmt: skip
def test_call_spec_rules(text: str, message: str) -> None:
    with pytest.raises(BadArgument) as caught:
        parse_call(text)
    assert message in str(caught.value)


def test_negative_increments_are_still_allowed() -> None:
    assert parse_call("dgemv:m=8,n=8,incx=-1").args["incx"] == -1


def test_repeated_options_in_a_log_line_are_refused_as_on_the_command_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "bench.log"
    log.write_text(f"{GEMM} -m 8\n{GEMM.replace('--transposeA N', '--transposeA N --lda 64')}\n")
    read = read_call_log(log)
    assert [(p.line_number, p.kind, p.message) for p in read.problems] == [
        (1, BAD_ARGUMENT, "option -m given twice")
    ]
    profile = tmp_path / "profile.yaml"
    profile.write_text('- { rocblas_function: "rocblas_sgemm", M: 8, N: 8, K: 8, M: 9 }\n')
    problems = read_call_log(profile).problems
    assert [(p.kind, p.message) for p in problems] == [
        (BAD_ARGUMENT, "key 'M' given twice (keep one)")
    ]


def test_a_long_line_is_reported_with_its_reason(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * (200 << 10) + b"\n" + GEMM.encode() + b"\n")
    read = read_call_log(log)
    assert [(p.line_number, p.kind) for p in read.problems] == [(1, TOO_LONG)]
    assert read.line_count == 2 and [count for _, count in read.calls] == [1]


def test_an_unreadable_call_log_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CallLogError, match="is a directory, not a file"):
        read_call_log(tmp_path)


def test_a_cache_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("")
    done = hipmem_bounded(
        "size", "--device", "MI210", "dgetrf:m=8,n=8",
        env={**os.environ, "HIPMEM_CACHE_DIR": str(not_a_folder), "HIPMEM_ROCM_LIBDIR": ""},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: HIPMEM_CACHE_DIR={not_a_folder} is not a directory"


def test_a_repeated_resource_option_is_refused() -> None:
    from hipmem.replay.engine.resources import parse_spec
    from hipmem.replay.errors import ReplayUsageError

    with pytest.raises(
        ReplayUsageError,
        match=r"spec='host:limit=1MiB,limit=2MiB': limit "
        "given twice",
    ):
        parse_spec("host:limit=1MiB,limit=2MiB")
