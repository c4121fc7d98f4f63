"""`hipmem devices`: hipmem's one table of devices, and the real AMD GPUs here."""

from __future__ import annotations

import typer

from hipmem._core.devices import AMD, DEVICES

from ..sizing.rocm.fetch import cached_archs
from ..sizing.rocm.releases import RELEASES
from ..sizing.worker.real_devices import real_devices
from ..sizing.worker.virtual_device import ARCHS, PRODUCTS
from . import output
from .options import JsonOption


def gemm_data() -> dict[str, dict[str, list[str] | None]]:
    """Per release: the archs it has gemm (Tensile) data for, and those fetched (None when
    the release is not in the cache). f16/bf16 gemm_ex cannot be sized on the others."""
    return {
        release.name: {"archs": list(release.gemm_archs), "fetched": cached_archs(release.name)}
        for release in RELEASES
    }


def _gemm_mark(arch: str, data: dict[str, list[str] | None]) -> str:
    if arch not in (data["archs"] or []):
        return "none"
    fetched = data["fetched"]
    return "fetched" if fetched is not None and arch in fetched else "not fetched"


def devices(json: JsonOption = False) -> None:
    """List real AMD GPUs here (through hip-python) and the devices a virtual GPU can play."""
    real, reason = real_devices()
    virtual = list(PRODUCTS.values())
    replay_only = [device for device in DEVICES.values() if device.vendor != AMD]
    if json:
        output.print_json(
            {
                "real": [device.as_dict() for device in real],
                "real_unavailable_reason": reason or None,
                "virtual": [device.as_dict() for device in virtual],
                "replay_only": [
                    {
                        **d.as_dict(),
                        "vendor": d.vendor,
                        "arch": d.arch,
                        "compute_units": d.compute_units,
                    }
                    for d in replay_only
                ],
                "archs": sorted(ARCHS),
                "gemm_data": gemm_data(),
            }
        )
        return
    data = gemm_data()
    table = output.Table(
        "Devices (--device NAME)",
        ["name", "arch", "CUs", "memory", "kind", *(f"gemm data {name}" for name in data)],
        right=("CUs", "memory"),
    )
    for device in [*real, *virtual]:
        table.add_row(
            device.name,
            device.arch.name,
            str(device.compute_units),
            output.human_bytes(device.memory_bytes),
            "virtual" if device.virtual else "real",
            *(_gemm_mark(device.arch.name, per_release) for per_release in data.values()),
        )
    for other in replay_only:  # the virtual GPU of a replay plays them; rocBLAS does not
        table.add_row(other.name, other.arch, str(other.compute_units),
                      output.human_bytes(other.memory_bytes), "replay",
                      *("none" for _ in data))  # fmt: skip
    output.print_table(table)
    output.line(
        "gemm data: whether the ROCm release has tuned gemm data for the arch (needed to size "
        "f16/bf16 gemm_ex) and whether `hipmem rocm fetch --rocm R --arch A` fetched it"
    )
    output.line(f"archs: {', '.join(sorted(ARCHS))} (with --cus to set the CU count)")
    output.line(
        "kind replay: NVIDIA devices (CUs: their SMs), which a replay's virtual GPU plays; "
        "sizing answers for AMD devices and archs"
    )
    if not real:
        output.note(f"no real AMD GPU: {reason}")


EPILOG = """\b
Examples:
  hipmem devices
  hipmem devices --json

Exit codes: 0 listed; 130 interrupted.

Docs: hipmem docs devices
"""


def register(app: typer.Typer) -> None:
    app.command("devices", epilog=EPILOG)(devices)
