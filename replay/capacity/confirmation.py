"""The one confirmation of a capacity search: the size found replays again, or the search goes on.

A replay need not behave the same twice: with several replay threads or streams, and with
stream-ordered pools (async), what a free makes reusable can depend on timing. So the size a
search finds replays `confirm_runs` more times (`CONFIRM_RUNS` unless a caller says
otherwise); if any of those fails, that size counts as failing and the search goes on above
it. The answer is a size that replayed without failure every time it was tried at the end.

Both searches confirm here: RMM's resources and the other real ones (replay/capacity/
search.py), and PyTorch's allocator on the virtual GPU (replay/capacity/fits.py), whose
replays are the same every time: there a confirmation costs its replays and finds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from .at_once import run_each

CONFIRM_RUNS = 2  # the replays a size found must pass again, unless a caller says otherwise


def confirmed(
    found: int,
    replays_again: Callable[[int], bool],
    search_above: Callable[[int], int],
    confirm_runs: int,
    *,
    side_by_side: bool = False,
    heard: Callable[[int, bool], object] | None = None,
) -> int:
    """`found` if it replays `confirm_runs` more times, else the size `search_above(found)`
    finds, confirmed in turn. `replays_again(size)`: one more real replay. `side_by_side`: the
    confirming replays run at once (each in a process of its own, replay/capacity/at_once.py).
    `heard(size, replayed)` hears each in order, up to the first that fails."""
    while not _replays_again(found, replays_again, confirm_runs, side_by_side, heard):
        found = search_above(found)
    return found


def _replays_again(
    size: int,
    replays_again: Callable[[int], bool],
    confirm_runs: int,
    side_by_side: bool,
    heard: Callable[[int, bool], object] | None,
) -> bool:
    answers: Iterable[bool]
    if side_by_side:  # all run; those after the first failure go unheard, as if never run
        answers = run_each([partial(replays_again, size)] * confirm_runs)
    else:  # one after another, up to the first failure
        answers = (replays_again(size) for _ in range(confirm_runs))
    for replayed in answers:
        if heard is not None:
            heard(size, replayed)
        if not replayed:
            return False
    return True
