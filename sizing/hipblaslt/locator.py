"""Find the hipBLASLt that sizes `hipblaslt_matmul` calls, and say where from.

It follows where rocBLAS/rocSOLVER were found (`sizing.library_locator`, whose order is
`--rocm-dir`, `HIPMEM_ROCM_LIBDIR`, `$ROCM_PATH/lib`, `$ROCM_HOME/lib`, `/opt/rocm/lib`, the
loader path, then the cache):
- rocBLAS from a local install: that install's hipBLASLt, `libhipblaslt.so.N` in the same lib
  directory with its solution data in `hipblaslt/library/` beside it (AMD's layout,
  `/opt/rocm/lib/libhipblaslt.so.1`, and Debian's system one). Its version is read from the
  install's files, never by running anything: the header `hipblaslt-version.h`, then
  `lib/cmake/hipblaslt/hipblaslt-config-version.cmake`, then the library's real file name
  (`libhipblaslt.so.1.2.70200`); when none says it, the version is unknown (None).
- a local install with no `libhipblaslt.so.*`: Debian's build for the install's ROCm release
  from the cache (7.2.4 for 7.2), run on that release's cached tree, with a notice saying so
  (the answer is then Debian's build, not the install's); an error naming the fetch command
  when that build is not cached either.
- rocBLAS from the cache: Debian's build for that release, from the cache.
With an `OnDemand` (`sizing.fetch_on_demand`), Debian's build is fetched when the cache lacks
it (or is damaged), and the device's arch's solution data when the cached build lacks it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import LibraryNotFound
from ..rocm.elf_file import needed_libraries
from ..rocm.locator import (
    Libraries,
    MixedReleases,
    cache_label,
    cached_libraries,
    damage_reason,
    is_cache_label,
)
from ..rocm.on_demand import OnDemand
from .fetch import LIBRARY_SUBDIR, OfflineHipblaslt, load_hipblaslt
from .releases import (
    DATA_ELSEWHERE,
    HIPBLASLT_RELEASES,
    HipblasltRelease,
    for_rocm,
)

_VERSION_FILE_BYTES = 64 * 1024  # version files are a few hundred bytes; read no more


@dataclass(frozen=True)
class HipblasltBuild:
    """One hipBLASLt library, with its solution data beside it, and how to load it."""

    version: str | None  # "7.2.4" (Debian's build), the install's own "1.2.0"; None: unknown
    version_from: str  # where the version was read
    library: Path  # lib/libhipblaslt.so.N
    found_in: str  # the place, as library_locator names it (`cache_label` for the cache)
    runs_with: Libraries  # the worker that loads it: same loader, lib dir and HIP stand-in
    release: HipblasltRelease | None = None  # Debian's build, when it comes from the cache
    notice: str | None = None  # one line a user must see (the install had no hipBLASLt)

    @property
    def solution_dir(self) -> Path:
        return self.library.parent / LIBRARY_SUBDIR

    @property
    def label(self) -> str:
        return f"hipBLASLt {self.version or '(version unknown)'}"

    @property
    def place(self) -> str:
        """`--rocm-dir (/opt/rocm/lib)`, or the cache's label."""
        if is_cache_label(self.found_in):
            return self.found_in
        return f"{self.found_in} ({self.library.parent})"

    def describe(self) -> str:
        """One line naming the build, its version's source and where it was found."""
        if self.release is not None:
            release = self.release
            debian = f"Debian {release.suite}: libhipblaslt1 {release.pins['libhipblaslt1']}"
            return (
                f"{self.label} ({debian}) on ROCm {release.host_rocm}'s runtime, from {self.place}"
            )
        return f"{self.label} (version from {self.version_from}) from {self.place}"

    def as_dict(self) -> dict[str, str | None]:
        return {
            "hipblaslt": self.version,
            "hipblaslt_version_from": self.version_from,
            "hipblaslt_library": str(self.library),
            "hipblaslt_found_in": self.found_in,
        }


def hipblaslt_for(libraries: Libraries, on_demand: OnDemand | None = None) -> HipblasltBuild:
    """The hipBLASLt that answers beside these rocBLAS/rocSOLVER libraries (module docstring)."""
    if is_cache_label(libraries.found_in):
        return _cached_build(libraries.rocm, libraries, on_demand=on_demand)
    library = _library_in(libraries.lib_dir)
    if library is None:
        return _fallback(libraries, on_demand)
    _check_hip_runtime(library, libraries)
    version, version_from = read_version(library)
    return HipblasltBuild(version, version_from, library, libraries.found_in, libraries)


def hipblaslt_beside(libraries: Libraries) -> Path | None:
    """The hipBLASLt library a place holds (`hipmem rocm where`): an install's own, or the
    cache's build for that release when fetched; None when there is none."""
    if not is_cache_label(libraries.found_in):
        return _library_in(libraries.lib_dir)
    release = for_rocm(libraries.rocm or "")
    try:
        found = load_hipblaslt(release.version) if release else None
    except LibraryNotFound:  # damaged: `hipmem size` says how to repair it
        return None
    return found.library if found else None


def read_version(library: Path) -> tuple[str | None, str]:
    """(version, the file that says it) from the install's files; (None, what was looked at)
    when none says it."""
    lib_dir = library.parent
    for include in (lib_dir.parent / "include", lib_dir.parent.parent / "include"):
        for name in ("hipblaslt/hipblaslt-version.h", "hipblaslt-version.h"):  # AMD's, Debian's
            header = include / name
            version = _header_version(header)
            if version is not None:
                return version, str(header)
    cmake = lib_dir / "cmake" / "hipblaslt" / "hipblaslt-config-version.cmake"
    found = re.search(r'set\s*\(\s*PACKAGE_VERSION\s+"(\d+(?:\.\d+){1,3})"', _head(cmake))
    if found:
        return found.group(1), str(cmake)
    real = Path(os.path.realpath(library))
    numbers = real.name.split(".so.", 1)[-1] if ".so." in real.name else ""
    if re.fullmatch(r"\d+(\.\d+){1,3}", numbers):
        return numbers, f"the file name {real}"
    return None, "no hipblaslt-version.h, hipblaslt-config-version.cmake or versioned file name"


def no_data_error(build: HipblasltBuild, arch: str) -> str | None:
    """The one line for an arch whose solution data is not there, or None when it is."""
    if (build.solution_dir / f"TensileLibrary_lazy_{arch}.dat").is_file():
        return None
    missing = f"TensileLibrary_lazy_{arch}.dat"
    release = build.release
    if release is not None and arch in release.solution_archs:
        return (
            f"hipBLASLt {release.version} has no solution data for {arch} here "
            f"(library/{missing}): fetch it with "
            f"`hipmem rocm fetch --rocm {release.host_rocm} --arch {arch}`"
        )
    builds = [r.version for r in HIPBLASLT_RELEASES if arch in r.solution_archs]
    if builds:
        where = f"Debian's hipBLASLt {', '.join(builds)} (`hipmem rocm fetch`)"
    else:
        where = DATA_ELSEWHERE.get(arch, "an AMD ROCm install that supports it")
        where += " (point --rocm-dir at such an install)"
    if release is not None:
        return (
            f"hipBLASLt {release.version} (Debian) has no solution data for {arch} "
            f"(missing library/{missing}); it is in {where}"
        )
    return (
        f"{build.label} at {build.place} has no solution data for {arch} "
        f"(missing {build.solution_dir / missing}); it is in {where}"
    )


def _cached_build(
    rocm: str | None,
    runs_with: Libraries,
    notice: str | None = None,
    on_demand: OnDemand | None = None,
) -> HipblasltBuild:
    release = for_rocm(rocm or "")
    if release is None:
        pairs = ", ".join(f"{r.version} with ROCm {r.host_rocm}" for r in HIPBLASLT_RELEASES)
        raise LibraryNotFound(
            f"no hipBLASLt build runs with ROCm {rocm or '(unknown)'}; hipmem has {pairs}"
        )
    found = _load_or_fetch(release, on_demand) if on_demand else load_hipblaslt(release.version)
    if found is None:
        raise LibraryNotFound(
            f"hipBLASLt {release.version} is not in the cache; run "
            f"`hipmem rocm fetch --rocm {release.host_rocm}` (it fetches hipBLASLt too)"
        )
    from_debian = f"Debian's package libhipblaslt1 {release.pins['libhipblaslt1']}"
    return HipblasltBuild(
        release.version,
        from_debian,
        found.library,
        cache_label(found.changed),  # `changed`: this request downloaded it
        runs_with,
        release,
        notice,
    )


def _load_or_fetch(
    release: HipblasltRelease, on_demand: OnDemand, missing: str | None = None
) -> OfflineHipblaslt:
    """The cached build, fetched first when it is missing or damaged, or lacks the solution
    data of the device's arch. `missing`: what to say when it is not in the cache."""
    try:
        found = load_hipblaslt(release.version)
    except LibraryNotFound as err:
        if on_demand.offline_by is not None:
            raise  # its message names the file and the fetch that repairs it
        return on_demand.hipblaslt(release, damage_reason(err, f"the cached {release.label}"))
    if found is None:
        return on_demand.hipblaslt(release, missing or f"{release.label} is not in the cache")
    if on_demand.lacks_solution_data(release, found.archs):
        why = f"the cached {release.label} has no solution data for {on_demand.arch}"
        return on_demand.hipblaslt(release, why)
    return found


def _fallback(libraries: Libraries, on_demand: OnDemand | None = None) -> HipblasltBuild:
    """A local install without hipBLASLt: Debian's build of its release, saying so."""
    where = f"{libraries.found_in} ({libraries.lib_dir})"
    release = for_rocm(libraries.rocm or "")
    if release is not None and on_demand is not None:
        missing = (
            f"ROCm {libraries.rocm} at {where} has no hipBLASLt (no libhipblaslt.so.* there), "
            f"and Debian's {release.label} for it is not in the cache"
        )
        _load_or_fetch(release, on_demand, missing)
    if release is None or load_hipblaslt(release.version) is None:
        if release is None:
            fix = "hipmem has no Debian hipBLASLt for that release either"
        else:
            fix = (
                f"Debian's hipBLASLt {release.version} for it is not cached either: run "
                f"`hipmem rocm fetch --rocm {release.host_rocm}`"
            )
        raise LibraryNotFound(
            f"ROCm {libraries.rocm or '(unknown release)'} at {where} has no hipBLASLt "
            f"(no libhipblaslt.so.* there), and {fix}"
        )
    notice = (
        f"ROCm {libraries.rocm} at {where} has no hipBLASLt (no libhipblaslt.so.* there): "
        f"hipBLASLt calls are sized with Debian's hipBLASLt {release.version} from the cache"
    )
    return _cached_build(libraries.rocm, cached_libraries(release.host_rocm), notice)


def _library_in(lib_dir: Path) -> Path | None:
    """`libhipblaslt.so.N` (the name the loader records), lowest N first."""
    names = sorted(
        p for p in lib_dir.glob("libhipblaslt.so.*") if p.name.count(".") == 2 and p.exists()
    )
    return names[0] if names else None


def _check_hip_runtime(library: Path, libraries: Libraries) -> None:
    """One worker loads rocBLAS and hipBLASLt: both must link the same HIP runtime."""
    hip = [name for name in needed_libraries(library) if name.startswith("libamdhip64.so")]
    if hip and hip[0] != libraries.hip_soname:
        raise MixedReleases(
            f"{library.parent}: {library.name} links {hip[0]} but the rocBLAS there links "
            f"{libraries.hip_soname}; one release per directory"
        )


def _header_version(header: Path) -> str | None:
    text = _head(header)
    names = ("MAJOR", "MINOR", "PATCH")
    parts = [re.search(rf"HIPBLASLT_VERSION_{name}\s+(\d+)", text) for name in names]
    if not all(parts):
        return None
    return ".".join(match.group(1) for match in parts if match)


def _head(path: Path) -> str:
    """The start of a small text file, or "" when it cannot be read."""
    try:
        with path.open("rb") as handle:
            return handle.read(_VERSION_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
