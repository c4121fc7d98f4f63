"""`hipmem replay --find-capacity` on the virtual GPU: its two tables.

Per torch resource: the smallest device memory, the smallest memory fraction of the chosen
device, then a "fits" table of the fits devices. Rendering only; the figures come from
hipmem.replay.capacity.capacities (`VirtualCapacity`).
"""

from __future__ import annotations

from ..replay.capacity.capacities import VirtualCapacity
from ..replay.capacity.fits import Fit
from ..replay.capacity.result import CapacityResult, NoCapacityFound
from ..replay.engine.options import ReplayOptions
from ..replay.engine.preflight import Targets
from ..replay.engine.program import ReplayProgram
from ..replay.virtual.devices import FITS_DEVICES
from . import output

CAPS_NOTE = (
    "device memory: a GPU with that much memory, which refuses what exceeds it (PyTorch then "
    "frees its cache and retries). Memory fraction: torch.cuda.set_per_process_memory_fraction"
    "(cap / memory) on {device}, which PyTorch checks itself; with expandable segments it can "
    "map 2 MiB past the cap. Neither counts the memory a real GPU keeps for the CUDA/HIP "
    "context and the libraries of a running program (several hundred MiB): leave room for it."
)


def render(
    found: list[VirtualCapacity], options: ReplayOptions, program: ReplayProgram, targets: Targets
) -> None:
    device = options.virtual_device()
    allocator = targets.torch_allocator(options)
    assert allocator is not None  # the preflight located it for the torch resources here
    output.line(
        f"PyTorch {allocator.version}'s allocator on a virtual GPU ({allocator.origin}: "
        f"{allocator.location})"
    )
    fraction_column = f"fraction of {device.name}"
    # The resource (a long spec) last: too wide, it gets a line of its own under its row,
    # and each figure stays on one line.
    table = output.Table(
        "Smallest capacity that replays the log with no refused allocation",
        ["device memory", fraction_column, "probes", "resource"],
        right=("device memory", fraction_column, "probes"),
    )
    for entry in found:
        table.add_row(
            _capacity(entry.device),
            _fraction(entry.fraction, device.memory_bytes),
            f"{_probes(entry.device) + _probes(entry.fraction):,}",
            entry.spec.label,
        )
    output.print_table(table)
    peak = program.peak_requested_bytes
    output.line(
        f"peak requested by the log: {output.human_bytes(peak)} ({peak:,} bytes); each search "
        "bisected to 2 MiB and confirmed (the size replays --confirm-runs more times, or the "
        "search goes on above it)."
    )
    output.line(CAPS_NOTE.format(device=device.name))
    for entry in found:
        for result in (entry.device, entry.fraction):
            if isinstance(result, NoCapacityFound):
                output.error(str(result))
    _render_fits(found)


def _capacity(result: CapacityResult | NoCapacityFound) -> output.Cell:
    if not isinstance(result, CapacityResult):
        return output.Styled("none found", "red")
    return output.whole(f"{output.human_bytes(result.capacity_bytes)} ({result.capacity_bytes:,})")


def _fraction(result: CapacityResult | NoCapacityFound, memory_bytes: int) -> output.Cell:
    if not isinstance(result, CapacityResult):
        return output.Styled("does not fit", "red")
    share = result.capacity_bytes / memory_bytes
    return output.whole(
        f"{share:.6f} = {output.human_bytes(result.capacity_bytes)} ({result.capacity_bytes:,})"
    )


def _probes(result: CapacityResult | NoCapacityFound) -> int:
    return len(result.probes) if isinstance(result, CapacityResult) else 0


def _render_fits(found: list[VirtualCapacity]) -> None:
    render_fits([(entry.spec.label, entry.fits_table) for entry in found])


def render_fits(found: list[tuple[str, list[Fit]]]) -> None:
    """The fits table: each resource (label, fits) on every preset."""
    columns = ["device", "memory", *(label for label, _ in found)]
    table = output.Table(
        "Fits: the log on each device, headroom at the reserved peak",
        columns,
        right=columns[1:],
        label_columns=2,
    )
    for name, preset in FITS_DEVICES.items():
        cells: list[output.Cell] = []
        for _, fits_of in found:
            fit = next(f for f in fits_of if f.device.name == name)
            if fit.fits:
                cells.append(output.whole(f"fits, {output.human_bytes(fit.headroom_bytes)} free"))
            else:
                refused = f"does not fit ({fit.refused_count:,} refused)"
                cells.append(output.Styled(output.whole(refused), "red"))
        table.add_row(name, output.human_bytes(preset.memory_bytes), *cells)
    output.print_table(table)
    output.note(
        "memory: as the driver reports it where measured, else the published capacity "
        "(`hipmem torch devices` names each source); headroom = memory - reserved peak."
    )
