"""Replay an allocation log through a real memory resource and report what it did.

Semantics (the same in the native core and the Python loop):

- the program (replay/engine/program.py) is replayed in the log's global order; with
  `threads="logged"` each logged thread gets its own OS thread and waits for its turn, so
  per-thread arenas and stream-ordered pools see the threads production had;
- each logged stream is a real stream (the default stream for 0); a free goes to the stream
  its own log row names; `streams="default"` puts every call on the default stream instead
  (what the C++ floor does, and a way to see what the streams themselves cost);
- an allocation the resource refuses is a failure: recorded with its log row, size, the bytes
  the replay held and the bytes the resource had reserved; `on_failure="skip"` goes on (the
  matching free is skipped), `"stop"` ends the replay;
- every byte is returned before `replay()` returns: at the end (allocations the log never
  freed), after a stop, on an error and on Ctrl-C.

The cuda backend and the host resource run the native core (replay/engine/native.py): its loop costs
about what the C++ floor's does, so the allocator, not the replay, sets events/s. The hip
backend and `engine="python"` run a Python loop per event.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..errors import ReplayError, ReplayUsageError
from ..logs.events import ALLOCATE_FAILURE, AllocationLog
from ..pytorch import allocator as torch_allocator
from ..pytorch import resource as torch_resource
from ..virtual.devices import DEFAULT as DEFAULT_PRESET
from ..virtual.devices import DevicePreset, custom_device, find_preset
from . import native
from .backends import (
    AllocationRefused,
    Allocator,
    Backend,
    BackendUnavailable,
    HipAllocator,
    HostAllocator,
    RmmPythonAllocator,
    is_host_spec,
    resolve_backend,
)
from .program import OP_ALLOCATE, OP_FREE, ReplayProgram, build_program
from .report import (
    RESERVED_SOURCES,
    AllocationFailure,
    LatencyStats,
    ReplayReport,
    ReservedSamples,
)
from .resources import RMM_KINDS, ResourceSpec

THREADS = ("logged", "single")
STREAMS = ("logged", "default")
ON_FAILURE = ("skip", "stop")
ENGINES = ("auto", "native", "python")
FAILURES_IN_FULL = 100  # failures reported one by one; the rest are counted


class ReplayCrashed(ReplayError):
    """The allocator or the runtime raised an error that is not an out-of-memory refusal."""


@dataclass(frozen=True)
class _Passes:
    """What an engine says of each pass: its wall time, what it took from upstream."""

    wall_ns: tuple[int, ...]
    upstream_calls: tuple[int, ...] | None = None
    setup_ns: int | None = None
    timed_pass_wall_ns: int | None = None  # the pass that timed each call, when run apart


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay (validated by `check()`)."""

    backend: str = "auto"  # auto | cuda | hip | host | virtual
    threads: str = "logged"  # logged | single
    streams: str = "logged"  # logged | default
    on_failure: str = "skip"  # skip | stop
    engine: str = "auto"  # auto (native where it exists) | native | python
    # Passes over one resource; events/s is the best pass (as the C++ floor). With more than
    # one (and time_calls), one more pass runs first that times each call, apart from them.
    repeats: int = 1
    time_calls: bool = True  # time each allocator call (latency percentiles)
    plot_samples: int = 0  # reserved-bytes samples to take for a plot (0: none)
    device: int = 0
    # The virtual GPU (backend "virtual"): a preset (replay/virtual/devices.py) or a memory
    # size, and the PyTorch whose allocator runs there (replay/pytorch/allocator.py).
    device_name: str | None = None  # MI300X, H100, ... (default: device_presets.DEFAULT)
    device_memory_bytes: int | None = None  # instead of a preset
    torch_version: str | None = None  # 2.11, 2.9 (default: HIPMEM_TORCH, then the search order)
    # RMM's resources on the virtual GPU: the fetched release (replay/rmm/fetch.py).
    rmm_version: str | None = None  # 25.4, 24.12 (default: rmm_fetch.DEFAULT_RMM)

    def check(self) -> None:
        for name, value, allowed in (
            ("threads", self.threads, THREADS),
            ("streams", self.streams, STREAMS),
            ("on_failure", self.on_failure, ON_FAILURE),
            ("engine", self.engine, ENGINES),
        ):
            if value not in allowed:
                raise ReplayUsageError(
                    f"not one of {', '.join(allowed)}", parameter=name, value=value
                )
        if self.repeats < 1:
            raise ReplayUsageError("must be at least 1", parameter="repeats", value=self.repeats)
        if self.device_name is not None and self.device_memory_bytes is not None:
            raise ReplayUsageError(
                "give a device or a memory size, not both",
                parameter="device_memory_bytes",
                value=self.device_memory_bytes,
            )
        self.virtual_device()  # an unknown preset is a usage error before any work

    def virtual_device(self) -> DevicePreset:
        """The virtual GPU these options name."""
        if self.device_memory_bytes is not None:
            return custom_device(self.device_memory_bytes)
        return find_preset(self.device_name or DEFAULT_PRESET)


def replay(
    log: AllocationLog,
    spec: ResourceSpec,
    options: ReplayOptions | None = None,
    program: ReplayProgram | None = None,
) -> ReplayReport:
    """Replay `log` through `spec`; `program` may be passed to reuse one built earlier."""
    options = options or ReplayOptions()
    options.check()
    program = program if program is not None else build_program(log)
    if options.streams == "default":
        program = on_default_stream(program)
    backend = resolve_backend(options.backend, spec, options.device)
    if spec.kind == "torch":
        return _replay_torch(log, program, spec, backend, options)
    if backend.name == "virtual":  # RMM's own resource on the virtual GPU
        return _replay_virtual_rmm(log, program, spec, options)
    if spec.kind == "null":  # it measures the native engine, so only the native engine runs it
        if options.engine == "python":
            raise ReplayUsageError(
                "the null resource measures the native engine", parameter="engine", value="python"
            )
        return _replay_native(log, program, spec, backend, options)
    if _use_native(backend, options):
        return _replay_native(log, program, spec, backend, options)
    return _replay_python(log, program, spec, backend, options)


def on_default_stream(program: ReplayProgram) -> ReplayProgram:
    """The same program with every call on the default stream."""
    return dataclasses.replace(
        program,
        stream_index=np.zeros(program.op_count, np.int32),
        streams=np.zeros(1, np.uint64),
    )


def _use_native(backend: Backend, options: ReplayOptions) -> bool:
    if options.engine == "python":
        return False
    if backend.name == "hip":
        if options.engine == "native":
            raise ReplayUsageError("the native engine has no hip build yet: use engine python")
        return False
    if backend.name == "host" and options.engine == "auto":
        try:
            native.load("host")
        except native.NativeCoreUnavailable:
            return False  # no C++ compiler: the Python loop replays host memory as well
    return True


# ---------------------------------------------------------------------------------------------
# Native engine
# ---------------------------------------------------------------------------------------------

_UPSTREAM_CODES = {"cuda": 1, "hip": 1, "managed": 2, "async": 3, "pool": 4}


def native_config(spec: ResourceSpec, backend: Backend, options: ReplayOptions) -> native.Config:
    """The C struct of a spec."""

    def size(name: str) -> int:
        value = spec.option_bytes(name)
        return -1 if value is None else value

    o = spec.options
    kind = "pinned" if spec.kind == "host" and o.get("pinned") else spec.kind
    advise = str(o.get("advise") or "")
    return native.Config(
        kind=native.KIND_CODES[kind],
        upstream=_UPSTREAM_CODES[str(o.get("upstream", "cuda"))],
        initial_bytes=max(size("initial"), 0) if spec.kind != "async" else size("initial"),
        maximum_bytes=size("maximum"),
        arena_bytes=size("size"),
        block_bytes=size("block"),
        prealloc_blocks=int(o.get("prealloc") or 0),
        release_threshold_bytes=size("release_threshold"),
        limit_bytes=-1 if spec.limit_bytes is None else spec.limit_bytes,
        min_exp=int(o.get("min_exp") or 0),
        max_exp=int(o.get("max_exp") or 0),
        prefetch=int(bool(o.get("prefetch"))),
        advise_mask=sum(native.ADVISE_BITS[a] for a in advise.split("+") if a),
        async_default_pool=int(o.get("pool") == "default"),
        device=backend.device,
        threaded=int(options.threads == "logged"),
        stop_on_failure=int(options.on_failure == "stop"),
        repeats=options.repeats,
        time_calls=int(options.time_calls),
    )


def program_arrays(program: ReplayProgram) -> dict[str, np.ndarray]:
    return {
        "op": np.ascontiguousarray(program.op, dtype=np.int8),
        "slot": np.ascontiguousarray(program.slot, dtype=np.int32),
        "size": np.ascontiguousarray(program.size_bytes, dtype=np.int64),
        "stream": np.ascontiguousarray(program.stream_index, dtype=np.int32),
        "thread": np.ascontiguousarray(program.thread_index, dtype=np.int32),
        "stream_ids": np.ascontiguousarray(program.streams, dtype=np.uint64),
    }


def _sample_every(program: ReplayProgram, samples: int) -> int:
    return 0 if samples <= 0 else max(1, program.op_count // samples)


def _replay_native(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    backend: Backend,
    options: ReplayOptions,
) -> ReplayReport:
    if backend.name == "host" and not (is_host_spec(spec) or spec.kind == "null"):
        raise ReplayUsageError(f"{spec.label!r} is not host memory")
    library = native.load("host" if backend.name == "host" else "rmm")
    arrays = program_arrays(program)
    sample_every = _sample_every(program, options.plot_samples)
    capacity = 2 + (program.op_count // sample_every if sample_every else 0)
    c_program = native.make_program(
        arrays, program.slot_count, len(program.threads), program.peak_op, sample_every
    )
    call = native.NativeCall(native_config(spec, backend, options), arrays, c_program, capacity)
    _run_cancellable(lambda: call(library), call.request_cancel)
    run, result = call.run, call.run.result
    if result.status == native.STATUS_ERROR:
        message = result.message.decode(errors="replace")
        raise ReplayCrashed(f"{spec.label}: the replay stopped on an error: {message}")
    failures = [
        _failure(log, program, int(op), int(live), int(reserved))
        for op, live, reserved in zip(
            run.failure_op[: min(result.n_failures, FAILURES_IN_FULL)],
            run.failure_live_bytes,
            run.failure_reserved_bytes,
            strict=False,  # the failure arrays are longer: they have room for every op
        )
    ]
    n_samples = int(result.n_samples)
    samples = (
        ReservedSamples(
            run.sample_op[:n_samples].copy(),
            run.sample_live_bytes[:n_samples].copy(),
            run.sample_reserved_bytes[:n_samples].copy(),
        )
        if sample_every
        else None
    )
    return _report(
        spec,
        backend,
        "native",
        options,
        program,
        run.latency_ns,
        wall_ns=int(result.best_wall_ns),
        ops_done=int(result.ops_done),
        # The null resource reserves nothing: it has no peak to report, not a peak of 0.
        peak_reserved=-1 if spec.kind == "null" else int(result.peak_reserved_bytes),
        reserved_source=RESERVED_SOURCES[result.reserved_source],
        failures=failures,
        failure_count=int(result.n_failures),
        outcome=_OUTCOMES[result.status],
        returned=int(result.held_at_end_bytes),
        unreturned=int(result.unreturned_bytes),
        samples=samples,
        passes=_native_passes(run),
    )


def _native_passes(run: native.NativeRun) -> _Passes:
    done = int(run.result.n_passes)
    upstream = run.pass_upstream_calls[:done]
    return _Passes(
        wall_ns=tuple(int(ns) for ns in run.pass_wall_ns[:done]),
        upstream_calls=None if (upstream < 0).any() else tuple(int(n) for n in upstream),
        setup_ns=int(run.result.setup_ns),
        timed_pass_wall_ns=None
        if run.result.timed_pass_wall_ns < 0
        else int(run.result.timed_pass_wall_ns),
    )


def _replay_torch(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    backend: Backend,
    options: ReplayOptions,
) -> ReplayReport:
    # One thread, in the log's order: PyTorch's allocator is driven as one process drives it.
    single = dataclasses.replace(options, threads="single")
    if backend.name == "virtual":
        return _replay_virtual(log, program, spec, single)
    run = torch_resource.run_torch(
        program_arrays(program),
        program.slot_count,
        torch_resource.alloc_conf(spec, log),
        limit_bytes=spec.limit_bytes,
        stop_on_failure=options.on_failure == "stop",
        time_calls=options.time_calls,
        repeats=options.repeats,
        device=backend.device,
    )
    failures, outcome = _allocator_refusals(log, program, run, options)
    return _report(
        spec,
        dataclasses.replace(backend, name=f"torch ({run.gpu})"),
        f"torch {run.torch_version}",
        single,
        program,
        run.latency_ns,
        wall_ns=run.wall_ns,
        ops_done=run.ops_done,
        peak_reserved=run.peak_reserved_bytes,
        reserved_source=torch_resource.RESERVED_FROM_TORCH,
        failures=failures,
        failure_count=run.failure_count,
        outcome=outcome,
        returned=run.held_at_end_bytes,
        unreturned=0,  # the worker process has ended: the driver took back all it held
        samples=None,
        passes=_Passes(wall_ns=()),  # the worker reports its best pass only
    )


def _allocator_refusals(
    log: AllocationLog, program: ReplayProgram, run: Any, options: ReplayOptions
) -> tuple[list[AllocationFailure], str]:
    """PyTorch's allocator (GPU worker or virtual GPU): its refusals, and how the pass ended."""
    failures = [
        _failure(log, program, int(op), int(live), -1)
        for op, live in zip(run.failure_op[:FAILURES_IN_FULL], run.failure_live_bytes, strict=False)
    ]
    stopped = options.on_failure == "stop" and run.failure_count > 0
    return failures, "stopped at first failure" if stopped else "completed"


def _replay_virtual(
    log: AllocationLog, program: ReplayProgram, spec: ResourceSpec, options: ReplayOptions
) -> ReplayReport:
    """PyTorch's allocator on the virtual GPU: the same report as on a GPU."""
    from ..virtual.gpu import VirtualGpu

    device = options.virtual_device()
    allocator = torch_allocator.locate(options.torch_version)
    conf = torch_resource.alloc_conf(spec, log)
    arrays = program_arrays(program)
    streams = len(program.streams)
    with VirtualGpu(arrays, program.slot_count, streams, conf, device, allocator) as gpu:
        run = gpu.replay(
            limit_bytes=spec.limit_bytes,
            stop_on_failure=options.on_failure == "stop",
            time_calls=options.time_calls,
            repeats=options.repeats,
            sample_every=_sample_every(program, options.plot_samples),
        )
    failures, outcome = _allocator_refusals(log, program, run, options)
    latency = run.latency_ns if run.latency_ns is not None else np.full(program.op_count, -1)
    report = _report(
        spec,
        Backend("virtual"),
        f"torch {allocator.version}",
        options,
        program,
        latency,
        wall_ns=run.wall_ns,
        ops_done=run.ops_done,
        peak_reserved=run.peak_reserved_bytes,
        reserved_source=torch_resource.RESERVED_FROM_TORCH,
        failures=failures,
        failure_count=run.failure_count,
        outcome=outcome,
        returned=run.held_at_end_bytes,
        unreturned=0,  # the virtual GPU holds no memory: it is address space in a process
        samples=run.samples,
    )
    report.device = virtual_device_text(allocator, device)
    report.allocator_source = allocator.describe()
    return report


def _replay_virtual_rmm(
    log: AllocationLog, program: ReplayProgram, spec: ResourceSpec, options: ReplayOptions
) -> ReplayReport:
    """RMM's own resource on the virtual GPU (replay/rmm/virtual.py): the same report as on a
    GPU, in the log's order on one thread, each logged stream a stream of its own."""
    from ..rmm import fetch as rmm_fetch
    from ..rmm.virtual import RESERVED_FROM_STANDIN, VirtualRmm, device_text
    from ..virtual.gpu import ProgramFiles

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


def virtual_device_text(allocator: torch_allocator.TorchAllocator, device: DevicePreset) -> str:
    """What the report says of where it ran, plainly."""
    return (
        f"PyTorch {allocator.version}'s allocator on a virtual {device.name} "
        f"({device.memory_bytes:,} bytes)"
    )


_OUTCOMES = {
    native.STATUS_OK: "completed",
    native.STATUS_STOPPED: "stopped at first failure",
    native.STATUS_CANCELLED: "cancelled",
}


def _run_cancellable(work: Callable[[], None], cancel: Callable[[], None]) -> None:
    """Run native work in a thread so that Ctrl-C can ask it to stop and return every byte."""
    errors: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            work()
        except BaseException as err:  # pragma: no cover - ctypes calls do not raise
            errors.append(err)
        finally:
            done.set()

    threading.Thread(target=target, name="hipmem-replay", daemon=True).start()
    try:
        _wait(done)
    except KeyboardInterrupt:
        cancel()
        _wait_through_interrupts(done)
        raise
    if errors:
        raise errors[0]


def _wait(done: threading.Event) -> None:
    # Event.wait, not Thread.join: a join interrupted by Ctrl-C can report a running thread
    # as finished (CPython before 3.13), and the caller would go on while memory is in use.
    while not done.wait(0.1):
        pass


def _wait_through_interrupts(done: threading.Event) -> None:
    # The work is returning memory: a second Ctrl-C must not abandon it half way.
    while True:
        try:
            _wait(done)
            return
        except KeyboardInterrupt:
            continue


def _failure(
    log: AllocationLog, program: ReplayProgram, op: int, live_bytes: int, reserved_bytes: int
) -> AllocationFailure:
    event = int(program.event_index[op])
    return AllocationFailure(
        event_index=event,
        where=log.line_ref(event),
        size_bytes=int(program.size_bytes[op]),
        live_bytes=live_bytes,
        reserved_bytes=reserved_bytes if reserved_bytes >= 0 else None,
        recorded_failed=int(log.events["action"].to_numpy()[event]) == ALLOCATE_FAILURE,
    )


def _report(
    spec: ResourceSpec,
    backend: Backend,
    engine: str,
    options: ReplayOptions,
    program: ReplayProgram,
    latency_ns: np.ndarray,
    *,
    wall_ns: int,
    ops_done: int,
    peak_reserved: int | None,
    reserved_source: str,
    failures: list[AllocationFailure],
    failure_count: int,
    outcome: str,
    returned: int,
    unreturned: int,
    samples: ReservedSamples | None,
    passes: _Passes | None = None,
) -> ReplayReport:
    passes = passes or _Passes(wall_ns=(wall_ns,))  # the Python engine makes one pass
    timed = latency_ns >= 0
    threads = options.threads if len(program.threads) > 1 else "single"
    calls_ns = latency_ns[timed]
    return ReplayReport(
        resource=spec.label,
        backend=backend.name,
        engine=engine,
        threads=threads,
        thread_count=len(program.threads) if threads == "logged" else 1,
        stream_count=len(program.streams),
        log_events=program.log_events,
        ops=program.op_count,
        ops_done=ops_done,
        wall_ns=wall_ns,
        allocator_ns=int(calls_ns.sum()) if len(calls_ns) else None,
        peak_requested_bytes=program.peak_requested_bytes,
        peak_reserved_bytes=peak_reserved
        if peak_reserved is not None and peak_reserved >= 0
        else None,
        reserved_source=reserved_source,
        alloc_latency=LatencyStats.of(latency_ns[timed & (program.op == OP_ALLOCATE)]),
        free_latency=LatencyStats.of(latency_ns[timed & (program.op == OP_FREE)]),
        failures=failures,
        failure_count=failure_count,
        outcome=outcome,
        returned_at_end_bytes=returned,
        unreturned_bytes=unreturned,
        anomalies=program.anomalies,
        samples=samples,
        pass_wall_ns=passes.wall_ns,
        pass_upstream_calls=passes.upstream_calls,
        setup_ns=passes.setup_ns,
        timed_pass_wall_ns=passes.timed_pass_wall_ns,
    )


# ---------------------------------------------------------------------------------------------
# Python engine: one Python call per event (hip backend, and the naive baseline)
# ---------------------------------------------------------------------------------------------


def _python_allocator(spec: ResourceSpec, backend: Backend, program: ReplayProgram) -> Allocator:
    if backend.name == "host":
        return HostAllocator(spec)
    if spec.kind in RMM_KINDS or backend.name == "cuda":
        return RmmPythonAllocator(spec, backend.device, program.streams)
    return HipAllocator(spec, backend.device, program.streams)


class _PythonReplay:
    """The per-event loop; bookkeeping mirrors replay_core.cu's `Replay`."""

    def __init__(
        self, allocator: Allocator, program: ReplayProgram, options: ReplayOptions
    ) -> None:
        self.allocator = allocator
        self.program = program
        self.options = options
        n = program.op_count
        self.ops = program.op.tolist()
        self.slots = program.slot.tolist()
        self.sizes = program.size_bytes.tolist()
        self.streams = program.stream_index.tolist()
        self.handles: list[Any] = [None] * program.slot_count
        self.held: list[int] = [-1] * program.slot_count
        self.slot_stream: list[int] = [0] * program.slot_count
        self.latency_ns = np.full(n, -1, dtype=np.int64)
        self.failures: list[tuple[int, int, int | None]] = []
        self.live_bytes = 0
        self.ops_done = 0
        self.returned_bytes = 0
        self.stopped = False
        self.sample_every = _sample_every(program, options.plot_samples)
        self.samples: list[tuple[int, int, int]] = []
        self.window = (-1, 0, -1)  # the sampled window's highest point: op, live, reserved
        self.peak_reserved: int | None = None

    def step(self, i: int) -> bool:
        slot, stream = self.slots[i], self.streams[i]
        if self.ops[i] == OP_ALLOCATE:
            size = self.sizes[i]
            t0 = perf_counter_ns()
            try:
                handle = self.allocator.allocate(size, stream)
            except AllocationRefused:
                self.failures.append((i, self.live_bytes, self.allocator.reserved_bytes()))
                if self.options.on_failure == "stop":
                    return False
                self._after(i)
                return True
            self.latency_ns[i] = perf_counter_ns() - t0
            self.handles[slot], self.held[slot], self.slot_stream[slot] = handle, size, stream
            self.live_bytes += size
        elif self.held[slot] >= 0:
            size = self.held[slot]
            t0 = perf_counter_ns()
            self.allocator.deallocate(self.handles[slot], size, stream)
            self.latency_ns[i] = perf_counter_ns() - t0
            self.handles[slot], self.held[slot] = None, -1
            self.live_bytes -= size
        self._after(i)
        return True

    def _after(self, i: int) -> None:
        self.ops_done += 1
        every = self.sample_every
        if not every and i != self.program.peak_op:
            return
        reserved = self.allocator.reserved_bytes()
        if reserved is None:
            return
        if i == self.program.peak_op:  # the reported peak: read here, --plot or not
            self.peak_reserved = max(self.peak_reserved or 0, reserved)
        # A plot: each window of `every` ops keeps its highest reserved bytes (as the C++
        # core does), so that no peak falls between samples.
        if reserved > self.window[2]:
            self.window = (i, self.live_bytes, reserved)
        if not every or (i + 1) % every == 0:
            self.flush_window()

    def flush_window(self) -> None:
        if self.window[0] >= 0:
            self.samples.append(self.window)
        self.window = (-1, 0, -1)

    def run_single(self) -> None:
        for i in range(len(self.ops)):
            if not self.step(i):
                self.stopped = True
                return

    def run_threads(self) -> None:
        turn = [0]
        cond = threading.Condition()
        per_thread: dict[int, list[int]] = {}
        for i, t in enumerate(self.program.thread_index.tolist()):
            per_thread.setdefault(t, []).append(i)
        errors: list[BaseException] = []

        def worker(ops: list[int], done: threading.Event) -> None:
            try:
                for i in ops:
                    with cond:
                        cond.wait_for(lambda i=i: turn[0] == i or self.stopped)  # type: ignore[misc]
                        if self.stopped:
                            return
                    go_on = self.step(i)
                    with cond:
                        turn[0] = i + 1
                        self.stopped = self.stopped or not go_on
                        cond.notify_all()
            except BaseException as err:
                errors.append(err)
                with cond:
                    self.stopped = True
                    cond.notify_all()
            finally:
                done.set()

        finished = [threading.Event() for _ in per_thread]
        for ops, done in zip(per_thread.values(), finished, strict=True):
            threading.Thread(target=worker, args=(ops, done), daemon=True).start()
        try:
            for done in finished:
                _wait(done)
        except KeyboardInterrupt:
            with cond:
                self.stopped = True
                cond.notify_all()
            for done in finished:
                _wait_through_interrupts(done)
            raise
        if errors:
            raise errors[0]

    def release_all(self) -> None:
        for slot, size in enumerate(self.held):
            if size >= 0:
                self.allocator.deallocate(self.handles[slot], size, self.slot_stream[slot])
                self.returned_bytes += size
                self.held[slot], self.handles[slot] = -1, None


def _replay_python(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    backend: Backend,
    options: ReplayOptions,
) -> ReplayReport:
    allocator = _python_allocator(spec, backend, program)
    loop = _PythonReplay(allocator, program, options)
    try:
        t0 = perf_counter_ns()
        try:
            if options.threads == "logged" and len(program.threads) > 1:
                loop.run_threads()
            else:
                loop.run_single()
        finally:
            loop.flush_window()
            loop.release_all()  # also on errors and Ctrl-C: every byte goes back
        wall_ns = perf_counter_ns() - t0
        unreturned = allocator.reserved_bytes() if backend.name == "host" else 0
    except BackendUnavailable:
        raise
    except ReplayError:
        raise
    except Exception as err:
        raise ReplayCrashed(f"{spec.label}: the replay stopped on an error: {err}") from err
    finally:
        allocator.close()
    failures = [
        _failure(log, program, op, live, -1 if reserved is None else reserved)
        for op, live, reserved in loop.failures[:FAILURES_IN_FULL]
    ]
    samples = None
    if loop.sample_every and loop.samples:
        columns = np.array(loop.samples, dtype=np.int64).T
        samples = ReservedSamples(columns[0], columns[1], columns[2])
    return _report(
        spec,
        backend,
        "python",
        options,
        program,
        loop.latency_ns,
        wall_ns=wall_ns,
        ops_done=loop.ops_done,
        peak_reserved=loop.peak_reserved,
        reserved_source=allocator.reserved_source,
        failures=failures,
        failure_count=len(loop.failures),
        outcome="stopped at first failure" if loop.stopped else "completed",
        returned=loop.returned_bytes,
        unreturned=unreturned or 0,
        samples=samples,
    )
