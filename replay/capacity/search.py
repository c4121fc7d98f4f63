"""`--find-capacity`: the smallest pool or limit through which a log replays with no failure.

A pool (`pool`, or the pool under `binning`) is sized by its `maximum`; every other resource by
a `limit=` on top of it. Candidates are multiples of `resolution_bytes` (1 MiB by default,
itself a multiple of RMM's 256-byte alignment). The search starts at the log's peak requested
bytes (no resource can do with less), doubles until a replay succeeds (giving up past
`GROWTH_LIMIT` times the peak), then bisects: hipmem/_core/bisection.py's
`least_holding_above`. Pools can fragment in ways that are not monotonic in their size;
bisection then finds one boundary, which is why every probe is reported.

The size found is confirmed (replay/capacity/confirmation.py): it replays `confirm_runs` more
times (recorded as probes), or the search goes on above it, doubling again.

RMM's `limit=` on the virtual GPU follows a rule that answers its probes from one replay
(replay/capacity/limit_rule.py): the same probes and answer, the confirming replays real.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from functools import partial

from hipmem._core.bisection import NothingHolds, least_holding_above
from hipmem._core.progress import ProgressCallback

from ..engine.options import ReplayOptions
from ..engine.program import ReplayProgram, build_program
from ..engine.resources import ResourceSpec
from ..engine.run import replay_log
from ..engine.target import VIRTUAL_RMM, VIRTUAL_TORCH, ReplayTarget, resolve_target
from ..errors import ReplayUsageError
from ..logs.events import AllocationLog
from .confirmation import CONFIRM_RUNS, confirmed
from .limit_rule import LimitRule, RuleBroken
from .result import CapacityResult, NoCapacityFound, Probe
from .rmm_probes import Ahead, RmmProbes

MIB = 1 << 20

__all__ = [
    "CONFIRM_RUNS", "CapacityResult", "NoCapacityFound", "Probe", "find_capacity", "sized_option"
]  # fmt: skip


def sized_option(spec: ResourceSpec) -> str:
    """Which knob the search turns for this resource."""
    pooled = spec.kind == "pool" or (
        spec.kind == "binning" and spec.options.get("upstream") == "pool"
    )
    return "maximum" if pooled and spec.limit_bytes is None else "limit"


def _sized(spec: ResourceSpec, option: str, size_bytes: int) -> ResourceSpec:
    if option == "limit":
        return spec.with_limit(size_bytes)
    sized = spec.with_option("maximum", size_bytes)
    if (spec.option_bytes("initial") or 0) > size_bytes:
        sized = sized.with_option("initial", size_bytes)
    return sized


def find_capacity(
    log: AllocationLog,
    spec: ResourceSpec,
    options: ReplayOptions | None = None,
    *,
    program: ReplayProgram | None = None,
    resolution_bytes: int = MIB,
    confirm_runs: int = CONFIRM_RUNS,
    progress: ProgressCallback | None = None,
    cap: str = "device",
    target: ReplayTarget | None = None,
    probes: RmmProbes | None = None,
) -> CapacityResult:
    """Bisect the smallest `maximum`/`limit` (a multiple of `resolution_bytes`) with no failure.

    PyTorch's allocator on the virtual GPU (backend "virtual", or "auto" with no GPU) is sized
    by the device instead: `cap="device"` finds the smallest device memory, `cap="fraction"`
    the smallest per-process memory cap of the options' device (replay/capacity/fits.py),
    to 2 MiB unless another `resolution_bytes` is given. `target`: the spec's, resolved
    earlier (replay/engine/target.py); every probe runs there. `probes`: the program written
    for RMM's resources on the virtual GPU, shared by a command's searches (written here when
    not given)."""
    base = options or ReplayOptions()
    if spec.kind == "null":
        raise ReplayUsageError(
            "the null resource reserves nothing: it has no capacity",
            parameter="spec",
            value=spec.label,
        )
    target = target if target is not None else resolve_target(spec, base)
    if target.loop == VIRTUAL_TORCH:
        from .fits import find_virtual_capacity

        return find_virtual_capacity(
            log, spec, base, cap=cap, program=program,
            resolution_bytes=2 * MIB if resolution_bytes == MIB else resolution_bytes,
            confirm_runs=confirm_runs, progress=progress, target=target,
        )  # fmt: skip
    program = program if program is not None else build_program(log)
    # Probes only need to know whether a failure happens: stop at the first, time nothing.
    probe_options = replace(base, on_failure="stop", time_calls=False, repeats=1, plot_samples=0)
    option = sized_option(spec)
    result = CapacityResult(spec.label, option, 0, program.peak_requested_bytes, resolution_bytes)

    if target.loop == VIRTUAL_RMM:  # the driver alone on the program's files, no report
        with contextlib.ExitStack() as stack:
            if probes is None or probes.streams != base.streams:
                probes = stack.enter_context(RmmProbes.write(log, program, base.streams))
            ahead = stack.enter_context(contextlib.closing(
                Ahead(probes, partial(_sized, spec, option), target)))  # fmt: skip
            return _search(log, spec, program, probe_options, option, result, resolution_bytes,
                           confirm_runs, progress, target, probes, ahead)  # fmt: skip
    return _search(log, spec, program, probe_options, option, result, resolution_bytes,
                   confirm_runs, progress, target, None, None)  # fmt: skip


def _search(
    log: AllocationLog,
    spec: ResourceSpec,
    program: ReplayProgram,
    probe_options: ReplayOptions,
    option: str,
    result: CapacityResult,
    resolution_bytes: int,
    confirm_runs: int,
    progress: ProgressCallback | None,
    target: ReplayTarget,
    probes: RmmProbes | None,
    ahead: Ahead | None,
) -> CapacityResult:
    def run(size_bytes: int, made_ahead: bool = True) -> bool:  # one real replay
        sized = _sized(spec, option, size_bytes)
        if probes is not None:  # RMM's resource on the virtual GPU
            made = ahead.take(size_bytes) if ahead is not None and made_ahead else None
            if made is not None:
                return probes.answer(made, sized, target)
            return probes.replays(sized, target, ahead.start if ahead is not None else None)
        report = replay_log(log, sized, probe_options, program=program, target=target)
        return report.failure_count == 0 and report.outcome == "completed"

    # RMM's limit on the virtual GPU: probes answered by RMM's rule (replay/capacity/limit_rule.py)
    rule = LimitRule(program, run, resolution_bytes) if (
        option == "limit" and target.loop == VIRTUAL_RMM) else None  # fmt: skip

    def record(size_bytes: int, ok: bool) -> bool:
        if ahead is not None:
            ahead.last = ok
        result.probes.append(Probe(size_bytes, ok))
        if progress:
            progress(len(result.probes), None, spec.label)
        return ok

    def replays(size_bytes: int) -> bool:
        return record(size_bytes, rule.replays(size_bytes) if rule else run(size_bytes))

    def least_above(failing: int) -> int:  # double from a step above `failing`, then bisect
        guess = ahead.guess if ahead is not None and rule is None else None
        try:
            passing = least_holding_above(replays, failing, peak, resolution_bytes, guess)
        except NothingHolds as err:
            raise NoCapacityFound(f"{spec.label}: no {option} up to {err.failing} bytes "
                                  "replays the log without failure") from None  # fmt: skip
        if ahead is not None:
            ahead.forget()  # confirming replays are replays of their own, never made ahead
        return passing

    def above(failed: int) -> int:  # `failed` passed, then failed on a later try
        if rule:
            raise RuleBroken(f"{failed} bytes failed on a later try")
        return least_above(failed)

    def search() -> int:
        # Each confirming replay on the virtual GPU is a process and a virtual GPU of its own:
        # side by side, recorded as one after another would be (up to the first failure)
        passing = confirmed(least_above(below_peak), partial(run, made_ahead=False), above,
                            confirm_runs, side_by_side=target.loop == VIRTUAL_RMM,
                            heard=record)  # fmt: skip
        if rule:
            rule.check(passing)
        return passing

    peak = max(program.peak_requested_bytes, 1)
    below_peak = (peak - 1) // resolution_bytes * resolution_bytes  # must fail
    try:
        passing = search()
    except RuleBroken:  # a real replay disagreed: replay every probe instead
        rule = None
        result.probes.clear()
        passing = search()
    result.capacity_bytes = passing
    result.confirm_runs = confirm_runs
    result.sized_spec = _sized(spec, option, passing).label
    return result
