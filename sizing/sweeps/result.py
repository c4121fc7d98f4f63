"""A sized sweep: every point's answer in grid order, where the need peaks (the maximum)
and where it changes (steps), in brief for recommend and check, and whole for `--json`.

Workspace needs are not monotonic in the problem size, so the largest shape is not the
largest need: a sweep says where the need peaks and where it changes (its steps)."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..calls.result import CallResult
from ..calls.spec import Call
from .plan import SweptCall
from .points import PointMaker
from .range import grid_points

MAX_CRASHES = 3  # a library that crashes at this many points of one sweep is asked no more
KEPT_FAILURES = 1000  # failed points kept with their error; the rest are counted
NOT_SIZED = -1  # `bytes_at` of a point without a size


@dataclass(frozen=True)
class Step:
    """A run of neighbouring points with the same answer (along the last swept argument)."""

    first: int  # point index
    last: int  # point index, inclusive
    bytes: int | None
    status: str


@dataclass
class SweepResult:
    """Every point's answer, in grid order (the last sweep running fastest)."""

    plan: SweptCall
    device_memory_bytes: int
    bytes_at: array[int]  # per point; -1 where there is no size
    status_at: array[int]  # per point, an index into `statuses`
    statuses: list[str]
    failures: dict[int, CallResult] = field(default_factory=dict)  # first KEPT_FAILURES
    failed_count: int = 0
    asked_count: int = 0  # points the worker was asked (the rest were known)
    gave_up: bool = False  # the library crashed MAX_CRASHES times: the rest was not asked
    point_maker: PointMaker | None = field(default=None, repr=False)  # rebuilds a point's call
    _steps: list[Step] | None = field(default=None, repr=False)

    # -- points ---------------------------------------------------------------------------
    @property
    def point_count(self) -> int:
        return len(self.bytes_at)

    def values_at(self, index: int) -> tuple[int, ...]:
        """The swept arguments' values at a point."""
        if len(self.plan.sweeps) == 1:
            return (self.plan.sweeps[0].values[index],)
        values: list[int] = []
        for sweep in reversed(self.plan.sweeps):
            index, position = divmod(index, len(sweep.values))
            values.append(sweep.values[position])
        return tuple(reversed(values))

    def point_text(self, index: int) -> str:
        """`batch_count=20` or `n=64,batch_count=20`."""
        pairs = zip(self.plan.sweeps, self.values_at(index), strict=True)
        return ",".join(f"{sweep.arg}={value}" for sweep, value in pairs)

    def bytes_of(self, index: int) -> int | None:
        value = self.bytes_at[index]
        return None if value == NOT_SIZED else value

    def status_of(self, index: int) -> str:
        return self.statuses[self.status_at[index]]

    def call_at(self, index: int) -> Call:
        """The full call at a point, every default filled in."""
        assert self.point_maker is not None
        return self.point_maker.call(self.point_maker.values(self.values_at(index)))

    # -- the maximum ----------------------------------------------------------------------
    @property
    def max_bytes(self) -> int | None:
        """The largest need over the points sized; None when none was."""
        largest = max(self.bytes_at, default=NOT_SIZED)
        return None if largest == NOT_SIZED else largest

    def max_indices(self) -> Iterator[int]:
        largest = self.max_bytes
        if largest is None:
            return iter(())
        return (index for index, value in enumerate(self.bytes_at) if value == largest)

    def max_steps(self) -> list[Step]:
        """The runs of points where the need is largest."""
        largest = self.max_bytes
        return [step for step in self.steps() if largest is not None and step.bytes == largest]

    def max_text(self, most: int = 8) -> str:
        """Where the maximum occurs: `batch_count=20` or `n=64..128,batch_count=1` ..."""
        runs = self.max_steps()
        shown = ", ".join(self.step_text(step) for step in runs[:most])
        return shown + (f" and {len(runs) - most:,} more runs" if len(runs) > most else "")

    def max_result(self) -> CallResult | None:
        """The first point of the largest need, as one call of the workload."""
        largest = self.max_bytes
        if largest is None:
            return None
        index = next(self.max_indices())
        fits = largest <= self.device_memory_bytes
        return CallResult(
            self.call_at(index), largest, self.status_of(index), count=self.plan.count,
            fits_device=fits,
        )  # fmt: skip

    def first_failure(self) -> CallResult | None:
        """The first failed point, its error saying how many more failed."""
        if not self.failures:
            return None
        index = min(self.failures)
        first = self.failures[index]
        if self.failed_count > 1 and first.error is not None:
            more = (
                f" (and {self.failed_count - 1:,} more of the {self.point_count:,} points of "
                f"{self.plan.label}"
            )
            if self.gave_up:
                more += f"; after {MAX_CRASHES} crashes the rest were not asked"
            error = type(first.error)(f"{first.error}{more})")
            return CallResult(first.call, None, first.status, error, count=self.plan.count)
        return first

    # -- steps ----------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        """Runs of equal answers along the last swept argument (a new run starts with each
        value of the others): the compact table of where the need changes."""
        if self._steps is None:  # answers do not change once sized
            self._steps = self._find_steps()
        return self._steps

    def _find_steps(self) -> list[Step]:
        row = len(self.plan.sweeps[-1].values)
        found: list[Step] = []
        start = 0
        for index in range(1, self.point_count + 1):
            if (
                index == self.point_count
                or index % row == 0
                or self.bytes_at[index] != self.bytes_at[start]
                or self.status_at[index] != self.status_at[start]
            ):
                found.append(Step(start, index - 1, self.bytes_of(start), self.status_of(start)))
                start = index
        return found

    def step_text(self, step: Step) -> str:
        """`batch_count=8..19` (the other arguments at their value)."""
        first, last = self.values_at(step.first), self.values_at(step.last)
        parts = []
        for sweep, low, high in zip(self.plan.sweeps, first, last, strict=True):
            parts.append(f"{sweep.arg}={low}" if low == high else f"{sweep.arg}={low}..{high}")
        return ",".join(parts)

    # -- summaries (recommend, check) ---------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The sweep in brief: its largest need and where it occurs."""
        first_max = next(self.max_indices(), None)
        return {
            "call": self.plan.label,
            "point_count": self.point_count,
            "max_bytes": self.max_bytes,
            "max_at": None if first_max is None else self.point_args(first_max),
            "max_runs": [self._step_dict(step) for step in self.max_steps()],
        }

    def summary_line(self) -> str:
        largest = self.max_bytes
        if largest is None:
            return f"{self.plan.label}: no point of {self.point_count:,} could be sized"
        return (
            f"{self.plan.label}: the largest need, {largest:,} bytes, is at {self.max_text()} "
            f"({self.point_count:,} points)"
        )

    def points_above(self, limit_bytes: int) -> tuple[int, int | None]:
        """How many points need more than `limit_bytes`, and the first such point's index."""
        above = [index for index, value in enumerate(self.bytes_at) if value > limit_bytes]
        return len(above), (above[0] if above else None)

    # -- JSON ---------------------------------------------------------------------------------
    def point_args(self, index: int) -> dict[str, int]:
        names = [sweep.arg for sweep in self.plan.sweeps]
        return dict(zip(names, self.values_at(index), strict=True))

    def as_dict(self) -> dict[str, Any]:
        largest = self.max_bytes
        first_max = next(self.max_indices(), None)
        return {
            "call": self.plan.label,
            "routine": self.plan.routine.name,
            "given": dict(self.plan.given),
            "sweeps": [
                {"arg": s.arg, "range": s.text, "value_count": len(s.values)}
                for s in self.plan.sweeps
            ],
            "point_count": self.point_count,
            "asked_count": self.asked_count,
            "count": self.plan.count,
            "max_bytes": largest,
            "max_at": None if first_max is None else self.point_args(first_max),
            "max_runs": [self._step_dict(step) for step in self.max_steps()],
            "fits_device": largest is None or largest <= self.device_memory_bytes,
            "failed_points": self.failed_count,
            "steps": [self._step_dict(step) for step in self.steps()],
            "points": self._point_dicts(),
        }

    def _step_dict(self, step: Step) -> dict[str, Any]:
        return {
            "from": self.point_args(step.first),
            "to": self.point_args(step.last),
            "bytes": step.bytes,
            "status": step.status,
        }

    def _point_dicts(self) -> list[dict[str, Any]]:
        """Every point in grid order (walked with the grid, not rebuilt point by point)."""
        names = [sweep.arg for sweep in self.plan.sweeps]
        statuses = self.statuses
        found: list[dict[str, Any]] = []
        rows = zip(grid_points(self.plan.sweeps), self.bytes_at, self.status_at, strict=True)
        for index, (values, n_bytes, status) in enumerate(rows):
            entry: dict[str, Any] = {
                "args": dict(zip(names, values, strict=True)),
                "bytes": None if n_bytes == NOT_SIZED else n_bytes,
                "status": statuses[status],
            }
            failure = self.failures.get(index) if self.failures else None
            if failure is not None and failure.error is not None:
                entry["error"] = str(failure.error)
            found.append(entry)
        return found
