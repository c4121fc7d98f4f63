"""Which memory a replay runs on (cuda, hip, host, virtual): `resolve_backend`.

- cuda: NVIDIA through the native core (nvcc + RMM's librmm; see replay/engine/native.py);
  the GPU is found through cuda-bindings (or the driver library when cuda-bindings is absent).
- hip: AMD through hip-python (hipMalloc, hipMallocManaged, hipMallocAsync, hipHostMalloc)
  and hipMM's `rmm.mr` for pool/arena/binning/fixed. Written to mirror the cuda path call for
  call; it has not been measured on an AMD GPU (none was available).
- virtual: no GPU at all: PyTorch's own caching allocator (replay/virtual/gpu.py) or RMM's
  own resources (replay/rmm/virtual.py: pool, arena, binning, fixed, cuda) on hipmem's
  virtual GPU. `auto` picks it when no GPU (or for torch, no CUDA PyTorch to drive one) is
  here.
- host: host memory. `host` replays through the native core's host build (or a Python loop
  when no C++ compiler exists), so CI exercises the same replay loop with no GPU.

The Python loop's allocators are in replay/engine/python_allocators.py.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from ..errors import ReplayError, ReplayUsageError
from .resources import ResourceSpec

BACKENDS = ("auto", "cuda", "hip", "host", "virtual")


class BackendUnavailable(ReplayError):
    """The chosen backend cannot run here (the message says what is missing and how to get it)."""


@dataclass(frozen=True)
class Backend:
    """A resolved backend: its name and the device it replays on."""

    name: str  # cuda, hip, host, torch (PyTorch's own allocator on a GPU), or virtual
    device: int = 0


def is_host_spec(spec: ResourceSpec) -> bool:
    """Plain host memory needs no GPU at all."""
    return spec.kind == "host" and not spec.options.get("pinned")


def _null_backend(requested: str, device: int) -> Backend:
    """The null resource runs in the native core: the cuda build on a GPU, else the host one."""
    if requested == "hip":
        raise ReplayUsageError(
            "the null resource runs in the native replay core (backends host and cuda), "
            "which has no hip build yet",
            parameter="backend",
            value="hip",
        )
    if requested == "host":
        return Backend("host")
    count, why = cuda_device_count()
    if count > device:
        return Backend("cuda", device)
    if requested == "cuda":
        raise BackendUnavailable(f"the cuda backend found no GPU {device}: {why or 'none'}")
    return Backend("host")


def cuda_device_count() -> tuple[int, str]:
    """(count, why-none) for NVIDIA GPUs; cuda-bindings first, then the driver library."""
    try:
        from cuda.bindings import runtime

        err, count = runtime.cudaGetDeviceCount()
        if int(err) != 0:
            return 0, f"cudaGetDeviceCount returned {err.name}"
        return int(count), ""
    except ImportError:
        pass
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, "no NVIDIA driver (libcuda.so.1 not found)"
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0, "the NVIDIA driver reports no usable GPU"
    return count.value, ""


def hip_module() -> Any:
    """hip-python's `hip` module; missing: BackendUnavailable with the way to get it."""
    try:
        from hip import hip
    except ImportError:
        raise BackendUnavailable(
            "the hip backend needs hip-python: pip install hip-python"
        ) from None
    return hip


def hip_device_count() -> tuple[int, str]:
    """(count, why-none) for AMD GPUs through hip-python."""
    try:
        hip = hip_module()
        err, count = hip.hipGetDeviceCount()
    except BackendUnavailable as missing:
        return 0, str(missing)
    except RuntimeError:
        return 0, "hip-python cannot load libamdhip64.so (ROCm is not installed)"
    if int(err) != 0:
        return 0, f"hipGetDeviceCount returned {getattr(err, 'name', err)}"
    return int(count), ""


def resolve_backend(requested: str, spec: ResourceSpec, device: int = 0) -> Backend:
    """Pick the backend for `spec`; raise BackendUnavailable with one clear line otherwise."""
    if requested not in BACKENDS:
        raise ReplayUsageError(
            f"not one of {', '.join(BACKENDS)}", parameter="backend", value=requested
        )
    if is_host_spec(spec):
        return Backend("host")
    if spec.kind == "null":
        if requested == "virtual":
            raise ReplayUsageError(
                "the null resource measures the native replay core, which the virtual GPU "
                "does not run", parameter="backend", value="virtual",
            )  # fmt: skip
        return _null_backend(requested, device)
    if spec.kind == "torch":
        return _torch_backend(requested, device)
    if requested == "virtual":  # RMM's own resources, compiled for the virtual GPU
        from ..rmm.virtual import check_spec

        check_spec(spec)
        return Backend("virtual")
    if requested == "host":
        raise ReplayUsageError(
            f"replays only host memory, not {spec.label!r}", parameter="backend", value="host"
        )
    if requested in ("auto", "cuda"):
        count, why = cuda_device_count()
        if count > device:
            return Backend("cuda", device)
        if requested == "cuda":
            raise BackendUnavailable(f"the cuda backend found no GPU {device}: {why or 'none'}")
    count, why_hip = hip_device_count()
    if count > device:
        return Backend("hip", device)
    if requested == "hip":
        raise BackendUnavailable(f"the hip backend found no GPU {device}: {why_hip or 'none'}")
    from ..rmm.virtual import VIRTUAL_KINDS

    if spec.kind in VIRTUAL_KINDS and spec.options.get("upstream", "cuda") in (
        "cuda",
        "hip",
        "pool",
    ):
        return Backend("virtual")  # no GPU: RMM's resources on the virtual GPU
    raise BackendUnavailable(
        f"no GPU to replay {spec.label!r} on (cuda: {why or 'no device'}; hip: {why_hip}); "
        "use a machine with an NVIDIA or AMD GPU (the virtual GPU replays pool, arena, binning, "
        "fixed and cuda), or `--resource host` for host memory"
    )


def _torch_backend(requested: str, device: int) -> Backend:
    """A GPU when one is asked for, or when `auto` finds a GPU and a PyTorch to drive it;
    else PyTorch's allocator on the virtual GPU."""
    import importlib.util

    if requested == "virtual":
        return Backend("virtual")
    if requested == "host":
        raise ReplayUsageError(
            "replays only host memory, not PyTorch's allocator (use --backend virtual for it "
            "with no GPU)", parameter="backend", value="host",
        )  # fmt: skip
    if requested in ("cuda", "hip"):  # PyTorch finds its own GPU, in its own process
        from ..pytorch.resource import require_torch

        require_torch()
        return Backend("torch", device)
    if requested == "auto" and importlib.util.find_spec("torch") is not None:
        count, _ = cuda_device_count()
        if count <= device:
            count, _ = hip_device_count()
        if count > device:
            return Backend("torch", device)
    return Backend("virtual")
