"""The one confirmation of a capacity search (replay/capacity/confirmation.py): the size found
replays `confirm_runs` more times, or the search goes on above it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hipmem.replay.capacity.confirmation import CONFIRM_RUNS, confirmed


def _replays(answers: dict[int, list[bool]]) -> tuple[Callable[[int], bool], list[int]]:
    """Replays answering from `answers` (each size's in turn), and the sizes replayed."""
    replayed: list[int] = []

    def replays_again(size: int) -> bool:
        replayed.append(size)
        return answers[size].pop(0)

    return replays_again, replayed


def _no_search(failed: int) -> int:
    raise AssertionError(f"searched above {failed}, which replayed every time")


@pytest.mark.parametrize("side_by_side", [False, True])
def test_a_size_that_replays_again_is_the_answer(side_by_side: bool) -> None:
    replays_again, replayed = _replays({8: [True, True]})
    heard: list[tuple[int, bool]] = []
    found = confirmed(8, replays_again, _no_search, 2, side_by_side=side_by_side,
                      heard=lambda size, ok: heard.append((size, ok)))  # fmt: skip
    assert found == 8 and replayed == [8, 8] and heard == [(8, True), (8, True)]


def test_a_size_failing_on_a_later_try_sends_the_search_above_it() -> None:
    replays_again, replayed = _replays({8: [True, False, True], 12: [True, True, True]})
    heard: list[tuple[int, bool]] = []
    found = confirmed(8, replays_again, lambda failed: failed + 4, 3,
                      heard=lambda size, ok: heard.append((size, ok)))  # fmt: skip
    assert found == 12
    assert replayed == [8, 8, 12, 12, 12]  # one after another: up to the first failure
    assert heard == [(8, True), (8, False), (12, True), (12, True), (12, True)]


def test_side_by_side_every_replay_runs_and_is_heard_up_to_the_first_failure() -> None:
    replays_again, replayed = _replays({8: [False, False, False], 12: [True, True, True]})
    heard: list[tuple[int, bool]] = []
    found = confirmed(8, replays_again, lambda failed: failed + 4, 3, side_by_side=True,
                      heard=lambda size, ok: heard.append((size, ok)))  # fmt: skip
    assert found == 12 and sorted(replayed) == [8, 8, 8, 12, 12, 12]
    assert heard == [(8, False), (12, True), (12, True), (12, True)]


def test_no_confirming_run_takes_the_size_found() -> None:
    replays_again, replayed = _replays({})
    assert confirmed(8, replays_again, _no_search, 0) == 8 and replayed == []


def test_one_default() -> None:
    assert CONFIRM_RUNS == 2
