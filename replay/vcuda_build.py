"""Build the virtual GPU for one PyTorch allocator into the cache, on first use.

Three parts, compiled with the system compilers (cc, g++) against that PyTorch's headers:

- the stand-in CUDA runtime (replay/vcuda/virtual_cuda.c), named like the runtime its
  libc10_cuda.so links (`libcudart.so.13`, or `.so.12`), with that soname's version script;
- a stand-in NVML (replay/vcuda/virtual_nvml.c, `libnvidia-ml.so.1`), so that an
  out-of-memory message on a GPU host does not ask the real NVML about the virtual GPU;
- the replay driver (replay/vcuda/vcuda_replay.cpp), linked to the stand-ins first and then to
  libc10.so and libc10_cuda.so, with an RPATH (not a RUNPATH: it also governs the libraries'
  own dependencies) that names the stand-in's folder first. A machine with a CUDA toolkit
  has a real libcudart.so.N on its loader path; the stand-in, loaded first, is the one that
  every library binds to, and the driver checks it is.

The output folder is keyed by a hash of the sources, the allocator's version and its two
libraries: an edit, or another PyTorch, builds anew. It is built in a temporary folder and
renamed, so concurrent builds never see half of it; every use checks it against the sizes and
hashes recorded then, and a damaged build is said and built again (`hipmem._core.build_cache`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir
from hipmem.replay.errors import ReplayError
from hipmem.replay.torch_allocator import TorchAllocator

SOURCES = Path(__file__).parent / "vcuda"
DRIVER = "vcuda_replay"
# Loaded by the driver at start, so that PyTorch's dlopen of NVML finds it, not a GPU host's
# real one, which does not know the virtual GPU (replay/vcuda/virtual_nvml.c says why).
NVML = "libnvidia-ml.so.1"


class VirtualGpuBuildError(ReplayError):
    """The virtual GPU could not be compiled (the compiler's first error line says why)."""


def supported_sonames() -> list[str]:
    return sorted(path.name.removesuffix(".map") for path in SOURCES.glob("*.map"))


def build_dir_for(allocator: TorchAllocator) -> Path:
    """The cache folder of this allocator's build (it may not exist yet)."""
    digest = hashlib.sha256(allocator.version.encode() + allocator.soname.encode())
    for path in sorted(SOURCES.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    for name in ("libc10.so", "libc10_cuda.so"):
        digest.update(_file_digest(allocator.lib_dir / name).encode())
    return cache_dir() / "vcuda" / digest.hexdigest()[:16]


def build(allocator: TorchAllocator) -> Path:
    """The folder holding the stand-in (`libcudart.so.N`) and the driver, built if needed
    (checked on every use, rebuilt when damaged: `hipmem._core.build_cache`)."""
    out_dir = build_dir_for(allocator)
    script = SOURCES / f"{allocator.soname}.map"
    if not script.is_file():
        raise VirtualGpuBuildError(
            f"{allocator.describe()} links {allocator.soname}; the virtual GPU stands in for "
            f"{', '.join(supported_sonames())} only"
        )

    def make(work: Path) -> None:
        includes = [f"-I{d}" for d in allocator.include_dirs]
        _compile(
            [_tool("CC", "cc", "gcc"), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
             *includes, f"-Wl,--version-script={script}", f"-Wl,-soname,{allocator.soname}",
             "-o", str(work / allocator.soname), str(SOURCES / "virtual_cuda.c"), "-lpthread"],
            "the stand-in CUDA runtime",
        )  # fmt: skip
        _compile(
            [_tool("CC", "cc", "gcc"), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
             f"-Wl,-soname,{NVML}", "-o", str(work / NVML), str(SOURCES / "virtual_nvml.c")],
            "the stand-in NVML",
        )  # fmt: skip
        _compile(
            [_tool("CXX", "g++", "c++"), "-std=c++17", "-O2", *includes,
             "-o", str(work / DRIVER), str(SOURCES / "vcuda_replay.cpp"),
             "-Wl,--no-as-needed", str(work / allocator.soname), str(work / NVML),
             f"-L{allocator.lib_dir}", "-lc10", "-lc10_cuda", "-Wl,--disable-new-dtags",
             f"-Wl,-rpath,{out_dir}:{allocator.lib_dir}"],
            "the replay driver",
        )  # fmt: skip

    return built_folder(out_dir, make, what=f"the virtual GPU of PyTorch {allocator.version}")


def _compile(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as err:
        raise VirtualGpuBuildError(f"compiling {what} could not start: {err}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        first = next((ln for ln in lines if "error" in ln), lines[0] if lines else "no output")
        raise VirtualGpuBuildError(f"compiling {what} failed: {first.strip()[:300]}")


def _tool(variable: str, *names: str) -> str:
    chosen = os.environ.get(variable) or next(filter(None, map(shutil.which, names)), None)
    if not chosen:
        raise VirtualGpuBuildError(
            f"the virtual GPU is compiled on first use and needs {names[0]} (apt install g++)"
        )
    return chosen


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
    except OSError as err:
        raise VirtualGpuBuildError(f"cannot read {path}: {err.strerror}") from None
    return digest.hexdigest()
