"""Rewrites the call-log fixtures in tests/data/call_logs/ with the real libraries:

python -m tests.call_log_recorder
"""

from __future__ import annotations

from pathlib import Path

from hipmem.sizing.calls.log_recorder import record_call_logs
from hipmem.sizing.calls.spec import parse_call
from hipmem.sizing.rocm.catalog import load_catalog

FIXTURES = Path(__file__).parent / "data" / "call_logs"

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
    written = record_call_logs([parse_call(text, catalog) for text in FIXTURE_CALLS], FIXTURES)
    for file, path in written.items():
        print(f"wrote {path} ({sum(1 for _ in path.open())} lines) as {file}")


if __name__ == "__main__":
    main()
