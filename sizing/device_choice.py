"""Which device a sizing command answers for: the one named (`--device MI210`, an arch, or a
Device already chosen), else the first real AMD GPU here. A command chooses once and hands
the Device on (to the fetch on first use, the session, hipBLASLt's heuristics)."""

from __future__ import annotations

from .errors import NoGpu
from .worker.virtual_device import Device, resolve


def choose_device(device: str | Device | None, compute_units: int | None = None) -> Device:
    """The device named, or this machine's first GPU; NoGpu when none is named or here."""
    if isinstance(device, Device):
        return device
    if device is not None:
        return resolve(device, compute_units)
    from .worker.real_devices import real_devices  # hip-python: only when no device is named

    found, reason = real_devices()
    if not found:
        raise NoGpu(
            f"no AMD GPU here ({reason}); name a virtual one, e.g. MI300X "
            "(`hipmem devices` lists them)",
            parameter="device",
        )
    return found[0]
