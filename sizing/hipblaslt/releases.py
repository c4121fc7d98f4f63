"""The hipBLASLt builds hipmem can fetch, as data.

hipBLASLt is its own library with its own version (7.1.1, 7.2.4), released with ROCm but
fetched separately from rocBLAS/rocSOLVER: each build runs on the runtime tree (sid's loader,
libc, libstdc++, HIP headers) of the ROCm release whose HIP soname it links, and every answer
names the hipBLASLt version that gave it. The packages are pinned to exact Debian versions;
a version that left the archive is reported, never replaced.

To add a build: one `HipblasltRelease(...)` below and known answers for it in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SizingUsageError


@dataclass(frozen=True)
class HipblasltRelease:
    """One hipBLASLt build as Debian ships it."""

    version: str  # what the library is: "7.2.4"
    suite: str  # the Debian suite that carries it
    pinned: tuple[tuple[str, str], ...]  # (package, exact Debian version)
    host_rocm: str  # the hipmem ROCm release whose runtime tree it runs on (same HIP soname)
    hip_soname: str
    solution_archs: tuple[str, ...]  # archs with solution data (`TensileLibrary_lazy_<arch>.dat`)

    @property
    def pins(self) -> dict[str, str]:
        return dict(self.pinned)

    @property
    def label(self) -> str:
        return f"hipBLASLt {self.version}"


_ARCHS_711 = (
    "gfx908",
    "gfx90a",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1103",
    "gfx1150",
    "gfx1151",
    "gfx1200",
    "gfx1201",
)

HIPBLASLT_RELEASES: tuple[HipblasltRelease, ...] = (
    HipblasltRelease(
        version="7.1.1",
        suite="sid",
        pinned=(("libhipblaslt1", "7.1.1+dfsg-4"), ("libhipblaslt-dev", "7.1.1+dfsg-4")),
        host_rocm="6.4",
        hip_soname="libamdhip64.so.6",
        solution_archs=_ARCHS_711,
    ),
    HipblasltRelease(
        version="7.2.4",
        suite="experimental",
        pinned=(
            ("libhipblaslt1", "7.2.4+dfsg-1~exp1"),
            ("libhipblaslt-dev", "7.2.4+dfsg-1~exp1"),
        ),
        host_rocm="7.2",
        hip_soname="libamdhip64.so.7",
        solution_archs=tuple(a for a in _ARCHS_711 if a not in ("gfx1103", "gfx1150")),
    ),
)

# Where the solution data of archs Debian does not build comes from (the "no data" error).
DATA_ELSEWHERE = {
    "gfx942": "AMD's own ROCm packages (hipblaslt: /opt/rocm/lib/hipblaslt/library)",
    "gfx950": "AMD's own ROCm 7.x packages (hipblaslt: /opt/rocm/lib/hipblaslt/library)",
}


def hipblaslt_versions() -> list[str]:
    return [release.version for release in HIPBLASLT_RELEASES]


def find_hipblaslt(version: str, *, parameter: str = "hipblaslt") -> HipblasltRelease:
    """The build a user named (`7.2.4`, or `7.2`)."""
    wanted = version.strip()
    for release in HIPBLASLT_RELEASES:
        if release.version == wanted or release.version.rsplit(".", 1)[0] == wanted:
            return release
    raise SizingUsageError(
        f"hipmem knows hipBLASLt {', '.join(hipblaslt_versions())}",
        parameter=parameter,
        value=version,
    )


def for_rocm(rocm: str) -> HipblasltRelease | None:
    """The hipBLASLt build that runs on a ROCm release's tree (7.1.1 on 6.4, 7.2.4 on 7.2)."""
    for release in HIPBLASLT_RELEASES:
        if release.host_rocm == rocm:
            return release
    return None
