"""`hipmem record`'s speed and memory on a machine with no GPU (figures in docs/record.md).

Two user scripts, each recorded in fresh `hipmem record` processes, alternated so that drift
on a shared machine hits every case alike:

1. a GPT-2-small training script (124 M parameters, batch 8 x 1024, 4 steps, AdamW, bf16
   autocast: tests/data/record/scripts/gpt_train.py) on a virtual H100 (80 GiB) and on a
   virtual MI300X (192 GiB). Target: under 30 s; the 192 GiB device costs what the 80 GiB one
   does.
2. a 384-token generation loop with a KV cache grown by torch.cat (kv_generate.py with 44
   layers, a batch of 8 and 384 new tokens: about 310,000 allocations) on a virtual H100.
   Target: under 120 s.

For each run: the wall time of the whole `hipmem record` command, the peak resident memory of
hipmem's process and of the recorded Python (target: under 3 GB together), and the
allocations recorded.

    python benchmarks/bench_record.py [--processes 3] [--torch 2.11]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "data" / "record" / "scripts"


def generation_script(folder: Path) -> Path:
    """kv_generate.py with 44 layers, a batch of 8 and 384 new tokens (its constants replaced)."""
    text = (SCRIPTS / "kv_generate.py").read_text()
    text = text.replace("(64, 512, 128)", "(8, 512, 384)").replace(
        "(8, 16, 1024, 32000)", "(44, 16, 1024, 32000)"
    )
    path = folder / "generate_384.py"
    path.write_text(text)
    return path


# `hipmem` in this process, which writes its own peak RSS at exit (wait4's figure would be the
# largest of hipmem and the recorded process, its child).
MEASURED_HIPMEM = """
import atexit, resource, sys
from pathlib import Path
out = Path(sys.argv[sys.argv.index("-o") + 1]).parent / "hipmem_rss_kb"
atexit.register(lambda: out.write_text(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
sys.argv[0] = "hipmem"
from hipmem.cli.__main__ import main
main()
"""


def one_run(script: Path, device: str, torch: str, folder: Path) -> dict[str, float]:
    snapshot = folder / "run.pickle"
    command = [
        sys.executable,
        "-c",
        MEASURED_HIPMEM,
        "record",
        "--device",
        device,
        "--torch",
        torch,
        "--json",
        "-o",
        str(snapshot),
        "--",
        "python3",
        str(script),
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate()
    status = process.wait()
    wall_s = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"{script.name} on {device}: exit status {status}: {stderr[-2000:]!r}")
    rss_file = folder / "hipmem_rss_kb"
    if not rss_file.is_file():
        raise SystemExit(f"no {rss_file}: {stderr[-3000:]!r}")
    hipmem_rss_kb = int(rss_file.read_text())
    answer = json.loads(stdout)
    return {
        "wall_s": wall_s,
        "allocations": answer["allocations"],
        "hipmem_rss_mb": hipmem_rss_kb / 1024,
        "recorded_rss_mb": answer["max_rss_bytes"] / 2**20,
        "reserved": answer["max_memory_reserved"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--torch", default="2.11")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        cases = [
            ("gpt2-small train", SCRIPTS / "gpt_train.py", "H100"),
            ("gpt2-small train", SCRIPTS / "gpt_train.py", "MI300X"),
            ("generate 384 tokens", generation_script(folder), "H100"),
        ]
        one_run(cases[0][1], "H100", args.torch, folder)  # warm: builds and installs, once
        runs: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(cases))}
        for _ in range(args.processes):
            for index, (_, script, device) in enumerate(cases):
                runs[index].append(one_run(script, device, args.torch, folder))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for index, (name, _, device) in enumerate(cases):
        walls = [r["wall_s"] for r in runs[index]]
        total = [r["hipmem_rss_mb"] + r["recorded_rss_mb"] for r in runs[index]]
        print(
            f"{name} on {device}: wall median {statistics.median(walls):.1f} s "
            f"(min {min(walls):.1f}, max {max(walls):.1f}, {len(walls)} processes); "
            f"memory hipmem + recorded process max {max(total):.0f} MB "
            f"(hipmem {max(r['hipmem_rss_mb'] for r in runs[index]):.0f}, recorded "
            f"{max(r['recorded_rss_mb'] for r in runs[index]):.0f}); reserved peak "
            f"{runs[index][0]['reserved']:,}; {runs[index][0]['allocations']:,} allocations"
        )


if __name__ == "__main__":
    main()
