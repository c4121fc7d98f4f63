"""Find librocblas and librocsolver, in a documented order, and say where from.

Order: an explicit directory (`--rocm-dir`, then `HIPMEM_ROCM_LIBDIR`), `$ROCM_PATH/lib`,
`$ROCM_HOME/lib`, `/opt/rocm/lib`, the loader path (`LD_LIBRARY_PATH`, then `ldconfig -p`),
and last the offline cache filled by `hipmem rocm fetch`. The first place holding rocBLAS
wins. When none does, the error lists every place tried.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sizing.errors import LibraryNotFound
from sizing.rocm_fetch import load_offline

LIBDIR_ENV = "HIPMEM_ROCM_LIBDIR"
LOADER_NAME = "ld-linux-x86-64.so.2"


@dataclass(frozen=True)
class Libraries:
    """Where the vendor libraries are, and how a process must be started to load them."""

    rocblas: Path
    rocsolver: Path | None
    found_in: str  # the place, as the search order names it
    lib_dir: Path
    loader: Path | None  # a dynamic loader to start the worker with (newer glibc), if needed
    include_dir: Path | None  # HIP headers, for building the virtual device

    @property
    def tensile_dir(self) -> Path | None:
        found = sorted(self.lib_dir.glob("rocblas/*/library"))
        return found[-1] if found else None


def locate(explicit_dir: Path | None = None) -> Libraries:
    """The first place in the search order that holds rocBLAS."""
    tried: list[str] = []
    for label, directory in _candidates(explicit_dir):
        tried.append(f"{label} ({directory})")
        found = _libraries_in(label, directory)
        if found:
            return found
    offline = load_offline()
    if offline is not None:
        found = _libraries_in("offline cache (hipmem rocm fetch)", offline.lib_dir)
        if found:
            return found
    tried.append("offline cache (empty: run `hipmem rocm fetch`)")
    raise LibraryNotFound(
        "rocBLAS not found; tried "
        + "; ".join(tried)
        + ". Run `hipmem rocm fetch` to download Debian's build into the cache, "
        "or point --rocm-dir / HIPMEM_ROCM_LIBDIR at a ROCm lib directory"
    )


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


def _pick(directory: Path, stem: str) -> Path | None:
    """libX.so.N (what the loader records) before libX.so, before anything else."""
    names = sorted(directory.glob(f"{stem}.so*"), key=lambda p: (p.name.count("."), p.name))
    versioned = [path for path in names if path.name.count(".") == 2]
    chosen = (versioned or names)[:1]
    return chosen[0] if chosen and chosen[0].exists() else None


def _libraries_in(label: str, directory: Path) -> Libraries | None:
    if not directory.is_dir():
        return None
    rocblas = _pick(directory, "librocblas")
    if rocblas is None:
        return None
    loader = directory / LOADER_NAME
    return Libraries(
        rocblas=rocblas,
        rocsolver=_pick(directory, "librocsolver"),
        found_in=label,
        lib_dir=directory,
        loader=loader if loader.is_file() else None,
        include_dir=_hip_headers(directory),
    )


def _hip_headers(lib_dir: Path) -> Path | None:
    """HIP headers beside the libraries (a ROCm tree or the offline root), else the cache's."""
    for candidate in (lib_dir.parent / "include", lib_dir.parent.parent / "include"):
        if (candidate / "hip" / "hip_runtime_api.h").is_file():
            return candidate
    offline = load_offline()
    return offline.include_dir if offline else None
