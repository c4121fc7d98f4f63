"""GPU truths for recordings of torch.compile scripts: each script run on the GPU in a fresh
process with a cold Inductor and Triton cache (as a recording compiles), under the defaults and
`expandable_segments:True`, five at a time; each script prints `reserved R allocated A`.

    python3 benchmarks/gpu_compile_truths.py OUT.json SCRIPT...   # on an NVIDIA GPU

Run 2026-11-29 on an H200 (PyTorch 2.11.0+cu130, Triton 3.6.0) over
tests/data/record/scripts/mlp_compile.py and four held-out scripts (docs/record.md), 119 s:
tests/data/record/truths-h200-2026-11-29/mlp_compile.json holds the committed script's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SETTINGS = ("", "expandable_segments:True")


def run(script: str, conf: str) -> dict[str, object]:
    env = dict(os.environ)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    with tempfile.TemporaryDirectory() as cache:  # a cold compile cache, as a recording's
        env["TORCHINDUCTOR_CACHE_DIR"] = f"{cache}/inductor"
        env["TRITON_CACHE_DIR"] = f"{cache}/triton"
        done = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                              check=False)  # fmt: skip
    row: dict[str, object] = {"script": script, "conf": conf, "rc": done.returncode}
    printed = [line for line in done.stdout.splitlines() if line.startswith("reserved")]
    if printed:
        _, reserved, _, allocated = printed[-1].split()
        row.update(reserved=int(reserved), allocated=int(allocated))
    else:
        row["error"] = done.stderr[-1500:]
    print(row, flush=True)
    return row


def main() -> None:
    out, scripts = Path(sys.argv[1]), sys.argv[2:]
    with ThreadPoolExecutor(5) as pool:
        rows = list(pool.map(lambda job: run(*job), [(s, c) for s in scripts for c in SETTINGS]))
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
