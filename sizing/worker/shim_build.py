"""Build the stand-in HIP runtime (`sizing/worker/shim/virtual_hip.c`) into the user cache.

It is compiled on first use with the system C compiler against the real HIP headers of the
release it stands in for (from the offline ROCm fetch or a ROCm install), so `hipDeviceProp_t`
has the vendor's layout, and named like the runtime those libraries link (`libamdhip64.so.6`
for ROCm 6.x, `.so.7` for ROCm 7.x) with that soname's version script. The output directory
is keyed by a hash of the soname, sources and headers: an edit rebuilds it, and so does
damage (every use checks the build's recorded sizes and hashes).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir
from hipmem._core.native_build import compile_step, find_compiler

from ..errors import ShimBuildError

SHIM_SOURCES = Path(__file__).parent / "shim"
DEFAULT_SONAME = "libamdhip64.so.6"


def supported_sonames() -> list[str]:
    return sorted(path.name.removesuffix(".map") for path in SHIM_SOURCES.glob("*.map"))


def build_shim(hip_include_dir: Path, soname: str = DEFAULT_SONAME) -> Path:
    """Return the directory holding the stand-in as `soname` (and a `libamdhip64.so` link)."""
    header = hip_include_dir / "hip" / "hip_runtime_api.h"
    if not header.is_file():
        raise ShimBuildError(
            f"no HIP headers at {hip_include_dir} (run `hipmem rocm fetch`, which brings them)"
        )
    source = SHIM_SOURCES / "virtual_hip.c"
    version_script = SHIM_SOURCES / f"{soname}.map"
    if not version_script.is_file():
        raise ShimBuildError(
            f"these libraries link {soname}; the virtual GPU of sizing stands in for "
            f"{', '.join(supported_sonames())} only"
        )
    digest = hashlib.sha256(soname.encode())
    for path in (source, version_script, *_headers(hip_include_dir)):
        digest.update(path.read_bytes())
    out_dir = cache_dir() / "shim" / digest.hexdigest()[:16]

    def make(build_dir: Path) -> None:
        compiler = find_compiler(
            "CC",
            needed_by="the virtual GPU of sizing (a stand-in HIP runtime) is compiled on first "
            "use and needs a C compiler",
            error=ShimBuildError,
        )
        command = [
            compiler,
            "-shared",
            "-fPIC",
            "-O2",
            "-fvisibility=hidden",
            "-D__HIP_PLATFORM_AMD__",
            f"-I{hip_include_dir}",
            f"-Wl,--version-script={version_script}",
            f"-Wl,-soname,{soname}",
            "-o",
            str(build_dir / soname),
            str(source),
            "-lpthread",
        ]
        compile_step(command, what=f"the stand-in HIP runtime ({soname})", error=ShimBuildError)
        (build_dir / "libamdhip64.so").symlink_to(soname)  # the name hip-python dlopens

    # Built in a temporary folder and renamed (concurrent builds never see half a library),
    # checked on every use and rebuilt when damaged: hipmem._core.build_cache.
    return built_folder(out_dir, make, what=f"the virtual GPU ({soname})")


def _headers(hip_include_dir: Path) -> list[Path]:
    """The HIP headers the stand-in compiles against (a release's own: its hash keys the build)."""
    return sorted((hip_include_dir / "hip").rglob("*.h"))
