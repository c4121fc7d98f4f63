"""`hipmem devices`: the devices a size query can be answered for."""

from __future__ import annotations

import typer

from hipmem_cli import output
from hipmem_cli.options import JsonOption
from sizing.real_devices import real_devices
from sizing.virtual_device import ARCHS, PRODUCTS


def devices(json: JsonOption = False) -> None:
    """List real AMD GPUs here (through hip-python) and the virtual devices hipmem knows."""
    real, reason = real_devices()
    virtual = list(PRODUCTS.values())
    if json:
        output.print_json(
            {
                "real": [device.as_dict() for device in real],
                "real_unavailable_reason": reason or None,
                "virtual": [device.as_dict() for device in virtual],
                "archs": sorted(ARCHS),
            }
        )
        return
    table = output.Table(
        "Devices (--device NAME)",
        ["name", "arch", "CUs", "memory", "kind"],
        right=("CUs", "memory"),
    )
    for device in [*real, *virtual]:
        table.add_row(
            device.name,
            device.arch.name,
            str(device.compute_units),
            output.human_bytes(device.memory_bytes),
            "virtual" if device.virtual else "real",
        )
    output.print_table(table)
    output.line(f"archs: {', '.join(sorted(ARCHS))} (with --cus to set the CU count)")
    if not real:
        output.note(f"no real AMD GPU: {reason}")


EPILOG = """\b
Examples:
  hipmem devices
  hipmem devices --json

Exit codes: 0 listed; 130 interrupted.
"""


def register(app: typer.Typer) -> None:
    app.command("devices", epilog=EPILOG)(devices)
