"""Before any work: every resource's backend resolved, and the virtual GPU made ready.

Shared by `replay` and `fleet`: a missing GPU, a missing PyTorch allocator or an option that
picks the virtual GPU for nothing is one line before the log is read.
"""

from __future__ import annotations

from hipmem.replay import vcuda_build
from hipmem.replay.backends import resolve_backend
from hipmem.replay.engine import ReplayOptions
from hipmem.replay.errors import ReplayUsageError
from hipmem.replay.resources import ResourceSpec
from hipmem.replay.torch_allocator import locate
from hipmem.replay.virtual_gpu import check_settings


def check_backends(
    specs: list[ResourceSpec],
    options: ReplayOptions,
    device: str | None,
    device_memory: str | None,
    torch: str | None,
) -> list[ResourceSpec]:
    """Resolve every backend before the log is read (a missing GPU or library is said first);
    returns the specs that run on the virtual GPU, whose allocator is located now too."""
    backends = [resolve_backend(options.backend, s, options.device).name for s in specs]
    virtual = [spec for spec, name in zip(specs, backends, strict=True) if name == "virtual"]
    if virtual:
        allocator = locate(options.torch_version)
        for spec in virtual:  # (recorded settings are checked once the log is read)
            check_settings(f"backend:{spec.options.get('backend') or 'native'}")
        vcuda_build.build(allocator)  # compiled now, outside the progress bar
    else:
        flags = [f for f, v in (("--device", device), ("--device-memory", device_memory),
                               ("--torch", torch)) if v is not None]  # fmt: skip
        if flags:
            raise ReplayUsageError(
                f"{flags[0]} picks the virtual GPU, and no resource here replays on it "
                "(it runs torch resources: -r torch[:...] with --backend virtual or no GPU)"
            )
    return virtual
