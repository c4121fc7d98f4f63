"""The GPUs a virtual replay can stand for: memory as the driver reports it, and granularity.

PyTorch's allocator sees two things of a device: its memory (`cudaMemGetInfo`'s total, which
is `totalGlobalMem`) and, with expandable segments, the allocation granularity. It maps
memory in 2 MiB (small pool) and 20 MiB (large pool) pages, so any granularity of 2 MiB or
less gives the same answers (checked with 4 KiB, 64 KiB and 2 MiB on the committed
snapshots); the figure is kept per device for the day a device reports more.

Memory is what the driver reports where it was measured (`source` says where); elsewhere it
is the capacity the vendor publishes, which the driver reports a little less of (the H100's
"80 GB" is 85,017,493,504 bytes, 79.2 GiB). Neither counts what a real device keeps for its
CUDA/HIP context and libraries when a program runs (several hundred MiB, more with cuBLAS
workspaces): the virtual GPU gives all of its memory to the allocator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipmem._core.byte_sizes import GiB, MiB
from hipmem._core.close_names import did_you_mean

from ..errors import ReplayUsageError

MEASURED_H100 = "measured on the lent H100 (torch.cuda.mem_get_info, driver 580.159.04)"
MEASURED_H200 = "measured on the lent H200 (torch.cuda.mem_get_info, driver 580.159.04)"
NVIDIA_GRANULARITY = "cuMemGetAllocationGranularity on the lent H100 and H200: 2 MiB"
AMD_GRANULARITY = "not measured (no AMD GPU): 2 MiB, which answers as any granularity up to 2 MiB"


@dataclass(frozen=True)
class DevicePreset:
    """One GPU (one GCD for multi-die boards) as PyTorch's allocator sees it."""

    name: str
    memory_bytes: int
    granularity_bytes: int
    memory_source: str
    granularity_source: str

    def environment(self) -> dict[str, str]:
        """What the stand-in runtime (virtual_cuda.c) reads to be this device."""
        return {
            "HIPMEM_VCUDA_NAME": self.name,
            "HIPMEM_VCUDA_MEMORY_BYTES": str(self.memory_bytes),
            "HIPMEM_VCUDA_GRANULARITY_BYTES": str(self.granularity_bytes),
        }

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "granularity_bytes": self.granularity_bytes,
            "memory_source": self.memory_source,
            "granularity_source": self.granularity_source,
        }


def _amd(name: str, gib: int, what: str) -> DevicePreset:
    return DevicePreset(name, gib * GiB, 2 * MiB, f"AMD's published capacity: {what}",
                        AMD_GRANULARITY)  # fmt: skip


def _nvidia(name: str, memory_bytes: int, source: str) -> DevicePreset:
    return DevicePreset(name, memory_bytes, 2 * MiB, source, NVIDIA_GRANULARITY)


PRESETS: dict[str, DevicePreset] = {
    p.name: p
    for p in (
        _amd("MI300X", 192, "192 GB HBM3 (AMD Instinct MI300X data sheet)"),
        _amd("MI325X", 256, "256 GB HBM3E (AMD Instinct MI325X data sheet)"),
        _amd("MI355X", 288, "288 GB HBM3E (AMD Instinct MI355X data sheet)"),
        _amd("MI250X", 64, "128 GB HBM2e per OAM, two GCDs; one GCD is one device"),
        _amd("MI210", 64, "64 GB HBM2e (AMD Instinct MI210 data sheet)"),
        _nvidia("H100", 85_017_493_504, f"H100 80GB HBM3, {MEASURED_H100}"),
        _nvidia("H200", 150_109_880_320, f"H200 141GB HBM3e, {MEASURED_H200}"),
        _nvidia("A100-40GB", 40 * GiB, "NVIDIA's published capacity: 40 GB HBM2 (not measured)"),
        _nvidia("A100-80GB", 80 * GiB, "NVIDIA's published capacity: 80 GB HBM2e (not measured)"),
    )
}
DEFAULT = "MI300X"


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower()).removeprefix("amd").removeprefix("nvidia")


def find_preset(name: str) -> DevicePreset:
    """`MI300X`, `mi300x`, `H100`, `a100-80gb` -> the preset; a usage error names them all."""
    keys = {_key(p.name): p for p in PRESETS.values()}
    found = keys.get(_key(name))
    if found is not None:
        return found
    hint = did_you_mean(name.upper(), PRESETS, n=2, cutoff=0.5)
    raise ReplayUsageError(
        f"not a device hipmem knows{hint} (known: {', '.join(PRESETS)}; or give "
        "--device-memory SIZE)",
        parameter="device",
        value=name,
    )


def custom_device(memory_bytes: int, granularity_bytes: int = 2 * MiB) -> DevicePreset:
    """A device of a given memory size (`--device-memory`)."""
    if memory_bytes < 2 * MiB:
        raise ReplayUsageError(
            "a virtual GPU needs at least 2 MiB", parameter="device_memory", value=memory_bytes
        )
    return DevicePreset(
        f"GPU of {memory_bytes:,} bytes", memory_bytes, granularity_bytes, "given", "2 MiB"
    )
