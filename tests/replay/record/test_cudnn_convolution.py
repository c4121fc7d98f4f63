"""cuDNN convolutions in a recording: PyTorch's own cuDNN path runs on the stand-in cuDNN and
each plan's workspace is the GPU's (replay/record/csrc/libraries/cudnn_convolution.c, from the
table benchmarks/gpu_cudnn_convolution.py measured on an H200 with PyTorch 2.11.0+cu130 and
cuDNN 9.19).

Two checks against the GPU: at batch sizes the table measured, every workspace is the H200's
to the byte (the key the stand-in builds from cuDNN's descriptors is the one the table was
written with); at batch size 33, which the table lacks, the interpolated workspaces are held to
what the H200 allocated (tests/data/record/truths-h200-2026-11-29/
cudnn_convolutions_batch33.json) at least as well as when this was written; convolutions
whose shapes it lacks (5x5, dilated, U-Net-like; cudnn_convolutions_unmeasured.json) are
estimated from the three most alike ones, and their workspaces held to the H200's in all."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from hipmem.replay.record.cudnn_table import table_rows

from .recording import RECORD, answer_of, run_record

SCRIPT = RECORD / "scripts" / "cudnn_convolutions.py"
BATCH33 = RECORD / "truths-h200-2026-11-29" / "cudnn_convolutions_batch33.json"
UNMEASURED = RECORD / "truths-h200-2026-11-29" / "cudnn_convolutions_unmeasured.json"
# How many batch-33 convolutions come out as the GPU placed them, measured 2026-11-29 with the
# table of 617,826 plans: contiguous (NCHW), of 128 each (112 and 83 with the first table's
# 57,423);
# channels-last, of 18 each (most of their shapes, of 160x160 and 256x256 images, not in it).
NCHW_FORWARD_SAME, NCHW_BACKWARD_SAME = 117, 90
CHANNELS_LAST_FORWARD_SAME, CHANNELS_LAST_BACKWARD_SAME = 8, 3
# The workspaces of convolutions the table lacks, estimated from alike ones: 9.3% over the
# H200's in all, measured 2026-11-29 (with no workspace they would be 100% under).


def _dims(text: str) -> list[int]:
    return [int(part) for part in text.split(":")[1].split(",")]


def _channels_last(row: dict[str, Any]) -> bool:
    """Whether a row's x was channels-last: its channels dense, a column stepping over them."""
    sizes, steps = _dims(row["x"]), [int(v) for v in row["x"].split(":")[2].split(",")]
    return steps[1] == 1 and steps[3] == sizes[1]


def _measured_runs(count: int) -> tuple[list[dict[str, Any]], list[int]]:
    """`count` forward convolutions of the table (fp16, at measured batch sizes), as
    runs of the script, and the forward workspace the H200 answered for each."""
    rows = table_rows()
    forward = [r for r in rows if r["operation"] == "ConvFwd" and r["x"].startswith("HALF")]
    runs, workspaces = [], []
    for row in random.Random(0).sample(forward, count):
        x, w = _dims(row["x"]), _dims(row["w"])
        pairs = [[int(v) for v in row[key].split(",")] for key in ("stride", "pre", "dilation")]
        config = [x, w, *pairs, x[1] // w[1]]
        runs.append({"cfg": config, "dtype": "torch.float16", "channels_last": _channels_last(row)})
        workspaces.append(row["workspace_bytes"])
    return runs, workspaces


def _forward_workspace(events: list[list[Any]], output_bytes: int) -> int:
    """The forward's workspace: what it allocated besides its output (0: nothing)."""
    others = [size for action, size in events if action == "a" and size != output_bytes]
    return others[0] if others else 0


@pytest.mark.slow
def test_measured_batch_sizes_get_the_gpus_workspace(record_torch: object, tmp_path: Path) -> None:
    runs, on_gpu = _measured_runs(40)
    truth = tmp_path / "runs.json"
    truth.write_text(json.dumps({"runs": runs}))
    done = run_record(tmp_path, SCRIPT, "--json", script_args=(str(truth), str(tmp_path / "o")))
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads((tmp_path / "o").read_text())
    outputs = [next(size for action, size in r["fwd"] if action == "a") for r in recorded]
    pairs = zip(recorded, outputs, strict=True)
    assert [_forward_workspace(r["fwd"], out) for r, out in pairs] == on_gpu
    counts = answer_of(done)["cudnn_convolutions"]
    assert counts["not_measured"] == 0 and counts["measured"] >= 40


def _rounded(events: list[list[Any]]) -> list[tuple[str, int]]:
    """Events as the allocator sees them: sizes rounded up to its 512-byte blocks."""
    return [(action, -(-size // 512) * 512) for action, size in events]


@pytest.mark.slow
def test_unmeasured_batch_sizes_are_interpolated_as_the_gpu_answered(
    record_torch: object, tmp_path: Path
) -> None:
    done = run_record(tmp_path, SCRIPT, "--json", script_args=(str(BATCH33), str(tmp_path / "o")))
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads((tmp_path / "o").read_text())
    on_gpu = json.loads(BATCH33.read_text())["runs"]
    same = {(layout, part): 0 for layout in (False, True) for part in ("fwd", "bwd")}
    for gpu_run, run in zip(on_gpu, recorded, strict=True):
        for layout, part in same:
            if gpu_run["channels_last"] == layout:
                same[layout, part] += _rounded(run[part]) == _rounded(gpu_run[part])
    assert same[False, "fwd"] >= NCHW_FORWARD_SAME, same
    assert same[False, "bwd"] >= NCHW_BACKWARD_SAME, same
    assert same[True, "fwd"] >= CHANNELS_LAST_FORWARD_SAME, same
    assert same[True, "bwd"] >= CHANNELS_LAST_BACKWARD_SAME, same
    counts = answer_of(done)["cudnn_convolutions"]
    # no batch size 33 in the table; some channels-last shapes not in it at all
    assert counts["measured"] == 0
    assert counts["from_other_batch_sizes"] > 0 and counts["not_measured"] > 0


def _workspace_bytes(runs: list[dict[str, Any]]) -> int:
    """Every workspace the runs allocated: what each part freed again before it ended."""
    return sum(size for run in runs for part in ("fwd", "bwd") for action, size in run[part]
               if action == "f")  # fmt: skip


@pytest.mark.slow
def test_convolutions_the_table_lacks_are_estimated_from_alike_ones(
    record_torch: object, tmp_path: Path
) -> None:
    out = tmp_path / "o"
    done = run_record(tmp_path, SCRIPT, "--json", script_args=(str(UNMEASURED), str(out)))
    assert done.returncode == 0, done.stderr[-2000:]
    on_gpu = json.loads(UNMEASURED.read_text())["runs"]
    recorded = json.loads(out.read_text())
    assert answer_of(done)["cudnn_convolutions"]["not_measured"] == 3 * len(on_gpu)
    estimated, answered = _workspace_bytes(recorded), _workspace_bytes(on_gpu)
    assert abs(estimated / answered - 1) < 0.10, (estimated, answered)


GRAD_SCRIPT = """
import torch
import torch.nn.functional as F
x = torch.randn(8, 3, 224, 224, device="cuda", dtype=torch.float16, requires_grad=True)
w = torch.randn(64, 3, 7, 7, device="cuda", dtype=torch.float16, requires_grad=True)
torch.autograd.grad(F.conv2d(x, w, None, 2, 3).sum(), (x, w))
"""


@pytest.mark.slow
def test_autograd_grad_runs_the_backward_on_cudnn(record_torch: object, tmp_path: Path) -> None:
    """A gradient taken by torch.autograd.grad, not .backward(): its convolution backwards run
    on cuDNN as on the GPU (the ResNet stem at batch 8: forward, data and filter measured)."""
    script = tmp_path / "grad.py"
    script.write_text(GRAD_SCRIPT)
    done = run_record(tmp_path, script, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert answer_of(done)["cudnn_convolutions"] == {
        "measured": 3,
        "from_other_batch_sizes": 0,
        "not_measured": 0,
    }


TRUTHS = RECORD / "truths-h200-2026-11-28"
SEGMENT_BYTES = 2 << 20


@pytest.mark.slow
@pytest.mark.parametrize("settings", ["defaults", "expandable"])
def test_the_resnet_reserves_what_the_gpu_reserved(
    torchvision_site: Path, tmp_path: Path, settings: str
) -> None:
    """The committed torchvision ResNet-50 (fp16, GradScaler, batch sizes 37 to 96, none in the
    table): exact under expandable segments; under the defaults one 2 MiB segment over, where
    an interpolated workspace lands in another cached block (docs/record.md)."""
    conf = "expandable_segments:True" if settings == "expandable" else ""
    script = RECORD / "scripts" / "resnet_amp.py"
    done = run_record(tmp_path, script, "--json", "--alloc-conf", conf,
                      python_path=torchvision_site)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = answer_of(done)
    name = "resnet_amp-defaults-1" if settings == "defaults" else "resnet_amp-expandable"
    on_gpu = json.loads((TRUTHS / f"{name}.stats.json").read_text())["max_memory_reserved"]
    over = answer["max_memory_reserved"] - on_gpu
    assert over == (SEGMENT_BYTES if settings == "defaults" else 0), over
    assert answer["cudnn_convolutions"]["from_other_batch_sizes"] > 0
    assert answer["cudnn_convolutions"]["measured"] == 0
