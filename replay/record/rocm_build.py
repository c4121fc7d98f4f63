"""What a ROCm build of PyTorch does that the CUDA build a recording runs does not, for an AMD
device: its BLAS workspaces, set so that the recording allocates what a ROCm build would, and
expandable segments, which a ROCm build before 2.11 ignores (said).

PyTorch allocates the BLAS workspaces through its caching allocator, one per handle and
stream, with sizes chosen in `aten/src/ATen/cuda/CublasHandlePool.cpp`:

- the rocBLAS (hipBLAS) workspace: 128 MiB on gfx94x and gfx95x (MI300, MI350), 32 MiB on
  other AMD GPUs, where a CUDA build gives cuBLAS 32 MiB on Hopper and 8 MiB 128 KiB
  elsewhere; `CUBLAS_WORKSPACE_CONFIG` (`:KiB:COUNT` pairs) sets both builds', and a ROCm build
  also reads `HIPBLAS_WORKSPACE_CONFIG` and `ROCBLAS_WORKSPACE_CONFIG`;
- the hipBLASLt workspace: its own pool on ROCm, 76 MiB before PyTorch 2.13 and 80 MiB from
  2.13 (`HIPBLASLT_WORKSPACE_SIZE`, KiB), where a CUDA build gives cuBLASLt 1 MiB, capped at the
  cuBLAS workspace's size unless `TORCH_CUBLASLT_UNIFIED_WORKSPACE=0`; both builds read
  `CUBLASLT_WORKSPACE_SIZE` first.

So the CUDA build is given the ROCm build's sizes through the variables both read, each
unless the user set it (the ROCm names a user set are carried over). What stays different
is said with every recording (run.py's UNSEEN_AMD): which GEMMs a ROCm build sends to
hipBLASLt rather than rocBLAS, MIOpen in place of cuDNN, and the HIP context.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.version import Version

from hipmem._core.devices import AMD, Device

from ..explain.variables import expandable_takes_effect, has_expandable

_MiB_KIB = 1024
# The variables each build reads, the CUDA build's (the one set) first.
_ROCBLAS_NAMES = ("CUBLAS_WORKSPACE_CONFIG", "HIPBLAS_WORKSPACE_CONFIG", "ROCBLAS_WORKSPACE_CONFIG")
_HIPBLASLT_NAMES = ("CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE")


def rocm_workspaces(
    device: Device, torch_version: str, environ: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The variables to set in the recorded process for `device`, and each said as applied
    (`the rocBLAS workspace: 128 MiB (CUBLAS_WORKSPACE_CONFIG=:131072:1)`). None for NVIDIA."""
    if device.vendor != AMD:
        return {}, ()
    values: dict[str, str] = {}
    said: list[str] = []
    rocblas_kib = (128 if device.arch.startswith(("gfx94", "gfx95")) else 32) * _MiB_KIB
    _apply(values, said, "the rocBLAS workspace", _ROCBLAS_NAMES, f":{rocblas_kib}:1", environ,
           f"{rocblas_kib // _MiB_KIB} MiB, a ROCm build's on {device.arch}")  # fmt: skip
    release = Version(torch_version).release
    lt_mib = 80 if release[:2] >= (2, 13) else 76
    _apply(values, said, "the hipBLASLt workspace", _HIPBLASLT_NAMES, str(lt_mib * _MiB_KIB),
           environ,
           f"{lt_mib} MiB, a ROCm build's of PyTorch {release[0]}.{release[1]}")  # fmt: skip
    values["TORCH_CUBLASLT_UNIFIED_WORKSPACE"] = "0"  # its own pool, as on ROCm
    return values, tuple(said)


def expandable_note(device: Device, torch_version: str, alloc_conf: str) -> str | None:
    """Said when the recording ran with expandable segments on an AMD device where a ROCm
    build of that release ignores them (they take effect from PyTorch 2.11 with ROCm 7.0)."""
    if device.vendor != AMD or not alloc_conf or not has_expandable(alloc_conf):
        return None
    if expandable_takes_effect(torch_version, "rocm"):
        return None
    return (f"expandable_segments does nothing in a ROCm build of PyTorch {torch_version} (from "
            "2.11, with ROCm 7.0): this recording ran with it, as the CUDA build does")  # fmt: skip


def _apply(
    values: dict[str, str],
    said: list[str],
    what: str,
    names: tuple[str, ...],
    default: str,
    environ: Mapping[str, str],
    why: str,
) -> None:
    """`names[0]` (the name the CUDA build reads) set to the first of `names` the user set,
    else to `default`."""
    given = next((name for name in names if environ.get(name)), None)
    if given is not None:
        values[names[0]] = environ[given]
        said.append(f"{what}: {given}={environ[given]}, as you set it")
    else:
        values[names[0]] = default
        said.append(f"{what}: {why} ({names[0]}={default})")
