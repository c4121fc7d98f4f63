"""`hipmem torch fetch`: PyTorch's caching allocator, fetched by package name into the cache.

The virtual GPU (replay/virtual_gpu.py) runs PyTorch's own allocator, the code in
`libc10_cuda.so`, with no GPU. Where no CUDA build of PyTorch is installed, this module brings
one: pip downloads the torch wheel and the CUDA runtime headers of the CUDA it was built
against, by name and pinned version from PyPI (pip checks each file against the index's
SHA256), and only what the replay needs is kept:

    <cache>/torch/fetch.lock          held by a running fetch: a second one waits for it
    <cache>/torch/<version>/lib/      libc10.so, libc10_cuda.so (2 MB of the 0.5-0.9 GB wheel)
    <cache>/torch/<version>/include/  the c10 headers (and torch/headeronly, which they include)
    <cache>/torch/<version>/cuda-include/  cuda_runtime_api.h, cuda.h, crt/ ...
    <cache>/torch/<version>/manifest.json  versions, wheels and every kept file's size and SHA256

The members are read out of the wheels with `zipfile` (a wheel is never unpacked whole), into
a temporary folder renamed into place when complete, so a reader sees a whole version or
none. The wheels are deleted once their members are kept; a damaged version (a file changed
since the fetch) is found by its manifest and fetched again.

Each release below names the CUDA its PyPI wheel links (`libcudart.so.N`, from the wheel's
`Requires-Dist`), and the packages of that CUDA's headers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hipmem._core.atomic_write import write_text_atomically
from hipmem._core.cache_lock import cache_lock
from hipmem._core.cache_root import cache_dir
from hipmem._core.progress import ProgressCallback, no_progress
from hipmem.replay.errors import ReplayError, ReplayUsageError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
# pip takes a wheel for any of these (the CUDA header wheels are manylinux2014/2010 builds).
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
)


class TorchFetchError(ReplayError):
    """PyTorch's allocator could not be fetched (the message says why and what to do)."""


class TorchNotFetched(ReplayError):
    """No fetched allocator of the version asked for, or the one there is damaged."""


@dataclass(frozen=True)
class TorchRelease:
    """A PyTorch release whose allocator hipmem can fetch."""

    version: str  # the torch wheel's version on PyPI
    cuda_major: int  # its libc10_cuda.so imports libcudart.so.<cuda_major>
    # (package, version, folder inside the wheel whose files become cuda-include/)
    header_packages: tuple[tuple[str, str, str], ...]

    @property
    def soname(self) -> str:
        return f"libcudart.so.{self.cuda_major}"


RELEASES = (
    # torch 2.11.0 requires cuda-toolkit[cudart]==13.0.2, which pins nvidia-cuda-runtime
    # 13.0.96 and (extra crt) nvidia-cuda-crt 13.0.88.
    TorchRelease(
        "2.11.0",
        13,
        (
            ("nvidia-cuda-runtime", "13.0.96", "nvidia/cu13/include/"),
            ("nvidia-cuda-crt", "13.0.88", "nvidia/cu13/include/"),
        ),
    ),
    # torch 2.9.1 requires nvidia-cuda-runtime-cu12==12.8.90; CUDA 12 ships crt/ (which
    # cuda_runtime_api.h includes) with nvcc, in nvidia-cuda-nvcc-cu12 12.8.93.
    TorchRelease(
        "2.9.1",
        12,
        (
            ("nvidia-cuda-runtime-cu12", "12.8.90", "nvidia/cuda_runtime/include/"),
            ("nvidia-cuda-nvcc-cu12", "12.8.93", "nvidia/cuda_nvcc/include/crt/"),
        ),
    ),
)
NEWEST = RELEASES[0]

# Members of the torch wheel kept, by prefix: the two libraries and the headers they need.
_TORCH_MEMBERS = {
    "torch/lib/libc10.so": "lib/",
    "torch/lib/libc10_cuda.so": "lib/",
    "torch/include/c10/": "include/",
    "torch/include/torch/headeronly/": "include/",
    "torch/version.py": "",
}


def find_release(text: str) -> TorchRelease:
    """`2.11`, `2.11.0` or `2.11.0+cu130` -> the release; a usage error names the known ones."""
    wanted = text.strip().split("+")[0]
    for release in RELEASES:
        if release.version == wanted or release.version.startswith(wanted + "."):
            return release
    known = ", ".join(r.version for r in RELEASES)
    raise ReplayUsageError(
        f"hipmem fetches the allocator of PyTorch {known}", parameter="torch", value=text
    )


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
    return [r.version for r in RELEASES if (base / r.version / MANIFEST_NAME).is_file()]


def load_fetched(version: str) -> FetchedTorch | None:
    """The fetched allocator of `version`, None when there is none; damaged: an error."""
    release = find_release(version)
    manifest = torch_dir() / release.version / MANIFEST_NAME
    if not manifest.is_file():
        return None
    found = _read_manifest(manifest)
    repair = f"run `hipmem torch fetch --torch {release.version}` to repair it"
    if found is None:
        raise TorchNotFetched(f"the fetched PyTorch {release.version} is damaged; {repair}")
    damaged = _damaged_once(found, manifest)
    if damaged:
        raise TorchNotFetched(
            f"the fetched PyTorch {release.version} is damaged ({damaged[0]} changed since it "
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


def _read_manifest(path: Path) -> FetchedTorch | None:
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
    version: str = NEWEST.version,
    *,
    wheel: Path | None = None,
    progress: ProgressCallback | None = None,
    notice: Callable[[str], None] | None = None,
) -> FetchedTorch:
    """Fetch one release's allocator (safe to run again: a complete, intact one is only
    checked, offline; a damaged one is fetched again). `wheel` takes a torch wheel already on
    disk instead of downloading it. Two fetches on one cache take turns (a lock file)."""
    release = find_release(version)
    report = progress or no_progress
    if wheel is not None:  # a wheel that is not this PyTorch is refused before any download
        check_torch_wheel(wheel, release)
    with _fetch_lock(notice or (lambda message: None)):
        target = torch_dir() / release.version
        before = _read_manifest(target / MANIFEST_NAME)
        if before is not None and wheel is None:
            report(0, None, f"checking the fetched PyTorch {release.version}")
            if not before.damaged_files(hashes=True):
                return before
        return _fetch_locked(release, wheel, report)


def _fetch_locked(
    release: TorchRelease, wheel: Path | None, report: ProgressCallback
) -> FetchedTorch:
    base = torch_dir()
    work = Path(tempfile.mkdtemp(dir=base, prefix=f".fetch-{release.version}-"))
    try:
        downloads = work / "wheels"
        downloads.mkdir()
        requirements = [f"{name}=={version}" for name, version, _ in release.header_packages]
        if wheel is None:
            requirements.insert(0, f"torch=={release.version}")
        report(0, None, f"downloading PyTorch {release.version} and its CUDA headers (pip)")
        _pip_download(requirements, downloads)
        torch_wheel = wheel or _one(downloads, "torch-")
        staged = work / "tree"
        files: dict[str, list[object]] = {}
        report(0, None, "keeping libc10.so, libc10_cuda.so and the headers")
        torch_version = _extract_torch(torch_wheel, staged, files, release)
        packages = {"torch": torch_version}
        for name, version, folder in release.header_packages:
            header_wheel = _one(downloads, name.replace("-", "_") + "-")
            _extract_prefix(header_wheel, folder, staged / "cuda-include", staged, files)
            packages[name] = version
        if not (staged / "cuda-include" / "cuda_runtime_api.h").is_file():
            raise TorchFetchError("the CUDA runtime headers were not in the wheels pip fetched")
        found = FetchedTorch(base / release.version, release.version, release.cuda_major,
                             packages, files)  # fmt: skip
        _write_manifest(staged, found)
        target = base / release.version
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
    for platform in PLATFORMS:
        command += ["--platform", platform]
    try:
        done = subprocess.run(command + requirements, capture_output=True, text=True, check=False)
    except OSError as err:
        raise TorchFetchError(f"pip could not start: {err}") from err
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1] if lines else "")
        if "No module named pip" in done.stderr:
            why = f"{sys.executable} has no pip (install pip into that environment)"
        raise TorchFetchError(f"pip download failed: {why[:300]} (run again to retry)")


def _one(folder: Path, prefix: str) -> Path:
    found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    if not found:
        raise TorchFetchError(f"pip did not download a {prefix.rstrip('-_')} wheel")
    return found[0]


def check_torch_wheel(wheel: Path, release: TorchRelease) -> str:
    """The wheel's PyTorch version; a wheel that is not PyTorch, not this release, or not a
    CUDA build is refused with the way out."""
    with _open_wheel(wheel) as archive:
        return _check_torch(archive, wheel, release)


def _open_wheel(wheel: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile):
        raise TorchFetchError(f"{wheel}: not a wheel (not a zip archive)") from None


def _check_torch(archive: zipfile.ZipFile, wheel: Path, release: TorchRelease) -> str:
    names = set(archive.namelist())
    if "torch/version.py" not in names:
        raise TorchFetchError(f"{wheel}: not a PyTorch wheel (it has no torch/version.py)")
    version = _version_of(archive.read("torch/version.py").decode(errors="replace"))
    if version.split("+")[0] != release.version:
        raise TorchFetchError(
            f"{wheel}: PyTorch {version}, not {release.version}; pass --torch "
            f"{version.split('+')[0]} if hipmem supports it"
        )
    if "torch/lib/libc10_cuda.so" not in names:
        raise TorchFetchError(
            f"{wheel}: PyTorch {version} is not a CUDA build (no libc10_cuda.so); use "
            "PyPI's default Linux wheel (`hipmem torch fetch` downloads it)"
        )
    return version


def _extract_torch(
    wheel: Path, staged: Path, files: dict[str, list[object]], release: TorchRelease
) -> str:
    """Keep the allocator's members of a torch wheel (checked first); returns its version."""
    with _open_wheel(wheel) as archive:
        version = _check_torch(archive, wheel, release)
        names = set(archive.namelist())
        for name in sorted(names):
            for prefix, folder in _TORCH_MEMBERS.items():
                if name.startswith(prefix) and not name.endswith("/"):
                    relative = folder + name.removeprefix(prefix.rpartition("/")[0] + "/")
                    if prefix.startswith("torch/include/"):
                        relative = folder + name.removeprefix("torch/include/")
                    _write_member(archive, name, staged, relative, files)
    return version


def _extract_prefix(
    wheel: Path, prefix: str, into: Path, staged: Path, files: dict[str, list[object]]
) -> None:
    """Keep the members under `prefix`, placed under `into` (the CUDA headers)."""
    base = prefix.split("/include/")[0] + "/include/"
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                relative = str((into / name.removeprefix(base)).relative_to(staged))
                _write_member(archive, name, staged, relative, files)


def _write_member(
    archive: zipfile.ZipFile, name: str, staged: Path, relative: str, files: dict[str, list[object]]
) -> None:
    target = (staged / relative).resolve()
    if staged.resolve() not in target.parents:  # a member named ../x never leaves the tree
        raise TorchFetchError(f"refusing the wheel member {name!r}: it points outside the cache")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
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
