"""Which PyTorch release a fetch means, and which CUDA header packages that release needs: read
from PyPI through pip, never from a table in hipmem.

- `--torch 2.14`, `2.14.1`, `2.14.1+cu130` or nothing (the newest): pip resolves the newest
  matching torch wheel for Linux x86-64 (`pip install --dry-run --report`, which reads the
  wheel's metadata without downloading the wheel where the index serves it). pip runs with the
  user's own configuration, constraints included: a cap there (`torch<=2.14.1` in a site's
  pip.conf, as on hipmem's CI machines) is that site's policy, so "the newest" is the newest
  release pip may install there.
- A local-label wheel (`2.13.0+cpu`, on a find-links folder) is no CUDA build: the public
  release is asked for by arbitrary equality (`===2.13.0`), which excludes local labels.
- The CUDA runtime headers come from the wheel's own `Requires-Dist`: a direct
  `nvidia-cuda-runtime[-cuNN]==V` (PyTorch up to 2.10), or `cuda-toolkit[cudart,...]==V`
  (2.11 on), whose own metadata pins `nvidia-cuda-runtime` (extra `cudart`) and
  `nvidia-cuda-crt` (extra `crt`). CUDA 12 ships `crt/` (which `cuda_runtime_api.h` includes)
  with nvcc: `nvidia-cuda-nvcc-cu12` of the runtime's major.minor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from hipmem._core.release_text import check_release_length

from ..errors import ReplayError, ReplayUsageError

# The oldest release hipmem drives (docs/pytorch-virtual-gpu.md, "Releases"): 2.4 (July 2024)
# is the floor of hipmem's `torch` extra, the PyTorch its GPU path is declared for, so both
# paths answer for the same releases; every release from it to 2.14.1 builds and replays the
# committed snapshots. (2.3.1 was seen to build and replay too: the floor is a choice.)
OLDEST = Version("2.4.0")

# pip takes a wheel for any of these (torch 2.4's wheels are manylinux1, the CUDA header
# wheels manylinux2014/2010 builds).
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
# The markers of the wheels' requirements are evaluated as on the machines hipmem fetches for.
_MARKER_ENV = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64"}


class TorchFetchError(ReplayError):
    """PyTorch's allocator could not be fetched (the message says why and what to do)."""


@dataclass(frozen=True)
class Resolved:
    """One release of one package as pip would install it."""

    name: str
    version: str
    requires_dist: tuple[str, ...]


@dataclass(frozen=True)
class HeaderPackage:
    """A wheel whose `nvidia/.../include/` files the stand-in runtime compiles against."""

    requirement: str  # what pip downloads: nvidia-cuda-runtime==13.0.96.*
    only: str = ""  # keep only this folder of its include/ (crt/ of nvcc), "" for all


EXAMPLE = "2.14 or 2.14.1"


def public_version(text: str, *, parameter: str = "torch") -> str:
    """`2.11.0+cu130` -> `2.11.0`; a text that is no version is a usage error naming
    `parameter` (`torch`, the CLI's --torch, or the variable HIPMEM_TORCH)."""
    wanted = check_release_length(text, parameter=parameter, example=EXAMPLE).strip()
    wanted = wanted.split("+")[0]
    try:
        Version(wanted)
    except InvalidVersion:
        raise ReplayUsageError(
            f"not a PyTorch version (e.g. {EXAMPLE})", parameter=parameter, value=text
        ) from None
    return wanted


def is_exact(text: str) -> bool:
    """`2.14.1` names one release; `2.14` names the newest of a series."""
    return len(public_version(text).split(".")) >= 3


def matches(version: str, asked: str) -> bool:
    """Whether the release `version` (2.14.1+cu130) is what `asked` (2.14, 2.14.1) names."""
    have = version.split("+")[0]
    wanted = public_version(asked)
    return have == wanted or have.startswith(wanted + ".")


def check_supported(version: str, asked: str | None = None, *, parameter: str = "torch") -> None:
    """A release older than the oldest hipmem drives: one line with the nearest (`asked`: the
    text the user gave, named in the line as `parameter`)."""
    if Version(version.split("+")[0]) < OLDEST:
        raise ReplayUsageError(
            f"hipmem drives PyTorch {OLDEST} and newer; the nearest release it drives is "
            f"{OLDEST} (`hipmem torch fetch --torch {OLDEST.major}.{OLDEST.minor}`)",
            parameter=parameter,
            value=asked or version,
        )


def check_asked(asked: str, *, parameter: str = "torch") -> None:
    """A release or series (2.3, 2.3.1) older than the oldest hipmem drives is refused before
    any look-up; a text that is no release too (both naming `parameter`)."""
    wanted = public_version(asked, parameter=parameter)
    if Version(wanted) < OLDEST and not wanted.startswith(f"{OLDEST.major}.{OLDEST.minor}"):
        check_supported(wanted if is_exact(wanted) else wanted + ".0", asked, parameter=parameter)


def resolve_torch(asked: str | None) -> Resolved:
    """The newest torch release matching `asked` (None: the newest), as pip would install it."""
    if asked is None:
        spec = "torch"
    else:
        wanted = public_version(asked)
        spec = f"torch=={wanted}" if is_exact(wanted) else f"torch=={wanted}.*"
        check_asked(asked)
    found = resolve(spec, what=f"PyTorch {asked or '(newest)'}")
    if Version(found.version).local is not None:  # 2.13.0+cpu: ask for the public release
        found = resolve(f"torch==={Version(found.version).public}", what=f"PyTorch {asked}")
    check_supported(found.version)
    return found


def resolve(spec: str, *, what: str) -> Resolved:
    """pip's choice for one requirement, with the chosen wheel's Requires-Dist."""
    with tempfile.TemporaryDirectory(prefix="hipmem-pip-") as work:
        report = Path(work) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps",
                   "--ignore-installed", "--only-binary=:all:", "--quiet", "--target",
                   str(Path(work) / "target"), "--report", str(report)]  # fmt: skip
        for platform in PLATFORMS:
            command += ["--platform", platform]
        run_pip([*command, spec], f"finding {what} on the package index")
        try:
            installs = json.loads(report.read_text())["install"]
            metadata = installs[0]["metadata"]
            return Resolved(
                str(metadata["name"]),
                str(metadata["version"]),
                tuple(str(r) for r in metadata.get("requires_dist", [])),
            )
        except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
            raise TorchFetchError(f"pip's report for {spec} is unreadable: {err}") from None


def run_pip(command: list[str], doing: str) -> None:
    """Run pip; a failure is one line: pip's first ERROR line."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as err:
        raise TorchFetchError(f"pip could not start: {err}") from err
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1] if lines else "")
        if "No module named pip" in done.stderr:
            why = f"{sys.executable} has no pip (install pip into that environment)"
        raise TorchFetchError(f"{doing} failed: {why[:300]} (run again to retry)")


def header_packages(
    requires_dist: tuple[str, ...], resolve_package: Callable[[str], Resolved] | None = None
) -> list[HeaderPackage]:
    """The CUDA runtime header wheels a torch wheel's Requires-Dist names (see the module's
    docstring); `resolve_package` reads another package's metadata (cuda-toolkit's)."""
    lookup = resolve_package or (lambda spec: resolve(spec, what=spec))
    for requirement in _applicable(requires_dist):
        name = requirement.name.lower().replace("_", "-")
        if name.startswith("nvidia-cuda-runtime"):
            pinned = _pinned(requirement)
            suffix = name.removeprefix("nvidia-cuda-runtime")  # "-cu12" or ""
            found = [HeaderPackage(f"{name}=={pinned}")]
            if suffix and suffix != "-cu13":  # CUDA 12's crt/ is nvcc's, of that major.minor
                major_minor = ".".join(pinned.split(".")[:2])
                found.append(HeaderPackage(f"nvidia-cuda-nvcc{suffix}=={major_minor}.*", "crt/"))
            return found
        if name == "cuda-toolkit":
            toolkit = lookup(f"cuda-toolkit=={_pinned(requirement)}")
            return [
                HeaderPackage(str(_without_marker(r)))
                for extra in ("cudart", "crt")
                for r in _applicable(toolkit.requires_dist, extra)
                if r.name.lower().startswith(("nvidia-cuda-runtime", "nvidia-cuda-crt"))
            ]
    raise TorchFetchError(
        "the torch wheel requires no CUDA runtime (no nvidia-cuda-runtime or cuda-toolkit in "
        "its Requires-Dist): not a CUDA build"
    )


def _applicable(requires_dist: tuple[str, ...], extra: str = "") -> list[Requirement]:
    """The requirements that apply on Linux x86-64 (with `extra` asked for)."""
    found = []
    for text in requires_dist:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is None:
            applies = not extra
        else:
            applies = requirement.marker.evaluate({**_MARKER_ENV, "extra": extra})
            if extra:  # the extra's own: not one that applies without it
                applies = applies and not requirement.marker.evaluate({**_MARKER_ENV, "extra": ""})
        if applies:
            found.append(requirement)
    return found


def _pinned(requirement: Requirement) -> str:
    pins = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
    if not pins:
        raise TorchFetchError(f"the torch wheel's requirement {requirement} pins no version")
    return pins[0]


def _without_marker(requirement: Requirement) -> Requirement:
    plain = Requirement(str(requirement))
    plain.marker = None
    return plain
