"""Replays through PyTorch's own caching allocator on a virtual GPU: no GPU needed.

The allocator is PyTorch's code (`libc10_cuda.so`, found by replay/pytorch/allocator.py), run by
a small C++ driver over hipmem's stand-in CUDA runtime (replay/virtual/vcuda/), which hands out
address space only and refuses what exceeds the device's memory. The answers are the
allocator's own: the reserved peak of a snapshot replayed with its recorded settings equals
the recorded one byte for byte.

A `VirtualGpu` is one program, one allocator and one settings string (PyTorch reads
PYTORCH_CUDA_ALLOC_CONF once per process); each replay ("probe") runs in a driver process of
its own, which costs about 10 ms. Replays sharing a process do not always start from a fresh
allocator's state: with expandable segments, a replay after a refused one on a smaller device
reserved 2 MiB more than the same replay in a fresh process (the segments outlive
`emptyCache`), so none share one. The process is also the crash boundary: an abort inside
PyTorch (a setting it refuses) is one error line here, and Ctrl-C ends it with the caller.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from hipmem._core.atomic_write import naming_write_errors
from hipmem._core.devices import Device

from ..engine.report import ReservedSamples
from ..errors import ReplayError, ReplayUsageError
from ..pytorch import allocator as torch_allocator
from ..pytorch.setting_keys import check_setting_keys, refused_key
from . import build as vcuda_build
from .devices import environment
from .loop_files import read_loop_files

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
_ARRAYS = (("op", np.int8), ("slot", np.int32), ("size", np.int64), ("stream", np.int32),
           ("placement", np.uint64))  # fmt: skip


class VirtualGpuFailed(ReplayError):
    """The virtual GPU's driver process stopped on an error (the message has its first line)."""


@dataclass(frozen=True)
class ProbeResult:
    """One replay on the virtual GPU, as the allocator's statistics report it."""

    device_bytes: int
    limit_bytes: int | None  # the per-process memory fraction's cap, when one was set
    wall_ns: int
    ops_done: int
    failure_count: int
    held_at_end_bytes: int
    peak_reserved_bytes: int  # reserved_bytes.all.peak
    peak_requested_bytes: int  # requested_bytes.all.peak
    peak_allocated_bytes: int
    segment_allocations: int  # segment.all.allocated (cudaMalloc'd segments)
    alloc_retries: int  # num_alloc_retries: the cache freed and the call retried
    num_ooms: int
    device_peak_bytes: int  # the most device memory in use at once, from the stand-in
    failure_op: np.ndarray
    failure_live_bytes: np.ndarray
    latency_ns: np.ndarray | None
    samples: ReservedSamples | None = None  # reserved bytes over the replay, when asked

    @property
    def replayed(self) -> bool:
        """No refusal: the program ran to its end."""
        return self.failure_count == 0


def fraction_limit(limit_bytes: int, device_bytes: int) -> int:
    """The limit to hand the driver so that PyTorch's cap is `limit_bytes`, or where no
    fraction gives exactly that, the least cap above it (a byte or two). The driver sets the
    fraction limit / device, and PyTorch caps at `size_t(fraction * device)`
    (setMemoryFraction in c10/cuda/CUDACachingAllocator.cpp), which in doubles can come to
    a byte less: a request that fills the cap exactly, as the recording's did
    (replay/explain/recorded_conditions.py), would then be refused."""
    if limit_bytes >= device_bytes:
        return limit_bytes
    for sent in range(limit_bytes - 2, limit_bytes + 8):  # the driver's double arithmetic
        if int(sent / device_bytes * device_bytes) >= limit_bytes:
            return sent
    return limit_bytes


def check_conf(conf: str, allocator: torch_allocator.TorchAllocator) -> None:
    """Settings this allocator cannot run, refused before any work: keys its release does not
    have (a usage error naming the nearest), and backends only a GPU has."""
    check_settings(conf)
    check_setting_keys(conf, allocator.version, allocator.include_dirs)


def check_settings(conf: str) -> None:
    """Settings the virtual GPU cannot run, refused before any work."""
    if "MallocAsync" in conf:  # cudaMallocAsync, or ROCm's hipMallocAsync
        raise ReplayUsageError(
            "the virtual GPU runs PyTorch's native caching allocator; backend=cudaMallocAsync "
            "hands memory to the CUDA driver's pools, which only a GPU has"
        )


def _write_arrays(arrays: dict[str, np.ndarray], folder: Path) -> None:
    """The program's arrays as the driver reads them (a program with no recorded placement,
    an RMM log's, gets an empty one)."""
    for name, dtype in _ARRAYS:
        array = np.ascontiguousarray(arrays.get(name, ()), dtype=dtype)
        with naming_write_errors(folder / f"{name}.bin"):
            array.tofile(folder / f"{name}.bin")


class ProgramFiles:
    """A program's arrays on disk, written once and read by every VirtualGpu that replays it:
    a grid of settings replays one program many times, several at once."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="hipmem-program-"))
        self.n_ops = len(arrays["op"])
        try:
            _write_arrays(arrays, self.folder)
        except BaseException:
            self.close()
            raise

    def link_into(self, folder: Path) -> None:
        for name, _ in _ARRAYS:
            (folder / f"{name}.bin").symlink_to(self.folder / f"{name}.bin")

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ProgramFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VirtualGpu:
    """One program and one settings string, replayed on demand, each replay in a process of
    its own (see the module's docstring: a process is the unit of a fresh allocator)."""

    def __init__(
        self,
        arrays: dict[str, np.ndarray] | ProgramFiles,
        n_slots: int,
        n_streams: int,
        conf: str,
        device: Device,
        allocator: torch_allocator.TorchAllocator,
        *,
        plain: bool = False,
        variable: str = ALLOC_CONF,
        built: Path | None = None,
    ) -> None:
        """`arrays`: the program's, or ProgramFiles already written (shared, not copied).
        `plain`: processes that run only the bare loop (`plain_loop_ns`). `variable`: the
        environment variable that carries `conf` (PyTorch reads several, in an order of its
        own: docs/allocator-settings.md). `built`: the allocator's build, already made and
        checked by the caller (replay/engine/target.py), so not hashed again."""
        check_conf(conf, allocator)
        self.device, self.allocator, self.conf = device, allocator, conf
        self.variable = variable
        self.n_ops = arrays.n_ops if isinstance(arrays, ProgramFiles) else len(arrays["op"])
        self._build_dir = built or vcuda_build.build(allocator)
        self._folder = Path(tempfile.mkdtemp(prefix="hipmem-vgpu-"))
        self._process: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._arguments = [str(n_slots), str(max(n_streams, 1)), *(["--plain"] if plain else [])]
        self.peak_rss: int | None = None  # the largest VmHWM of the processes so far
        try:
            if isinstance(arrays, ProgramFiles):
                arrays.link_into(self._folder)
            else:
                _write_arrays(arrays, self._folder)
        except BaseException:
            self.close()
            raise

    def _start(self, device: Device, memory_bytes: int) -> subprocess.Popen[str]:
        self._stop()
        self._stderr = (self._folder / "stderr.txt").open("w+")
        # The device has its probe's size from the start, as a smaller GPU would: PyTorch
        # reads the memory when it starts (a per_process_memory_fraction in the settings is
        # a share of it).
        sized = {**environment(device), "HIPMEM_VCUDA_MEMORY_BYTES": str(memory_bytes)}
        env = {**os.environ, **sized, self.variable: self.conf}
        command = [str(self._build_dir / vcuda_build.DRIVER), str(self._folder), *self._arguments]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True, env=env,
        )  # fmt: skip
        return self._process

    def replay(
        self,
        *,
        device_bytes: int | None = None,
        limit_bytes: int | None = None,
        stop_on_failure: bool = False,
        time_calls: bool = False,
        repeats: int = 1,
        device: Device | None = None,
        sample_every: int = 0,
    ) -> ProbeResult:
        """Replay the program once (`repeats` passes on one allocator, its cache warm after
        the first) on `device` (default: this one's), with `device_bytes` of memory if given,
        under a per-process memory cap of `limit_bytes` if given. `sample_every` > 0 samples
        the reserved bytes of the first pass: the highest point of each window of that many
        ops (for plots)."""
        chosen = device or self.device
        size = chosen.memory_bytes if device_bytes is None else device_bytes
        limit = -1 if limit_bytes is None else fraction_limit(limit_bytes, size)
        self._start(chosen, size)
        try:
            answer = self._ask(
                f"{size} {limit} {int(stop_on_failure)} {int(time_calls)} {repeats} "
                f"{max(sample_every, 0)}\n"
            )
        finally:
            self._stop()
        latency, samples = read_loop_files(
            self._folder, time_calls=time_calls, sample_every=sample_every
        )
        return ProbeResult(
            device_bytes=int(answer["device_bytes"]),
            limit_bytes=limit_bytes,
            wall_ns=int(answer["wall_ns"]),
            ops_done=int(answer["ops_done"]),
            failure_count=int(answer["failures"]),
            held_at_end_bytes=int(answer["held_at_end_bytes"]),
            peak_reserved_bytes=int(answer["peak_reserved_bytes"]),
            peak_requested_bytes=int(answer["peak_requested_bytes"]),
            peak_allocated_bytes=int(answer["peak_allocated_bytes"]),
            segment_allocations=int(answer["segment_allocations"]),
            alloc_retries=int(answer["num_alloc_retries"]),
            num_ooms=int(answer["num_ooms"]),
            device_peak_bytes=int(answer["device_peak_bytes"]),
            failure_op=np.array(answer["failure_op"], dtype=np.int64),
            failure_live_bytes=np.array(answer["failure_live_bytes"], dtype=np.int64),
            latency_ns=latency,
            samples=samples,
        )

    def state_at_refusal(
        self, *, device_bytes: int | None = None, limit_bytes: int | None = None
    ) -> dict[str, Any]:
        """Replay up to the first refused allocation and return the allocator's state there
        (the driver's `state` line: its statistics, segments and blocks from c10's snapshot();
        `refused_op` is -1 when nothing was refused)."""
        size = self.device.memory_bytes if device_bytes is None else device_bytes
        limit = -1 if limit_bytes is None else fraction_limit(limit_bytes, size)
        self._start(self.device, size)
        try:
            self._ask(f"state {size} {limit}\n")
        finally:
            self._stop()
        state: dict[str, Any] = json.loads((self._folder / "state.json").read_text())
        return state

    def plain_loop_ns(self, device_bytes: int | None = None) -> int:
        """Wall time of a bare loop over the same calls on the default stream, with no timing
        and no bookkeeping: the benchmark's yardstick (needs `plain=True`)."""
        size = self.device.memory_bytes if device_bytes is None else device_bytes
        self._start(self.device, size)
        try:
            return int(self._ask(f"{size} -1 0 0 1\n")["wall_ns"])
        finally:
            self._stop()

    def _note_rss(self, process: subprocess.Popen[str]) -> None:
        """Keep the process's peak resident memory (Linux: VmHWM) while it is still there."""
        try:
            status = Path(f"/proc/{process.pid}/status").read_text()
        except OSError:
            return
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) * 1024
                self.peak_rss = max(self.peak_rss or 0, rss)

    def _ask(self, line: str) -> dict[str, Any]:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise VirtualGpuFailed("the virtual GPU's process is closed")
        try:
            process.stdin.write(line)
            process.stdin.flush()
        except OSError:  # it ended before reading (PyTorch refused its settings at start):
            pass  # what it said is still on its stdout
        try:
            answer = process.stdout.readline()
            self._note_rss(process)
        except OSError:
            answer = ""
        if not answer:
            process.wait()
            raise VirtualGpuFailed(self._why_it_died(process.returncode))
        data: dict[str, Any] = json.loads(answer)
        if "error" in data:
            self._raise_if_refused_key(str(data["error"]))
            said = f"PyTorch {self.allocator.version}"
            if self.conf:  # most such errors are PyTorch's own about its settings
                said += f" with the settings {self.conf!r}"
            raise VirtualGpuFailed(f"{said} stopped: {data['error']}")
        return data

    def _raise_if_refused_key(self, what: str) -> None:
        """A key the build's headers could not tell us about, refused by PyTorch itself: the
        same usage error as a key refused before the replay."""
        refused = refused_key(what, self.conf, self.allocator.version, self.allocator.include_dirs)
        if refused is not None:
            raise refused

    def _why_it_died(self, code: int | None) -> str:
        lines: list[str] = []
        if self._stderr is not None:
            self._stderr.flush()
            self._stderr.seek(0)
            lines = [ln.strip() for ln in self._stderr.read().splitlines() if ln.strip()]
        what = next((ln.removeprefix("what():").strip() for ln in lines if ln.startswith("what()")),
                    lines[-1] if lines else "")  # fmt: skip
        self._raise_if_refused_key(what)
        if self.conf and ("config" in what.lower() or "alloc" in what.lower()):
            return (
                f"PyTorch {self.allocator.version} with the settings {self.conf!r} stopped: {what}"
            )
        return f"the virtual GPU's process ended (exit {code}): {what[:300]}"

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.stdin is not None:
                with contextlib.suppress(OSError):  # a line it never read: a broken pipe
                    process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        stderr, self._stderr = self._stderr, None
        if stderr is not None:
            stderr.close()

    def close(self) -> None:
        """End any process and remove the program's files (idempotent)."""
        self._stop()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> VirtualGpu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
