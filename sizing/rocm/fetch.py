"""Offline ROCm: fetch Debian's builds of rocBLAS and rocSOLVER into the user cache.

Size queries need the vendor libraries but no GPU. Debian ships rocBLAS/rocSOLVER as ordinary
packages, so this module resolves them by package name and pinned version with apt (a private
configuration: the machine's own apt state is never touched), downloads them itself
(resumable, verified against the SHA256 from the signed archive index, with a progress
callback), and unpacks only what queries read: shared libraries, headers, and the gemm
(Tensile) `.dat` metadata of the archs asked for. GPU code objects are never unpacked.

Each ROCm release (`sizing.rocm_releases`) has its own part of the cache, so several can sit
side by side:

    <cache>/rocm/apt/              the private apt configuration and index (sid + experimental)
    <cache>/rocm/fetch.lock        held by a running fetch: a second one waits for it
    <cache>/rocm/<release>/root/   the unpacked tree (usr/lib/x86_64-linux-gnu, usr/include)
    <cache>/rocm/<release>/debs/   downloads in progress; a .deb is deleted once unpacked
    <cache>/rocm/<release>/manifest.json   what was unpacked: packages, archs, and every
                                   file with its size and SHA256, so a damaged tree is found

Debian's builds need a newer glibc than older hosts have, so sid's own libc, libstdc++ and
dynamic loader are unpacked too; `sizing.worker_process` starts the query worker through that
loader. A fetch that is already complete does nothing but check the tree, offline.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.atomic_write import write_text_atomically
from hipmem._core.cache_lock import cache_lock
from hipmem._core.cache_root import cache_dir
from hipmem._core.progress import ProgressCallback, no_progress

from ..errors import FetchError, LibraryNotFound, PinnedVersionGone
from .elf_file import section_range
from .releases import (
    BASE_SUITE,
    NEWEST,
    RELEASES,
    Release,
    find_release,
    sort_key,
)

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SUITES = ("sid", "experimental")

LIB_SUBDIR = "usr/lib/x86_64-linux-gnu"
# How a tree came into the cache, as answers say where their libraries came from.
BY_COMMAND = "hipmem rocm fetch"
ON_FIRST_USE = "fetched on first use"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 2


@dataclass(frozen=True)
class PackageFile:
    """One .deb as apt resolved it."""

    name: str
    url: str
    filename: str
    size_bytes: int
    sha256: str

    @property
    def version(self) -> str:
        # Debian file names escape the epoch colon as %3a.
        return self.filename.split("_")[1].replace("%3a", ":")


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
        """Files missing or changed since the fetch: by size (cheap), or also by SHA256."""
        return tree_damage(self.root, self.files, hashes=hashes, rehash=rehash)


VERIFIED_NAME = "verified.json"


def tree_damage(
    root: Path, files: dict[str, list[Any]], *, hashes: bool, rehash: bool = False
) -> list[str]:
    """The recorded files ([size, sha256, ...] by path under `root`) that are missing, of
    another size, or (`hashes`) of another SHA256. What is read is what a query would load,
    through a link if one is there (a link to the same bytes is no damage); a repair never
    writes through one (`unpack`).

    A file hashed intact is noted in `verified.json` beside `root` with its inode, size and
    change time: while those stay, a fetch with nothing to do need not read it again (any
    write to it changes them). `rehash` reads every file anyway (`hipmem cache verify`)."""
    verified = _read_verified(root) if hashes and not rehash else {}
    stamps: dict[str, list[int]] = {}
    damaged = []
    for relative, entry in files.items():
        path = root / relative
        size, digest, skip = entry[0], entry[1], entry[3:5]
        try:
            info = path.stat()
            whole = stat.S_ISREG(info.st_mode) and info.st_size == size
            stamp = [info.st_ino, info.st_size, info.st_ctime_ns, info.st_mtime_ns]
            if whole and hashes and verified.get(relative) != stamp:
                whole = _sha256(path, skip) == digest
            if whole:
                stamps[relative] = stamp
            else:
                damaged.append(relative)
        except OSError:
            damaged.append(relative)
    if hashes:
        with contextlib.suppress(OSError):
            write_text_atomically(root.parent / VERIFIED_NAME, json.dumps(stamps))
    return damaged


def _read_verified(root: Path) -> dict[str, list[int]]:
    try:
        data = json.loads((root.parent / VERIFIED_NAME).read_text())
        return {str(k): list(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


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

    A damaged cache (a manifest cut short, a library truncated) is an error that says to
    run the fetch again, which repairs it."""
    manifest = offline_dir(release) / MANIFEST_NAME
    if not manifest.is_file():
        return None
    found = _read_manifest(manifest)
    if found is None or not _is_complete(found, find_release(release)):
        raise LibraryNotFound(
            f"the cached ROCm {release} in {manifest.parent} is incomplete or damaged; "
            f"run `hipmem rocm fetch --rocm {release}` to repair it"
        )
    damaged = found.damaged_files()
    if damaged:
        raise LibraryNotFound(
            f"the cached ROCm {release} is damaged ({damaged[0]} changed since it was fetched); "
            f"run `hipmem rocm fetch --rocm {release}` to repair it"
        )
    return found


def cached_releases() -> list[str]:
    """Releases with a manifest in the cache, oldest first (complete or not)."""
    base = rocm_dir()
    names = [r.name for r in RELEASES if (base / r.name / MANIFEST_NAME).is_file()]
    return sorted(names, key=sort_key)


def cached_archs(release: str) -> list[str] | None:
    """The archs whose gemm data the cache holds for `release`; None when it holds none of it."""
    found = _read_manifest(offline_dir(release) / MANIFEST_NAME)
    return found.archs if found is not None else None


def legacy_dirs() -> list[Path]:
    """Trees of hipmem's earlier cache layout (`rocm/debian-sid`), which nothing reads now."""
    return sorted(path for path in rocm_dir().glob("debian-*") if path.is_dir())


def _read_manifest(path: Path) -> OfflineRocm | None:
    try:
        data = json.loads(path.read_text())
        if data.get("format") != MANIFEST_FORMAT:
            return None
        return OfflineRocm(
            root=path.parent / "root",
            release=str(data["release"]),
            archs=list(data["archs"]),
            packages=dict(data["packages"]),
            files={str(k): list(v) for k, v in data["files"].items()},
            fetched_by=str(data.get("fetched_by", "")),
            fetched_at=str(data.get("fetched_at", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # cut short or edited: the fetch rebuilds it


def _is_complete(found: OfflineRocm, release: Release) -> bool:
    pins = release.pins
    has_all = all(name in found.packages for name in release.packages)
    pinned = all(found.packages.get(name) == version for name, version in pins.items())
    return has_all and pinned and found.loader.is_file()


def _write_manifest(found: OfflineRocm) -> None:
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
    with _fetch_lock(notice or (lambda message: None)):
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
    before = _read_manifest(base / MANIFEST_NAME)
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

        _download(package, deb, on_bytes)
        done_bytes += package.size_bytes
        report(done_bytes, total_bytes, f"unpacking {package.name}")
        patterns = _wanted_members(package.name, archs, release)
        unpacked = unpack(deb, state.root, patterns, package.name)
        state.files.update(unpacked)
        state.packages[package.name] = package.version
        _write_manifest(state)  # progress survives an interruption
        deb.unlink()  # verified and unpacked: the tree and the manifest are what stays
    shutil.rmtree(debs, ignore_errors=True)
    state.archs = archs  # only now: an interrupted fetch must not look as if it had them all
    if state.changed or not state.fetched_at:
        state.fetched_at = _now()
    _write_manifest(state)
    if not _is_complete(state, release):
        raise FetchError(f"ROCm {release.name} unpacked without a dynamic loader; run again")
    return state


def _now() -> str:
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


def _fetch_lock(notice: Callable[[str], None]) -> contextlib.AbstractContextManager[None]:
    """One fetch at a time per cache: downloads, apt's index and the tree are shared."""
    return cache_lock(rocm_dir(), "hipmem rocm fetch", notice)


# ---- resolving package names to files ------------------------------------------------------


def _apt_options(apt_dir: Path) -> list[str]:
    return [
        f"-oDir::Etc::SourceList={apt_dir / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={apt_dir / 'lists'}",
        f"-oDir::Cache={apt_dir / 'cache'}",
        "-oAPT::Architecture=amd64",
        "-oAPT::Architectures=amd64",
        "-oAcquire::Languages=none",
        "-oDebug::NoLocking=1",
    ]


def resolve_packages(apt_dir: Path, release: Release, mirror: str) -> list[PackageFile]:
    """Ask apt, in a private configuration, which files the pinned packages are today."""
    if shutil.which("apt-get") is None:
        raise FetchError(
            "hipmem rocm fetch needs apt-get (Debian or Ubuntu); elsewhere install ROCm "
            "and point HIPMEM_ROCM_LIBDIR at its lib directory"
        )
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    # The archive index is checked against Debian's signing key when the keyring is here.
    trust = f"signed-by={DEBIAN_KEYRING}" if DEBIAN_KEYRING.is_file() else "trusted=yes"
    sources = "".join(f"deb [{trust}] {mirror} {suite} main\n" for suite in SUITES)
    write_text_atomically(apt_dir / "sources.list", sources)
    options = _apt_options(apt_dir)
    _update_index(apt_dir, options, sources)
    offered = _offered_versions(options, [name for name, _ in release.pinned])
    _check_pins(release, offered)
    wanted = [f"{name}={version}" for name, version in release.pinned]
    wanted += [f"{name}/{BASE_SUITE}" for name in release.packages if name not in release.pins]
    listing = _run(["apt-get", *options, "--print-uris", "download", *wanted], "apt-get")
    return _parse_print_uris(listing, release.packages)


_INDEX_FRESH_S = 600  # one `hipmem rocm fetch --rocm 6.4,7.2` updates the index once


def _update_index(apt_dir: Path, options: list[str], sources: str) -> None:
    """`apt-get update`, unless this configuration's index was updated minutes ago."""
    marker = apt_dir / "updated"
    with contextlib.suppress(OSError):
        fresh = time.time() - marker.stat().st_mtime < _INDEX_FRESH_S
        if fresh and marker.read_text() == sources:
            return
    _run(["apt-get", *options, "update"], "apt-get update")
    write_text_atomically(marker, sources)


def _offered_versions(options: list[str], names: list[str]) -> dict[str, list[str]]:
    """Package -> the versions the archive offers now (`apt-cache madison`)."""
    listing = _run(["apt-cache", *options, "madison", *names], "apt-cache madison")
    offered: dict[str, list[str]] = {name: [] for name in names}
    for line in listing.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) >= 3 and parts[0] in offered:
            suite = parts[2].split()[-3].rsplit("/", 1)[0] if len(parts[2].split()) >= 3 else ""
            offered[parts[0]].append(f"{parts[1]} ({suite})" if suite else parts[1])
    return offered


def _check_pins(release: Release, offered: dict[str, list[str]]) -> None:
    """A pinned version that left the archive is one line naming what is there now."""
    for name, version in release.pinned:
        versions = offered.get(name, [])
        if not any(entry.split(" ")[0] == version for entry in versions):
            now = ", ".join(versions) if versions else "nothing"
            raise PinnedVersionGone(
                f"ROCm {release.name}: Debian's archive no longer offers {name} {version} "
                f"(it offers {now}); hipmem pins that version and fetches no other"
            )


def _parse_print_uris(listing: str, packages: tuple[str, ...]) -> list[PackageFile]:
    """Lines look like `'URL' FILENAME SIZE SHA256:HEX`."""
    files = []
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) != 4 or not parts[0].startswith("'") or not parts[3].startswith("SHA256:"):
            continue
        filename = parts[1]
        files.append(
            PackageFile(
                name=filename.split("_")[0],
                url=parts[0].strip("'"),
                filename=filename,
                size_bytes=int(parts[2]),
                sha256=parts[3].removeprefix("SHA256:"),
            )
        )
    missing = set(packages) - {file.name for file in files}
    if missing:
        raise FetchError(f"the archive has no package {', '.join(sorted(missing))}")
    return sorted(files, key=lambda file: packages.index(file.name))


def _run(command: list[str], what: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as err:
        raise FetchError(f"{what} could not start: {err}") from err
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise FetchError(f"{what} failed (exit {done.returncode}): {last}")
    return done.stdout


# ---- downloading ---------------------------------------------------------------------------

_CHUNK_BYTES = 1 << 20


def _download(file: PackageFile, target: Path, on_bytes: Callable[[int], None]) -> None:
    """Resume a `.part` file with an HTTP range request; verify the hash before renaming.
    A complete file left by an interrupted fetch is checked against the hash again."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_file():
        if target.stat().st_size == file.size_bytes and _sha256(target) == file.sha256:
            return
        target.unlink()  # damaged since it was verified: fetch it again
    partial = target.with_name(target.name + ".part")
    have = partial.stat().st_size if partial.exists() else 0
    if have >= file.size_bytes:
        partial.unlink()
        have = 0
    request = urllib.request.Request(file.url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            if have and response.status != 206:
                have = 0  # the server ignored the range: start over
            with partial.open("ab" if have else "wb") as out:
                received = have
                while chunk := response.read(_CHUNK_BYTES):
                    out.write(chunk)
                    received += len(chunk)
                    on_bytes(received)
    except OSError as err:
        raise FetchError(f"downloading {file.url} failed: {err} (run again to resume)") from err
    if _sha256(partial) != file.sha256:
        partial.unlink()
        raise FetchError(f"{file.filename} does not match the archive's SHA256; run again")
    partial.replace(target)


def _sha256(path: Path, skip: list[int] | None = None) -> str:
    """SHA256 of the file, leaving out the byte range `skip` ([start, end]) when given."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            if skip and stream.tell() > skip[0]:
                digest.update(chunk[: len(chunk) - (stream.tell() - skip[0])])
                stream.seek(skip[1])
                skip = None
            else:
                digest.update(chunk)
    return digest.hexdigest()


# ---- unpacking -----------------------------------------------------------------------------


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


def unpack(deb: Path, root: Path, patterns: list[str], package: str) -> dict[str, list[Any]]:
    """Extract the members matching `patterns`; returns each regular file's size and hash."""
    if root.is_symlink():
        root.unlink()  # planted: the tree is never written through a link out of the cache
    root.mkdir(parents=True, exist_ok=True)
    if shutil.which("dpkg-deb") is None:
        raise FetchError("unpacking needs dpkg-deb (package dpkg)")
    extracted: dict[str, list[Any]] = {}
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
            for member in archive:
                if any(_matches(member.name, pattern) for pattern in patterns):
                    target = root / member.name
                    _clear_planted(root, member.name)
                    if member.issym() and target.is_symlink():
                        target.unlink()  # re-unpacking over an earlier tree
                    archive.extract(member, root, filter=_keep_links)
                    if member.isfile():
                        dropped = drop_gpu_code(target) if ".so" in target.name else None
                        relative = os.path.normpath(member.name)
                        entry = [member.size, _sha256(target, dropped), package]
                        extracted[relative] = entry + (dropped or [])
    if proc.returncode != 0:
        raise FetchError(f"dpkg-deb could not read {deb} (delete it and run again)")
    return extracted


def _clear_planted(root: Path, name: str) -> None:
    """Remove a link found where the member or one of its folders goes: the tree's own links
    are the package's (recreated as it unpacks), so one there now was planted, and writing
    through it would leave the cache. Never followed, it does not stop a repair."""
    parts = [part for part in Path(os.path.normpath(name)).parts if part not in (".", "..")]
    inside = root.resolve()
    path = root
    for depth, part in enumerate(parts):
        path = path / part
        if not path.is_symlink():
            if not path.exists():
                return
            continue
        last = depth == len(parts) - 1
        if last or not path.resolve().is_relative_to(inside):
            path.unlink()  # a folder link within the tree is the package's own: kept


_FALLOC_FL_KEEP_SIZE = 1
_FALLOC_FL_PUNCH_HOLE = 2
_GPU_CODE_SECTION = ".hip_fatbin"


def drop_gpu_code(library: Path) -> list[int] | None:
    """Punch the GPU code (the `.hip_fatbin` section: 90% of rocBLAS, 97% of rocSOLVER) out of
    a library's disk blocks; returns the [start, end) byte range dropped, or None.

    Size queries never read it (the stand-in runtime registers code objects as no-ops), and
    the file keeps its size and layout, so the loader maps it as before: the dropped range
    reads as zeros and takes no disk. Where the filesystem cannot punch holes, nothing changes.
    """
    found = section_range(library, _GPU_CODE_SECTION)
    if found is None:
        return None
    page = 4096
    start = -(-found[0] // page) * page  # whole pages inside the section only
    end = (found[0] + found[1]) // page * page
    if end <= start:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    with library.open("r+b") as stream:
        mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
        if libc.fallocate(stream.fileno(), mode, start, end - start) != 0:
            return None  # e.g. EOPNOTSUPP: the library stays whole, which is only bigger
    return [start, end]


def _matches(name: str, pattern: str) -> bool:
    """Glob match that never crosses a `/` (so `lib/*.so*` skips `lib/rocblas/x.so-gfx`),
    except a trailing `/**`, which takes the whole subtree."""
    if pattern.endswith("/**"):
        return name.startswith(pattern[:-2])
    directory, _, base = pattern.rpartition("/")
    name_directory, _, name_base = name.rpartition("/")
    return fnmatch.fnmatch(name_directory, directory) and fnmatch.fnmatch(name_base, base)


def _keep_links(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's 'data' filter (nothing lands outside `dest`), dropping absolute symlinks,
    which would point into the host's own system; the libraries' own links are relative.
    Files keep the umask's permissions (a cache shared by a team stays readable)."""
    if member.issym() and member.linkname.startswith("/"):
        return None
    return tarfile.data_filter(member, dest)
