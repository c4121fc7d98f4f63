"""`hipmem rmm fetch`: RAPIDS RMM's C++ resources, fetched by package name into the cache.

The virtual GPU replays RMM's own pool, arena, binning, fixed-size and limiting resources
(replay/rmm/virtual.py). Their code comes from PyPI: `librmm-cu12` up to 25.4 is header-only
(every resource a template, CCCL inside the wheel), so g++ compiles it against hipmem's
stand-in CUDA runtime. Later releases compile helpers into a `librmm.so` that links the CUDA
runtime statically, whose calls no stand-in can answer: they are refused, with why.

pip downloads (checking each file against the index's SHA256) the librmm wheel, the
`rapids-logger` it requires (25.x), and the CUDA 12 runtime headers (`nvidia-cuda-runtime-cu12`,
and `crt/` from `nvidia-cuda-nvcc-cu12`, which `cuda_runtime_api.h` includes); only the
members a build needs are kept, in one zip:

    <cache>/rmm/<version>/rmm-tree.zip   rmm/include, logger/include+lib, cuda/include+lib
    <cache>/rmm/<version>/packages.json  the packages and versions it came from
    <cache>/rmm/<version>/build.json     every file's size and SHA256

The folder is a `hipmem._core.build_cache` build: made in a temporary folder and renamed
into place under a lock (two fetches take turns), checked against its record on every use; a
damaged one is said, and `hipmem rmm fetch` fetches it again. The real `libcudart.so.12` is kept
too: benchmarks/gpu_rmm_virtual_check.py links the same driver to it for a GPU.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from hipmem._core.atomic_write import naming_write_errors
from hipmem._core.build_cache import built_folder, folder_damage
from hipmem._core.cache_root import cache_dir
from hipmem._core.progress import ProgressCallback, no_progress
from hipmem._core.release_text import check_release_length

from ..errors import ReplayError, ReplayUsageError
from ..pytorch import release as torch_release

__all__ = ["DEFAULT_RMM", "FetchedRmm", "RmmNotFetched", "fetch", "fetched_versions", "locate"]

DEFAULT_RMM = "25.4.0"
PACKAGE = "librmm-cu12"
# The CUDA 12 headers (and runtime, for the GPU check) every build uses: pinned, so that a
# build is the same wherever it is made.
CUDA_RUNTIME = "nvidia-cuda-runtime-cu12==12.9.79"
CUDA_NVCC = "nvidia-cuda-nvcc-cu12==12.9.86"
TREE = "rmm-tree.zip"
PACKAGES = "packages.json"
# librmm-cu12 from PyPI with every resource a header template, and CCCL inside.
OLDEST, NEWEST = Version("24.12"), Version("25.4.999")


class RmmFetchError(ReplayError):
    """A fetch failed (pip's first error line, or what the wheels lacked)."""


class RmmNotFetched(ReplayError):
    """The RMM release asked for is not in the cache, or the one there is damaged."""


@dataclass(frozen=True)
class FetchedRmm:
    """A fetched RMM release: its folder and the packages it came from."""

    root: Path
    version: str
    packages: dict[str, str]

    @property
    def tree(self) -> Path:
        return self.root / TREE

    def describe(self) -> str:
        return f"RMM {self.version} (librmm-cu12 from PyPI, in {self.root})"


def rmm_dir() -> Path:
    return cache_dir() / "rmm"


def fetched_versions() -> list[str]:
    """Fetched releases (whole or not), newest first."""
    found = []
    if rmm_dir().is_dir():
        for folder in rmm_dir().iterdir():
            with contextlib.suppress(InvalidVersion):
                if (folder / PACKAGES).is_file():
                    found.append((Version(folder.name), folder.name))
    return [name for _, name in sorted(found, reverse=True)]


def matches(version: str, asked: str) -> bool:
    """Whether the release `version` (25.4.0) is what `asked` (25.4, 25.04, 25.4.0) names."""
    try:
        have, wanted = Version(version).release, Version(asked).release
    except ValueError:  # InvalidVersion, or digits past int()'s limit
        return False
    return have[: len(wanted)] == wanted


def check_supported(asked: str) -> None:
    """A release the virtual GPU cannot build is refused before any download (usage, exit 2)."""
    check_release_length(asked, parameter="rmm", example="25.4 or 24.12.1")
    try:
        version = Version(asked)
    except InvalidVersion:
        raise ReplayUsageError(
            "not a release number (for example 25.4)", parameter="rmm", value=asked
        ) from None
    if version > NEWEST:
        raise ReplayUsageError(
            "from 25.6 on, librmm-cu12 compiles its helpers into librmm.so with the CUDA "
            "runtime linked statically, which hipmem's virtual GPU cannot stand in for; use "
            "--rmm 25.4 or 24.12 (the newest header-only releases on PyPI)",
            parameter="rmm",
            value=asked,
        )
    if version < OLDEST:
        raise ReplayUsageError(
            "hipmem builds librmm-cu12 24.12 to 25.4; use one", parameter="rmm", value=asked
        )


def locate(asked: str | None = None) -> FetchedRmm:
    """The fetched release `asked` names (default DEFAULT_RMM), checked whole; else one line
    with the way out."""
    asked = asked or DEFAULT_RMM
    check_supported(asked)
    name = next((v for v in fetched_versions() if matches(v, asked)), None)
    fetch_it = f"hipmem rmm fetch --rmm {asked}"
    if name is None:
        have = ", ".join(fetched_versions()) or "none"
        raise RmmNotFetched(
            f"RMM {asked} is not fetched (fetched: {have}); run `{fetch_it}` (pip, about 50 MB "
            "downloaded, 5 MB kept)"
        )
    root = rmm_dir() / name
    damage = _damage_once(root)
    if damage is not None:
        raise RmmNotFetched(
            f"the fetched RMM {name} in {root} is damaged ({damage}); run `{fetch_it}` to repair it"
        )
    return _read(root)


_CHECKED: dict[tuple[Path, int], str | None] = {}


def _damage_once(root: Path) -> str | None:
    """The folder checked against its record (20 MB hashed, about 40 ms) once per process."""
    try:
        key = (root, (root / "build.json").stat().st_mtime_ns)
    except OSError:
        return "build.json missing"
    if key not in _CHECKED:
        _CHECKED[key] = folder_damage(root)
    return _CHECKED[key]


def _read(root: Path) -> FetchedRmm:
    try:
        packages = {str(k): str(v) for k, v in json.loads((root / PACKAGES).read_text()).items()}
    except (OSError, ValueError, AttributeError) as err:
        raise RmmNotFetched(f"{root / PACKAGES}: unreadable ({err})") from None
    return FetchedRmm(root, root.name, packages)


def fetch(version: str | None = None, *, progress: ProgressCallback | None = None) -> FetchedRmm:
    """Fetch one release (25.4, 24.12.1; None: DEFAULT_RMM). Safe to run again: a whole one is
    only checked; a damaged one is fetched again."""
    report = progress or no_progress
    asked = version or DEFAULT_RMM
    check_supported(asked)
    exact = (
        asked if _exact(asked) else next((v for v in fetched_versions() if matches(v, asked)), None)
    )
    with tempfile.TemporaryDirectory(prefix="hipmem-rmm-") as temp:
        downloads = Path(temp)
        if exact is None:  # which release `asked` names is asked of the index
            report(0, None, f"downloading {PACKAGE} {asked} (pip)")
            _pip_download([f"{PACKAGE}=={asked}.*"], downloads)
            exact = _one(downloads, "librmm_cu12-").name.split("-")[1]
            check_supported(exact)
        found = exact

        def make(work: Path) -> None:
            _assemble(found, downloads, work, report)

        root = built_folder(rmm_dir() / found, make, what=f"the fetched RMM {found}")
    _CHECKED.clear()
    return _read(root)


def _exact(asked: str) -> bool:
    return len(Version(asked).release) >= 3


def _assemble(version: str, downloads: Path, work: Path, report: ProgressCallback) -> None:
    """Download what is missing and keep the members a build needs in `work`."""
    if not list(downloads.glob("librmm_cu12-*.whl")):
        report(0, None, f"downloading {PACKAGE} {version} (pip)")
        _pip_download([f"{PACKAGE}=={version}"], downloads)
    librmm = _one(downloads, "librmm_cu12-")
    requires = _requires_dist(librmm)
    logger = next((r for r in requires if r.replace("_", "-").startswith("rapids-logger")), None)
    report(0, None, "downloading the CUDA 12 runtime headers (pip)")
    _pip_download([CUDA_RUNTIME, CUDA_NVCC, *([logger.split(";")[0]] if logger else [])], downloads)
    packages = {PACKAGE: version}
    report(0, None, "keeping RMM's headers and the CUDA runtime headers")
    with zipfile.ZipFile(work / TREE, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as tree:
        _keep(librmm, tree, {"librmm/include/": "rmm/include/"})
        if logger:
            wheel = _one(downloads, "rapids_logger-")
            packages["rapids-logger"] = wheel.name.split("-")[1]
            kept = {"rapids_logger/include/": "logger/include/",
                    "rapids_logger/lib64/librapids_logger.so": "logger/lib/"}  # fmt: skip
            _keep(wheel, tree, kept)
        runtime = _one(downloads, "nvidia_cuda_runtime_cu12-")
        nvcc = _one(downloads, "nvidia_cuda_nvcc_cu12-")
        packages["nvidia-cuda-runtime-cu12"] = runtime.name.split("-")[1]
        packages["nvidia-cuda-nvcc-cu12"] = nvcc.name.split("-")[1] + " (crt/ headers only)"
        _keep(runtime, tree, {"nvidia/cuda_runtime/include/": "cuda/include/",
                              "nvidia/cuda_runtime/lib/libcudart.so.12": "cuda/lib/"})  # fmt: skip
        _keep(nvcc, tree, {"nvidia/cuda_nvcc/include/crt/": "cuda/include/crt/"})
        names = set(tree.namelist())
    needs = ("rmm/include/rmm/mr/device/pool_memory_resource.hpp",
             "cuda/include/cuda_runtime_api.h", "cuda/include/crt/host_defines.h")  # fmt: skip
    for needed in needs:
        if needed not in names:
            raise RmmFetchError(f"the wheels pip fetched for RMM {version} lack {needed}")
    with naming_write_errors(work / PACKAGES):
        (work / PACKAGES).write_text(json.dumps(packages, indent=1))


def _keep(wheel: Path, tree: zipfile.ZipFile, prefixes: dict[str, str]) -> None:
    """Copy the wheel's members under each prefix into the tree, renamed. A prefix naming a
    file (no trailing /) keeps that file into the folder it maps to."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile):
        raise RmmFetchError(f"{wheel.name}: not a wheel (not a zip archive)") from None
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            for prefix, into in prefixes.items():
                if prefix.endswith("/") and info.filename.startswith(prefix):
                    name = into + info.filename.removeprefix(prefix)
                elif info.filename == prefix:
                    name = into + prefix.rpartition("/")[2]
                else:
                    continue
                if ".." in Path(name).parts:  # a member named ../x never leaves the tree
                    raise RmmFetchError(f"refusing the wheel member {info.filename!r}")
                # A fixed date: the same wheels give the same tree, byte for byte.
                kept = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                kept.compress_type, kept.external_attr = zipfile.ZIP_DEFLATED, info.external_attr
                tree.writestr(kept, archive.read(info), compresslevel=1)


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        text = archive.read(names[0]).decode(errors="replace") if names else ""
    return [
        ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")
    ]


def _pip_download(requirements: list[str], into: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--progress-bar", "off", "-d", str(into)]  # fmt: skip
    for platform in torch_release.PLATFORMS:
        command += ["--platform", platform]
    # One package per pip call: pip refuses two releases of one package in one resolve.
    for requirement in requirements:
        try:
            torch_release.run_pip([*command, requirement], "pip download")
        except ReplayError as err:
            raise RmmFetchError(f"{requirement}: {err}") from None


def _one(folder: Path, prefix: str) -> Path:
    found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    if not found:
        raise RmmFetchError(f"pip did not download a {prefix.rstrip('-_')} wheel")
    return found[-1]
