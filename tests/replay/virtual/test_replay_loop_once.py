"""The C++ drivers' replay loop is written once (replay/virtual/vcuda/replay_loop.hpp): PyTorch's
(vcuda_replay.cpp) and RMM's (rmm_replay.cpp) drivers include it and share no other run of
lines. Their figures, byte-exact to the H200's, are checked by test_virtual_gpu.py and
test_rmm_virtual.py, which build and run both."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LOOP = REPO / "replay" / "virtual" / "vcuda" / "replay_loop.hpp"
DRIVERS = (REPO / "replay" / "virtual" / "vcuda" / "vcuda_replay.cpp",
           REPO / "replay" / "rmm" / "csrc" / "rmm_replay.cpp")  # fmt: skip
RUN = 6  # lines in a row that make a copy (as the `duplicates` tool counts them)


def _code_lines(path: Path) -> list[str]:
    """The lines of code, stripped, without comments, blank lines or lone braces."""
    lines = []
    for line in path.read_text().splitlines():
        code = re.sub(r"//.*", "", line).strip()
        if code and code not in ("{", "}", "};", "});"):
            lines.append(code)
    return lines


def _runs(lines: list[str]) -> set[tuple[str, ...]]:
    return {tuple(lines[i : i + RUN]) for i in range(len(lines) - RUN + 1)}


def shared_runs(a: list[str], b: list[str]) -> set[tuple[str, ...]]:
    return _runs(a) & _runs(b)


def test_both_drivers_include_the_loop_and_share_no_copy_of_it() -> None:
    loop = _code_lines(LOOP)
    assert (
        "Pass run_pass(ProgramArrays const& p, Allocator& allocator, bool stop_on_failure," in loop
    )
    for driver in DRIVERS:
        assert '#include "replay_loop.hpp"' in driver.read_text(), driver
        assert shared_runs(loop, _code_lines(driver)) == set(), driver
    assert shared_runs(*(_code_lines(driver) for driver in DRIVERS)) == set()


def test_the_check_sees_a_copy_of_the_loop() -> None:
    loop = _code_lines(LOOP)
    start = loop.index("for (; i < n_ops; ++i) {")
    driver_with_a_copy = [*_code_lines(DRIVERS[0]), *loop[start : start + RUN + 2]]
    assert len(shared_runs(loop, driver_with_a_copy)) == 3
