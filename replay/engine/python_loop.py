"""The Python loop: one Python call per event (the hip backend, and the naive baseline the
benchmarks compare the native core against). Its bookkeeping mirrors replay_core.cu's
`Replay`, so both report the same figures of one log."""

from __future__ import annotations

import threading
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ReplayError
from ..logs.events import AllocationLog
from .backends import Backend, BackendUnavailable
from .cancellation import wait, wait_through_interrupts
from .native_replay import sample_every
from .outcome import COMPLETED, FAILURES_IN_FULL, STOPPED, LoopRun, ReplayCrashed, failure_at
from .program import OP_ALLOCATE, ReplayProgram
from .python_allocators import (
    AllocationRefused,
    Allocator,
    HipAllocator,
    HostAllocator,
    RmmPythonAllocator,
)
from .report import ReservedSamples
from .resources import RMM_KINDS, ResourceSpec

if TYPE_CHECKING:
    from .options import ReplayOptions


def python_allocator(spec: ResourceSpec, backend: Backend, program: ReplayProgram) -> Allocator:
    if backend.name == "host":
        return HostAllocator(spec)
    if spec.kind in RMM_KINDS or backend.name == "cuda":
        return RmmPythonAllocator(spec, backend.device, program.streams)
    return HipAllocator(spec, backend.device, program.streams)


class PythonLoop:
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
        self.sample_every = sample_every(program, options.plot_samples)
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
                wait(done)
        except KeyboardInterrupt:
            with cond:
                self.stopped = True
                cond.notify_all()
            for done in finished:
                wait_through_interrupts(done)
            raise
        if errors:
            raise errors[0]

    def release_all(self) -> None:
        for slot, size in enumerate(self.held):
            if size >= 0:
                self.allocator.deallocate(self.handles[slot], size, self.slot_stream[slot])
                self.returned_bytes += size
                self.held[slot], self.handles[slot] = -1, None


def replay_python(
    log: AllocationLog,
    program: ReplayProgram,
    spec: ResourceSpec,
    backend: Backend,
    options: ReplayOptions,
) -> LoopRun:
    allocator = python_allocator(spec, backend, program)
    loop = PythonLoop(allocator, program, options)
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
        failure_at(log, program, op, live, -1 if reserved is None else reserved)
        for op, live, reserved in loop.failures[:FAILURES_IN_FULL]
    ]
    samples = None
    if loop.sample_every and loop.samples:
        columns = np.array(loop.samples, dtype=np.int64).T
        samples = ReservedSamples(columns[0], columns[1], columns[2])
    return LoopRun(
        backend=backend.name,
        engine="python",
        threads=options.threads,
        latency_ns=loop.latency_ns,
        wall_ns=wall_ns,
        ops_done=loop.ops_done,
        peak_reserved_bytes=loop.peak_reserved,
        reserved_source=allocator.reserved_source,
        failures=failures,
        failure_count=len(loop.failures),
        outcome=STOPPED if loop.stopped else COMPLETED,
        returned_bytes=loop.returned_bytes,
        unreturned_bytes=unreturned or 0,
        samples=samples,
    )
