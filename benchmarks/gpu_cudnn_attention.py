"""cuDNN attention's requests to PyTorch's allocator, attention by attention: what the GPU
answers and what a recording with no GPU must give back (#52, replay/record/csrc/libraries/
libcudnn.c). For each of 53 attentions (shapes, layouts, causal or not, dropout, fp16/bf16,
with and without a backward, grouped-query, queries shorter than keys) it runs
`F.scaled_dot_product_attention` under cuDNN attention and keeps the (action, bytes) of every
allocation and free it made, from the allocator's history, and which backend PyTorch would
have chosen by itself
(`torch._fused_sdp_choice`: 3 is cuDNN).

On the GPU machine (python3 with torch; hipmem need not be installed; about 30 s):

    run(command="python3 benchmarks/gpu_cudnn_attention.py $OUT/cudnn_attention.json")

With no GPU, the same file under `hipmem record` gives the recording's answers, which
tests/replay/record/test_cudnn_attention.py holds to the GPU's
(tests/data/record/truths-h200-2026-11-29/cudnn_attention.json):

    hipmem record --device H200 --torch 2.11 -- python3 benchmarks/gpu_cudnn_attention.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

Config = dict[str, Any]
SHAPES = [(12, 12, 1024, 64), (8, 12, 1024, 64), (1, 12, 1024, 64), (4, 16, 512, 128),
          (2, 8, 2048, 64), (3, 12, 384, 64), (16, 12, 256, 64), (12, 12, 1024, 128)]  # fmt: skip
NANOGPT: Config = {"b": 12, "h": 12, "s": 1024, "d": 64, "layout": "qkv_split", "causal": True,
                   "dtype": "bfloat16", "grad": True, "dropout": 0.0}  # fmt: skip
CONFIGS: list[Config] = [
    {"b": b, "h": h, "s": s, "d": d, "layout": layout, "causal": causal, "dtype": "bfloat16",
     "grad": True, "dropout": 0.0}
    for (b, h, s, d) in SHAPES
    for layout in ("contiguous", "qkv_split")
    for causal in (True, False)
] + [
    {**NANOGPT, "dtype": "float16"},
    {**NANOGPT, "dropout": 0.1},
    {**NANOGPT, "grad": False},
    {"b": 4, "h": 16, "s": 512, "d": 128, "layout": "contiguous", "causal": False,
     "dtype": "float16", "grad": False, "dropout": 0.0},
    {"b": 2, "h": 12, "s": 1000, "d": 64, "layout": "contiguous", "causal": True,
     "dtype": "bfloat16", "grad": True, "dropout": 0.0},
    {"b": 2, "h": 12, "s": 77, "d": 64, "layout": "qkv_split", "causal": False,
     "dtype": "bfloat16", "grad": True, "dropout": 0.0},
] + [  # grouped-query attention (enable_gqa): hk key and value heads shared by h query heads
    {"b": b, "h": h, "hk": hk, "s": s, "d": d, "layout": "contiguous", "causal": causal,
     "dtype": dtype, "grad": grad, "dropout": 0.0}
    for (b, h, hk, s, d, causal, dtype, grad) in [
        (8, 16, 8, 1024, 64, True, "bfloat16", True), (4, 16, 4, 512, 128, True, "bfloat16", True),
        (2, 12, 1, 1024, 64, True, "bfloat16", True), (3, 8, 2, 384, 64, False, "bfloat16", True),
        (4, 16, 4, 512, 128, True, "float16", True), (8, 16, 8, 1024, 64, True, "bfloat16", False),
    ]
] + [  # queries shorter than keys and values (skv), as in generation with a cache
    {"b": b, "h": 16, "s": s, "skv": skv, "d": 64, "layout": "contiguous", "causal": causal,
     "dtype": "bfloat16", "grad": grad, "dropout": 0.0}
    for (b, s, skv, causal, grad) in [
        (8, 1, 300, False, False), (64, 1, 513, False, False), (8, 1, 1024, False, False),
        (8, 2, 512, False, False), (8, 16, 512, False, False), (8, 64, 512, False, False),
        (8, 16, 512, True, False), (8, 1, 512, False, True), (8, 64, 512, False, True),
    ]
]  # fmt: skip


def attention_inputs(config: Config) -> tuple[torch.Tensor, ...]:
    dtype = getattr(torch, config["dtype"])
    b, h, s, d = config["b"], config["h"], config["s"], config["d"]
    hk, skv = config.get("hk", h), config.get("skv", s)
    if config["layout"] == "contiguous":
        q = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(b, hk, skv, d, device="cuda", dtype=dtype) for _ in range(2))
    else:  # nanoGPT's: one (B, S, 3*H*D) projection, split, viewed and transposed
        qkv = torch.randn(b, s, 3 * h * d, device="cuda", dtype=dtype)
        q, k, v = (t.view(b, s, h, d).transpose(1, 2) for t in qkv.split(h * d, dim=2))
    if config["grad"]:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    return q, k, v


def allocator_events(config: Config) -> tuple[int, list[tuple[str, int]]]:
    """PyTorch's own choice of backend, and the attention's allocations and frees in order: the
    allocator history's events after the inputs were made (the history stays on throughout, so
    that under `hipmem record` the recording's own snapshot keeps it)."""
    torch.cuda.empty_cache()
    q, k, v = attention_inputs(config)
    start = len(torch.cuda.memory._snapshot()["device_traces"][0])
    gqa = "hk" in config
    choice = int(torch._fused_sdp_choice(q, k, v, None, config["dropout"], config["causal"],
                                         enable_gqa=gqa))  # fmt: skip
    grad = torch.enable_grad() if config["grad"] else torch.no_grad()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), grad:
        o = F.scaled_dot_product_attention(
            q, k, v, is_causal=config["causal"], dropout_p=config["dropout"], enable_gqa=gqa
        )
        if config["grad"]:
            o.backward(torch.ones_like(o))
    del o
    trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    events = [(e["action"], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested")]
    return choice, events


def main(out: str) -> None:
    torch.backends.cuda.enable_cudnn_sdp(True)
    torch.backends.cudnn.enabled = True
    torch.cuda.init()  # the allocator exists: asking it before would crash
    if not torch._C._cuda_isHistoryEnabled():  # on the GPU; a recording has started it
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    answer: dict[str, Any] = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                              "device": torch.cuda.get_device_name(), "runs": []}  # fmt: skip
    for config in CONFIGS:
        choice, events = allocator_events(config)
        answer["runs"].append({"config": config, "choice": choice, "trace": events})
        print(config, len(events), flush=True)
    Path(out).write_text(json.dumps(answer))


if __name__ == "__main__":
    main(sys.argv[1])
