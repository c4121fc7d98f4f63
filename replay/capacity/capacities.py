"""`--find-capacity` for a command's resources: each searched where the preflight says it
replays, the answers as one result (`Capacities`), which the command line only renders
(hipmem_cli/capacity_output.py):

- GPU and host resources: `search.find_capacity`, one after another;
- RMM's resources on the virtual GPU: each one's search and its fits table, side by side, one
  per core (they share nothing but the program, written once: `RmmProbes`), the searches (the
  longest) first;
- PyTorch's allocator on the virtual GPU: the smallest device memory, the smallest memory
  fraction of the options' device, and the fits table (fits.py), one resource after another.

A search that finds no size is part of the answer (`NoCapacityFound`); the others go on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

from hipmem._core.progress import ProgressCallback, no_progress

from ..engine.options import ReplayOptions
from ..engine.preflight import Targets, preflight
from ..engine.program import ReplayProgram, build_program
from ..engine.resources import ResourceSpec
from ..logs.events import AllocationLog
from .at_once import run_each
from .confirmation import CONFIRM_RUNS
from .fits import Fit, find_virtual_capacity, fits_table
from .result import CapacityResult, NoCapacityFound
from .rmm_probes import RmmProbes
from .search import find_capacity

Found = CapacityResult | NoCapacityFound


def _found_as_dict(result: Found) -> dict[str, object]:
    if isinstance(result, CapacityResult):
        return dict(result.as_dict())
    return {"capacity_bytes": None, "error": str(result)}


@dataclass
class ResourceCapacity:
    """One resource's search, and for RMM's resources on the virtual GPU their fits."""

    spec: ResourceSpec
    result: Found
    fits_table: list[Fit] | None = None

    def as_dict(self) -> dict[str, object]:
        found = _found_as_dict(self.result)
        if not isinstance(self.result, CapacityResult):
            found = {"resource": self.spec.label, **found}
        fitted = {} if self.fits_table is None else {
            "fits": [f.as_dict() for f in self.fits_table]}  # fmt: skip
        return {**found, **fitted}


@dataclass
class VirtualCapacity:
    """PyTorch's allocator on the virtual GPU: both searches and the fits of one resource."""

    spec: ResourceSpec
    device: Found
    fraction: Found
    fits_table: list[Fit]

    @property
    def found(self) -> bool:
        return isinstance(self.device, CapacityResult) and isinstance(self.fraction, CapacityResult)

    def as_dict(self) -> dict[str, object]:
        return {
            "resource": self.spec.label,
            "device_memory": _found_as_dict(self.device),
            "memory_fraction": _found_as_dict(self.fraction),
            "fits": [fit.as_dict() for fit in self.fits_table],
        }


@dataclass
class Capacities:
    """Every resource's answer: PyTorch's on the virtual GPU apart (`virtual`), the others in
    the order asked (`resources`)."""

    resources: list[ResourceCapacity]
    virtual: list[VirtualCapacity]
    confirm_runs: int  # the replays each size found passed again

    @property
    def found(self) -> bool:
        """Every search found a size."""
        searched = all(isinstance(r.result, CapacityResult) for r in self.resources)
        return searched and all(entry.found for entry in self.virtual)


def find_capacities(
    log: AllocationLog,
    specs: list[ResourceSpec],
    options: ReplayOptions | None = None,
    *,
    program: ReplayProgram | None = None,
    targets: Targets | None = None,
    confirm_runs: int | None = None,
    progress: ProgressCallback | None = None,
) -> Capacities:
    """Search each of `specs` where it replays: what `hipmem replay --find-capacity` answers.
    Each size found replays `confirm_runs` more times (confirmation.CONFIRM_RUNS unless given).
    `targets`: the preflight's (replay/engine/preflight.py), resolved here when not given;
    `program`: the log's, built here when not given."""
    options = options or ReplayOptions()
    targets = targets if targets is not None else preflight(specs, options)
    program = program if program is not None else build_program(log)
    progress = progress or no_progress
    confirm_runs = CONFIRM_RUNS if confirm_runs is None else confirm_runs
    virtual = [_virtual(log, program, spec, options, targets, confirm_runs, progress)
               for spec in targets.virtual_torch]  # fmt: skip
    others = [s for s in specs if s not in targets.virtual_torch]
    found = _others(log, program, others, options, targets, confirm_runs, progress)
    return Capacities(found, virtual, confirm_runs)


def _virtual(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    options: ReplayOptions,
    targets: Targets,
    confirm_runs: int,
    progress: ProgressCallback,
) -> VirtualCapacity:
    target = targets.of(spec, options)
    results: list[Found] = []
    for cap in ("device", "fraction"):
        try:
            results.append(find_virtual_capacity(log, spec, options, cap=cap, program=program,
                                                  confirm_runs=confirm_runs, progress=progress,
                                                  target=target))  # fmt: skip
        except NoCapacityFound as err:
            results.append(err)
    progress(0, None, f"{spec.label}: fits")
    fitted = fits_table(log, spec, options, program=program, target=target)
    return VirtualCapacity(spec, results[0], results[1], fitted)


def _others(
    log: AllocationLog,
    program: ReplayProgram,
    specs: list[ResourceSpec],
    options: ReplayOptions,
    targets: Targets,
    confirm_runs: int,
    progress: ProgressCallback,
) -> list[ResourceCapacity]:
    spec_targets = [targets.of(spec, options) for spec in specs]  # resolved before any thread
    on_rmm = [at for at, spec in enumerate(specs) if targets.on_virtual_gpu(spec, options)]
    with contextlib.ExitStack() as stack:
        # The program written once for every replay of RMM's resources on the virtual GPU
        probes = (
            stack.enter_context(RmmProbes.write(log, program, options.streams)) if on_rmm else None
        )

        def search(at: int) -> Found:
            try:
                return find_capacity(log, specs[at], options, program=program,
                                     confirm_runs=confirm_runs, progress=progress,
                                     target=spec_targets[at], probes=probes)  # fmt: skip
            except NoCapacityFound as err:  # part of the answer; the other resources go on
                return err

        def fitted(at: int) -> list[Fit]:
            return fits_table(log, specs[at], options, program=program, target=spec_targets[at],
                        probes=probes)  # fmt: skip

        # Side by side, one per core, the searches (the longest) first
        tasks: list[Callable[[], object]] = [partial(search, at) for at in on_rmm]
        tasks += [partial(fitted, at) for at in on_rmm]
        answers: list[object] = run_each(tasks)
        searched = {at: cast(Found, answers[k]) for k, at in enumerate(on_rmm)}
        fits_of = {at: cast(list[Fit], answers[len(on_rmm) + k]) for k, at in enumerate(on_rmm)}
        return [ResourceCapacity(spec, searched[at] if at in searched else search(at),
                                 fits_of.get(at))
                for at, spec in enumerate(specs)]  # fmt: skip
