"""Replays through RAPIDS RMM's own resources on the virtual GPU: no GPU needed.

`-r pool|arena|binning|fixed|cuda[:...,limit=...]` with `--backend virtual` (or `auto` with no
GPU) runs RMM's C++ code, compiled from a fetched `librmm-cu12` release (replay/rmm/fetch.py,
replay/rmm/build.py), over the stand-in CUDA runtime that PyTorch's allocator also runs on
(replay/virtual/vcuda/virtual_cuda.c). The device is one of the table or a memory size:
cudaMalloc is refused
past it, as a GPU of that size would, and arena's default size is half its free memory, as on a
GPU. Reserved bytes are the bytes the resource asked cudaMalloc for, counted by the stand-in.

`async` (the CUDA driver's own pool: cudaMallocAsync) is no RMM code and has no stand-in; nor
do `managed` memory and pinned host memory, so those upstreams are refused in one line.

Each replay is a driver process of its own (about 5 ms), which reads the program's arrays
(replay/virtual_gpu.ProgramFiles) and answers one line of JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hipmem._core.devices import Device

from ..engine.report import ReservedSamples
from ..engine.resources import ResourceSpec
from ..errors import ReplayError, ReplayUsageError
from ..virtual.devices import environment
from ..virtual.gpu import ProgramFiles
from ..virtual.loop_files import read_loop_files
from . import build as rmm_build
from . import fetch as rmm_fetch

# What the virtual GPU runs of RMM: its resources over RMM's cuda_memory_resource.
VIRTUAL_KINDS = ("cuda", "hip", "pool", "arena", "binning", "fixed")
RESERVED_FROM_STANDIN = "bytes the resource took from cudaMalloc (counted by the virtual GPU)"


class VirtualRmmFailed(ReplayError):
    """The driver stopped on an error, or the resource could not be made on the device."""


class VirtualRmmCancelled(VirtualRmmFailed):
    """The replay was cancelled (`VirtualRmm.cancel`): no answer."""


def check_spec(spec: ResourceSpec) -> None:
    """What the virtual GPU cannot run, refused in one line before any work."""
    if spec.kind == "async":
        raise ReplayUsageError(
            f"{spec.label!r}: async is the CUDA driver's own pool (cudaMallocAsync), not RMM "
            "code, and only a GPU has it; the virtual GPU replays pool, arena, binning, fixed "
            "and cuda (RMM's resources), or use a GPU (--backend cuda)",
            parameter="backend",
            value="virtual",
        )
    if spec.kind not in VIRTUAL_KINDS:
        raise ReplayUsageError(
            f"{spec.label!r}: the virtual GPU replays RMM's pool, arena, binning, fixed and "
            "cuda resources and PyTorch's allocator (torch), not this one",
            parameter="backend",
            value="virtual",
        )
    upstream = str(spec.options.get("upstream") or "cuda")
    if upstream not in ("cuda", "hip", "pool"):
        raise ReplayUsageError(
            f"{spec.label!r}: upstream={upstream} needs a GPU ({upstream} memory has no "
            "stand-in); the virtual GPU takes upstream=cuda",
            parameter="backend",
            value="virtual",
        )


def driver_arguments(spec: ResourceSpec) -> list[str]:
    """KIND UPSTREAM INITIAL MAXIMUM ARENA BLOCK PREALLOC MIN_EXP MAX_EXP of rmm_replay.cpp."""

    def size(name: str) -> int:
        value = spec.option_bytes(name)
        return -1 if value is None else value

    o = spec.options
    kind = "cuda" if spec.kind == "hip" else spec.kind
    return [
        kind,
        "pool" if o.get("upstream") == "pool" else "cuda",
        str(size("initial")),
        str(size("maximum")),
        str(size("size")),
        str(size("block")),
        str(int(o.get("prealloc") or 0)),
        str(int(o.get("min_exp") or 18)),
        str(int(o.get("max_exp") or 22)),
    ]


@dataclass(frozen=True)
class RmmProbe:
    """One replay through an RMM resource on the virtual GPU."""

    device_bytes: int
    wall_ns: int
    ops_done: int
    failure_count: int
    held_at_end_bytes: int
    peak_reserved_bytes: int  # what the resource took from cudaMalloc at most
    upstream_calls: int  # cudaMalloc calls granted (a pool's growth steps)
    device_refusals: int  # cudaMalloc calls the device refused (a pool retries smaller)
    device_peak_bytes: int  # the most device memory in use, in the device's pages
    failure_op: np.ndarray
    failure_live_bytes: np.ndarray
    failure_reserved_bytes: np.ndarray
    latency_ns: np.ndarray | None
    samples: ReservedSamples | None = None
    setup_refused: str | None = None  # RMM refused memory while making the resource
    # arena: how far into its arena it ever carved, at most (rmm_replay.cpp); -1 otherwise
    arena_extent_bytes: int = -1

    @property
    def replayed(self) -> bool:
        return self.failure_count == 0


class VirtualRmm:
    """One program and one resource of one RMM release; each replay in a process of its own."""

    def __init__(
        self,
        program: ProgramFiles,
        n_slots: int,
        n_streams: int,
        spec: ResourceSpec,
        rmm: rmm_fetch.FetchedRmm,
    ) -> None:
        check_spec(spec)
        self.spec, self.rmm = spec, rmm
        self._build_dir = rmm_build.build(rmm)
        self._folder = Path(tempfile.mkdtemp(prefix="hipmem-vrmm-"))
        self._arguments = [str(n_slots), str(max(n_streams, 1)), *driver_arguments(spec)]
        self._lock = threading.Lock()  # the process under way, for `cancel`
        self._process: subprocess.Popen[str] | None = None
        self._cancelled = False
        try:
            program.link_into(self._folder)
        except BaseException:
            self.close()
            raise

    def replay(
        self,
        device: Device,
        *,
        device_bytes: int | None = None,
        stop_on_failure: bool = False,
        time_calls: bool = False,
        repeats: int = 1,
        sample_every: int = 0,
    ) -> RmmProbe:
        size = device.memory_bytes if device_bytes is None else device_bytes
        limit = -1 if self.spec.limit_bytes is None else self.spec.limit_bytes
        line = (f"{size} {limit} {int(stop_on_failure)} {int(time_calls)} {repeats} "
                f"{max(sample_every, 0)}\n")  # fmt: skip
        answer = self._ask(line, device, size)
        if "setup_refused" in answer:  # made with no op run: one refusal, the making
            empty = np.zeros(0, dtype=np.int64)
            return RmmProbe(size, 0, 0, 1, 0, 0, 0, int(answer["device_refusals"]), 0, empty,
                            empty, empty, None, None, str(answer["setup_refused"]))  # fmt: skip
        latency, samples = read_loop_files(
            self._folder, time_calls=time_calls, sample_every=sample_every
        )
        return RmmProbe(
            device_bytes=size,
            wall_ns=int(answer["wall_ns"]),
            ops_done=int(answer["ops_done"]),
            failure_count=int(answer["failures"]),
            held_at_end_bytes=int(answer["held_at_end_bytes"]),
            peak_reserved_bytes=int(answer["peak_reserved_bytes"]),
            upstream_calls=int(answer["segment_allocations"]),
            device_refusals=int(answer["device_refusals"]),
            device_peak_bytes=int(answer["device_peak_bytes"]),
            failure_op=np.array(answer["failure_op"], dtype=np.int64),
            failure_live_bytes=np.array(answer["failure_live_bytes"], dtype=np.int64),
            failure_reserved_bytes=np.array(answer["failure_reserved_bytes"], dtype=np.int64),
            latency_ns=latency,
            samples=samples,
            arena_extent_bytes=int(answer["arena_extent_bytes"]),
        )

    def _ask(self, line: str, device: Device, size: int) -> dict[str, Any]:
        command = [str(self._build_dir / rmm_build.DRIVER), str(self._folder), *self._arguments]
        env = {**os.environ, **environment(device), "HIPMEM_VCUDA_MEMORY_BYTES": str(size)}
        with self._lock:
            if self._cancelled:
                raise VirtualRmmCancelled(f"{self.spec.label}: replay cancelled")
            try:  # in its own folder: RMM 24.12 writes rmm_log.txt into the working directory
                process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True, env=env,
                                           cwd=self._folder)  # fmt: skip
            except OSError as err:
                raise VirtualRmmFailed(f"the RMM replay driver could not start: {err}") from None
            self._process = process
        try:
            stdout, stderr = process.communicate(line)
        finally:
            with self._lock:
                self._process = None
        if self._cancelled:
            raise VirtualRmmCancelled(f"{self.spec.label}: replay cancelled")
        first = stdout.split("\n", 1)[0]
        who = f"RMM {self.rmm.version}'s {self.spec.label}"
        if not first:
            lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
            said = lines[-1][:300] if lines else "no output"
            raise VirtualRmmFailed(f"{who}: the replay process ended (exit {process.returncode}): "
                                   f"{said}")  # fmt: skip
        data: dict[str, Any] = json.loads(first)
        if "error" in data:
            raise VirtualRmmFailed(f"{who} stopped: {data['error']}")
        return data

    def cancel(self) -> None:
        """End the replay under way, if any, and refuse the next (from another thread: a
        replay made ahead that the search no longer needs)."""
        with self._lock:
            self._cancelled = True
            if self._process is not None:
                self._process.kill()

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> VirtualRmm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def device_text(rmm: rmm_fetch.FetchedRmm, device: Device) -> str:
    """What the report says of where it ran, plainly."""
    return (
        f"RMM {rmm.version}'s resources on a virtual {device.name} ({device.memory_bytes:,} bytes)"
    )
