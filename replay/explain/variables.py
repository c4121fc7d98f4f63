"""Which variable PyTorch reads a setting from: the one to write a setting in, the one a check
reads it from, those already set that would win over it, and what not to recommend. `hipmem
explain`, `recommend --from-snapshot` (its warnings) and `check --from-snapshot` ask here, the
command line and the Python API alike; only the pairs `recommend --for` writes for each build
are settings/recommend.py's (VARIABLES).

Each rule has its source in docs/explain.md ("The variable PyTorch reads") and
docs/allocator-settings.md ("Which variable PyTorch reads"):

- The allocator's own keys (expandable_segments, max_split_size_mb, garbage_collection_
  threshold, ...) are read by `CUDAAllocatorConfig::instance()` (c10/cuda/CUDAAllocatorConfig.h)
  from the first variable set of PYTORCH_CUDA_ALLOC_CONF, then, on ROCm builds,
  PYTORCH_HIP_ALLOC_CONF, then (2.11) PYTORCH_ALLOC_CONF; 2.9 does not read PYTORCH_ALLOC_CONF.
  The first one set wins, even empty, and the others are ignored, not merged. So on every
  version supported here, CUDA and ROCm builds alike, PYTORCH_CUDA_ALLOC_CONF is read first:
  the setting is written there, and a value already set in another variable is said to be
  ignored.
- expandable_segments takes effect on ROCm from PyTorch 2.11 (pytorch#173330, relanded as
  #177974, backported to release/2.11 as ROCm/pytorch#3106) with ROCm >= 7.0.0 (#179930;
  builds before it needed ROCm >= 7.2); before, a ROCm build ignores it. It is never
  recommended where it is a no-op.
- max_split_size_mb with expandable_segments: reserved memory reported to grow without bound
  (pytorch#123548; the fix proposed in #193400 is open), on 2.12 to 2.14, not on 2.9.1:
  flagged on every version but 2.9.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from hipmem._core.alloc_conf import check_alloc_conf, settings_pairs

from ..errors import ReplayUsageError

FIRST_READ = "PYTORCH_CUDA_ALLOC_CONF"
OTHERS_READ = ("PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
# The order a ROCm build of PyTorch 2.11 reads them in. A check without a setting string reads
# whichever are set, and they must agree: builds and versions read different ones (a CUDA build
# never reads the HIP one, 2.9 never reads PYTORCH_ALLOC_CONF).
READ_ORDER = (FIRST_READ, *OTHERS_READ)
BUILDS = ("rocm", "cuda")
ROCM_EXPANDABLE_TORCH = (2, 11)
ROCM_EXPANDABLE_ROCM = (7, 0)
SPLIT_GROWTH_CLEAN = ((2, 9),)  # versions reported without the growth


def _version(text: str) -> tuple[int, int]:
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return (0, 0)


def expandable_takes_effect(torch_version: str, build: str) -> bool:
    """Whether expandable_segments does anything on this PyTorch build (ROCm: from 2.11)."""
    return build != "rocm" or _version(torch_version) >= ROCM_EXPANDABLE_TORCH


def has_expandable(settings: str) -> bool:
    return ("expandable_segments", "True") in settings_pairs(settings)


def harmful_combination(settings: str, torch_version: str) -> str | None:
    """Why a combination PyTorch's issues report as harmful is flagged, or None."""
    keys = {key for key, _ in settings_pairs(settings)}
    if (
        has_expandable(settings)
        and "max_split_size_mb" in keys
        and _version(torch_version) not in SPLIT_GROWTH_CLEAN
    ):
        return (
            "max_split_size_mb with expandable_segments: reserved memory was reported to grow "
            "without bound on PyTorch 2.12 to 2.14 (pytorch#123548, fix proposed in #193400)"
        )
    return None


@dataclass
class VariableAdvice:
    """The setting to export, in the variable the user's PyTorch reads first."""

    settings: str | None  # None: nothing to recommend
    variable: str
    build: str
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "settings": self.settings,
            "variable": self.variable,
            "build": self.build,
            "warnings": self.warnings,
            "notes": self.notes,
        }

    @property
    def line(self) -> str | None:
        """`export NAME='VALUE'`, or None."""
        if self.settings is None:
            return None
        return f"export {self.variable}='{self.settings}'"


def variable_advice(
    settings: str | None,
    torch_version: str,
    *,
    build: str = "rocm",
    environment: Mapping[str, str] | None = None,
) -> VariableAdvice:
    """The variable and the warnings for `settings` on `torch_version`'s `build`, given the
    user's `environment` (default: this process's)."""
    if build not in BUILDS:
        raise ValueError(f"build must be one of {', '.join(BUILDS)}, not {build!r}")
    environ = os.environ if environment is None else environment
    advice = VariableAdvice(settings, FIRST_READ, build)
    if settings is None:
        return advice
    current = environ.get(FIRST_READ)
    if current is not None and current != settings:
        shown = f"'{current}'" if current else "empty (PyTorch's defaults)"
        advice.warnings.append(
            f"{FIRST_READ} is set in this environment ({shown}): PyTorch reads it first, so "
            "replace it with the line below"
        )
    ignored = [name for name in OTHERS_READ if name in environ]
    if ignored:
        advice.warnings.append(
            f"{' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} set: once "
            f"{FIRST_READ} is set PyTorch ignores {'it' if len(ignored) == 1 else 'them'} "
            "(the first variable set wins; settings are not merged)"
        )
    if has_expandable(settings) and build == "rocm":
        advice.notes.append(
            "expandable_segments takes effect on ROCm builds of PyTorch 2.11 and later with "
            "ROCm 7.0 or later; an older ROCm build ignores it"
        )
    harm = harmful_combination(settings, torch_version)
    if harm:
        advice.warnings.append(harm)
    return advice


def set_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of READ_ORDER set in `environ` (default: this process's), in that order."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in READ_ORDER if name in environ}


def environment_warnings(torch_build: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """A variable set in `environ` (default: this process's) that a build would read instead of
    those written for `torch_build` ("rocm", "cuda" or "both", as
    `AllocatorRecommendation.variables` takes it)."""
    found = set_variables(environ)
    warnings = []
    if torch_build == "rocm" and FIRST_READ in found:
        warnings.append(
            f"{FIRST_READ} is set: a ROCm build of PyTorch reads it before "
            "PYTORCH_HIP_ALLOC_CONF (even empty); unset it, or use --for both"
        )
    if "PYTORCH_ALLOC_CONF" in found:
        warnings.append(
            "PYTORCH_ALLOC_CONF is set: PyTorch 2.11 reads it only when none of the variables "
            "below is set, and 2.9 never; the settings are not merged"
        )
    return warnings


@dataclass(frozen=True)
class CheckedSettings:
    """The setting string a check judges, and where it came from, as its verdict names it."""

    settings: str  # "" for PyTorch's defaults
    source: str  # `--alloc-conf`, `$PYTORCH_CUDA_ALLOC_CONF`, or that none is set


def settings_to_check(
    alloc_conf: str | None = None, environ: Mapping[str, str] | None = None
) -> CheckedSettings:
    """`alloc_conf` when given (`check --alloc-conf`), else the setting string of the variables
    of READ_ORDER set in `environ` (default: this process's), else PyTorch's defaults. Variables
    set to different strings are refused (`ReplayUsageError`): no one answer holds for every
    build and version. Each string is held to the settings' grammar, named by where it was."""
    if alloc_conf is not None:
        return CheckedSettings(check_alloc_conf(alloc_conf, parameter="alloc_conf"), "--alloc-conf")
    found = set_variables(environ)
    if len(set(found.values())) > 1:
        raise ReplayUsageError(
            f"{' and '.join(found)} are set to different settings, and PyTorch's builds and "
            "versions read different ones (`hipmem docs allocator-settings`): give --alloc-conf"
        )
    if not found:
        return CheckedSettings("", "no PYTORCH_*_ALLOC_CONF set")
    name, value = next(iter(found.items()))
    return CheckedSettings(check_alloc_conf(value, parameter=name), f"${name}")
