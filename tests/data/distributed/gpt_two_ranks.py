"""Trains the GPT of ../record/scripts/gpt_train.py on two GPUs, one process a GPU: sharded with
FSDP2 (`fully_shard` on each block, then the model) or replicated with DDP, bf16 autocast,
AdamW, 4 steps of BATCH x 1024 tokens. Each rank records its memory history and writes
OUTDIR/NAME-rankR.pickle.gz (the snapshot, gzipped) and OUTDIR/NAME-rankR.stats.json.

    NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node 2 gpt_two_ranks.py OUTDIR NAME {fsdp2|ddp}
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "record" / "scripts"))
import gpt_train

BATCH = int(os.environ.get("BATCH", "8"))
STEPS = 4


def wrapped(model: gpt_train.GPT, mode: str, rank: int) -> nn.Module:
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[rank])


def main() -> None:
    out, name, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    torch.cuda.memory._record_memory_history(
        max_entries=5_000_000, context="alloc", stacks="python"
    )
    torch.manual_seed(0)
    model = wrapped(gpt_train.GPT().cuda(), mode, rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95),
                                  weight_decay=0.1)  # fmt: skip
    data = torch.Generator().manual_seed(1 + rank)
    vocab, seq = gpt_train.VOCAB, gpt_train.SEQ
    started = time.time()
    for step in range(STEPS):
        tokens = torch.randint(0, vocab, (BATCH, seq + 1), generator=data)
        inputs, targets = tokens[:, :-1].cuda(), tokens[:, 1:].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        print(f"rank {rank} step {step}: loss {loss.item():.4f}", flush=True)
    torch.cuda.synchronize()
    with gzip.open(out / f"{name}-rank{rank}.pickle.gz", "wb") as file:
        pickle.dump(torch.cuda.memory._snapshot(), file)
    facts = {
        "name": name, "rank": rank, "mode": mode, "batch": BATCH, "torch": torch.__version__,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "num_alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries"),
        "wall_s": time.time() - started,
    }  # fmt: skip
    (out / f"{name}-rank{rank}.stats.json").write_text(json.dumps(facts, indent=1) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
