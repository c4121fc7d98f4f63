"""On a machine with an NVIDIA GPU and a CUDA PyTorch: does what `hipmem explain` says hold on
the GPU? (issue 36's device table, docs/explain.md.)

For each job below (the jobs of tests/snapshot_recorder.py, each under a per-process memory
cap at which it runs out of memory):

1. the job runs once under its recorded settings and cap, recording a memory snapshot, and
   runs out of memory;
2. `hipmem explain` reads that snapshot on the virtual GPU (a device of exactly this GPU's
   memory, the same cap, the same settings, this PyTorch's allocator, `--for cuda`): which
   settings of the grid serve every request, and which do not;
3. the job runs again, in a fresh process, under each of those settings and the same cap,
   and `torch.cuda.memory_stats()["num_ooms"]` says whether it ran out of memory.

It prints one row per job and setting (explain's verdict, the GPU's, whether they agree) and
exits 1 on any disagreement. `--json OUT` writes the rows.

    python3 benchmarks/gpu_explain_check.py [--only JOB ...] [--json OUT.json]
    python3 benchmarks/gpu_explain_check.py --dry-run   # no GPU: checks this script only

Needs only what the GPU machine has: python3 with torch (CUDA), numpy, pandas and g++;
hipmem need not be installed (the repository root goes on sys.path).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
if importlib.util.find_spec("platformdirs") is None:  # the GPU machine's Python lacks it
    os.environ.setdefault("HIPMEM_CACHE_DIR", str(Path.home() / ".cache" / "hipmem"))

from tests import snapshot_recorder as recorder  # noqa: E402

# job -> (recorded settings, cap as a fraction of the GPU's memory). The caps of the capped
# jobs lie between what two settings need under a cap on the virtual H200 (from the committed
# snapshots of the same jobs): train 585,105,408 bytes with PyTorch's defaults and 555,745,280
# with expandable segments; inference 123,731,968 and 119,537,664; multistream 142,606,336 with
# the defaults and 148,897,792 with expandable segments (recorded with expandable segments, so
# the defaults should avoid it).
H200_BYTES = 150_109_880_320
JOBS: dict[str, tuple[str, float]] = {
    "oom": ("", recorder.FRACTIONS["oom"]),
    "multistream-oom": ("", recorder.FRACTIONS["multistream-oom"]),
    "train-capped": ("", 570_000_000 / H200_BYTES),
    "infer-capped": ("", 121_600_000 / H200_BYTES),
    # The same inference recorded from before its weights with no ring buffer: infer-capped's
    # trace starts mid-run (max_entries=4000), and its replay served what the GPU refused.
    "infer-full-capped": ("", 121_600_000 / H200_BYTES),
    "multistream-capped": ("expandable_segments:True", 145_000_000 / H200_BYTES),
    "multistream-oom-expandable": ("expandable_segments:True", 830_000_000 / H200_BYTES),
}
_WORK = {
    "oom": "oom",
    "multistream-oom": "multistream-oom",
    "train-capped": "train-default",
    "infer-capped": "infer-default",
    "infer-full-capped": "infer-full",
    "multistream-capped": "multistream",
    "multistream-oom-expandable": "multistream-oom",
}
# Jobs that catch the out-of-memory error and go on differently (they let tensors go): their
# snapshot holds what they did after it, and a setting that avoids the first refusal changes
# what they do next, which no replay of the recorded trace can know. Shown, not counted.
ADAPTIVE = {"oom", "multistream-oom", "multistream-oom-expandable"}


def run_job(name: str, fraction: float, record: Path | None) -> dict[str, Any]:
    """In this process (PYTORCH_CUDA_ALLOC_CONF already set): the job under the cap."""
    import torch

    for key in recorder.FRACTIONS:  # the recorder's jobs set their own cap: make it this one
        recorder.FRACTIONS[key] = fraction
    torch.cuda.set_per_process_memory_fraction(fraction)
    recorder._RECORD.clear()
    recorder._RECORD.update(
        {"enabled": "all", "context": "all", "stacks": "python"} if record else {"enabled": None}
    )
    raised = False
    try:
        recorder._WORK[_WORK[name]](torch)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        raised = True  # a job that does not catch it ends here, as it would in production
    if record is not None:
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        with gzip.open(record, "wb") as file:
            pickle.dump(snapshot, file)
    stats = torch.cuda.memory_stats()
    return {"num_ooms": int(stats.get("num_ooms", 0)), "raised": raised,
            "device_total_bytes": int(torch.cuda.mem_get_info()[1])}  # fmt: skip


def _in_child(name: str, settings: str, fraction: float, record: Path | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if "ALLOC_CONF" not in k}
    env["PYTORCH_CUDA_ALLOC_CONF"] = settings
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--fraction",
               repr(fraction), *(["--record", str(record)] if record else [])]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{name} with {settings!r}: exit {done.returncode}: {done.stderr[-600:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def check_job(name: str, folder: Path) -> list[dict[str, Any]]:
    from hipmem.replay.explain.explanation import explain

    settings, fraction = JOBS[name]
    snapshot = folder / f"{name}.pickle.gz"
    recorded = _in_child(name, settings, fraction, snapshot)
    total = recorded["device_total_bytes"]
    cap = int(fraction * total)
    print(f"{name}: recorded under {settings or 'defaults'}, cap {cap:,} bytes: "
          f"{recorded['num_ooms']} out-of-memory errors", flush=True)  # fmt: skip
    found = explain(snapshot, device_memory_bytes=total, cap_bytes=cap, settings=settings,
                    torch_build="cuda")  # fmt: skip
    if found.refused is None:  # the GPU ran out of memory where the replay did not: disagree
        print(f"{name}: explain found no refused request under these conditions", flush=True)
        return [{"job": name, "settings": settings, "cap_bytes": cap, "explain_avoids": True,
                 "gpu_num_ooms": recorded["num_ooms"], "agree": recorded["num_ooms"] == 0,
                 "adaptive": name in ADAPTIVE}]  # fmt: skip
    rows = []
    for candidate in found.candidates:
        if candidate.error is not None:
            continue
        gpu = _in_child(name, candidate.settings, fraction, None)
        avoids, ran_out = candidate.replayed, gpu["num_ooms"] > 0
        rows.append({"job": name, "settings": candidate.settings, "cap_bytes": cap,
                     "explain_avoids": avoids, "gpu_num_ooms": gpu["num_ooms"],
                     "agree": avoids != ran_out, "adaptive": name in ADAPTIVE})  # fmt: skip
        on_gpu = f"{gpu['num_ooms']} OOM" if ran_out else "ran to the end"
        print(f"  {candidate.settings or '(defaults)':60} explain: "
              f"{'avoids' if avoids else 'refused':8} GPU: {on_gpu:15} "
              f"{'agree' if avoids != ran_out else 'DISAGREE'}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(JOBS), default=sorted(JOBS))
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: check the script")
    parser.add_argument("--cap-bytes", type=int, default=None,
                        help="run the jobs under this cap instead of their own")  # fmt: skip
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fraction", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_job(args.child, args.fraction, args.record)))
        return
    if args.dry_run:
        assert all(_WORK[job] in recorder._WORK for job in JOBS)
        print(f"dry run: {len(JOBS)} jobs: {', '.join(JOBS)}")
        return
    if args.cap_bytes is not None:
        for name in args.only:
            JOBS[name] = (JOBS[name][0], args.cap_bytes / H200_BYTES)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hipmem-explain-check-") as folder:
        for name in args.only:
            rows += check_job(name, Path(folder))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    counted = [row for row in rows if not row["adaptive"]]
    disagree = [row for row in counted if not row["agree"]]
    print(f"{len(counted) - len(disagree)} of {len(counted)} settings of the jobs that do not "
          "catch the error: explain and the GPU agree")  # fmt: skip
    adaptive = [row for row in rows if row["adaptive"]]
    agreeing = sum(row["agree"] for row in adaptive)
    print(f"{agreeing} of {len(adaptive)} settings of the jobs that catch it (not counted)")
    sys.exit(1 if disagree else 0)


if __name__ == "__main__":
    main()
