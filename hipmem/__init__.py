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
    report = hipmem.replay_log(log, hipmem.parse_spec("pool"))

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
    "CallResult": ("hipmem.sizing.calls.result", "CallResult"),
    "size_calls": ("hipmem.sizing.session", "size_calls"),
    "SizingRequest": ("hipmem.sizing.request", "SizingRequest"),
    "SizingAnswer": ("hipmem.sizing.request", "SizingAnswer"),
    "size_request": ("hipmem.sizing.request", "size_request"),
    "Minimum": ("hipmem.sizing.minimum", "Minimum"),
    "parse_call": ("hipmem.sizing.calls.spec", "parse_call"),
    "read_workload": ("hipmem.sizing.calls.workload_file", "read_workload"),
    "read_workload_entries": ("hipmem.sizing.calls.workload_file", "read_workload_entries"),
    "SweepResult": ("hipmem.sizing.sweeps.result", "SweepResult"),
    "SweptCall": ("hipmem.sizing.sweeps.plan", "SweptCall"),
    "plan_sweep": ("hipmem.sizing.sweeps.plan", "plan_sweep"),
    "parse_sweep": ("hipmem.sizing.sweeps.range", "parse_sweep"),
    "read_call_log": ("hipmem.sizing.calls.logs", "read_call_log"),
    "size_matmul_specs": ("hipmem.sizing.hipblaslt.matmul", "size_matmul_specs"),
    "recommended_hipblaslt_kib": ("hipmem.sizing.hipblaslt.matmul", "recommended_hipblaslt_kib"),
    "record_call_logs": ("hipmem.sizing.calls.log_recorder", "record_call_logs"),
    "recommend": ("hipmem.sizing.recommend", "recommend"),
    "Recommendation": ("hipmem.sizing.recommend", "Recommendation"),
    "read_setting": ("hipmem.sizing.workspace_check", "read_setting"),
    "read_environment_setting": ("hipmem.sizing.workspace_check", "read_environment_setting"),
    "check": ("hipmem.sizing.workspace_check", "check"),
    # replay
    "load_log": ("hipmem.replay.logs.loader", "load_log"),
    "AllocationLog": ("hipmem.replay.logs.events", "AllocationLog"),
    "analyze": ("hipmem.replay.logs.analysis", "analyze"),
    "replay_log": ("hipmem.replay.engine.run", "replay_log"),
    "load_job": ("hipmem.replay.job", "load_job"),
    "replay_job": ("hipmem.replay.job", "replay_job"),
    "ReplayJob": ("hipmem.replay.job", "ReplayJob"),
    "ReplayOptions": ("hipmem.replay.engine.options", "ReplayOptions"),
    "parse_spec": ("hipmem.replay.engine.resources", "parse_spec"),
    "find_capacities": ("hipmem.replay.capacity.capacities", "find_capacities"),
    "find_capacity": ("hipmem.replay.capacity.search", "find_capacity"),
    "fits_table": ("hipmem.replay.capacity.fits", "fits_table"),
    "recommend_allocator_settings": (
        "hipmem.replay.settings.recommend",
        "recommend_allocator_settings",
    ),
    "AllocatorRecommendation": ("hipmem.replay.settings.recommend", "AllocatorRecommendation"),
    "check_allocator_settings": ("hipmem.replay.settings.check", "check_allocator_settings"),
    "AllocatorCheck": ("hipmem.replay.settings.check", "AllocatorCheck"),
    "settings_to_check": ("hipmem.replay.explain.variables", "settings_to_check"),
    "CheckedSettings": ("hipmem.replay.explain.variables", "CheckedSettings"),
    "write_allocator_plot": ("hipmem.replay.settings.plot", "write_allocator_plot"),
    "explain": ("hipmem.replay.explain.explanation", "explain"),
    "Explanation": ("hipmem.replay.explain.explanation", "Explanation"),
    "write_state_plot": ("hipmem.replay.explain.plot", "write_state_plot"),
    "fetch_torch": ("hipmem.replay.pytorch.fetch", "fetch"),
    "record": ("hipmem.replay.record.run", "record"),
    "RecordRequest": ("hipmem.replay.record.run", "RecordRequest"),
    "Recording": ("hipmem.replay.record.run", "Recording"),
    "record_varied": ("hipmem.replay.record.vary", "record_varied"),
    "parse_variation": ("hipmem.replay.record.vary", "parse_variation"),
    "fetch_rmm": ("hipmem.replay.rmm.fetch", "fetch"),
    "write_rmm_csv": ("hipmem.replay.logs.writer", "write_rmm_csv"),
    "FleetRequest": ("hipmem.replay.fleet.run", "FleetRequest"),
    "run_fleet": ("hipmem.replay.fleet.run", "run_fleet"),
    "fleet_client": ("hipmem.replay.fleet.cluster", "fleet_client"),
    "summarize_fleet": ("hipmem.replay.fleet.summary", "summarize_fleet"),
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
    "CheckedSettings",
    "Explanation",
    "FleetRequest",
    "HipmemError",
    "Minimum",
    "Recommendation",
    "RecordRequest",
    "Recording",
    "ReplayJob",
    "ReplayOptions",
    "SessionResult",
    "SizingAnswer",
    "SizingRequest",
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
    "find_capacities",
    "find_capacity",
    "fits_table",
    "fleet_client",
    "format_bytes",
    "load_job",
    "load_log",
    "parse_bytes",
    "parse_call",
    "parse_spec",
    "parse_sweep",
    "parse_variation",
    "plan_sweep",
    "read_call_log",
    "read_environment_setting",
    "read_setting",
    "read_workload",
    "read_workload_entries",
    "recommend",
    "recommend_allocator_settings",
    "recommended_hipblaslt_kib",
    "record",
    "record_call_logs",
    "record_varied",
    "replay_job",
    "replay_log",
    "run_fleet",
    "settings_to_check",
    "size_calls",
    "size_matmul_specs",
    "size_request",
    "summarize_fleet",
    "write_allocator_plot",
    "write_rmm_csv",
    "write_state_plot",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ imports lazily
    from hipmem._core.byte_sizes import format_bytes, parse_bytes
    from hipmem._core.errors import HipmemError, UsageError
    from hipmem.replay.capacity.capacities import find_capacities
    from hipmem.replay.capacity.fits import fits_table
    from hipmem.replay.capacity.search import find_capacity
    from hipmem.replay.engine.options import ReplayOptions
    from hipmem.replay.engine.resources import parse_spec
    from hipmem.replay.engine.run import replay_log
    from hipmem.replay.explain.explanation import Explanation, explain
    from hipmem.replay.explain.plot import write_state_plot
    from hipmem.replay.explain.variables import CheckedSettings, settings_to_check
    from hipmem.replay.fleet.cluster import fleet_client
    from hipmem.replay.fleet.run import FleetRequest, run_fleet
    from hipmem.replay.fleet.summary import summarize_fleet
    from hipmem.replay.job import ReplayJob, load_job, replay_job
    from hipmem.replay.logs.analysis import analyze
    from hipmem.replay.logs.events import AllocationLog
    from hipmem.replay.logs.loader import load_log
    from hipmem.replay.logs.writer import write_rmm_csv
    from hipmem.replay.pytorch.fetch import fetch as fetch_torch
    from hipmem.replay.record.run import Recording, RecordRequest, record
    from hipmem.replay.record.vary import parse_variation, record_varied
    from hipmem.replay.rmm.fetch import fetch as fetch_rmm
    from hipmem.replay.settings.check import AllocatorCheck, check_allocator_settings
    from hipmem.replay.settings.plot import write_allocator_plot
    from hipmem.replay.settings.recommend import (
        AllocatorRecommendation,
        recommend_allocator_settings,
    )
    from hipmem.sizing.calls.log_recorder import record_call_logs
    from hipmem.sizing.calls.logs import read_call_log
    from hipmem.sizing.calls.result import CallResult
    from hipmem.sizing.calls.spec import parse_call
    from hipmem.sizing.calls.workload_file import read_workload, read_workload_entries
    from hipmem.sizing.hipblaslt.matmul import recommended_hipblaslt_kib, size_matmul_specs
    from hipmem.sizing.minimum import Minimum
    from hipmem.sizing.recommend import Recommendation, recommend
    from hipmem.sizing.request import SizingAnswer, SizingRequest, size_request
    from hipmem.sizing.session import SessionResult, SizingSession, size_calls
    from hipmem.sizing.sweeps.plan import SweptCall, plan_sweep
    from hipmem.sizing.sweeps.range import parse_sweep
    from hipmem.sizing.sweeps.result import SweepResult
    from hipmem.sizing.workspace_check import check, read_environment_setting, read_setting


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("hipmem")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    if name == "replay":  # the package, bound here once imported; the function is replay_log
        raise AttributeError(
            "hipmem.replay is the package (import hipmem.replay); the replay function is "
            "hipmem.replay_log"
        )
    if name not in _API:
        raise AttributeError(f"module 'hipmem' has no attribute {name!r}")
    module, attribute = _API[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
