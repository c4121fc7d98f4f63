"""Small device values in a recording read what the GPU computed
(replay/record/boot/_hipmem_host_values.py): a script run under `hipmem record` with no GPU
prints what it reads back, and the values are the ones a GPU gives, or zeros, counted, where
the host cannot know them. That following changes no allocation is held to the GPU's own
snapshot in test_record.py (test_the_snapshot_is_pytorchs_and_replays_to_the_gpus_peak)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .recording import answer_of, run_record

pytestmark = pytest.mark.slow

PROBE = """
import json, sys
import torch

seen = {}
mask = torch.ones(8, 1024, device="cuda", dtype=torch.long)  # 64 KiB: followed
seen["mask_all"] = bool(mask.all())
seen["mask_sum"] = mask.sum().item()
positions = torch.arange(10, device="cuda").cumsum(0)
seen["cumsum"] = positions.tolist()
x = torch.zeros(4, device="cuda")
x.add_(1)
x[1:3].mul_(5)  # in place, through a view
seen["in_place"] = x.tolist()
square = x.view(2, 2)
x.fill_(2)  # the view sees its base's change
seen["view"] = square.sum().item()
copied = torch.tensor([3, 1, 2]).to("cuda")  # host to device
seen["copied"] = [copied.max().item(), copied.cpu().tolist(), copied.to("cpu").tolist()]
with torch.device("cuda"):  # a device context: the factory's values still known
    seen["device_context"] = torch.full((3,), 7).tolist()
seen["metadata"] = [mask.is_cuda, str(mask.device), list(mask.shape)]
kept = x.to(device="cuda", non_blocking=True, copy=True)  # GradScaler's call
seen["copy_kwarg"] = kept.sum().item()
seen["random"] = torch.randn(3, device="cuda").tolist()  # the GPU's generator: not played
seen["large"] = torch.ones(1024, 1024, device="cuda").sum().item()  # 4 MiB: not followed
json.dump(seen, open(sys.argv[1], "w"))
"""


def test_small_device_values_read_what_the_gpu_computed(
    record_torch: object, tmp_path: Path
) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    seen_path = tmp_path / "seen.json"
    done = run_record(tmp_path, script, "--json", script_args=(str(seen_path),))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(seen_path.read_text())
    assert seen["mask_all"] is True and seen["mask_sum"] == 8 * 1024
    assert seen["cumsum"] == [0, 1, 3, 6, 10, 15, 21, 28, 36, 45]
    assert seen["in_place"] == [1.0, 5.0, 5.0, 1.0]
    assert seen["view"] == 8.0
    assert seen["copied"] == [3, [3, 1, 2], [3, 1, 2]]
    assert seen["device_context"] == [7, 7, 7]
    assert seen["metadata"] == [True, "cuda:0", [8, 1024]]
    assert seen["copy_kwarg"] == 8.0
    # what the host cannot know reads zeros, and only those reads are counted
    assert seen["random"] == [0.0, 0.0, 0.0]
    assert seen["large"] == 0.0
    answer = answer_of(done)
    assert answer["device_reads"] == 2
    lines = PROBE.splitlines()
    unknown = {f"probe.py:{lines.index(line) + 1}" for line in lines
               if line.startswith(('seen["random"]', 'seen["large"]'))}  # fmt: skip
    assert set(answer["device_read_sites"]) == unknown


SCALER = """
import torch
model = torch.nn.Linear(64, 64).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler()
for step in range(3):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.randn(8, 64, device="cuda")).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(torch.randn(2, device="cuda").sum().item())  # a read of another kind
"""


def test_grad_scaler_steps_are_counted_and_said(record_torch: object, tmp_path: Path) -> None:
    """A GradScaler's overflow check reads zero, so every step is taken; on a GPU an overflow
    skips one (and its optimizer state), and the recording says how many it took."""
    script = tmp_path / "scaler.py"
    script.write_text(SCALER)
    answer = answer_of(run_record(tmp_path, script, "--json"))
    assert answer["grad_scaler_steps"] == 3
    assert answer["device_reads"] == 4  # the three checks and the last line's sum
    shown = run_record(tmp_path, script, env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "GradScaler: 3 steps taken, their overflow checks read as no inf." in shown.stdout
