"""The ROCm releases hipmem can fetch, as data: which Debian packages make up each one.

A release is the set of packages Debian builds together. The ROCm packages are pinned to
exact versions (an answer is only as good as the library that gave it); when the archive no
longer offers a pinned version, `hipmem rocm fetch` says so and never takes another. The
system runtime they link against (libc, libstdc++, libgcc, libfmt) is taken from sid as it
is on the day of the fetch: the vendor code's answers do not depend on it.

To add a release: one `Release(...)` below, a version script for its HIP runtime soname in
`sizing/worker/shim/` if it is new, and known answers for it in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from hipmem._core.close_names import did_you_mean
from hipmem._core.release_text import check_release_length

from ..errors import SizingUsageError

BASE_SUITE = "sid"
# From BASE_SUITE at fetch time, unpinned; recorded in the manifest.
RUNTIME_PACKAGES = ("libfmt11", "libc6", "libstdc++6", "libgcc-s1")


@dataclass(frozen=True)
class Release:
    """One ROCm release as Debian builds it."""

    name: str  # "7.2": what --rocm and HIPMEM_ROCM take
    suite: str  # the Debian suite that carries its packages
    rocblas_package: str  # the runtime package holding librocblas (its soname changes)
    pinned: tuple[tuple[str, str], ...]  # (package, exact Debian version)
    library_versions: tuple[tuple[str, str], ...]  # what the libraries report of themselves
    hip_soname: str  # the HIP runtime the libraries link: the stand-in is built as this
    gemm_archs: tuple[str, ...]  # archs with gemm (Tensile) data (X-Rocm-Gpu-Architecture)

    @property
    def packages(self) -> tuple[str, ...]:
        """Every package a fetch of this release downloads, pinned ones first."""
        return (*(name for name, _ in self.pinned), *RUNTIME_PACKAGES)

    @property
    def pins(self) -> dict[str, str]:
        return dict(self.pinned)

    @property
    def versions(self) -> dict[str, str]:
        return dict(self.library_versions)


_ARCHS_64 = (
    "gfx803",
    "gfx900",
    "gfx906",
    "gfx908",
    "gfx90a",
    "gfx1010",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
)

RELEASES: tuple[Release, ...] = (
    Release(
        name="6.4",
        suite="sid",
        rocblas_package="librocblas4",
        pinned=(
            ("librocblas4", "6.4.4-4"),
            ("librocsolver0", "6.4.3-2+b1"),
            ("libroctx64-4", "6.4.1-1"),
            ("librocblas-dev", "6.4.4-4"),
            ("librocsolver-dev", "6.4.3-2+b1"),
            ("libamdhip64-dev", "6.4.3-5"),
        ),
        library_versions=(("rocblas", "4.4.1"), ("rocsolver", "3.28.2")),
        hip_soname="libamdhip64.so.6",
        gemm_archs=_ARCHS_64,
    ),
    Release(
        name="7.2",
        suite="experimental",
        rocblas_package="librocblas5",
        pinned=(
            ("librocblas5", "7.2.4-1~exp1"),
            ("librocsolver0", "7.2.4-1~exp1+b1"),
            ("libroctx64-4", "7.2.4-1~exp1"),
            ("librocblas-dev", "7.2.4-1~exp1"),
            ("librocsolver-dev", "7.2.4-1~exp1+b1"),
            ("libamdhip64-dev", "7.2.4-1~exp2"),
        ),
        library_versions=(("rocblas", "5.2.0"), ("rocsolver", "3.32.0")),
        hip_soname="libamdhip64.so.7",
        gemm_archs=(*_ARCHS_64[:5], "gfx942", *_ARCHS_64[5:], "gfx1151", "gfx1200", "gfx1201"),
    ),
)

NEWEST = RELEASES[-1]


def release_names() -> list[str]:
    return [release.name for release in RELEASES]


def find_release(name: str, *, parameter: str = "rocm") -> Release:
    """The release a user named (`7.2`, or `7.2.4`); a usage error naming the known ones."""
    wanted = normalise(name, parameter=parameter)
    for release in RELEASES:
        if release.name == wanted:
            return release
    hint = did_you_mean(wanted, release_names(), n=1, cutoff=0.5)
    raise SizingUsageError(
        f"hipmem knows ROCm {', '.join(release_names())}{hint} "
        f"(fetch one with `hipmem rocm fetch --rocm {NEWEST.name}`)",
        parameter=parameter,
        value=name,
    )


def normalise(name: str, *, parameter: str = "rocm") -> str:
    """'7.2.4' -> '7.2'; the major.minor a release is named by."""
    check_release_length(name, parameter=parameter, example=NEWEST.name)
    parts = name.strip().split(".")
    if len(parts) < 2 or not all(part.isdigit() and part.isascii() for part in parts[:2]):
        raise SizingUsageError(
            f"expected a ROCm release such as {NEWEST.name}", parameter=parameter, value=name
        )
    return f"{int(parts[0])}.{int(parts[1])}"


def rocm_of_rocblas(version: str) -> str | None:
    """The ROCm release a rocBLAS version ships in: rocBLAS 4.x is ROCm 6.x, 5.x is 7.x
    (the minor numbers match since ROCm 6.0). None for anything older or unparsable."""
    parts = version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    major = int(parts[0])
    return f"{major + 2}.{int(parts[1])}" if major >= 4 else None


# rocSOLVER's own version numbers, by ROCm release (from AMD's release notes).
_ROCSOLVER_MINOR_TO_ROCM = {
    24: "6.0",
    25: "6.1",
    26: "6.2",
    27: "6.3",
    28: "6.4",
    30: "7.0",
    31: "7.1",
    32: "7.2",
}


def rocm_of_rocsolver(version: str) -> str | None:
    parts = version.split(".")
    if len(parts) < 2 or parts[0] != "3" or not parts[1].isdigit():
        return None
    return _ROCSOLVER_MINOR_TO_ROCM.get(int(parts[1]))


def sort_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def rocm_of_library(library: str, version: str) -> str | None:
    """The ROCm release that ships rocBLAS or rocSOLVER `version` (`library` as a log names
    it: `rocBLAS`, `rocSOLVER`), or None when unknown."""
    of = {"rocblas": rocm_of_rocblas, "rocsolver": rocm_of_rocsolver}.get(library.lower())
    return None if of is None else of(version)


def nearest_release(rocm: str) -> Release:
    """The release hipmem has nearest to ROCm `rocm` (`7.0` -> 7.2; the newer on a tie)."""

    def number(name: str) -> int:
        major, minor = sort_key(name)[:2]
        return major * 100 + minor

    return min(reversed(RELEASES), key=lambda release: abs(number(release.name) - number(rocm)))
