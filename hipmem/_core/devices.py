"""The one table of GPUs: every device `--device` names, for sizing and for replay alike.

Words: a **device** is an entry of this table (a GPU by name: `MI300X`, `H200`); the
**virtual GPU** is the stand-in runtime that plays one (sizing's stand-in HIP runtime,
`sizing/worker/shim/virtual_hip.c`; replay's stand-in CUDA runtime,
`replay/virtual/vcuda/virtual_cuda.c`). Each part takes what it needs of an entry: sizing
the arch and compute units (`sizing/worker/virtual_device.py`: only AMD archs, the ones
rocBLAS and rocSOLVER answer for), replay the memory and the allocation granularity
(`replay/virtual/devices.py`: any device, since PyTorch's allocator and RMM's resources see
only those two).

Figures: one HIP device per entry, so multi-die boards (MI250, MI250X) are one die. Compute
units (SMs for NVIDIA) and memory are the vendor's published specifications, except where
`memory_source` says the driver was measured: a driver reports a little less than the
published capacity (the H100's "80 GB" is 85,017,493,504 bytes, 79.2 GiB). Neither counts what
a real device keeps for its context and libraries when a program runs (several hundred MiB).

Granularity is the allocation granularity expandable segments map in. PyTorch maps 2 MiB and
20 MiB pages, so any granularity of 2 MiB or less gives the same answers (checked with 4 KiB,
64 KiB and 2 MiB on the committed snapshots); the figure is kept per device for the day a
device reports more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipmem._core.byte_sizes import GiB, MiB
from hipmem._core.close_names import closest

AMD, NVIDIA = "AMD", "NVIDIA"
MEASURED_H100 = "measured on the lent H100 (torch.cuda.mem_get_info, driver 580.159.04)"
MEASURED_H200 = "measured on the lent H200 (torch.cuda.mem_get_info, driver 580.159.04)"
NVIDIA_GRANULARITY = "cuMemGetAllocationGranularity on the lent H100 and H200: 2 MiB"
AMD_GRANULARITY = "not measured (no AMD GPU): 2 MiB, which answers as any granularity up to 2 MiB"
DEFAULT_GRANULARITY_BYTES = 2 * MiB


@dataclass(frozen=True)
class Device:
    """One GPU (one die of a multi-die board) of the table, or one given by its memory."""

    name: str
    vendor: str  # AMD or NVIDIA; "" for a GPU given by its memory alone
    arch: str  # gfx90a, sm_90; "" when not known
    compute_units: int  # CUs (AMD), SMs (NVIDIA); 0 when not known
    memory_bytes: int
    granularity_bytes: int
    memory_source: str
    granularity_source: str

    def as_dict(self) -> dict[str, object]:
        """Memory and granularity with their sources (what a replay's device is)."""
        return {
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "granularity_bytes": self.granularity_bytes,
            "memory_source": self.memory_source,
            "granularity_source": self.granularity_source,
        }


def _amd(name: str, arch: str, cus: int, gib: int, source: str = "") -> Device:
    what = source or f"{gib} GB"
    return Device(name, AMD, arch, cus, gib * GiB, DEFAULT_GRANULARITY_BYTES,
                  f"AMD's published capacity: {what}", AMD_GRANULARITY)  # fmt: skip


def _nvidia(name: str, arch: str, sms: int, memory_bytes: int, source: str) -> Device:
    return Device(name, NVIDIA, arch, sms, memory_bytes, DEFAULT_GRANULARITY_BYTES, source,
                  NVIDIA_GRANULARITY)  # fmt: skip


_PER_GCD = "128 GB HBM2e per OAM, two GCDs; one GCD is one device"
DEVICES: dict[str, Device] = {
    device.name: device
    for device in (
        _amd("MI50", "gfx906", 60, 32),
        _amd("MI60", "gfx906", 64, 32),
        _amd("MI100", "gfx908", 120, 32),
        _amd("MI210", "gfx90a", 104, 64, "64 GB HBM2e (AMD Instinct MI210 data sheet)"),
        _amd("MI250", "gfx90a", 104, 64, _PER_GCD),
        _amd("MI250X", "gfx90a", 110, 64, _PER_GCD),
        _amd("MI300A", "gfx942", 228, 128),
        _amd("MI300X", "gfx942", 304, 192, "192 GB HBM3 (AMD Instinct MI300X data sheet)"),
        _amd("MI325X", "gfx942", 304, 256, "256 GB HBM3E (AMD Instinct MI325X data sheet)"),
        _amd("MI350X", "gfx950", 256, 288),
        _amd("MI355X", "gfx950", 256, 288, "288 GB HBM3E (AMD Instinct MI355X data sheet)"),
        _amd("Radeon VII", "gfx906", 60, 16),
        _amd("Radeon RX 6800 XT", "gfx1030", 72, 16),
        _amd("Radeon RX 6900 XT", "gfx1030", 80, 16),
        _amd("Radeon PRO W6800", "gfx1030", 60, 32),
        _amd("Radeon RX 7600", "gfx1102", 32, 8),
        _amd("Radeon RX 7800 XT", "gfx1101", 60, 16),
        _amd("Radeon RX 7900 XT", "gfx1100", 84, 20),
        _amd("Radeon RX 7900 XTX", "gfx1100", 96, 24),
        _amd("Radeon PRO W7900", "gfx1100", 96, 48),
        _amd("Radeon RX 9070 XT", "gfx1201", 64, 16),
        _nvidia("H100", "sm_90", 132, 85_017_493_504, f"H100 80GB HBM3, {MEASURED_H100}"),
        _nvidia("H200", "sm_90", 132, 150_109_880_320, f"H200 141GB HBM3e, {MEASURED_H200}"),
        _nvidia("A100-40GB", "sm_80", 108, 40 * GiB,
                "NVIDIA's published capacity: 40 GB HBM2 (not measured)"),
        _nvidia("A100-80GB", "sm_80", 108, 80 * GiB,
                "NVIDIA's published capacity: 80 GB HBM2e (not measured)"),
    )
}  # fmt: skip


def name_key(text: str) -> str:
    """'Radeon RX 7900 XTX', 'rx7900xtx', 'mi-300x', 'nvidia h100' -> comparable keys."""
    key = re.sub(r"[^a-z0-9]", "", text.lower())
    for prefix in ("amd", "instinct", "nvidia", "radeon"):
        key = key.removeprefix(prefix)
    return key


def find_device(name: str) -> Device | None:
    """The table's device that `name` names (case, spaces, dashes and the vendor's prefixes
    do not matter), or None."""
    key = name_key(name)
    return next((d for d in DEVICES.values() if name_key(d.name) == key), None)


def close_devices(name: str, *, n: int = 4) -> list[str]:
    """The devices' names most like `name`, best first (for a "did you mean")."""
    close = closest(name.upper(), {d.name.upper(): None for d in DEVICES.values()}, n=n,
                    cutoff=0.5)  # fmt: skip
    by_upper = {d.name.upper(): d.name for d in DEVICES.values()}
    found = [by_upper[c] for c in close]
    key = name_key(name)
    found += [d.name for d in DEVICES.values() if key and key in name_key(d.name)]
    return list(dict.fromkeys(found))[:n]
