"""The one halving search of hipmem, and the one doubling that finds where it starts.

`least_holding`: the least value at which a test holds, between a value where it fails and one
where it holds, the test assumed monotone (false below a threshold, true from it on). Capacity
searches (replay/capacity/search.py, replay/capacity/fits.py), the recorded cap's ends
(replay/explain/recorded_conditions.py) and the least workspace a call runs with
(sizing/minimum.py) narrow through it.

`first_holding`: where no holding value is known yet, double from a first guess until one
holds, never past a most value (`growth_most`: at most `GROWTH_LIMIT` times a base, for a
search that could otherwise grow without end). `least_holding_above` is the two in turn, as
`--find-capacity` searches up from a log's peak.

`before_asking` (both searches) hears of each value before it is asked, with the value asked
next if it holds and if it fails (None: the search ends there), so a caller can start either
ahead of time (replay/capacity/rmm_probes.py `Ahead`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

GROWTH_LIMIT = 64  # a doubling search gives up past this many times its base

# (the value about to be asked, the next asked if it holds, the next if it fails)
BeforeAsking: TypeAlias = Callable[[int, int | None, int | None], None]


class NothingHolds(ValueError):
    """A doubling search reached its most value without finding one that holds."""

    def __init__(self, failing: int) -> None:
        super().__init__(f"nothing holds up to {failing}")
        self.failing = failing  # the last value asked: it failed


def least_holding(
    holds: Callable[[int], bool],
    failing: int,
    holding: int,
    step: int = 1,
    before_asking: BeforeAsking | None = None,
) -> int:
    """The least value found holding, at most `step` above one that fails: `holds(failing)` is
    false and `holds(holding)` true (neither asked again). Each value asked is a multiple of
    `step` strictly between the two (`holding` may be none: a device's whole memory)."""
    if step < 1 or holding <= failing:
        raise ValueError(f"least_holding needs failing < holding and step >= 1, not "
                         f"{failing}, {holding}, {step}")  # fmt: skip
    while (middle := _middle(failing, holding, step)) is not None:
        if before_asking is not None:
            before_asking(middle, _middle(failing, middle, step), _middle(middle, holding, step))
        if holds(middle):
            holding = middle
        else:
            failing = middle
    return holding


def _middle(failing: int, holding: int, step: int) -> int | None:
    """The value `least_holding` asks between these two, None when they are a step apart."""
    if holding - failing <= step:
        return None
    # Rounded down to a multiple of `step`, but never onto `failing` again.
    return max((failing + holding) // 2 // step * step, failing + step)


def first_holding(
    holds: Callable[[int], bool],
    failing: int,
    first: int,
    most: int,
    step: int = 1,
    before_asking: BeforeAsking | None = None,
) -> tuple[int, int]:
    """The first of `first`, twice it, four times it... (the last held to `most`) that holds,
    and the value asked before it (`failing`, known to fail below `first`, when `first`
    holds): the two ends `least_holding` narrows between. `before_asking` hears, as the next
    value if one holds, the first `least_holding(holds, failing, ..., step)` would ask.
    Raises `NothingHolds` when `most` fails."""
    if not 0 < first <= most or failing >= first or step < 1:
        raise ValueError(f"first_holding needs failing < first, 0 < first <= most and "
                         f"step >= 1, not {failing}, {first}, {most}, {step}")  # fmt: skip
    asking = first
    while True:
        grown = min(asking * 2, most) if asking < most else None
        if before_asking is not None:
            before_asking(asking, _middle(failing, asking, step), grown)
        if holds(asking):
            return failing, asking
        if grown is None:
            raise NothingHolds(asking)
        failing, asking = asking, grown


def growth_most(first: int, base: int) -> int:
    """The most a doubling from `first` asks: its last doubling within `GROWTH_LIMIT` times
    `base` (`first` itself when even twice it is past that)."""
    most = first
    while most * 2 <= GROWTH_LIMIT * base:
        most *= 2
    return most


def least_holding_above(
    holds: Callable[[int], bool],
    failing: int,
    base: int,
    step: int = 1,
    before_asking: BeforeAsking | None = None,
) -> int:
    """The least value holding above `failing` (known to fail): doubling from a step above it,
    up to `GROWTH_LIMIT` times `base`, then halving. Raises `NothingHolds` when none does."""
    first = failing + step
    failing, holding = first_holding(holds, failing, first, growth_most(first, base), step,
                                     before_asking)  # fmt: skip
    return least_holding(holds, failing, holding, step, before_asking)
