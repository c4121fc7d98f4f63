"""Offline ROCm: fetch Debian's builds of rocBLAS and rocSOLVER into the user cache.

Size queries need the vendor libraries but no GPU. Debian ships rocBLAS/rocSOLVER as ordinary
packages, so this module resolves them by package name and pinned version with apt
(`apt.py`: a private configuration; the machine's own apt state is never touched),
downloads them (resumable, verified against the SHA256 from the signed archive index, with
a progress callback), and unpacks (`unpack.py`) only what queries read: shared libraries,
headers, and the gemm (Tensile) `.dat` metadata of the archs asked for. GPU code objects
are never unpacked.

Each ROCm release (`releases.py`) has its own part of the cache, so several can sit
side by side:

    <cache>/rocm/apt/              the private apt configuration and index (sid + experimental)
    <cache>/rocm/fetch.lock        held by a running fetch: a second one waits for it
    <cache>/rocm/<release>/root/   the unpacked tree (usr/lib/x86_64-linux-gnu, usr/include)
    <cache>/rocm/<release>/debs/   downloads in progress; a .deb is deleted once unpacked
    <cache>/rocm/<release>/manifest.json   what was unpacked: packages, archs, and every
                                   file with its size and SHA256, so a damaged tree is found

Debian's builds need a newer glibc than older hosts have, so sid's own libc, libstdc++ and
dynamic loader are unpacked too; `sizing/worker/process.py` starts the query worker through that
loader. A fetch that is already complete does nothing but check the tree, offline.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.atomic_write import write_text_atomically
from hipmem._core.cache_lock import cache_lock
from hipmem._core.cache_root import cache_dir
from hipmem._core.progress import ProgressCallback, no_progress

from ..errors import CacheDamaged, FetchError, LibraryNotFound
from .apt import DEFAULT_MIRROR, PackageFile, download, resolve_packages
from .releases import (
    NEWEST,
    RELEASES,
    Release,
    find_release,
    sort_key,
)
from .tree_check import checked_on_use, tree_damage
from .unpack import unpack

LIB_SUBDIR = "usr/lib/x86_64-linux-gnu"
# How a tree came into the cache, as answers say where their libraries came from.
BY_COMMAND = "hipmem rocm fetch"
ON_FIRST_USE = "fetched on first use"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 2
MAX_MANIFEST_BYTES = 16 << 20  # a release's is 100 to 200 KB; larger is not a fetch's: unread
_HEX = "0123456789abcdef"


@dataclass
class OfflineRocm:
    """What a completed fetch of one release left in the cache."""

    root: Path
    release: str
    archs: list[str]
    packages: dict[str, str] = field(default_factory=dict)  # name -> Debian version
    # relative path -> [size_bytes, sha256, package] (+ [start, end] of the GPU code dropped
    # from a library, which the hash leaves out): every regular file the fetch unpacked
    files: dict[str, list[Any]] = field(default_factory=dict)
    fetched_by: str = ""  # BY_COMMAND or ON_FIRST_USE ("": a manifest older than the field)
    fetched_at: str = ""  # when the last fetch that changed the tree ended (ISO 8601, UTC)
    changed: bool = False  # whether this fetch downloaded anything (not saved)

    @property
    def lib_dir(self) -> Path:
        return self.root / LIB_SUBDIR

    @property
    def include_dir(self) -> Path:
        return self.root / "usr" / "include"

    @property
    def loader(self) -> Path:
        return self.lib_dir / "ld-linux-x86-64.so.2"

    @property
    def tensile_dir(self) -> Path | None:
        found = sorted(self.lib_dir.glob("rocblas/*/library"))
        return found[-1] if found else None

    @property
    def unpacked_bytes(self) -> int:
        """The files' sizes (the GPU code dropped from the libraries still counts here)."""
        return sum(int(entry[0]) for entry in self.files.values())

    def disk_bytes(self) -> int:
        """What the tree takes on disk (the dropped GPU code takes none)."""
        total = 0
        for relative in self.files:
            with contextlib.suppress(OSError):
                total += (self.root / relative).stat().st_blocks * 512
        return total

    def damaged_files(self, *, hashes: bool = False, rehash: bool = False) -> list[str]:
        """Files missing or changed since the fetch: by size (cheap), or also by SHA256
        (files whose stamp holds are not read again, unless `rehash`: `tree_check`)."""
        return tree_damage(self.root, self.files, hashes=hashes, rehash=rehash)


@dataclass(frozen=True)
class FetchPlan:
    """What a fetch is about to download, said before the first byte: `what` ("ROCm 7.2",
    "hipBLASLt 7.2.4"), the files, the archs whose data it unpacks, and where it goes."""

    what: str
    files: list[PackageFile]
    archs: list[str]
    target: Path

    @property
    def download_bytes(self) -> int:
        return sum(file.size_bytes for file in self.files)


PlanCallback = Callable[[FetchPlan], None]


def rocm_dir() -> Path:
    return cache_dir() / "rocm"


def offline_dir(release: str) -> Path:
    return rocm_dir() / release


def load_offline(release: str) -> OfflineRocm | None:
    """The cached libraries of a completed fetch of `release`, or None when there is none.

    Checked against the manifest's hashes on first use in the process (`tree_check`: a file
    whose stamp still holds is not read again). A damaged cache (a manifest cut short, a
    library truncated or edited) is an error that says to run the fetch again, which
    repairs it."""
    manifest = offline_dir(release) / MANIFEST_NAME
    if not manifest.is_file():
        return None
    found = read_manifest(manifest)
    if found is None or not _is_complete(found, find_release(release)):
        raise LibraryNotFound(
            f"the cached ROCm {release} in {manifest.parent} is incomplete or damaged; "
            f"run `hipmem rocm fetch --rocm {release}` to repair it"
        )
    damaged = checked_on_use(found.root, found.files, manifest)
    if damaged:
        raise CacheDamaged(
            f"the cached ROCm {release}", damaged[0], f"hipmem rocm fetch --rocm {release}"
        )
    return found


def cached_releases() -> list[str]:
    """Releases with a manifest in the cache, oldest first (complete or not)."""
    base = rocm_dir()
    names = [r.name for r in RELEASES if (base / r.name / MANIFEST_NAME).is_file()]
    return sorted(names, key=sort_key)


def cached_archs(release: str) -> list[str] | None:
    """The archs whose gemm data the cache holds for `release`; None when it holds none of it."""
    found = read_manifest(offline_dir(release) / MANIFEST_NAME)
    return found.archs if found is not None else None


def legacy_dirs() -> list[Path]:
    """Trees of hipmem's earlier cache layout (`rocm/debian-sid`), which nothing reads now."""
    return sorted(path for path in rocm_dir().glob("debian-*") if path.is_dir())


def read_manifest(path: Path) -> OfflineRocm | None:
    fields = manifest_fields(path, MANIFEST_FORMAT, "release")
    return None if fields is None else OfflineRocm(**fields)


def manifest_fields(path: Path, format_version: int, name_key: str) -> dict[str, Any] | None:
    """The fields every fetch manifest holds (ROCm's and hipBLASLt's), `name_key` naming the
    release or version; None when the manifest is missing, cut short, edited or of another
    format (the fetch rebuilds it)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MANIFEST_BYTES:
            return None  # a device or a pipe planted here is never read
        data = json.loads(path.read_text())
        if data.get("format") != format_version:
            return None
        files = {str(k): list(v) for k, v in data["files"].items()}
        if not all(_entry_is_sound(relative, entry) for relative, entry in files.items()):
            return None
        return {
            "root": path.parent / "root",
            name_key: str(data[name_key]),
            "archs": [str(arch) for arch in data["archs"]],
            "packages": {str(k): str(v) for k, v in dict(data["packages"]).items()},
            "files": files,
            "fetched_by": str(data.get("fetched_by", "")),
            "fetched_at": str(data.get("fetched_at", "")),
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _entry_is_sound(relative: str, entry: list[Any]) -> bool:
    """A file's entry as a fetch writes it: a path inside the tree, [size, sha256, package]
    and, for a library whose GPU code was dropped, the [start, end) range left out of the hash."""
    if relative.startswith("/") or "/../" in f"/{relative}/" or len(entry) not in (3, 5):
        return False
    size, digest, package, *skip = entry
    numbers = [size, *skip]
    if not all(type(n) is int and 0 <= n <= size for n in numbers) or not isinstance(package, str):
        return False
    if skip and skip[0] > skip[1]:
        return False
    return isinstance(digest, str) and len(digest) == 64 and not digest.strip(_HEX)


def _is_complete(found: OfflineRocm, release: Release) -> bool:
    pins = release.pins
    has_all = all(name in found.packages for name in release.packages)
    pinned = all(found.packages.get(name) == version for name, version in pins.items())
    return has_all and pinned and found.loader.is_file()


def write_manifest(found: OfflineRocm) -> None:
    payload = {
        "format": MANIFEST_FORMAT,
        "release": found.release,
        "archs": found.archs,
        "packages": found.packages,
        "unpacked_bytes": found.unpacked_bytes,
        "fetched_by": found.fetched_by,
        "fetched_at": found.fetched_at,
        "files": found.files,
    }
    write_text_atomically(offline_dir(found.release) / MANIFEST_NAME, json.dumps(payload, indent=1))


# ---- the fetch -----------------------------------------------------------------------------


def fetch(
    release: str = NEWEST.name,
    archs: Iterable[str] | None = None,
    mirror: str = DEFAULT_MIRROR,
    progress: ProgressCallback | None = None,
    notice: Callable[[str], None] | None = None,
    plan: PlanCallback | None = None,
    by: str = BY_COMMAND,
) -> OfflineRocm:
    """Download and unpack one release; returns the result (`changed`: whether anything was
    downloaded; `by` is recorded as how the tree came, when it does). Safe to run again: a complete
    fetch that covers `archs` only checks the tree (offline), an interrupted one resumes, a
    damaged one is repaired. Two fetches on one cache take turns (a lock file). `plan` hears
    what will be downloaded once that is known, before the download starts (not at all
    when nothing is)."""
    wanted = find_release(release, parameter="release")
    chosen = sorted(set(archs) if archs is not None else set(wanted.gemm_archs))
    unknown = [arch for arch in chosen if arch not in wanted.gemm_archs]
    if unknown:
        raise FetchError(
            f"ROCm {wanted.name} as Debian builds it has no gemm data for {', '.join(unknown)}; "
            f"choose from {', '.join(wanted.gemm_archs)}"
        )
    report: ProgressCallback = progress or no_progress
    with fetch_lock(notice or (lambda message: None)):
        return _fetch_locked(wanted, chosen, mirror, report, plan or (lambda planned: None), by)


def _fetch_locked(
    release: Release,
    archs: list[str],
    mirror: str,
    report: ProgressCallback,
    plan: PlanCallback,
    by: str,
) -> OfflineRocm:
    base = offline_dir(release.name)
    before = read_manifest(base / MANIFEST_NAME)
    if before is not None and before.release != release.name:
        before = None
    if before is not None:
        archs = sorted(set(archs) | set(before.archs))  # adding archs keeps the ones there
        report(0, None, "checking the cached files")
        damaged = before.damaged_files(hashes=True)
        if damaged:  # unpack the packages that own a damaged file again
            owners = {before.files[relative][2] for relative in damaged}
            before.packages = {k: v for k, v in before.packages.items() if k not in owners}
        if _is_complete(before, release) and set(archs) == set(before.archs):
            return before  # complete and intact: no network needed
    state = before or OfflineRocm(root=base / "root", release=release.name, archs=[])
    report(0, None, "reading Debian's package index")
    files = resolve_packages(rocm_dir() / "apt", release, mirror)
    todo = [f for f in files if not _unpacked(state, f, archs, release)]
    if todo:
        plan(FetchPlan(f"ROCm {release.name}", todo, archs, base))
        state.fetched_by, state.changed = by, True
    debs = base / "debs"
    total_bytes = sum(f.size_bytes for f in todo)
    done_bytes = 0
    for package in todo:
        deb = debs / package.filename

        def on_bytes(received: int, start: int = done_bytes, name: str = package.name) -> None:
            report(start + received, total_bytes, name)

        download(package, deb, on_bytes)
        done_bytes += package.size_bytes
        report(done_bytes, total_bytes, f"unpacking {package.name}")
        patterns = _wanted_members(package.name, archs, release)
        unpacked = unpack(deb, state.root, patterns, package.name)
        state.files.update(unpacked)
        state.packages[package.name] = package.version
        write_manifest(state)  # progress survives an interruption
        deb.unlink()  # verified and unpacked: the tree and the manifest are what stays
    shutil.rmtree(debs, ignore_errors=True)
    state.archs = archs  # only now: an interrupted fetch must not look as if it had them all
    if state.changed or not state.fetched_at:
        state.fetched_at = iso_now()
    write_manifest(state)
    if not _is_complete(state, release):
        raise FetchError(f"ROCm {release.name} unpacked without a dynamic loader; run again")
    return state


def iso_now() -> str:
    """Now, as a manifest's `fetched_at` says it (ISO 8601, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _unpacked(state: OfflineRocm, package: PackageFile, archs: list[str], release: Release) -> bool:
    """Already unpacked at this version, with the gemm data of every arch asked for."""
    if state.packages.get(package.name) != package.version:
        return False
    if package.name == release.rocblas_package:
        return set(archs) <= set(_archs_present(state))
    return True


def _archs_present(state: OfflineRocm) -> list[str]:
    tensile = [path for path in state.files if "/library/" in path and path.endswith(".dat")]
    return sorted({path.rsplit("_", 1)[-1].removesuffix(".dat") for path in tensile})


def fetch_lock(notice: Callable[[str], None]) -> contextlib.AbstractContextManager[None]:
    """One fetch at a time per cache: downloads, apt's index and the tree are shared."""
    return cache_lock(rocm_dir(), "hipmem rocm fetch", notice)


def _wanted_members(package: str, archs: list[str], release: Release) -> list[str]:
    """Glob patterns of the members a size query can read, per package."""
    if package.endswith("-dev"):
        return ["./usr/include/**"]
    patterns = ["./usr/lib/x86_64-linux-gnu/*.so*"]
    if package == release.rocblas_package:
        library = "./usr/lib/x86_64-linux-gnu/rocblas/*/library/"
        patterns += [f"{library}*_fallback.dat", f"{library}TensileManifest.txt"]
        patterns += [f"{library}*_{arch}.dat" for arch in archs]
    return patterns
