"""Trains a GPT-2-small-sized language model (124 M parameters) in plain PyTorch on random
tokens: bf16 autocast, AdamW, gradient clipping, 4 steps of BATCH sequences of 1024 tokens.

    BATCH=16 python gpt_train.py        # BATCH defaults to 8

HIPMEM_RECORD_DEVICE=cpu and HIPMEM_RECORD_TINY=1 are for checking the script without a GPU.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

DEVICE = os.environ.get("HIPMEM_RECORD_DEVICE", "cuda")
TINY = os.environ.get("HIPMEM_RECORD_TINY") == "1"
BATCH = int(os.environ.get("BATCH", "8"))
STEPS = 4
# sequence length, layers, heads, width, vocabulary (50257 padded to a multiple of 64)
SEQ, LAYERS, HEADS, WIDTH, VOCAB = (32, 2, 4, 64, 512) if TINY else (1024, 12, 12, 768, 50304)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.fc_proj = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, seq, HEADS, width // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(batch, seq, width))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        for name, parameter in self.named_parameters():
            if parameter.dim() == 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(parameter, mean=0.0, std=std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.lm_head(self.ln_f(x))
        return logits


def main() -> None:
    torch.manual_seed(0)
    model = GPT().to(DEVICE)
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters, batch {BATCH} x {SEQ}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95),
                                  weight_decay=0.1)  # fmt: skip
    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=data)
        inputs, targets = tokens[:, :-1].to(DEVICE), tokens[:, 1:].to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
