"""Trains a torchvision ResNet-50 (random weights) on random images: fp16 autocast with a
GradScaler (cuDNN convolutions), SGD with momentum, 6 steps whose batch size and image size
are drawn from a seeded CPU random generator, as a data loader with varied inputs gives them.

    python resnet_amp.py

HIPMEM_RECORD_DEVICE=cpu and HIPMEM_RECORD_TINY=1 are for checking the script without a GPU.
"""

from __future__ import annotations

import os
import random

import torch
import torch.nn.functional as F
import torchvision

DEVICE = os.environ.get("HIPMEM_RECORD_DEVICE", "cuda")
TINY = os.environ.get("HIPMEM_RECORD_TINY") == "1"
STEPS = 6
BATCHES = (2, 4) if TINY else (32, 96)  # smallest and largest batch
SIZES = (32, 48, 64) if TINY else (160, 192, 224, 256)  # image sides


def main() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    # A loss scale low enough that no step finds an inf and is skipped (the default 65536
    # overflows fp16 weight gradients of random weights; a skipped step allocates no momentum).
    scaler = torch.amp.GradScaler(DEVICE, init_scale=128.0)
    shapes = random.Random(0)
    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        batch, size = shapes.randint(*BATCHES), shapes.choice(SIZES)
        images = torch.randn(batch, 3, size, size, generator=data).to(DEVICE)
        labels = torch.randint(0, 1000, (batch,), generator=data).to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.float16):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step}: batch {batch} x {size}x{size}, loss {loss.item():.4f}, "
              f"scale {scaler.get_scale():.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
