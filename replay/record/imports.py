"""What a PyTorch build imports from the CUDA libraries: the names a recording's stand-ins define.

PyTorch's libraries (`torch/lib/*.so`, `torch/_C*.so`) link the CUDA runtime, cuBLAS, cuDNN,
NCCL and the rest by soname (an extension such as torchvision's `_C.so` imports a subset of
the runtime's names, which the stand-in runtime defines too).
Most imports carry a symbol version named like the library (`cublasCreate_v2@libcublas.so.13`),
which says which library must define them; NCCL, cuSPARSELt, cuFile, NVSHMEM and the driver
export unversioned names, given to their library by prefix (UNVERSIONED_PREFIXES).

Read from the ELF files themselves (pyelftools): no `readelf`, no import of torch.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import SymbolTableSection

from ..errors import ReplayError

# Libraries of the system and of PyTorch itself: never stood in for.
# The CUDA libraries, by soname: the runtime, driver, math libraries, cuDNN, NCCL, NVRTC,
# NVSHMEM, CUPTI, cuFile, NVML. Everything else PyTorch links (the C library, its bundled
# OpenMP, its own libraries) is the real one.
CUDA_LIBRARY = re.compile(r"^lib(cu|nv|nccl)")
# The unversioned imports, by the library that defines them (the longest prefix wins).
UNVERSIONED_PREFIXES = {
    "nccl": "libnccl.so.2",
    "cusparseLt": "libcusparseLt.so.0",
    "cuFile": "libcufile.so.0",
    "nvshmem": "libnvshmem_host.so.3",
    "cu": "libcuda.so.1",
}


class ImportReadError(ReplayError):
    """A library of the PyTorch build could not be read."""


@dataclass(frozen=True)
class CudaImports:
    """For each CUDA library a build needs: the names it imports, and whether they carry the
    library's symbol version."""

    names: dict[str, frozenset[str]]  # soname -> imported names
    versions: dict[str, str]  # soname -> the symbol version its names carry (if they do)


def torch_libraries(package: Path) -> list[Path]:
    """PyTorch's own shared libraries: torch/lib/*.so* and the extension torch/_C*.so."""
    return sorted([*package.glob("lib/*.so*"), *package.glob("_C*.so")])


def cuda_imports(libraries: list[Path]) -> CudaImports:
    """What these libraries import from CUDA libraries none of them defines."""
    names: dict[str, set[str]] = defaultdict(set)
    versions: dict[str, str] = {}
    defined: set[str] = set()
    own: set[str] = {library.name for library in libraries}
    unversioned: set[str] = set()
    needed: set[str] = set()
    for library in libraries:
        read = _read(library)
        defined |= read.defined
        needed |= read.needed
        unversioned |= read.unversioned
        for name, soname, version in read.versioned:
            names[soname].add(name)
            versions[soname] = version
    for name in unversioned - defined:
        owner = _library_by_prefix(name)
        if owner is not None and owner in needed:
            names[owner].add(name)
    for soname in needed - own:
        if CUDA_LIBRARY.match(soname):
            names.setdefault(soname, set())
    return CudaImports(
        {soname: frozenset(found) for soname, found in names.items() if CUDA_LIBRARY.match(soname)},
        {soname: version for soname, version in versions.items() if CUDA_LIBRARY.match(soname)},
    )


def _library_by_prefix(name: str) -> str | None:
    for prefix in sorted(UNVERSIONED_PREFIXES, key=len, reverse=True):
        if name.startswith(prefix) and (prefix != "cu" or name[2:3].isupper()):
            return UNVERSIONED_PREFIXES[prefix]
    return None


@dataclass(frozen=True)
class _Library:
    needed: set[str]
    defined: set[str]
    versioned: set[tuple[str, str, str]]  # (name, soname, version) imported with a version
    unversioned: set[str]


def _read(library: Path) -> _Library:
    try:
        with library.open("rb") as stream:
            elf = ELFFile(stream)
            dynamic = elf.get_section_by_name(".dynamic")
            needed = (
                {str(tag.needed) for tag in dynamic.iter_tags("DT_NEEDED")}  # type: ignore[attr-defined]
                if isinstance(dynamic, DynamicSection)
                else set()
            )
            symbols = elf.get_section_by_name(".dynsym")
            versions = elf.get_section_by_name(".gnu.version")
            requirements = elf.get_section_by_name(".gnu.version_r")
            found = _Library(needed, set(), set(), set())
            if not isinstance(symbols, SymbolTableSection):
                return found
            for index, symbol in enumerate(symbols.iter_symbols()):
                if not symbol.name:
                    continue
                if symbol["st_shndx"] != "SHN_UNDEF":
                    found.defined.add(symbol.name)
                    continue
                required = _version(index, versions, requirements)
                if required is None:
                    found.unversioned.add(symbol.name)
                elif CUDA_LIBRARY.match(required[0]):
                    found.versioned.add((symbol.name, *required))
            return found
    except (OSError, ELFError) as err:
        raise ImportReadError(f"cannot read {library}: {err}") from None


def _version(index: int, versions: object, requirements: object) -> tuple[str, str] | None:
    """The (soname, version) an import's version requires, or None when it has none."""
    if not isinstance(versions, GNUVerSymSection) or not isinstance(
        requirements, GNUVerNeedSection
    ):
        return None
    ndx = versions.get_symbol(index).entry["ndx"]
    if not isinstance(ndx, int) or ndx < 2:  # local, global: no version
        return None
    found = requirements.get_version(ndx)
    return None if found is None else (str(found[0].name), str(found[1].name))
