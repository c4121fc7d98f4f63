"""RMM/hipMM allocation logs: loading, analysis and replay through real memory resources.

Usable from Python alone; never imports typer or rich. The supported entry points are named
in `hipmem` (`hipmem.load_log`, `hipmem.replay`, ...); `__all__` lists the public modules,
each named after its one concept. `native` (the C++ replay core's bindings) is internal.
"""

__all__ = [
    "analysis",
    "backends",
    "capacity",
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
    "pyplot",
    "report",
    "resources",
]
