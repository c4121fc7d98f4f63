"""The native replay core (`replay/engine/csrc/replay_core.cu`): built on first use, loaded with
ctypes.

Two builds come from the one source:

- `rmm`: nvcc against the RMM wheel's headers and librmm (`pip install rmm-cu13` or
  `librmm-cu13`), for the cuda backend. It builds every RMM resource stack in C++;
- `host`: any C++ compiler, host memory only, so CI replays through the same loop.

Builds are cached under hipmem's cache root (`$HIPMEM_CACHE_DIR`, else `~/.cache/hipmem`),
keyed by a hash of the source, the compiler and the RMM version, built in a temporary folder
renamed into place, and checked on every load (`hipmem._core.build_cache`).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir
from hipmem._core.native_build import compile_step, find_compiler

from ..errors import ReplayError

SOURCE = Path(__file__).with_name("csrc") / "replay_core.cu"
LIBRARY_NAME = "replay_core.so"

# Shared with replay_core.cu (enum hm_kind).
KIND_CODES = {
    "host": 0,
    "cuda": 1,
    "hip": 1,
    "managed": 2,
    "async": 3,
    "pool": 4,
    "arena": 5,
    "binning": 6,
    "fixed": 7,
    "pinned": 8,
    "null": 9,
}
STATUS_OK, STATUS_STOPPED, STATUS_CANCELLED, STATUS_ERROR = 0, 1, 2, 3
ADVISE_BITS = {"preferred_location": 1, "read_mostly": 2, "accessed_by": 4}


class NativeCoreUnavailable(ReplayError):
    """The native replay core cannot be built or loaded here (the message says what is missing)."""


class Config(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int32),
        ("upstream", ctypes.c_int32),
        ("initial_bytes", ctypes.c_int64),
        ("maximum_bytes", ctypes.c_int64),
        ("arena_bytes", ctypes.c_int64),
        ("block_bytes", ctypes.c_int64),
        ("prealloc_blocks", ctypes.c_int64),
        ("release_threshold_bytes", ctypes.c_int64),
        ("limit_bytes", ctypes.c_int64),
        ("min_exp", ctypes.c_int32),
        ("max_exp", ctypes.c_int32),
        ("prefetch", ctypes.c_int32),
        ("advise_mask", ctypes.c_int32),
        ("async_default_pool", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("threaded", ctypes.c_int32),
        ("stop_on_failure", ctypes.c_int32),
        ("repeats", ctypes.c_int32),
        ("time_calls", ctypes.c_int32),
    ]


_P = ctypes.c_void_p


class Program(ctypes.Structure):
    _fields_ = [
        ("n_ops", ctypes.c_int64),
        ("op", _P),
        ("slot", _P),
        ("size", _P),
        ("stream", _P),
        ("thread", _P),
        ("n_slots", ctypes.c_int32),
        ("n_streams", ctypes.c_int32),
        ("n_threads", ctypes.c_int32),
        ("pad_", ctypes.c_int32),
        ("stream_ids", _P),
        ("peak_op", ctypes.c_int64),
        ("sample_every", ctypes.c_int64),
    ]


class Outputs(ctypes.Structure):
    _fields_ = [
        ("latency_ns", _P),
        ("failure_op", _P),
        ("failure_live_bytes", _P),
        ("failure_reserved_bytes", _P),
        ("failure_capacity", ctypes.c_int64),
        ("sample_op", _P),
        ("sample_reserved_bytes", _P),
        ("sample_live_bytes", _P),
        ("sample_capacity", ctypes.c_int64),
        ("cancel", ctypes.POINTER(ctypes.c_int32)),
        ("pass_wall_ns", _P),
        ("pass_upstream_calls", _P),
        ("pass_capacity", ctypes.c_int64),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("best_wall_ns", ctypes.c_int64),
        ("ops_done", ctypes.c_int64),
        ("n_failures", ctypes.c_int64),
        ("n_samples", ctypes.c_int64),
        ("peak_reserved_bytes", ctypes.c_int64),
        ("unreturned_bytes", ctypes.c_int64),
        ("held_at_end_bytes", ctypes.c_int64),
        ("setup_ns", ctypes.c_int64),
        ("n_passes", ctypes.c_int64),
        ("timed_pass_wall_ns", ctypes.c_int64),
        ("reserved_source", ctypes.c_int32),
        ("status", ctypes.c_int32),
        ("message", ctypes.c_char * 512),
    ]


@dataclass(frozen=True)
class Toolchain:
    """How one flavour of the core is compiled: the command, minus output path."""

    flavour: str  # "rmm" or "host"
    command: tuple[str, ...]
    fingerprint: str  # what besides the source changes the binary (compiler, RMM version)


def _cache_dir() -> Path:
    return cache_dir() / "replay-core"


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_nvcc() -> str | None:
    """nvcc from $CUDA_HOME, $PATH or /usr/local/cuda, in that order."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    fallback = Path("/usr/local/cuda/bin/nvcc")
    return str(fallback) if fallback.is_file() else None


def rmm_build_inputs() -> tuple[str, Path, Path]:
    """(nvcc, librmm's folder, rapids_logger's folder) for building against RMM's wheels, or
    NativeCoreUnavailable naming what is missing. The benchmarks build their C++ with it too."""
    nvcc = find_nvcc()
    rmm_dir = _package_dir("librmm")
    logger_dir = _package_dir("rapids_logger")
    if rmm_dir is None or logger_dir is None:
        raise NativeCoreUnavailable(
            "the cuda backend needs RMM's C++ library: pip install rmm-cu13 (or rmm-cu12)"
        )
    if nvcc is None:
        raise NativeCoreUnavailable(
            "the cuda backend needs nvcc to build its replay core: install the CUDA toolkit "
            "or set CUDA_HOME"
        )
    return nvcc, rmm_dir, logger_dir


def rmm_toolchain() -> Toolchain:
    """The nvcc + RMM build, or NativeCoreUnavailable naming what is missing."""
    nvcc, rmm_dir, logger_dir = rmm_build_inputs()
    version = (rmm_dir / "VERSION").read_text().strip() if (rmm_dir / "VERSION").is_file() else "?"
    libs = (str(rmm_dir / "lib64"), str(logger_dir / "lib64"))
    command = (
        nvcc,
        "-std=c++20",
        "-O2",
        "--expt-relaxed-constexpr",
        "-DHIPMEM_WITH_RMM",
        "-diag-suppress",
        "177",
        "-Xcompiler",
        "-fPIC",
        "-shared",
        f"-I{rmm_dir / 'include'}",
        f"-I{rmm_dir / 'include' / 'rapids'}",
        f"-I{logger_dir / 'include'}",
        str(SOURCE),
        # librapids_logger first and by rpath: librmm's RUNPATH does not reach it otherwise.
        "-Xlinker",
        "--no-as-needed",
        f"-L{libs[1]}",
        "-lrapids_logger",
        f"-L{libs[0]}",
        "-lrmm",
        "-cudart",
        "static",  # as the C++ floor: no libcudart.so to find at run time
        "-Xlinker",
        "--disable-new-dtags",
        "-Xlinker",
        f"-rpath,{libs[0]}:{libs[1]}",
    )
    return Toolchain("rmm", command, f"{nvcc} rmm={version} {rmm_dir}")


def host_toolchain() -> Toolchain:
    """The plain C++ build (host memory only)."""
    compiler = find_compiler(
        "CXX",
        names=("c++", "g++"),
        needed_by="the replay core is compiled on first use and needs a C++ compiler",
        error=NativeCoreUnavailable,
    )
    command = (
        compiler,
        "-std=c++20",
        "-O2",
        "-fPIC",
        "-shared",
        "-pthread",
        "-x",
        "c++",
        str(SOURCE),
    )
    return Toolchain("host", command, compiler)


def _build(toolchain: Toolchain) -> Path:
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(" ".join(toolchain.command).encode())
    digest.update(toolchain.fingerprint.encode())
    folder = _cache_dir() / f"{toolchain.flavour}-{digest.hexdigest()[:16]}"
    # Several processes on one cache (a fleet's workers) build it once; every load checks it
    # (a truncated library would crash the process that maps it) and rebuilds it if damaged.
    built_folder(folder, lambda work: _compile(toolchain, work / LIBRARY_NAME),
                 what=f"the {toolchain.flavour} replay core")  # fmt: skip
    return folder / LIBRARY_NAME


def _compile(toolchain: Toolchain, target: Path) -> None:
    what = f"the {toolchain.flavour} replay core"
    compile_step([*toolchain.command, "-o", str(target)], what=what, error=NativeCoreUnavailable)


# replay_core.cu's HM_ABI_VERSION: bump both together whenever a struct or enum changes.
ABI_VERSION = 3


class _Abi(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("config_bytes", ctypes.c_int32),
        ("program_bytes", ctypes.c_int32),
        ("outputs_bytes", ctypes.c_int32),
        ("result_bytes", ctypes.c_int32),
    ]


def check_abi(
    library: ctypes.CDLL, structs: dict[str, type[ctypes.Structure]] | None = None
) -> None:
    """Refuse a core whose ABI version or struct sizes differ from these bindings'."""
    structs = structs or {
        "config": Config,
        "program": Program,
        "outputs": Outputs,
        "result": Result,
    }
    if not hasattr(library, "hm_abi_info"):
        raise NativeCoreUnavailable("the replay core predates the ABI handshake: rebuild it")
    abi = _Abi()
    library.hm_abi_info(ctypes.byref(abi))
    if abi.version != ABI_VERSION:
        raise NativeCoreUnavailable(
            f"replay core ABI {abi.version}, bindings ABI {ABI_VERSION}: rebuild the core"
        )
    for name, struct in structs.items():
        core_bytes = getattr(abi, f"{name}_bytes")
        if core_bytes != ctypes.sizeof(struct):
            raise NativeCoreUnavailable(
                f"replay core's hm_{name} is {core_bytes} bytes, the bindings' "
                f"{ctypes.sizeof(struct)}: replay_core.cu and replay/engine/native.py disagree"
            )


@cache
def load(flavour: str) -> ctypes.CDLL:
    """Build (once, cached) and load the core of `flavour` ('rmm' or 'host')."""
    toolchain = rmm_toolchain() if flavour == "rmm" else host_toolchain()
    path = _build(toolchain)
    try:
        library = ctypes.CDLL(str(path))
    except OSError as err:
        raise NativeCoreUnavailable(f"cannot load the replay core {path}: {err}") from None
    check_abi(library)
    library.hm_replay.argtypes = [
        ctypes.POINTER(Config),
        ctypes.POINTER(Program),
        ctypes.POINTER(Outputs),
        ctypes.POINTER(Result),
    ]
    library.hm_replay.restype = ctypes.c_int
    library.hm_build_info.restype = ctypes.c_char_p
    return library


def _ptr(array: np.ndarray) -> int:
    assert array.flags["C_CONTIGUOUS"]
    return int(array.ctypes.data)


@dataclass
class NativeRun:
    """What one call of the core produced (arrays are owned by Python)."""

    result: Result
    latency_ns: np.ndarray
    failure_op: np.ndarray
    failure_live_bytes: np.ndarray
    failure_reserved_bytes: np.ndarray
    sample_op: np.ndarray
    sample_reserved_bytes: np.ndarray
    sample_live_bytes: np.ndarray
    pass_wall_ns: np.ndarray  # [repeats]; the first result.n_passes entries are written
    pass_upstream_calls: np.ndarray  # allocations from upstream per pass; -1: not counted


class NativeCall:
    """Arrays and structs of one replay, kept alive while the core runs in another thread."""

    def __init__(
        self, config: Config, arrays: dict[str, np.ndarray], program: Program, sample_capacity: int
    ) -> None:
        n = program.n_ops
        self.config = config
        self.arrays = arrays  # keeps the program's arrays alive
        self.program = program
        self.cancel = ctypes.c_int32(0)
        self.run = NativeRun(
            result=Result(),
            latency_ns=np.full(n, -1, dtype=np.int64),
            failure_op=np.zeros(n, dtype=np.int64),
            failure_live_bytes=np.zeros(n, dtype=np.int64),
            failure_reserved_bytes=np.zeros(n, dtype=np.int64),
            sample_op=np.zeros(sample_capacity, dtype=np.int64),
            sample_reserved_bytes=np.zeros(sample_capacity, dtype=np.int64),
            sample_live_bytes=np.zeros(sample_capacity, dtype=np.int64),
            pass_wall_ns=np.full(max(1, config.repeats), -1, dtype=np.int64),
            pass_upstream_calls=np.full(max(1, config.repeats), -1, dtype=np.int64),
        )
        r = self.run
        self.outputs = Outputs(
            _ptr(r.latency_ns),
            _ptr(r.failure_op),
            _ptr(r.failure_live_bytes),
            _ptr(r.failure_reserved_bytes),
            n,
            _ptr(r.sample_op),
            _ptr(r.sample_reserved_bytes),
            _ptr(r.sample_live_bytes),
            sample_capacity,
            ctypes.pointer(self.cancel),
            _ptr(r.pass_wall_ns),
            _ptr(r.pass_upstream_calls),
            len(r.pass_wall_ns),
        )

    def __call__(self, library: ctypes.CDLL) -> None:
        library.hm_replay(
            ctypes.byref(self.config),
            ctypes.byref(self.program),
            ctypes.byref(self.outputs),
            ctypes.byref(self.run.result),
        )

    def request_cancel(self) -> None:
        self.cancel.value = 1


def make_program(
    arrays: dict[str, np.ndarray], n_slots: int, n_threads: int, peak_op: int, sample_every: int
) -> Program:
    """The C view of a program; `arrays` must stay alive while it is used."""
    return Program(
        n_ops=len(arrays["op"]),
        op=_ptr(arrays["op"]),
        slot=_ptr(arrays["slot"]),
        size=_ptr(arrays["size"]),
        stream=_ptr(arrays["stream"]),
        thread=_ptr(arrays["thread"]),
        n_slots=n_slots,
        n_streams=len(arrays["stream_ids"]),
        n_threads=n_threads,
        pad_=0,
        stream_ids=_ptr(arrays["stream_ids"]),
        peak_op=peak_op,
        sample_every=sample_every,
    )
