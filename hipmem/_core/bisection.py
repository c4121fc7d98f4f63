"""The one halving search of hipmem: the least value at which a test holds, between a value
where it fails and one where it holds, the test assumed monotone (false below a threshold,
true from it on). Capacity searches (replay/capacity/fits.py), the recorded cap's ends
(replay/explain/recorded_conditions.py) and the least workspace a call runs with
(sizing/minimum.py) narrow through it; how each finds its two first values is its own."""

from __future__ import annotations

from collections.abc import Callable


def least_holding(holds: Callable[[int], bool], failing: int, holding: int, step: int = 1) -> int:
    """The least value found holding, at most `step` above one that fails: `holds(failing)` is
    false and `holds(holding)` true (neither asked again). Each value asked is a multiple of
    `step` strictly between the two (`holding` may be none: a device's whole memory)."""
    if step < 1 or holding <= failing:
        raise ValueError(f"least_holding needs failing < holding and step >= 1, not "
                         f"{failing}, {holding}, {step}")  # fmt: skip
    while holding - failing > step:
        # Rounded down to a multiple of `step`, but never onto `failing` again.
        middle = max((failing + holding) // 2 // step * step, failing + step)
        if holds(middle):
            holding = middle
        else:
            failing = middle
    return holding
