"""One `hipmem replay` as the command line runs it, for any caller: `load_job` decides every
resource's target before the log is read (a missing GPU or allocator is said first), loads the
log and builds its program; then `replay_job` replays every resource (each release asked for),
or `capacity.capacities.find_capacities` searches their capacities on the job's program and
targets. Two calls, each returning what the caller renders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hipmem._core.progress import ProgressCallback, no_progress

from .engine.options import ReplayOptions
from .engine.preflight import Targets, preflight
from .engine.program import ReplayProgram, build_program
from .engine.releases import replay_releases
from .engine.report import RecordedFigures, ReplayReport, recorded_figures
from .engine.resources import ResourceSpec
from .logs.events import AllocationLog
from .logs.loader import load_log
from .snapshots.release_range import outside_notes


@dataclass
class ReplayJob:
    """A log loaded for its resources, each resource's target decided (`Targets`)."""

    log: AllocationLog
    program: ReplayProgram
    specs: list[ResourceSpec]
    options: ReplayOptions
    targets: Targets
    torch_releases: list[str | None]
    rmm_releases: list[str | None]

    def release_notes(self) -> list[str]:
        """A snapshot whose fields exclude a release that replayed it, one line each (a
        snapshot does not name its release; its fields bound it: snapshots/release_range.py)."""
        versions = {t.allocator.version for t in self.targets.by_key.values()
                    if t.allocator is not None}  # fmt: skip
        recorded = [(r.source, r.written_by) for r in self.log.recordings]
        return [note for version in sorted(versions) for note in outside_notes(recorded, version)]


@dataclass
class JobReplays:
    """What `replay_job` found: a report per resource (and release), the snapshot's recorded
    figures, and the recorded conditions the replays ran under, said as `notices`."""

    reports: list[ReplayReport]
    recorded: RecordedFigures | None
    specs: list[ResourceSpec]  # as replayed (an inferred cap applied)
    notices: list[tuple[str, str]] = field(default_factory=list)  # (level, sentence)


def load_job(
    paths: Sequence[Path | str],
    specs: list[ResourceSpec],
    options: ReplayOptions,
    *,
    torch_releases: list[str | None] | None = None,
    rmm_releases: list[str | None] | None = None,
    strict: bool = False,
    progress: ProgressCallback | None = None,
) -> ReplayJob:
    """Every resource's target, then the log (its bytes read counted on `progress`) and its
    program. `torch_releases`/`rmm_releases`: each release to replay (None: the default)."""
    torch_releases = torch_releases or [options.torch_version]
    rmm_releases = rmm_releases or [options.rmm_version]
    targets = preflight(specs, options, torch_releases=torch_releases, rmm_releases=rmm_releases)
    log = load_log(list(paths), strict=strict, progress=progress)
    return ReplayJob(log, build_program(log), specs, options, targets, torch_releases,
                     rmm_releases)  # fmt: skip


def replay_job(job: ReplayJob, progress: ProgressCallback | None = None) -> JobReplays:
    """Every resource replayed, under the snapshot's recorded conditions where it recorded an
    out-of-memory error and no cap or device memory was given (`_under_recorded_conditions`)."""
    progress = progress or no_progress
    notices: list[tuple[str, str]] = []
    specs = _under_recorded_conditions(job, notices)
    reports: list[ReplayReport] = []
    for done, spec in enumerate(specs):
        progress(done, len(specs), spec.label)
        reports += replay_releases(job.log, spec, job.options, job.program, job.targets,
                                   job.torch_releases, job.rmm_releases)  # fmt: skip
    recorded = recorded_figures(job.log, job.program.peak_requested_bytes)
    return JobReplays(reports, recorded, specs, notices)


def _under_recorded_conditions(
    job: ReplayJob, notices: list[tuple[str, str]]
) -> list[ResourceSpec]:
    """A snapshot that recorded an out-of-memory error, replayed with no cap and no device
    memory given: PyTorch's allocator on the virtual GPU replays under the cap inferred from
    it (explain/recorded_conditions.py, its low end), said in `notices`. The device kind is
    said, not applied: the device given stays the one replayed."""
    from .explain.recorded_conditions import CAP, RecordedConditions, infer_for_log
    from .pytorch.resource import alloc_conf
    from .virtual.gpu import check_conf

    options, specs = job.options, job.specs
    open_specs = [s for s in job.targets.virtual_torch if s.limit_bytes is None]
    allocator = job.targets.torch_allocator(options)
    if options.device_memory_bytes is not None or not open_specs or allocator is None:
        return specs
    for spec in open_specs:  # a mistyped setting is said before the inferred cap is
        check_conf(alloc_conf(spec, job.log), allocator)
    found = infer_for_log(job.log, job.program, options.virtual_device(), allocator)
    if found is None:
        return specs
    if not isinstance(found, RecordedConditions):
        notices.append(("warning", found.sentence()))
        return specs
    if found.kind != CAP:
        notices.append(("info", found.sentence(applied=False)))
        return specs
    notices.append(("info", found.sentence(cap_option=False).replace(
        "answering under it", f"replayed under its low end (limit={found.lo_bytes})")))  # fmt: skip
    return [s.with_limit(found.lo_bytes) if s in open_specs else s for s in specs]
