"""Record tests/data/hipblaslt/decode-mi210.log: hipBLASLt's own bench log, written by the real
library (HIPBLASLT_LOG_MASK=32) while the worker runs hipblasLtMatmul on a virtual MI210 (the
kernels cannot launch there; the library logs the call first).

    HIPMEM_CACHE_DIR=... python -m tests.hipblaslt_log_recorder [ROCM]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from hipmem.sizing.hipblaslt.locator import hipblaslt_for
from hipmem.sizing.hipblaslt.matmul import parse_matmul
from hipmem.sizing.rocm.locator import locate
from hipmem.sizing.worker.process import WorkerProcess
from hipmem.sizing.worker.virtual_device import resolve

TARGET = Path(__file__).parent / "data" / "hipblaslt" / "decode-mi210.log"
# An LLM decode step (batch 16, hidden 4096, MLP 14336): q/k/v/o, gate/up, down; the gate/up
# GEMM twice per layer, so it is logged twice; then a batched attention-like GEMM.
CALLS = [
    "hipblaslt_matmul:m=4096,n=16,k=4096,transA=T,a_type=bf16_r",
    "hipblaslt_matmul:m=14336,n=16,k=4096,transA=T,a_type=bf16_r",
    "hipblaslt_matmul:m=14336,n=16,k=4096,transA=T,a_type=bf16_r",
    "hipblaslt_matmul:m=4096,n=16,k=14336,transA=T,a_type=bf16_r",
    "hipblaslt_matmul:m=128,n=16,k=1024,transA=T,a_type=bf16_r,batch_count=32",
]


def record(rocm: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["HIPBLASLT_LOG_MASK"] = "32"
        os.environ["HIPBLASLT_LOG_FILE"] = f"{scratch}/bench.log"
        build = hipblaslt_for(locate(rocm=rocm))
        worker = WorkerProcess(build.runs_with, resolve("MI210"))
        try:
            encoded = []
            for spec in CALLS:
                call = parse_matmul(spec).encode(80 << 20)
                call["run"] = True
                encoded.append(call)
            answers = list(worker.hipblaslt(build.library, encoded))
        finally:
            worker.close()
        assert all(isinstance(a, dict) and "run_status" in a for a in answers), answers
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        TARGET.write_text(Path(f"{scratch}/bench.log").read_text())


if __name__ == "__main__":
    record(sys.argv[1] if len(sys.argv) > 1 else "7.2")
