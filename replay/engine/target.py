"""Where and how one resource replays, decided once: the `ReplayTarget`.

A target names the backend (and GPU index), the loop that runs the replay, and for the
virtual GPU the device, the allocator's release (PyTorch's or RMM's) located in the cache and
its build, checked. `resolve_target` makes it; the preflight of a command
(replay/engine/preflight.py) makes every resource's before the log is read, and the engine
(replay/engine/run.py) runs what it says, so that nothing is located, hashed or decided twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ReplayUsageError
from . import native
from .backends import Backend, resolve_backend
from .resources import ResourceSpec

if TYPE_CHECKING:
    from ..pytorch.allocator import TorchAllocator
    from ..rmm.fetch import FetchedRmm
    from ..virtual.devices import Device
    from .options import ReplayOptions

# The loops a target can name.
NATIVE = "native"  # the C++ core (replay/engine/native.py): cuda, and host memory
PYTHON = "python"  # one Python call per event (replay/engine/python_loop.py): hip, baseline
TORCH_WORKER = "torch worker"  # PyTorch's allocator on a GPU, in a process of its own
VIRTUAL_TORCH = "virtual torch"  # PyTorch's allocator on the virtual GPU
VIRTUAL_RMM = "virtual rmm"  # RMM's own resource on the virtual GPU


@dataclass(frozen=True)
class ReplayTarget:
    """One resource's backend, loop and, on the virtual GPU, device, release and build."""

    backend: Backend
    loop: str  # NATIVE, PYTHON, TORCH_WORKER, VIRTUAL_TORCH or VIRTUAL_RMM
    device: Device | None = None  # the virtual GPU's device
    allocator: TorchAllocator | None = None  # PyTorch's allocator, located (VIRTUAL_TORCH)
    rmm: FetchedRmm | None = None  # RMM's release, located (VIRTUAL_RMM)
    built: Path | None = None  # the virtual GPU's build folder, built and checked

    @property
    def on_virtual_gpu(self) -> bool:
        return self.backend.name == "virtual"


def resolve_target(spec: ResourceSpec, options: ReplayOptions) -> ReplayTarget:
    """The target of `spec` under `options`; a missing GPU, release or compiler is one error
    here, before any work."""
    return target_on(resolve_backend(options.backend, spec, options.device), spec, options)


def target_on(backend: Backend, spec: ResourceSpec, options: ReplayOptions) -> ReplayTarget:
    """The target of `spec` on a backend already resolved for it (`resolve_backend`)."""
    if spec.kind == "torch":
        if backend.name != "virtual":
            return ReplayTarget(backend, TORCH_WORKER)
        allocator, built = virtual_torch(options.torch_version)
        return ReplayTarget(backend, VIRTUAL_TORCH, options.virtual_device(), allocator,
                            built=built)  # fmt: skip
    if backend.name == "virtual":  # RMM's own resource on the virtual GPU
        rmm, built = virtual_rmm(options.rmm_version)
        return ReplayTarget(backend, VIRTUAL_RMM, options.virtual_device(), rmm=rmm, built=built)
    return ReplayTarget(backend, _loop(spec, backend, options.engine))


def virtual_torch(release: str | None) -> tuple[TorchAllocator, Path]:
    """PyTorch's allocator of `release` (None: the search order's), and the virtual GPU built
    for it (compiled on first use)."""
    from ..pytorch.allocator import locate
    from ..virtual import build as vcuda_build

    allocator = locate(release)
    return allocator, vcuda_build.build(allocator)


def virtual_rmm(release: str | None) -> tuple[FetchedRmm, Path]:
    """RMM's fetched `release` (None: the default), and its driver for the virtual GPU."""
    from ..rmm import build as rmm_build
    from ..rmm import fetch as rmm_fetch

    rmm = rmm_fetch.locate(release)
    return rmm, rmm_build.build(rmm)


def _loop(spec: ResourceSpec, backend: Backend, engine: str) -> str:
    """The native core where it runs (and is asked for, or may be), else the Python loop."""
    if spec.kind == "null":  # it measures the native core, so only the native core runs it
        if engine == "python":
            raise ReplayUsageError(
                "the null resource measures the native engine", parameter="engine", value="python"
            )
        return NATIVE
    if engine == "python":
        return PYTHON
    if backend.name == "hip":
        if engine == "native":
            raise ReplayUsageError("the native engine has no hip build yet: use engine python")
        return PYTHON
    if backend.name == "host" and engine == "auto":
        try:
            native.load("host")
        except native.NativeCoreUnavailable:
            return PYTHON  # no C++ compiler: the Python loop replays host memory as well
    return NATIVE
