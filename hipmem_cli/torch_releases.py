"""`replay --torch 2.11,2.14`: the same resources replayed with several PyTorch releases' allocators
on the virtual GPU, a column each; and the line that says a snapshot does not name its release."""

from __future__ import annotations

import dataclasses
import os

from ..replay.engine.program import ReplayProgram
from ..replay.engine.report import ReplayReport
from ..replay.engine.resources import ResourceSpec
from ..replay.engine.run import ReplayOptions, replay
from ..replay.errors import ReplayUsageError
from ..replay.logs.events import AllocationLog
from ..replay.pytorch.allocator import TORCH_ENV
from ..replay.pytorch.fetch import fetched_versions
from . import output


def split_releases(torch: str | None, capacity: bool) -> list[str | None]:
    """`2.11,2.14` -> ["2.11", "2.14"]; none given -> [None] (the search order decides)."""
    releases: list[str | None] = [n.strip() for n in (torch or "").split(",") if n.strip()]
    if len(releases) > 1 and capacity:
        raise ReplayUsageError("--find-capacity searches with one PyTorch: give one --torch")
    return releases or [None]


def replay_spec(
    log: AllocationLog,
    spec: ResourceSpec,
    options: ReplayOptions,
    program: ReplayProgram,
    releases: list[str | None],
    virtual: list[ResourceSpec],
) -> list[ReplayReport]:
    """One report, or with several releases one per release, named by it."""
    if len(releases) == 1 or spec not in virtual:
        return [replay(log, spec, options, program=program)]
    reports = []
    for release in releases:
        report = replay(log, spec, dataclasses.replace(options, torch_version=release),
                        program=program)  # fmt: skip
        name = report.engine.replace("torch ", "PyTorch ", 1)
        reports.append(dataclasses.replace(report, resource=f"{spec.label} ({name})"))
    return reports


def say_recording_release(torch: str | None, virtual: list[ResourceSpec]) -> None:
    """A snapshot does not record the PyTorch that wrote it: `settings=recorded` reproduces its
    settings, and the release is the user's to name (unless it was)."""
    if torch is not None or os.environ.get(TORCH_ENV):
        return
    if any(spec.options.get("settings") == "recorded" for spec in virtual):
        output.note(
            "the snapshot does not say which PyTorch recorded it: give that release with "
            "--torch VERSION (fetched: " + (", ".join(fetched_versions()) or "none") + ")"
        )
