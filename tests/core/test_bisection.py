"""hipmem/_core/bisection.py, the one halving search and its doubling, on generated thresholds."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipmem._core.bisection import (
    GROWTH_LIMIT,
    BeforeAsking,
    NothingHolds,
    first_holding,
    growth_most,
    least_holding,
    least_holding_above,
)


def _from(threshold: int) -> tuple[Callable[[int], bool], list[int]]:
    """A test holding from `threshold` on, and the values it was asked, in order."""
    asked: list[int] = []

    def holds(value: int) -> bool:
        asked.append(value)
        return value >= threshold

    return holds, asked


@given(st.integers(-(2**40), 2**40), st.integers(1, 2**40), st.data())
def test_the_least_holding_value_is_found_to_the_unit(
    failing: int, span: int, data: st.DataObject
) -> None:
    holding = failing + span
    threshold = data.draw(st.integers(failing + 1, holding))
    holds, asked = _from(threshold)
    assert least_holding(holds, failing, holding) == threshold
    assert all(failing < value < holding for value in asked)  # the two ends are never asked
    assert len(asked) <= span.bit_length()  # halving: a step per bit of the span


@given(st.integers(0, 2**40), st.integers(1, 2**40), st.integers(1, 2**21), st.data())
def test_with_a_step_it_stops_less_than_a_step_above_the_threshold(
    failing: int, span: int, step: int, data: st.DataObject
) -> None:
    holding = failing + span
    threshold = data.draw(st.integers(failing + 1, holding))
    holds, asked = _from(threshold)
    found = least_holding(holds, failing, holding, step)
    assert threshold <= found < threshold + step
    assert all(failing < value < holding for value in asked)
    assert len(asked) <= (span // step).bit_length() + 1


@pytest.mark.parametrize(("failing", "holding", "step"), [(5, 5, 1), (6, 5, 1), (0, 8, 0)])
def test_ends_out_of_order_or_no_step_are_refused(failing: int, holding: int, step: int) -> None:
    with pytest.raises(ValueError, match="least_holding needs"):
        least_holding(lambda value: True, failing, holding, step)


# ---- the hook: what it announces is what is asked next -----------------------------------


def _announced(
    holds: Callable[[int], bool],
) -> tuple[BeforeAsking, list[tuple[int, int | None, int | None]]]:
    """A hook recording each announcement; it checks the one before came true."""
    heard: list[tuple[int, int | None, int | None]] = []

    def before_asking(asking: int, if_holds: int | None, if_fails: int | None) -> None:
        if heard:  # the value the last announcement promised for how that ask went
            last, then_holds, then_fails = heard[-1]
            assert asking == (then_holds if holds(last) else then_fails)
        heard.append((asking, if_holds, if_fails))

    return before_asking, heard


def _ends_announced(
    heard: list[tuple[int, int | None, int | None]], holds: Callable[[int], bool]
) -> None:
    """The last value asked was announced as the last: nothing follows it."""
    last, then_holds, then_fails = heard[-1]
    assert (then_holds if holds(last) else then_fails) is None


@given(st.integers(0, 2**40), st.integers(1, 2**40), st.integers(1, 2**21), st.data())
def test_the_hook_announces_each_next_value_of_a_bisection(
    failing: int, span: int, step: int, data: st.DataObject
) -> None:
    holding = failing + span
    threshold = data.draw(st.integers(failing + 1, holding))
    holds, asked = _from(threshold)
    hook, heard = _announced(lambda value: value >= threshold)
    found = least_holding(holds, failing, holding, step, hook)
    assert [value for value, _, _ in heard] == asked
    assert found == least_holding(lambda value: value >= threshold, failing, holding, step)
    if heard:
        _ends_announced(heard, lambda value: value >= threshold)


@given(st.integers(0, 2**30), st.integers(1, 2**30), st.integers(1, 2**10), st.data())
def test_doubling_then_halving_announces_every_value_it_asks(
    peak: int, step: int, base_factor: int, data: st.DataObject
) -> None:
    failing = peak // step * step
    base = max(peak, 1) * base_factor
    threshold = data.draw(st.integers(failing + 1, failing + GROWTH_LIMIT * base))
    holds, asked = _from(threshold)
    hook, heard = _announced(lambda value: value >= threshold)
    try:
        found = least_holding_above(holds, failing, base, step, hook)
    except NothingHolds as nothing:
        assert nothing.failing == asked[-1] and nothing.failing < threshold
        assert nothing.failing * 2 > GROWTH_LIMIT * base  # gave up only at the limit
    else:
        assert threshold <= found < threshold + step
        assert found <= growth_most(failing + step, base)
    assert [value for value, _, _ in heard] == asked
    _ends_announced(heard, lambda value: value >= threshold)


# ---- growth -------------------------------------------------------------------------------


def test_doubling_asks_first_twice_it_and_so_on_and_hands_the_ends_to_the_bisection() -> None:
    holds, asked = _from(100)
    assert first_holding(holds, 5, 6, 1000) == (96, 192)
    assert asked == [6, 12, 24, 48, 96, 192]
    holds, asked = _from(6)
    assert first_holding(holds, 5, 6, 1000) == (5, 6)  # the first holds: `failing` is the end
    assert asked == [6]


def test_doubling_holds_its_last_value_to_the_most_and_gives_up_there() -> None:
    holds, asked = _from(900)
    assert first_holding(holds, 0, 100, 1000) == (800, 1000)
    assert asked == [100, 200, 400, 800, 1000]  # 1600 held to 1000
    holds, asked = _from(1001)
    with pytest.raises(NothingHolds) as nothing:
        first_holding(holds, 0, 100, 1000)
    assert nothing.value.failing == 1000 and asked[-1] == 1000


def test_the_growth_limit_is_the_last_doubling_within_its_multiple_of_the_base() -> None:
    assert GROWTH_LIMIT == 64
    assert growth_most(1, 1) == 64
    assert growth_most(3, 1) == 48  # 96 would be past 64
    assert growth_most(100, 1) == 100  # even twice it is past the limit: the first alone
    holds, asked = _from(10**9)
    with pytest.raises(NothingHolds) as nothing:
        least_holding_above(holds, 2, 1, 1)  # from 3: 3, 6, 12, 24, 48
    assert asked == [3, 6, 12, 24, 48] and nothing.value.failing == 48


def test_least_holding_above_is_the_doubling_then_the_halving() -> None:
    holds, asked = _from(37)
    assert least_holding_above(holds, 4, 10, 4) == 40
    # doubling from a step above 4: 8, 16, 32, 64 (holds); halving between 32 and 64 by 4
    assert asked == [8, 16, 32, 64, 48, 40, 36]


@pytest.mark.parametrize(
    ("failing", "first", "most", "step"),
    [(6, 6, 10, 1), (7, 6, 10, 1), (0, 0, 10, 1), (0, 11, 10, 1), (0, 6, 10, 0)],
)
def test_doubling_refuses_ends_out_of_order_a_first_of_zero_or_no_step(
    failing: int, first: int, most: int, step: int
) -> None:
    with pytest.raises(ValueError, match="first_holding needs"):
        first_holding(lambda value: True, failing, first, most, step)
