"""Replays through an allocator's own code in a process of its own: PyTorch's caching
allocator on a GPU (the torch worker), or on the virtual GPU, and RMM's resources on the
virtual GPU. Each runs the log in its order on one thread, as one process drives an allocator;
the target (replay/engine/target.py) has located the release and built the virtual GPU."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ReplayError
from ..logs.events import AllocationLog
from ..pytorch import resource as torch_resource
from .outcome import LoopRun, Passes, failure_at, failures_of, stopped_or_completed, untimed
from .program import OP_ALLOCATE, ReplayProgram, program_arrays
from .resources import ResourceSpec
from .target import ReplayTarget

if TYPE_CHECKING:
    from ..pytorch.allocator import TorchAllocator
    from ..rmm.virtual import RmmProbe
    from ..virtual.devices import Device
    from .options import ReplayOptions


def replay_torch_worker(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    target: ReplayTarget,
    options: ReplayOptions,
) -> LoopRun:
    """PyTorch's allocator on a GPU, in the torch worker (replay/pytorch/worker.py)."""
    run = torch_resource.run_torch(
        program_arrays(program),
        program.slot_count,
        torch_resource.alloc_conf(spec, log),
        limit_bytes=spec.limit_bytes,
        stop_on_failure=options.on_failure == "stop",
        time_calls=options.time_calls,
        repeats=options.repeats,
        device=target.backend.device,
    )
    # The worker process has ended: the driver took back all it held (unreturned 0).
    return dataclasses.replace(
        _torch_run(log, program, run, options, run.latency_ns),
        backend=f"torch ({run.gpu})",
        engine=f"torch {run.torch_version}",
        passes=Passes(wall_ns=()),  # the worker reports its best pass only
    )


def replay_virtual_torch(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    target: ReplayTarget,
    options: ReplayOptions,
) -> LoopRun:
    """PyTorch's allocator on the virtual GPU: the same report as on a GPU."""
    from ..virtual.gpu import VirtualGpu
    from .native_replay import sample_every

    device, allocator = target.device, target.allocator
    assert device is not None and allocator is not None  # a VIRTUAL_TORCH target has both
    conf = torch_resource.alloc_conf(spec, log)
    arrays = program_arrays(program)
    streams = len(program.streams)
    with VirtualGpu(arrays, program.slot_count, streams, conf, device, allocator,
                    built=target.built) as gpu:  # fmt: skip
        run = gpu.replay(
            limit_bytes=spec.limit_bytes,
            stop_on_failure=options.on_failure == "stop",
            time_calls=options.time_calls,
            repeats=options.repeats,
            sample_every=sample_every(program, options.plot_samples),
        )
    # The virtual GPU holds no memory (unreturned 0): it is address space in a process.
    return dataclasses.replace(
        _torch_run(log, program, run, options, untimed(program, run.latency_ns)),
        backend="virtual",
        engine=f"torch {allocator.version}",
        samples=run.samples,
        device=virtual_device_text(allocator, device),
        allocator_source=allocator.describe(),
    )


def _torch_run(
    log: AllocationLog,
    program: ReplayProgram,
    run: Any,
    options: ReplayOptions,
    latency_ns: np.ndarray,
) -> LoopRun:
    """What PyTorch's allocator says of a replay, on a GPU or on the virtual GPU alike (the
    caller names where it ran: `backend`, `engine`); it ran in a process that has ended, so
    no byte is left unreturned."""
    return LoopRun(
        backend="",
        engine="",
        threads="single",
        latency_ns=latency_ns,
        wall_ns=run.wall_ns,
        ops_done=run.ops_done,
        peak_reserved_bytes=run.peak_reserved_bytes,
        reserved_source=torch_resource.RESERVED_FROM_TORCH,
        failures=failures_of(log, program, run.failure_op, run.failure_live_bytes),
        failure_count=run.failure_count,
        outcome=stopped_or_completed(options.on_failure == "stop", run.failure_count),
        returned_bytes=run.held_at_end_bytes,
        unreturned_bytes=0,
        samples=None,
    )


def replay_virtual_rmm(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    target: ReplayTarget,
    options: ReplayOptions,
) -> LoopRun:
    """RMM's own resource on the virtual GPU (replay/rmm/virtual.py): the same report as on a
    GPU, in the log's order on one thread, each logged stream a stream of its own."""
    from ..rmm.virtual import RESERVED_FROM_STANDIN, VirtualRmm, device_text
    from ..virtual.gpu import ProgramFiles
    from .native_replay import sample_every

    device, rmm = target.device, target.rmm
    assert device is not None and rmm is not None  # a VIRTUAL_RMM target has both
    with (
        ProgramFiles(program_arrays(program)) as files,
        VirtualRmm(files, program.slot_count, len(program.streams), spec, rmm) as gpu,
    ):
        run = gpu.replay(
            device,
            stop_on_failure=options.on_failure == "stop",
            time_calls=options.time_calls,
            repeats=options.repeats,
            sample_every=sample_every(program, options.plot_samples),
        )
    refuse_too_small_device(log, program, spec, device, run)
    outcome = stopped_or_completed(options.on_failure == "stop", run.failure_count)
    if run.setup_refused is not None:  # a size option too small for the resource itself
        outcome = "not made: RMM refused memory while making the resource"
    return LoopRun(
        backend="virtual",
        engine=f"RMM {rmm.version}",
        threads="single",
        latency_ns=untimed(program, run.latency_ns),
        wall_ns=run.wall_ns,
        ops_done=run.ops_done,
        peak_reserved_bytes=run.peak_reserved_bytes,
        reserved_source=RESERVED_FROM_STANDIN,
        failures=failures_of(log, program, run.failure_op, run.failure_live_bytes,
                             run.failure_reserved_bytes),
        failure_count=run.failure_count,
        outcome=outcome,
        returned_bytes=run.held_at_end_bytes,
        unreturned_bytes=0,  # the driver checks the stand-in got every byte back
        samples=run.samples,
        passes=Passes(wall_ns=(run.wall_ns,), upstream_calls=(run.upstream_calls,)),
        device=device_text(rmm, device),
        allocator_source=rmm.describe(),
    )  # fmt: skip


def refuse_too_small_device(
    log: AllocationLog, program: ReplayProgram, spec: ResourceSpec, device: Device, run: RmmProbe
) -> None:
    """A device that refused the log's very first allocation is no replay of the log: one
    error naming the device and the allocation (a replay and a capacity probe alike)."""
    if not (run.failure_count and run.device_refusals and len(run.failure_op)):
        return
    first = int(np.argmax(program.op == OP_ALLOCATE))
    if program.op_count and program.op[first] == OP_ALLOCATE and run.failure_op[0] == first:
        at = failure_at(log, program, first, 0, -1)
        raise ReplayError(
            f"{spec.label}: a virtual {device.name} of {device.memory_bytes:,} bytes is too "
            f"small for the log's first allocation ({at.size_bytes:,} bytes, {at.where}); "
            "give a larger --device or --device-memory"
        )


def virtual_device_text(allocator: TorchAllocator, device: Device) -> str:
    """What the report says of where it ran, plainly."""
    return (
        f"PyTorch {allocator.version}'s allocator on a virtual {device.name} "
        f"({device.memory_bytes:,} bytes)"
    )
