"""Trains a small Llama-style model of Hugging Face transformers (built from a LlamaConfig,
random weights; nothing downloaded) with gradient checkpointing: bf16 autocast, AdamW, 4 steps
of 8 sequences of 1024 random tokens, the loss computed by the model from its labels.

    python llama_ckpt.py

HIPMEM_RECORD_DEVICE=cpu and HIPMEM_RECORD_TINY=1 are for checking the script without a GPU.
"""

from __future__ import annotations

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

DEVICE = os.environ.get("HIPMEM_RECORD_DEVICE", "cuda")
TINY = os.environ.get("HIPMEM_RECORD_TINY") == "1"
STEPS = 4
BATCH, SEQ = (2, 64) if TINY else (8, 1024)


def main() -> None:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512 if TINY else 32000,
        hidden_size=64 if TINY else 1024,
        intermediate_size=176 if TINY else 2816,
        num_hidden_layers=2 if TINY else 4,
        num_attention_heads=4 if TINY else 16,
        num_key_value_heads=2 if TINY else 8,
        max_position_embeddings=SEQ,
        use_cache=False,
    )
    with torch.device(DEVICE):  # the weights made on the device
        model = LlamaForCausalLM(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    print(f"{model.num_parameters():,} parameters, batch {BATCH} x {SEQ}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        tokens = torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=data).to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(input_ids=tokens, labels=tokens).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
