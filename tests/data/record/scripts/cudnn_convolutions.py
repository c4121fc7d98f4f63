"""Runs the convolutions of a truth file (forward, then backward) as the GPU probe ran them and
writes each one's allocations and frees, so that a recording can be held to the GPU's
(tests/replay/record/test_cudnn_convolution.py).

    python cudnn_convolutions.py TRUTH.json OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F


def events_since(start: int) -> list[tuple[str, int]]:
    trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    kept = ("alloc", "free_requested")
    return [(e["action"][0], e["size"]) for e in trace if e["action"] in kept]


def measure(run: dict[str, Any]) -> dict[str, Any]:
    x_shape, w_shape, stride, padding, dilation, groups = run["cfg"]
    dtype = getattr(torch, run["dtype"].removeprefix("torch."))
    fmt = torch.channels_last if run["channels_last"] else torch.contiguous_format
    torch.cuda.empty_cache()
    x = torch.randn(x_shape, device="cuda", dtype=dtype).to(memory_format=fmt).requires_grad_()
    w = torch.randn(w_shape, device="cuda", dtype=dtype).to(memory_format=fmt).requires_grad_()
    start = len(torch.cuda.memory._snapshot()["device_traces"][0])
    y = F.conv2d(x, w, None, stride, padding, dilation, groups)
    forward = events_since(start)
    grad = torch.ones_like(y)
    start = len(torch.cuda.memory._snapshot()["device_traces"][0])
    y.backward(grad)
    return {"fwd": forward, "bwd": events_since(start)}


def main(truth: str, out: str) -> None:
    torch.cuda.init()  # the allocator exists: asking it before would crash
    if not torch._C._cuda_isHistoryEnabled():  # on the GPU; a recording has started it
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    runs = json.loads(Path(truth).read_text())["runs"]
    Path(out).write_text(json.dumps([measure(run) for run in runs]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
