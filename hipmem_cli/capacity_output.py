"""`hipmem replay --find-capacity`: each resource's search, and its table (or JSON).

GPU and host resources are bisected by `hipmem.replay.capacity.search`; RMM's resources on
the virtual GPU add a "fits" table of every device, and PyTorch's allocator there is searched
by device memory and memory fraction (hipmem_cli/virtual_capacity_output.py).
"""

from __future__ import annotations

import contextlib
from functools import partial

from ..replay.capacity.at_once import run_each
from ..replay.capacity.fits import Fit, fits
from ..replay.capacity.rmm_probes import RmmProbes
from ..replay.capacity.search import CapacityResult, NoCapacityFound, find_capacity
from ..replay.engine.options import ReplayOptions
from ..replay.engine.preflight import Targets
from ..replay.engine.program import ReplayProgram
from ..replay.engine.resources import STREAM_ORDERED_KINDS, ResourceSpec
from ..replay.logs.events import AllocationLog
from ..replay.rmm.virtual import device_text
from . import output, virtual_capacity_output
from .skipped_rows import skipped_rows_json


def find_capacities(
    log: AllocationLog,
    program: ReplayProgram,
    specs: list[ResourceSpec],
    options: ReplayOptions,
    confirm_runs: int,
    json_out: bool,
    targets: Targets,
) -> bool:
    """Search each resource where the preflight's `targets` say it replays; print the table
    (or JSON). True when every search found a size."""
    virtual = targets.virtual_torch
    found_virtual = virtual_capacity_output.search(
        log, program, virtual, options, confirm_runs, targets
    )
    specs = [s for s in specs if s not in virtual]
    if not specs:
        if json_out:
            output.print_json(
                {"skipped_rows": skipped_rows_json(log),
                 "virtual_gpu": [entry.as_dict() for entry in found_virtual]}
            )  # fmt: skip
        else:
            virtual_capacity_output.render(found_virtual, options, program, targets)
        return all(entry.found for entry in found_virtual)
    on_virtual = [s for s in specs if targets.on_virtual_gpu(s, options)]
    spec_targets = [targets.of(spec, options) for spec in specs]  # resolved before any thread
    on_rmm = [at for at, spec in enumerate(specs) if spec in on_virtual]
    with (
        output.progress("finding capacity") as bar,
        contextlib.ExitStack() as stack,
    ):
        # The program written once for every replay of RMM's resources on the virtual GPU
        probes = (
            stack.enter_context(RmmProbes.write(log, program, options.streams)) if on_rmm else None
        )

        def search(at: int) -> CapacityResult | NoCapacityFound:
            try:
                return find_capacity(log, specs[at], options, program=program,
                                     confirm_runs=confirm_runs, progress=bar,
                                     target=spec_targets[at], probes=probes)  # fmt: skip
            except NoCapacityFound as err:  # said in the table; the other resources go on
                return err

        searched: dict[int, CapacityResult | NoCapacityFound] = {}
        fitted: dict[int, list[Fit]] = {}  # RMM's resource on each preset: the "fits" table

        def search_into(at: int) -> None:
            searched[at] = search(at)

        def fit_into(at: int) -> None:
            fitted[at] = fits(log, specs[at], options, program=program, target=spec_targets[at],
                              probes=probes)  # fmt: skip

        # RMM's resources on the virtual GPU share nothing: side by side, one per core, the
        # searches (the longest) first
        run_each([*(partial(search_into, at) for at in on_rmm),
                  *(partial(fit_into, at) for at in on_rmm)])  # fmt: skip
        results = [searched[at] if at in searched else search(at) for at in range(len(specs))]
    rmm_fits = {specs[at].label: fitted[at] for at in on_rmm}
    if json_out:
        output.print_json(
            {
                "skipped_rows": skipped_rows_json(log),
                "capacities": [
                    {
                        **_capacity_json(s, r),
                        **(
                            {"fits": [f.as_dict() for f in rmm_fits[s.label]]}
                            if s.label in rmm_fits
                            else {}
                        ),
                    }
                    for s, r in zip(specs, results, strict=True)
                ],
                **({"virtual_gpu": [e.as_dict() for e in found_virtual]} if found_virtual else {}),
            }
        )
    else:
        _print_capacities(program, specs, results, options, confirm_runs, targets)
        if rmm_fits:
            virtual_capacity_output.render_fits(list(rmm_fits.items()))
            target = targets.of(on_virtual[0], options)
            assert target.rmm is not None and target.device is not None
            output.line(f"{', '.join(rmm_fits)}: {device_text(target.rmm, target.device)}.")
        if found_virtual:
            virtual_capacity_output.render(found_virtual, options, program, targets)
    every = all(isinstance(r, CapacityResult) for r in results)
    return every and all(entry.found for entry in found_virtual)


def _capacity_json(
    spec: ResourceSpec, result: CapacityResult | NoCapacityFound
) -> dict[str, object]:
    if isinstance(result, CapacityResult):
        return dict(result.as_dict())
    return {"resource": spec.label, "capacity_bytes": None, "error": str(result)}


def _print_capacities(
    program: ReplayProgram,
    specs: list[ResourceSpec],
    results: list[CapacityResult | NoCapacityFound],
    options: ReplayOptions,
    confirm_runs: int,
    targets: Targets,
) -> None:
    peak = program.peak_requested_bytes
    # The exact size is in the spec to use (whole IEC units) and in --json.
    table = output.Table(
        "Smallest size that replays the log with no failure",
        ["resource", "capacity", "cap/peak", "probes", "use"],
        right=("capacity", "cap/peak", "probes"),
    )
    for spec, r in zip(specs, results, strict=True):
        if isinstance(r, CapacityResult):
            table.add_row(
                r.resource,
                output.human_bytes(r.capacity_bytes),
                f"{r.capacity_bytes / max(peak, 1):.3f}",
                f"{len(r.probes):,}",
                r.sized_spec,
            )
        else:
            table.add_row(spec.label, output.Styled("none found", "red"), "", "", "-")
    output.print_table(table)
    output.line(
        f"peak requested by the log: {output.human_bytes(peak)} ({peak:,} bytes); each size "
        f"passed {1 + confirm_runs} replays in a row (--confirm-runs {confirm_runs} more)."
    )
    for r in results:
        if isinstance(r, NoCapacityFound):
            output.error(str(r))
    several = len(program.streams) > 1 or (options.threads == "logged" and len(program.threads) > 1)
    # (the virtual GPU replays on one thread in the log's order: the same every time)
    on_gpu = [s for s in specs if not targets.on_virtual_gpu(s, options)]
    if several and any(spec.kind in STREAM_ORDERED_KINDS for spec in on_gpu):
        output.line(
            "This log has several streams or threads: stream-ordered pools (RMM's pools, "
            "async) pick free blocks across streams in an order that can change from run to "
            "run, so a size near the edge can pass and later fail. Add headroom, or raise "
            "--confirm-runs."
        )
