"""The device a replay's virtual GPU plays: any device of hipmem's one table, or a memory size.

PyTorch's allocator sees two things of a device: its memory (`cudaMemGetInfo`'s total, which
is `totalGlobalMem`) and, with expandable segments, the allocation granularity; RMM's
resources see the memory alone. So every device of the table (hipmem/_core/devices.py, which
says where each figure is from) can be played, AMD's and NVIDIA's alike. Neither figure counts
what a real device keeps for its CUDA/HIP context and libraries when a program runs (several
hundred MiB, more with cuBLAS workspaces): the virtual GPU gives all of its memory to the
allocator.
"""

from __future__ import annotations

from hipmem._core.byte_sizes import MiB
from hipmem._core.close_names import suggestion
from hipmem._core.devices import DEFAULT_GRANULARITY_BYTES, DEVICES, Device, close_devices
from hipmem._core.devices import find_device as _find_in_table

from ..errors import ReplayUsageError

DEFAULT_DEVICE = "MI300X"
# The devices a fits table replays on (`replay --fits`, `hipmem torch devices`): the data
# centre GPUs a replay is most often asked about. Every device of the table can be named.
FITS_DEVICES: dict[str, Device] = {
    name: DEVICES[name]
    for name in ("MI300X", "MI325X", "MI355X", "MI250X", "MI210", "H100", "H200", "A100-40GB",
                 "A100-80GB")
}  # fmt: skip


def environment(device: Device) -> dict[str, str]:
    """What the stand-in runtime (virtual_cuda.c) reads to play this device."""
    return {
        "HIPMEM_VCUDA_NAME": device.name,
        "HIPMEM_VCUDA_MEMORY_BYTES": str(device.memory_bytes),
        "HIPMEM_VCUDA_GRANULARITY_BYTES": str(device.granularity_bytes),
    }


def find_device(name: str) -> Device:
    """`MI300X`, `mi300x`, `H100`, `a100-80gb`, `Radeon RX 7900 XTX` -> the device; a usage
    error names the closest."""
    found = _find_in_table(name)
    if found is not None:
        return found
    raise ReplayUsageError(
        f"not a device hipmem knows{suggestion(close_devices(name, n=2))} (`hipmem devices` "
        "lists them; or give --device-memory SIZE)",
        parameter="device",
        value=name,
    )


def custom_device(memory_bytes: int, granularity_bytes: int = DEFAULT_GRANULARITY_BYTES) -> Device:
    """A device of a given memory size (`--device-memory`)."""
    if memory_bytes < 2 * MiB:
        raise ReplayUsageError(
            "a virtual GPU needs at least 2 MiB", parameter="device_memory", value=memory_bytes
        )
    return Device(f"GPU of {memory_bytes:,} bytes", "", "", 0, memory_bytes, granularity_bytes,
                  "given", "2 MiB")  # fmt: skip
