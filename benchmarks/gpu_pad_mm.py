"""What a GPU decides in Inductor's pad_mm benchmark, for the recording's answer to it
(replay/record/boot/_hipmem_compile.py; its test holds the rule to these figures).

For matrix products of fp16, bf16 and fp32, aligned or not in each dimension, it times the
product as Inductor's pass times it (`benchmarker.benchmark_gpu`, warm-up 5) against the same
product on zero-padded copies (pad_mm's own `pad_mm`), with each input's padding timed or left
out (Inductor leaves out a copy that a fusion makes free), and writes Inductor's verdict
(`ori_time > pad_time * 1.1`) for each.

    python3 benchmarks/gpu_pad_mm.py OUT.json     # on a machine with an NVIDIA GPU and PyTorch

Measured 2026-11-29 on an H200 (PyTorch 2.11.0+cu130), 26 s:
tests/data/record/truths-h200-2026-11-29/pad_mm.json.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
from pathlib import Path

import torch
from torch._inductor.fx_passes import pad_mm as P
from torch._inductor.runtime.benchmarking import benchmarker

SHAPES = [(4096, 768, 50257), (2048, 768, 50257), (8192, 1024, 30522), (4096, 4096, 32001),
          (512, 768, 50257), (4096, 1000, 4096), (4096, 4096, 1001), (16384, 333, 2048),
          (1024, 4097, 1024), (8192, 2048, 50257), (4095, 4096, 4096), (300, 4096, 4096),
          (4096, 768, 3073), (2048, 1536, 10), (50257, 4096, 768), (768, 4096, 50257),
          (4096, 50257, 768), (30522, 8192, 1024), (1000, 4096, 2048), (2048, 1000, 768),
          (2048, 768, 100), (2048, 100, 768), (4096, 4096, 63), (4096, 4096, 200)]  # fmt: skip


def bench(fn: object) -> float:
    return float(benchmarker.benchmark_gpu(fn, warmup=5))


def product(dtype: torch.dtype, m: int, k: int, n: int) -> dict[str, object]:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    alignment = P.get_alignment_size(a)
    pads = [P.get_padded_length(size, alignment) for size in (m, k, n)]
    row: dict[str, object] = {"dtype": str(dtype), "m": m, "k": k, "n": n, "pads": pads,
                              "compute_bound": P.is_mm_compute_bound(m, k, n, dtype)}  # fmt: skip
    if not row["compute_bound"] or not any(pads):
        return row  # Inductor times neither
    m_pad, k_pad, n_pad = pads
    row["ori_ms"] = original = bench(lambda: torch.mm(a, b))
    for left_out_1, left_out_2 in itertools.product((False, True), repeat=2):
        a_in = P.pad_mat1(a, m_padded_length=m_pad, k_padded_length=k_pad) if left_out_1 else a
        b_in = P.pad_mat2(b, k_padded_length=k_pad, n_padded_length=n_pad) if left_out_2 else b
        padded = bench(functools.partial(P.pad_mm, a_in, b_in, m_pad, k_pad, n_pad,
                                         mat1_pre_padded=left_out_1,
                                         mat2_pre_padded=left_out_2))  # fmt: skip
        row[f"pad_faster_{int(left_out_1)}{int(left_out_2)}"] = original > padded * 1.1
    return row


def main() -> None:
    rows = []
    for dtype, (m, k, n) in itertools.product(
        (torch.bfloat16, torch.float16, torch.float32), SHAPES
    ):
        rows.append(product(dtype, m, k, n))
        print(rows[-1], flush=True)
    with Path(sys.argv[1]).open("w") as out:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "products": rows}, out, indent=0)  # fmt: skip


if __name__ == "__main__":
    main()
