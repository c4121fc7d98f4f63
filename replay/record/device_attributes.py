"""The device attributes a recording's stand-in runtime answers (`cudaDeviceGetAttribute`, and
the device properties made of them), for the device played.

They were measured on the GPUs themselves (every attribute `cuDeviceGetAttribute` answered,
1 to 250): an H100 SXM (csrc/h100_attributes.json) and an H200 (csrc/h200_attributes.json,
driver 580.159, 2026-11-29). They differ in the L2 cache (50 and 60 MiB), the memory clock and
bus and the PCI ids, and torch.compile reads them: its benchmarks flush the L2 with a buffer
of the L2's size, allocated through the caching allocator. Any other device is played with an
H100's attributes and its own memory.
"""

from __future__ import annotations

import json
from pathlib import Path

from hipmem._core.devices import Device

SOURCES = Path(__file__).parent / "csrc"
MEASURED = {"H100": SOURCES / "h100_attributes.json", "H200": SOURCES / "h200_attributes.json"}
FALLBACK = "H100"  # the attributes of a device that was not measured


def measured_on(device: Device) -> str:
    """The GPU whose measured attributes `device` is played with."""
    return device.name if device.name in MEASURED else FALLBACK


def attributes(device: Device) -> dict[int, int]:
    """Attribute number -> value, as the GPU that `measured_on` names answered them."""
    table = json.loads(MEASURED[measured_on(device)].read_text())["attributes"]
    return {int(which): int(value) for which, value in table.items()}


def environment(device: Device) -> dict[str, str]:
    """What the stand-in runtime reads (csrc/record_runtime.c)."""
    pairs = sorted(attributes(device).items())
    return {"HIPMEM_RECORD_ATTRIBUTES": ",".join(f"{which}={value}" for which, value in pairs)}
