"""Records the PyTorch memory snapshots in tests/data/snapshots/ on a machine with a CUDA GPU
and PyTorch (the lent H200); the tests read them with no GPU and no torch.

    python -m tests.snapshot_recorder OUT_DIR [NAME ...]   # one subprocess per scenario

Each scenario runs in its own process, because PyTorch reads PYTORCH_CUDA_ALLOC_CONF once, at
the first CUDA allocation. Beside each `<name>.pickle.gz` it writes `<name>.stats.json`: the
allocator's own `torch.cuda.memory_stats()` peaks over the recording, an independent check of
the figures hipmem derives from the trace.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

# name -> (PYTORCH_CUDA_ALLOC_CONF, record_memory_history keyword arguments)
SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    # Trained with varying shapes, recorded from the process's first allocation.
    "train-default": ("", {"context": "all", "stacks": "python"}),
    "train-expandable": ("expandable_segments:True", {"context": None}),
    # The same, recording started once the weights exist: a partial trace.
    "train-late": ("", {"context": None}),
    # Inference with a ring buffer smaller than the run: max_entries is reached.
    "infer-default": ("", {"context": None, "max_entries": 4000}),
    # The same inference recorded whole: from before the weights, no ring buffer.
    "infer-full": ("", {"context": None}),
    # Three streams working at once.
    "multistream": ("", {"context": None}),
    # Allocation past a memory cap: the trace holds `oom` events.
    "oom": ("", {"context": None}),
    # Three streams allocating under a memory cap until refused, each letting half of its
    # tensors go on a refusal: several streams and out-of-memory together (issue 27), with
    # the default allocator and with expandable segments.
    "multistream-oom": ("", {"context": None}),
    "multistream-oom-expandable": ("expandable_segments:True", {"context": None}),
}


def _train(torch: Any, steps: int = 24, *, late: bool = False) -> None:
    if not late:
        torch.cuda.memory._record_memory_history(**_RECORD)
    vocab, hidden = 5000, 512
    embed = torch.nn.Embedding(vocab, hidden).cuda()
    lstm = torch.nn.LSTM(hidden, hidden, num_layers=2, batch_first=True).cuda()
    head = torch.nn.Linear(hidden, vocab).cuda()
    params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    if late:
        torch.cuda.memory._record_memory_history(**_RECORD)  # after the weights exist
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = int(torch.randint(4, 33, (1,), generator=generator))
        length = int(torch.randint(16, 129, (1,), generator=generator))
        tokens = torch.randint(0, vocab, (batch, length + 1), generator=generator).cuda()
        out, _ = lstm(embed(tokens[:, :-1]))
        loss = torch.nn.functional.cross_entropy(head(out).flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def _infer(torch: Any, *, full: bool = False) -> None:
    if full:
        torch.cuda.memory._record_memory_history(**_RECORD)
    layers = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                              torch.nn.Linear(4096, 1024)) for _ in range(4)]
    ).cuda().half()  # fmt: skip
    if not full:
        torch.cuda.memory._record_memory_history(**_RECORD)  # after the weights exist
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(200):
            batch = int(torch.randint(1, 257, (1,), generator=generator))
            x = torch.randn(batch, 1024, generator=generator).cuda().half()
            layers(x).float().softmax(-1).sum().item()


def _multistream(torch: Any) -> None:
    torch.cuda.memory._record_memory_history(**_RECORD)
    streams = [torch.cuda.Stream() for _ in range(3)]
    generator = torch.Generator().manual_seed(2)
    for step in range(40):
        for index, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                n = 256 * (1 + (step + index) % 4)
                a = torch.randn(n, n, generator=generator).cuda(non_blocking=True)
                b = (a @ a.T).relu()
                del a
                b.sum()
    torch.cuda.synchronize()


# The per-process memory fraction a scenario runs under (replays need it to reproduce the run).
FRACTIONS = {"oom": 0.01, "multistream-oom": 0.005, "multistream-oom-expandable": 0.005}


def _oom(torch: Any) -> None:
    torch.cuda.set_per_process_memory_fraction(FRACTIONS["oom"])  # ~1.4 GB of an H200
    torch.cuda.memory._record_memory_history(**_RECORD)
    held = []
    for _ in range(2):
        try:
            while True:
                held.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError:
            pass
        held = held[: len(held) // 2]
    del held
    torch.cuda.synchronize()


def _multistream_oom(torch: Any) -> None:
    torch.cuda.set_per_process_memory_fraction(FRACTIONS["multistream-oom"])  # ~0.7 GB of an H200
    torch.cuda.memory._record_memory_history(**_RECORD)
    streams = [torch.cuda.Stream() for _ in range(3)]
    held: list[list[Any]] = [[] for _ in streams]
    generator = torch.Generator().manual_seed(3)
    for _ in range(40):
        for index, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                size = int(torch.randint(4, 97, (1,), generator=generator)) << 20
                try:
                    held[index].append(torch.empty(size, dtype=torch.uint8, device="cuda"))
                except torch.cuda.OutOfMemoryError:
                    held[index] = held[index][len(held[index]) // 2 :]
    del held
    torch.cuda.synchronize()


_RECORD: dict[str, Any] = {}
_WORK = {
    "train-default": _train,
    "train-expandable": _train,
    "train-late": lambda torch: _train(torch, late=True),
    "infer-default": _infer,
    "infer-full": lambda torch: _infer(torch, full=True),
    "multistream": _multistream,
    "oom": _oom,
    "multistream-oom": _multistream_oom,
    "multistream-oom-expandable": _multistream_oom,
}


def _record_one(name: str, out_dir: Path) -> None:
    import torch

    _RECORD.update({"enabled": "all", **SCENARIOS[name][1]})
    _WORK[name](torch)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    with gzip.open(out_dir / f"{name}.pickle.gz", "wb", compresslevel=9) as file:
        pickle.dump(snapshot, file)
    facts = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "alloc_conf": SCENARIOS[name][0],
        "record": {k: v for k, v in _RECORD.items()},
        "requested_bytes_peak": stats["requested_bytes.all.peak"],
        "reserved_bytes_peak": stats["reserved_bytes.all.peak"],
        "allocated_bytes_peak": stats["allocated_bytes.all.peak"],
        "num_ooms": stats["num_ooms"],
        "device_total_bytes": torch.cuda.mem_get_info()[1],
    }
    if name in FRACTIONS:
        facts["memory_fraction"] = FRACTIONS[name]
    (out_dir / f"{name}.stats.json").write_text(json.dumps(facts, indent=2) + "\n")


def main() -> None:
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 3 and sys.argv[2] == "--one":
        _record_one(sys.argv[3], out_dir)
        return
    for name in sys.argv[2:] or list(SCENARIOS):
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": SCENARIOS[name][0]}
        done = subprocess.run(
            [sys.executable, "-m", "tests.snapshot_recorder", str(out_dir), "--one", name], env=env
        )
        size = (out_dir / f"{name}.pickle.gz").stat().st_size if done.returncode == 0 else 0
        print(f"{name}: exit {done.returncode}, {size:,} bytes", flush=True)


if __name__ == "__main__":
    main()
