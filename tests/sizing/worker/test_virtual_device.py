"""Device names: archs, products, spellings and the variables the stand-in runtime reads."""

from __future__ import annotations

import pytest

from hipmem.sizing.errors import UnknownDevice
from hipmem.sizing.worker.virtual_device import GiB, resolve


@pytest.mark.parametrize(
    ("name", "arch", "cus", "memory_gib"),
    [
        ("MI210", "gfx90a", 104, 64),
        ("mi-300x", "gfx942", 304, 192),
        ("AMD Instinct MI325X", "gfx942", 304, 256),
        ("MI355X", "gfx950", 256, 288),
        ("Radeon RX 7900 XTX", "gfx1100", 96, 24),
        ("rx7900xtx", "gfx1100", 96, 24),
        ("gfx908", "gfx908", 120, 32),
    ],
)
def test_names_resolve(name: str, arch: str, cus: int, memory_gib: int) -> None:
    device = resolve(name)
    assert (device.arch.name, device.compute_units, device.memory_bytes) == (
        arch, cus, memory_gib * GiB,
    )  # fmt: skip


def test_compute_units_override_and_environment() -> None:
    device = resolve("gfx942", compute_units=80)
    env = device.environment()
    assert env["HIPMEM_VDEV_CUS"] == "80"
    assert env["HIPMEM_VDEV_ARCH"] == "gfx942:sramecc+:xnack-"
    assert (env["HIPMEM_VDEV_MAJOR"], env["HIPMEM_VDEV_MINOR"]) == ("9", "4")
    assert resolve("gfx1100").arch.warp_size == 32 and resolve("gfx90a").arch.warp_size == 64


def test_unknown_names_suggest_close_ones() -> None:
    with pytest.raises(UnknownDevice, match=r"did you mean .*gfx90a"):
        resolve("gfx90")
    with pytest.raises(UnknownDevice, match="compute_units=0: must be a positive"):
        resolve("MI210", compute_units=0)
