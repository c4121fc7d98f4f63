"""hipmem/_core/bisection.py, the one halving search, on generated thresholds."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipmem._core.bisection import least_holding


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
