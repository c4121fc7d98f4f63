"""How size, recommend, check and routines say what a ROCm release does: the fetches of
what the cache lacks (`on_demand`, unless `--offline` or `HIPMEM_OFFLINE=1`: one line on
stderr before each download, a progress bar on a terminal, nothing on stdout), and the
release an answer was sized with. Which release answers: sizing/rocm/choice.py."""

from __future__ import annotations

from ..sizing.rocm.locator import Libraries
from ..sizing.rocm.on_demand import OnDemand, offline_reason
from ..sizing.worker.virtual_device import Device
from . import output


def on_demand(offline: bool, device: Device) -> OnDemand:
    """How this command fetches what the cache lacks: for the device's arch (chosen before,
    so that an unknown device or a missing GPU is said before any download), announced on
    stderr, with a bar on a terminal; or, offline, not at all."""
    offline_by = offline_reason(offline)
    return OnDemand(
        arch=device.arch.name,
        offline_by=offline_by,
        announce=output.info,
        progress=lambda title: output.progress(title, transfer=True),
        notice=output.warning,
    )


def release_line(libraries: Libraries, versions: dict[str, str]) -> str:
    """`ROCm 7.2 (rocblas 5.2.0, rocsolver 3.32.0) from the offline cache ...`"""
    named = ", ".join(f"{name} {version}" for name, version in versions.items())
    return f"ROCm {libraries.rocm or '(unknown release)'} ({named}) from {libraries.place}"
