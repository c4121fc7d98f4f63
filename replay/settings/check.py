"""The CI gate of PyTorch's allocator settings: do these snapshots replay, with this setting
string, on this device, with no refused allocation? (`hipmem check --from-snapshot`.)

Each snapshot is replayed through PyTorch's allocator on the virtual GPU (the same replay as
`hipmem replay -r torch:settings=...`), stopping at the first allocation it refuses; that one
is named with its snapshot line and, when PyTorch recorded stacks, the line of the program
that asked for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from hipmem._core.alloc_conf import check_alloc_conf
from hipmem._core.skipped_input import SkippedInput

from ..engine.options import ReplayOptions
from ..engine.report import AllocationFailure
from ..engine.resources import parse_spec
from ..engine.run import replay_log
from ..explain.recorded_conditions import CAP, RecordedConditions, recorded_conditions
from ..explain.variables import CheckedSettings, settings_to_check
from ..pytorch import allocator as torch_allocator
from ..snapshots.frames import Frame, user_frame
from ..snapshots.reader import entry_frames
from ..virtual.devices import Device
from .workloads import Snapshots, Workload, load_snapshots, release_notes


@dataclass(frozen=True)
class SnapshotVerdict:
    """One snapshot under the setting: its reserved peak, or the first allocation refused."""

    snapshot: str
    peak_requested_bytes: int
    peak_reserved_bytes: int | None  # up to the first refusal when there is one
    first_refused: AllocationFailure | None
    frame: Frame | None  # where the program asked for it (None: no stacks recorded)

    @property
    def fits(self) -> bool:
        return self.first_refused is None

    @property
    def path(self) -> Path:
        """The snapshot's file: its source less the device (`run.pickle` of `run.pickle#dev0`,
        snapshots/reader.py names them), to explain it (`check --explain`)."""
        return Path(self.snapshot.rpartition("#dev")[0] or self.snapshot)

    def as_dict(self) -> dict[str, object]:
        refused = self.first_refused
        return {
            "snapshot": self.snapshot,
            "fits": self.fits,
            "peak_requested_bytes": self.peak_requested_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "first_refused": None
            if refused is None
            else {
                **refused.where.as_dict(),
                "size_bytes": refused.size_bytes,
                "live_bytes": refused.live_bytes,
                "frame": None if self.frame is None else str(self.frame),
            },
        }


@dataclass(frozen=True)
class AllocatorCheck:
    """The verdict for every snapshot."""

    settings: str
    device: Device
    torch_version: str
    allocator_source: str
    verdicts: list[SnapshotVerdict]
    skipped: SkippedInput = field(default_factory=SkippedInput)  # accepted (accept_skipped)
    # The conditions inferred from a recorded out-of-memory error (none given), judged under.
    inferred: RecordedConditions | None = None
    # A snapshot whose fields exclude the release that replayed it (release_range.py).
    release_notes: list[str] = field(default_factory=list)
    # Where the settings came from, as the verdict names them: `settings` (given),
    # `--alloc-conf`, `$PYTORCH_CUDA_ALLOC_CONF`, ... (explain/variables.py's settings_to_check).
    source: str = "settings"

    @property
    def fits(self) -> bool:
        return all(verdict.fits for verdict in self.verdicts)

    @property
    def first_failure(self) -> SnapshotVerdict | None:
        return next((verdict for verdict in self.verdicts if not verdict.fits), None)

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "fits": self.fits,
            "settings": self.settings,
            "device": self.device.as_dict(),
            "torch": self.torch_version,
            "allocator": self.allocator_source,
            "snapshots": [verdict.as_dict() for verdict in self.verdicts],
            "skipped_entries": self.skipped.as_dict(),
            "inferred_conditions": None if self.inferred is None else self.inferred.as_dict(),
            "release_notes": self.release_notes,
        }


def check_allocator_settings(
    snapshots: Snapshots,
    settings: str | CheckedSettings | None = None,
    *,
    device: str | None = None,
    device_memory_bytes: int | None = None,
    torch_version: str | None = None,
    accept_skipped: bool = False,
    strict: bool = False,
    environ: Mapping[str, str] | None = None,
) -> AllocatorCheck:
    """Replay every snapshot with `settings` (PyTorch's setting string, "" for its defaults;
    None: the one the PYTORCH_*_ALLOC_CONF variables set in `environ` hold, as
    `settings_to_check` reads them; or what `settings_to_check` chose) on the virtual `device`
    (a device of the table, default MI300X, or `device_memory_bytes`).

    A snapshot entry that cannot be read could change the verdict, so it stops the check
    (`SkippedInputError`, exit 1) unless `accept_skipped`; the verdict then carries how many
    entries it did without. `strict`: the first entry that cannot be read is the error."""
    chosen = _chosen(settings, environ)
    options = ReplayOptions(backend="virtual", device_name=device,
                            device_memory_bytes=device_memory_bytes, torch_version=torch_version,
                            on_failure="stop", time_calls=False)  # fmt: skip
    options.check()
    allocator = torch_allocator.locate(torch_version)
    workloads, skipped = load_snapshots(snapshots, accept_skipped=accept_skipped, strict=strict)
    inferred = None
    if device_memory_bytes is None:
        inferred = recorded_conditions(workloads, options.virtual_device(), allocator)
    limits: tuple[int | None, ...] = (None,)
    if inferred is not None:
        options = replace(options, repeats=inferred.passes)
        if inferred.kind == CAP:
            limits = inferred.ends
        else:
            options = replace(options, device_memory_bytes=inferred.lo_bytes)
    verdicts = [_verdict(workload, chosen.settings, options, limits) for workload in workloads]
    return AllocatorCheck(chosen.settings, options.virtual_device(), allocator.version,
                          allocator.describe(), verdicts, skipped, inferred,
                          release_notes(workloads, allocator.version), chosen.source)  # fmt: skip


def _chosen(
    settings: str | CheckedSettings | None, environ: Mapping[str, str] | None
) -> CheckedSettings:
    if isinstance(settings, CheckedSettings):
        return settings  # held to the grammar when chosen
    if settings is None:
        return settings_to_check(environ=environ)
    return CheckedSettings(check_alloc_conf(settings, parameter="settings"), "settings")


def _verdict(
    workload: Workload, settings: str, options: ReplayOptions, limits: tuple[int | None, ...]
) -> SnapshotVerdict:
    """The snapshot under `settings` at each limit (both ends of an inferred cap): refused
    at any, it is refused."""
    verdict = None
    for limit in limits:
        given = [*([f"limit={limit}"] if limit is not None else []),
                 *([f"settings={settings}"] if settings else [])]  # fmt: skip
        spec = parse_spec("torch" + (":" + ",".join(given) if given else ""))
        report = replay_log(workload.log, spec, options, program=workload.program)
        refused = report.failures[0] if report.failures else None
        frame = user_frame(entry_frames(refused.where)) if refused is not None else None
        verdict = SnapshotVerdict(workload.name, report.peak_requested_bytes,
                                  report.peak_reserved_bytes, refused, frame)  # fmt: skip
        if refused is not None:
            break
    assert verdict is not None  # limits is never empty
    return verdict
