"""Which PyTorch allocator settings, for this job, on this GPU: every setting of the grid
(replay/settings/grid.py) replayed through PyTorch's own allocator on the virtual GPU, from
the job's memory snapshots.

The recommendation is the setting string with the lowest reserved peak that refuses no
allocation on any snapshot (several snapshots: the lowest of each setting's largest peak over
them), ties going to fewer segment allocations (cudaMalloc/hipMalloc calls, summed over the
snapshots), then to the simpler string (fewer settings, then shorter). With it comes the
device memory it needs (the smallest device on which every snapshot replays, bisected as
`replay --find-capacity` does, cap="device") and the headroom it leaves on the device (its
memory minus the reserved peak, as `fits` says it).

Settings that cap the process (the garbage-collection rows: a per_process_memory_fraction at
the peak their base setting reached) are replayed and shown, but recommended only when
`allow_cap=True`: a cap set at the recorded peak turns a run that needs a little more than
the recording into an out-of-memory, and the fraction means another cap on another GPU. Their
"device memory" is not searched (a smaller GPU shrinks the cap with it): their cap is.

Each replay is a driver process of its own (replay/virtual/gpu.py); they run `jobs` at a time
(default: one per core), the program of each snapshot written once and shared. A capacity
search is a bisection of a dozen or more replays; every setting gets one by default (a 1M-event
snapshot takes about 31 s on two cores, docs/benchmarks.md), and `capacity="recommended"`
searches for the recommended setting and the defaults only (about 10 s).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

from hipmem._core.progress import ProgressCallback, no_progress
from hipmem._core.skipped_input import SkippedInput

from ..capacity.at_once import run_each
from ..capacity.fits import find_virtual_capacity
from ..capacity.result import NoCapacityFound
from ..engine.options import ReplayOptions
from ..engine.program import logged_allocation_sizes, program_arrays
from ..errors import ReplayUsageError
from ..explain.recorded_conditions import (
    CAP,
    RecordedConditions,
    must_reproduce,
    recorded_conditions,
)
from ..explain.variables import (
    environment_warnings,
    expandable_takes_effect,
    has_expandable,
    set_variables,
)
from ..pytorch import allocator as torch_allocator
from ..virtual import build as vcuda_build
from ..virtual.devices import Device
from ..virtual.gpu import ProgramFiles, VirtualGpu, VirtualGpuFailed
from . import grid as allocator_grid
from .candidate import Candidate, SnapshotRun
from .grid import GridEntry
from .workloads import Snapshots, Workload, load_snapshots, release_notes

# Which variable a PyTorch build reads (docs/allocator-settings.md has the source): ROCm
# builds read PYTORCH_HIP_ALLOC_CONF when PYTORCH_CUDA_ALLOC_CONF is unset, CUDA builds
# PYTORCH_CUDA_ALLOC_CONF. "both" sets both to the same string, which any build reads alike.
VARIABLES = {
    "rocm": ("PYTORCH_HIP_ALLOC_CONF",),
    "cuda": ("PYTORCH_CUDA_ALLOC_CONF",),
    "both": ("PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"),
}
TORCH_BUILDS = tuple(VARIABLES)
CAPACITIES = ("recommended", "all")

_T = TypeVar("_T")


@dataclass
class AllocatorRecommendation:
    """Every setting of the grid, replayed, and the one recommended (None: none fits)."""

    device: Device
    torch_version: str
    allocator_source: str
    snapshots: list[str]
    candidates: list[Candidate]
    recommended: Candidate | None
    default: Candidate
    # "recommended" (it and the defaults were searched), "all", or "none" (under a cap
    # inferred from a recorded out-of-memory error: the device memory is not the question)
    capacity: str
    notes: list[str] = field(default_factory=list)
    skipped: SkippedInput = field(default_factory=SkippedInput)  # accepted (accept_skipped)
    # The conditions inferred from a recorded out-of-memory error (the user gave none).
    inferred: RecordedConditions | None = None
    # A snapshot whose fields exclude the release that replayed it (release_range.py).
    release_notes: list[str] = field(default_factory=list)
    # What was replayed, for a plot or a replay of one setting (not in --json).
    workloads: list[Workload] = field(default_factory=list, repr=False)
    options: ReplayOptions = field(default_factory=ReplayOptions, repr=False)
    # The PYTORCH_*_ALLOC_CONF variables set where it ran (for environment_warnings: which of
    # them wins over the ones to set depends on the builds they are set for).
    environment: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def settings(self) -> str | None:
        return None if self.recommended is None else self.recommended.settings

    @property
    def cap_bytes(self) -> int | None:
        """The low end of the cap inferred from a recorded out-of-memory error, if any."""
        return None if self.inferred is None else self.inferred.cap_bytes

    @property
    def headroom_bytes(self) -> int | None:
        """The device's memory (or the inferred cap's low end) left at the recommended
        setting's reserved peak."""
        peak = None if self.recommended is None else self.recommended.peak_reserved_bytes
        have = self.device.memory_bytes if self.cap_bytes is None else self.cap_bytes
        return None if peak is None else have - peak

    def variables(self, torch_build: str = "both") -> list[tuple[str, str]]:
        """(name, value) pairs to set, for ROCm builds of PyTorch, CUDA builds or both."""
        if torch_build not in VARIABLES:
            raise ReplayUsageError(f"not one of {', '.join(TORCH_BUILDS)}",
                                   parameter="torch_build", value=torch_build)  # fmt: skip
        if self.recommended is None:
            return []
        return [(name, self.recommended.settings) for name in VARIABLES[torch_build]]

    def environment_warnings(self, torch_build: str = "both") -> list[str]:
        """A variable already set that a build would read instead of those
        `variables(torch_build)`
        sets (docs/allocator-settings.md, "Which variable PyTorch reads")."""
        return environment_warnings(torch_build, self.environment)

    def as_dict(self) -> dict[str, object]:
        return {
            "device": self.device.as_dict(),
            "torch": self.torch_version,
            "allocator": self.allocator_source,
            "snapshots": self.snapshots,
            "recommended": None if self.recommended is None else self.recommended.settings,
            "driving_snapshot": None
            if self.recommended is None or self.recommended.driving is None
            else self.recommended.driving.snapshot,
            "peak_reserved_bytes": None
            if self.recommended is None
            else self.recommended.peak_reserved_bytes,
            "capacity_bytes": None if self.recommended is None else self.recommended.capacity_bytes,
            "headroom_bytes": self.headroom_bytes,
            "capacity_searched_for": self.capacity,
            "inferred_conditions": None if self.inferred is None else self.inferred.as_dict(),
            "uncertain": [c.settings for c in self.candidates if c.uncertain],
            "notes": self.notes,
            "release_notes": self.release_notes,
            "skipped_entries": self.skipped.as_dict(),
            "candidates": [candidate.as_dict() for candidate in self.candidates],
        }


def recommend_allocator_settings(
    snapshots: Snapshots,
    *,
    device: str | None = None,
    device_memory_bytes: int | None = None,
    torch_version: str | None = None,
    capacity: str = "all",
    allow_cap: bool = False,
    accept_skipped: bool = False,
    strict: bool = False,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    rocm: bool = False,
    environ: Mapping[str, str] | None = None,
) -> AllocatorRecommendation:
    """Replay every setting of the grid on every snapshot on the virtual `device` (a device of
    the table, default MI300X, or `device_memory_bytes`) with PyTorch `torch_version`'s
    allocator (the search order of replay/pytorch/allocator.py) and recommend one, as this
    module says (`allow_cap`: settings that cap the process may be recommended too; `rocm`: the
    setting is for a ROCm build of PyTorch too, so none that does nothing there is recommended:
    replay/explain/variables.py). A snapshot entry that cannot be read stops it
    (`SkippedInputError`) unless `accept_skipped` (`strict`: the first one does, naming it, as
    in every command). The PYTORCH_*_ALLOC_CONF variables set in `environ` (default: this
    process's environment) are kept for the result's `environment_warnings`."""
    if capacity not in CAPACITIES:
        raise ReplayUsageError(
            f"not one of {', '.join(CAPACITIES)}", parameter="capacity", value=capacity
        )
    options = ReplayOptions(
        backend="virtual",
        device_name=device,
        device_memory_bytes=device_memory_bytes,
        torch_version=torch_version,
    )
    options.check()
    allocator = torch_allocator.locate(torch_version)
    workloads, skipped = load_snapshots(snapshots, accept_skipped=accept_skipped, strict=strict)
    notes = _partial_trace_notes(workloads)
    device_played = options.virtual_device()
    inferred = None
    if device_memory_bytes is not None:
        must_reproduce(workloads, device_played, allocator)
    else:
        inferred = recorded_conditions(workloads, device_played, allocator)
    ends: tuple[int | None, ...] = (None,)
    passes = 1 if inferred is None else inferred.passes
    if inferred is not None and inferred.kind == CAP:
        ends = inferred.ends
    elif inferred is not None:
        device_played = replace(device_played, memory_bytes=inferred.lo_bytes)
    with _Replayer(workloads, device_played, allocator, jobs, progress, passes=passes) as replayer:
        if ends == (None,):
            candidates = _replay_grid(replayer, notes)
        else:  # under the inferred cap, at both its ends; no device memory to search
            candidates = replay_entries_at_ends(
                workloads, _capped_grid(workloads), device_played, allocator,
                limits=ends, jobs=jobs, progress=progress, passes=passes,
            )  # fmt: skip
            capacity = "none"
        eligible = [c for c in candidates if c.replayed and (allow_cap or not c.capped)]
        if rocm and not expandable_takes_effect(allocator.version, "rocm"):
            eligible = [c for c in eligible if not has_expandable(c.settings)]
            notes.append(
                f"expandable_segments does nothing on a ROCm build of PyTorch {allocator.version} "
                "(it takes effect from 2.11 with ROCm 7.0): no setting with it is recommended"
            )
        best = min(eligible, key=Candidate.rank, default=None)
        default = candidates[0]
        searched = candidates if capacity == "all" else [default, *([best] if best else [])]
        # The defaults may be the best; a capped setting's device is its cap (see above).
        unique = {id(c): c for c in searched if c.replayed and not c.capped}
        if capacity != "none":
            _find_capacities(replayer, list(unique.values()), options)
    return AllocatorRecommendation(
        device=replayer.device,
        torch_version=allocator.version,
        allocator_source=allocator.describe(),
        snapshots=[w.name for w in workloads],
        candidates=candidates,
        recommended=best,
        default=default,
        capacity=capacity,
        notes=notes + _capped_note(candidates, best, allow_cap),
        release_notes=release_notes(workloads, allocator.version),
        skipped=skipped,
        workloads=workloads,
        options=options,
        inferred=inferred,
        environment=set_variables(environ),
    )


def _capped_grid(workloads: list[Workload]) -> list[GridEntry]:
    """The first round and garbage collection within the cap in force."""
    sizes = [logged_allocation_sizes(w.program) for w in workloads]
    first = allocator_grid.first_round(allocator_grid.large_request_sizes(sizes))
    return first + allocator_grid.within_cap()


def replay_entries(
    workloads: list[Workload],
    entries: list[GridEntry],
    device: Device,
    allocator: torch_allocator.TorchAllocator,
    *,
    limit_bytes: int | None = None,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    what: str = "grid",
    passes: int = 1,
) -> list[Candidate]:
    """Replay each entry on every workload, whole, on `device` (under a per-process cap of
    `limit_bytes` when given), as `recommend_allocator_settings` replays its grid; `passes`
    times over on one allocator, its cache as the pass before left it."""
    with _Replayer(workloads, device, allocator, jobs, progress, limit_bytes,
                   passes) as replayer:  # fmt: skip
        return replayer.run(entries, what)


def replay_entries_at_ends(
    workloads: list[Workload],
    entries: list[GridEntry],
    device: Device,
    allocator: torch_allocator.TorchAllocator,
    *,
    limits: Sequence[int | None],
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    what: str = "grid",
    passes: int = 1,
) -> list[Candidate]:
    """Each entry replayed under each of `limits` (the ends of an inferred cap), judged as
    one: it served every request only if it did under every limit; under some only, it is
    `uncertain` and carries the runs of a limit that refused (so it is not `replayed`)."""
    rounds = []
    for limit in limits:
        rounds.append(replay_entries(workloads, entries, device, allocator, limit_bytes=limit,
                                     jobs=jobs, progress=progress, what=what,
                                     passes=passes))  # fmt: skip
    judged = []
    for same in zip(*rounds, strict=True):
        served = sum(1 for c in same if c.replayed)
        kept = next((c for c in same if not c.replayed), same[-1])
        kept.uncertain = 0 < served < len(same)
        judged.append(kept)
    return judged


def _replay_grid(replayer: _Replayer, notes: list[str]) -> list[Candidate]:
    """Both rounds of the grid (replay/settings/grid.py), each setting on every snapshot;
    `notes` gets what the grid had to leave out, and why."""
    sizes = [logged_allocation_sizes(w.program) for w in replayer.workloads]
    large = allocator_grid.large_request_sizes(sizes)
    if not allocator_grid.split_sizes_mib(large):
        notes.append(
            "no request is larger than 20 MiB, so max_split_size_mb would change nothing: "
            "the grid has none"
        )
    first = allocator_grid.first_round(large)
    candidates = replayer.run(first, "grid")
    if not allocator_grid.takes_memory_fraction(replayer.allocator):
        notes.append(
            f"PyTorch {replayer.allocator.version} has no per_process_memory_fraction setting, "
            "and garbage_collection_threshold acts only under a memory fraction: the grid has "
            "no garbage collection (PyTorch 2.11 has both)"
        )
        return candidates
    peaks = {c.settings: c.peak_reserved_bytes for c in candidates if c.replayed}
    second = allocator_grid.second_round(peaks, replayer.device.memory_bytes, first)
    return candidates + replayer.run(second, "caps")


def _capped_note(candidates: list[Candidate], best: Candidate | None, allow_cap: bool) -> list[str]:
    """Say so when a setting that caps the process reserves less than the recommendation."""
    if allow_cap or best is None or best.peak_reserved_bytes is None:
        return []
    lower = [c for c in candidates if c.capped and c.replayed
             and (c.peak_reserved_bytes or 0) < best.peak_reserved_bytes]  # fmt: skip
    if not lower:
        return []
    lowest = min(lower, key=Candidate.rank)
    return [
        f"{lowest.settings} reserves less ({lowest.peak_reserved_bytes:,} bytes) but caps the "
        f"process at {lowest.entry.cap_bytes:,} bytes, the peak the recording reached without "
        "it: a run that needs more is refused, so it is not recommended unless asked for "
        "(allow_cap, --allow-cap)"
    ]


def _partial_trace_notes(workloads: list[Workload]) -> list[str]:
    notes = []
    for workload in workloads:
        early = sum(r.pre_recording_allocations for r in workload.log.recordings)
        if early:
            notes.append(
                f"{workload.name}: {early:,} allocations were made before recording began; "
                "they are replayed at its start, and what was freed before it is not seen"
            )
    return notes


class _Replayer:
    """Replays grid entries on every workload, `jobs` driver processes at a time."""

    def __init__(
        self,
        workloads: list[Workload],
        device: Device,
        allocator: torch_allocator.TorchAllocator,
        jobs: int | None,
        progress: ProgressCallback | None,
        limit_bytes: int | None = None,
        passes: int = 1,
    ) -> None:
        if jobs is not None and jobs < 1:
            raise ReplayUsageError("must be at least 1", parameter="jobs", value=jobs)
        self.workloads, self.device, self.allocator = workloads, device, allocator
        self.limit_bytes = limit_bytes  # a per-process cap on the device (hipmem explain's)
        self.passes = passes  # replays of the whole program on one allocator
        # Built (and checked) once, before the replays start side by side; each replay reuses it.
        self.built = vcuda_build.build(allocator)
        self.jobs = jobs or os.cpu_count() or 1
        self.progress = progress or no_progress
        self._stack = ExitStack()
        self.files: list[ProgramFiles] = []

    def __enter__(self) -> _Replayer:
        for workload in self.workloads:
            self.files.append(self._stack.enter_context(
                ProgramFiles(program_arrays(workload.program))))  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def run(self, entries: list[GridEntry], what: str) -> list[Candidate]:
        candidates = [Candidate(entry) for entry in entries]
        tasks = [(c, i) for c in candidates for i in range(len(self.workloads))]
        runs = self.map(lambda task: self._replay(*task), tasks, what)
        for (candidate, _), run in zip(tasks, runs, strict=True):
            if isinstance(run, SnapshotRun):
                candidate.runs.append(run)
            else:
                candidate.error = candidate.error or str(run)
        return candidates

    def _replay(self, candidate: Candidate, index: int) -> SnapshotRun | str:
        workload, program = self.workloads[index], self.workloads[index].program
        try:
            with VirtualGpu(self.files[index], program.slot_count, len(program.streams),
                            candidate.settings, self.device, self.allocator,
                            built=self.built) as gpu:  # fmt: skip
                probe = gpu.replay(limit_bytes=self.limit_bytes, repeats=self.passes)
        except VirtualGpuFailed as err:  # PyTorch refused the setting: said in the table
            return str(err)
        first = None
        if probe.failure_count:
            first = workload.log.line_ref(int(program.event_index[int(probe.failure_op[0])]))
        return SnapshotRun(workload.name, program.peak_requested_bytes,
                           probe.peak_reserved_bytes, probe.segment_allocations,
                           probe.alloc_retries, probe.failure_count, first)  # fmt: skip

    def map(self, work: Callable[[_T], object], tasks: list[_T], what: str) -> list[object]:
        """`work` over `tasks`, `jobs` at a time, results in the tasks' order. Threads only
        wait on driver processes; on an error or Ctrl-C the tasks not yet started are dropped
        (the running drivers end with the caller: same process group)."""
        done = [0]
        lock = threading.Lock()

        def counted(task: _T) -> object:
            result = work(task)
            with lock:
                done[0] += 1
                self.progress(done[0], len(tasks), what)
            return result

        self.progress(0, len(tasks), what)
        return run_each([partial(counted, task) for task in tasks], self.jobs)


def _find_capacities(
    replayer: _Replayer, candidates: list[Candidate], options: ReplayOptions
) -> None:
    """The smallest device of each candidate: the largest over the snapshots."""
    tasks = [(c, w) for c in candidates for w in replayer.workloads]

    def search(task: tuple[Candidate, Workload]) -> int | None:
        candidate, workload = task
        try:
            found = find_virtual_capacity(workload.log, candidate.spec, options, cap="device",
                                          program=workload.program)  # fmt: skip
        except NoCapacityFound:
            return None
        return found.capacity_bytes

    sizes = replayer.map(search, tasks, "capacity")
    unknown = {id(c) for (c, _), size in zip(tasks, sizes, strict=True) if size is None}
    for (candidate, workload), size in zip(tasks, sizes, strict=True):
        if id(candidate) in unknown or not isinstance(size, int):
            continue
        if size > (candidate.capacity_bytes or 0):
            candidate.capacity_bytes, candidate.capacity_snapshot = size, workload.name
