"""Build the stand-in CUDA libraries a recording runs a PyTorch build on, into the cache.

For one PyTorch build (its package folder), one folder of libraries, each named by the soname
PyTorch links and loaded before PyTorch (LD_PRELOAD), so that every library binds to them:

- `libcudart.so.N`: the virtual GPU's runtime (replay/virtual/vcuda/virtual_cuda.c) grown by
  what a running script asks (csrc/record_runtime.c), playing the device attributes a
  recording gives it (device_attributes.py);
- `libcuda.so.1`: the driver (replay/virtual/vcuda/virtual_libcuda.c and
  csrc/libraries/libcuda.c);
- `libnvidia-ml.so.1`: the replay's stand-in NVML;
- one library for each other CUDA library PyTorch links (cuBLAS, cuDNN, NCCL, ...): a stub for
  every name PyTorch imports from it (replay/record/imports.py), beside the answers written by
  hand in csrc/libraries/<name>.c.

Every name PyTorch imports is defined, with the symbol version it asks for, so a library loads
whatever it imports and a call never ends the process with "undefined symbol". The folder is
keyed by the sources, the PyTorch build's version and its libraries' sizes; it is built in a
temporary folder, renamed, and checked on every use (`hipmem._core.build_cache`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hipmem._core.atomic_write import naming_write_errors
from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir

from ..virtual.build import LIBCUDA, NVML, compile_part, dynamic_symbols, tool
from ..virtual.build import SOURCES as VCUDA_SOURCES
from . import cudnn_table
from .imports import CudaImports, cuda_imports, torch_libraries

SOURCES = Path(__file__).parent / "csrc"
LIBRARIES = SOURCES / "libraries"
# The cuDNN a PyTorch wheel depends on, the one it was built against (its METADATA's
# `Requires-Dist: nvidia-cudnn-cu13==9.19.0.56`); PyTorch refuses a runtime of another major.
_CUDNN_REQUIREMENT = re.compile(r"^Requires-Dist: nvidia-cudnn-cu\d+==(\d+)\.(\d+)\.(\d+)", re.M)
# A build without that line (one compiled from source): the cuDNN of PyTorch 2.11's wheels, the
# release whose cuDNN attention plans were measured on the GPU (csrc/libraries/libcudnn.c).
_CUDNN_MEASURED = (9, 19, 0)
_STRING_FUNCTION = re.compile(r"(ErrorString|StatusString|ErrorName|StatusName|GetLastError)$")


def standins_dir(package: Path, version: str, cuda_major: int) -> Path:
    """The cache folder of this PyTorch build's stand-ins (it may not exist yet)."""
    digest = hashlib.sha256(f"{version} {cuda_major}".encode())
    here = Path(__file__).parent  # the build's own rules: which libraries, which names
    for source in sorted([*SOURCES.rglob("*"), *VCUDA_SOURCES.iterdir(), here / "build.py",
                          here / "imports.py"]):  # fmt: skip
        if source.is_file():
            digest.update(source.name.encode() + source.read_bytes())
    for library in torch_libraries(package):
        digest.update(f"{library.name} {library.stat().st_size}".encode())
    return cache_dir() / "record" / digest.hexdigest()[:16]


def preload_order(folder: Path, runtime: str) -> list[Path]:
    """The libraries to preload, the runtime first (every other stand-in may call it)."""
    others = sorted(p for p in folder.glob("lib*.so*") if p.name != runtime and p.is_file())
    return [folder / runtime, *others]


def build(package: Path, version: str, cuda_major: int, include_dirs: list[Path]) -> Path:
    """The folder of stand-ins for the PyTorch build in `package`, built if needed."""
    out_dir = standins_dir(package, version, cuda_major)
    runtime = f"libcudart.so.{cuda_major}"

    def make(work: Path) -> None:
        imports = cuda_imports(torch_libraries(package))
        (work / "src").mkdir()
        includes = [f"-I{d}" for d in include_dirs] + [f"-I{VCUDA_SOURCES}", f"-I{LIBRARIES}"]
        _write(work / "src" / "record_cudnn.h", _cudnn_header(cudnn_version(package)))
        _write(work / "src" / "record_cudnn_convolutions.h", cudnn_table.header())
        base = [tool("CC"), "-shared", "-fPIC", "-O2", "-fvisibility=hidden", f"-I{work / 'src'}",
                *includes]  # fmt: skip
        for_release = f"for PyTorch {version}"
        _compile_library(work, runtime, imports, base, SOURCES / "record_runtime.c",
                         f"the stand-in CUDA runtime {for_release}")  # fmt: skip
        _compile_library(work, LIBCUDA, imports, [*base, str(work / runtime)],
                         VCUDA_SOURCES / "virtual_libcuda.c",
                         f"the stand-in CUDA driver {for_release}")  # fmt: skip
        compile_part(
            [*base, f"-Wl,-soname,{NVML}", "-o", str(work / NVML),
             str(VCUDA_SOURCES / "virtual_nvml.c")],
            "the stand-in NVML",
        )  # fmt: skip
        for soname in sorted(set(imports.names) - {runtime, LIBCUDA}):
            _compile_library(work, soname, imports, base, None,
                             f"the stand-in {soname} {for_release}")  # fmt: skip

    return built_folder(out_dir, make, what=f"the recording stand-ins of PyTorch {version}",
                        announced=True)  # fmt: skip


def _compile_library(
    work: Path, soname: str, imports: CudaImports, base: list[str], main: Path | None, what: str
) -> None:
    """One stand-in: its main source (or none), its hand-written answers, then a stub for each
    other name PyTorch imports from it. What the sources define is read from a first build's
    symbol table, not from their text: a CUDA header may rename a function
    (`cudaGetDeviceProperties` is `cudaGetDeviceProperties_v2` under CUDA 12)."""
    own = LIBRARIES / f"{soname.split('.so')[0]}.c"
    parts = [p for p in (main, own if own.is_file() else None) if p is not None]
    included = ['#include "stub.h"\n', *(f'#include "{p}"\n' for p in parts)]
    _build_library(work, soname, imports, base, "".join(included), what)
    defined = dynamic_symbols(work / soname, defined=True)
    stubs = [
        f"{'STUB_STRING' if _STRING_FUNCTION.search(name) else 'STUB'}({name})\n"
        for name in sorted(imports.names.get(soname, frozenset()) - defined)
    ]
    if stubs:
        _build_library(work, soname, imports, base, "".join(included + stubs), what)


def _build_library(
    work: Path, soname: str, imports: CudaImports, base: list[str], text: str, what: str
) -> None:
    source = work / "src" / f"{soname}.c"
    _write(source, text)
    command = [*base, f"-Wl,-soname,{soname}", "-o", str(work / soname), str(source)]
    version = imports.versions.get(soname)
    if version is not None:
        script = work / "src" / f"{soname}.map"
        _write(script, f"{version} {{\n  global: *;\n}};\n")
        command.insert(-3, f"-Wl,--version-script={script}")
    compile_part([*command, "-lpthread"], what)


def cudnn_version(package: Path) -> tuple[int, int, int]:
    """The cuDNN release the stand-in cuDNN says it is: the one this PyTorch build requires."""
    for metadata in sorted(package.parent.glob("torch-*.dist-info/METADATA")):
        found = _CUDNN_REQUIREMENT.search(metadata.read_text(errors="replace"))
        if found:
            major, minor, patch = (int(part) for part in found.groups())
            return major, minor, patch
    return _CUDNN_MEASURED


def _cudnn_header(version: tuple[int, int, int]) -> str:
    major, minor, patch = version
    return (
        "/* Generated by replay/record/build.py: the cuDNN this PyTorch build requires. */\n"
        f"static const int g_cudnn_version[3] = {{{major}, {minor}, {patch}}};\n"
    )


def _write(path: Path, text: str) -> None:
    with naming_write_errors(path):
        path.write_text(text)
