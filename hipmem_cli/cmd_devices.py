"""`hipmem devices`: the devices a size query can be answered for."""

from __future__ import annotations

import typer
from rich.table import Table

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
    table = Table(title="Devices (--device NAME)", title_justify="left")
    for column in ("name", "arch", "CUs", "memory", "kind"):
        table.add_column(column, justify="right" if column in ("CUs", "memory") else "left")
    for device in [*real, *virtual]:
        table.add_row(
            device.name,
            device.arch.name,
            str(device.compute_units),
            output.human_bytes(device.memory_bytes),
            "virtual" if device.virtual else "real",
        )
    output.stdout.print(table)
    output.stdout.print(f"archs: {', '.join(sorted(ARCHS))} (with --cus to set the CU count)")
    if not real:
        output.stdout.print(f"[dim]no real AMD GPU: {reason}[/dim]")


def register(app: typer.Typer) -> None:
    app.command("devices")(devices)
