"""The stand-in runtime's memory functions, driven through hip-python as the replay's hip
backend drives them: allocations are host memory, capped by the virtual device's memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from hipmem.sizing.rocm.locator import locate
from hipmem.sizing.worker.shim_build import build_shim
from tests.conftest import cli_env

PROGRAM = textwrap.dedent(
    """
    from hip import hip
    ok = hip.hipError_t.hipSuccess
    err, ptr = hip.hipMalloc(1 << 20); assert err == ok
    err, free_bytes, total_bytes = hip.hipMemGetInfo(); assert err == ok
    assert total_bytes == 8 << 20 and free_bytes == total_bytes - (1 << 20)
    err, too_big = hip.hipMalloc(64 << 20); assert err == hip.hipError_t.hipErrorOutOfMemory
    err, stream = hip.hipStreamCreateWithFlags(0); assert err == ok
    err, async_ptr = hip.hipMallocAsync(4096, stream); assert err == ok
    err, pool = hip.hipDeviceGetDefaultMemPool(0); assert err == ok
    attr = hip.hipMemPoolAttr.hipMemPoolAttrReservedMemCurrent
    err, = hip.hipFreeAsync(async_ptr, stream); assert err == ok
    err, managed = hip.hipMallocManaged(8192, 1); assert err == ok
    (err,) = hip.hipFree(managed); assert err == ok
    (err,) = hip.hipStreamDestroy(stream); assert err == ok
    (err,) = hip.hipFree(ptr); assert err == ok
    err, free_bytes, total_bytes = hip.hipMemGetInfo(); assert free_bytes == total_bytes
    print("ok")
    """
)


def test_memory_functions_through_hip_python(rocm: Path) -> None:
    include_dir = locate().include_dir
    assert include_dir is not None
    shim = build_shim(include_dir)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True, text=True, timeout=60,
        env=cli_env(LD_LIBRARY_PATH=str(shim), HIPMEM_VDEV_MEM_BYTES=str(8 << 20)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
