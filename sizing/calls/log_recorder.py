"""Make the real rocBLAS/rocSOLVER write their own call logs for a list of calls.

Users record call logs on production machines (`ROCBLAS_LAYER`, `ROCSOLVER_LAYER`); this writes
the same files for calls they only have as specs or a workload, through the virtual device: the
bench lines (`rocblas-bench ...`, `rocsolver-bench ...`) can then be run on a real GPU, and the
project's own call-log fixtures are written this way.

rocBLAS logs a call only when it is made for real (not in size-query mode): the worker makes
each call with null device pointers, the library logs it and then rejects it (invalid_pointer).
rocSOLVER logs in query mode too, but only between rocsolver_log_begin() and _end().
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..rocm.catalog import load_catalog
from ..rocm.locator import locate
from ..worker.process import WorkerProcess
from ..worker.virtual_device import resolve
from .spec import Call

LOG_FILES = {
    "ROCBLAS_LOG_TRACE_PATH": "rocblas-trace.log",
    "ROCBLAS_LOG_BENCH_PATH": "rocblas-bench.log",
    "ROCBLAS_LOG_PROFILE_PATH": "rocblas-profile.yaml",
    "ROCSOLVER_LOG_TRACE_PATH": "rocsolver-trace.log",
    "ROCSOLVER_LOG_BENCH_PATH": "rocsolver-bench.log",
    "ROCSOLVER_LOG_PROFILE_PATH": "rocsolver-profile.log",
}


@contextmanager
def _logging_environment(directory: Path) -> Iterator[None]:
    settings = {"ROCBLAS_LAYER": "7", "ROCSOLVER_LAYER": "7"}
    settings |= {name: str(directory / file) for name, file in LOG_FILES.items()}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def record_call_logs(
    calls: Sequence[Call], directory: Path, device: str = "MI210"
) -> dict[str, Path]:
    """Make every call once (rocBLAS for real, rocSOLVER in query mode) with every log layer
    on; the log files written in `directory`, by file name."""
    catalog = load_catalog()
    directory.mkdir(parents=True, exist_ok=True)
    with _logging_environment(directory):
        worker = WorkerProcess(locate(), resolve(device))
        try:
            worker.rocsolver_log("begin")
            encoded = [
                {
                    "function": call.routine.name,
                    "library": call.routine.library,
                    "args": call.worker_args(catalog),
                }
                for call in calls
            ]
            blas = [e for e in encoded if e["library"] == "rocblas"]
            solver = [e for e in encoded if e["library"] == "rocsolver"]
            worker.run(blas)
            list(worker.size(solver))
            worker.rocsolver_log("end")
        finally:
            worker.close()
    return {file: directory / file for file in LOG_FILES.values() if (directory / file).exists()}
