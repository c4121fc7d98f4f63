"""Sweep ranges: `ARG=RANGE`, the values one call argument takes across a sweep.

    parse_sweep("batch_count=1..64")        # every value: 1, 2, ..., 64
    parse_sweep("n=64..8192:64")            # a step: 64, 128, ..., 8192
    parse_sweep("k=1..65536*2")             # powers: 1, 2, 4, ..., 65536
    parse_sweep("batch_count=1,8,20,64")    # a list

Several sweeps form a grid (every combination). The rules are the project's strict ones:
plain ASCII decimal (`４`, `1_000`, `0x10`, `1e3` refused), at most 40 digits, within int64,
a start not above its end, a step of at least 1, a factor of at least 2, no value twice; the
argument's own type and range are checked when each point's call is built. A grid of more
than `max_points` points (default `DEFAULT_MAX_POINTS`) is refused before anything is built.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product

from ..errors import SizingUsageError

DEFAULT_MAX_POINTS = 1_000_000
# Past this, one request's points no longer fit a machine's memory comfortably: each point
# keeps its answer (10 bytes), the session remembers up to 2,000,000 of them by their
# arguments (about 200 bytes each), and --json lists every one (about 90 bytes each).
MAX_POINTS_LIMIT = 10_000_000
_INT64 = (-(2**63), 2**63 - 1)
_MAX_DIGITS = 40
_MAX_SHOWN_CHARS = 80
_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_MAX_LIST_VALUES = 100_000  # a list is typed by hand; a longer one is not a list


class BadSweep(SizingUsageError):
    """A sweep that cannot be read, or a grid too large to size."""


@dataclass(frozen=True)
class Sweep:
    """One argument and the values it takes, ascending (`text` as the user wrote it)."""

    arg: str
    values: Sequence[int]  # a range for `A..B` and `A..B:S`, a tuple otherwise
    text: str  # the RANGE part, e.g. "1..64"

    def __str__(self) -> str:
        return f"{self.arg}={self.text}"


def parse_sweep(text: str, *, parameter: str = "sweep") -> Sweep:
    """`ARG=RANGE` -> Sweep. Errors name `parameter` and quote the text (when short)."""
    arg, sep, range_text = text.partition("=")
    arg, range_text = arg.strip(), range_text.strip()
    if not sep or not _NAME.fullmatch(arg) or not range_text:
        raise _bad(text, parameter, "expected ARG=RANGE, e.g. batch_count=1..64")
    return Sweep(arg, parse_range(range_text, parameter=parameter, arg=arg), range_text)


def parse_range(text: str, *, parameter: str = "sweep", arg: str = "") -> Sequence[int]:
    """`A..B`, `A..B:S`, `A..B*F` or `V1,V2,...` -> the values, ascending."""
    shown = f"{arg}={text}" if arg else text
    if len(text) > _MAX_SHOWN_CHARS and ".." in text:
        raise _bad(shown, parameter, "a range is at most 80 characters")
    if ".." in text:
        return _span(text, shown, parameter)
    return _listed(text, shown, parameter)


def _span(text: str, shown: str, parameter: str) -> Sequence[int]:
    start_text, _, rest = text.partition("..")
    kind = "step" if ":" in rest else "factor" if "*" in rest else ""
    end_text, _, by_text = rest.partition({"step": ":", "factor": "*"}.get(kind, "\0"))
    start = _number(start_text, shown, parameter, "start")
    end = _number(end_text, shown, parameter, "end")
    if start > end:
        raise _bad(shown, parameter, f"the start {start} is above the end {end}")
    if kind == "factor":
        factor = _number(by_text, shown, parameter, "factor")
        if factor < 2 or start < 1:
            raise _bad(shown, parameter, "powers need a start of at least 1 and a factor of 2+")
        return _powers(start, end, factor)
    step = _number(by_text, shown, parameter, "step") if kind else 1
    if step < 1:
        raise _bad(shown, parameter, f"the step {step} must be at least 1")
    return range(start, end + 1, step)


def _powers(start: int, end: int, factor: int) -> tuple[int, ...]:
    values = [start]
    while values[-1] * factor <= end:  # at most 63 values: start >= 1, factor >= 2, int64
        values.append(values[-1] * factor)
    return tuple(values)


def _listed(text: str, shown: str, parameter: str) -> tuple[int, ...]:
    if text.count(",") >= _MAX_LIST_VALUES:
        raise _bad(shown[:_MAX_SHOWN_CHARS], parameter, f"more than {_MAX_LIST_VALUES:,} values")
    values = [_number(part, shown, parameter, "value") for part in text.split(",")]
    seen: set[int] = set()
    for value in values:
        if value in seen:
            raise _bad(shown, parameter, f"{value} is listed twice")
        seen.add(value)
    return tuple(sorted(values))


def _number(text: str, shown: str, parameter: str, what: str) -> int:
    """One bound, step, factor or listed value: plain ASCII decimal within int64."""
    text = text.strip()
    if not _DECIMAL.fullmatch(text) or len(text) > _MAX_DIGITS:
        raise _bad(
            shown,
            parameter,
            f"the {what} {_quoted(text)} is not a whole number in plain decimal digits "
            "(forms: 1..64, 1..4096:64, 1..65536*2, 1,8,20,64)",
        )
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise _bad(shown, parameter, f"the {what} {value} is out of range for a 64-bit integer")
    return value


def _quoted(text: str) -> str:
    if len(text) > _MAX_SHOWN_CHARS:
        return f"(of {len(text):,} characters)"
    return repr(text)


def _bad(shown: str, parameter: str, message: str) -> BadSweep:
    if len(shown) > _MAX_SHOWN_CHARS:  # say how long, never all of it
        return BadSweep(f"a sweep of {len(shown):,} characters: {message}", parameter=parameter)
    return BadSweep(message, parameter=parameter, value=shown)


# -- grids ------------------------------------------------------------------------------------
def point_count(sweeps: Sequence[Sweep]) -> int:
    """How many points the grid of `sweeps` has (1 for no sweep)."""
    return math.prod(len(sweep.values) for sweep in sweeps)


def check_grid(
    sweeps: Sequence[Sweep], *, max_points: int = DEFAULT_MAX_POINTS, where: str = ""
) -> int:
    """The grid's point count; BadSweep when an argument is swept twice or the grid has
    more than `max_points` points. `where` prefixes messages (a call, a file:line)."""
    check_max_points(max_points)
    prefix = f"{where}: " if where else ""
    names = [sweep.arg for sweep in sweeps]
    for name in names:
        if names.count(name) > 1:
            raise BadSweep(f"{prefix}{name} is swept twice", parameter="sweep")
    count = point_count(sweeps)
    if count > max_points:
        grid = " × ".join(str(sweep) for sweep in sweeps)
        raise BadSweep(
            f"{prefix}{count:,} points ({grid}), more than the limit of {max_points:,}: "
            "raise the limit to size them all, or sweep with a step",
            parameter="max_points",
        )
    return count


def parse_max_points(text: str, *, parameter: str = "max_points") -> int:
    """A point limit as typed: plain ASCII decimal, 1..MAX_POINTS_LIMIT."""
    stripped = text.strip()
    if not _DECIMAL.fullmatch(stripped) or len(stripped) > _MAX_DIGITS:
        shown = text if len(text) <= _MAX_SHOWN_CHARS else f"({len(text):,} characters)"
        raise BadSweep(
            "expected a whole number in plain decimal digits", parameter=parameter, value=shown
        )
    value = int(stripped)
    check_max_points(value)
    return value


def check_max_points(max_points: int) -> None:
    if isinstance(max_points, bool) or not 1 <= max_points <= MAX_POINTS_LIMIT:
        raise BadSweep(
            f"must be a whole number 1..{MAX_POINTS_LIMIT:,}",
            parameter="max_points",
            value=max_points,
        )


def grid_points(sweeps: Sequence[Sweep]) -> Iterator[tuple[int, ...]]:
    """Every point, the last sweep running fastest (as nested loops would)."""
    return product(*(sweep.values for sweep in sweeps))
