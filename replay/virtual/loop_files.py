"""What the drivers' shared replay loop (vcuda/replay_loop.hpp) leaves in their folder besides
its answer line: each call's latency and the reserved-bytes samples, read the same way for
PyTorch's allocator and RMM's resources."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..engine.report import ReservedSamples


def read_loop_files(
    folder: Path, *, time_calls: bool, sample_every: int
) -> tuple[np.ndarray | None, ReservedSamples | None]:
    """(latency of each call in ns, or None; the (op, requested, reserved) samples, or None)."""
    latency = np.fromfile(folder / "latency.bin", dtype=np.int64) if time_calls else None
    samples = None
    if sample_every > 0:
        triples = np.fromfile(folder / "samples.bin", dtype=np.int64).reshape(-1, 3)
        samples = ReservedSamples(triples[:, 0], triples[:, 1], triples[:, 2])
    return latency, samples
