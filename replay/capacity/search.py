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
from collections.abc import Callable
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
    replayer = _Replayer(log, program, partial(_sized, spec, option), probe_options, target)
    search = _Search(replayer, result, resolution_bytes, progress)
    if target.loop != VIRTUAL_RMM:
        return search.run(confirm_runs)
    with contextlib.ExitStack() as stack:  # the driver alone on the program's files, no report
        if probes is None or probes.streams != base.streams:
            probes = stack.enter_context(RmmProbes.write(log, program, base.streams))
        replayer.probes = probes
        replayer.ahead = stack.enter_context(contextlib.closing(
            Ahead(probes, replayer.sized, target)))  # fmt: skip
        if option == "limit":  # RMM's limit: probes answered by RMM's rule (limit_rule.py)
            search.rule = LimitRule(program, replayer.replays, resolution_bytes)
        return search.run(confirm_runs)


class _Replayer:
    """One real replay of the log at a size: through `replay_log`, or for RMM's resources on
    the virtual GPU the driver alone on the program's files (`probes`), maybe made `ahead`."""

    def __init__(
        self,
        log: AllocationLog,
        program: ReplayProgram,
        sized: Callable[[int], ResourceSpec],
        options: ReplayOptions,
        target: ReplayTarget,
    ) -> None:
        self.log, self.program, self.sized = log, program, sized
        self.options, self.target = options, target
        self.probes: RmmProbes | None = None
        self.ahead: Ahead | None = None

    def replays(self, size_bytes: int, made_ahead: bool = True) -> bool:
        spec = self.sized(size_bytes)
        if self.probes is None:
            report = replay_log(self.log, spec, self.options, program=self.program,
                                target=self.target)  # fmt: skip
            return report.failure_count == 0 and report.outcome == "completed"
        made = self.ahead.take(size_bytes) if self.ahead is not None and made_ahead else None
        if made is not None:
            return self.probes.answer(made, spec, self.target)
        start = self.ahead.start if self.ahead is not None else None
        return self.probes.replays(spec, self.target, start)


class _Search:
    """Up from the log's peak requested bytes: doubling, bisecting, then confirming; every
    probe recorded in `result`. `rule` (RMM's limit) answers probes without replaying, until a
    confirming replay disagrees with it: then every probe is replayed."""

    def __init__(
        self,
        replayer: _Replayer,
        result: CapacityResult,
        resolution_bytes: int,
        progress: ProgressCallback | None,
    ) -> None:
        self.replayer, self.result = replayer, result
        self.resolution_bytes, self.progress = resolution_bytes, progress
        self.rule: LimitRule | None = None
        self.peak_bytes = max(replayer.program.peak_requested_bytes, 1)

    def run(self, confirm_runs: int) -> CapacityResult:
        try:
            passing = self._confirmed(confirm_runs)
        except RuleBroken:  # a real replay disagreed: replay every probe instead
            self.rule = None
            self.result.probes.clear()
            passing = self._confirmed(confirm_runs)
        self.result.capacity_bytes = passing
        self.result.confirm_runs = confirm_runs
        self.result.sized_spec = self.replayer.sized(passing).label
        return self.result

    def _confirmed(self, confirm_runs: int) -> int:
        below_peak = (self.peak_bytes - 1) // self.resolution_bytes * self.resolution_bytes
        # Each confirming replay on the virtual GPU is a process and a virtual GPU of its own:
        # side by side, recorded as one after another would be (up to the first failure)
        passing = confirmed(self._least_above(below_peak),
                            partial(self.replayer.replays, made_ahead=False), self._above,
                            confirm_runs, side_by_side=self.replayer.probes is not None,
                            heard=self._record)  # fmt: skip
        if self.rule:
            self.rule.check(passing)
        return passing

    def _least_above(self, failing: int) -> int:
        """Doubling from a step above `failing` (known to fail), then bisecting."""
        ahead = self.replayer.ahead
        guess = ahead.guess if ahead is not None and self.rule is None else None
        try:
            passing = least_holding_above(self._replays, failing, self.peak_bytes,
                                          self.resolution_bytes, guess)  # fmt: skip
        except NothingHolds as err:
            raise NoCapacityFound(
                f"{self.result.resource}: no {self.result.sized_option} up to {err.failing} "
                "bytes replays the log without failure"
            ) from None
        if ahead is not None:
            ahead.forget()  # confirming replays are replays of their own, never made ahead
        return passing

    def _above(self, failed: int) -> int:
        """`failed` passed, then failed on a later try: search above it."""
        if self.rule:
            raise RuleBroken(f"{failed} bytes failed on a later try")
        return self._least_above(failed)

    def _replays(self, size_bytes: int) -> bool:
        if self.rule:
            return self._record(size_bytes, self.rule.replays(size_bytes))
        return self._record(size_bytes, self.replayer.replays(size_bytes))

    def _record(self, size_bytes: int, ok: bool) -> bool:
        if self.replayer.ahead is not None:
            self.replayer.ahead.last = ok
        self.result.probes.append(Probe(size_bytes, ok))
        if self.progress:
            self.progress(len(self.result.probes), None, self.result.resource)
        return ok
