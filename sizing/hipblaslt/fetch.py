"""Fetch Debian's hipBLASLt builds into their own part of the cache.

    <cache>/hipblaslt/<version>/root/      libhipblaslt.so*, headers, and per arch asked for
                                           hipblaslt/library/*_<arch>.dat and
                                           Kernels.so-000-<arch>.hsaco (hipblasLtCreate opens it
                                           by path); the other GPU code objects are skipped
    <cache>/hipblaslt/<version>/manifest.json   packages, archs, every file's size and SHA256

The downloads reuse the ROCm fetch's private apt configuration, lock, resumable verified
download and unpacking (`sizing/rocm/`: fetch.py, apt.py, unpack.py). A hipBLASLt build
runs on the runtime tree of the ROCm release whose HIP soname it links
(`HipblasltRelease.host_rocm`), so fetching it fetches that release too (a no-op when it
is there).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.atomic_write import write_text_atomically
from hipmem._core.cache_root import cache_dir
from hipmem._core.progress import ProgressCallback, no_progress

from ..errors import CacheDamaged, FetchError, LibraryNotFound, PinnedVersionGone
from ..rocm import apt
from ..rocm import fetch as rocm_fetch
from ..rocm.tree_check import checked_on_use, tree_damage
from ..rocm.unpack import unpack
from .releases import HIPBLASLT_RELEASES, HipblasltRelease, find_hipblaslt

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
LIBRARY_SUBDIR = "hipblaslt/library"


@dataclass
class OfflineHipblaslt:
    root: Path
    version: str
    archs: list[str]
    packages: dict[str, str] = field(default_factory=dict)
    files: dict[str, list[Any]] = field(default_factory=dict)
    fetched_by: str = ""  # rocm_fetch.BY_COMMAND or ON_FIRST_USE
    fetched_at: str = ""
    changed: bool = False  # whether this fetch downloaded anything (not saved)

    @property
    def lib_dir(self) -> Path:
        return self.root / rocm_fetch.LIB_SUBDIR

    @property
    def library(self) -> Path:
        return self.lib_dir / "libhipblaslt.so.1"

    @property
    def solution_dir(self) -> Path:
        return self.lib_dir / LIBRARY_SUBDIR

    def damaged_files(self, *, hashes: bool = False, rehash: bool = False) -> list[str]:
        """Files missing, replaced by a link, or changed since the fetch (by size; by SHA256
        too with `hashes`, as a fetch checks them)."""
        return tree_damage(self.root, self.files, hashes=hashes, rehash=rehash)


def hipblaslt_dir() -> Path:
    return cache_dir() / "hipblaslt"


def load_hipblaslt(version: str) -> OfflineHipblaslt | None:
    """The cached build, or None; a damaged one is an error saying how to repair it.
    Checked against the manifest's hashes on first use in the process, as ROCm's
    (`rocm_fetch.load_offline`)."""
    manifest = hipblaslt_dir() / version / MANIFEST_NAME
    if not manifest.is_file():
        return None
    found = read_manifest(manifest)
    release = find_hipblaslt(version)
    repair = f"hipmem rocm fetch --rocm {release.host_rocm}"
    if found is None or any(found.packages.get(n) != v for n, v in release.pinned):
        raise LibraryNotFound(
            f"the cached hipBLASLt {version} in {manifest.parent} is incomplete; "
            f"run `{repair}` to repair it"
        )
    damaged = checked_on_use(found.root, found.files, manifest)
    if damaged:
        raise CacheDamaged(f"the cached hipBLASLt {version}", damaged[0], repair)
    return found


def cached_hipblaslt() -> list[str]:
    return [
        r.version
        for r in HIPBLASLT_RELEASES
        if (hipblaslt_dir() / r.version / MANIFEST_NAME).is_file()
    ]


def read_manifest(path: Path) -> OfflineHipblaslt | None:
    fields = rocm_fetch.manifest_fields(path, MANIFEST_FORMAT, "version")
    return None if fields is None else OfflineHipblaslt(**fields)


def write_manifest(found: OfflineHipblaslt) -> None:
    payload = {
        "format": MANIFEST_FORMAT,
        "version": found.version,
        "archs": found.archs,
        "packages": found.packages,
        "fetched_by": found.fetched_by,
        "fetched_at": found.fetched_at,
        "files": found.files,
    }
    write_text_atomically(
        hipblaslt_dir() / found.version / MANIFEST_NAME, json.dumps(payload, indent=1)
    )


def fetch_hipblaslt(
    version: str,
    archs: Iterable[str] | None = None,
    mirror: str = apt.DEFAULT_MIRROR,
    progress: ProgressCallback | None = None,
    notice: Callable[[str], None] | None = None,
    plan: rocm_fetch.PlanCallback | None = None,
    by: str = rocm_fetch.BY_COMMAND,
) -> OfflineHipblaslt:
    """Download and unpack one hipBLASLt build (and its host ROCm release's runtime tree).
    `archs`: whose solution data to unpack (default: every arch the build has). Safe to run
    again: a complete fetch covering `archs` does nothing. `plan` hears what each part will
    download before it starts (as in `rocm_fetch.fetch`)."""
    release = find_hipblaslt(version, parameter="hipblaslt")
    chosen = sorted(set(archs) if archs is not None else set(release.solution_archs))
    # Archs the build has no data for are left out (a call for one says so when asked).
    chosen = [arch for arch in chosen if arch in release.solution_archs]
    rocm_fetch.fetch(release.host_rocm, [], mirror, progress, notice, plan, by)
    report: ProgressCallback = progress or no_progress
    with rocm_fetch.fetch_lock(notice or (lambda message: None)):
        return _fetch_locked(release, chosen, mirror, report, plan or (lambda planned: None), by)


def _fetch_locked(
    release: HipblasltRelease,
    archs: list[str],
    mirror: str,
    report: ProgressCallback,
    plan: rocm_fetch.PlanCallback,
    by: str,
) -> OfflineHipblaslt:
    base = hipblaslt_dir() / release.version
    state = read_manifest(base / MANIFEST_NAME)
    if state is not None:
        archs = sorted(set(archs) | set(state.archs))
        report(0, None, f"checking the cached {release.label}")
        damaged = state.damaged_files(hashes=True)
        owners = {state.files[relative][2] for relative in damaged}
        state.packages = {k: v for k, v in state.packages.items() if k not in owners}
        complete = all(state.packages.get(n) == v for n, v in release.pinned)
        if complete and set(archs) == set(state.archs):
            return state
    else:
        state = OfflineHipblaslt(root=base / "root", version=release.version, archs=[])
    files = _resolve(release, mirror)
    todo = [
        f
        for f in files
        if state.packages.get(f.name) != f.version
        or (f.name == "libhipblaslt1" and not set(archs) <= set(state.archs))
    ]
    if todo:
        plan(rocm_fetch.FetchPlan(release.label, todo, archs, base))
        state.fetched_by, state.changed = by, True
    total_bytes = sum(f.size_bytes for f in todo)
    done_bytes = 0
    for package in todo:
        deb = base / "debs" / package.filename

        def on_bytes(received: int, start: int = done_bytes, name: str = package.name) -> None:
            report(start + received, total_bytes, name)

        apt.download(package, deb, on_bytes)
        done_bytes += package.size_bytes
        report(done_bytes, total_bytes, f"unpacking {package.name}")
        patterns = _wanted_members(package.name, archs)
        state.files.update(unpack(deb, state.root, patterns, package.name))
        state.packages[package.name] = package.version
        write_manifest(state)
        deb.unlink()
    shutil.rmtree(base / "debs", ignore_errors=True)
    state.archs = archs
    if state.changed or not state.fetched_at:
        state.fetched_at = rocm_fetch.iso_now()
    write_manifest(state)
    return state


def _wanted_members(package: str, archs: list[str]) -> list[str]:
    if package.endswith("-dev"):
        return ["./usr/include/hipblaslt/**", "./usr/include/hipblaslt-*.h"]
    library = f"./{rocm_fetch.LIB_SUBDIR}/{LIBRARY_SUBDIR}/"
    patterns = [f"./{rocm_fetch.LIB_SUBDIR}/libhipblaslt.so*"]
    patterns += [f"{library}TensileLiteLibrary_lazy_Mapping.dat", f"{library}hipblaslt*"]
    for arch in archs:
        patterns += [f"{library}*_{arch}.dat", f"{library}Kernels.so-000-{arch}.hsaco"]
    return patterns


def _resolve(release: HipblasltRelease, mirror: str) -> list[apt.PackageFile]:
    """The pinned packages' files, from the ROCm fetch's private apt configuration."""
    apt_dir = rocm_fetch.rocm_dir() / "apt"
    options = apt.apt_options(apt_dir)
    if not (apt_dir / "sources.list").is_file():
        raise FetchError("the ROCm fetch's apt configuration is missing; run `hipmem rocm fetch`")
    apt.update_index(apt_dir, options, (apt_dir / "sources.list").read_text())
    names = [name for name, _ in release.pinned]
    offered = apt.offered_versions(options, names)
    for name, version in release.pinned:
        versions = offered.get(name, [])
        if not any(entry.split(" ")[0] == version for entry in versions):
            raise PinnedVersionGone(
                f"hipBLASLt {release.version}: Debian's archive no longer offers {name} "
                f"{version} (it offers {', '.join(versions) or 'nothing'}); hipmem pins that "
                "version and fetches no other"
            )
    wanted = [f"{name}={version}" for name, version in release.pinned]
    listing = apt.run_tool(["apt-get", *options, "--print-uris", "download", *wanted], "apt-get")
    return apt.parse_print_uris(listing, tuple(names))
