"""`hipmem replay --find-capacity`: the table (or JSON) of each resource's search, which
`hipmem.replay.capacity.capacities.find_capacities` ran: GPU and host resources, RMM's resources
on the virtual GPU with a "fits" table of every device, and PyTorch's allocator there, searched
by device memory and memory fraction (hipmem_cli/virtual_capacity_output.py renders those).
"""

from __future__ import annotations

from ..replay.capacity.capacities import Capacities
from ..replay.capacity.result import CapacityResult, NoCapacityFound
from ..replay.engine.options import ReplayOptions
from ..replay.engine.preflight import Targets
from ..replay.engine.program import ReplayProgram
from ..replay.engine.resources import STREAM_ORDERED_KINDS
from ..replay.logs.events import AllocationLog
from ..replay.rmm.virtual import device_text
from . import output, virtual_capacity_output
from .skipped_rows import skipped_rows_json


def render_capacities(
    found: Capacities,
    log: AllocationLog,
    program: ReplayProgram,
    options: ReplayOptions,
    targets: Targets,
    json_out: bool,
) -> None:
    """The tables (or the JSON) of every search."""
    if json_out:
        output.print_json(_json(found, log))
        return
    if found.resources:
        _print_capacities(found, program, options, targets)
        rmm_fits = [(r.spec.label, r.fits_table) for r in found.resources
                    if r.fits_table is not None]  # fmt: skip
        if rmm_fits:
            virtual_capacity_output.render_fits(rmm_fits)
            on_virtual = next(r.spec for r in found.resources if r.fits_table is not None)
            target = targets.of(on_virtual, options)
            assert target.rmm is not None and target.device is not None
            labels = ", ".join(label for label, _ in rmm_fits)
            output.line(f"{labels}: {device_text(target.rmm, target.device)}.")
    if found.virtual:
        virtual_capacity_output.render(found.virtual, options, program, targets)


def _json(found: Capacities, log: AllocationLog) -> dict[str, object]:
    virtual = [entry.as_dict() for entry in found.virtual]
    if not found.resources:
        return {"skipped_rows": skipped_rows_json(log), "virtual_gpu": virtual}
    return {
        "skipped_rows": skipped_rows_json(log),
        "capacities": [r.as_dict() for r in found.resources],
        **({"virtual_gpu": virtual} if virtual else {}),
    }


def _print_capacities(
    found: Capacities, program: ReplayProgram, options: ReplayOptions, targets: Targets
) -> None:
    peak = program.peak_requested_bytes
    # The exact size is in the spec to use (whole IEC units) and in --json.
    table = output.Table(
        "Smallest size that replays the log with no failure",
        ["resource", "capacity", "cap/peak", "probes", "use"],
        right=("capacity", "cap/peak", "probes"),
    )
    for entry in found.resources:
        r = entry.result
        if isinstance(r, CapacityResult):
            table.add_row(
                r.resource,
                output.human_bytes(r.capacity_bytes),
                f"{r.capacity_bytes / max(peak, 1):.3f}",
                f"{len(r.probes):,}",
                r.sized_spec,
            )
        else:
            table.add_row(entry.spec.label, output.Styled("none found", "red"), "", "", "-")
    output.print_table(table)
    confirm_runs = found.confirm_runs
    output.line(
        f"peak requested by the log: {output.human_bytes(peak)} ({peak:,} bytes); each size "
        f"passed {1 + confirm_runs} replays in a row (--confirm-runs {confirm_runs} more)."
    )
    for entry in found.resources:
        if isinstance(entry.result, NoCapacityFound):
            output.error(str(entry.result))
    several = len(program.streams) > 1 or (options.threads == "logged" and len(program.threads) > 1)
    # (the virtual GPU replays on one thread in the log's order: the same every time)
    specs = [entry.spec for entry in found.resources]
    on_gpu = [s for s in specs if not targets.on_virtual_gpu(s, options)]
    if several and any(spec.kind in STREAM_ORDERED_KINDS for spec in on_gpu):
        output.line(
            "This log has several streams or threads: stream-ordered pools (RMM's pools, "
            "async) pick free blocks across streams in an order that can change from run to "
            "run, so a size near the edge can pass and later fail. Add headroom, or raise "
            "--confirm-runs."
        )
