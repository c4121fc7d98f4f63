"""The process that replays through PyTorch's caching allocator:
`python -m hipmem.replay.pytorch.worker IN.npz OUT.npz`. PyTorch reads PYTORCH_CUDA_ALLOC_CONF
once per process, at its first CUDA allocation, so each torch resource gets a process of its
own, started by `hipmem.replay.pytorch.resource` with the settings in its environment.

IN holds the program's arrays and the run's parameters; OUT the results. The replay loop is a
small C++ extension (replay/pytorch/csrc/torch_replay.cpp) built on first use against the installed
PyTorch and cached under hipmem's cache (one build per PyTorch version and source). PyTorch's
own `torch.utils.cpp_extension` passes the C++ standard its headers need (C++17 up to 2.13,
C++20 from 2.14); a failure shows the first real error (replay/virtual/build.py's reading).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np

SOURCE = Path(__file__).with_name("csrc") / "torch_replay.cpp"
FAILURES_KEPT = 1000


def load_extension(torch: Any) -> Any:
    """Build (once per PyTorch version and source) and import the replay extension."""
    from torch.utils.cpp_extension import load

    from hipmem._core.cache_root import cache_dir

    digest = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:16]
    build_dir = cache_dir() / "torch-replay" / digest
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        return load(
            name=f"hipmem_torch_replay_{digest}",
            sources=[str(SOURCE)],
            build_directory=str(build_dir),
            extra_cflags=["-O2"],
            with_cuda=True,  # the GPU runtime's headers and library (CUDA, or HIP on ROCm)
            verbose=False,
        )
    except RuntimeError as err:  # the compiler's first error, not ninja's last word
        from hipmem._core.native_build import first_error

        raise SystemExit(
            f"building the PyTorch replay extension for PyTorch {torch.__version__} failed: "
            f"{first_error(str(err))}"
        ) from None


def _stream_handles(torch: Any, stream_ids: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """One real stream per logged stream; the logged default stream (0) stays the default."""
    keep = [torch.cuda.Stream() if int(sid) else None for sid in stream_ids]
    handles = np.array([s.cuda_stream if s is not None else 0 for s in keep], dtype=np.int64)
    return keep, handles


def run(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("PyTorch sees no GPU here")
    device = int(inputs["device"])
    torch.cuda.set_device(device)
    extension = load_extension(torch)
    limit_bytes = int(inputs["limit_bytes"])
    total_bytes = torch.cuda.mem_get_info(device)[1]
    if limit_bytes >= 0:
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total_bytes), device)
    streams, handles = _stream_handles(torch, inputs["stream_ids"])
    n_ops = len(inputs["op"])
    latency = torch.full((n_ops,), -1, dtype=torch.int64)
    failure_op = torch.zeros(FAILURES_KEPT, dtype=torch.int64)
    failure_live = torch.zeros(FAILURES_KEPT, dtype=torch.int64)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    wall_ns, ops_done, failures, held = extension.replay(
        torch.from_numpy(inputs["op"]),
        torch.from_numpy(inputs["slot"]),
        torch.from_numpy(inputs["size"]),
        torch.from_numpy(inputs["stream"]),
        torch.from_numpy(handles),
        int(inputs["n_slots"]),
        bool(inputs["stop_on_failure"]),
        bool(inputs["time_calls"]),
        int(inputs["repeats"]),
        latency,
        failure_op,
        failure_live,
    )
    torch.cuda.synchronize(device)
    stats = torch.cuda.memory_stats(device)
    del streams
    kept = min(failures, FAILURES_KEPT)
    return {
        "wall_ns": np.int64(wall_ns),
        "ops_done": np.int64(ops_done),
        "failures": np.int64(failures),
        "held_at_end_bytes": np.int64(held),
        "peak_reserved_bytes": np.int64(stats["reserved_bytes.all.peak"]),
        "reserved_at_end_bytes": np.int64(stats["reserved_bytes.all.current"]),
        "latency_ns": latency.numpy(),
        "failure_op": failure_op.numpy()[:kept],
        "failure_live_bytes": failure_live.numpy()[:kept],
        "torch_version": np.array(torch.__version__),
        "gpu": np.array("hip" if torch.version.hip else "cuda"),
    }


def main() -> None:
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    with np.load(source) as data:
        inputs = {name: data[name] for name in data.files}
    np.savez(target, **run(inputs))


if __name__ == "__main__":
    main()
