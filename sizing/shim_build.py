"""Build the stand-in HIP runtime (`sizing/shim/virtual_hip.c`) into the user cache.

It is compiled on first use with the system C compiler against the real HIP headers (from
the offline ROCm fetch or a ROCm install), so `hipDeviceProp_t` has the vendor's layout. The
output directory is keyed by a hash of the sources and headers: an edit rebuilds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from hipmem.cache_root import cache_dir
from sizing.errors import ShimBuildError

SHIM_SOURCES = Path(__file__).parent / "shim"
SONAME = "libamdhip64.so.6"


def build_shim(hip_include_dir: Path) -> Path:
    """Return the directory holding `libamdhip64.so.6` (and a `libamdhip64.so` link)."""
    header = hip_include_dir / "hip" / "hip_runtime_api.h"
    if not header.is_file():
        raise ShimBuildError(
            f"no HIP headers at {hip_include_dir} (run `hipmem rocm fetch`, which brings them)"
        )
    source = SHIM_SOURCES / "virtual_hip.c"
    version_script = SHIM_SOURCES / "libamdhip64.map"
    digest = hashlib.sha256()
    for path in (source, version_script, header):
        digest.update(path.read_bytes())
    out_dir = cache_dir() / "shim" / digest.hexdigest()[:16]
    if (out_dir / SONAME).is_file():
        return out_dir
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise ShimBuildError("building the virtual device needs a C compiler (apt install gcc)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Build in a temporary directory and rename: concurrent builds never see half a library.
    build_dir = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=".build-"))
    command = [
        compiler,
        "-shared",
        "-fPIC",
        "-O2",
        "-fvisibility=hidden",
        "-D__HIP_PLATFORM_AMD__",
        f"-I{hip_include_dir}",
        f"-Wl,--version-script={version_script}",
        f"-Wl,-soname,{SONAME}",
        "-o",
        str(build_dir / SONAME),
        str(source),
        "-lpthread",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(build_dir, ignore_errors=True)
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
        raise ShimBuildError(f"compiling the virtual device failed: {first}")
    (build_dir / "libamdhip64.so").symlink_to(SONAME)  # the name hip-python dlopens
    try:
        build_dir.rename(out_dir)
    except OSError:
        shutil.rmtree(build_dir, ignore_errors=True)  # another process finished first
    return out_dir
