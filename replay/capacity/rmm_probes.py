"""The probes of RMM's resources on the virtual GPU: the program written once, the driver alone.

A probe of `--find-capacity` needs one answer: did the log replay with no failure. Through
the engine (replay/engine/run.py) each probe wrote the program's files again and built a whole
report (failures with their log lines, latencies), 66 times for a search of pool, arena and
binning. Here the program's files are written once per command and shared by every probe,
resource and fits replay (`RmmProbes`); each probe is the driver's process reading them and
answering one line (replay/rmm/virtual.py). What decides the answer is the same as in the
report: the driver's failures (a resource RMM refused to make counts one), and a device that
refuses the log's first allocation is the same error as a replay's
(`refuse_too_small_device`).

Replays go through `at_once.CORES`: at most one per core at a time, however many searches
run side by side.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..engine.allocator_replay import refuse_too_small_device
from ..engine.program import ReplayProgram, on_default_stream, program_arrays
from ..engine.resources import ResourceSpec
from ..engine.target import ReplayTarget
from ..logs.events import AllocationLog
from ..rmm.virtual import RmmProbe, VirtualRmm, VirtualRmmFailed
from ..virtual.devices import Device
from ..virtual.gpu import ProgramFiles
from .at_once import CORES, cores


@dataclass
class RmmProbes:
    """One command's program on disk, for every RMM replay on the virtual GPU (close it).
    `streams`: the program's streams, "logged" or "default" (every call on the default
    stream, as the engine replays `--streams default`; the fits table replays the logged
    streams whatever the option, as it always has)."""

    log: AllocationLog
    program: ReplayProgram
    files: ProgramFiles
    streams: str

    @classmethod
    def write(cls, log: AllocationLog, program: ReplayProgram, streams: str) -> RmmProbes:
        if streams == "default":  # as the engine replays it (replay/engine/run.py)
            program = on_default_stream(program)
        return cls(log, program, ProgramFiles(program_arrays(program)), streams)

    def gpu(self, spec: ResourceSpec, target: ReplayTarget) -> VirtualRmm:
        """`spec`'s resource on this program (each replay a process of its own)."""
        assert target.rmm is not None  # a target of RMM's resource on the virtual GPU
        return VirtualRmm(self.files, self.program.slot_count, len(self.program.streams), spec,
                          target.rmm)  # fmt: skip

    def replay(
        self,
        gpu: VirtualRmm,
        device: Device,
        *,
        stop_on_failure: bool,
        while_held: Callable[[], None] | None = None,
    ) -> RmmProbe:
        """One replay on `device`, on a core of its own (waited for); `while_held` is called
        once the core is this replay's."""
        with CORES.held():
            if while_held is not None:
                while_held()
            return gpu.replay(device, stop_on_failure=stop_on_failure)

    def answer(self, run: RmmProbe, spec: ResourceSpec, target: ReplayTarget) -> bool:
        """What `replay(...)`'s report of a probe says: no failure (and so completed); a
        device too small for the log's first allocation is its error."""
        assert target.device is not None
        refuse_too_small_device(self.log, self.program, spec, target.device, run)
        return run.failure_count == 0

    def replays(
        self,
        spec: ResourceSpec,
        target: ReplayTarget,
        while_held: Callable[[], None] | None = None,
    ) -> bool:
        """Does the log replay through `spec` on the target's device with no failure (stopping
        at the first)?"""
        assert target.device is not None
        with self.gpu(spec, target) as gpu:
            run = self.replay(gpu, target.device, stop_on_failure=True, while_held=while_held)
        return self.answer(run, spec, target)

    def close(self) -> None:
        self.files.close()

    def __enter__(self) -> RmmProbes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Ahead:
    """A search's next probe, replayed ahead on a spare core while the search waits for the
    probe before it (replay/capacity/search.py's bisection announces both possible next sizes:
    `guess` is hipmem/_core/bisection.py's `before_asking`).

    Which of the two is guessed: the one that follows if the probe under way goes as the one
    before it went (near its answer a bisection meets runs of one outcome), or the other where
    that one would end the search. It starts once the probe under way has its core (`start`),
    never taking the core that probe waits for; when the probe under way was itself made
    ahead, the next guess starts beside it, on the core the search left free. A
    guess that can no longer be asked for is cancelled, freeing its core. The search records a
    probe made ahead where and as it asks for it: the same probes, in the same order, as
    without."""

    def __init__(
        self, probes: RmmProbes, sized: Callable[[int], ResourceSpec], target: ReplayTarget
    ) -> None:
        self._probes, self._sized, self._target = probes, sized, target
        # A thread per core: a guess starts on the core it took, not after the one before it
        # (the search may be waiting for that one, made ahead, while a core stands idle).
        self._pool = ThreadPoolExecutor(max_workers=cores(), thread_name_prefix="hipmem-ahead")
        self._made: dict[int, tuple[VirtualRmm, Future[RmmProbe]]] = {}
        self._next: int | None = None  # the guess to start
        self.last: bool | None = None  # how the last probe went

    def guess(self, asking: int, if_passes: int | None, if_fails: int | None) -> None:
        """The search is about to ask for `asking`; its next is `if_passes` or `if_fails`."""
        for stale in [s for s in self._made if s not in (asking, if_passes, if_fails)]:
            self._drop(stale)
        likely, other = (if_fails, if_passes) if self.last is False else (if_passes, if_fails)
        self._next = likely if likely is not None else other  # the search's last: either

    def start(self) -> None:
        """Make the guess, if a core is spare now (the probe under way holds its own)."""
        size, self._next = self._next, None
        if size is None or size in self._made or not CORES.take_spare():
            return
        assert self._target.device is not None
        device = self._target.device
        gpu = self._probes.gpu(self._sized(size), self._target)

        def made_ahead() -> RmmProbe:
            try:
                return gpu.replay(device, stop_on_failure=True)
            finally:
                CORES.give_back()
                gpu.close()

        self._made[size] = (gpu, self._pool.submit(made_ahead))

    def take(self, size: int) -> RmmProbe | None:
        """The replay of `size` made ahead, if one was (its error raised here)."""
        made = self._made.pop(size, None)
        if made is None:
            return None
        self.start()  # the probe under way is the one made ahead: it holds its core
        return made[1].result()

    def _drop(self, size: int) -> None:
        gpu, future = self._made.pop(size)
        gpu.cancel()
        with contextlib.suppress(VirtualRmmFailed):
            future.result()

    def forget(self) -> None:
        """Cancel every guess not asked for."""
        self._next = None
        for size in list(self._made):
            self._drop(size)

    def close(self) -> None:
        """Cancel every guess not asked for, and wait for their threads."""
        self.forget()
        self._pool.shutdown(wait=True)
