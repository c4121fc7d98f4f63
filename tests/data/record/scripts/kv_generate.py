"""Generates 128 tokens greedily with a small decoder-only Transformer (random bf16 weights)
for a batch of 64 random prompts of 512 tokens, its key/value cache grown by torch.cat at each
new token, as simple generation loops do.

    python kv_generate.py

HIPMEM_RECORD_DEVICE=cpu and HIPMEM_RECORD_TINY=1 are for checking the script without a GPU.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

DEVICE = os.environ.get("HIPMEM_RECORD_DEVICE", "cuda")
TINY = os.environ.get("HIPMEM_RECORD_TINY") == "1"
BATCH, PROMPT, NEW = (2, 16, 8) if TINY else (64, 512, 128)
LAYERS, HEADS, WIDTH, VOCAB = (2, 4, 64, 512) if TINY else (8, 16, 1024, 32000)

Cache = list[tuple[torch.Tensor, torch.Tensor]]


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.fc_proj = nn.Linear(4 * WIDTH, WIDTH)

    def forward(
        self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, seq, HEADS, width // HEADS).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, seq, width))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)))), (k, v)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(PROMPT + NEW, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor, cache: Cache | None) -> tuple[torch.Tensor, Cache]:
        start = 0 if cache is None else cache[0][0].shape[2]
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.positions(positions)
        new_cache: Cache = []
        for index, layer in enumerate(self.layers):
            x, kv = layer(x, None if cache is None else cache[index])
            new_cache.append(kv)
        logits: torch.Tensor = self.head(self.ln_f(x[:, -1]))  # the last position only
        return logits, new_cache


def main() -> None:
    torch.manual_seed(0)
    model = Decoder().to(DEVICE, torch.bfloat16).eval()
    prompts = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1))
    tokens = prompts.to(DEVICE)
    with torch.inference_mode():
        logits, cache = model(tokens, None)
        for _ in range(NEW):
            next_token = logits.argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            logits, cache = model(next_token, cache)
    print(f"generated {NEW} tokens for {BATCH} prompts of {PROMPT}: {tuple(tokens.shape)}")


if __name__ == "__main__":
    main()
