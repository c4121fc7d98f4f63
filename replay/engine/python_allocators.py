"""The allocators of the Python loop (replay/engine/python_loop.py): the hip backend and
`engine="python"` (the naive per-event loop the benchmark compares against). Host memory
through libc, hip memory through hip-python, and RMM's (or hipMM's) resources through
`rmm.mr`, one Python call per event."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any, Protocol

import numpy as np

from ..errors import ReplayUsageError
from .backends import BackendUnavailable, hip_module
from .report import (
    RESERVED_FROM_FREE_MEMORY,
    RESERVED_FROM_POOL_ATTRIBUTE,
    RESERVED_FROM_RESOURCE,
)
from .resources import ResourceSpec


class AllocationRefused(Exception):
    """An allocator said no (out of memory or over a limit): a replay failure, not an error."""


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
        self.hip = hip = hip_module()
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
