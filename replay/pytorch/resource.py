"""`-r torch[:...]`: replay through PyTorch's own caching allocator, beside RMM's resources.

PyTorch reads its allocator settings (PYTORCH_CUDA_ALLOC_CONF) once per process, so each torch
resource replays in a process of its own (`hipmem.replay.pytorch.worker`), with the settings in its
environment; the replay loop there is a C++ extension built against the installed PyTorch.
Peak reserved comes from the allocator's own statistics (`reserved_bytes.all.peak`), the
figure a PyTorch snapshot records, so `-r torch:settings=recorded` reproduces a recording.

The spec's options are PyTorch's keys (sizes in hipmem's byte grammar):
`expandable_segments=1`, `max_split_size=256MiB`, `garbage_collection_threshold=0.8`,
`roundup_power2_divisions=4`, `backend=native|cudaMallocAsync`, or `settings=STRING`, a whole
setting string in PyTorch's own words (the spec's last option, since it has commas of its own:
`torch:limit=1GiB,settings=expandable_segments:True,max_split_size_mb:64`); `limit=BYTES` caps
the process (PyTorch's per-process memory fraction). PyTorch is an optional dependency
(`pip install 'hipmem[torch]'`).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hipmem._core.byte_sizes import MiB
from hipmem._core.child_python import child_environment

from ..engine.resources import ResourceSpec
from ..errors import ReplayError, ReplayUsageError
from ..logs.events import AllocationLog

RESERVED_FROM_TORCH = "PyTorch allocator statistics (reserved_bytes.all.peak)"
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


class TorchUnavailable(ReplayError):
    """The torch resource was asked for, but PyTorch cannot run it here."""


def require_torch() -> None:
    """Fail before any work when PyTorch is not installed."""
    if importlib.util.find_spec("torch") is None:
        raise TorchUnavailable(
            "the torch resource needs PyTorch with a GPU: pip install 'hipmem[torch]'"
        )


def alloc_conf(spec: ResourceSpec, log: AllocationLog) -> str:
    """The PYTORCH_CUDA_ALLOC_CONF the spec stands for."""
    o = spec.options
    if o.get("settings") == "recorded":
        confs = sorted({r.checked_alloc_conf() for r in log.recordings})
        if not confs:
            raise ReplayUsageError(
                "settings=recorded needs a PyTorch snapshot; this log has no recording",
                parameter="spec",
                value=spec.label,
            )
        if len(confs) > 1:
            raise ReplayUsageError(
                f"the snapshots were recorded with different settings: {'; '.join(confs)}"
            )
        return confs[0]
    if o.get("settings"):  # a whole setting string, checked when the spec was read
        return str(o["settings"])
    pairs = []
    if o.get("expandable_segments") is not None:
        pairs.append(f"expandable_segments:{'True' if o['expandable_segments'] else 'False'}")
    split = spec.option_bytes("max_split_size")
    if split is not None:  # whole MiB: checked when the spec was read (engine/resources.py)
        pairs.append(f"max_split_size_mb:{split // MiB}")
    for name in ("garbage_collection_threshold", "roundup_power2_divisions", "backend"):
        if o.get(name) is not None:
            pairs.append(f"{name}:{o[name]}")
    return ",".join(pairs)


@dataclass(frozen=True)
class TorchRun:
    """What the worker process measured."""

    wall_ns: int
    ops_done: int
    failure_count: int
    held_at_end_bytes: int
    peak_reserved_bytes: int
    latency_ns: np.ndarray
    failure_op: np.ndarray
    failure_live_bytes: np.ndarray
    gpu: str  # "cuda" or "hip": the PyTorch build's
    torch_version: str


def run_torch(
    arrays: dict[str, np.ndarray],
    n_slots: int,
    conf: str,
    *,
    limit_bytes: int | None,
    stop_on_failure: bool,
    time_calls: bool,
    repeats: int,
    device: int,
) -> TorchRun:
    """Replay the program's arrays in a fresh process with `conf` as its allocator settings."""
    require_torch()
    with tempfile.TemporaryDirectory(prefix="hipmem-torch-") as folder:
        source, target = Path(folder) / "in.npz", Path(folder) / "out.npz"
        payload: dict[str, Any] = {
            **{k: arrays[k] for k in ("op", "slot", "size", "stream", "stream_ids")},
            "n_slots": n_slots,
            "limit_bytes": -1 if limit_bytes is None else limit_bytes,
            "stop_on_failure": stop_on_failure,
            "time_calls": time_calls,
            "repeats": repeats,
            "device": device,
        }
        np.savez(source, **payload)
        _run_worker(source, target, conf)
        with np.load(target) as out:
            return TorchRun(
                wall_ns=int(out["wall_ns"]),
                ops_done=int(out["ops_done"]),
                failure_count=int(out["failures"]),
                held_at_end_bytes=int(out["held_at_end_bytes"]),
                peak_reserved_bytes=int(out["peak_reserved_bytes"]),
                latency_ns=out["latency_ns"],
                failure_op=out["failure_op"],
                failure_live_bytes=out["failure_live_bytes"],
                gpu=str(out["gpu"]),
                torch_version=str(out["torch_version"]),
            )


def _run_worker(source: Path, target: Path, conf: str) -> None:
    # The worker imports the hipmem this process runs, never a `hipmem/` folder of the user's
    # working folder (a clone's root, which `python -m` would put first): it starts in the
    # folder of its files, with this hipmem's folder first on its path.
    env = child_environment({**os.environ, ALLOC_CONF: conf})
    command = [sys.executable, "-m", "hipmem.replay.pytorch.worker", str(source), str(target)]
    # The worker's GPU memory is the driver's to take back when it ends, whatever happens:
    # a Ctrl-C here ends it (same process group) and every byte goes back with it.
    with subprocess.Popen(
        command, env=env, cwd=source.parent, stderr=subprocess.PIPE, text=True
    ) as worker:
        try:
            _, errors = worker.communicate()
        except KeyboardInterrupt:
            worker.send_signal(signal.SIGINT)
            worker.wait()
            raise
    if worker.returncode != 0 or not target.is_file():
        last = next((ln for ln in reversed(errors.strip().splitlines()) if ln.strip()), "")
        raise TorchUnavailable(
            f"the PyTorch replay process failed (exit {worker.returncode}): {last[-300:]}"
        )
