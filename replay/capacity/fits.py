"""Capacity on the virtual GPU: the smallest device, the smallest memory fraction, and "fits".

Two caps, which PyTorch's allocator meets differently (measured on the H200, see
docs/pytorch-virtual-gpu.md), so each figure says which it is:

- device memory (`cap="device"`): a GPU with less memory. cudaMalloc (or cuMemCreate) is
  refused past it; the allocator then frees its cached blocks and retries, so a job can fit
  well below its uncapped reserved peak.
- memory fraction (`cap="fraction"`): `torch.cuda.set_per_process_memory_fraction` on a given
  device, what `-r torch:limit=` sets. The allocator checks it itself, before asking the
  driver; with expandable segments it was seen to map 2 MiB past it, which a smaller device
  would not allow.

Neither counts the memory a real device keeps for the CUDA/HIP context and the libraries of a
running program (several hundred MiB): add it, or read the headroom of `fits` with it in mind.

Each probe is a replay in a fresh process (replay/virtual/gpu.py). The search bisects
between the peak requested bytes (below it nothing fits) and the uncapped reserved peak (at
it nothing is ever refused) to `resolution_bytes`, through hipmem/_core/bisection.py, then
confirms as every capacity search does (replay/capacity/confirmation.py): the size found
replays `confirm_runs` more times, or the search goes on above it. A replay here is the same
every time, so the confirming replays are not listed among the probes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hipmem._core.bisection import NothingHolds, first_holding, growth_most, least_holding
from hipmem._core.byte_sizes import MiB
from hipmem._core.progress import ProgressCallback

from ..engine.backends import Backend
from ..engine.options import ReplayOptions
from ..engine.program import OP_ALLOCATE, ReplayProgram, build_program, program_arrays
from ..engine.resources import ResourceSpec
from ..engine.target import VIRTUAL_TORCH, ReplayTarget, target_on
from ..errors import ReplayUsageError
from ..logs.events import AllocationLog
from ..pytorch import resource as torch_resource
from ..rmm.virtual import RmmProbe
from ..virtual.devices import FITS_DEVICES, Device
from ..virtual.gpu import ProbeResult, VirtualGpu
from . import arena_rule
from .confirmation import CONFIRM_RUNS, confirmed
from .result import CapacityResult, NoCapacityFound, Probe
from .rmm_probes import RmmProbes

CAPS = ("device", "fraction")
SIZED_DEVICE = "device memory"


@dataclass(frozen=True)
class Fit:
    """Whether a log replays on one device with no refused allocation, and the room left."""

    device: Device
    fits: bool
    peak_reserved_bytes: int
    refused_count: int

    @property
    def headroom_bytes(self) -> int:
        """Device memory left at the reserved peak (negative: what it lacks)."""
        return self.device.memory_bytes - self.peak_reserved_bytes

    def as_dict(self) -> dict[str, object]:
        return {
            "device": self.device.name,
            "memory_bytes": self.device.memory_bytes,
            "fits": self.fits,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "headroom_bytes": self.headroom_bytes,
            "refused_allocations": self.refused_count,
        }


class _Session:
    """The program, settings and allocator of one search; starts driver processes."""

    def __init__(
        self,
        log: AllocationLog,
        spec: ResourceSpec,
        options: ReplayOptions,
        program: ReplayProgram,
        target: ReplayTarget | None,
    ) -> None:
        if spec.kind != "torch":
            raise ReplayUsageError(
                f"{spec.label!r}: the virtual GPU runs PyTorch's allocator (-r torch[:...])"
            )
        self.spec, self.program = spec, program
        if target is None or target.loop != VIRTUAL_TORCH:
            target = target_on(Backend("virtual"), spec, options)
        assert target.device is not None and target.allocator is not None
        self.device, self.allocator, self.built = target.device, target.allocator, target.built
        self.conf = torch_resource.alloc_conf(spec, log)
        self.arrays = program_arrays(program)

    def start(self) -> VirtualGpu:
        return VirtualGpu(self.arrays, self.program.slot_count, len(self.program.streams),
                          self.conf, self.device, self.allocator, built=self.built)  # fmt: skip


def find_virtual_capacity(
    log: AllocationLog,
    spec: ResourceSpec,
    options: ReplayOptions | None = None,
    *,
    cap: str = "device",
    program: ReplayProgram | None = None,
    resolution_bytes: int = 2 * MiB,
    confirm_runs: int = CONFIRM_RUNS,
    progress: ProgressCallback | None = None,
    target: ReplayTarget | None = None,
) -> CapacityResult:
    """The smallest device memory (`cap="device"`) or per-process memory cap on the options'
    device (`cap="fraction"`), a multiple of `resolution_bytes`, with no refused allocation.
    `target`: the spec's on the virtual GPU, resolved earlier (replay/engine/target.py)."""
    if cap not in CAPS:
        raise ReplayUsageError(f"not one of {', '.join(CAPS)}", parameter="cap", value=cap)
    if resolution_bytes <= 0 or resolution_bytes % MiB:
        raise ReplayUsageError(
            "must be a positive number of whole MiB",
            parameter="resolution_bytes",
            value=resolution_bytes,
        )
    program = program if program is not None else build_program(log)
    session = _Session(log, spec, options or ReplayOptions(backend="virtual"), program, target)
    device = session.device
    sized = SIZED_DEVICE if cap == "device" else f"memory fraction of {device.name}"
    result = CapacityResult(spec.label, sized, 0, program.peak_requested_bytes, resolution_bytes)

    def probe(gpu: VirtualGpu, size: int) -> ProbeResult:
        if cap == "device":
            return gpu.replay(device_bytes=size, stop_on_failure=True)
        return gpu.replay(device_bytes=device.memory_bytes, limit_bytes=size, stop_on_failure=True)

    with session.start() as gpu:

        def replays(size: int) -> bool:
            ok = probe(gpu, size).replayed
            result.probes.append(Probe(size, ok))
            if progress:
                progress(len(result.probes), None, spec.label)
            return ok

        failing = max(0, (program.peak_requested_bytes - 1) // resolution_bytes) * resolution_bytes
        top, uncapped = _uncapped(gpu, cap, device, sized, spec)
        passing = _first_passing(uncapped, top, failing, resolution_bytes, replays, sized, spec)
        passing = least_holding(replays, failing, passing, resolution_bytes)

        def above(failed: int) -> int:  # `failed` passed, then failed on a later try
            if failed >= top:
                raise NoCapacityFound(f"{spec.label}: no {sized} up to {top:,} bytes replays "
                                      "it every time")  # fmt: skip
            return least_holding(replays, failed, top, resolution_bytes)

        passing = confirmed(passing, lambda size: probe(gpu, size).replayed, above, confirm_runs)
    result.capacity_bytes = passing
    result.confirm_runs = confirm_runs
    if cap == "device":
        result.sized_spec = f"{spec.label} on a GPU of {passing:,} bytes"
    else:
        result.sized_spec = spec.with_limit(passing).label
    return result


def _uncapped(
    gpu: VirtualGpu, cap: str, device: Device, sized: str, spec: ResourceSpec
) -> tuple[int, ProbeResult]:
    """The most the search asks, and the log's replay with no cap there: the device's memory,
    or for `cap="device"` the first device that replays the log, doubled from it."""
    memory_bytes = device.memory_bytes
    most = memory_bytes if cap == "fraction" else growth_most(memory_bytes, memory_bytes)
    runs: dict[int, ProbeResult] = {}

    def replays(size: int) -> bool:
        runs[size] = gpu.replay(device_bytes=size, stop_on_failure=True)
        return runs[size].replayed

    try:  # (no smaller device is known to refuse the log: 0 stands below the first)
        _, size = first_holding(replays, 0, memory_bytes, most)
    except NothingHolds as err:  # the log does not fit the device itself
        if cap == "fraction":
            raise NoCapacityFound(
                f"{spec.label}: does not replay on a {device.name} even with all of its memory "
                f"({memory_bytes:,} bytes): no {sized} does"
            ) from None
        raise NoCapacityFound(
            f"{spec.label}: no device up to {err.failing:,} bytes replays it"
        ) from None
    return size, runs[size]


def _first_passing(
    uncapped: ProbeResult,
    top: int,
    failing: int,
    resolution_bytes: int,
    replays: Callable[[int], bool],
    sized: str,
    spec: ResourceSpec,
) -> int:
    """A size that replays: the uncapped reserved peak, doubled (to `top`) until one does."""
    # Uncapped, the allocator never asked for more than its reserved peak, so a device of
    # that size refuses nothing. A fraction is PyTorch's own check, which with expandable
    # segments can refuse at that peak (it counts a whole mapping before it is made): grow.
    upper = min(max(-(-uncapped.peak_reserved_bytes // resolution_bytes) * resolution_bytes,
                    resolution_bytes), top)  # fmt: skip
    try:
        # The bisection after goes from `failing`, not from a size refused here: the probes
        # are those this search has always made.
        return first_holding(replays, failing, upper, top, resolution_bytes)[1]
    except NothingHolds:
        raise NoCapacityFound(f"{spec.label}: no {sized} up to {top:,} bytes replays it") from None


def fits_table(
    log: AllocationLog,
    spec: ResourceSpec,
    options: ReplayOptions | None = None,
    *,
    devices: list[Device] | None = None,
    program: ReplayProgram | None = None,
    target: ReplayTarget | None = None,
    probes: RmmProbes | None = None,
) -> list[Fit]:
    """For each device (the fits devices by default): does the log replay there, with what room.
    PyTorch's allocator, or RMM's resource (replay/rmm/virtual.py) on the virtual GPU.
    `target`: the spec's on the virtual GPU, resolved earlier (replay/engine/target.py).
    `probes`: the program written for RMM's resources, shared by a command's replays."""
    program = program if program is not None else build_program(log)
    chosen = devices if devices is not None else list(FITS_DEVICES.values())
    options = options or ReplayOptions(backend="virtual")
    if spec.kind != "torch":
        if target is None or target.rmm is None:
            target = target_on(Backend("virtual"), spec, options)
        if probes is not None and probes.streams == "logged":
            return _rmm_fits(spec, target, chosen, probes)
        with RmmProbes.write(log, program, "logged") as written:
            return _rmm_fits(spec, target, chosen, written)
    session = _Session(log, spec, options, program, target)
    found: list[Fit] = []
    with session.start() as gpu:
        for device in chosen:
            run = gpu.replay(device=device, limit_bytes=session.spec.limit_bytes)
            found.append(Fit(device, run.replayed, run.peak_reserved_bytes, run.failure_count))
    return found


def _rmm_fits(
    spec: ResourceSpec, target: ReplayTarget, devices: list[Device], probes: RmmProbes
) -> list[Fit]:
    """RMM's resource on each device, from one replay on the largest where RMM's rules say
    another device replays the same. Arena asks the device its size (half the free memory) and
    replays alike on the devices `arena_rule` names; the others meet a device only when it
    refuses a cudaMalloc, so the largest's replay stands for every device whose memory it never
    came near (its peak, in the device's pages, fits). The rest are replayed. A device too
    small for what the resource takes at its making does not fit, every allocation refused."""
    allocations = int((probes.program.op == OP_ALLOCATE).sum())
    found: list[Fit] = []
    with probes.gpu(spec, target) as gpu:
        largest = max(devices, key=lambda d: d.memory_bytes)
        base = probes.replay(gpu, largest, stop_on_failure=False)
        base_arena_bytes = arena_rule.arena_bytes(spec, largest)
        # Devices alike in what RMM can see of them (memory, pages; not the name) replay alike
        made: dict[tuple[int, int], RmmProbe] = {
            (largest.memory_bytes, largest.granularity_bytes): base
        }
        for device in devices:
            if spec.kind == "arena":
                size = arena_rule.arena_bytes(spec, device)
                if arena_rule.replays_alike(base, base_arena_bytes, device, size):
                    found.append(Fit(device, base.replayed, size, base.failure_count))
                    continue
            elif not base.device_refusals and base.device_peak_bytes <= device.memory_bytes:
                found.append(Fit(device, base.replayed, base.peak_reserved_bytes,
                                 base.failure_count))  # fmt: skip
                continue
            alike = (device.memory_bytes, device.granularity_bytes)
            run = made.get(alike) or probes.replay(gpu, device, stop_on_failure=False)
            made[alike] = run
            if run.setup_refused is not None and run.device_refusals:
                found.append(Fit(device, False, 0, allocations))
                continue
            found.append(Fit(device, run.replayed, run.peak_reserved_bytes, run.failure_count))
    return found
