"""`check` and `recommend` on call logs answer about the whole log or not at all: a line that
is not a call could change the answer (with the real rocBLAS/rocSOLVER of the `rocm72` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.gate_inputs import assert_named_failure, hipmem

REPO = Path(__file__).resolve().parents[2]
VALUE = str(1 << 30)


def _log_with_bad_lines(tmp_path: Path) -> Path:
    good = (REPO / "samples" / "rocblas-bench.log").read_text().splitlines()[:3]
    bad = ["./rocblas-bench -f gemm -r f32_r -m 4.5 -n 1", "garbage line"]
    path = tmp_path / "calls.log"
    path.write_text("\n".join(good + bad) + "\n")
    return path


def test_check_and_recommend_refuse_a_call_log_with_skipped_lines(
    tmp_path: Path, rocm72: Path
) -> None:
    log = _log_with_bad_lines(tmp_path)
    common = ("--rocm", "7.2", "--device", "MI210", "--from-log", str(log))
    for args in (("check", *common, "--value", VALUE), ("recommend", *common)):
        ran = hipmem(*args)
        line = assert_named_failure(ran, codes=(1,))
        assert line == (
            f"Error: 2 unreadable entries skipped: {log}:4: bad argument: rocblas_sgemm: m=4.5: "
            f"expected a whole number in plain decimal digits; {log}:5: not a call: garbage "
            "line; no answer from part of the input (--accept-skipped answers from the "
            "readable rest)"
        )
        assert ran.stdout == ""
    accepted = hipmem("check", *common, "--value", VALUE, "--accept-skipped", "--json")
    assert accepted.code == 0, accepted.stderr
    assert json.loads(accepted.stdout)["skipped_lines"]["count"] == 2
    assert "(accepted: --accept-skipped)" in accepted.stderr
    # `size` is no gate: it sizes what it read and says what it did not.
    sized = hipmem("size", *common, "--json")
    assert sized.code == 0, sized.stderr


def test_a_call_log_with_no_readable_line_is_nothing_to_answer(
    tmp_path: Path, rocm72: Path
) -> None:
    log = tmp_path / "garbage.log"
    log.write_text("garbage\nmore garbage\n")
    for command in ("check", "recommend", "size"):
        ran = hipmem(command, "--rocm", "7.2", "--device", "MI210", "--from-log",
                     str(log), "--accept-skipped" if command != "size" else "--json")  # fmt: skip
        line = assert_named_failure(ran, codes=(1,))
        assert line.startswith(f"Error: nothing to answer: 2 unreadable entries skipped: {log}:1")
