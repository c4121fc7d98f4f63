"""Runs out of memory under a per-process cap: trains the GPT of gpt_train.py (bf16 autocast,
AdamW, batch 16) on sequences whose length changes from step to step, with
torch.cuda.set_per_process_memory_fraction(CAP_FRACTION). Nothing catches the error: PyTorch's
OutOfMemoryError ends the script when the job does not fit under the cap.

    CAP_FRACTION=0.2 python oom_cap.py      # CAP_FRACTION defaults to 0.1

HIPMEM_RECORD_DEVICE=cpu and HIPMEM_RECORD_TINY=1 are for checking the script without a GPU
(on the CPU a fraction below 1 makes the script raise the error itself after one step,
standing in for the device's refusal).
"""

from __future__ import annotations

import os
import random

import torch
import torch.nn.functional as F
from gpt_train import DEVICE, GPT, SEQ, TINY, VOCAB

CAP_FRACTION = float(os.environ.get("CAP_FRACTION", "0.1"))
STEPS = 6
BATCH = 2 if TINY else 16


def main() -> None:
    if DEVICE == "cuda":
        torch.cuda.set_per_process_memory_fraction(CAP_FRACTION)
    torch.manual_seed(0)
    model = GPT().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    lengths = random.Random(0)
    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        length = lengths.randint(SEQ // 4, SEQ)
        tokens = torch.randint(0, VOCAB, (BATCH, length + 1), generator=data).to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.view(-1, VOCAB), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step}: {BATCH} x {length} tokens, loss {loss.item():.4f}")
        if DEVICE == "cpu" and CAP_FRACTION < 1:
            raise torch.OutOfMemoryError("HIPMEM_RECORD_DEVICE=cpu: stands in for the cap")


if __name__ == "__main__":
    main()
