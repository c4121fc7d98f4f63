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
- every byte is returned before `replay_log()` returns: at the end (allocations the log never
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

from ..logs.events import AllocationLog
from .allocator_replay import replay_torch_worker, replay_virtual_rmm, replay_virtual_torch
from .native_replay import replay_native
from .options import ReplayOptions
from .outcome import LoopRun, make_report
from .program import ReplayProgram, build_program, on_default_stream
from .python_loop import replay_python
from .report import ReplayReport
from .resources import ResourceSpec
from .target import NATIVE, PYTHON, TORCH_WORKER, VIRTUAL_TORCH, ReplayTarget, resolve_target


def replay_log(
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
