"""Where the virtual GPU's PyTorch allocator comes from: one search order, named on every answer.

1. A version asked for (`--torch VERSION`, `torch=` in the API, or `HIPMEM_TORCH`): the
   installed PyTorch when it is a CUDA build of that version, else the one
   `hipmem torch fetch --torch VERSION` put in the cache.
2. None asked for: the installed PyTorch when it is a CUDA build (its `libc10.so`,
   `libc10_cuda.so` and headers, with the CUDA headers of the `nvidia-*` wheels it depends on,
   or of a CUDA toolkit), else the newest fetched one.

Each step that does not apply is said in the error when none does, with the way out. The
installed PyTorch is found without importing it (`import torch` takes seconds and may fail):
its `torch/version.py` says its version and the CUDA it was built for.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ReplayError, ReplayUsageError
from . import fetch as torch_fetch
from . import release as torch_release

TORCH_ENV = "HIPMEM_TORCH"


class NoTorchAllocator(ReplayError):
    """No PyTorch allocator for the virtual GPU (the message says how to get one)."""


@dataclass(frozen=True)
class TorchAllocator:
    """A PyTorch build whose caching allocator the virtual GPU can run."""

    version: str  # as torch.__version__ says it: 2.11.0+cu130
    cuda_major: int  # its libc10_cuda.so imports libcudart.so.<cuda_major>
    lib_dir: Path  # holds libc10.so and libc10_cuda.so
    include_dirs: tuple[Path, ...]  # c10's headers and the CUDA runtime's
    origin: str  # "installed" or "fetched"
    location: Path  # the installed torch package, or the fetched version's folder

    @property
    def soname(self) -> str:
        return f"libcudart.so.{self.cuda_major}"

    def describe(self) -> str:
        """'PyTorch 2.11.0+cu130 (fetched: ~/.cache/hipmem/torch/2.11.0)'."""
        return f"PyTorch {self.version} ({self.origin}: {self.location})"


@dataclass(frozen=True)
class InstalledTorch:
    """The torch package on sys.path, read from its files."""

    package: Path
    version: str
    cuda: str | None  # "13.0", or None for a CPU or ROCm build
    hip: str | None


def installed_torch() -> InstalledTorch | None:
    """The installed PyTorch, or None; never imports it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    try:
        text = (package / "version.py").read_text(errors="replace")
    except OSError:
        return None
    return InstalledTorch(
        package, _field(text, "__version__") or "unknown", _field(text, "cuda"), _field(text, "hip")
    )


def _field(version_py: str, name: str) -> str | None:
    found = re.search(rf"^{name}\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]", version_py, re.M)
    return found.group(1) if found else None


def asked_release(
    version: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str]:
    """The release asked for (None: none) and where it was asked, as an error names it:
    `version` (`torch`, the CLI's --torch), else HIPMEM_TORCH in `environ` (default: this
    process's environment)."""
    if version:
        return version, "torch"
    environ = os.environ if environ is None else environ
    return environ.get(TORCH_ENV) or None, TORCH_ENV


def releases_to_fetch(
    torch: str | None = None,
    *,
    wheel: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str | None]:
    """The releases `hipmem torch fetch` fetches: `torch` (2.14, 2.14.1, or several: 2.11,2.14),
    else HIPMEM_TORCH (`asked_release`), each held to the version grammar before any download;
    [None] for the newest. A `wheel` says its own release, so the variable is not read for one,
    and it is one release."""
    if wheel is not None and not torch:
        text, parameter = None, "torch"
    else:
        text, parameter = asked_release(torch, environ)
    names: list[str | None] = [n.strip() for n in (text or "").split(",") if n.strip()] or [None]
    for name in names:
        if name is not None:
            torch_release.public_version(name, parameter=parameter)
    if wheel is not None and len(names) != 1:
        raise ReplayUsageError("--wheel is one PyTorch: give one --torch version")
    return names


def locate(version: str | None = None) -> TorchAllocator:
    """The allocator the virtual GPU runs, by the search order of this module's docstring."""
    asked, parameter = asked_release(version)
    if asked:  # an error names where the release came from: --torch, or the variable
        torch_release.check_asked(asked, parameter=parameter)
    tried: list[str] = []
    installed = installed_torch()
    if installed is not None:
        usable, why = _usable_installed(installed, asked)
        if usable is not None:
            return usable
        tried.append(why)
    else:
        tried.append("no PyTorch is installed")
    if asked:
        wanted = torch_release.public_version(asked)
        fetched = torch_fetch.load_fetched(wanted)  # damaged: its own error
        if fetched is not None:
            return _from_fetched(fetched)
        have = torch_fetch.fetched_versions()
        tried.append(f"PyTorch {wanted} was not fetched" + (
            f" (fetched: {', '.join(have)})" if have else ""
        ))  # fmt: skip
        raise NoTorchAllocator(
            f"no allocator of PyTorch {wanted}: {'; '.join(tried)}; run "
            f"`hipmem torch fetch --torch {wanted}`"
        )
    for name in torch_fetch.fetched_versions():
        fetched = torch_fetch.load_fetched(name)
        if fetched is not None:
            return _from_fetched(fetched)
    raise NoTorchAllocator(
        f"no PyTorch allocator for the virtual GPU: {'; '.join(tried)} and none was fetched; "
        "run `hipmem torch fetch`"
    )


def _usable_installed(
    installed: InstalledTorch, asked: str | None
) -> tuple[TorchAllocator | None, str]:
    """The installed PyTorch as an allocator, or why not."""
    name = f"the installed PyTorch {installed.version}"
    if installed.cuda is None:
        build = "a ROCm build" if installed.hip else "a CPU build"
        return None, f"{name} is {build}, not a CUDA build"
    if asked and not torch_release.matches(installed.version, asked):
        return None, f"{name} is not the version asked for"
    lib_dir = installed.package / "lib"
    if not (lib_dir / "libc10_cuda.so").is_file():
        return None, f"{name} has no lib/libc10_cuda.so"
    try:
        torch_release.check_supported(installed.version)
        cuda_major = torch_fetch.cudart_major(lib_dir / "libc10_cuda.so")
    except ReplayError as err:
        return None, f"{name}: {err}"
    cuda_headers = _cuda_headers(installed.package, cuda_major)
    if cuda_headers is None:
        return None, (
            f"{name} has no CUDA runtime headers beside it (pip install "
            f"{_header_wheels(cuda_major)}, or set CUDA_HOME)"
        )
    allocator = TorchAllocator(
        version=installed.version,
        cuda_major=cuda_major,
        lib_dir=lib_dir,
        include_dirs=(installed.package / "include", *cuda_headers),
        origin="installed",
        location=installed.package,
    )
    return allocator, ""


def _header_wheels(cuda_major: int) -> str:
    """The header wheels the installed torch's own metadata pins (through an installed
    cuda-toolkit's, from 2.11 on), as pip arguments; by name alone when unreadable."""
    from importlib import metadata

    def installed(spec: str) -> torch_release.Resolved:
        name = spec.split("=")[0]
        dist = metadata.distribution(name)
        return torch_release.Resolved(name, dist.version, tuple(dist.requires or ()))

    try:
        pinned = torch_release.header_packages(tuple(metadata.requires("torch") or ()), installed)
        return " ".join(f"'{h.requirement}'" for h in pinned)
    except (metadata.PackageNotFoundError, ReplayError):
        if cuda_major == 12:
            return "nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12"
        return f"nvidia-cuda-runtime nvidia-cuda-crt (of CUDA {cuda_major})"


def _cuda_headers(package: Path, cuda_major: int) -> tuple[Path, ...] | None:
    """Folders that hold cuda_runtime_api.h, cuda.h and crt/host_defines.h of this CUDA major
    (a toolkit of another one would give the stand-in the wrong cudaDeviceProp): the nvidia-*
    wheels beside torch first, then a CUDA toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda)."""
    nvidia = package.parent / "nvidia"
    wheels = [nvidia / f"cu{cuda_major}" / "include"]
    if cuda_major == 12:
        wheels += [nvidia / "cuda_runtime" / "include", nvidia / "cuda_nvcc" / "include"]
    wheels = [d for d in wheels if d.is_dir()]
    homes = [os.environ.get(name) for name in ("CUDA_HOME", "CUDA_PATH")]
    toolkits = [Path(h) / "include" for h in homes if h] + [Path("/usr/local/cuda/include")]
    toolkits = [d for d in toolkits if _toolkit_major(d) == cuda_major]
    for dirs in ([*wheels, *toolkits[:1]], *([d] for d in toolkits)):
        needed = ("cuda_runtime_api.h", "cuda.h", "crt/host_defines.h")
        if dirs and all(_has(dirs, header) for header in needed):
            return tuple(dirs)
    return None


def _has(dirs: list[Path], header: str) -> bool:
    return any((d / header).is_file() for d in dirs)


def _toolkit_major(include_dir: Path) -> int | None:
    try:
        text = (include_dir / "cuda_runtime_api.h").read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)
    return int(found.group(1)) // 1000 if found else None


def _from_fetched(fetched: torch_fetch.FetchedTorch) -> TorchAllocator:
    return TorchAllocator(
        version=fetched.packages.get("torch", fetched.version),
        cuda_major=fetched.cuda_major,
        lib_dir=fetched.lib_dir,
        include_dirs=tuple(fetched.include_dirs),
        origin="fetched",
        location=fetched.root,
    )
