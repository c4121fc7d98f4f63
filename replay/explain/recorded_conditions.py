"""The conditions a snapshot ran out of memory under, read from its first `oom` entry.

A user with a snapshot of a job that ran out of memory rarely knows the cap it ran under;
the snapshot says enough to find it. Its `oom` entry holds the request refused and the
device's free memory then (`device_free`), and a replay through PyTorch's own allocator
knows what the allocator held there. PyTorch 2.11's `DeviceCachingAllocator::malloc`
(c10/cuda/CUDACachingAllocator.cpp), for a request no cached block serves:

    alloc_block(params)                     // a new segment of `alloc_size` bytes
      || release_available_cached_blocks && alloc_block     (only with max_split_size_mb)
      || release_cached_blocks && alloc_block(params, isRetry=true)
    then, if none worked: record_trace(OOM, device_free, ...), where device_free is
    cudaMemGetInfo's, read after the cache was freed

and `alloc_block` refuses at once, before asking the device, when a per-process cap is set
and `total_allocated_memory + size > allowed_memory_maximum`. So:

- **the device was exhausted** when `device_free` is less than the segment asked: the memory
  the allocator could have had is what it held once its cache was freed plus `device_free`,
  exactly (kind "device", `hi_bytes = lo_bytes + 1`);
- **a per-process cap** (`set_per_process_memory_fraction`, or the `limit` a user gives)
  refused it otherwise: every segment allocated before the entry fitted under the cap, so the
  cap is at least the most the allocator held before it (`lo_bytes`); and the retry after
  freeing the cache did not fit, so the cap is below what it held then plus the segment
  (`hi_bytes`, exclusive).

The replay gives each figure: a first replay with room to spare, the reserved bytes sampled
after every op, gives the most held before the entry and the segment the allocator took for
it (the reserved bytes it added; with expandable segments, the request rounded to 2 MiB,
since freeing the cache unmaps the free pages the retry would have grown into); a replay
under the cap `lo_bytes` (or on a device of that memory) stops at the entry with the
allocator's state after its cache was freed. The
interval is then checked: the replay refuses the same entry at both of its ends. When a
figure is missing or the replay does not behave as the recording did (it refused earlier, it
served the entry from its cache), nothing is inferred and `NotInferred` says why.

Only the first `oom` entry is read: after it the recording's allocator had freed its cache,
and a replay that served the request no longer holds what it held.

A recording that ends at its out-of-memory error (the job died of it: no allocation follows)
says nothing of what the job would have done next, and a setting that just serves the
recorded part may run out of memory a little later: under the cap of the held-out GPT job
(tests/data/record/truths-h200-2026-11-28, oom_cap), garbage_collection_threshold:0.6
serves the whole recording of the defaults, and on the GPU it ran out of memory two steps
further. So such a recording is judged twice over (`passes`): the recorded work replayed a
second time on the same allocator, its cache as the first pass left it, stands for the
job going on (a training loop repeats its steps). There, garbage collection at 0.6 is refused
in the second pass, and expandable segments (which ran on the GPU) serve both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hipmem._core.alloc_conf import settings_pairs
from hipmem._core.bisection import least_holding
from hipmem._core.byte_sizes import MiB

from ..engine.program import OP_ALLOCATE, ReplayProgram, program_arrays
from ..errors import ReplayError, ReplayUsageError
from ..logs.events import AllocationLog, LineRef, OomEvent
from ..pytorch import allocator as torch_allocator
from ..settings.workloads import Workload
from ..virtual.devices import Device
from ..virtual.gpu import VirtualGpu
from .requests import recorded_failed_rows
from .state import ROUND_LARGE_BYTES

CAP = "cap"
DEVICE = "device"
_ROOM_BYTES = 64 * MiB  # beyond the request, for the first replay's device: it must not refuse


@dataclass(frozen=True)
class RecordedConditions:
    """What the recording ran under, as its first `oom` entry bounds it: a per-process cap
    (`kind == "cap"`) or the device's memory (`"device"`) in [lo_bytes, hi_bytes)."""

    kind: str  # CAP or DEVICE
    lo_bytes: int
    hi_bytes: int  # exclusive
    snapshot: str  # the device's source, `run.pickle#dev0`
    where: LineRef  # the `oom` entry
    op_index: int  # the op of the refused request in the workload's program
    request_bytes: int
    segment_bytes: int  # the segment the allocator asked for it
    held_bytes: int  # reserved once its cache was freed, at the entry
    device_free_bytes: int
    ended_there: bool = False  # no allocation follows it: the job died of it

    @property
    def passes(self) -> int:
        """How many times over a setting replays the recording to be called a fix: twice
        when the recording ended at its out-of-memory error (see the module's docstring)."""
        return 2 if self.ended_there else 1

    @property
    def ends(self) -> tuple[int, ...]:
        """The bytes a setting is judged at: both ends of the interval (one if exact)."""
        return (self.lo_bytes,) if self.hi_bytes - self.lo_bytes <= 1 else (
            self.lo_bytes, self.hi_bytes - 1)  # fmt: skip

    @property
    def cap_bytes(self) -> int | None:
        """The cap to answer under (the low end), or None for the device kind."""
        return self.lo_bytes if self.kind == CAP else None

    @property
    def device_memory_bytes(self) -> int | None:
        return self.lo_bytes if self.kind == DEVICE else None

    def sentence(self, *, cap_option: bool = True, applied: bool = True) -> str:
        """The one line every command says it in (`cap_option`: the command has --cap;
        `applied`: it answers under these conditions)."""
        entry = f"at entry {self.where.line:,} ({self.snapshot})"
        if not applied:
            return (
                f"the recording ran out of memory {entry}: the device's memory was exhausted, "
                f"{self.lo_bytes:,} bytes for the allocator ({self.held_bytes:,} held + "
                f"{self.device_free_bytes:,} free), inferred from the allocator's state there; "
                f"this replay is on the device given (--device-memory {self.lo_bytes} replays "
                "under it)"
            )
        if self.kind == CAP:
            what = (
                f"a per-process cap between {self.lo_bytes:,} and {self.hi_bytes - 1:,} bytes, "
                "inferred from the allocator's state there; answering under it"
                + (" (give --cap to set it)" if cap_option else "")
            )
        else:
            what = (
                f"the device's memory was exhausted: {self.lo_bytes:,} bytes for the "
                f"allocator ({self.held_bytes:,} held + {self.device_free_bytes:,} free), "
                "inferred from the allocator's state there; answering under it (give "
                "--device-memory to set it)"
            )
        return f"the recording ran out of memory {entry}: {what}"

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "lo_bytes": self.lo_bytes,
            "hi_bytes": self.hi_bytes,
            "snapshot": self.snapshot,
            **self.where.as_dict(),
            "request_bytes": self.request_bytes,
            "segment_bytes": self.segment_bytes,
            "held_bytes": self.held_bytes,
            "device_free_bytes": self.device_free_bytes,
            "ended_there": self.ended_there,
            "passes": self.passes,
        }


@dataclass(frozen=True)
class NotInferred:
    """The snapshot recorded an out-of-memory error, and why its conditions are not known."""

    snapshot: str
    where: LineRef
    reason: str

    def sentence(self) -> str:
        return (
            f"the recording ran out of memory at entry {self.where.line:,} ({self.snapshot}), "
            f"and its conditions could not be inferred: {self.reason}"
        )


Inference = RecordedConditions | NotInferred


class RecordedOomNotReproduced(ReplayError):
    """The snapshot recorded an out-of-memory error and the replay, under the conditions
    inferred or given, does not refuse it: an answer then would not be earned (exit 1)."""


def recorded_settings(workloads: list[Workload]) -> str:
    """The settings the snapshots were recorded with (all devices must agree)."""
    recorded = sorted({r.checked_alloc_conf() for w in workloads for r in w.log.recordings})
    if len(recorded) > 1:
        raise ReplayUsageError(
            f"the snapshot's devices were recorded with different settings: {'; '.join(recorded)}"
            "; give the settings to explain",
            parameter="settings",
        )
    return recorded[0] if recorded else ""


def has_recorded_oom(workloads: list[Workload]) -> bool:
    return any(r.ooms for w in workloads for r in w.log.recordings)


def infer_recorded_conditions(
    workloads: list[Workload],
    conf: str,
    device: Device,
    allocator: torch_allocator.TorchAllocator,
    *,
    built: Path | None = None,
) -> Inference | None:
    """The conditions of the first workload with a recorded `oom` entry (None: none has
    one), replayed with the settings `conf` on the virtual `device`, as this module says."""
    for workload in workloads:
        oom = next((o for r in workload.log.recordings for o in r.ooms), None)
        if oom is not None:
            return _infer(workload, oom, conf, device, allocator, built)
    return None


def infer_for_log(
    log: AllocationLog,
    program: ReplayProgram,
    device: Device,
    allocator: torch_allocator.TorchAllocator,
) -> Inference | None:
    """`hipmem replay`'s: the conditions of a one-device snapshot replayed whole (None: not
    such a snapshot, or no out-of-memory error recorded)."""
    if len(log.sources) != 1 or not any(r.ooms for r in log.recordings):
        return None
    workload = Workload(log.sources[0], log, program)
    return infer_recorded_conditions([workload], recorded_settings([workload]), device, allocator)


def recorded_conditions(
    workloads: list[Workload],
    device: Device,
    allocator: torch_allocator.TorchAllocator,
) -> RecordedConditions | None:
    """The conditions of the snapshots' recorded out-of-memory error when the user gave none
    (`recommend` and `check` answer under them; None: none was recorded). Not inferred, it
    is an error: an answer would say what avoids a refusal its replay never saw."""
    if not has_recorded_oom(workloads):
        return None
    found = infer_recorded_conditions(workloads, recorded_settings(workloads), device, allocator)
    if isinstance(found, NotInferred):
        raise RecordedOomNotReproduced(
            f"{found.sentence()}; the replay does not reproduce it, so it gives no answer "
            "(give --device-memory to set the conditions)"
        )
    return found


def must_reproduce(
    workloads: list[Workload],
    device: Device,
    allocator: torch_allocator.TorchAllocator,
) -> None:
    """Under the device the user gave, the recorded out-of-memory error must come back
    (`recommend`: a gate must not pass unearned)."""
    if has_recorded_oom(workloads) and not reproduces(
        workloads, recorded_settings(workloads), device, allocator
    ):
        raise RecordedOomNotReproduced(
            "the snapshot recorded an out-of-memory error and its replay under "
            f"{device.memory_bytes:,} bytes of device memory refuses nothing there: it does "
            "not reproduce the recording, so no setting is recommended (give the device "
            "memory it ran on, or leave it out to infer it)"
        )


def reproduces(
    workloads: list[Workload],
    conf: str,
    device: Device,
    allocator: torch_allocator.TorchAllocator,
    *,
    built: Path | None = None,
) -> bool:
    """The replay of `conf` on `device` refuses a request the recording refused, first."""
    for workload in workloads:
        op = _recorded_op(workload)
        if op is None:
            continue
        with _Prefix(workload, conf, device, allocator, built, DEVICE, op + 1) as through:
            return through.first_refused(device.memory_bytes) == op
    return True


def _infer(
    workload: Workload,
    oom: OomEvent,
    conf: str,
    device: Device,
    allocator: torch_allocator.TorchAllocator,
    built: Path | None,
) -> Inference:
    def refused(why: str) -> NotInferred:
        return NotInferred(workload.name, oom.where, why)

    op = _recorded_op(workload)
    if op is None:
        return refused("its entry is not in the replay's program")
    if oom.device_free_bytes is None:
        return refused("the entry does not say the device's free memory (device_free)")
    roomy = device.memory_bytes + 2 * int(workload.program.size_bytes[op]) + _ROOM_BYTES
    first = _with_room(workload, op, conf, device, allocator, built, roomy)
    if isinstance(first, str):
        return refused(first)
    most_before, segment = first
    kind = DEVICE if oom.device_free_bytes < segment else CAP
    with (
        _Prefix(workload, conf, device, allocator, built, kind, op) as before,
        _Prefix(workload, conf, device, allocator, built, kind, op + 1) as through,
    ):
        ceiling = device.memory_bytes if kind == CAP else roomy
        # The least cap (or device) under which every request before it is served without
        # freeing the cache (the recording freed it at its error only: its retry).
        lo = _least(lambda c: before.first_refused(c) < 0 and before.retries == 0,
                    most_before, 0, ceiling)  # fmt: skip
        if lo is None or through.first_refused(lo) != op:
            return refused("no cap serves every request before it and refuses it: the "
                           "allocator served it after freeing its cache")  # fmt: skip
        held = through.held_bytes
        if kind == DEVICE:  # its free memory, read by PyTorch after freeing its cache
            lo = held + oom.device_free_bytes
            hi = lo + 1
        else:  # the least cap that serves it too
            served = _least(lambda c: through.first_refused(c) < 0, held + segment, lo, ceiling)
            hi = ceiling + 1 if served is None else served
        program = workload.program
        found = RecordedConditions(
            kind, lo, hi, workload.name, oom.where, op, int(program.size_bytes[op]), segment,
            held, oom.device_free_bytes, not bool((program.op[op + 1 :] == OP_ALLOCATE).any()),
        )  # fmt: skip
        for end in found.ends:
            if through.first_refused(end) != op:
                return refused(f"the replay under {end:,} bytes did not refuse it there")
    return found


def _with_room(
    workload: Workload,
    op: int,
    conf: str,
    device: Device,
    allocator: torch_allocator.TorchAllocator,
    built: Path | None,
    roomy: int,
) -> tuple[int, int] | str:
    """Replayed on a device with room for it: the most reserved before op `op` and the
    segment the allocator took for it, or why the replay does not hold what the recording's
    held there."""
    program = workload.program
    with VirtualGpu(program_arrays(program), program.slot_count, len(program.streams), conf,
                    device, allocator, built=built) as gpu:  # fmt: skip
        probe = gpu.replay(device_bytes=roomy, stop_on_failure=True, sample_every=1)
    if probe.failure_count and int(probe.failure_op[0]) <= op:
        return (f"the replay refused a request at op {int(probe.failure_op[0]):,}, before or "
                f"at it, on a device of {roomy:,} bytes")  # fmt: skip
    assert probe.samples is not None  # asked for: sample_every=1
    reserved = _reserved_after_each_op(probe.samples.op_index, probe.samples.reserved_bytes)
    most_before = int(reserved[:op].max()) if op else 0
    segment = int(reserved[op]) - (int(reserved[op - 1]) if op else 0)
    if segment <= 0:
        return ("the replay served the request from its cache, so its allocator did not hold "
                "what the recording's held")  # fmt: skip
    if _expandable(conf):  # after freeing its cache it maps the whole request again
        segment = max(segment, -(-int(program.size_bytes[op]) // ROUND_LARGE_BYTES)
                      * ROUND_LARGE_BYTES)  # fmt: skip
    return most_before, segment


def _expandable(conf: str) -> bool:
    return ("expandable_segments", "True") in settings_pairs(conf)


def _recorded_op(workload: Workload) -> int | None:
    """The allocate op of the workload's first recorded-failed request."""
    rows = np.flatnonzero(recorded_failed_rows(workload.log))
    if not len(rows):
        return None
    program = workload.program
    ops = np.flatnonzero((program.event_index == rows[0]) & (program.op == OP_ALLOCATE))
    return int(ops[0]) if len(ops) else None


def _reserved_after_each_op(op_index: np.ndarray, reserved_bytes: np.ndarray) -> np.ndarray:
    """The reserved bytes after every op of a replay sampled at every op."""
    reserved = np.zeros(int(op_index.max()) + 1 if len(op_index) else 0, dtype=np.int64)
    reserved[op_index] = reserved_bytes
    return reserved


class _Prefix:
    """The program's first `n_ops` ops, replayed up to a refusal under a cap (or on a device of
    that memory): which op was refused (-1: none), and the allocator's retries and reserved
    bytes there, its cache freed."""

    def __init__(self, workload: Workload, conf: str, device: Device,
                 allocator: torch_allocator.TorchAllocator, built: Path | None, kind: str,
                 n_ops: int) -> None:  # fmt: skip
        program = workload.program
        arrays = {name: array[:n_ops] for name, array in program_arrays(program).items()}
        self.gpu = VirtualGpu(arrays, program.slot_count, len(program.streams), conf, device,
                              allocator, built=built)  # fmt: skip
        self.kind = kind
        self.retries = self.held_bytes = 0

    def first_refused(self, bytes_: int) -> int:
        if self.kind == CAP:
            raw = self.gpu.state_at_refusal(limit_bytes=bytes_)
        else:
            raw = self.gpu.state_at_refusal(device_bytes=bytes_)
        self.retries = int(raw["num_alloc_retries"])
        self.held_bytes = int(raw["reserved_bytes"])
        return int(raw["refused_op"])

    def __enter__(self) -> _Prefix:
        return self

    def __exit__(self, *exc: object) -> None:
        self.gpu.close()


def _least(holds: Callable[[int], bool], guess: int, floor: int, ceiling: int) -> int | None:
    """The least c in [floor, ceiling] for which `holds` (false below it, true from it on), or
    None: searched out from `guess` in doubling steps, then halved, so a good guess costs two
    replays and a poor one about twice the bits of its error."""
    guess = min(max(guess, floor), ceiling)
    step = 1
    true_at: int | None
    if holds(guess):
        false_at, true_at = floor - 1, guess
        while true_at - step >= floor:
            if not holds(true_at - step):
                false_at = true_at - step
                break
            true_at, step = true_at - step, step * 2
    else:
        false_at, true_at = guess, None
        while true_at is None:
            probe = min(false_at + step, ceiling)
            if holds(probe):
                true_at = probe
            elif probe == ceiling:
                return None
            else:
                false_at, step = probe, step * 2
    return least_holding(holds, false_at, true_at)
