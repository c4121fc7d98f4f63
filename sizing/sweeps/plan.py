"""A swept call, checked before anything is sized: one call with some of its whole-number
arguments given as ranges (`batch_count=1..64`), several forming a grid.

    plan = plan_sweep("rocblas_dtrsm_batched:m=64,n=64", ["batch_count=1..64"], catalog)

`sizing/sweeps/sweep.py` sizes it in a session's worker; `range.py` reads the ranges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..calls.spec import Call, Value, check_integer, make_call, split_call, unknown_argument
from ..errors import BadArgument
from ..rocm.catalog import Catalog, Param, Routine
from .range import DEFAULT_MAX_POINTS, BadSweep, Sweep, check_grid, parse_sweep, point_count

_WHOLE_NUMBER_KINDS = ("i8", "i32", "i64", "u32")


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
        raise BadArgument(unknown_argument(routine, sweep.arg, settable))
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
        check_integer(f"{routine.name}: {sweep.arg}={end} (in {sweep})", sweep.arg, kind, end)
