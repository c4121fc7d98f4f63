"""On the GPU machine: records the GPU truths of issues 52 and 50 with the scripts of
tests/data/record/scripts/, each run in a fresh process (PyTorch reads PYTORCH_CUDA_ALLOC_CONF
once per process) with one GPU of its own (CUDA_VISIBLE_DEVICES), the GPUs in parallel.

The device call (4 H100s; needs only python3 with torch, torchvision and transformers; no
network; hipmem need not be installed):

    run(kind="nvidia-h100-x4", timeout_s=600,
        command="python3 benchmarks/gpu_record_truths.py --out $OUT")

Expected duration: 2 to 4 minutes (about 35 runs of 6-20 s each over 4 GPUs; the batch sweep's
GPU, the longest lane, about 9 runs). It never passes --budget-s (500 s by default) + 25 s + the
packing: no run starts after the budget, and one started just before it is stopped 25 s later.
What comes back: $OUT/truths.tar.gz (truths-1.tar.gz, truths-2.tar.gz, ... should it pass
15 MiB), holding truths/:
  summary.txt, summary.json   the table printed at the end (script, setting, reserved and
                              allocated peaks, oom, seconds, status), the checks, the host
  runs/NAME.pickle.gz         torch.cuda.memory._snapshot(), pickled, then gzipped
  runs/NAME.stats.json        max_memory_reserved/allocated, memory_stats(), torch/CUDA/cuDNN
                              versions, device name and memory, free memory at the start, alloc
                              conf, script and env, wall seconds, oom and PyTorch's message
  runs/NAME.log, NAME.job.json  the run's output, and how it was run
The runs, each snapshot recorded with `_record_memory_history(max_entries=5_000_000,
context="alloc", stacks="python")` from before the script's first allocation:
  - gpt_train, resnet_amp, llama_ckpt, kv_generate, encoder_varlen: the defaults twice (the
    determinism check) and expandable_segments:True once; oom_device (a request larger than
    the device can give, after two training steps) under both;
  - on a GPU of its own: gpt_train at BATCH=16 and 32, then ten batch sizes whose fifth is the
    largest predicted to fit from those two, smallest first, stopping one run after the first
    that runs out of memory;
  - oom_cap (a per-process cap, CAP_FRACTION) uncapped under both, then capped at the
    expandable run's reserved peak (lower if the defaults still fit) until the defaults run out
    of memory, then expandable segments and the other CAP_SETTINGS at that cap.
A run that fails is recorded as failed and the others go on. Exit 1 when a run failed or was
not run. `--only gpt_train oom_cap` runs those scripts only.

    python3 benchmarks/gpu_record_truths.py --dry-run --out DIR --budget-s 1500

--dry-run checks the harness with no GPU: every script on the CPU at tiny sizes
(HIPMEM_RECORD_DEVICE=cpu, HIPMEM_RECORD_TINY=1), no snapshot, 2 lanes; a script whose library
does not import (torchvision without its CUDA build's libraries) is skipped, said in its row.
On a loaded 2-core machine it takes about 15 minutes, hence the larger budget.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.record_truths_plan import (
    SCRIPTS,
    SCRIPTS_DIR,
    Result,
    Run,
    Search,
    batch_search,
    cap_search,
    usual_runs,
)
from benchmarks.record_truths_report import checks, table
from hipmem._core.atomic_write import atomic_output, write_text_atomically

CHILD = Path(__file__).with_name("record_truths_child.py")
MiB = 1 << 20
PART_BYTES = 15 * MiB  # each file that comes back from the device may be 16 MiB
MAX_PARTS = 8  # files that come back from the device
GRACE_S = 25  # a run started before the budget's end is stopped this long after it
LOG_TAIL_CHARS = 600  # of a failed run's output, in its row
# Environment variables that would override or mix with the setting under test.
CLEARED = ("PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


class Recorder:
    """Runs the plan over the lanes (one GPU each) and keeps every run's result."""

    def __init__(self, args: argparse.Namespace, work: Path, lanes: int) -> None:
        self.args, self.work, self.lanes = args, work, lanes
        self.only: set[str] = {name.removesuffix(".py") + ".py" for name in args.only or SCRIPTS}
        self.runs_dir = work / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.deadline = self.started + args.budget_s
        self.lock = threading.Lock()
        self.queue: deque[Run] = deque(r for r in usual_runs() if r.script in self.only)
        self.results: list[Result] = []
        self.names: set[str] = set()

    def record_all(self) -> None:
        searches: list[list[Search]] = [[] for _ in range(self.lanes)]
        if "gpt_train.py" in self.only:
            searches[0].append(batch_search())  # the batch sweep has a GPU of its own
        if "oom_cap.py" in self.only:
            searches[1 % self.lanes].append(cap_search())
        threads = [threading.Thread(target=self._lane, args=(index, searches[index]))
                   for index in range(self.lanes)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _lane(self, lane: int, searches: list[Search]) -> None:
        for search in searches:
            try:
                run = next(search)
                while True:
                    run = search.send(self._execute(run, lane))
            except StopIteration:
                pass
        while True:
            with self.lock:
                if not self.queue:
                    return
                run = self.queue.popleft()
            self._execute(run, lane)

    def _execute(self, run: Run, lane: int) -> Result:
        with self.lock:
            while run.name in self.names:
                run = Run(run.name + "-again", run.script, run.setting, run.alloc_conf, run.env)
            self.names.add(run.name)
        if time.monotonic() >= self.deadline:
            note = f"not started within --budget-s {self.args.budget_s:.0f}"
            result = Result(run, "not run", note=note)
        else:
            result = self._run_child(run, lane)
        with self.lock:
            self.results.append(result)
            print(_progress(result), flush=True)
        return result

    def _run_child(self, run: Run, lane: int) -> Result:
        base = self.runs_dir / run.name
        job = {
            "name": run.name,
            "script": f"tests/data/record/scripts/{run.script}",
            "script_path": str(SCRIPTS_DIR / run.script),
            "args": [],
            "env": run.env,
            "needs": list(run.needs),
            "dry_run": self.args.dry_run,
            "snapshot": str(base) + ".pickle.gz",
            "stats": str(base) + ".stats.json",
        }
        job_path = Path(str(base) + ".job.json")
        write_text_atomically(job_path, json.dumps(job, indent=1) + "\n")
        timeout_s = min(self.args.run_timeout_s, self.deadline + GRACE_S - time.monotonic())
        started = time.monotonic()
        log_path = Path(str(base) + ".log")
        with log_path.open("w") as log:
            try:
                done = subprocess.run(
                    [sys.executable, str(CHILD), str(job_path)], env=self._env(run, lane),
                    cwd=SCRIPTS_DIR, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                    check=False,
                )  # fmt: skip
                exit_note = f"exit code {done.returncode}"
            except subprocess.TimeoutExpired:
                exit_note = f"stopped after {timeout_s:.0f} s"
        wall_s = round(time.monotonic() - started, 1)
        stats_path = Path(job["stats"])
        if not stats_path.exists():
            tail = log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
            return Result(run, "failed", lane, wall_s, note=f"{exit_note}, no figures: {tail}")
        stats = json.loads(stats_path.read_text())
        note = stats.get("skip_reason") or ""
        if stats["status"] == "failed":
            note = stats["error"]["traceback"].strip().splitlines()[-1]
        return Result(run, stats["status"], lane, wall_s, stats, note)

    def _env(self, run: Run, lane: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        env.update(
            PYTORCH_CUDA_ALLOC_CONF=run.alloc_conf,
            CUDA_VISIBLE_DEVICES=str(lane),
            OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // self.lanes)),
            PYTHONHASHSEED="0",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
        )
        if self.args.dry_run:
            env.update(HIPMEM_RECORD_DEVICE="cpu", HIPMEM_RECORD_TINY="1")
        env.update(run.env)
        return env


def _progress(result: Result) -> str:
    peak = result.figure("reserved_bytes_peak")
    figures = f", reserved {peak:,} B" if peak is not None else ""
    seconds = f" in {result.wall_s} s" if result.wall_s is not None else ""
    note = f" ({result.note[:160]})" if result.note else ""
    return f"[gpu {result.lane}] {result.run.name}: {result.status}{figures}{seconds}{note}"


def _host(dry_run: bool) -> dict[str, Any]:
    host: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    if not dry_run and shutil.which("nvidia-smi"):
        query = "index,name,driver_version,memory.total,memory.used"
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        host["gpus"] = done.stdout.strip().splitlines()
    return host


def _pack(work: Path, out: Path) -> list[Path]:
    """Everything under `work` into out/truths.tar.gz, or into parts of at most PART_BYTES
    when larger (the summary in the first); the paths written."""
    files = sorted(p for p in work.rglob("*") if p.is_file())
    files.sort(key=lambda p: p.parent != work)  # summary files first
    parts: list[list[Path]] = [[]]
    size = 0
    for path in files:
        grows = path.stat().st_size + 1024
        if parts[-1] and size + grows > PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(path)
        size += grows
    if len(parts) > MAX_PARTS:
        print(f"{len(parts)} parts: only the first {MAX_PARTS} come back from the device")
    written = []
    for index, members in enumerate(parts, start=1):
        name = "truths.tar.gz" if len(parts) == 1 else f"truths-{index}.tar.gz"
        with atomic_output(out / name) as tmp, tarfile.open(tmp, "w:gz") as tar:
            for path in members:
                tar.add(path, arcname=f"truths/{path.relative_to(work).as_posix()}")
        written.append(out / name)
    return written


def _lanes(args: argparse.Namespace) -> int:
    if args.lanes:
        return int(args.lanes)
    if args.dry_run:
        return 2
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return max(1, sum(line.startswith("GPU ") for line in done.stdout.splitlines()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT"),
                        help="where the tar.gz goes (default: $OUT)")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=500.0,
                        help="start no run after this many seconds (default 500)")  # fmt: skip
    parser.add_argument("--run-timeout-s", type=float, default=240.0,
                        help="stop a run after this many seconds (default 240)")  # fmt: skip
    parser.add_argument("--lanes", type=int, help="GPUs to use (default: all; 2 in a dry run)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: the scripts on the CPU at tiny sizes")  # fmt: skip
    parser.add_argument("--work", type=Path, help="the folder packed (default: a temporary one)")
    parser.add_argument("--only", nargs="+", metavar="SCRIPT",
                        help="these scripts only (default: all)")  # fmt: skip
    args = parser.parse_args()
    if args.out is None:
        parser.error("--out: give a folder (the device call sets $OUT)")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="hipmem-truths-"))
    unknown = sorted({n.removesuffix(".py") + ".py" for n in args.only or ()} - set(SCRIPTS))
    if unknown:
        parser.error(f"--only: no script {', '.join(unknown)} (there are {', '.join(SCRIPTS)})")
    lanes = _lanes(args)
    host = _host(args.dry_run)
    recorder = Recorder(args, work, lanes)
    print(f"{len(recorder.only)} scripts, {lanes} lanes, budget {args.budget_s:.0f} s, "
          f"folder {work}", *host.get("gpus", []), sep="\n", flush=True)  # fmt: skip
    recorder.record_all()
    wall_s = round(time.monotonic() - recorder.started, 1)
    rows, text = table(recorder.results)
    found = checks(recorder.results)
    text += "\n" + "\n".join(found["lines"]) + f"\nwall {wall_s} s, {lanes} lanes\n"
    summary = {"dry_run": args.dry_run, "budget_s": args.budget_s, "lanes": lanes,
               "wall_s": wall_s, "host": host, "rows": rows,
               "checks": found}  # fmt: skip
    write_text_atomically(work / "summary.json", json.dumps(summary, indent=1) + "\n")
    write_text_atomically(work / "summary.txt", text)
    print(text, end="")
    for path in _pack(work, args.out):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    troubled = [r for r in recorder.results if r.status in ("failed", "not run")]
    raise SystemExit(1 if troubled else 0)


if __name__ == "__main__":
    main()
