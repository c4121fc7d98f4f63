"""Which memory a replay runs on (cuda, hip, host), and the allocators of the Python engine.

- cuda: NVIDIA through the native core (nvcc + RMM's librmm; see replay/engine/native.py); the
GPU is
  found through cuda-bindings (or the driver library when cuda-bindings is absent).
- hip: AMD through hip-python (hipMalloc, hipMallocManaged, hipMallocAsync, hipHostMalloc)
  and hipMM's `rmm.mr` for pool/arena/binning/fixed. Written to mirror the cuda path call for
  call; it has not been measured on an AMD GPU (none was available).
- virtual: no GPU at all: PyTorch's own caching allocator (replay/virtual/gpu.py) or RMM's
  own resources (replay/rmm/virtual.py: pool, arena, binning, fixed, cuda) on hipmem's
  virtual GPU. `auto` picks it when no GPU (or for torch, no CUDA PyTorch to drive one) is
  here.
- host: host memory. `host` replays through the native core's host build (or a Python loop
  when no C++ compiler exists), so CI exercises the same replay loop with no GPU.

The Python allocators below are used by the hip backend and by `engine="python"` (the naive
per-event loop the benchmark compares against).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import ReplayError, ReplayUsageError
from .report import (
    RESERVED_FROM_FREE_MEMORY,
    RESERVED_FROM_POOL_ATTRIBUTE,
    RESERVED_FROM_RESOURCE,
)
from .resources import ResourceSpec

BACKENDS = ("auto", "cuda", "hip", "host", "virtual")


class BackendUnavailable(ReplayError):
    """The chosen backend cannot run here (the message says what is missing and how to get it)."""


class AllocationRefused(Exception):
    """An allocator said no (out of memory or over a limit): a replay failure, not an error."""


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


def _hip_module() -> Any:
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
        hip = _hip_module()
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


# ---------------------------------------------------------------------------------------------
# Allocators of the Python engine
# ---------------------------------------------------------------------------------------------


class Allocator(Protocol):
    """What the Python engine needs of a resource."""

    reserved_source: str

    def allocate(self, size_bytes: int, stream: int) -> Any: ...
    def deallocate(self, handle: Any, size_bytes: int, stream: int) -> None: ...
    def reserved_bytes(self) -> int | None: ...
    def close(self) -> None: ...


class HostAllocator:
    """malloc/free through ctypes, with the spec's limit enforced here."""

    reserved_source = RESERVED_FROM_RESOURCE

    def __init__(self, spec: ResourceSpec) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        self._malloc = libc.malloc
        self._malloc.restype = ctypes.c_void_p
        self._malloc.argtypes = [ctypes.c_size_t]
        self._free = libc.free
        self._free.argtypes = [ctypes.c_void_p]
        self._limit = spec.limit_bytes
        self._held = 0

    def allocate(self, size_bytes: int, stream: int) -> Any:
        if self._limit is not None and self._held + size_bytes > self._limit:
            raise AllocationRefused
        ptr = self._malloc(max(size_bytes, 1))
        if not ptr:
            raise AllocationRefused
        self._held += size_bytes
        return ptr

    def deallocate(self, handle: Any, size_bytes: int, stream: int) -> None:
        self._free(handle)
        self._held -= size_bytes

    def reserved_bytes(self) -> int | None:
        return self._held

    def close(self) -> None:
        pass


def _hip_check(result: Any, what: str) -> Any:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise BackendUnavailable(f"{what} failed: {getattr(err, 'name', err)}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


_HIP_OUT_OF_MEMORY = 2  # hipErrorOutOfMemory (and cudaErrorMemoryAllocation) is 2


class HipAllocator:
    """hip, managed, async and pinned host memory through hip-python (unmeasured: no AMD GPU)."""

    def __init__(self, spec: ResourceSpec, device: int, stream_ids: np.ndarray) -> None:
        self.hip = hip = _hip_module()
        self.spec = spec
        self.device = device
        _hip_check(hip.hipSetDevice(device), "hipSetDevice")
        self.streams: list[Any] = []
        for stream_id in stream_ids:
            self.streams.append(
                _hip_check(hip.hipStreamCreateWithFlags(1), "hipStreamCreateWithFlags")
                if int(stream_id)
                else None
            )
        self.pool: Any = None
        self.reserved_source = RESERVED_FROM_FREE_MEMORY
        self._held = 0
        self._free_before = self._device_free()
        kind = spec.kind
        if kind == "managed":
            self._require_attribute("hipDeviceAttributeManagedMemory", "managed memory")
            self.reserved_source = RESERVED_FROM_RESOURCE
        if kind == "async":
            self._require_attribute("hipDeviceAttributeMemoryPoolsSupported", "memory pools")
            self.pool = _hip_check(
                hip.hipDeviceGetDefaultMemPool(device), "hipDeviceGetDefaultMemPool"
            )
            threshold = spec.option_bytes("release_threshold")
            if threshold is not None:
                value = np.array([threshold], dtype=np.uint64)
                attr = hip.hipMemPoolAttr.hipMemPoolAttrReleaseThreshold
                _hip_check(
                    hip.hipMemPoolSetAttribute(self.pool, attr, value), "hipMemPoolSetAttribute"
                )
            self.reserved_source = RESERVED_FROM_POOL_ATTRIBUTE

    def _require_attribute(self, name: str, what: str) -> None:
        attr = getattr(self.hip.hipDeviceAttribute_t, name)
        value = _hip_check(
            self.hip.hipDeviceGetAttribute(attr, self.device), "hipDeviceGetAttribute"
        )
        if not value:
            raise BackendUnavailable(f"GPU {self.device} does not support {what} ({name} is 0)")

    def _device_free(self) -> int:
        result = self.hip.hipMemGetInfo()
        return int(result[1]) if int(result[0]) == 0 else 0

    def allocate(self, size_bytes: int, stream: int) -> Any:
        hip, kind = self.hip, self.spec.kind
        if self.spec.limit_bytes is not None and self._held + size_bytes > self.spec.limit_bytes:
            raise AllocationRefused
        if kind in ("hip", "cuda"):
            result = hip.hipMalloc(size_bytes)
        elif kind == "managed":
            result = hip.hipMallocManaged(size_bytes, 1)  # hipMemAttachGlobal
        elif kind == "async":
            result = hip.hipMallocAsync(size_bytes, self.streams[stream])
        else:  # host:pinned=1
            result = hip.hipHostMalloc(size_bytes, 0)
        err, ptr = result
        if int(err) == _HIP_OUT_OF_MEMORY:
            raise AllocationRefused
        _hip_check(err, f"allocate {size_bytes} bytes")
        if kind == "managed" and size_bytes:
            self._advise(ptr, size_bytes, stream)
        self._held += size_bytes
        return ptr

    def _advise(self, ptr: Any, size_bytes: int, stream: int) -> None:
        hip = self.hip
        names = {
            "preferred_location": "hipMemAdviseSetPreferredLocation",
            "read_mostly": "hipMemAdviseSetReadMostly",
            "accessed_by": "hipMemAdviseSetAccessedBy",
        }
        for advice in str(self.spec.options.get("advise") or "").split("+"):
            if advice:
                hip.hipMemAdvise(
                    ptr, size_bytes, getattr(hip.hipMemoryAdvise, names[advice]), self.device
                )
        if self.spec.options.get("prefetch"):
            hip.hipMemPrefetchAsync(ptr, size_bytes, self.device, self.streams[stream])

    def deallocate(self, handle: Any, size_bytes: int, stream: int) -> None:
        hip, kind = self.hip, self.spec.kind
        if kind == "async":
            hip.hipFreeAsync(handle, self.streams[stream])
        elif kind == "host":
            hip.hipHostFree(handle)
        else:
            hip.hipFree(handle)
        self._held -= size_bytes

    def reserved_bytes(self) -> int | None:
        if self.spec.kind == "async":
            value = np.zeros(1, dtype=np.uint64)
            attr = self.hip.hipMemPoolAttr.hipMemPoolAttrReservedMemCurrent
            self.hip.hipMemPoolGetAttribute(self.pool, attr, value)
            return int(value[0])
        if self.spec.kind == "managed":
            return self._held
        return self._free_before - self._device_free()

    def close(self) -> None:
        self.hip.hipDeviceSynchronize()
        for stream in self.streams:
            if stream is not None:
                self.hip.hipStreamDestroy(stream)
        self.streams = []


class RmmPythonAllocator:
    """Any spec through `rmm.mr` (RMM on NVIDIA, hipMM on AMD): one Python call per event."""

    reserved_source = RESERVED_FROM_FREE_MEMORY

    def __init__(self, spec: ResourceSpec, device: int, stream_ids: np.ndarray) -> None:
        try:
            import rmm
            import rmm.mr as mr
        except ImportError:
            raise BackendUnavailable(
                f"{spec.kind!r} needs RMM/hipMM's Python package: pip install rmm-cu13 (NVIDIA) "
                "or install hipMM (AMD)"
            ) from None
        self.rmm, self.mr_module = rmm, mr
        self.mr = self._build(spec)
        self.streams = [
            rmm.pylibrmm.stream.Stream() if int(s) else rmm.pylibrmm.stream.DEFAULT_STREAM
            for s in stream_ids
        ]

    def _leaf(self, name: str) -> Any:
        mr = self.mr_module
        return {
            "cuda": mr.CudaMemoryResource,
            "hip": mr.CudaMemoryResource,
            "managed": mr.ManagedMemoryResource,
            "async": mr.CudaAsyncMemoryResource,
        }[name]()

    def _build(self, spec: ResourceSpec) -> Any:
        mr, o = self.mr_module, spec.options
        kind = spec.kind
        if kind in ("cuda", "hip", "managed"):
            top = self._leaf(kind)
        elif kind == "async":
            top = mr.CudaAsyncMemoryResource(
                initial_pool_size=spec.option_bytes("initial"),
                release_threshold=spec.option_bytes("release_threshold"),
            )
        elif kind == "pool" or (kind == "binning" and o["upstream"] == "pool"):
            upstream = self._leaf("cuda" if kind == "binning" else str(o["upstream"]))
            top = mr.PoolMemoryResource(
                upstream, spec.option_bytes("initial") or 0, spec.option_bytes("maximum")
            )
            if kind == "binning":
                top = mr.BinningMemoryResource(top, o["min_exp"], o["max_exp"])
        elif kind == "binning":
            top = mr.BinningMemoryResource(
                self._leaf(str(o["upstream"])), o["min_exp"], o["max_exp"]
            )
        elif kind == "arena":
            top = mr.ArenaMemoryResource(self._leaf(str(o["upstream"])), spec.option_bytes("size"))
        elif kind == "fixed":
            top = mr.FixedSizeMemoryResource(
                self._leaf(str(o["upstream"])), spec.option_bytes("block"), o["prealloc"]
            )
        else:
            raise ReplayUsageError(f"{spec.label!r}: not an RMM resource")
        if spec.limit_bytes is not None:
            top = mr.LimitingResourceAdaptor(top, spec.limit_bytes)
        return top

    def allocate(self, size_bytes: int, stream: int) -> Any:
        try:
            return self.mr.allocate(size_bytes, self.streams[stream])
        except MemoryError:
            raise AllocationRefused from None

    def deallocate(self, handle: Any, size_bytes: int, stream: int) -> None:
        self.mr.deallocate(handle, size_bytes, self.streams[stream])

    def reserved_bytes(self) -> int | None:
        return None

    def close(self) -> None:
        self.mr = None
