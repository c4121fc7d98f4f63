"""On the GPU, from the repository's root: train-default's training (tests/snapshot_recorder.py)
under a per-process cap of 570,000,000 bytes with several settings, one process each, twice;
prints each run's reserved peak, segment allocations and whether it ran out of memory (the
figures of train-default-cap570000000-h200.json).

    python3 tests/data/whatif/run_on_gpu.py
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, torch
sys.path.insert(0, os.getcwd())
from tests import snapshot_recorder as r
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(570000000 / total)
oom = False
try:
    r._train(torch)
except torch.cuda.OutOfMemoryError:
    oom = True
s = torch.cuda.memory_stats()
print(json.dumps({"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "oom": oom,
                  "reserved": s["reserved_bytes.all.peak"], "segments": s["segment.all.allocated"],
                  "ooms": s["num_ooms"]}))
"""
SETTINGS = ("", "expandable_segments:True", "garbage_collection_threshold:0.8",
            "max_split_size_mb:37", "max_split_size_mb:42", "max_split_size_mb:46")  # fmt: skip

for conf in SETTINGS:
    for _ in range(2):
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf}
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                              text=True)  # fmt: skip
        print(done.stdout.strip() or done.stderr[-500:], flush=True)
