"""Build the virtual GPU for one PyTorch allocator into the cache, on first use.

Three parts, compiled with the system compilers (cc, g++) against that PyTorch's headers:

- the stand-in CUDA runtime (replay/virtual/vcuda/virtual_cuda.c), named like the runtime its
  libc10_cuda.so links (`libcudart.so.13`, or `.so.12`), with that soname's version script;
- a stand-in NVML (replay/virtual/vcuda/virtual_nvml.c, `libnvidia-ml.so.1`), so that an
  out-of-memory message on a GPU host does not ask the real NVML about the virtual GPU;
- the replay driver (replay/virtual/vcuda/vcuda_replay.cpp, its loop in replay_loop.hpp beside
  it, which RMM's driver includes too), linked to the stand-ins first and then to
  libc10.so and libc10_cuda.so, with an RPATH (not a RUNPATH: it also governs the libraries'
  own dependencies) that names the stand-in's folder first. A machine with a CUDA toolkit
  has a real libcudart.so.N on its loader path; the stand-in, loaded first, is the one that
  every library binds to, and the driver checks it is.

The C++ standard is the oldest of C++17 and C++20 under which the allocator's headers compile (a
syntax-only probe): PyTorch up to 2.13 is written for C++17, 2.14's headers need C++20
(`std::strong_ordering` in c10/util/intrusive_ptr.h). A failed compile or link names the
release it was building for and its first real error (`hipmem._core.native_build`, the one
place that finds compilers and runs them).

The output folder is keyed by a hash of the sources, the allocator's version and its two
libraries: an edit, or another PyTorch, builds anew. It is built in a temporary folder and
renamed, so concurrent builds never see half of it; every use checks it against the sizes and
hashes recorded then, and a damaged build is said and built again (`hipmem._core.build_cache`).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from hipmem._core.atomic_write import naming_write_errors
from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir
from hipmem._core.native_build import compile_step, find_compiler

from ..errors import ReplayError
from ..pytorch.allocator import TorchAllocator

SOURCES = Path(__file__).parent / "vcuda"
DRIVER = "vcuda_replay"
# The replay loop, written once for this driver and RMM's (replay/rmm/csrc/rmm_replay.cpp).
LOOP_HEADER = "replay_loop.hpp"
# Loaded by the driver at start, so that PyTorch's dlopen of NVML finds it, not a GPU host's
# real one, which does not know the virtual GPU (replay/virtual/vcuda/virtual_nvml.c says why).
NVML = "libnvidia-ml.so.1"
# Linked by the driver, so that PyTorch up to 2.7, which opens the CUDA driver itself for
# expandable segments, finds the stand-in (replay/virtual/vcuda/virtual_libcuda.c).
LIBCUDA = "libcuda.so.1"
NEEDED_BY = "the virtual GPU is compiled on first use and needs a C compiler and a C++ compiler"
# Tried in this order; the first under which the headers compile is used.
CXX_STANDARDS = ("c++17", "c++20")
_PROBE = "#include <c10/cuda/CUDACachingAllocator.h>\n#include <c10/cuda/CUDAStream.h>\n"


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
    for flag in string_abi_flags(allocator.lib_dir / "libc10.so"):  # a build made without it
        digest.update(flag.encode())  # crashed reading the allocator's state: not reused
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
        for_release = f"for PyTorch {allocator.version}"
        runtime = [tool("CC"), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
                   *includes, f"-Wl,--version-script={script}",
                   f"-Wl,-soname,{allocator.soname}", "-o", str(work / allocator.soname),
                   "-lpthread"]  # fmt: skip
        what = f"the stand-in CUDA runtime {for_release}"
        compile_part([*runtime, str(SOURCES / "virtual_cuda.c")], what)
        # Runtime calls this release imports that the stand-in lacks (new in a release, and
        # never made by a replay): present and refused, as the stand-in's own stubs are.
        missing = sorted(
            cuda_imports(allocator.lib_dir / "libc10_cuda.so")
            - dynamic_symbols(work / allocator.soname, defined=True)
        )
        if missing:
            stubs = work / "virtual_cuda_release.c"
            text = f'#include "{SOURCES / "virtual_cuda.c"}"\n'
            text += "".join(f"NOT_SUPPORTED({name})\n" for name in missing)
            with naming_write_errors(stubs):
                stubs.write_text(text)
            compile_part([*runtime, str(stubs)], what)
        compile_part(
            [tool("CC"), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
             *includes, f"-Wl,-soname,{LIBCUDA}", "-o", str(work / LIBCUDA),
             str(SOURCES / "virtual_libcuda.c"), str(work / allocator.soname)],
            f"the stand-in CUDA driver {for_release}",
        )  # fmt: skip
        compile_part(
            [tool("CC"), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
             f"-Wl,-soname,{NVML}", "-o", str(work / NVML), str(SOURCES / "virtual_nvml.c")],
            "the stand-in NVML",
        )  # fmt: skip
        standard = cxx_standard(includes)
        abi = string_abi_flags(allocator.lib_dir / "libc10.so")
        compile_part(
            [tool("CXX"), f"-std={standard}", "-O2", *abi, *includes, f"-I{SOURCES}",
             "-o", str(work / DRIVER), str(SOURCES / "vcuda_replay.cpp"),
             "-Wl,--no-as-needed", str(work / allocator.soname), str(work / LIBCUDA),
             str(work / NVML),
             f"-L{allocator.lib_dir}", "-lc10", "-lc10_cuda", "-Wl,--disable-new-dtags",
             f"-Wl,-rpath,{out_dir}:{allocator.lib_dir}"],
            f"the replay driver {for_release} ({standard})",
        )  # fmt: skip

    return built_folder(
        out_dir, make, what=f"the virtual GPU of PyTorch {allocator.version}", announced=True
    )


def dynamic_symbols(library: Path, *, defined: bool) -> set[str]:
    """The names in a library's dynamic symbol table: those it defines, or those it imports."""
    try:
        with library.open("rb") as stream:
            table = ELFFile(stream).get_section_by_name(".dynsym")
            if not isinstance(table, SymbolTableSection):
                return set()
            return {
                symbol.name
                for symbol in table.iter_symbols()
                if symbol.name and (symbol["st_shndx"] != "SHN_UNDEF") == defined
            }
    except (OSError, ELFError) as err:
        raise VirtualGpuBuildError(f"cannot read {library}: {err}") from None


def cuda_imports(libc10_cuda: Path) -> set[str]:
    """The CUDA runtime functions PyTorch's allocator library imports."""
    return {name for name in dynamic_symbols(libc10_cuda, defined=False) if name.startswith("cuda")}


def string_abi_flags(libc10: Path) -> list[str]:
    """The compiler flag that gives the driver the std::string ABI of the allocator's build.
    PyTorch's older wheels (2.4.1; 2.9.1 on: the new one) use the pre-C++11 one (`..._ABI=0`):
    a driver built with the default ABI hands the allocator's snapshot() strings of another
    layout, and frees them as such (2.4.1: "free(): invalid pointer", a segfault). Told from
    libc10's own symbols: its TORCH_CHECK failure takes a `std::string` mangled `Ss` there."""
    old = any(
        name.startswith("_ZN3c106detail14torchCheckFail") and name.endswith("RKSs")
        for name in dynamic_symbols(libc10, defined=True)
    )
    return ["-D_GLIBCXX_USE_CXX11_ABI=0"] if old else []


def cxx_standard(includes: list[str]) -> str:
    """The oldest of CXX_STANDARDS under which the allocator's headers compile (the last one
    when none does: the driver's compile then reports the headers' first error)."""
    compiler = tool("CXX")
    for standard in CXX_STANDARDS[:-1]:
        try:
            done = subprocess.run(
                [compiler, f"-std={standard}", "-fsyntax-only", *includes, "-x", "c++", "-"],
                input=_PROBE, capture_output=True, text=True, check=False,
            )  # fmt: skip
        except OSError as err:
            raise VirtualGpuBuildError(f"the C++ compiler could not start: {err}") from None
        if done.returncode == 0:
            return standard
    return CXX_STANDARDS[-1]


def compile_part(command: list[str], what: str) -> None:
    """One compile of a build on the virtual GPU (this one or RMM's): a failure is a
    VirtualGpuBuildError naming `what` and the compiler's first error."""
    compile_step(command, what=what, error=VirtualGpuBuildError)


def tool(variable: str, needed_by: str = NEEDED_BY) -> str:
    """$CC or $CXX (`variable`) for a build on the virtual GPU; none: a VirtualGpuBuildError."""
    return find_compiler(variable, needed_by=needed_by, error=VirtualGpuBuildError)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
    except OSError as err:
        raise VirtualGpuBuildError(f"cannot read {path}: {err.strerror}") from None
    return digest.hexdigest()
