"""hipmem's Python API: size rocBLAS/rocSOLVER workspaces with the real vendor libraries,
recommend the settings that cover them, and replay RMM/hipMM allocation logs.

Everything is imported on first use, so `import hipmem` stays cheap (the CLI relies on it)::

    import hipmem

    with hipmem.SizingSession("MI300X") as session:
        session.size("rocsolver_dgetrf:m=1024,n=1024")
        result = session.result()
    print(hipmem.recommend(result).rocblas_device_memory_size_bytes)

    log = hipmem.load_log("run.csv.gz")
    report = hipmem.replay(log, hipmem.parse_spec("pool"))

The implementation lives in the `sizing` and `replay` packages; this module only names the
supported entry points. Every error raised is a `hipmem.HipmemError` with an `exit_code`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> (module, attribute)
_API = {
    # sizing
    "SizingSession": ("sizing.session", "SizingSession"),
    "SessionResult": ("sizing.session", "SessionResult"),
    "CallResult": ("sizing.session", "CallResult"),
    "size_calls": ("sizing.session", "size_calls"),
    "Minimum": ("sizing.minimum", "Minimum"),
    "parse_call": ("sizing.call_spec", "parse_call"),
    "read_workload": ("sizing.workload_file", "read_workload"),
    "read_workload_entries": ("sizing.workload_file", "read_workload_entries"),
    "SweepResult": ("sizing.sweep", "SweepResult"),
    "SweptCall": ("sizing.sweep", "SweptCall"),
    "plan_sweep": ("sizing.sweep", "plan_sweep"),
    "parse_sweep": ("sizing.sweep_range", "parse_sweep"),
    "read_call_log": ("sizing.call_logs", "read_call_log"),
    "size_matmuls": ("sizing.hipblaslt_matmul", "size_matmul_specs"),
    "recommended_hipblaslt_kib": ("sizing.hipblaslt_matmul", "recommended_kib"),
    "record_call_logs": ("sizing.call_log_recorder", "record_call_logs"),
    "recommend": ("sizing.recommend", "recommend"),
    "Recommendation": ("sizing.recommend", "Recommendation"),
    "read_setting": ("sizing.workspace_check", "read_setting"),
    "check": ("sizing.workspace_check", "check"),
    # replay
    "load_log": ("replay.log_loader", "load_log"),
    "AllocationLog": ("replay.events", "AllocationLog"),
    "analyze": ("replay.analysis", "analyze"),
    "replay": ("replay.engine", "replay"),
    "ReplayOptions": ("replay.engine", "ReplayOptions"),
    "parse_spec": ("replay.resources", "parse_spec"),
    "find_capacity": ("replay.capacity", "find_capacity"),
    "write_rmm_csv": ("replay.log_writer", "write_rmm_csv"),
    "FleetRequest": ("replay.fleet", "FleetRequest"),
    "run_fleet": ("replay.fleet", "run_fleet"),
    "fleet_client": ("replay.fleet_cluster", "fleet_client"),
    "summarize_fleet": ("replay.fleet_summary", "summarize"),
    # shared
    "HipmemError": ("hipmem.errors", "HipmemError"),
    "UsageError": ("hipmem.errors", "UsageError"),
    "parse_bytes": ("hipmem.byte_sizes", "parse_bytes"),
    "format_bytes": ("hipmem.byte_sizes", "format_bytes"),
}

__all__ = [
    "AllocationLog",
    "CallResult",
    "FleetRequest",
    "HipmemError",
    "Minimum",
    "Recommendation",
    "ReplayOptions",
    "SessionResult",
    "SizingSession",
    "SweepResult",
    "SweptCall",
    "UsageError",
    "__version__",
    "analyze",
    "check",
    "find_capacity",
    "fleet_client",
    "format_bytes",
    "load_log",
    "parse_bytes",
    "parse_call",
    "parse_spec",
    "parse_sweep",
    "plan_sweep",
    "read_call_log",
    "read_setting",
    "read_workload",
    "read_workload_entries",
    "recommend",
    "recommended_hipblaslt_kib",
    "record_call_logs",
    "replay",
    "run_fleet",
    "size_calls",
    "size_matmuls",
    "summarize_fleet",
    "write_rmm_csv",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ imports lazily
    from hipmem.byte_sizes import format_bytes, parse_bytes
    from hipmem.errors import HipmemError, UsageError
    from replay.analysis import analyze
    from replay.capacity import find_capacity
    from replay.engine import ReplayOptions, replay
    from replay.events import AllocationLog
    from replay.fleet import FleetRequest, run_fleet
    from replay.fleet_cluster import fleet_client
    from replay.fleet_summary import summarize as summarize_fleet
    from replay.log_loader import load_log
    from replay.log_writer import write_rmm_csv
    from replay.resources import parse_spec
    from sizing.call_log_recorder import record_call_logs
    from sizing.call_logs import read_call_log
    from sizing.call_spec import parse_call
    from sizing.hipblaslt_matmul import recommended_kib as recommended_hipblaslt_kib
    from sizing.hipblaslt_matmul import size_matmul_specs as size_matmuls
    from sizing.minimum import Minimum
    from sizing.recommend import Recommendation, recommend
    from sizing.session import CallResult, SessionResult, SizingSession, size_calls
    from sizing.sweep import SweepResult, SweptCall, plan_sweep
    from sizing.sweep_range import parse_sweep
    from sizing.workload_file import read_workload, read_workload_entries
    from sizing.workspace_check import check, read_setting


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("hipmem")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    if name not in _API:
        raise AttributeError(f"module 'hipmem' has no attribute {name!r}")
    module, attribute = _API[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
