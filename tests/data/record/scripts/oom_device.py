"""Runs out of the device's memory: two training steps of the GPT of gpt_train.py (batch 8),
then one buffer sized from what the device reports free, as code that preallocates a pool or
a cache does, but larger than what the device can give by 1 GiB. Nothing catches the error:
PyTorch's OutOfMemoryError ends the script.

    python oom_device.py

HIPMEM_RECORD_DEVICE=cpu and HIPMEM_RECORD_TINY=1 are for checking the script without a GPU
(on the CPU the refusal is raised by the script, standing in for the device's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from gpt_train import DEVICE, GPT, SEQ, TINY, VOCAB

STEPS = 2
BATCH = 2 if TINY else 8


def main() -> None:
    torch.manual_seed(0)
    model = GPT().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=data).to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.view(-1, VOCAB), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")
    if DEVICE == "cpu":
        raise torch.OutOfMemoryError("HIPMEM_RECORD_DEVICE=cpu: stands in for the device's refusal")
    # More than the device's free memory and all the allocator could release from its cache.
    free_bytes = torch.cuda.mem_get_info()[0]
    cached_bytes = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    request_bytes = free_bytes + cached_bytes + (1 << 30)
    print(f"asking for {request_bytes:,} bytes: {free_bytes:,} free, {cached_bytes:,} cached")
    pool = torch.empty(request_bytes, dtype=torch.uint8, device=DEVICE)
    print(f"got {pool.numel():,} bytes")


if __name__ == "__main__":
    main()
