"""cuDNN's convolution workspaces on the GPU, as the table a recording answers from (#52,
replay/record/csrc/libraries/cudnn_convolution.c).

PyTorch runs a convolution on the engine that cuDNN's heuristic ranks first and allocates that
plan's workspace through its caching allocator (aten/src/ATen/native/cudnn/Conv_v8.cpp,
`run_conv_plan`). Which engine ranks first is cuDNN's closed decision, so the workspace is
measured here: for the convolutions of common torchvision models at several batch sizes,
image sides, data types and layouts, child processes run each forward and backward with
cudnn-frontend's log on, and this process reads from the log what cuDNN was given (the
tensors' dimensions, strides, data type and alignment, the padding, stride and dilation) and
what it answered (the engine and its workspace bytes).

On the GPU machine (python3 with torch and torchvision; hipmem need not be installed), the
workers sharing the GPU and its cores (each claims the next items of the plan, most common
first, until none is left or its time is up), then here, the run merged into the table:

    run(command="python3 benchmarks/gpu_cudnn_convolution.py $OUT/run.json --workers 14
                 --seconds 400 --skip replay/record/csrc/cudnn_convolutions_h200.json.xz")
    python benchmarks/gpu_cudnn_convolution.py --merge RUN.json.gz

`--skip` leaves out what the table has (a run adds to it); `--merge` refuses a run of another
GPU, PyTorch or cuDNN, or one that answers a measured convolution otherwise.

The batch sizes of tests/data/record/scripts/resnet_amp.py (37, 70, 77, 81, 94, 96) and 33 are
left out for the ResNets on purpose (HELD_OUT, for every model's convolutions of a ResNet's
shape): those recordings are held to the GPU through interpolation between measured batch
sizes, not by a measured answer for their own shapes. The table is five runs on an H200 of
2026-11-29: the first plan's groups by one worker (57,423 plans; it ran out of time in its
last group), then the whole plan by 12 to 14 workers in four runs (the last three with --skip)
(docs/record.md).
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import json
import lzma
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Conv = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...],
             tuple[int, ...], int]  # fmt: skip
# Batch sizes never measured for the ResNets: tests/data/record/scripts/resnet_amp.py's, and
# 33 (tests/replay/record/test_cudnn_convolution.py), so that their recordings are held to the
# GPU through interpolation (docs/record.md).
HELD_OUT = {33, 37, 70, 77, 81, 94, 96}
RESNETS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
SKIP: Path | None = None  # --skip: a table whose convolutions are not measured again
COMMON = [32, 64, 128, 16, 8, 24, 48, 96, 256, 1, 2, 4]
EIGHTS = [40, 56, 72, 80, 88, 104, 112, 120, 136, 144, 152, 160, 176, 192, 224]
FIRST_MODELS = [
    "resnet34",
    "resnext50_32x4d",
    "wide_resnet50_2",
    "vgg16",
    "mobilenet_v2",
    "efficientnet_b0",
    "convnext_tiny",
    "densenet121",
    "regnet_y_400mf",
]
MORE_MODELS = [
    "resnet101",
    "resnet152",
    "resnext101_32x8d",
    "wide_resnet101_2",
    "vgg11",
    "vgg13",
    "vgg19",
    "mobilenet_v3_large",
    "mobilenet_v3_small",
    "efficientnet_b1",
    "efficientnet_b2",
    "efficientnet_b3",
    "efficientnet_v2_s",
    "convnext_small",
    "convnext_base",
    "densenet169",
    "densenet201",
    "regnet_y_1_6gf",
    "regnet_x_400mf",
    "shufflenet_v2_x1_0",
    "squeezenet1_1",
    "googlenet",
    "alexnet",
    "mnasnet1_0",
    "vit_b_16",
    "swin_t",
]
HALF = ["float16", "bfloat16"]
ALL_TYPES = ["float16", "bfloat16", "float32"]
# (models, batch sizes, image sides, data types, channels-last), most common first: the
# children stop at their time budget and the table keeps what they reached. The first seven
# groups are the first table's (measured again: an answer that differs is a finding).
PLAN: list[tuple[list[str], list[int], list[int], list[str], bool]] = [
    (["resnet50", "resnet18"], [32, 64, 128, 16, 8, 48, 24, 1, 2, 4, 256], [224, 256, 192, 160],
     ALL_TYPES, False),
    (FIRST_MODELS, [32, 64, 128, 16, 8, 1], [224], ALL_TYPES, False),
    (["resnet18", "resnet50", "vgg16"], [128, 64, 32, 256, 16], [32], ["float16", "float32"],
     False),
    # Multiples of 8 between, where users' batch sizes fall: a workspace between measured
    # batch sizes is interpolated, and the heuristic changes engines between them.
    (["resnet50", "resnet18"], [40, 56, 72, 80, 88, 104, 112, 120, 160, 192],
     [224, 256, 192, 160], ALL_TYPES, False),
    (FIRST_MODELS, [24, 48, 96, 256], [224], ALL_TYPES, False),
    # Every batch size up to 128 for the ResNets at 224 in half precision (but the held-out
    # ones), then the other models' multiples of 8.
    (["resnet50", "resnet18"], list(range(1, 129)), [224], HALF, False),
    (FIRST_MODELS, EIGHTS, [224], HALF, False),
    # Then: channels-last (model.to(memory_format=torch.channels_last)), more
    # models, every batch size up to 128 for the first models, fp32 between, CIFAR sides.
    (["resnet50", "resnet18", "resnet34", "resnet101", "mobilenet_v2", "efficientnet_b0",
      "convnext_tiny"], COMMON, [224], ALL_TYPES, True),
    (MORE_MODELS, COMMON, [224], ALL_TYPES, False),
    (["inception_v3"], COMMON, [299], ALL_TYPES, False),
    (["resnet50", "resnet18", "resnet34", "resnet101", "mobilenet_v2", "efficientnet_b0",
      "convnext_tiny"], EIGHTS, [224], HALF, True),
    (FIRST_MODELS, [n for n in range(1, 129)], [224], HALF, False),
    (["resnet18", "resnet50", "vgg16", "resnet34"], COMMON + EIGHTS + [384, 512], [32],
     ALL_TYPES, False),
    (["resnet50", "resnet18", *FIRST_MODELS], EIGHTS, [224], ["float32"], False),
    (MORE_MODELS, EIGHTS, [224], HALF, False),
    (["resnet50", "resnet18"], [n for n in range(129, 257) if n % 4 == 0] + [384, 512], [224],
     HALF, False),
    (["resnet50", "resnet18", "resnet34", "resnet101"], list(range(1, 129)), [224], HALF, True),
    # And: auxiliary classifiers (training mode), every batch size up
    # to 128 for the other models in half precision and for the ResNets in fp32.
    (["inception_v3"], COMMON + EIGHTS, [299], ALL_TYPES, False),
    (["googlenet"], COMMON + EIGHTS, [224], ALL_TYPES, False),
    (["resnet50", "resnet18"], list(range(1, 129)), [224], ["float32"], False),
    (["inception_v3"], list(range(1, 129)), [299], HALF, False),
    (MORE_MODELS, list(range(1, 129)), [224], HALF, False),
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


def model_convolutions(name: str, side: int) -> list[Conv]:
    """Each 2-d convolution a torchvision model runs in training (auxiliary classifiers
    included) on a batch of images (on the meta device: shapes only); a batch of N runs the
    same ones with N in front. (Two images: batch norm in training wants two values.)"""
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(weights=None).to("meta").train()
    found: list[Conv] = []

    def hook(module: Any, inputs: Any, output: Any) -> None:
        found.append((tuple(inputs[0].shape), tuple(module.weight.shape), module.stride,
                      module.padding, module.dilation, module.groups))  # fmt: skip

    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            module.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.empty(2, 3, side, side, device="meta"))
    return found


Item = tuple[Conv, str, bool]  # a convolution, its data type, channels-last or not


def planned_items() -> list[Item]:
    """Every convolution of the plan once, in its order, but the ResNets' at the batch sizes
    held out (HELD_OUT; any model's convolution of a ResNet's shape included)."""
    shapes: dict[tuple[str, int], list[Conv]] = {}

    def convolutions(name: str, side: int) -> list[Conv]:
        if (name, side) not in shapes:
            shapes[name, side] = model_convolutions(name, side)
        return shapes[name, side]

    resnet_shapes = {(x_shape[1:], *rest) for name in RESNETS for side in (224, 256, 192, 160, 32)
                     for x_shape, *rest in convolutions(name, side)}  # fmt: skip
    items: dict[Item, None] = {}
    for models, batches, sides, dtypes, channels_last in PLAN:
        for batch in batches:
            for side in sides:
                for name in models:
                    for x_shape, *rest in convolutions(name, side):
                        if batch in HELD_OUT and (x_shape[1:], *rest) in resnet_shapes:
                            continue
                        conv = ((batch, *x_shape[1:]), *rest)
                        for dtype in dtypes:
                            items.setdefault((conv, dtype, channels_last), None)  # type: ignore[arg-type]
    return items_not_in(list(items), SKIP)


Name = tuple[str, ...]


def item_name(conv: Any, dtype: str, channels_last: bool) -> Name:
    """What a table row says of its convolution: data type, x's and w's dimensions, stride,
    padding, dilation, layout."""
    texts = [",".join(map(str, part)) for part in conv[:5]]
    return (dtype_name(dtype), *texts, str(channels_last))


def row_name(row: dict[str, Any]) -> Name:
    """The name of a row's convolution (channels-last: x's channels are its densest dimension
    and a column steps over them, which tells the layouts apart for a 1x1 image too)."""
    data_type, dims, strides, _ = row["x"].split(":")
    sizes, steps = dims.split(","), strides.split(",")
    channels_last = len(sizes) == 4 and steps[1] == "1" and steps[3] == sizes[1]
    w_dims = row["w"].split(":")[1]
    return (data_type, dims, w_dims, row["stride"], row["pre"], row["dilation"],
            str(channels_last))  # fmt: skip


def items_not_in(items: list[Item], table: Path | None) -> list[Item]:
    """The items a table (a run before) has no row of."""
    if table is None:
        return items
    measured = {row_name(row) for row in read_table(table)["rows"]}
    return [item for item in items if item_name(*item) not in measured]


CHUNK = 64  # items a worker claims at a time: workers that draw cheap ones take more


def claimed_chunks(work: Path, count: int) -> Iterator[range]:
    """The next items no worker has claimed yet, a chunk at a time (a counter in a locked
    file), until none is left."""
    while True:
        with (work / "next.lock").open("a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.seek(0)
            first = int(lock.read() or 0)
            lock.seek(0)
            lock.truncate()
            lock.write(str(first + CHUNK))
        if first >= count:
            return
        yield range(first, min(first + CHUNK, count))


def run_convolutions(seconds: float, worker: int, work: Path) -> None:
    """A child: the planned convolutions it claims, forward and backward, until none is left
    or the time is up. Workers share the GPU's memory: a workspace that cannot be allocated
    makes PyTorch run the next plan, whose answer is not the one asked for, so each allocator
    failure (`num_ooms`) names its convolution for the parent to drop, and the cache is
    emptied whenever it holds more than a few GiB."""
    import torch

    torch.backends.cudnn.enabled = True
    start = time.monotonic()
    planned = json.loads((work / "items.json").read_text())
    failed: list[Item] = []
    done = 0
    for chunk in claimed_chunks(work, len(planned)):
        if time.monotonic() - start > seconds:
            break
        for index in chunk:
            conv, dtype, channels_last = planned[index]
            item = (tuple(map(tuple_of, conv)), dtype, channels_last)
            if not run_convolution(torch, *item):
                failed.append(item)
            done += 1
    (work / f"oom{worker}.json").write_text(json.dumps(failed))
    print(f"worker {worker}: {done} convolutions, {len(failed)} short of memory, "
          f"{time.monotonic() - start:.0f} s", flush=True)  # fmt: skip


def run_convolution(torch: Any, conv: Conv, dtype: str, channels_last: bool) -> bool:
    """One convolution forward and backward; False if the allocator ran short of memory."""
    import torch.nn.functional as F

    x_shape, w_shape, stride, padding, dilation, groups = conv
    kind = getattr(torch, dtype)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    ooms = torch.cuda.memory_stats().get("num_ooms", 0)
    try:
        x = torch.randn(x_shape, device="cuda", dtype=kind).to(memory_format=layout)
        w = torch.randn(w_shape, device="cuda", dtype=kind).to(memory_format=layout)
        x.requires_grad_()
        w.requires_grad_()
        y = F.conv2d(x, w, None, stride, padding, dilation, groups)
        y.backward(torch.ones_like(y))
        del x, w, y
    except torch.cuda.OutOfMemoryError:
        pass
    if torch.cuda.memory_reserved() > 4 << 30:
        torch.cuda.empty_cache()
    return bool(torch.cuda.memory_stats().get("num_ooms", 0) == ooms)


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


def tuple_of(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def dtype_name(dtype: str) -> str:
    return {"float16": "HALF", "bfloat16": "BFLOAT16", "float32": "FLOAT"}[dtype]


def short_of_memory(rows: list[dict[str, Any]], failed: list[Item]) -> list[dict[str, Any]]:
    """The rows of the convolutions a worker ran short of memory in."""
    names = {item_name(*item) for item in failed}
    return [row for row in rows if row_name(row) in names]


def read_table(path: Path) -> dict[str, Any]:
    """A table or a run: JSON, compressed by xz (.xz, the committed table) or gzip (a run). Not
    cudnn_table.table_rows: the GPU machine reads the table for --skip without hipmem."""
    opener = lzma.open if path.suffix == ".xz" else gzip.open
    with opener(path, "rt") as source:
        return dict(json.load(source))


def merge(runs: list[Path]) -> None:
    """Add runs to the committed table: same GPU, PyTorch and cuDNN, and no convolution at a
    batch size answered otherwise than before (cuDNN's heuristic is deterministic: answers of
    12 workers sharing the GPU were those of one worker alone, all 55,635 measured twice)."""
    from hipmem._core.atomic_write import atomic_output
    from hipmem.replay.record.cudnn_table import TABLE, row_key

    table = read_table(TABLE)
    answers = {row_key(row): row["workspace_bytes"] for row in table["rows"]}
    rows = {json.dumps(row, sort_keys=True) for row in table["rows"]}
    for run in runs:
        added = read_table(run)
        source = {key: added[key] for key in ("device", "torch", "cudnn")}
        if source != {key: table[key] for key in source}:
            sys.exit(f"{run}: measured with {source}, the table with another")
        for row in added["rows"]:
            if answers.setdefault(row_key(row), row["workspace_bytes"]) != row["workspace_bytes"]:
                sys.exit(f"{run}: {row_key(row)} answered otherwise than in the table")
        rows |= {json.dumps(row, sort_keys=True) for row in added["rows"]}
    table["rows"] = sorted((json.loads(row) for row in rows), key=row_key)  # alike rows together
    with atomic_output(TABLE) as part, lzma.open(part, "wt", preset=9) as out:
        json.dump(table, out)
    print(f"{TABLE}: {len(rows)} plans")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?")
    parser.add_argument("--merge", type=Path, nargs="+", help="runs to add to the table")
    parser.add_argument("--seconds", type=float, default=400.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--skip", type=Path, help="a table whose convolutions are not run again")
    args = parser.parse_args()
    global SKIP
    SKIP = args.skip
    if args.merge:
        merge(args.merge)
        return
    if args.out is None:
        parser.error("give OUT, the run's file (or --merge RUN... to add runs to the table)")
    if args.worker >= 0:
        run_convolutions(args.seconds, args.worker, Path(args.work))
        return
    import multiprocessing

    import torch

    work = Path(tempfile.mkdtemp())
    started = time.monotonic()
    (work / "items.json").write_text(json.dumps(planned_items()))
    print(f"planned in {time.monotonic() - started:.0f} s", flush=True)
    children = []
    for worker in range(args.workers):
        env = {**os.environ, "CUDNN_FRONTEND_LOG_INFO": "1",
               "CUDNN_FRONTEND_LOG_FILE": str(work / f"frontend{worker}.log")}  # fmt: skip
        children.append(subprocess.Popen(
            [sys.executable, __file__, args.out, "--seconds", str(args.seconds),
             "--workers", str(args.workers), "--worker", str(worker), "--work", str(work)],
            env=env))  # fmt: skip
    if any(child.wait() for child in children):
        sys.exit("a worker failed")
    with multiprocessing.Pool(args.workers) as pool:
        parts = pool.map(rows_of_log, sorted(work.glob("frontend*.log")))
    rows = [row for part in parts for row in part]
    failed = [item for path in work.glob("oom*.json") for item in json.loads(path.read_text())]
    dropped = short_of_memory(rows, failed)
    unique = {json.dumps(row, sort_keys=True) for row in rows} - {
        json.dumps(row, sort_keys=True) for row in dropped
    }
    answer = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(),
              "rows": [json.loads(row) for row in sorted(unique)]}  # fmt: skip
    with gzip.open(args.out if args.out.endswith(".gz") else args.out + ".gz", "wt") as out:
        json.dump(answer, out)
    print(
        f"{len(rows)} plans, {len(unique)} distinct rows, {len(dropped)} dropped "
        f"({len(failed)} convolutions short of memory)"
    )


def rows_of_log(path: Path) -> list[dict[str, Any]]:
    return table_rows(path.read_text())


if __name__ == "__main__":
    main()
