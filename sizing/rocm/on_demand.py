"""Fetch on first use: a size query that needs what the cache lacks fetches it, once.

What a request may need and the cache may lack: a ROCm release (rocBLAS/rocSOLVER), the gemm
data of the device's arch in a release the cache holds for other archs, and the hipBLASLt
build that runs on a release (with the solution data of the device's arch). The locators
(`sizing.library_locator`, `sizing.hipblaslt_locator`) decide what is missing and ask an
`OnDemand`; it fetches exactly that, through the same code as `hipmem rocm fetch` (its lock,
hash checks and atomic renames: `sizing/rocm/fetch.py`, `sizing/hipblaslt/fetch.py`), keeping only
the device's arch's data. A request with no `OnDemand` never downloads (the Python API).

Offline (`--offline`, `HIPMEM_OFFLINE=1`) nothing is downloaded: what is missing is an error
naming the `hipmem rocm fetch` command that gets it. Missing arch data is not an error then:
only a gemm call needs it, and that call says what to fetch (`sizing.session`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from hipmem._core.byte_sizes import format_bytes
from hipmem._core.progress import ProgressCallback, no_progress

from ..errors import LibraryNotFound, SizingUsageError
from ..hipblaslt.fetch import OfflineHipblaslt, fetch_hipblaslt
from ..hipblaslt.releases import HipblasltRelease
from . import fetch as rocm_fetch
from .apt import DEFAULT_MIRROR
from .releases import find_release

OFFLINE_ENV = "HIPMEM_OFFLINE"
_YES = ("1", "true", "yes", "on")
_NO = ("", "0", "false", "no", "off")
_ARCHS_NAMED = 3  # more archs than this are counted in the download line, not named


class FetchRefused(LibraryNotFound):
    """Offline, and the request needs something the cache lacks (exit 1)."""


def offline_reason(option: bool) -> str | None:
    """Why nothing may be downloaded ("--offline", "HIPMEM_OFFLINE=1"), or None."""
    if option:
        return "--offline"
    raw = os.environ.get(OFFLINE_ENV, "")
    if raw.strip().lower() in _NO:
        return None
    if raw.strip().lower() in _YES:
        return f"{OFFLINE_ENV}={raw.strip()}"
    raise SizingUsageError(f"{OFFLINE_ENV}={raw[:20]!r}: expected 1 (never download) or 0")


@contextmanager
def _no_bar(title: str) -> Iterator[ProgressCallback]:
    yield no_progress


def _silent(message: str) -> None:
    return None


@dataclass(frozen=True)
class OnDemand:
    """How one request gets what it needs: for which arch, whether it may download, and
    where it says so (one line before each download, a progress bar, lock waits)."""

    arch: str | None = None  # the device's arch: the only arch whose data is fetched
    offline_by: str | None = None  # "--offline" / "HIPMEM_OFFLINE=1": never download
    announce: Callable[[str], None] = _silent
    progress: Callable[[str], AbstractContextManager[ProgressCallback]] = _no_bar
    notice: Callable[[str], None] = _silent
    mirror: str = DEFAULT_MIRROR

    # -- ROCm releases ----------------------------------------------------------------------
    def rocm(self, name: str, why: str) -> rocm_fetch.OfflineRocm:
        """Fetch ROCm `name` with the gemm data of the device's arch (added to the archs
        the cache has), or refuse when offline. `why`: what is missing, as a user reads it."""
        release = find_release(name)
        archs = [self.arch] if self.arch in release.gemm_archs else []
        if self.offline_by is not None:
            command = f"hipmem rocm fetch --rocm {name}{_arch_options(archs)} --no-hipblaslt"
            raise FetchRefused(_refusal(why, f"ROCm {name}", self.offline_by, command))
        with self.progress(f"fetching ROCm {name}") as report:
            found = rocm_fetch.fetch(
                name,
                archs,
                self.mirror,
                report,
                self.notice,
                plan=self._plan_line(why),
                by=rocm_fetch.ON_FIRST_USE,
            )
        return found

    def lacks_gemm_data(self, name: str, archs_there: list[str]) -> bool:
        """Whether the cached release `name` should get the device's arch's gemm data now:
        the release has it, the cache does not, and downloading is allowed."""
        arch = self.arch
        has_data = arch is not None and arch in find_release(name).gemm_archs
        return has_data and arch not in archs_there and self.offline_by is None

    # -- hipBLASLt builds -------------------------------------------------------------------
    def hipblaslt(self, release: HipblasltRelease, why: str) -> OfflineHipblaslt:
        """Fetch a hipBLASLt build (and its host release, if missing) with the device's
        arch's solution data, or refuse when offline."""
        archs = [self.arch] if self.arch in release.solution_archs else []
        if self.offline_by is not None:
            command = f"hipmem rocm fetch --rocm {release.host_rocm}{_arch_options(archs)}"
            raise FetchRefused(_refusal(why, release.label, self.offline_by, command))
        with self.progress(f"fetching {release.label}") as report:
            found = fetch_hipblaslt(
                release.version,
                archs,
                self.mirror,
                report,
                self.notice,
                self._plan_line(why),
                by=rocm_fetch.ON_FIRST_USE,
            )
        return found

    def lacks_solution_data(self, release: HipblasltRelease, archs_there: list[str]) -> bool:
        arch = self.arch
        has_data = arch is not None and arch in release.solution_archs
        return has_data and arch not in archs_there and self.offline_by is None

    # -- the one line before a download -----------------------------------------------------
    def _plan_line(self, why: str) -> rocm_fetch.PlanCallback:
        def say(plan: rocm_fetch.FetchPlan) -> None:
            self.announce(download_line(why, plan))

        return say


def download_line(why: str, plan: rocm_fetch.FetchPlan) -> str:
    """`ROCm 7.2 is not in the cache: downloading 1.0 GiB (ROCm 7.2: 10 Debian packages;
    gemm data for gfx942 only) into /home/me/.cache/hipmem/rocm/7.2`"""
    count = len(plan.files)
    packages = f"{count} Debian package{'s' if count != 1 else ''}"
    data = "solution data" if plan.what.startswith("hipBLASLt") else "gemm data"
    if not plan.archs:
        archs = f"no {data}"
    elif len(plan.archs) <= _ARCHS_NAMED:
        archs = f"{data} for {', '.join(plan.archs)} only"
    else:  # a repair of a cache fetched for every arch: the list would fill the line
        archs = f"{data} for {len(plan.archs)} archs"
    size = format_bytes(plan.download_bytes)
    return f"{why}: downloading {size} ({plan.what}: {packages}; {archs}) into {plan.target}"


def _refusal(why: str, what: str, offline_by: str, command: str) -> str:
    """`ROCm 7.2 is not in the cache; --offline forbids downloading it: run `hipmem ...``"""
    it = "it" if what in why else what
    return f"{why}; {offline_by} forbids downloading {it}: run `{command}`"


def _arch_options(archs: list[str]) -> str:
    return "".join(f" --arch {arch}" for arch in archs)
