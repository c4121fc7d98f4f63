"""Sweeps: one call sized at every point of a grid of argument values, in one worker session.

    with SizingSession("MI210") as session:
        swept = session.sweep("rocblas_dtrsm_batched:m=64,n=64", "batch_count=1..64")
    swept.max_bytes, swept.max_text(), swept.steps()

Workspace needs are not monotonic in the problem size, so the largest shape is not the
largest need: a sweep says where the need peaks and where it changes (its steps).

Speed: the call is checked once, at the grid's first point. At each point only the swept
arguments and the defaults that depend on them (`lda = max(1, n)`, ...) are recomputed, and
the worker is sent the call once, then only the values that change (`size_points`). A point
is asked once per session: answers are kept by the call's full argument values, so
overlapping sweeps, and calls sized before, are not asked again.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

import simpleeval

from hipmem._core.progress import ProgressCallback

from ..calls.result import SIZE_STATUSES, WRAPPED_BYTES, CallResult
from ..calls.spec import (
    Call,
    Value,
    _convert,
    _integer,
    _unknown_argument,
    make_call,
    parsed_rule,
    rule_names,
    split_call,
)
from ..defaults import FUNCTIONS, rules_for
from ..errors import BadArgument, SizingError
from ..rocm.catalog import Catalog, Param, Routine
from ..rocm.rule_closures import closure_of
from .range import (
    DEFAULT_MAX_POINTS,
    BadSweep,
    Sweep,
    check_grid,
    grid_points,
    parse_sweep,
    point_count,
)

if TYPE_CHECKING:  # the session drives a sweep; a sweep only reads it
    from ..session import SizingSession
    from ..worker.process import Crash

_WHOLE_NUMBER_KINDS = ("i8", "i32", "i64", "u32")
_CHUNK_POINTS = 8192  # points per worker request: bounded memory, and progress to show
MAX_CRASHES = 3  # a library that crashes at this many points of one sweep is asked no more
KEPT_FAILURES = 1000  # failed points kept with their error; the rest are counted
KEPT_ANSWERS = 2_000_000  # point answers a session keeps to avoid asking twice
_UNSETTLED = ("crashed", "timed_out")  # answers never kept: asking again may succeed


@dataclass(frozen=True)
class SweptCall:
    """A call with some arguments swept: checked, not yet sized."""

    routine: Routine
    given: Mapping[str, Value]  # the fixed arguments, as given
    sweeps: tuple[Sweep, ...]
    corner: Call  # the call at the grid's first point
    count: int = 1  # how many times the workload makes it, at whichever point

    @property
    def label(self) -> str:
        """`rocblas_dtrsm_batched:m=64,n=64,batch_count=1..64`, in the header's order."""
        ranges = {sweep.arg: sweep.text for sweep in self.sweeps}
        parts = [
            f"{name}={ranges[name] if name in ranges else self.corner.args[name]}"
            for name in self.corner.args
            if name in ranges or name in self.given
        ]
        return f"{self.routine.name}:{','.join(parts)}"

    @property
    def point_count(self) -> int:
        return point_count(self.sweeps)


def plan_sweep(
    call: str | Routine,
    sweeps: Sequence[str | Sweep],
    catalog: Catalog,
    *,
    given: Mapping[str, Value] | None = None,
    count: int = 1,
    max_points: int = DEFAULT_MAX_POINTS,
) -> SweptCall:
    """Check a swept call before anything is sized: the argument names, that only whole-number
    arguments are swept (and not given as well), each range's ends against the argument's
    type, the grid's size, and the call at the first point."""
    routine, fixed = split_call(call, catalog) if isinstance(call, str) else (call, {})
    for name, value in (given or {}).items():
        if name in fixed:
            raise BadArgument(f"{routine.name}: argument '{name}' given twice")
        fixed[name] = value  # type: ignore[assignment]
    parsed = tuple(parse_sweep(s) if isinstance(s, str) else s for s in sweeps)
    if not parsed:
        raise BadSweep(f"{routine.name}: no sweep given (ARG=RANGE, e.g. batch_count=1..64)")
    check_grid(parsed, max_points=max_points, where=routine.name)
    settable = {param.name: param for param in routine.params if param.user_settable}
    for sweep in parsed:
        _check_swept(routine, settable, sweep, fixed)
    first = {sweep.arg: sweep.values[0] for sweep in parsed}
    corner = make_call(routine, {**fixed, **first}, catalog)
    return SweptCall(routine, dict(fixed), parsed, corner, count)


def _check_swept(
    routine: Routine, settable: Mapping[str, Param], sweep: Sweep, fixed: Mapping[str, Value]
) -> None:
    if sweep.arg not in settable:
        raise BadArgument(_unknown_argument(routine, sweep.arg, settable))
    kind = settable[sweep.arg].kind
    if kind not in _WHOLE_NUMBER_KINDS:
        raise BadSweep(
            f"{routine.name}: {sweep.arg} is not a whole-number argument; only those are swept"
        )
    if sweep.arg in fixed:
        raise BadSweep(
            f"{routine.name}: {sweep.arg} is given in the call and swept ({sweep}); give one"
        )
    for end in (sweep.values[0], sweep.values[-1]):  # ascending: the ends bound the rest
        _integer(f"{routine.name}: {sweep.arg}={end} (in {sweep})", sweep.arg, kind, end)


# -- building the points ------------------------------------------------------------------------
class _PointMaker:
    """The call's arguments at each point: the fixed ones copied, the swept ones set, and
    the defaults that depend on them evaluated again, in dependency order."""

    def __init__(self, plan: SweptCall, catalog: Catalog) -> None:
        routine = plan.routine
        self.routine = routine
        self.catalog = catalog
        self.settable = {param.name: param for param in routine.params if param.user_settable}
        self.swept = [sweep.arg for sweep in plan.sweeps]
        self.rules = rules_for(routine.family)
        defaulted = [n for n in self.settable if n not in plan.given and n not in self.swept]
        self.affected = self._evaluation_order(self._depending(defaulted))
        self.varying = self.swept + self.affected
        self.base = {n: v for n, v in plan.corner.args.items() if n not in self.varying}
        self.names = list(self.settable)
        # Read many values of a dict in one C call (one name alone would give a bare value).
        self._all_values = operator.itemgetter(*self.names, *self.names[:1])
        self._varying_values = operator.itemgetter(*self.varying, *self.varying[:1])
        self.given = frozenset(plan.given) | frozenset(self.swept)
        positions = {param.name: index for index, param in enumerate(routine.params)}
        self.slots = [positions[name] for name in self.varying]
        self.enums = [self.settable[name].enum for name in self.varying]
        self.evaluator = simpleeval.EvalWithCompoundTypes(functions=FUNCTIONS)
        # Each depending default: its parameter, and its rule as a closure (or None: simpleeval).
        self.rules_to_run = [
            (name, self.settable[name], self.rules[name], closure_of(self.rules[name]))
            for name in self.affected
        ]

    def _depending(self, defaulted: list[str]) -> list[str]:
        """The defaulted arguments whose rule reads a swept one, directly or not."""
        changing = set(self.swept)
        grew = True
        while grew:
            grew = False
            for name in defaulted:
                if name not in changing and rule_names(self.rules[name]) & changing:
                    changing.add(name)
                    grew = True
        return [name for name in defaulted if name in changing]

    def _evaluation_order(self, affected: list[str]) -> list[str]:
        order: list[str] = []
        pending = list(affected)
        while pending:
            ready = [n for n in pending if not rule_names(self.rules[n]) & (set(pending) - {n})]
            if not ready:  # the project's rules are acyclic; say so if one is not
                raise SizingError(f"{self.routine.name}: default rules of {pending} form a cycle")
            order.extend(ready)
            pending = [n for n in pending if n not in ready]
        return order

    def values(self, point: tuple[int, ...]) -> dict[str, Value]:
        values = dict(self.base)
        values.update(zip(self.swept, point, strict=True))
        if not self.affected:
            return values
        self.evaluator.names = values
        for name, param, rule, closure in self.rules_to_run:
            if closure is not None:
                result = closure(values)
            else:
                result = self.evaluator.eval(rule, previously_parsed=parsed_rule(rule))
            values[name] = _convert(self.routine, param, result, self.catalog)
        return values

    def key(self, values: Mapping[str, Value]) -> tuple[Any, ...]:
        """The point's full argument values: equal for identical calls (the answer cache)."""
        return (self.routine.name, *self._all_values(values)[:-1])

    def call_key(self, values: Mapping[str, Value]) -> tuple[str, tuple[tuple[str, Value], ...]]:
        """`Call.key()` of the point, to find calls the session sized one by one."""
        return self.routine.name, tuple((name, values[name]) for name in self.names)

    def encoded(self, values: Mapping[str, Value]) -> list[Any]:
        """The values the worker puts at `slots` (enums by number, as `Call.worker_args`)."""
        if not any(self.enums):
            return list(self._varying_values(values)[:-1])
        return [
            values[name] if enum is None else self.catalog.enums[enum][str(values[name])]
            for name, enum in zip(self.varying, self.enums, strict=True)
        ]

    def call(self, values: Mapping[str, Value]) -> Call:
        ordered = {name: values[name] for name in self.names}
        return Call(routine=self.routine, args=ordered, given=self.given)


# -- results -------------------------------------------------------------------------------------
_NOT_SIZED = -1


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
    _maker: _PointMaker | None = field(default=None, repr=False)
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
        return None if value == _NOT_SIZED else value

    def status_of(self, index: int) -> str:
        return self.statuses[self.status_at[index]]

    def call_at(self, index: int) -> Call:
        """The full call at a point, every default filled in."""
        assert self._maker is not None
        return self._maker.call(self._maker.values(self.values_at(index)))

    # -- the maximum ----------------------------------------------------------------------
    @property
    def max_bytes(self) -> int | None:
        """The largest need over the points sized; None when none was."""
        largest = max(self.bytes_at, default=_NOT_SIZED)
        return None if largest == _NOT_SIZED else largest

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
                "bytes": None if n_bytes == _NOT_SIZED else n_bytes,
                "status": statuses[status],
            }
            failure = self.failures.get(index) if self.failures else None
            if failure is not None and failure.error is not None:
                entry["error"] = str(failure.error)
            found.append(entry)
        return found


# -- sizing ---------------------------------------------------------------------------------------
class _Recorder:
    """Fills a SweepResult as answers come."""

    def __init__(self, plan: SweptCall, memory_bytes: int, maker: _PointMaker) -> None:
        total = plan.point_count
        self.result = SweepResult(
            plan=plan,
            device_memory_bytes=memory_bytes,
            bytes_at=array("q", [_NOT_SIZED]) * total,
            status_at=array("H", [0]) * total,
            statuses=["not_sized"],
            _maker=maker,
        )
        self._status_index = {"not_sized": 0}

    def sized(self, index: int, n_bytes: int, status: str) -> None:
        self.result.bytes_at[index] = n_bytes
        self.result.status_at[index] = self._status(status)

    def failed(self, index: int, failure: CallResult) -> None:
        self.result.status_at[index] = self._status(failure.status)
        self.result.failed_count += 1
        if len(self.result.failures) < KEPT_FAILURES:
            self.result.failures[index] = failure

    def _status(self, name: str) -> int:
        if name not in self._status_index:
            self._status_index[name] = len(self.result.statuses)
            self.result.statuses.append(name)
        return self._status_index[name]


def run_sweep(
    session: SizingSession, plan: SweptCall, progress: ProgressCallback | None = None
) -> SweepResult:
    """Size every point of `plan` in the session's worker (see the module's docstring).

    Chunk by chunk; while the worker answers one chunk, the next one is built."""
    maker = _PointMaker(plan, session.catalog)
    recorder = _Recorder(plan, session.device.memory_bytes, maker)
    template = session._encode(plan.corner)
    points = enumerate(grid_points(plan.sweeps))
    crashes = done = 0
    chunk = list(islice(points, _CHUNK_POINTS))
    asked = _known_or_asked(session, maker, recorder, chunk)
    while chunk:
        answers = _send(session, maker, recorder, template, asked)
        following = list(islice(points, _CHUNK_POINTS))
        next_asked = _known_or_asked(session, maker, recorder, following)
        crashes += _collect(session, maker, recorder, asked, answers, MAX_CRASHES - crashes)
        done += len(chunk)
        if progress is not None:
            progress(done, plan.point_count, "points sized")
        if crashes >= MAX_CRASHES:
            _give_up(recorder)
            break
        chunk, asked = following, next_asked
    return recorder.result


_Asked = list[tuple[int, tuple[Any, ...], dict[str, Value]]]


def _known_or_asked(
    session: SizingSession,
    maker: _PointMaker,
    recorder: _Recorder,
    chunk: list[tuple[int, tuple[int, ...]]],
) -> _Asked:
    """Record the points already answered in this session; return the others to ask."""
    asked: _Asked = []
    for index, point in chunk:
        values = maker.values(point)
        key = maker.key(values)
        known = session._point_answers.get(key)
        if known is None and session._results:
            earlier = session._results.get(maker.call_key(values))
            if earlier is not None and earlier.status not in _UNSETTLED:
                known = earlier.bytes if earlier.error is None else earlier
        if known is None:
            asked.append((index, key, values))
        elif isinstance(known, int):
            recorder.sized(index, known, "success")
        else:
            recorder.failed(index, known)
    return asked


def _send(
    session: SizingSession,
    maker: _PointMaker,
    recorder: _Recorder,
    template: dict[str, Any],
    asked: _Asked,
) -> Iterator[dict[str, Any] | Crash]:
    """Send the points to the worker; their answers, to read with `_collect`."""
    if not asked:
        return iter(())
    recorder.result.asked_count += len(asked)
    encoded = [maker.encoded(values) for _, _, values in asked]
    return session._worker.size_points(template, maker.slots, encoded)


def _collect(
    session: SizingSession,
    maker: _PointMaker,
    recorder: _Recorder,
    asked: _Asked,
    answers: Iterator[dict[str, Any] | Crash],
    crashes_allowed: int,
) -> int:
    """Record the answers; the number of crashes (it stops at `crashes_allowed`)."""
    sized_codes = {
        code for code in _status_codes(session) if session.status_name(code) in SIZE_STATUSES
    }
    crashes = 0
    for (index, key, values), answer in zip(asked, answers, strict=True):
        # A sized point's status is "success" (the library's own answers a size either way).
        if isinstance(answer, dict) and answer.get("status") in sized_codes:
            n_bytes = answer["bytes"]
            if n_bytes < WRAPPED_BYTES:
                recorder.sized(index, n_bytes, "success")
                _remember(session, key, n_bytes)
                continue
        failure = session._result(maker.call(values), answer)  # the session's own wording
        recorder.failed(index, failure)
        if failure.status in _UNSETTLED:
            crashes += 1
            if crashes >= crashes_allowed:
                break  # the worker was restarted with nothing pending: safe to stop here
        else:
            _remember(session, key, failure)
    return crashes


def _remember(session: SizingSession, key: tuple[Any, ...], answer: int | CallResult) -> None:
    """Keep a point's answer for the session, up to KEPT_ANSWERS points (about 200 bytes
    each); past that, a point asked again is asked again rather than memory growing."""
    if len(session._point_answers) < KEPT_ANSWERS:
        session._point_answers[key] = answer


def _status_codes(session: SizingSession) -> list[int]:
    return list(session.catalog.enums["rocblas_status"].values())


def _give_up(recorder: _Recorder) -> None:
    """After MAX_CRASHES crashes the points never asked stay `not_sized`, counted as failed."""
    result = recorder.result
    result.gave_up = True
    result.failed_count += sum(1 for status in result.status_at if status == 0)
