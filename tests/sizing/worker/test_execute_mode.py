"""The stand-in runtime's execute mode, called directly: launches recorded by kernel name,
HIP errors counted with the first one named (what sizing/minimum.py relies on to answer
"unknown" rather than a size)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from hipmem.sizing.rocm.locator import locate
from hipmem.sizing.worker.shim_build import build_shim


@pytest.fixture(scope="module")
def hip(rocm: Path) -> ctypes.CDLL:
    include_dir = locate().include_dir
    assert include_dir is not None
    library = ctypes.CDLL(str(build_shim(include_dir, locate().hip_soname) / locate().hip_soname))
    library.hipmemExecuteEnd.restype = ctypes.c_ulong
    return library


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint32), ("y", ctypes.c_uint32), ("z", ctypes.c_uint32)]


ONE = Dim3(1, 1, 1)
# Registered stubs stay alive for the whole module: a freed one's address could come back as
# the "never registered" buffer of a later test, which would then launch (a flaky test).
_REGISTERED: list[ctypes.Array[ctypes.c_char]] = []


def _end(hip: ctypes.CDLL) -> tuple[int, int, str, list[str]]:
    errors = ctypes.c_ulong()
    first = ctypes.create_string_buffer(256)
    kernels = ctypes.create_string_buffer(1 << 16)
    launches = hip.hipmemExecuteEnd(ctypes.byref(errors), first, 256, kernels, len(kernels))
    names = kernels.value.decode().split("\n")[:-1]
    return launches, errors.value, first.value.decode(), names


def test_launches_are_recorded_by_kernel_name(hip: ctypes.CDLL) -> None:
    stub = ctypes.create_string_buffer(8)  # a host stub's address, registered by name
    _REGISTERED.append(stub)
    hip.__hipRegisterFunction(None, stub, None, b"my_kernel", 0, None, None, None, None, None)
    function = ctypes.c_void_p()
    assert hip.hipModuleGetFunction(ctypes.byref(function), None, b"tensile_kernel") == 0
    dims = [ctypes.c_uint32(1)] * 6
    hip.hipmemExecuteBegin()
    assert hip.hipExtModuleLaunchKernel(function, *dims, 0, None, None, None, None, None, 0) == 0
    assert hip.hipLaunchKernel(stub, ONE, ONE, None, ctypes.c_size_t(0), None) == 0
    assert _end(hip) == (2, 0, "", ["tensile_kernel", "my_kernel"])


def test_outside_execute_mode_nothing_launches(hip: ctypes.CDLL) -> None:
    function = ctypes.c_void_p()
    hip.hipModuleGetFunction(ctypes.byref(function), None, b"k")
    dims = [ctypes.c_uint32(1)] * 6
    assert hip.hipExtModuleLaunchKernel(function, *dims, 0, None, None, None, None, None, 0) != 0


def test_hip_errors_are_counted_and_the_first_named(hip: ctypes.CDLL) -> None:
    hip.hipmemExecuteBegin()
    unknown_stub = ctypes.create_string_buffer(8)  # never registered
    assert hip.hipLaunchKernel(unknown_stub, ONE, ONE, None, ctypes.c_size_t(0), None) != 0
    assert hip.hipSetDevice(3) != 0
    launches, errors, first, names = _end(hip)
    assert (launches, errors, names) == (0, 2, [])
    assert first.startswith("hipLaunchKernel (unregistered kernel)")
