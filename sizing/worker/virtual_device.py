"""The device a size query is answered for: an AMD device of the table, an arch, or a real GPU.

rocBLAS reads the device's properties at handle creation; of those, only the arch name
(`gcnArchName`) and the compute-unit count change a workspace answer (they select the tuned
gemm kernels). The stand-in runtime (`sizing/worker/shim/virtual_hip.c`) reports the device chosen
here, through the `HIPMEM_VDEV_*` variables that `environment()` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hipmem._core.close_names import closest, suggestion
from hipmem._core.devices import AMD, DEVICES, find_device, name_key
from hipmem._core.errors import shown_value

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

# The products are the AMD devices of hipmem's one table (hipmem/_core/devices.py), as one
# HIP device sees them; its NVIDIA devices are for replay only (no rocBLAS answers for them).
PRODUCTS: dict[str, Device] = {
    d.name: Device(d.name, ARCHS[d.arch], d.compute_units, d.memory_bytes)
    for d in DEVICES.values()
    if d.vendor == AMD
}

# An arch given alone is sized as its first product above, or with these defaults.
_ARCH_DEFAULT_CUS = 60
_ARCH_DEFAULT_MEMORY = 16 * GiB


def resolve(name: str, compute_units: int | None = None) -> Device:
    """A device from an arch (`gfx90a`) or product name (`MI210`); `compute_units` overrides."""
    entry = find_device(name)
    key = name_key(name)
    if entry is not None and entry.name in PRODUCTS:
        device = PRODUCTS[entry.name]
    elif key in ARCHS:
        device = _device_for_arch(ARCHS[key])
    elif entry is not None:  # a device of the table that is not AMD's
        raise UnknownDevice(
            f"{entry.name} is an {entry.vendor} GPU: sizing answers for AMD devices and archs "
            "only (rocBLAS and rocSOLVER on a virtual HIP GPU); replay runs on any device "
            "(`hipmem devices` lists them)"
        )
    else:
        raise UnknownDevice(_unknown_message(name))
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


def _unknown_message(name: str) -> str:
    candidates = [*ARCHS, *PRODUCTS]
    close = closest(name, candidates, n=4, cutoff=0.5)
    key = name_key(name)
    close += [p for p in PRODUCTS if key in name_key(p) and p not in close]
    hint = suggestion(close[:4])
    return f"unknown device {shown_value(name)}{hint} (`hipmem devices` lists them)"
