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

Where each resource replays is decided once, into a `ReplayTarget` (replay/engine/target.py:
the backend, the loop, and on the virtual GPU the device, release and build); `replay` runs the
loop it names and turns what the loop measured into the report (replay/engine/outcome.py):

- the native core (replay/engine/native_replay.py) for the cuda backend and host memory: its
  loop costs about what the C++ floor's does, so the allocator, not the replay, sets events/s;
- the Python loop (replay/engine/python_loop.py) for the hip backend and `engine="python"`;
- an allocator's own code in a process of its own (replay/engine/allocator_replay.py):
  PyTorch's on a GPU or on the virtual GPU, RMM's on the virtual GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ReplayUsageError
from ..logs.events import AllocationLog
from ..virtual.devices import DEFAULT as DEFAULT_PRESET
from ..virtual.devices import DevicePreset, custom_device, find_preset
from .allocator_replay import replay_torch_worker, replay_virtual_rmm, replay_virtual_torch
from .native_replay import replay_native
from .outcome import LoopRun, make_report
from .program import ReplayProgram, build_program, on_default_stream
from .python_loop import replay_python
from .report import ReplayReport
from .resources import ResourceSpec
from .target import NATIVE, PYTHON, TORCH_WORKER, VIRTUAL_TORCH, ReplayTarget, resolve_target

THREADS = ("logged", "single")
STREAMS = ("logged", "default")
ON_FAILURE = ("skip", "stop")
ENGINES = ("auto", "native", "python")


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
    target: ReplayTarget | None = None,
) -> ReplayReport:
    """Replay `log` through `spec`; `program` may be passed to reuse one built earlier, and
    `target` one resolved earlier for this spec and these options (`resolve_target`)."""
    options = options or ReplayOptions()
    options.check()
    program = program if program is not None else build_program(log)
    if options.streams == "default":
        program = on_default_stream(program)
    target = target if target is not None else resolve_target(spec, options)
    run: LoopRun
    if target.loop == NATIVE:
        run = replay_native(log, program, spec, target.backend, options)
    elif target.loop == PYTHON:
        run = replay_python(log, program, spec, target.backend, options)
    elif target.loop == TORCH_WORKER:
        run = replay_torch_worker(log, program, spec, target, options)
    elif target.loop == VIRTUAL_TORCH:
        run = replay_virtual_torch(log, program, spec, target, options)
    else:
        run = replay_virtual_rmm(log, program, spec, target, options)
    return make_report(spec.label, program, run)
