"""Make the real rocBLAS/rocSOLVER write their call logs, through the virtual device.

rocBLAS logs a call only when it is made for real (not in size-query mode): the worker makes
each call with null device pointers, the library logs it and then rejects it (invalid_pointer).
rocSOLVER logs in query mode too, but only between rocsolver_log_begin() and _end().

    python -m tests.call_log_recorder   # rewrites the fixtures in tests/data/call_logs/
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sizing.call_spec import Call, parse_call
from sizing.catalog import load_catalog
from sizing.library_locator import locate
from sizing.virtual_device import resolve
from sizing.worker_process import WorkerProcess

FIXTURES = Path(__file__).parent / "data" / "call_logs"
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


def record(calls: Sequence[Call], directory: Path, device: str = "MI210") -> dict[str, Path]:
    """Make every call once (rocBLAS for real, rocSOLVER in query mode); the logs written."""
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


# The fixture workload: calls an application might make, a few of them repeated.
FIXTURE_CALLS = (
    "rocblas_sgemm:transA=N,transB=T,m=1024,n=512,k=256",
    "rocblas_dgemm_strided_batched:m=64,n=64,k=64,batch_count=8",
    "rocblas_gemm_ex:m=1024,n=16,k=27,a_type=f16_r",
    "rocblas_gemm_ex:m=1024,n=16,k=27,a_type=f16_r",
    "rocblas_gemm_ex:m=512,n=512,k=512,a_type=bf16_r",
    "rocblas_strsm:side=left,uplo=lower,m=2048,n=2048",
    "rocblas_dtrsm:side=right,uplo=upper,transA=T,diag=unit,m=300,n=500",
    "rocblas_dnrm2:n=100000",
    "rocblas_dnrm2:n=100000",
    "rocblas_zdotc_strided_batched:n=4096,batch_count=16",
    "rocblas_isamax:n=1000000",
    "rocblas_cgemv:trans=C,m=500,n=700",
    "rocblas_zherk:uplo=lower,transA=C,n=300,k=100",
    "rocblas_dtrtri:n=1000",
    "rocsolver_dgetrf:m=1024,n=1024",
    "rocsolver_dgetrs:n=1024,nrhs=1",
    "rocsolver_dgetrf:m=1024,n=1024",
    "rocsolver_spotrf_strided_batched:uplo=lower,n=128,batch_count=32",
    "rocsolver_zheevd:evect=original,uplo=lower,n=500",
    "rocsolver_dgesvd:left_svect=singular,right_svect=none,m=400,n=300",
    "rocsolver_sgeqrf_batched:m=1000,n=200,batch_count=4",
    "rocsolver_dsyevx:evect=original,erange=index,il=1,iu=10,n=300",
    "rocsolver_cgels:trans=C,m=300,n=200,nrhs=5",
)


def main() -> None:
    catalog = load_catalog()
    written = record([parse_call(text, catalog) for text in FIXTURE_CALLS], FIXTURES)
    for file, path in written.items():
        print(f"wrote {path} ({sum(1 for _ in path.open())} lines) as {file}")


if __name__ == "__main__":
    main()
