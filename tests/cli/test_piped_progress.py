"""Piped progress (hipmem_cli/piped_progress.py): a line per step and per end, few between,
and the last line said again while nothing moves. Periods of 0 (always due) and an hour
(never due within a test) make each rule's outcome certain."""

from __future__ import annotations

import time

from hipmem.cli.piped_progress import PipedProgress, piped_progress

HOUR_S = 3600.0


def test_a_line_per_step_and_per_end_none_between_within_the_period() -> None:
    said: list[str] = []
    progress = PipedProgress("fleet", HOUR_S, said.append)
    progress(0, None, "starting a local cluster ...")
    for done in range(0, 1001, 100):
        progress(done, 1000, "logs hashed")
    for done in range(0, 11):
        progress(done, 10, f"pairs, {2 * done:,} events replayed")
    progress.heartbeat()  # nothing for an hour: nothing said again
    assert said == [
        "fleet: starting a local cluster ...",
        "fleet: 0/1,000 logs hashed",  # a new kind of work: at once
        "fleet: 1,000/1,000 logs hashed",  # its end
        "fleet: 0/10 pairs, 0 events replayed",  # numbers aside, the label changed
        "fleet: 10/10 pairs, 20 events replayed",
    ]


def test_every_change_is_said_once_the_period_has_passed() -> None:
    said: list[str] = []
    progress = PipedProgress("fleet", 0.0, said.append)
    for done in range(3):
        progress(done, 5, "logs hashed")
    assert said == ["fleet: 0/5 logs hashed", "fleet: 1/5 logs hashed", "fleet: 2/5 logs hashed"]


def test_while_nothing_moves_the_last_line_is_said_again() -> None:
    said: list[str] = []
    with piped_progress("fleet", 0.01, said.append) as progress:
        progress(0, 2, "pairs, 0 events replayed")
        deadline = time.monotonic() + 30  # the heartbeat's thread says it, within 25 ms
        while len(said) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert said[0] == "fleet: 0/2 pairs, 0 events replayed"
    assert said[1].startswith("fleet: 0/2 pairs, 0 events replayed (still working, ")
    assert said[1].endswith(" s)")
