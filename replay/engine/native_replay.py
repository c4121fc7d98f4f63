"""A replay through the native core (replay/engine/native.py, replay/engine/csrc/): the cuda
backend and host memory. Its loop costs about what the C++ floor's does, so the allocator,
not the replay, sets events/s."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ReplayUsageError
from ..logs.events import AllocationLog
from . import native
from .backends import Backend, is_host_spec
from .cancellation import run_cancellable
from .outcome import CANCELLED, COMPLETED, STOPPED, LoopRun, Passes, ReplayCrashed, failures_of
from .program import ReplayProgram, program_arrays
from .report import RESERVED_SOURCES, ReservedSamples
from .resources import ResourceSpec

if TYPE_CHECKING:
    from .options import ReplayOptions

_UPSTREAM_CODES = {"cuda": 1, "hip": 1, "managed": 2, "async": 3, "pool": 4}
_OUTCOMES = {
    native.STATUS_OK: COMPLETED,
    native.STATUS_STOPPED: STOPPED,
    native.STATUS_CANCELLED: CANCELLED,
}


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


def sample_every(program: ReplayProgram, samples: int) -> int:
    """Ops per reserved-bytes sample for a plot of `samples` points (0: no plot)."""
    return 0 if samples <= 0 else max(1, program.op_count // samples)


def replay_native(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    backend: Backend,
    options: ReplayOptions,
) -> LoopRun:
    if backend.name == "host" and not (is_host_spec(spec) or spec.kind == "null"):
        raise ReplayUsageError(f"{spec.label!r} is not host memory")
    library = native.load("host" if backend.name == "host" else "rmm")
    arrays = program_arrays(program)
    every = sample_every(program, options.plot_samples)
    capacity = 2 + (program.op_count // every if every else 0)
    c_program = native.make_program(
        arrays, program.slot_count, len(program.threads), program.peak_op, every
    )
    call = native.NativeCall(native_config(spec, backend, options), arrays, c_program, capacity)
    run_cancellable(lambda: call(library), call.request_cancel)
    run, result = call.run, call.run.result
    if result.status == native.STATUS_ERROR:
        message = result.message.decode(errors="replace")
        raise ReplayCrashed(f"{spec.label}: the replay stopped on an error: {message}")
    n_samples = int(result.n_samples)
    samples = (
        ReservedSamples(
            run.sample_op[:n_samples].copy(),
            run.sample_live_bytes[:n_samples].copy(),
            run.sample_reserved_bytes[:n_samples].copy(),
        )
        if every
        else None
    )
    return LoopRun(
        backend=backend.name,
        engine="native",
        threads=options.threads,
        latency_ns=run.latency_ns,
        wall_ns=int(result.best_wall_ns),
        ops_done=int(result.ops_done),
        # The null resource reserves nothing: it has no peak to report, not a peak of 0.
        peak_reserved_bytes=-1 if spec.kind == "null" else int(result.peak_reserved_bytes),
        reserved_source=RESERVED_SOURCES[result.reserved_source],
        failures=failures_of(log, program, run.failure_op, run.failure_live_bytes,
                             run.failure_reserved_bytes, count=int(result.n_failures)),
        failure_count=int(result.n_failures),
        outcome=_OUTCOMES[result.status],
        returned_bytes=int(result.held_at_end_bytes),
        unreturned_bytes=int(result.unreturned_bytes),
        samples=samples,
        passes=_native_passes(run),
    )  # fmt: skip


def _native_passes(run: native.NativeRun) -> Passes:
    done = int(run.result.n_passes)
    upstream = run.pass_upstream_calls[:done]
    return Passes(
        wall_ns=tuple(int(ns) for ns in run.pass_wall_ns[:done]),
        upstream_calls=None if (upstream < 0).any() else tuple(int(n) for n in upstream),
        setup_ns=int(run.result.setup_ns),
        timed_pass_wall_ns=None
        if run.result.timed_pass_wall_ns < 0
        else int(run.result.timed_pass_wall_ns),
    )
