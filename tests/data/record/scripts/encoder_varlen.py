"""Trains a Transformer encoder (torch.nn.TransformerEncoder, 6 layers) in fp32 with Adam on
batches of variable-length random sequences: each sequence's length is drawn on the CPU, the
batch is padded to its longest, and a padding mask keeps the padding out of attention and loss.

    python encoder_varlen.py

HIPMEM_RECORD_DEVICE=cpu and HIPMEM_RECORD_TINY=1 are for checking the script without a GPU.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

DEVICE = os.environ.get("HIPMEM_RECORD_DEVICE", "cuda")
TINY = os.environ.get("HIPMEM_RECORD_TINY") == "1"
STEPS = 8
BATCH, SHORTEST, LONGEST = (4, 4, 32) if TINY else (48, 32, 512)
LAYERS, HEADS, WIDTH, VOCAB = (2, 4, 32, 100) if TINY else (6, 8, 512, 8000)
PAD = 0


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH, padding_idx=PAD)
        self.positions = nn.Embedding(LONGEST, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=4 * WIDTH,
                                           batch_first=True)  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, num_layers=LAYERS)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.positions(positions)
        logits: torch.Tensor = self.head(self.encoder(x, src_key_padding_mask=padding))
        return logits


def random_batch(data: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of random lengths, padded to the longest; True in the mask marks padding."""
    lengths = torch.randint(SHORTEST, LONGEST + 1, (BATCH,), generator=data).tolist()
    tokens = torch.full((BATCH, max(lengths)), PAD, dtype=torch.long)
    for row, length in enumerate(lengths):
        tokens[row, :length] = torch.randint(1, VOCAB, (length,), generator=data)
    return tokens, tokens == PAD


def main() -> None:
    torch.manual_seed(0)
    model = Tagger().to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        tokens, padding = random_batch(data)
        targets = tokens.masked_fill(padding, -100)  # no loss on padding
        tokens, padding, targets = tokens.to(DEVICE), padding.to(DEVICE), targets.to(DEVICE)
        logits = model(tokens, padding)
        loss = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step}: {BATCH} x {tokens.shape[1]} tokens, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
