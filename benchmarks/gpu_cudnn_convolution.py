"""cuDNN's convolution workspaces on the GPU, as the table a recording answers from (#52,
replay/record/csrc/libraries/cudnn_convolution.c).

PyTorch runs a convolution on the engine that cuDNN's heuristic ranks first and allocates that
plan's workspace through its caching allocator (aten/src/ATen/native/cudnn/Conv_v8.cpp,
`run_conv_plan`). Which engine ranks first is cuDNN's closed decision, so the workspace is
measured here: for the convolutions of common torchvision models at several batch sizes,
image sides and data types, a child process runs each forward and backward with
cudnn-frontend's log on, and this process reads from the log what cuDNN was given (the
tensors' dimensions, strides, data type and alignment, the padding, stride and dilation) and
what it answered (the engine and its workspace bytes).

On the GPU machine (python3 with torch and torchvision; hipmem need not be installed):

    run(command="python3 benchmarks/gpu_cudnn_convolution.py $OUT/table.json --seconds 420")

The batch sizes of tests/data/record/scripts/resnet_amp.py (37, 70, 77, 81, 94, 96) and 33 are
left out for ResNet-18 and -50 on purpose (HELD_OUT): those recordings are held to the GPU
through interpolation between measured batch sizes, not by a measured answer for their own
shapes. The table of 2026-11-29 ran out of its 470 seconds in the last group (the other
models' multiples of 8 from 40 up).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

Conv = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...],
             tuple[int, ...], int]  # fmt: skip
# Batch sizes never measured for the ResNets: tests/data/record/scripts/resnet_amp.py's, and
# 33 (tests/replay/record/test_cudnn_convolution.py), so that their recordings are held to the
# GPU through interpolation (docs/record.md).
HELD_OUT = {33, 37, 70, 77, 81, 94, 96}
# (models, batch sizes, image sides, data types), most common first: the child stops at its
# time budget and the table keeps what it reached.
PLAN: list[tuple[list[str], list[int], list[int], list[str]]] = [
    (["resnet50", "resnet18"], [32, 64, 128, 16, 8, 48, 24, 1, 2, 4, 256], [224, 256, 192, 160],
     ["float16", "bfloat16", "float32"]),
    (["resnet34", "resnext50_32x4d", "wide_resnet50_2", "vgg16", "mobilenet_v2",
      "efficientnet_b0", "convnext_tiny", "densenet121", "regnet_y_400mf"],
     [32, 64, 128, 16, 8, 1], [224], ["float16", "bfloat16", "float32"]),
    (["resnet18", "resnet50", "vgg16"], [128, 64, 32, 256, 16], [32], ["float16", "float32"]),
    # Multiples of 8 between, where users' batch sizes fall: a workspace between measured
    # batch sizes is interpolated, and the heuristic changes engines between them.
    (["resnet50", "resnet18"], [40, 56, 72, 80, 88, 104, 112, 120, 160, 192],
     [224, 256, 192, 160], ["float16", "bfloat16", "float32"]),
    (["resnet34", "resnext50_32x4d", "wide_resnet50_2", "vgg16", "mobilenet_v2",
      "efficientnet_b0", "convnext_tiny", "densenet121", "regnet_y_400mf"],
     [24, 48, 96, 256], [224], ["float16", "bfloat16", "float32"]),
    # Every batch size up to 128 for the ResNets at 224 in half precision (but the script's),
    # then the other models' multiples of 8.
    (["resnet50", "resnet18"], [n for n in range(1, 129) if n not in HELD_OUT], [224],
     ["float16", "bfloat16"]),
    (["resnet34", "resnext50_32x4d", "wide_resnet50_2", "vgg16", "mobilenet_v2",
      "efficientnet_b0", "convnext_tiny", "densenet121", "regnet_y_400mf"],
     [40, 56, 72, 80, 88, 104, 112, 120, 136, 144, 160, 176, 192], [224],
     ["float16", "bfloat16"]),
]  # fmt: skip
_TENSOR = re.compile(
    r'Datatype: \["(\w+)"\]\s+Id: (\d+)\s+Dims \d+\s+VectorCount: \d+\s+vectorDimension -?\d+'
    r"\s+Dim \[ ([\d,]+) \]\s+Str \[ ([\d,]+) \]\s+isVirtual: \d\s+isByValue: \d\s+"
    r"Alignment: (\d+)"
)
_CONVOLUTION = re.compile(
    r'CONVOLUTION_DESCRIPTOR : Datatype: \["(\w+)"\].*?PadLower \[ ([\d,]+) \] '
    r"PadUpper \[,([\d,]+) \] Dilation \[,([\d,]+) \] Stride \[,([\d,]+)\]"
)
_PLAN = re.compile(r"EXECUTION_PLAN_DESCRIPTOR : (Conv\w+?)_(eng[^,]*),.*?workSpaceSize: (\d+)")


def model_convolutions(name: str, batch: int, side: int) -> list[Conv]:
    """Each 2-d convolution a torchvision model runs on a batch of images (on the meta device:
    shapes only)."""
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(weights=None).to("meta").eval()
    found: list[Conv] = []

    def hook(module: Any, inputs: Any, output: Any) -> None:
        found.append((tuple(inputs[0].shape), tuple(module.weight.shape), module.stride,
                      module.padding, module.dilation, module.groups))  # fmt: skip

    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            module.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.empty(batch, 3, side, side, device="meta"))
    return found


def run_convolutions(seconds: float) -> None:
    """The child: every planned convolution, forward and backward, until the time is up."""
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.enabled = True
    seen: set[tuple[Conv, str]] = set()
    start = time.monotonic()
    for models, batches, sides, dtypes in PLAN:
        for batch in batches:
            for side in sides:
                for name in models:
                    for conv in model_convolutions(name, batch, side):
                        for dtype in dtypes:
                            if (conv, dtype) in seen:
                                continue
                            seen.add((conv, dtype))
                            x_shape, w_shape, stride, padding, dilation, groups = conv
                            kind = getattr(torch, dtype)
                            x = torch.randn(x_shape, device="cuda", dtype=kind).requires_grad_()
                            w = torch.randn(w_shape, device="cuda", dtype=kind).requires_grad_()
                            y = F.conv2d(x, w, None, stride, padding, dilation, groups)
                            y.backward(torch.ones_like(y))
                            del x, w, y
                    if time.monotonic() - start > seconds:
                        print(f"time is up: {len(seen)} convolutions", flush=True)
                        return
    print(f"all {len(seen)} convolutions", flush=True)


def tensor_text(match: re.Match[str]) -> str:
    data_type, _, dims, strides, alignment = match.groups()
    return f"{data_type}:{dims}:{strides}:{alignment}"


def table_rows(log: str) -> list[dict[str, Any]]:
    """One row per plan PyTorch ran: what cuDNN was given and what it answered."""
    rows = []
    for block in log.split("CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR"):
        plan, conv = _PLAN.search(block), _CONVOLUTION.search(block)
        tensors = {chr(int(m.group(2))): tensor_text(m) for m in _TENSOR.finditer(block)}
        if not plan or not conv or set(tensors) != {"x", "y", "w"}:
            continue
        compute, pre, post, dilation, stride = conv.groups()
        rows.append({"operation": plan.group(1), "x": tensors["x"], "w": tensors["w"],
                     "y": tensors["y"], "compute": compute, "pre": pre, "post": post,
                     "dilation": dilation, "stride": stride, "engine": plan.group(2),
                     "workspace_bytes": int(plan.group(3))})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seconds", type=float, default=400.0)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        run_convolutions(args.seconds)
        return
    import torch

    with tempfile.TemporaryDirectory() as work:
        log_path = Path(work) / "frontend.log"
        env = {**os.environ, "CUDNN_FRONTEND_LOG_INFO": "1",
               "CUDNN_FRONTEND_LOG_FILE": str(log_path)}  # fmt: skip
        subprocess.run([sys.executable, __file__, args.out, "--seconds", str(args.seconds),
                        "--child"], env=env, check=True)  # fmt: skip
        rows = table_rows(log_path.read_text())
    unique = {json.dumps(row, sort_keys=True) for row in rows}
    answer = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(),
              "rows": [json.loads(row) for row in sorted(unique)]}  # fmt: skip
    with gzip.open(args.out if args.out.endswith(".gz") else args.out + ".gz", "wt") as out:
        json.dump(answer, out)
    print(f"{len(rows)} plans, {len(unique)} distinct rows")


if __name__ == "__main__":
    main()
