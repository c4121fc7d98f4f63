"""hipmem's Python API: size rocBLAS/rocSOLVER workspaces with the real vendor libraries,
recommend the settings that cover them, replay RMM/hipMM allocation logs, and recommend
PyTorch's allocator settings from its memory snapshots.

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
    "SizingSession": ("hipmem.sizing.session", "SizingSession"),
    "SessionResult": ("hipmem.sizing.session", "SessionResult"),
    "CallResult": ("hipmem.sizing.call_result", "CallResult"),
    "size_calls": ("hipmem.sizing.session", "size_calls"),
    "Minimum": ("hipmem.sizing.minimum", "Minimum"),
    "parse_call": ("hipmem.sizing.call_spec", "parse_call"),
    "read_workload": ("hipmem.sizing.workload_file", "read_workload"),
    "read_workload_entries": ("hipmem.sizing.workload_file", "read_workload_entries"),
    "SweepResult": ("hipmem.sizing.sweep", "SweepResult"),
    "SweptCall": ("hipmem.sizing.sweep", "SweptCall"),
    "plan_sweep": ("hipmem.sizing.sweep", "plan_sweep"),
    "parse_sweep": ("hipmem.sizing.sweep_range", "parse_sweep"),
    "read_call_log": ("hipmem.sizing.call_logs", "read_call_log"),
    "size_matmuls": ("hipmem.sizing.hipblaslt_matmul", "size_matmul_specs"),
    "recommended_hipblaslt_kib": ("hipmem.sizing.hipblaslt_matmul", "recommended_kib"),
    "record_call_logs": ("hipmem.sizing.call_log_recorder", "record_call_logs"),
    "recommend": ("hipmem.sizing.recommend", "recommend"),
    "Recommendation": ("hipmem.sizing.recommend", "Recommendation"),
    "read_setting": ("hipmem.sizing.workspace_check", "read_setting"),
    "check": ("hipmem.sizing.workspace_check", "check"),
    # replay
    "load_log": ("hipmem.replay.log_loader", "load_log"),
    "AllocationLog": ("hipmem.replay.events", "AllocationLog"),
    "analyze": ("hipmem.replay.analysis", "analyze"),
    "replay": ("hipmem.replay.engine", "replay"),
    "ReplayOptions": ("hipmem.replay.engine", "ReplayOptions"),
    "parse_spec": ("hipmem.replay.resources", "parse_spec"),
    "find_capacity": ("hipmem.replay.capacity", "find_capacity"),
    "fits": ("hipmem.replay.virtual_capacity", "fits"),
    "recommend_allocator_settings": (
        "hipmem.replay.allocator_settings",
        "recommend_allocator_settings",
    ),
    "AllocatorRecommendation": ("hipmem.replay.allocator_settings", "AllocatorRecommendation"),
    "check_allocator_settings": ("hipmem.replay.allocator_check", "check_allocator_settings"),
    "AllocatorCheck": ("hipmem.replay.allocator_check", "AllocatorCheck"),
    "write_allocator_plot": ("hipmem.replay.allocator_plot", "write_allocator_plot"),
    "explain": ("hipmem.replay.explain", "explain"),
    "Explanation": ("hipmem.replay.explain", "Explanation"),
    "write_state_plot": ("hipmem.replay.explain_plot", "write_state_plot"),
    "fetch_torch": ("hipmem.replay.torch_fetch", "fetch"),
    "fetch_rmm": ("hipmem.replay.rmm_fetch", "fetch"),
    "write_rmm_csv": ("hipmem.replay.log_writer", "write_rmm_csv"),
    "FleetRequest": ("hipmem.replay.fleet", "FleetRequest"),
    "run_fleet": ("hipmem.replay.fleet", "run_fleet"),
    "fleet_client": ("hipmem.replay.fleet_cluster", "fleet_client"),
    "summarize_fleet": ("hipmem.replay.fleet_summary", "summarize"),
    # shared
    "HipmemError": ("hipmem._core.errors", "HipmemError"),
    "UsageError": ("hipmem._core.errors", "UsageError"),
    "parse_bytes": ("hipmem._core.byte_sizes", "parse_bytes"),
    "format_bytes": ("hipmem._core.byte_sizes", "format_bytes"),
}

__all__ = [
    "AllocationLog",
    "AllocatorCheck",
    "AllocatorRecommendation",
    "CallResult",
    "Explanation",
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
    "check_allocator_settings",
    "explain",
    "fetch_rmm",
    "fetch_torch",
    "find_capacity",
    "fits",
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
    "recommend_allocator_settings",
    "recommended_hipblaslt_kib",
    "record_call_logs",
    "replay",
    "run_fleet",
    "size_calls",
    "size_matmuls",
    "summarize_fleet",
    "write_allocator_plot",
    "write_rmm_csv",
    "write_state_plot",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ imports lazily
    from hipmem._core.byte_sizes import format_bytes, parse_bytes
    from hipmem._core.errors import HipmemError, UsageError
    from hipmem.replay.allocator_check import AllocatorCheck, check_allocator_settings
    from hipmem.replay.allocator_plot import write_allocator_plot
    from hipmem.replay.allocator_settings import (
        AllocatorRecommendation,
        recommend_allocator_settings,
    )
    from hipmem.replay.analysis import analyze
    from hipmem.replay.capacity import find_capacity
    from hipmem.replay.engine import ReplayOptions, replay
    from hipmem.replay.events import AllocationLog
    from hipmem.replay.explain import Explanation, explain
    from hipmem.replay.explain_plot import write_state_plot
    from hipmem.replay.fleet import FleetRequest, run_fleet
    from hipmem.replay.fleet_cluster import fleet_client
    from hipmem.replay.fleet_summary import summarize as summarize_fleet
    from hipmem.replay.log_loader import load_log
    from hipmem.replay.log_writer import write_rmm_csv
    from hipmem.replay.resources import parse_spec
    from hipmem.replay.rmm_fetch import fetch as fetch_rmm
    from hipmem.replay.torch_fetch import fetch as fetch_torch
    from hipmem.replay.virtual_capacity import fits
    from hipmem.sizing.call_log_recorder import record_call_logs
    from hipmem.sizing.call_logs import read_call_log
    from hipmem.sizing.call_result import CallResult
    from hipmem.sizing.call_spec import parse_call
    from hipmem.sizing.hipblaslt_matmul import recommended_kib as recommended_hipblaslt_kib
    from hipmem.sizing.hipblaslt_matmul import size_matmul_specs as size_matmuls
    from hipmem.sizing.minimum import Minimum
    from hipmem.sizing.recommend import Recommendation, recommend
    from hipmem.sizing.session import SessionResult, SizingSession, size_calls
    from hipmem.sizing.sweep import SweepResult, SweptCall, plan_sweep
    from hipmem.sizing.sweep_range import parse_sweep
    from hipmem.sizing.workload_file import read_workload, read_workload_entries
    from hipmem.sizing.workspace_check import check, read_setting


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
    if name == "replay":  # the package, callable as the function (see hipmem/replay/__init__)
        value = importlib.import_module("hipmem.replay")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
