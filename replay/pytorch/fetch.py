"""`hipmem torch fetch`: PyTorch's caching allocator, fetched by package name into the cache.

The virtual GPU (replay/virtual/gpu.py) runs PyTorch's own allocator, the code in
`libc10_cuda.so`, with no GPU. Where no CUDA build of PyTorch is installed, this module brings
one: pip downloads the torch wheel and the CUDA runtime headers of the CUDA it was built
against (pip checks each file against the index's SHA256), and only what the replay needs is
kept:

    <cache>/torch/fetch.lock          held by a running fetch: a second one waits for it
    <cache>/torch/<version>/lib/      libc10.so, libc10_cuda.so (2 MB of the 0.5-0.9 GB wheel)
    <cache>/torch/<version>/include/  the c10 headers (and torch/headeronly, which they include)
    <cache>/torch/<version>/cuda-include/  cuda_runtime_api.h, cuda.h, crt/ ...
    <cache>/torch/<version>/manifest.json  versions, wheels and every kept file's size and SHA256

No release is listed in hipmem: the release asked for (`2.14`, `2.14.1`, none: the newest) is
resolved on the package index, the CUDA header packages are read from the torch wheel's own
`Requires-Dist` (replay/pytorch/release.py), and the CUDA runtime the allocator links
(`libcudart.so.N`) from `libc10_cuda.so`'s DT_NEEDED. The folder is named by the public
version (2.14.1); the manifest keeps the wheel's own (2.14.1+cu130).

The members are read out of the wheels with `zipfile` (a wheel is never unpacked whole), into
a temporary folder renamed into place when complete, so a reader sees a whole version or
none. The wheels are deleted once their members are kept; a damaged version (a file changed
since the fetch) is found by its manifest and fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import stat
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from packaging.version import InvalidVersion, Version

from hipmem._core.atomic_write import naming_write_errors, write_text_atomically
from hipmem._core.cache_lock import cache_lock
from hipmem._core.cache_root import cache_dir
from hipmem._core.progress import ProgressCallback, no_progress

from ..errors import ReplayError
from . import release as torch_release
from .release import HeaderPackage, TorchFetchError

__all__ = ["FetchedTorch", "TorchFetchError", "TorchNotFetched", "fetch", "load_fetched"]

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1


class TorchNotFetched(ReplayError):
    """No fetched allocator of the version asked for, or the one there is damaged."""


# Members of the torch wheel kept, by prefix: the two libraries and the headers they need.
_TORCH_MEMBERS = {
    "torch/lib/libc10.so": "lib/",
    "torch/lib/libc10_cuda.so": "lib/",
    "torch/include/c10/": "include/",
    "torch/include/torch/headeronly/": "include/",
    "torch/version.py": "",
}


@dataclass
class FetchedTorch:
    """What a completed fetch of one release left in the cache."""

    root: Path
    version: str
    cuda_major: int
    packages: dict[str, str] = field(default_factory=dict)  # name -> version
    files: dict[str, list[object]] = field(default_factory=dict)  # relative -> [size, sha256]

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    @property
    def include_dirs(self) -> list[Path]:
        return [self.root / "include", self.root / "cuda-include"]

    def damaged_files(self, *, hashes: bool = False) -> list[str]:
        """Files missing or changed since the fetch: by size (cheap), or also by SHA256."""
        damaged = []
        for relative, (size, digest) in self.files.items():
            path = self.root / relative
            try:
                info = path.stat()
                whole = stat.S_ISREG(info.st_mode) and info.st_size == size
                if not whole or (hashes and _sha256(path) != digest):
                    damaged.append(relative)
            except OSError:
                damaged.append(relative)
        return damaged


def torch_dir() -> Path:
    return cache_dir() / "torch"


def fetched_versions() -> list[str]:
    """Versions with a manifest in the cache, newest first."""
    base = torch_dir()
    found = []
    if base.is_dir():
        for folder in base.iterdir():
            with contextlib.suppress(InvalidVersion):
                if (folder / MANIFEST_NAME).is_file():
                    found.append((Version(folder.name), folder.name))
    return [name for _, name in sorted(found, reverse=True)]


def fetched_match(asked: str) -> str | None:
    """The newest fetched version that `asked` (2.14, 2.14.1) names, or None."""
    return next((v for v in fetched_versions() if torch_release.matches(v, asked)), None)


def load_fetched(version: str) -> FetchedTorch | None:
    """The newest fetched allocator `version` names, None when there is none; damaged: an
    error."""
    name = fetched_match(version)
    if name is None:
        return None
    manifest = torch_dir() / name / MANIFEST_NAME
    found = read_manifest(manifest)
    repair = f"run `hipmem torch fetch --torch {name}` to repair it"
    if found is None:
        raise TorchNotFetched(f"the fetched PyTorch {name} is damaged; {repair}")
    damaged = _damaged_once(found, manifest)
    if damaged:
        raise TorchNotFetched(
            f"the fetched PyTorch {name} is damaged ({damaged[0]} changed since it "
            f"was fetched); {repair}"
        )
    return found


_CHECKED: dict[tuple[Path, int], list[str]] = {}


def _damaged_once(found: FetchedTorch, manifest: Path) -> list[str]:
    """Every file checked by SHA256 (about 10 MB, some 30 ms), once per process and fetch."""
    key = (manifest, manifest.stat().st_mtime_ns)
    if key not in _CHECKED:
        _CHECKED[key] = found.damaged_files(hashes=True)
    return _CHECKED[key]


def read_manifest(path: Path) -> FetchedTorch | None:
    try:
        data = json.loads(path.read_text())
        if data.get("format") != MANIFEST_FORMAT:
            return None
        files = {str(k): [int(v[0]), str(v[1])] for k, v in data["files"].items()}
        if not files:
            return None
        return FetchedTorch(
            root=path.parent,
            version=str(data["version"]),
            cuda_major=int(data["cuda_major"]),
            packages={str(k): str(v) for k, v in data["packages"].items()},
            files=files,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None  # cut short or edited: a fetch rebuilds it


# ---- the fetch -----------------------------------------------------------------------------


def fetch(
    version: str | None = None,
    *,
    wheel: Path | None = None,
    progress: ProgressCallback | None = None,
    notice: Callable[[str], None] | None = None,
) -> FetchedTorch:
    """Fetch one release's allocator: `version` (2.14, 2.14.1; None: the newest pip may install)
    or the release of `wheel`, a torch wheel already on disk. Safe to run again: a complete,
    intact one is only checked (offline when the exact release is named); a damaged one is
    fetched again. Two fetches on one cache take turns (a lock file)."""
    report = progress or no_progress
    if wheel is not None:  # a wheel that is not a CUDA PyTorch is refused before any download
        public = torch_release.public_version(check_torch_wheel(wheel, version))
        torch_release.check_supported(public)
    elif version is not None and torch_release.is_exact(version) and fetched_match(version):
        public = torch_release.public_version(version)
    else:
        report(0, None, f"finding PyTorch {version or '(the newest)'} on the package index")
        public = torch_release.public_version(torch_release.resolve_torch(version).version)
    with _fetch_lock(notice or (lambda message: None)):
        before = read_manifest(torch_dir() / public / MANIFEST_NAME)
        if before is not None and wheel is None:
            report(0, None, f"checking the fetched PyTorch {public}")
            if not before.damaged_files(hashes=True):
                return before
        return _fetch_locked(public, wheel, report)


def _fetch_locked(public: str, wheel: Path | None, report: ProgressCallback) -> FetchedTorch:
    base = torch_dir()
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=base, prefix=f".fetch-{public}-"))
    try:
        downloads = work / "wheels"
        downloads.mkdir()
        if wheel is None:
            report(0, None, f"downloading PyTorch {public} (pip)")
            _pip_download([f"torch==={public}"], downloads)  # ===: never a +cpu local build
        torch_wheel = wheel or _one(downloads, "torch-")
        requires_dist = wheel_requires_dist(torch_wheel)
        headers = torch_release.header_packages(requires_dist)
        report(0, None, f"downloading the CUDA headers of PyTorch {public} (pip)")
        _pip_download([h.requirement for h in headers], downloads)
        staged = work / "tree"
        files: dict[str, list[object]] = {}
        report(0, None, "keeping libc10.so, libc10_cuda.so and the headers")
        torch_version = _extract_torch(torch_wheel, staged, files, public)
        packages = {"torch": torch_version}
        for header in headers:
            name = header.requirement.split("=")[0]
            header_wheel = _one(downloads, name.replace("-", "_") + "-")
            packages[name] = header_wheel.name.split("-")[1]
            _extract_headers(header_wheel, header, staged, files)
        if not (staged / "cuda-include" / "cuda_runtime_api.h").is_file():
            raise TorchFetchError("the CUDA runtime headers were not in the wheels pip fetched")
        cuda_major = cudart_major(staged / "lib" / "libc10_cuda.so")
        found = FetchedTorch(base / public, public, cuda_major, packages, files)
        _write_manifest(staged, found)
        target = base / public
        if target.is_symlink():  # planted: removed, never followed
            target.unlink()
        elif target.exists():  # damaged, or fetched from another wheel: the new one replaces it
            shutil.rmtree(target)
        staged.rename(target)
        return found
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the wheels, and a half-built tree


def _pip_download(requirements: list[str], into: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--progress-bar", "off", "-d", str(into)]  # fmt: skip
    for platform in torch_release.PLATFORMS:
        command += ["--platform", platform]
    torch_release.run_pip(command + requirements, "pip download")


def _one(folder: Path, prefix: str) -> Path:
    found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    if not found:
        raise TorchFetchError(f"pip did not download a {prefix.rstrip('-_')} wheel")
    return found[0]


def cudart_major(libc10_cuda: Path) -> int:
    """N of the `libcudart.so.N` that libc10_cuda.so names as DT_NEEDED."""
    try:
        with libc10_cuda.open("rb") as stream:
            needed = [
                str(tag.needed)  # type: ignore[attr-defined]  # pyelftools sets it per tag
                for section in ELFFile(stream).iter_sections()
                if isinstance(section, DynamicSection)
                for tag in section.iter_tags("DT_NEEDED")
            ]
    except (OSError, ELFError) as err:
        raise TorchFetchError(f"{libc10_cuda.name}: not a readable ELF library ({err})") from None
    for name in needed:
        found = re.fullmatch(r"libcudart\.so\.(\d+)", name)
        if found:
            return int(found.group(1))
    raise TorchFetchError(
        f"{libc10_cuda.name} links no libcudart.so.N (it needs {', '.join(needed) or 'nothing'})"
    )


def wheel_requires_dist(wheel: Path) -> tuple[str, ...]:
    """The Requires-Dist lines of a wheel's own METADATA."""
    with _open_wheel(wheel) as archive:
        names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if not names:
            raise TorchFetchError(f"{wheel}: a wheel without a .dist-info/METADATA")
        text = archive.read(names[0]).decode(errors="replace")
    return tuple(HeaderParser().parsestr(text).get_all("Requires-Dist") or [])


def check_torch_wheel(wheel: Path, asked: str | None = None) -> str:
    """The wheel's PyTorch version; a wheel that is not PyTorch, not the release asked for, or
    not a CUDA build is refused with the way out."""
    with _open_wheel(wheel) as archive:
        return _check_torch(archive, wheel, asked)


def _open_wheel(wheel: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile):
        raise TorchFetchError(f"{wheel}: not a wheel (not a zip archive)") from None


def _check_torch(archive: zipfile.ZipFile, wheel: Path, asked: str | None) -> str:
    names = set(archive.namelist())
    if "torch/version.py" not in names:
        raise TorchFetchError(f"{wheel}: not a PyTorch wheel (it has no torch/version.py)")
    version = _version_of(archive.read("torch/version.py").decode(errors="replace"))
    if asked is not None and not torch_release.matches(version, asked):
        raise TorchFetchError(
            f"{wheel}: PyTorch {version}, not {asked}; leave out --torch to take the wheel's "
            "release"
        )
    if "torch/lib/libc10_cuda.so" not in names:
        raise TorchFetchError(
            f"{wheel}: PyTorch {version} is not a CUDA build (no libc10_cuda.so); use "
            "PyPI's default Linux wheel (`hipmem torch fetch` downloads it)"
        )
    return version


def _extract_torch(wheel: Path, staged: Path, files: dict[str, list[object]], public: str) -> str:
    """Keep the allocator's members of a torch wheel (checked first); returns its version."""
    with _open_wheel(wheel) as archive:
        version = _check_torch(archive, wheel, public)
        names = set(archive.namelist())
        for name in sorted(names):
            for prefix, folder in _TORCH_MEMBERS.items():
                if name.startswith(prefix) and not name.endswith("/"):
                    relative = folder + name.removeprefix(prefix.rpartition("/")[0] + "/")
                    if prefix.startswith("torch/include/"):
                        relative = folder + name.removeprefix("torch/include/")
                    _write_member(archive, name, staged, relative, files)
    return version


def _extract_headers(
    wheel: Path, header: HeaderPackage, staged: Path, files: dict[str, list[object]]
) -> None:
    """Keep a header wheel's `nvidia/.../include/` files (of `header.only` when set) under
    cuda-include/."""
    with _open_wheel(wheel) as archive:
        for name in archive.namelist():
            if not name.startswith("nvidia/") or "/include/" not in name or name.endswith("/"):
                continue
            inside = name.split("/include/", 1)[1]
            if inside.startswith(header.only):
                _write_member(archive, name, staged, f"cuda-include/{inside}", files)


def _write_member(
    archive: zipfile.ZipFile, name: str, staged: Path, relative: str, files: dict[str, list[object]]
) -> None:
    target = (staged / relative).resolve()
    if staged.resolve() not in target.parents:  # a member named ../x never leaves the tree
        raise TorchFetchError(f"refusing the wheel member {name!r}: it points outside the cache")
    digest = hashlib.sha256()
    with naming_write_errors(target):  # a full disk names the file, not an internal error
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(name) as source, target.open("wb") as out:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    files[relative] = [target.stat().st_size, digest.hexdigest()]


def _version_of(version_py: str) -> str:
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_py, re.M)
    return found.group(1) if found else "unknown"


def _write_manifest(root: Path, found: FetchedTorch) -> None:
    payload = {
        "format": MANIFEST_FORMAT,
        "version": found.version,
        "cuda_major": found.cuda_major,
        "packages": found.packages,
        "files": found.files,
    }
    write_text_atomically(root / MANIFEST_NAME, json.dumps(payload, indent=1))


def _fetch_lock(notice: Callable[[str], None]) -> contextlib.AbstractContextManager[None]:
    """One fetch at a time per cache."""
    return cache_lock(torch_dir(), "hipmem torch fetch", notice)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
