"""Real AMD GPUs on this machine, read through hip-python (which loads libamdhip64)."""

from __future__ import annotations

from .virtual_device import ARCHS, Arch, Device


def real_devices() -> tuple[list[Device], str]:
    """The HIP devices here, and a reason when there are none."""
    try:
        from hip import hip
    except ImportError:
        return [], "hip-python is not installed"
    try:
        error, count = hip.hipGetDeviceCount()
    except RuntimeError:
        return [], "no HIP runtime (libamdhip64) on this machine"
    if error != hip.hipError_t.hipSuccess or count == 0:
        return [], "the HIP runtime reports no device"
    return [_device(hip, index) for index in range(count)], ""


def _device(hip: object, index: int) -> Device:
    props = hip.hipDeviceProp_t()  # type: ignore[attr-defined]
    hip.hipGetDeviceProperties(props, index)  # type: ignore[attr-defined]
    arch_features = (
        props.gcnArchName.decode()
        if isinstance(props.gcnArchName, bytes)
        else str(props.gcnArchName)
    )
    base = arch_features.split(":")[0]
    known = ARCHS.get(base)
    arch = Arch(
        base,
        arch_features,
        props.major,
        props.minor,
        props.warpSize if props.warpSize else (known.warp_size if known else 64),
    )
    name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
    return Device(
        name=f"{name} (device {index})",
        arch=arch,
        compute_units=props.multiProcessorCount,
        memory_bytes=props.totalGlobalMem,
        virtual=False,
    )
