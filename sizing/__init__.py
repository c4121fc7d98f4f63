"""Workspace sizing against the real rocBLAS/rocSOLVER, on a real or a virtual AMD GPU.

Usable from Python alone; never imports typer or rich. The supported entry points are named
in `hipmem` (`hipmem.SizingSession`, `hipmem.recommend`, ...); `__all__` lists the public
modules, each named after its one concept. The worker modules (`worker`, `worker_process`,
`shim_build`) are internal: they load the vendor libraries in a crash-isolated process.
"""

__all__ = [
    "call_log_recorder",
    "call_logs",
    "call_spec",
    "catalog",
    "catalog_build",
    "defaults",
    "env_formats",
    "errors",
    "executed_routines",
    "library_locator",
    "minimum",
    "real_devices",
    "recommend",
    "rocm_fetch",
    "session",
    "virtual_device",
    "workload_file",
    "workspace_check",
]
