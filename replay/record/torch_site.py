"""The PyTorch a recording runs: the command's own, or a release hipmem installs into its cache.

- No `--torch`: the PyTorch that the command's Python imports (found by asking that
  interpreter where `torch` is, without importing it). It must be a CUDA build.
- `--torch VERSION`: that release's CUDA wheel from PyPI, installed by pip (`--no-deps
  --target`) into the cache with the pure-Python packages `import torch` needs, and put first
  on the command's PYTHONPATH; beside it, in a folder of its own, the Triton the wheel
  requires (torch.compile's kernels are compiled by it, for real). The CUDA libraries the
  wheel depends on (`nvidia-*`, several GB) are never installed: a recording runs on
  stand-ins of them. The user's other packages (transformers, torchvision) still come from
  the command's own environment.

The installed folder is checked on every use and installed again when damaged
(`hipmem._core.build_cache`).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir

from ..errors import ReplayError
from ..pytorch import release as torch_release

# What `import torch` needs besides torch (its wheel's pure-Python Requires-Dist).
TORCH_PURE_DEPENDENCIES = ("filelock", "typing-extensions", "sympy", "mpmath", "networkx",
                           "jinja2", "markupsafe", "fsspec")  # fmt: skip
_FIELD = re.compile(r"^(\w+)\s*(?::\s*[^=]+)?=\s*['\"]?([^'\"\n]*)['\"]?", re.MULTILINE)


class RecordTorchError(ReplayError):
    """The PyTorch a recording needs cannot be found or installed (the message says why)."""


@dataclass(frozen=True)
class RecordTorch:
    """The PyTorch build a recording runs."""

    package: Path  # the torch package folder
    version: str  # 2.11.0+cu130
    cuda: str  # 13.0
    site: Path | None  # put first on PYTHONPATH (--torch), or None: the command's own
    triton_site: Path | None = None  # the Triton the --torch release requires, next on it

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])


def read_version_file(package: Path) -> tuple[str, str | None]:
    """(version, cuda) from torch/version.py, read as text."""
    try:
        text = (package / "version.py").read_text(errors="replace")
    except OSError as err:
        raise RecordTorchError(f"cannot read {package / 'version.py'}: {err.strerror}") from None
    fields = {m.group(1): m.group(2) for m in _FIELD.finditer(text)}
    cuda = fields.get("cuda")
    return fields.get("__version__", "unknown"), None if cuda in (None, "None", "") else cuda


def checked(package: Path, site: Path | None) -> RecordTorch:
    version, cuda = read_version_file(package)
    if cuda is None:
        raise RecordTorchError(
            f"PyTorch {version} ({package}) is not a CUDA build; a recording runs a CUDA build "
            "on the virtual GPU (give --torch VERSION, e.g. --torch 2.11, to use one hipmem "
            "installs into its cache)"
        )
    return RecordTorch(package, version, cuda, site)


def commands_torch(python: str) -> RecordTorch:
    """The PyTorch the interpreter `python` imports."""
    probe = ("import importlib.util as u; s = u.find_spec('torch'); "
             "print(next(iter(s.submodule_search_locations)) if s else '')")  # fmt: skip
    location = _ask(python, probe)
    if not location:
        raise RecordTorchError(
            f"{python} has no PyTorch; install a CUDA build there, or give --torch VERSION "
            "(e.g. --torch 2.11) to use one hipmem installs into its cache"
        )
    return checked(Path(location), None)


def installed_release(version: str, python: str) -> RecordTorch:
    """Release `version` (2.11, 2.11.0) of the CUDA wheel for the interpreter `python`,
    installed into the cache if needed: a torch wheel is built for one Python (cp311), so the
    folder is the release's and the interpreter's (`2.11.0-cp311`). Its modules are compiled
    there by that interpreter, once: a run never compiles torch's Python again."""
    tag = _python_tag(python)
    public = _installed_match(version, tag) or torch_release.public_version(
        torch_release.resolve_torch(version).version
    )
    torch_release.check_supported(public, version)  # 2.4 on: recorded from 2.4.1 to 2.14.1
    site = cache_dir() / "record-torch" / f"{public}-{tag}"

    def make(work: Path) -> None:
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:",
                   "--no-compile", "--progress-bar", "off", "--target", str(work),
                   "--python-version", f"{tag[2]}.{tag[3:]}", "--implementation", "cp",
                   *(f"--platform={platform}" for platform in torch_release.PLATFORMS),
                   f"torch==={public}", *TORCH_PURE_DEPENDENCIES]  # fmt: skip
        torch_release.run_pip(command, f"pip install torch=={public}")
        shutil.rmtree(work / "bin", ignore_errors=True)
        compiled = subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(work)],
                                  capture_output=True, text=True, check=False)  # fmt: skip
        if compiled.returncode not in (0, 1):  # 1: a test file of a package that is not Python 3
            raise RecordTorchError(f"{python} could not compile PyTorch {public}'s modules")

    built_folder(site, make, what=f"PyTorch {public} for recordings with {python}", announced=True)
    torch = checked(site / "torch", site)
    return dataclasses.replace(torch, triton_site=_installed_triton(site, public, tag, python))


def triton_requirement(site: Path, tag: str) -> str | None:
    """The Triton that the torch wheel installed in `site` requires on Linux x86_64 for Python
    `tag` (its METADATA's `Requires-Dist: triton==3.6.0; platform_system == "Linux"`), as a pip
    requirement; None for a wheel that requires none."""
    python_version = f"{tag[2]}.{tag[3:]}"
    environment = {"platform_system": "Linux", "platform_machine": "x86_64",
                   "sys_platform": "linux", "python_version": python_version,
                   "python_full_version": f"{python_version}.0", "implementation_name": "cpython",
                   "extra": ""}  # fmt: skip
    for metadata in sorted(site.glob("torch-*.dist-info/METADATA")):
        for line in metadata.read_text(errors="replace").splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            try:
                requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
            except InvalidRequirement:
                continue
            if requirement.name == "triton" and (
                requirement.marker is None or requirement.marker.evaluate(environment)
            ):
                return f"triton{requirement.specifier}"
    return None


def _installed_triton(site: Path, public: str, tag: str, python: str) -> Path | None:
    """The Triton release `public` of torch requires, installed into the cache if needed."""
    requirement = triton_requirement(site, tag)
    if requirement is None:
        return None
    folder = cache_dir() / "record-triton" / f"{public}-{tag}"

    def make(work: Path) -> None:
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:",
                   "--no-compile", "--progress-bar", "off", "--target", str(work),
                   "--python-version", f"{tag[2]}.{tag[3:]}", "--implementation", "cp",
                   *(f"--platform={platform}" for platform in torch_release.PLATFORMS),
                   requirement]  # fmt: skip
        torch_release.run_pip(command, f"pip install {requirement}")
        shutil.rmtree(work / "bin", ignore_errors=True)
        # What was installed, and a file for the build's record to hold: the folder's other
        # entries are folders.
        (work / "requirement.txt").write_text(f"{requirement}\n")

    what = f"{requirement} (torch.compile's compiler) for PyTorch {public} with {python}"
    return built_folder(folder, make, what=what, announced=True)


def interpreter(executable: str) -> str:
    """The Python that runs a command: the command itself (`python3`), or the interpreter its
    script's first line names (`torchrun`, `accelerate`: console scripts of an environment)."""
    if Path(executable).name.startswith("python"):
        return executable
    try:
        with Path(executable).open("rb") as stream:
            first = stream.readline(512).decode(errors="replace")
    except OSError:
        first = ""
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        words = [shutil.which(words[1]) or words[1]]
    if words and Path(words[0]).name.startswith("python"):
        return words[0]
    raise RecordTorchError(
        f"{executable} is not a Python interpreter or a Python script's launcher; record the "
        "Python command itself (python train.py)"
    )


def _python_tag(python: str) -> str:
    """`cp311` for a CPython 3.11 interpreter (the tag of the wheels it can import)."""
    tag = _ask(python, "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
    if not re.fullmatch(r"cp3\d+", tag):
        raise RecordTorchError(f"{python} is not a CPython 3 interpreter; give the Python "
                               "that runs the script")  # fmt: skip
    return tag


def _ask(python: str, code: str) -> str:
    """What `python -c code` prints, stripped; "" when it fails (the caller says what that
    means). Never imports anything in hipmem's own process."""
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RecordTorchError(f"cannot start {python}: {err}") from None
    return done.stdout.strip() if done.returncode == 0 else ""


def _installed_match(version: str, tag: str) -> str | None:
    """The newest release already installed that `version` names (2.11 -> 2.11.0): no pip
    resolve, which takes seconds, when the cache has it."""
    wanted = torch_release.public_version(version)
    found = [
        folder.name.removesuffix(f"-{tag}")
        for folder in (cache_dir() / "record-torch").glob(f"*-{tag}")
        if folder.is_dir() and torch_release.matches(folder.name.removesuffix(f"-{tag}"), wanted)
    ]
    return max(found, key=Version) if found else None
