"""The device a size query is answered for: a known AMD product or arch, virtual or real.

rocBLAS reads the device's properties at handle creation; of those, only the arch name
(`gcnArchName`) and the compute-unit count change a workspace answer (they select the tuned
gemm kernels). The stand-in runtime (`sizing/worker/shim/virtual_hip.c`) reports the device chosen
here, through the `HIPMEM_VDEV_*` variables that `environment()` returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hipmem._core.close_names import closest, suggestion

from ..errors import UnknownDevice

GiB = 1 << 30


@dataclass(frozen=True)
class Arch:
    """An AMD GPU ISA as HIP reports it."""

    name: str  # e.g. gfx90a
    arch_features: str  # full gcnArchName, e.g. gfx90a:sramecc+:xnack-
    major: int
    minor: int
    warp_size: int


@dataclass(frozen=True)
class Device:
    """One device as a size query sees it."""

    name: str
    arch: Arch
    compute_units: int
    memory_bytes: int
    virtual: bool = True

    def environment(self) -> dict[str, str]:
        """Variables the stand-in runtime reads to describe this device."""
        return {
            "HIPMEM_VDEV_NAME": self.name,
            "HIPMEM_VDEV_ARCH": self.arch.arch_features,
            "HIPMEM_VDEV_MAJOR": str(self.arch.major),
            "HIPMEM_VDEV_MINOR": str(self.arch.minor),
            "HIPMEM_VDEV_CUS": str(self.compute_units),
            "HIPMEM_VDEV_MEM_BYTES": str(self.memory_bytes),
            "HIPMEM_VDEV_WARP": str(self.arch.warp_size),
        }

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "arch": self.arch.name,
            "gcn_arch_name": self.arch.arch_features,
            "compute_units": self.compute_units,
            "memory_bytes": self.memory_bytes,
            "virtual": self.virtual,
        }


def _arch(name: str, major: int, minor: int, features: str = "") -> Arch:
    # CDNA/GCN (gfx8, gfx9) run 64-wide wavefronts; RDNA (gfx10+) defaults to 32.
    return Arch(name, name + features, major, minor, 64 if major < 10 else 32)


_ECC = ":sramecc+:xnack-"
ARCHS: dict[str, Arch] = {
    arch.name: arch
    for arch in (
        _arch("gfx803", 8, 0),
        _arch("gfx900", 9, 0, ":xnack-"),
        _arch("gfx906", 9, 0, _ECC),
        _arch("gfx908", 9, 0, _ECC),
        _arch("gfx90a", 9, 0, _ECC),
        _arch("gfx940", 9, 4, _ECC),
        _arch("gfx941", 9, 4, _ECC),
        _arch("gfx942", 9, 4, _ECC),
        _arch("gfx950", 9, 5, _ECC),
        _arch("gfx1010", 10, 1, ":xnack-"),
        _arch("gfx1030", 10, 3),
        _arch("gfx1100", 11, 0),
        _arch("gfx1101", 11, 0),
        _arch("gfx1102", 11, 0),
        _arch("gfx1151", 11, 5),
        _arch("gfx1200", 12, 0),
        _arch("gfx1201", 12, 0),
    )
}

# Products: (name, arch, compute units, memory GiB) as one HIP device sees them. Multi-die
# boards (MI250/MI250X) appear to HIP as one device per die, so those figures are per die.
_PRODUCTS = (
    ("MI50", "gfx906", 60, 32),
    ("MI60", "gfx906", 64, 32),
    ("MI100", "gfx908", 120, 32),
    ("MI210", "gfx90a", 104, 64),
    ("MI250", "gfx90a", 104, 64),
    ("MI250X", "gfx90a", 110, 64),
    ("MI300A", "gfx942", 228, 128),
    ("MI300X", "gfx942", 304, 192),
    ("MI325X", "gfx942", 304, 256),
    ("MI350X", "gfx950", 256, 288),
    ("MI355X", "gfx950", 256, 288),
    ("Radeon VII", "gfx906", 60, 16),
    ("Radeon RX 6800 XT", "gfx1030", 72, 16),
    ("Radeon RX 6900 XT", "gfx1030", 80, 16),
    ("Radeon PRO W6800", "gfx1030", 60, 32),
    ("Radeon RX 7600", "gfx1102", 32, 8),
    ("Radeon RX 7800 XT", "gfx1101", 60, 16),
    ("Radeon RX 7900 XT", "gfx1100", 84, 20),
    ("Radeon RX 7900 XTX", "gfx1100", 96, 24),
    ("Radeon PRO W7900", "gfx1100", 96, 48),
    ("Radeon RX 9070 XT", "gfx1201", 64, 16),
)
PRODUCTS: dict[str, Device] = {
    name: Device(name, ARCHS[arch], cus, gib * GiB) for name, arch, cus, gib in _PRODUCTS
}

# An arch given alone is sized as its first product above, or with these defaults.
_ARCH_DEFAULT_CUS = 60
_ARCH_DEFAULT_MEMORY = 16 * GiB


def _key(text: str) -> str:
    """'Radeon RX 7900 XTX', 'rx7900xtx', 'mi-300x' -> comparable keys."""
    return re.sub(r"[^a-z0-9]", "", text.lower()).removeprefix("amd").removeprefix("instinct")


def _product_keys() -> dict[str, Device]:
    keys = {}
    for name, device in PRODUCTS.items():
        keys[_key(name)] = device
        keys[_key(name.removeprefix("Radeon "))] = device
    return keys


def resolve(name: str, compute_units: int | None = None) -> Device:
    """A device from an arch (`gfx90a`) or product name (`MI210`); `compute_units` overrides."""
    key = _key(name)
    products = _product_keys()
    if key in products:
        device = products[key]
    elif key in ARCHS:
        device = _device_for_arch(ARCHS[key])
    else:
        raise UnknownDevice(_unknown_message(name, products))
    if compute_units is not None:
        if compute_units <= 0:
            raise UnknownDevice(
                "must be a positive number of compute units",
                parameter="compute_units",
                value=compute_units,
            )
        device = replace(device, compute_units=compute_units)
    return device


def _device_for_arch(arch: Arch) -> Device:
    for device in PRODUCTS.values():
        if device.arch == arch:
            return replace(device, name=arch.name)
    return Device(arch.name, arch, _ARCH_DEFAULT_CUS, _ARCH_DEFAULT_MEMORY)


def _unknown_message(name: str, products: dict[str, Device]) -> str:
    candidates = [*ARCHS, *PRODUCTS]
    close = closest(name, candidates, n=4, cutoff=0.5)
    close += [d.name for k, d in products.items() if _key(name) in k and d.name not in close]
    hint = suggestion(close[:4])
    return f"unknown device '{name}'{hint} (`hipmem devices` lists them)"
