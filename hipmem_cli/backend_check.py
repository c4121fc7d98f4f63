"""Before any work: every resource's backend resolved, and the virtual GPU made ready.

Shared by `replay` and `fleet`: a missing GPU, a missing PyTorch allocator or an option that
picks the virtual GPU for nothing is one line before the log is read.
"""

from __future__ import annotations

from ..replay.engine.backends import resolve_backend
from ..replay.engine.resources import ResourceSpec
from ..replay.engine.run import ReplayOptions
from ..replay.errors import ReplayUsageError
from ..replay.pytorch.allocator import locate
from ..replay.rmm import build as rmm_build
from ..replay.rmm import fetch as rmm_fetch
from ..replay.virtual import build as vcuda_build
from ..replay.virtual.gpu import check_settings


def check_backends(
    specs: list[ResourceSpec],
    options: ReplayOptions,
    device: str | None,
    device_memory: str | None,
    torch: str | None,
    rmm: list[str | None] | None = None,
) -> list[ResourceSpec]:
    """Resolve every backend before the log is read (a missing GPU or library is said first);
    returns the torch specs that run on the virtual GPU, whose allocator is located now too.
    RMM's resources on the virtual GPU are located and built now, for each of `rmm`'s
    releases."""
    backends = [resolve_backend(options.backend, s, options.device).name for s in specs]
    on_virtual = [spec for spec, name in zip(specs, backends, strict=True) if name == "virtual"]
    virtual = [spec for spec in on_virtual if spec.kind == "torch"]
    if len(virtual) < len(on_virtual):  # RMM's resources: fetched, and compiled now
        for release in rmm or [options.rmm_version]:
            rmm_build.build(rmm_fetch.locate(release))
    elif rmm and rmm != [None]:
        raise ReplayUsageError(
            "--rmm picks the RMM release of the virtual GPU, and no RMM resource here replays "
            "on it (--backend virtual, or no GPU)"
        )
    if virtual:
        allocator = locate(options.torch_version)
        for spec in virtual:  # (recorded settings are checked once the log is read)
            check_settings(f"backend:{spec.options.get('backend') or 'native'}")
        vcuda_build.build(allocator)  # compiled now, outside the progress bar
    elif not on_virtual:
        flags = [f for f, v in (("--device", device), ("--device-memory", device_memory),
                               ("--torch", torch)) if v is not None]  # fmt: skip
        if flags:
            raise ReplayUsageError(
                f"{flags[0]} picks the virtual GPU, and no resource here replays on it "
                "(it runs torch and RMM resources with --backend virtual, or with no GPU)"
            )
    return virtual
