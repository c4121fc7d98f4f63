"""What hipmem's cache holds, whether it is intact, and removing parts of it (`hipmem cache`).

The cache (`hipmem._core.cache_root`) holds fetched trees, each with a manifest recording
every file's size and SHA256 (ROCm releases: `sizing.rocm_fetch`; hipBLASLt builds:
`sizing.hipblaslt_fetch`; PyTorch allocators: `replay.torch_fetch`), native code built on
first use, each folder with its own record (`_core.build_cache`: the virtual GPU, the HIP
stand-in, the replay core, placeholder code objects), the private apt index of the fetches,
and the answers of repeated queries (`_core.answer_cache`). Removal takes the fetch lock of
the part it removes, so it never pulls a tree from under a running fetch; whatever is removed
is fetched or built again by the next command that needs it.

Verifying reads everything again: every fetched file against its manifest's SHA256, every
build against its record, every kept answer against its digest; and a release or build whose
fetch was interrupted (its folder there, its manifest missing, unreadable or short of
packages, a download left in `debs/`) is named as incomplete, with the fetch that completes it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hipmem._core import answer_cache, build_cache
from hipmem._core.cache_lock import cache_lock, held_elsewhere
from hipmem._core.cache_root import cache_dir
from hipmem._core.errors import UsageError
from hipmem.replay.pytorch import fetch as torch_fetch
from hipmem.replay.pytorch import release as torch_release
from hipmem.sizing.hipblaslt import fetch as hipblaslt_fetch
from hipmem.sizing.hipblaslt.releases import HIPBLASLT_RELEASES
from hipmem.sizing.rocm import fetch as rocm_fetch
from hipmem.sizing.rocm.releases import RELEASES, find_release

BUILD_KINDS = ("vcuda", "shim", "replay-core", "code-objects", "rmm", "rmm-build", "record",
               "record-torch", "record-triton")  # fmt: skip
KINDS = ("rocm", "hipblaslt", "torch", "builds", "answers", "apt")
_BUILD_WHAT = {
    "vcuda": "virtual GPU build",
    "shim": "HIP stand-in build",
    "replay-core": "replay core build",
    "code-objects": "placeholder code objects",
    "rmm": "RMM release (hipmem rmm fetch)",
    "rmm-build": "RMM virtual GPU build",
    "record": "recording stand-ins build (hipmem record)",
    "record-torch": "PyTorch for recordings (hipmem record --torch)",
    "record-triton": "Triton for recordings' torch.compile (hipmem record --torch)",
}


@dataclass
class CacheEntry:
    """One part of the cache."""

    kind: str  # one of KINDS
    name: str  # "7.2", "7.2.4", "2.11.0", a build's key
    path: Path
    disk_bytes: int
    fetched_at: str | None  # ISO 8601 UTC; for builds, when built
    what: str  # "ROCm 7.2", "hipBLASLt 7.2.4", "PyTorch 2.11.0", "virtual GPU build"
    archs: list[str] = field(default_factory=list)
    how: str = ""  # "hipmem rocm fetch", "fetched on first use", "" (not recorded)
    repair: str = ""  # the command that re-verifies and repairs it

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "name": self.name,
            "path": str(self.path),
            "disk_bytes": self.disk_bytes,
            "fetched_at": self.fetched_at,
            "archs": self.archs,
            "fetched_by": self.how or None,
        }


@dataclass(frozen=True)
class Damage:
    entry: CacheEntry
    first: str  # the first damaged file (relative) or, when incomplete, what is missing
    count: int  # damaged files (0: incomplete)
    why: str = ""  # what is wrong with `first`, when the file's name does not say it

    @property
    def state(self) -> str:
        return "damaged" if self.count else "incomplete"

    def describe(self) -> str:
        """`ROCm 7.2 in PATH is damaged (file F); repair: hipmem rocm fetch --rocm 7.2 ...`"""
        said = self.first
        if self.count:
            files = f"{self.count} files, first" if self.count > 1 else "file"
            said = f"{files} {self.first}{': ' + self.why if self.why else ''}"
        where = f"{self.entry.what} in {self.entry.path}"
        return f"{where} is {self.state} ({said}); repair: {self.entry.repair}"


def list_cache() -> list[CacheEntry]:
    """Every part of the cache, fetched trees first."""
    root = cache_dir()
    entries: list[CacheEntry] = []
    for release in _release_folders():  # with a manifest or not: a fetch interrupted too
        found = rocm_fetch.read_manifest(rocm_fetch.offline_dir(release) / "manifest.json")
        folder = rocm_fetch.offline_dir(release)
        entries.append(CacheEntry(
            "rocm", release, folder, _disk_bytes(folder),
            found.fetched_at if found else None, f"ROCm {release}",
            found.archs if found else [], found.fetched_by if found else "",
            f"hipmem rocm fetch --rocm {release} --no-hipblaslt",
        ))  # fmt: skip
    for version in _hipblaslt_folders():
        folder = hipblaslt_fetch.hipblaslt_dir() / version
        built = hipblaslt_fetch.read_manifest(folder / "manifest.json")
        host = hipblaslt_fetch.find_hipblaslt(version).host_rocm
        entries.append(CacheEntry(
            "hipblaslt", version, folder, _disk_bytes(folder),
            built.fetched_at if built else None, f"hipBLASLt {version}",
            built.archs if built else [], built.fetched_by if built else "",
            f"hipmem rocm fetch --rocm {host}",
        ))  # fmt: skip
    for version in torch_fetch.fetched_versions():
        folder = torch_fetch.torch_dir() / version
        manifest = folder / torch_fetch.MANIFEST_NAME
        entries.append(CacheEntry(
            "torch", version, folder, _disk_bytes(folder), _mtime(manifest),
            f"PyTorch {version}", how="hipmem torch fetch or first use",
            repair=f"hipmem torch fetch --torch {version}",
        ))  # fmt: skip
    for kind in BUILD_KINDS:
        base = root / kind
        if not base.is_dir():
            continue
        for folder in sorted(
            p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")
        ):
            entries.append(CacheEntry(
                "builds", f"{kind}/{folder.name}", folder, _disk_bytes(folder),
                _mtime(folder / build_cache.BUILD_MANIFEST), _BUILD_WHAT[kind],
                repair=f"hipmem rmm fetch --rmm {folder.name}" if kind == "rmm"
                else "rebuilt on its next use",
            ))  # fmt: skip
    answers = root / "answers"
    if answers.is_dir():
        entries.append(CacheEntry("answers", "answers", answers, _disk_bytes(answers),
                                  None, "kept answers",
                                  repair="hipmem cache remove --kind answers"))  # fmt: skip
    apt = rocm_fetch.rocm_dir() / "apt"
    if apt.is_dir():
        entries.append(CacheEntry("apt", "apt", apt, _disk_bytes(apt),
                                  _mtime(apt / "updated"), "Debian package index"))  # fmt: skip
    return entries


def verify_cache(progress: Callable[[str], None] | None = None) -> list[Damage]:
    """Every fetched file re-hashed, every build and kept answer checked; what is damaged or
    incomplete."""
    say = progress or (lambda what: None)
    found: list[Damage] = []
    for entry in list_cache():
        say(f"checking {entry.what}")
        damage = _damage_of(entry)
        if damage is not None:
            found.append(damage)
    return found


def _damage_of(entry: CacheEntry) -> Damage | None:
    if entry.kind in ("rocm", "hipblaslt"):
        return _fetched_tree_damage(entry)
    if entry.kind == "torch":
        fetched = torch_fetch.read_manifest(entry.path / torch_fetch.MANIFEST_NAME)
        if fetched is None:
            return Damage(entry, "manifest.json unreadable", 1)
        return _of_files(entry, fetched.damaged_files(hashes=True))
    if entry.kind == "builds":
        problem = build_cache.folder_damage(entry.path)
        return None if problem in (None, "missing") else Damage(entry, problem or "", 1)
    if entry.kind == "answers":
        return _answers_damage(entry)
    return None


def _of_files(entry: CacheEntry, damaged: list[str], why: str = "") -> Damage | None:
    return Damage(entry, damaged[0], len(damaged), why) if damaged else None


def _fetched_tree_damage(entry: CacheEntry) -> Damage | None:
    """A ROCm release or hipBLASLt build: incomplete (a fetch interrupted: no manifest, an
    unreadable one, packages missing, a download left behind), else its files re-hashed."""
    manifest = entry.path / "manifest.json"
    module = rocm_fetch if entry.kind == "rocm" else hipblaslt_fetch
    state = module.read_manifest(manifest)
    if state is not None:
        damaged = _of_files(entry, state.damaged_files(hashes=True, rehash=True))
        if damaged is not None:
            return damaged
    if state is None:
        missing = "manifest.json unreadable" if manifest.exists() else "no manifest.json"
    else:
        missing = _packages_missing(entry, state.packages)
    if (entry.path / "debs").exists():
        missing = ", ".join(filter(None, [missing, "an unfinished download in debs/"]))
    if not missing:
        return None
    if held_elsewhere(rocm_fetch.rocm_dir()):
        missing += ": a fetch is under way now; verify again once it is done"
    else:
        missing += ": its fetch was interrupted"
    return Damage(entry, missing, 0)


def _packages_missing(entry: CacheEntry, packages: dict[str, str]) -> str:
    """`3 of 9 packages missing`, or "" when every package the release pins is there."""
    if entry.kind == "rocm":
        release = find_release(entry.name)
        wanted, pinned = list(release.packages), release.pinned
    else:
        pinned = hipblaslt_fetch.find_hipblaslt(entry.name).pinned
        wanted = [name for name, _ in pinned]
    absent = [name for name in wanted if name not in packages]
    absent += [name for name, version in pinned if name in packages and packages[name] != version]
    if not absent:
        return ""
    return f"{len(absent)} of {len(wanted)} packages missing, first {absent[0]}"


def _answers_damage(entry: CacheEntry) -> Damage | None:
    """Every kept answer against its digest and the key it is kept under."""
    bad: list[tuple[str, str]] = []
    for path in sorted(entry.path.glob("*.json")):
        if not path.name.startswith("."):
            why = answer_cache.entry_damage(path)
            if why is not None:
                bad.append((path.name, why))
    return Damage(entry, bad[0][0], len(bad), bad[0][1]) if bad else None


def _release_folders() -> list[str]:
    """The releases with a folder in the cache (a manifest or not), oldest first."""
    return [r.name for r in RELEASES if rocm_fetch.offline_dir(r.name).is_dir()]


def _hipblaslt_folders() -> list[str]:
    base = hipblaslt_fetch.hipblaslt_dir()
    return [r.version for r in HIPBLASLT_RELEASES if (base / r.version).is_dir()]


def remove(
    *,
    rocm: list[str] | None = None,
    arch: list[str] | None = None,
    hipblaslt: list[str] | None = None,
    torch: list[str] | None = None,
    kinds: list[str] | None = None,
    everything: bool = False,
    notice: Callable[[str], None] | None = None,
) -> list[str]:
    """Remove what is named; returns a line per thing removed. `arch` alone removes that
    arch's gemm and solution data from every release (with `rocm`: from those only)."""
    say = notice or (lambda line: None)
    if not (rocm or arch or hipblaslt or torch or kinds or everything):
        raise UsageError(
            "say what to remove: --rocm, --arch, --hipblaslt, --torch, --kind or --all"
        )
    for kind in kinds or []:
        if kind not in KINDS:
            raise UsageError(f"not one of {', '.join(KINDS)}", parameter="kind", value=kind)
    removed: list[str] = []
    entries = list_cache()
    wanted_kinds = set(KINDS) if everything else set(kinds or [])
    with _locks(say):
        for entry in entries:
            if entry.kind in wanted_kinds or _named(entry, rocm, hipblaslt, torch, arch):
                if entry.kind == "rocm" and arch and not (everything or "rocm" in wanted_kinds):
                    removed += _drop_archs(entry, arch)
                    continue
                _remove_tree(entry.path)
                removed.append(f"removed {entry.what} ({entry.path}, {entry.disk_bytes} bytes)")
            elif entry.kind == "hipblaslt" and arch and not hipblaslt:
                host = hipblaslt_fetch.find_hipblaslt(entry.name).host_rocm
                if not rocm or host in rocm:
                    removed += _drop_archs(entry, arch)
    return removed


def _named(
    entry: CacheEntry,
    rocm: list[str] | None,
    hipblaslt: list[str] | None,
    torch: list[str] | None,
    arch: list[str] | None,
) -> bool:
    if entry.kind == "rocm":
        return bool(rocm and entry.name in rocm) or bool(arch and not rocm)
    if entry.kind == "hipblaslt":
        return bool(hipblaslt and entry.name in hipblaslt)
    if entry.kind == "torch":
        return bool(torch and any(torch_release.matches(entry.name, t) for t in torch))
    return False


def _drop_archs(entry: CacheEntry, archs: list[str]) -> list[str]:
    """Remove one arch's gemm (or solution) data from a fetched tree, and from its manifest,
    which is replaced in one step; the next query on that arch fetches it again."""
    module = rocm_fetch if entry.kind == "rocm" else hipblaslt_fetch
    state = module.read_manifest(entry.path / "manifest.json")
    gone = [a for a in archs if a in state.archs] if state is not None else []
    if state is None or not gone:
        return []
    drop = [rel for rel in state.files if any(_of_arch(rel, a) for a in gone)]
    for relative in drop:
        with contextlib.suppress(OSError):
            (state.root / relative).unlink()
        del state.files[relative]
    state.archs = [a for a in state.archs if a not in gone]
    # The package stays recorded: a fetch sees the arch's data missing and unpacks it again.
    if entry.kind == "rocm":
        rocm_fetch.write_manifest(state)
    else:
        hipblaslt_fetch.write_manifest(state)
    return [f"removed {entry.what}'s data for {', '.join(gone)} ({len(drop)} files)"]


def _of_arch(relative: str, arch: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return name.endswith(f"_{arch}.dat") or name == f"Kernels.so-000-{arch}.hsaco"


def _remove_tree(path: Path) -> None:
    """Moved aside in one step (a reader sees it whole or not at all), then deleted."""
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    aside = path.with_name(f".removing-{path.name}-{os.getpid()}")
    path.replace(aside)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _locks(notice: Callable[[str], None]) -> Iterator[None]:
    """The fetch locks of ROCm (and hipBLASLt) and PyTorch, so no fetch is under way."""
    with (
        cache_lock(rocm_fetch.rocm_dir(), "hipmem rocm fetch", notice),
        cache_lock(torch_fetch.torch_dir(), "hipmem torch fetch", notice),
    ):
        yield


def _disk_bytes(folder: Path) -> int:
    return build_cache.folder_bytes(folder)


def _mtime(path: Path) -> str | None:
    try:
        stamp = path.lstat().st_mtime
    except OSError:
        return None
    moment = datetime.datetime.fromtimestamp(stamp, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
