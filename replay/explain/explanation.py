"""Why did it run out of memory, and what would have avoided it (`hipmem explain`).

For a PyTorch memory snapshot, under the conditions given (a virtual device or its memory, a
per-process cap, PyTorch's version and its allocator settings, by default the recorded ones):

1. the snapshot is replayed through PyTorch's own allocator on the virtual GPU up to the first
   request it refuses, a recorded out-of-memory request (replayed as the request it was,
   replay/engine/program.py) or any other, and the allocator's state there is read from its own
   snapshot() (replay/explain/state.py), with the plain reason;
2. the allocations live then are grouped by the line of the program that made them
   (replay/explain/live.py);
3. every setting of `recommend --from-snapshot`'s grid (replay/settings/grid.py) is replayed
   over the whole trace, every device, under the same device memory and cap: those that
   refuse nothing avoid it, ranked as `recommend` ranks them (reserved peak, then segment
   allocations, then the simpler string). Nothing is estimated: a setting named here served
   every request of a replay. Under a cap, the grid's garbage-collection rows keep the user's
   cap instead of adding one (the threshold acts on whatever fraction is in force);
   when neither a cap nor the device's memory is given and the snapshot recorded an
   out-of-memory error, the conditions are inferred from it
   (replay/explain/recorded_conditions.py): the device's memory it had, or a cap known to lie
   in an interval, at both ends of which each setting is replayed (a setting that avoids the
   refusal at one end only is `uncertain`, and never named a fix; a recording that ended at
   its error is replayed twice over, standing for the job going on);
4. the device memory (or, under a cap, the cap) the current settings need: the capacity
   search of `replay --find-capacity` (replay/capacity/fits.py), and so the bytes missing.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from hipmem._core.alloc_conf import check_alloc_conf, settings_pairs
from hipmem._core.progress import ProgressCallback, no_progress

from ..capacity.fits import find_virtual_capacity
from ..capacity.result import NoCapacityFound
from ..engine.options import ReplayOptions
from ..engine.program import logged_allocation_sizes, program_arrays
from ..engine.resources import parse_spec
from ..errors import ReplayUsageError
from ..logs.events import ALLOCATE_FAILURE, LineRef
from ..pytorch import allocator as torch_allocator
from ..settings import grid as allocator_grid
from ..settings.candidate import Candidate
from ..settings.grid import GridEntry
from ..settings.recommend import replay_entries_at_ends
from ..settings.workloads import Workload, load_workloads, release_notes
from ..virtual import build as vcuda_build
from ..virtual.devices import Device
from ..virtual.gpu import VirtualGpu
from .live import LiveAllocations, live_allocations
from .recorded_conditions import (
    CAP,
    Inference,
    NotInferred,
    RecordedConditions,
    has_recorded_oom,
    infer_recorded_conditions,
    recorded_settings,
)
from .state import AllocatorState, read_state, refusal_reason
from .variables import (
    VariableAdvice,
    expandable_takes_effect,
    harmful_combination,
    has_expandable,
    variable_advice,
)


@dataclass(frozen=True)
class RefusedRequest:
    """The first request the allocator refused under the conditions explained."""

    snapshot: str  # the device's source, `run.pickle#dev0`
    where: LineRef
    size_bytes: int
    recorded_failed: bool  # it ran out of memory when recorded too
    op_index: int

    def as_dict(self) -> dict[str, object]:
        return {
            "snapshot": self.snapshot,
            **self.where.as_dict(),
            "size_bytes": self.size_bytes,
            "recorded_failed": self.recorded_failed,
        }


@dataclass
class Explanation:
    """What `explain` found; `refused` is None when every request was served."""

    snapshot: str
    device: Device
    cap_bytes: int | None
    settings: str  # PyTorch's setting string replayed ("" its defaults)
    torch_version: str
    allocator_source: str
    recorded_ooms: int
    refused: RefusedRequest | None
    state: AllocatorState | None
    reason: str | None
    live: LiveAllocations | None
    candidates: list[Candidate] = field(default_factory=list)
    needed_bytes: int | None = None  # device memory (or cap) the current settings need
    variables: VariableAdvice | None = None
    torch_build: str = "rocm"  # the user's PyTorch build the advice is for
    # Allocations made before the trace's first entry (freed in it, or live at the dump with
    # no `alloc`): the recording started mid-run or max_entries dropped the oldest entries,
    # so the allocator's state then is not known and a replay may serve what it refused.
    pre_recording_allocations: int = 0
    # The conditions inferred from the snapshot's recorded out-of-memory error (none given),
    # or why they could not be; None when none was recorded or the user gave them.
    inferred: Inference | None = None
    # A snapshot whose fields exclude the release that replayed it (release_range.py).
    release_notes: list[str] = field(default_factory=list)

    @property
    def conditions(self) -> RecordedConditions | None:
        """The inferred conditions this explanation answers under, if any."""
        return self.inferred if isinstance(self.inferred, RecordedConditions) else None

    @property
    def uncertain(self) -> list[Candidate]:
        """Settings that avoided the refusal at one end of an inferred cap only."""
        return [c for c in self.candidates if c.uncertain]

    @property
    def recorded_oom_not_reproduced(self) -> bool:
        """The recording ran out of memory, and this replay refused nothing."""
        return self.refused is None and self.recorded_ooms > 0

    def why_not_recommended(self, candidate: Candidate) -> str | None:
        """Why a setting that avoided the refusal is still not recommended, or None."""
        if has_expandable(candidate.settings) and not expandable_takes_effect(
            self.torch_version, self.torch_build
        ):
            return (
                f"expandable_segments does nothing on a ROCm build of PyTorch {self.torch_version}"
            )
        if candidate.capped:
            return "it caps the process at the recorded peak (see recommend --allow-cap)"
        return harmful_combination(candidate.settings, self.torch_version)

    @property
    def recommended(self) -> Candidate | None:
        """The best-ranked setting that avoided the refusal and may be recommended."""
        return next((c for c in self.avoiding if self.why_not_recommended(c) is None), None)

    @property
    def limit_name(self) -> str:
        return "cap" if self.cap_bytes is not None else "device memory"

    @property
    def have_bytes(self) -> int:
        return self.cap_bytes if self.cap_bytes is not None else self.device.memory_bytes

    @property
    def avoiding(self) -> list[Candidate]:
        """The grid's settings that served every request, best first."""
        return sorted((c for c in self.candidates if c.replayed), key=Candidate.rank)

    @property
    def missing_bytes(self) -> int | None:
        """What the current settings lack: needed minus the device memory or cap."""
        return None if self.needed_bytes is None else self.needed_bytes - self.have_bytes

    def as_dict(self) -> dict[str, object]:
        return {
            "snapshot": self.snapshot,
            "device": self.device.as_dict(),
            "cap_bytes": self.cap_bytes,
            "settings": self.settings,
            "torch": self.torch_version,
            "allocator": self.allocator_source,
            "recorded_ooms": self.recorded_ooms,
            "recorded_oom_not_reproduced": self.recorded_oom_not_reproduced,
            "inferred_conditions": None if self.conditions is None else self.conditions.as_dict(),
            "not_inferred_because": self.inferred.reason
            if isinstance(self.inferred, NotInferred)
            else None,
            "pre_recording_allocations": self.pre_recording_allocations,
            "release_notes": self.release_notes,
            "refused": None if self.refused is None else self.refused.as_dict(),
            "state": None if self.state is None else self.state.as_dict(),
            "reason": self.reason,
            "live": None if self.live is None else self.live.as_dict(),
            "recommended": None if self.recommended is None else self.recommended.settings,
            "avoided_by": [
                {**_candidate_dict(c), "not_recommended_because": self.why_not_recommended(c)}
                for c in self.avoiding
            ],
            "uncertain": [_candidate_dict(c) for c in self.uncertain],
            "not_avoided_by": [
                _candidate_dict(c) for c in self.candidates if not c.replayed and not c.uncertain
            ],
            "needed_bytes": self.needed_bytes,
            "needed_is": self.limit_name,
            "missing_bytes": self.missing_bytes,
            "variables": None if self.variables is None else self.variables.as_dict(),
        }


def _candidate_dict(candidate: Candidate) -> dict[str, object]:
    run = min(
        (r for r in candidate.runs if r.first_refused), key=lambda r: r.snapshot, default=None
    )
    return {
        "settings": candidate.settings,
        "rule": candidate.entry.rule,
        "error": candidate.error,
        "peak_reserved_bytes": candidate.peak_reserved_bytes,
        "segment_allocations": candidate.segment_allocations,
        "refused_allocations": candidate.refused_count,
        "first_refused": None
        if run is None or run.first_refused is None
        else run.first_refused.as_dict(),
    }


def explain(
    snapshot: str | os.PathLike[str],
    *,
    device: str | None = None,
    device_memory_bytes: int | None = None,
    cap_bytes: int | None = None,
    torch_version: str | None = None,
    settings: str | None = None,
    torch_build: str = "rocm",
    environment: dict[str, str] | None = None,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
) -> Explanation:
    """Explain the first refused request of `snapshot` on the virtual `device` (a device of
    the table, default MI300X, or `device_memory_bytes`), under a per-process cap of
    `cap_bytes` if given,
    with PyTorch `torch_version`'s allocator and `settings` (default: the recorded ones), as
    this module says. `torch_build` ("rocm" or "cuda") and `environment` (default: this
    process's) choose the variable the advice is written in (replay/explain/variables.py)."""
    progress = progress or no_progress
    options = ReplayOptions(
        backend="virtual",
        device_name=device,
        time_calls=False,
        device_memory_bytes=device_memory_bytes,
        torch_version=torch_version,
    )
    options.check()
    if settings is not None:  # refused before the allocator is found or the snapshot read
        check_alloc_conf(settings, parameter="settings")
    played = options.virtual_device()
    if cap_bytes is not None and not 0 < cap_bytes <= played.memory_bytes:
        raise ReplayUsageError(
            f"must be more than 0 and at most the device's {played.memory_bytes:,} bytes",
            parameter="cap_bytes",
            value=cap_bytes,
        )
    allocator = torch_allocator.locate(torch_version)
    built = vcuda_build.build(allocator)  # checked once for the replays to the refusal
    workloads = load_workloads([snapshot])
    conf = _settings(settings, workloads)
    inferred = None
    if cap_bytes is None and device_memory_bytes is None and has_recorded_oom(workloads):
        inferred = infer_recorded_conditions(workloads, conf, played, allocator, built=built)
    limits: tuple[int | None, ...] = (cap_bytes,)
    passes = 1
    if isinstance(inferred, RecordedConditions):
        passes = inferred.passes
        if inferred.kind == CAP:
            cap_bytes, limits = inferred.lo_bytes, inferred.ends
        else:
            played = replace(played, memory_bytes=inferred.lo_bytes)
    found = _first_refusal(workloads, conf, played, allocator, cap_bytes, built)
    result = Explanation(
        snapshot=str(snapshot),
        device=played,
        cap_bytes=cap_bytes,
        settings=conf,
        torch_version=allocator.version,
        allocator_source=allocator.describe(),
        recorded_ooms=sum(len(r.ooms) for w in workloads for r in w.log.recordings),
        refused=None,
        state=None,
        reason=None,
        live=None,
        torch_build=torch_build,
        pre_recording_allocations=sum(
            r.pre_recording_allocations for w in workloads for r in w.log.recordings
        ),
        inferred=inferred,
        release_notes=release_notes(workloads, allocator.version),
    )
    if found is None:
        return result
    workload, op, state = found
    program = workload.program
    event = int(program.event_index[op])
    result.refused = RefusedRequest(
        workload.name,
        workload.log.line_ref(event),
        int(program.size_bytes[op]),
        int(workload.log.events["action"].to_numpy()[event]) == ALLOCATE_FAILURE,
        op,
    )
    result.state = state
    expandable = ("expandable_segments", "True") in settings_pairs(conf)
    result.reason = refusal_reason(
        state,
        result.refused.size_bytes,
        memory_bytes=played.memory_bytes,
        cap_bytes=cap_bytes,
        expandable=expandable,
    )
    entries = _grid(workloads, allocator, played, cap_bytes)
    # The grid's replays are driver processes its threads wait on: the capacity search (a
    # chain of replays of its own) and the frames (read again from the snapshot, in Python)
    # run beside them rather than after.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="hipmem-explain") as pool:
        live = pool.submit(live_allocations, workload.log, program, op)
        needed = pool.submit(_needed_bytes, workloads, conf, options, cap_bytes, no_progress)
        result.candidates = replay_entries_at_ends(
            workloads,
            entries,
            played,
            allocator,
            limits=limits,
            passes=passes,
            jobs=jobs,
            progress=progress,
        )
        result.live, result.needed_bytes = live.result(), needed.result()
    best = None if result.recommended is None else result.recommended.settings
    result.variables = variable_advice(
        best, allocator.version, build=torch_build, environment=environment
    )
    return result


def _settings(settings: str | None, workloads: list[Workload]) -> str:
    """The settings given, else the recorded ones (all devices must agree)."""
    if settings is not None:
        check_alloc_conf(settings, parameter="settings")
        return settings
    return recorded_settings(workloads)


def _first_refusal(
    workloads: list[Workload],
    conf: str,
    device: Device,
    allocator: torch_allocator.TorchAllocator,
    cap_bytes: int | None,
    built: Path,
) -> tuple[Workload, int, AllocatorState] | None:
    """The first device whose replay refuses a request: the op and the allocator's state."""
    for workload in workloads:
        program = workload.program
        with VirtualGpu(
            program_arrays(program),
            program.slot_count,
            len(program.streams),
            conf,
            device,
            allocator,
            built=built,
        ) as gpu:
            raw = gpu.state_at_refusal(limit_bytes=cap_bytes)
        if int(raw["refused_op"]) >= 0:
            return workload, int(raw["refused_op"]), read_state(raw)
    return None


def _grid(
    workloads: list[Workload],
    allocator: torch_allocator.TorchAllocator,
    device: Device,
    cap_bytes: int | None,
) -> list[GridEntry]:
    """`recommend`'s first round; under a cap, garbage collection within that cap (see the
    module's docstring). Without one, the grid's second round needs the first's peaks, which
    a refusing snapshot does not give: its garbage-collection rows are left to `recommend`."""
    sizes = [logged_allocation_sizes(w.program) for w in workloads]
    entries = allocator_grid.first_round(allocator_grid.large_request_sizes(sizes))
    if cap_bytes is not None:
        entries += allocator_grid.within_cap()
    return entries


def _needed_bytes(
    workloads: list[Workload],
    conf: str,
    options: ReplayOptions,
    cap_bytes: int | None,
    progress: ProgressCallback,
) -> int | None:
    """The device memory (or cap) the current settings need, over every device."""
    spec = parse_spec(f"torch:settings={conf}" if conf else "torch")
    needed = 0
    for workload in workloads:
        try:
            found = find_virtual_capacity(
                workload.log,
                spec,
                options,
                cap="device" if cap_bytes is None else "fraction",
                program=workload.program,
                progress=progress,
            )
        except NoCapacityFound:
            return None
        needed = max(needed, found.capacity_bytes)
    return needed
