"""The report of a replay through RMM's own resource on the virtual GPU (replay/virtual_rmm.py).

Called by `hipmem.replay.engine.replay` for an RMM resource whose backend is `virtual`; the
report is built by the engine's own helpers, so it is the GPU path's report (table, JSON, plot,
--find-capacity), named by the RMM release (`engine`: "RMM 25.4.0") and the device.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hipmem.replay import rmm_fetch
from hipmem.replay.backends import Backend
from hipmem.replay.engine import (
    FAILURES_IN_FULL,
    ReplayOptions,
    _failure,
    _Passes,
    _report,
    _sample_every,
    program_arrays,
)
from hipmem.replay.errors import ReplayError
from hipmem.replay.events import AllocationLog
from hipmem.replay.program import OP_ALLOCATE, ReplayProgram
from hipmem.replay.report import ReplayReport
from hipmem.replay.resources import ResourceSpec
from hipmem.replay.virtual_gpu import ProgramFiles
from hipmem.replay.virtual_rmm import RESERVED_FROM_STANDIN, VirtualRmm, device_text


def replay_virtual_rmm(
    log: AllocationLog, program: ReplayProgram, spec: ResourceSpec, options: ReplayOptions
) -> ReplayReport:
    """RMM's own resource on the virtual GPU (replay/virtual_rmm.py): the same report as on a
    GPU, in the log's order on one thread, each logged stream a stream of its own."""
    single = dataclasses.replace(options, threads="single")
    device = options.virtual_device()
    rmm = rmm_fetch.locate(options.rmm_version)
    with (
        ProgramFiles(program_arrays(program)) as files,
        VirtualRmm(files, program.slot_count, len(program.streams), spec, rmm) as gpu,
    ):
        run = gpu.replay(
            device,
            stop_on_failure=options.on_failure == "stop",
            time_calls=options.time_calls,
            repeats=options.repeats,
            sample_every=_sample_every(program, options.plot_samples),
        )
    allocations = np.flatnonzero(program.op == OP_ALLOCATE)
    if (
        run.failure_count
        and run.device_refusals
        and len(allocations)
        and (run.failure_op[0] == allocations[0])
    ):
        first = _failure(log, program, int(allocations[0]), 0, -1)
        raise ReplayError(
            f"{spec.label}: a virtual {device.name} of {device.memory_bytes:,} bytes is too "
            f"small for the log's first allocation ({first.size_bytes:,} bytes, {first.where}); "
            "give a larger --device or --device-memory"
        )
    failures = [
        _failure(log, program, int(op), int(live), int(reserved))
        for op, live, reserved in zip(run.failure_op[:FAILURES_IN_FULL], run.failure_live_bytes,
                                      run.failure_reserved_bytes, strict=False)
    ]  # fmt: skip
    stopped = options.on_failure == "stop" and run.failure_count > 0
    outcome = "stopped at first failure" if stopped else "completed"
    if run.setup_refused is not None:  # a size option too small for the resource itself
        outcome = "not made: RMM refused memory while making the resource"
    latency = run.latency_ns if run.latency_ns is not None else np.full(program.op_count, -1)
    report = _report(
        spec,
        Backend("virtual"),
        f"RMM {rmm.version}",
        single,
        program,
        latency,
        wall_ns=run.wall_ns,
        ops_done=run.ops_done,
        peak_reserved=run.peak_reserved_bytes,
        reserved_source=RESERVED_FROM_STANDIN,
        failures=failures,
        failure_count=run.failure_count,
        outcome=outcome,
        returned=run.held_at_end_bytes,
        unreturned=0,  # the driver checks the stand-in got every byte back
        samples=run.samples,
        passes=_Passes(wall_ns=(run.wall_ns,), upstream_calls=(run.upstream_calls,)),
    )
    report.device = device_text(rmm, device)
    report.allocator_source = rmm.describe()
    return report
