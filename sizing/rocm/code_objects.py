"""Placeholder GPU code objects, so that an executed gemm finds its kernels.

The fetch never unpacks rocBLAS's code objects (`.co`, `.hsaco`: gigabytes of GPU code). A
size query never needs them, but a call executed on the virtual device does: without them
Tensile finds no kernel, `gemm_ex` returns internal_error and trsm returns success with
every inner gemm silently skipped. The stand-in runtime ignores a code object's contents,
so empty files named as Tensile looks for them are enough: for every `<name>_<arch>.dat`,
`<name>_<arch>.co`, and `Kernels.so-000-<arch>.hsaco` per arch (with the xnack variants
Tensile also tries). They live in the user cache beside links to the real `.dat` files and
rocBLAS is pointed there with ROCBLAS_TENSILE_LIBPATH. Never in the repository.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir

TENSILE_PATH_VARIABLE = "ROCBLAS_TENSILE_LIBPATH"


def placeholder_library(tensile_dir: Path) -> Path:
    """A folder with the real `.dat` files (linked) and empty code objects beside them."""
    tensile_dir = tensile_dir.resolve()
    names = sorted(path.name for path in tensile_dir.iterdir())
    digest = hashlib.sha256("\n".join([str(tensile_dir), *names]).encode()).hexdigest()[:16]
    out_dir = cache_dir() / "code-objects" / digest

    def make(build_dir: Path) -> None:
        archs: set[str] = set()
        for name in names:
            (build_dir / name).symlink_to(tensile_dir / name)
            if not name.endswith(".dat") or "_lazy_" in name:
                continue
            stem = name.removesuffix(".dat")
            arch = stem.rsplit("_", 1)[-1]
            if arch.startswith("gfx"):
                archs.add(arch)
                (build_dir / f"{stem}.co").touch()
        for arch in archs:
            for variant in ("", "-xnack-", "-xnack+"):
                (build_dir / f"Kernels.so-000-{arch}{variant}.hsaco").touch()

    return built_folder(out_dir, make, what="the placeholder code objects")
