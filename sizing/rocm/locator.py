"""Find librocblas and librocsolver, of the ROCm release asked for, and say where from.

Places, in order: an explicit directory (`rocm_dir=`, i.e. `--rocm-dir`, then
`HIPMEM_ROCM_LIBDIR`), `$ROCM_PATH/lib`, `$ROCM_HOME/lib`, `/opt/rocm/lib`, the loader path
(`LD_LIBRARY_PATH`, then `ldconfig -p`), and last the offline cache filled by
`hipmem rocm fetch`, which may hold several releases side by side.

Which one answers:
- with a release asked for (`rocm="7.2"`): the first local place whose libraries are that
  release, else the cache's copy of it, else a usage error naming what is available;
- without: the first local place that holds rocBLAS (what that machine deploys), else the
  newest release in the cache.
An explicit directory that holds no rocBLAS is an error, never silently passed over, and a
directory whose rocBLAS and rocSOLVER belong to different releases is refused.

With an `OnDemand` (the commands pass one; `sizing.fetch_on_demand`), what the cache lacks is
fetched where the rules above would have ended in "not here": the release asked for, else
(no install, an empty cache) the newest release hipmem knows; a damaged cached release is
repaired; and a cached release without the device's arch's gemm data gets it.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from hipmem._core.close_names import did_you_mean

from ..errors import CacheDamaged, LibraryNotFound, SizingUsageError
from .elf_file import needed_libraries
from .fetch import cached_releases, load_offline
from .on_demand import OnDemand
from .releases import NEWEST, normalise, release_names, rocm_of_rocblas

LIBDIR_ENV = "HIPMEM_ROCM_LIBDIR"
LOADER_NAME = "ld-linux-x86-64.so.2"
CACHE_LABEL = "offline cache"
_EXPLICIT = ("--rocm-dir", LIBDIR_ENV)


def cache_label(downloaded_now: bool = False) -> str:
    """Where a cached tree came from, as this answer can say it truthfully: `offline cache`,
    or `offline cache (downloaded now)` when this very request downloaded (part of) it. How
    it first came into the cache (`hipmem rocm fetch`, on first use) is `hipmem cache list`'s
    `by` column: said with every answer, it read as news right after a download and as
    nothing later."""
    return f"{CACHE_LABEL} (downloaded now)" if downloaded_now else CACHE_LABEL


def is_cache_label(found_in: str) -> bool:
    return found_in.startswith(CACHE_LABEL)


class MixedReleases(SizingUsageError):
    """A library directory holds rocBLAS and rocSOLVER of different ROCm releases."""


@dataclass(frozen=True)
class Libraries:
    """Where the vendor libraries are, and how a process must be started to load them."""

    rocblas: Path
    rocsolver: Path | None
    found_in: str  # the place, as the search order names it
    lib_dir: Path
    loader: Path | None  # a dynamic loader to start the worker with (newer glibc), if needed
    include_dir: Path | None  # HIP headers, for building the virtual device
    rocm: str | None = None  # the ROCm release, e.g. "7.2" (None: not recognised)
    hip_soname: str = "libamdhip64.so.6"  # the HIP runtime this rocBLAS links
    why: str = ""  # why this one answers: asked for, the local install, newest in the cache
    other_cached: tuple[str, ...] = ()  # other releases the cache holds

    @property
    def tensile_dir(self) -> Path | None:
        found = sorted(self.lib_dir.glob("rocblas/*/library"))
        return found[-1] if found else None

    @property
    def place(self) -> str:
        """Where they came from, as an answer says it: `--rocm-dir /opt/x/lib`,
        `offline cache (downloaded now)`, `/opt/rocm/lib`."""
        return f"{self.found_in} {self.lib_dir}" if self.found_in in _EXPLICIT else self.found_in


def locate(
    explicit_dir: Path | None = None,
    rocm: str | None = None,
    on_demand: OnDemand | None = None,
) -> Libraries:
    """The libraries that answer, by the rules in the module docstring."""
    wanted = normalise(rocm) if rocm else None
    passed_over: list[str] = []
    tried: list[str] = []
    for label, directory in _candidates(explicit_dir):
        found = _libraries_in(label, directory)
        if found is None:
            if label == LIBDIR_ENV:
                raise LibraryNotFound("no librocblas there", parameter=LIBDIR_ENV,
                                      value=str(directory))  # fmt: skip
            if label in _EXPLICIT:
                raise LibraryNotFound(
                    "no librocblas there", parameter="rocm_dir", value=str(directory)
                )
            tried.append(f"{label} ({directory})")
        elif wanted is None:
            return _with(found, why="the first ROCm install found")
        elif found.rocm == wanted:
            return _with(found, why=f"asked for ROCm {wanted}")
        else:
            passed_over.append(f"{label} has ROCm {found.rocm or 'of unknown release'}")
    cached = cached_releases()
    if wanted is not None:
        if wanted in cached or (on_demand is not None and wanted in release_names()):
            found = _from_cache(wanted, on_demand)
            return _with(found, why=f"asked for ROCm {wanted}", cached=cached_releases())
        raise SizingUsageError(
            _unavailable(wanted, passed_over, cached), parameter="rocm", value=rocm
        )
    if cached:
        found = _newest_intact(cached, on_demand)
        return _with(found, why="the newest release in the cache", cached=cached)
    if on_demand is not None:
        tried.append("offline cache (empty)")
        on_demand.rocm(NEWEST.name, "rocBLAS not found; tried " + "; ".join(tried))
        return _with(_cached(NEWEST.name), why="the newest release hipmem knows, fetched")
    tried.append("offline cache (empty: run `hipmem rocm fetch`)")
    raise LibraryNotFound(
        "rocBLAS not found; tried "
        + "; ".join(tried)
        + ". Run `hipmem rocm fetch` to download Debian's build into the cache, "
        "or point --rocm-dir / HIPMEM_ROCM_LIBDIR at a ROCm lib directory"
    )


def available(explicit_dir: Path | None = None) -> list[Libraries]:
    """Every place that holds rocBLAS, in search order, then every release in the cache."""
    found: list[Libraries] = []
    for label, directory in _candidates(explicit_dir):
        libraries = _libraries_in(label, directory)
        if libraries is not None and libraries.lib_dir not in {f.lib_dir for f in found}:
            found.append(libraries)
    found += [_cached(release) for release in cached_releases()]
    return found


def _with(found: Libraries, *, why: str, cached: list[str] | None = None) -> Libraries:
    others = tuple(name for name in (cached or []) if name != found.rocm)
    return replace(found, why=why, other_cached=others)


def _newest_intact(cached: list[str], on_demand: OnDemand | None) -> Libraries:
    """The newest cached release that is complete (one being fetched, or damaged, is passed
    over); when none is, the newest one's error, which says how to repair it (or, on
    demand, the newest one repaired)."""
    first_error: LibraryNotFound | None = None
    for release in reversed(cached):
        try:
            found = _cached(release)
        except LibraryNotFound as err:
            first_error = first_error or err
            continue
        return found if on_demand is None else _from_cache(release, on_demand)
    if on_demand is not None:
        return _from_cache(cached[-1], on_demand)
    assert first_error is not None
    raise first_error


def _from_cache(release: str, on_demand: OnDemand | None) -> Libraries:
    """The cache's copy of `release`; on demand, fetched first when it is missing or
    damaged, or lacks the gemm data of the device's arch."""
    if on_demand is None:
        return _cached(release)
    try:
        offline = load_offline(release)
    except LibraryNotFound as err:
        if on_demand.offline_by is not None:
            raise  # its message names the file and the fetch that repairs it
        why = damage_reason(err, f"the cached ROCm {release}")
        return _cached(release, downloaded_now=on_demand.rocm(release, why).changed)
    if offline is None:
        why = f"ROCm {release} is not in the cache"
    elif on_demand.lacks_gemm_data(release, offline.archs):
        why = f"the cached ROCm {release} has no gemm data for {on_demand.arch}"
    else:
        return _cached(release)
    return _cached(release, downloaded_now=on_demand.rocm(release, why).changed)


def damage_reason(err: LibraryNotFound, what: str) -> str:
    """What is wrong with a cached tree, as the line before its repair says it."""
    return err.reason if isinstance(err, CacheDamaged) else f"{what} is incomplete or damaged"


def _unavailable(wanted: str, passed_over: list[str], cached: list[str]) -> str:
    here = "; ".join([*passed_over, f"the cache holds {', '.join(cached) or 'none'}"])
    if wanted in release_names():
        how = f"get it with `hipmem rocm fetch --rocm {wanted}`"
    else:
        hint = did_you_mean(wanted, [*release_names(), *cached], n=1, cutoff=0.5)
        how = f"hipmem can fetch ROCm {', '.join(release_names())} (`hipmem rocm fetch --rocm X`)"
        return f"no ROCm {wanted} here ({here}){hint + ' ' if hint else '; '}{how}"
    return f"no ROCm {wanted} here ({here}); {how}"


def cached_libraries(release: str) -> Libraries:
    """The cache's copy of one release, whatever is installed locally (hipBLASLt's fallback
    for an install without it runs on this tree)."""
    return _with(_cached(release), why=f"the cache's ROCm {release}")


def _cached(release: str, *, downloaded_now: bool = False) -> Libraries:
    offline = load_offline(release)
    found = _libraries_in(cache_label(downloaded_now), offline.lib_dir) if offline else None
    if offline is None or found is None:
        raise LibraryNotFound(
            f"the cached ROCm {release} has no librocblas; run `hipmem rocm fetch --rocm {release}`"
        )
    return replace(found, rocm=release, include_dir=offline.include_dir)


def _candidates(explicit_dir: Path | None) -> list[tuple[str, Path]]:
    places: list[tuple[str, Path]] = []
    if explicit_dir is not None:
        places.append(("--rocm-dir", explicit_dir))
    if os.environ.get(LIBDIR_ENV):
        places.append((LIBDIR_ENV, Path(os.environ[LIBDIR_ENV])))
    for variable in ("ROCM_PATH", "ROCM_HOME"):
        if os.environ.get(variable):
            places.append((f"${variable}/lib", Path(os.environ[variable]) / "lib"))
    places.append(("/opt/rocm/lib", Path("/opt/rocm/lib")))
    for entry in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        places.append(("LD_LIBRARY_PATH", Path(entry)))
    places += [("ldconfig", directory) for directory in _ldconfig_dirs()]
    return places


def _ldconfig_dirs() -> list[Path]:
    """Directories the system loader knows librocblas in."""
    try:
        listing = subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True, check=False, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(
        {
            Path(line.rsplit("=>", 1)[1].strip()).parent
            for line in listing.splitlines()
            if "librocblas.so" in line and "=>" in line
        }
    )


def _sonames(directory: Path, stem: str) -> list[Path]:
    """The `libX.so.N` names present (what the loader records), lowest N first."""
    names = [p for p in directory.glob(f"{stem}.so.*") if p.name.count(".") == 2 and p.exists()]
    return sorted(names, key=lambda p: p.name)


def _pick(directory: Path, stem: str) -> Path | None:
    """libX.so.N before libX.so, before anything else."""
    versioned = _sonames(directory, stem)
    if versioned:
        return versioned[0]
    names = sorted(directory.glob(f"{stem}.so*"), key=lambda p: (p.name.count("."), p.name))
    return names[0] if names and names[0].exists() else None


def _libraries_in(label: str, directory: Path) -> Libraries | None:
    try:
        if not directory.is_dir():
            return None
    except OSError:  # a name too long for the system (a variable of 5,000 characters)
        return None
    rocblas = _pick(directory, "librocblas")
    if rocblas is None:
        return None
    rocsolver = _pick(directory, "librocsolver")
    rocm = _check_one_release(directory, rocblas, rocsolver)
    loader = directory / LOADER_NAME
    hip = [name for name in needed_libraries(rocblas) if name.startswith("libamdhip64.so")]
    return Libraries(
        rocblas=rocblas,
        rocsolver=rocsolver,
        found_in=label,
        lib_dir=directory,
        loader=loader if loader.is_file() else None,
        include_dir=_hip_headers(directory, rocm),
        rocm=rocm,
        hip_soname=hip[0] if hip else "libamdhip64.so.6",
    )


def _check_one_release(directory: Path, rocblas: Path, rocsolver: Path | None) -> str | None:
    """The directory's ROCm release; MixedReleases when its libraries are from several."""
    sonames = _sonames(directory, "librocblas")
    if len(sonames) > 1:
        described = " and ".join(f"{p.name} ({_describe(p)})" for p in sonames)
        raise MixedReleases(f"{directory} holds {described}: one release per directory")
    rocm = rocm_of_rocblas(_rocblas_version(rocblas))
    if rocsolver is not None:
        wants = [name for name in needed_libraries(rocsolver) if name.startswith("librocblas.so")]
        if wants and wants[0] != rocblas.name:
            raise MixedReleases(
                f"{directory}: {rocsolver.name} was built for {wants[0]} but the rocBLAS here "
                f"is {rocblas.name} ({_describe(rocblas)}); one release per directory"
            )
    return rocm


def _describe(rocblas: Path) -> str:
    version = _rocblas_version(rocblas)
    return f"rocBLAS {version}, ROCm {rocm_of_rocblas(version) or '?'}"


def _rocblas_version(rocblas: Path) -> str:
    """From the header beside the libraries when there is one, else the file's real name
    (`librocblas.so.5.2` is rocBLAS 5.2; ROCm installs name it `librocblas.so.4.4.60400`)."""
    for include in (rocblas.parent.parent / "include", rocblas.parent.parent.parent / "include"):
        header = include / "rocblas" / "internal" / "rocblas-version.h"
        try:
            text = header.read_text()
        except OSError:
            continue
        parts = [re.search(rf"ROCBLAS_VERSION_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR")]
        if all(parts):
            return ".".join(match.group(1) for match in parts if match)
    real = Path(os.path.realpath(rocblas)).name
    return ".".join(real.split(".so.", 1)[-1].split(".")[:2])


def _hip_headers(lib_dir: Path, rocm: str | None) -> Path | None:
    """HIP headers beside the libraries (a ROCm tree or the offline root), else those of the
    same release in the cache."""
    for candidate in (lib_dir.parent / "include", lib_dir.parent.parent / "include"):
        if (candidate / "hip" / "hip_runtime_api.h").is_file():
            return candidate
    if rocm is not None and rocm in cached_releases():
        offline = load_offline(rocm)
        return offline.include_dir if offline else None
    return None
