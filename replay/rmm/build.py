"""Build RMM's resources for the virtual GPU into the cache, on first use.

Two parts, compiled with the system compilers (cc, g++) against a fetched RMM release
(replay/rmm/fetch.py: RMM's headers, CCCL inside them, the CUDA 12 runtime headers):

- the stand-in CUDA runtime (replay/virtual/vcuda/virtual_cuda.c, the same one PyTorch's allocator
  runs on), as `libcudart.so.12` with that soname's version script;
- the replay driver (replay/rmm/csrc/rmm_replay.cpp, its loop the virtual GPU's driver's:
  replay/virtual/vcuda/replay_loop.hpp), every RMM resource it replays instantiated
  from RMM's headers, linked to the stand-in (and to `librapids_logger.so` for 25.x, copied
  beside it) with an RPATH of `$ORIGIN`: the folder is whole in itself.

`runtime="cuda"` links the same driver to NVIDIA's real `libcudart.so.12` (from the
`nvidia-cuda-runtime-cu12` wheel the fetch kept) instead: the same RMM code on a real GPU, for
benchmarks/gpu_rmm_virtual_check.py.

The folder (`<cache>/rmm-build/<key>`) is keyed by a hash of the sources and the fetched
tree: an edit or another release builds anew. `hipmem._core.build_cache` builds it
in a temporary folder renamed into place under a lock, checks it on every use and builds a
damaged one again, saying so. About 10 s on 2 cores per release.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from pathlib import Path

from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir

from ..virtual.build import LOOP_HEADER, VirtualGpuBuildError, compile_part, tool
from ..virtual.build import SOURCES as VCUDA_SOURCES
from .fetch import FetchedRmm

# The stand-in runtime is the virtual GPU's (one runtime for PyTorch and RMM); the driver is
# RMM's own.
DRIVER_SOURCE = Path(__file__).parent / "csrc" / "rmm_replay.cpp"
DRIVER = "rmm_replay"
SONAME = "libcudart.so.12"
LOGGER = "librapids_logger.so"
RUNTIMES = ("virtual", "cuda")
_BUILT: dict[tuple[Path, str], Path] = {}
NEEDED_BY = "RMM's resources are compiled on first use and need a C compiler and a C++ compiler"


def build_dir_for(rmm: FetchedRmm, runtime: str = "virtual") -> Path:
    """The cache folder of this release's build (it may not exist yet): named by the sources
    and the fetched tree, as the PyTorch virtual GPU's (a build made once needs no compiler)."""
    digest = hashlib.sha256(f"{rmm.version}\0{runtime}\0".encode())
    sources = (VCUDA_SOURCES / "virtual_cuda.c", DRIVER_SOURCE, VCUDA_SOURCES / LOOP_HEADER,
               VCUDA_SOURCES / f"{SONAME}.map")  # fmt: skip
    for source in sources:
        digest.update(source.name.encode() + source.read_bytes())
    digest.update((rmm.root / "build.json").read_bytes())  # the tree's SHA256, among others
    return cache_dir() / "rmm-build" / digest.hexdigest()[:16]


def build(rmm: FetchedRmm, runtime: str = "virtual") -> Path:
    """The folder holding the driver (and `libcudart.so.12`), built if needed; checked on every
    use, rebuilt when damaged (`hipmem._core.build_cache`). Once per process and release."""
    key = (rmm.root, runtime)
    if key in _BUILT:
        return _BUILT[key]
    out_dir = build_dir_for(rmm, runtime)

    def make(work: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="hipmem-rmm-tree-") as temp:
            tree = Path(temp)
            try:
                with zipfile.ZipFile(rmm.tree) as archive:
                    archive.extractall(tree)
            except (OSError, zipfile.BadZipFile) as err:
                raise VirtualGpuBuildError(f"cannot read {rmm.tree}: {err}") from None
            _make(rmm, tree, work, runtime)

    where = "virtual GPU" if runtime == "virtual" else "CUDA runtime"
    what = f"RMM {rmm.version}'s resources on the {where}"
    _BUILT[key] = built_folder(out_dir, make, what=what, announced=True)
    return _BUILT[key]


def _make(rmm: FetchedRmm, tree: Path, work: Path, runtime: str) -> None:
    cuda = [f"-I{tree / 'cuda' / 'include'}"]
    for_release = f"for RMM {rmm.version}"
    if runtime == "virtual":
        compile_part(
            [tool("CC", NEEDED_BY), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
             *cuda, f"-Wl,--version-script={VCUDA_SOURCES / f'{SONAME}.map'}",
             f"-Wl,-soname,{SONAME}", "-o", str(work / SONAME),
             str(VCUDA_SOURCES / "virtual_cuda.c"), "-lpthread"],
            f"the stand-in CUDA runtime {for_release}",
        )  # fmt: skip
    else:  # NVIDIA's own, as the wheel has it
        shutil.copyfile(tree / "cuda" / "lib" / SONAME, work / SONAME)
    include = tree / "rmm" / "include"
    flags = ["-std=c++17", "-O2", "-DLIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE",
             f"-I{VCUDA_SOURCES}",  # replay_loop.hpp: the replay loop, the virtual GPU's too
             f"-I{include}", f"-I{include / 'rapids' / 'libcudacxx'}", f"-I{include / 'rapids'}",
             *cuda]  # fmt: skip
    libraries = [str(work / SONAME)]
    if (tree / "logger").is_dir():  # 25.x: RMM's logger is rapids-logger's library
        shutil.copyfile(tree / "logger" / "lib" / LOGGER, work / LOGGER)
        flags.append(f"-I{tree / 'logger' / 'include'}")
        libraries.append(str(work / LOGGER))
    else:  # 24.12: spdlog and fmt, header-only, inside the wheel
        flags += ["-DSPDLOG_FMT_EXTERNAL", "-DFMT_HEADER_ONLY=1"]
    compile_part(
        [tool("CXX", NEEDED_BY), *flags, "-o", str(work / DRIVER),
         str(DRIVER_SOURCE), *libraries, "-Wl,--disable-new-dtags",
         "-Wl,-rpath,$ORIGIN"],
        f"the RMM replay driver {for_release}",
    )  # fmt: skip
