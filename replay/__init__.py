"""RMM/hipMM allocation logs: loading, analysis and replay through real memory resources.

Usable from Python alone; never imports typer or rich. The supported entry points are named
in `hipmem` (`hipmem.load_log`, `hipmem.replay`, ...); `__all__` lists the public modules,
each named after its one concept. `native` (the C++ replay core's bindings) is internal.

`hipmem.replay` is both this package and the API's `replay()` function, which it has been
since before the package was installed under `hipmem`: Python binds a subpackage's name on its
parent once the subpackage is imported, so the two cannot be separate objects. This package is
therefore callable, and calling it is `hipmem.replay.engine.replay`.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipmem.replay.report import ReplayReport

__all__ = [
    "allocator_check",
    "allocator_grid",
    "allocator_plot",
    "allocator_settings",
    "analysis",
    "backends",
    "capacity",
    "capacity_result",
    "device_presets",
    "engine",
    "errors",
    "events",
    "fleet",
    "fleet_cluster",
    "fleet_pair",
    "fleet_plot",
    "fleet_results",
    "fleet_summary",
    "log_loader",
    "log_plot",
    "plot",
    "program",
    "report",
    "resources",
    "torch_allocator",
    "torch_fetch",
    "virtual_capacity",
    "virtual_gpu",
]


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> ReplayReport:
        """`hipmem.replay(log, spec, options)`: see `hipmem.replay.engine.replay`."""
        from hipmem.replay.engine import replay

        return replay(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
