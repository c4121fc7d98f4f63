"""Before any work: every resource's target resolved, and the virtual GPU made ready.

Shared by `replay` and `fleet`: a missing GPU, a missing PyTorch allocator or RMM release, or
an option that picks the virtual GPU for nothing is one line before the log is read, and the
virtual GPU is compiled now, outside any progress bar. The targets it returns are the ones
the replays run (`Targets.of`), so nothing is located, hashed or decided a second time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ReplayUsageError
from .backends import Backend, resolve_backend
from .resources import ResourceSpec
from .target import VIRTUAL_RMM, ReplayTarget, resolve_target, target_on, virtual_rmm

if TYPE_CHECKING:
    from ..pytorch.allocator import TorchAllocator
    from .options import ReplayOptions


@dataclass
class Targets:
    """The target of each resource, for each release of the allocators it runs."""

    # (spec label, torch release, rmm release) -> target
    by_key: dict[tuple[str, str | None, str | None], ReplayTarget] = field(default_factory=dict)
    virtual_torch: list[ResourceSpec] = field(default_factory=list)  # torch on the virtual GPU

    def of(self, spec: ResourceSpec, options: ReplayOptions) -> ReplayTarget:
        """The target of `spec` under `options` (which name the releases): resolved in the
        preflight, or now when the preflight did not see these releases."""
        key = (spec.label, options.torch_version, options.rmm_version)
        found = self.by_key.get(key)
        if found is None:
            found = self.by_key[key] = resolve_target(spec, options)
        return found

    def on_virtual_gpu(self, spec: ResourceSpec, options: ReplayOptions) -> bool:
        return self.of(spec, options).on_virtual_gpu

    def torch_allocator(self, options: ReplayOptions) -> TorchAllocator | None:
        """PyTorch's allocator the virtual GPU runs under `options`, when one was located."""
        if not self.virtual_torch:
            return None
        return self.of(self.virtual_torch[0], options).allocator


def preflight(
    specs: list[ResourceSpec],
    options: ReplayOptions,
    *,
    torch_releases: list[str | None] | None = None,
    rmm_releases: list[str | None] | None = None,
) -> Targets:
    """Resolve every resource's target for every release asked for (`None`: the default
    one); a missing GPU or library is said first. `options` names the first releases."""
    torch_releases = torch_releases or [options.torch_version]
    backends = [resolve_backend(options.backend, s, options.device) for s in specs]
    on_virtual = [s for s, b in zip(specs, backends, strict=True) if b.name == "virtual"]
    virtual = [spec for spec in on_virtual if spec.kind == "torch"]
    targets = Targets(virtual_torch=virtual)
    if len(virtual) < len(on_virtual):  # RMM's resources: fetched, and compiled now
        for release in rmm_releases or [options.rmm_version]:
            rmm, built = virtual_rmm(release)
            target = ReplayTarget(
                Backend("virtual"), VIRTUAL_RMM, options.virtual_device(), rmm=rmm, built=built
            )
            for spec in on_virtual:
                if spec.kind != "torch":
                    targets.by_key[(spec.label, options.torch_version, release)] = target
    elif rmm_releases and rmm_releases != [None]:
        raise ReplayUsageError(
            "--rmm picks the RMM release of the virtual GPU, and no RMM resource here replays "
            "on it (--backend virtual, or no GPU)"
        )
    for release in torch_releases:  # each release's allocator located and built now
        chosen = dataclasses.replace(options, torch_version=release)
        _torch_targets(targets, virtual, chosen)
    if not on_virtual:
        flags = [f for f, v in (("--device", options.device_name),
                                ("--device-memory", options.device_memory_bytes),
                                ("--torch", options.torch_version)) if v is not None]  # fmt: skip
        if flags:
            raise ReplayUsageError(
                f"{flags[0]} picks the virtual GPU, and no resource here replays on it "
                "(it runs torch and RMM resources with --backend virtual, or with no GPU)"
            )
    for spec, backend in zip(specs, backends, strict=True):  # GPUs and host memory
        if backend.name != "virtual":
            key = (spec.label, options.torch_version, options.rmm_version)
            targets.by_key[key] = target_on(backend, spec, options)
    return targets


def _torch_targets(targets: Targets, virtual: list[ResourceSpec], options: ReplayOptions) -> None:
    """PyTorch's allocator on the virtual GPU: located, its settings checked, compiled."""
    from ..virtual.gpu import check_settings

    if not virtual:
        return
    first = target_on(Backend("virtual"), virtual[0], options)
    for spec in virtual:  # (recorded settings are checked once the log is read)
        check_settings(f"backend:{spec.options.get('backend') or 'native'}")
        key = (spec.label, options.torch_version, options.rmm_version)
        targets.by_key[key] = first
