"""One resource replayed with several releases of the allocator it runs, a report each:
`replay --torch 2.11,2.14` (PyTorch's allocator on the virtual GPU) and `replay --rmm
24.12,25.4` (RMM's resources there), each report named by its release."""

from __future__ import annotations

import dataclasses

from ..logs.events import AllocationLog
from .options import ReplayOptions
from .preflight import Targets
from .program import ReplayProgram
from .report import ReplayReport
from .resources import ResourceSpec
from .run import replay_log


def replay_releases(
    log: AllocationLog,
    spec: ResourceSpec,
    options: ReplayOptions,
    program: ReplayProgram,
    targets: Targets,
    torch_releases: list[str | None],
    rmm_releases: list[str | None],
) -> list[ReplayReport]:
    """One report, or with several releases of the spec's allocator one per release, named
    by it. `targets` is the preflight's (replay/engine/preflight.py)."""
    if len(rmm_releases) > 1 and spec.kind != "torch":
        reports = []
        for release in rmm_releases:
            chosen = dataclasses.replace(options, rmm_version=release)
            report = replay_log(log, spec, chosen, program, targets.of(spec, chosen))
            reports.append(dataclasses.replace(report, resource=f"{spec.label} ({report.engine})"))
        return reports
    if len(torch_releases) == 1 or spec not in targets.virtual_torch:
        return [replay_log(log, spec, options, program, targets.of(spec, options))]
    reports = []
    for release in torch_releases:
        chosen = dataclasses.replace(options, torch_version=release)
        report = replay_log(log, spec, chosen, program, targets.of(spec, chosen))
        name = report.engine.replace("torch ", "PyTorch ", 1)
        reports.append(dataclasses.replace(report, resource=f"{spec.label} ({name})"))
    return reports
