"""One run of `gpu_record_truths.py`, in a process of its own (PyTorch reads
PYTORCH_CUDA_ALLOC_CONF once per process): records the GPU's memory history while a user's
script runs as `python SCRIPT ARGS` would run it, then writes the snapshot and the figures.

    python3 benchmarks/record_truths_child.py JOB.json

JOB.json (written by gpu_record_truths.py) names the script, its arguments, the environment it
was given (already in this process's environment), the modules it needs, and where the
snapshot (`<name>.pickle.gz`: `torch.cuda.memory._snapshot()` pickled, then gzipped) and the
figures (`<name>.stats.json`) go. The script's own out-of-memory error is a result, not a
failure: it is recorded (`oom`, `oom_message`) and the snapshot up to there is written. Exits 0
when the run was recorded (finished, out of memory or skipped), 1 when the script failed.

With "dry_run" the script runs on the CPU (HIPMEM_RECORD_DEVICE=cpu in the environment) and
nothing of CUDA is touched: no snapshot, no GPU figures.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import json
import os
import pickle
import platform
import resource
import runpy
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hipmem._core.atomic_write import atomic_output, write_text_atomically

RECORD: dict[str, Any] = {"max_entries": 5_000_000, "context": "alloc", "stacks": "python"}
# memory_stats() keys kept at the top of the figures (all of memory_stats() is kept too).
STAT_KEYS = (
    "reserved_bytes.all.peak",
    "allocated_bytes.all.peak",
    "requested_bytes.all.peak",
    "active_bytes.all.peak",
    "reserved_bytes.all.current",
    "allocated_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
    "num_device_alloc",
    "num_device_free",
)
MESSAGE_CHARS = 4000  # of an error's message or traceback kept in the figures
LIBRARIES = ("transformers", "torchvision", "numpy")  # versions noted when the script loaded them


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    facts = record(job)
    write_text_atomically(Path(job["stats"]), json.dumps(facts, indent=1) + "\n")
    print(f"recorded {job['name']}: {facts['status']}", flush=True)
    raise SystemExit(1 if facts["status"] == "failed" else 0)


def record(job: dict[str, Any]) -> dict[str, Any]:
    """Run the job's script under the memory history; the figures, and the snapshot written."""
    facts: dict[str, Any] = {
        "name": job["name"],
        "script": job["script"],
        "args": job["args"],
        "env": job["env"],
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "record": RECORD,
        "dry_run": job["dry_run"],
    }
    missing = _missing_modules(job["needs"])
    if missing:
        facts.update(status="skipped", skip_reason=missing)
        return facts
    import torch

    on_gpu = not job["dry_run"]
    if on_gpu:
        torch.cuda.init()
        free_bytes, total_bytes = torch.cuda.mem_get_info()
        facts.update(device_free_bytes_at_start=free_bytes, device_total_bytes=total_bytes)
        torch.cuda.memory._record_memory_history(**RECORD)
    started = time.perf_counter()
    outcome: BaseException | None = _run_script(job)
    facts["wall_s"] = round(time.perf_counter() - started, 3)
    facts.update(_outcome(outcome, torch))
    facts["versions"] = _versions(torch)
    facts["cpu_max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if on_gpu:
        try:
            facts.update(_gpu_facts(torch, Path(job["snapshot"])))
        except Exception as error:  # a script's CUDA error can leave the device unusable
            facts["snapshot_error"] = repr(error)[:MESSAGE_CHARS]
    del outcome  # its traceback held the script's tensors until the snapshot was taken
    return facts


def _missing_modules(needs: list[str]) -> str | None:
    """Why a module the script needs cannot be imported here, or None."""
    for module in needs:
        try:
            importlib.import_module(module)
        except Exception as error:  # torchvision without its CUDA libraries raises RuntimeError
            last = str(error).strip().splitlines()[-1:] or [""]
            return f"{module} does not import here ({type(error).__name__}: {last[0][:200]})"
    return None


def _run_script(job: dict[str, Any]) -> BaseException | None:
    """Run the script as `python SCRIPT ARGS` does; the exception that ended it, if any."""
    script = str(job["script_path"])
    sys.argv = [script, *job["args"]]
    sys.path.insert(0, str(Path(script).parent))  # as python puts the script's folder first
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        return None if stop.code in (None, 0) else stop
    except BaseException as error:
        return error
    return None


def _outcome(error: BaseException | None, torch: Any) -> dict[str, Any]:
    """Finished, out of memory (PyTorch's OutOfMemoryError) or failed, with the message."""
    if error is None:
        return {"status": "ok", "oom": False, "oom_message": None, "error": None}
    if isinstance(error, torch.OutOfMemoryError):
        return {"status": "oom", "oom": True, "oom_message": str(error)[:MESSAGE_CHARS],
                "error": None}  # fmt: skip
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    failure = {"type": type(error).__name__, "traceback": text[-MESSAGE_CHARS:]}
    return {"status": "failed", "oom": False, "oom_message": None, "error": failure}


def _versions(torch: Any) -> dict[str, Any]:
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}  # fmt: skip
    for name in LIBRARIES:
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", None)
    return versions


def _gpu_facts(torch: Any, snapshot_path: Path) -> dict[str, Any]:
    """The allocator's figures and the device's, and the snapshot written to `snapshot_path`."""
    with contextlib.suppress(Exception):  # a failed script may have left an error behind
        torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with atomic_output(snapshot_path) as tmp, gzip.open(tmp, "wb", compresslevel=9) as file:
        pickle.dump(snapshot, file, protocol=pickle.HIGHEST_PROTOCOL)
    stats = torch.cuda.memory_stats()
    properties = torch.cuda.get_device_properties(0)
    traces = snapshot.get("device_traces") or [[]]
    return {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "device_capability": list(torch.cuda.get_device_capability()),
        "device_multiprocessors": properties.multi_processor_count,
        "device_properties_total_bytes": properties.total_memory,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "reserved_bytes_peak": stats.get("reserved_bytes.all.peak"),
        "allocated_bytes_peak": stats.get("allocated_bytes.all.peak"),
        "requested_bytes_peak": stats.get("requested_bytes.all.peak"),
        "num_ooms": stats.get("num_ooms"),
        "num_alloc_retries": stats.get("num_alloc_retries"),
        "stats": {key: stats.get(key) for key in STAT_KEYS},
        "memory_stats": dict(stats),
        "device_free_bytes_at_end": torch.cuda.mem_get_info()[0],
        "trace_entries": len(traces[0]),
        "trace_actions": dict(Counter(entry.get("action") for entry in traces[0])),
        "snapshot_bytes": snapshot_path.stat().st_size,
    }


if __name__ == "__main__":
    main()
