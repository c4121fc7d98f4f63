"""Record a user's command on a virtual GPU: the one library call behind `hipmem record`.

The command runs unmodified, in its own process, with the stand-in CUDA libraries loaded
first (replay/record/build.py) and the recording's boot (replay/record/boot/sitecustomize.py)
first on PYTHONPATH. Its output and exit status are its own. What comes back: the snapshot
PyTorch wrote (its own pickle format), written atomically where the user asked, and the
run's figures on the device played.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hipmem._core.atomic_write import write_bytes_atomically
from hipmem._core.devices import NVIDIA, Device

from ..capacity.fits import Fit, fits_table
from ..engine.options import ReplayOptions
from ..engine.resources import parse_spec
from ..errors import ReplayError, ReplayUsageError
from ..logs.loader import load_log
from ..pytorch import fetch as torch_fetch
from ..virtual.devices import environment
from . import build, device_attributes
from .rocm_build import expandable_note, rocm_workspaces
from .torch_site import RecordTorch, commands_torch, installed_release, interpreter

BOOT = Path(__file__).parent / "boot"
# What the CUDA context of a PyTorch 2.11 process keeps of the device before its first
# allocation: total - free at the start of every run of tests/data/record/truths-*, on the H100
# and the H200 alike (driver 580.159.04, CUDA 13.0). The virtual GPU keeps it too, so a script
# that sizes itself from torch.cuda.mem_get_info(), and the point where the device runs out,
# are as on the GPU. AMD's HIP context was never measured: not kept, and said.
NVIDIA_CONTEXT_BYTES = 552_402_944
# What a recording never sees, said with every answer (docs/record.md says why).
UNSEEN = (
    "cuDNN convolution workspaces the H200 did not measure (other shapes, batch sizes between "
    "measured ones) are estimated, and cudnn.benchmark's timed choices are not made",
    "device values the host cannot compute (in storages over 256 KiB, random, from a backward) "
    "read back as zeros",
    "memory the CUDA libraries allocate outside PyTorch's allocator (cuBLAS: about 64 MiB per "
    "handle) is not counted",
)
UNSEEN_AMD = (
    "on ROCm, which GEMMs go to hipBLASLt rather than rocBLAS, the attention kernels a ROCm "
    "build runs (AOTriton or CK flash attention, where a CUDA build on Hopper runs cuDNN's), "
    "MIOpen's workspaces and the HIP context's memory are not seen (never measured on an AMD "
    "GPU)"
)


class RecordError(ReplayError):
    """A recording could not run or wrote nothing (the message says why)."""


@dataclass(frozen=True)
class RecordRequest:
    """What to run and on which virtual GPU."""

    command: list[str]
    device: Device
    torch: str | None = None  # a release to install into the cache; None: the command's own
    output: Path | None = None  # where the snapshot goes (.gz: gzipped)
    alloc_conf: str | None = None  # PYTORCH_CUDA_ALLOC_CONF for the run
    environment: dict[str, str] = field(default_factory=dict)  # extra variables (--vary)
    stdout_to_stderr: bool = False  # the command's output off stdout (a --json answer's)
    fits_table: bool = True  # replay the snapshot on each device of the fits table


@dataclass(frozen=True)
class Recording:
    """What a recorded run did on the virtual GPU."""

    request: RecordRequest
    torch_version: str
    exit_code: int
    wall_s: float
    snapshot: Path | None  # None: the command never used the GPU
    max_memory_reserved: int
    max_memory_allocated: int
    allocations: int  # the requests PyTorch's allocator served
    out_of_memory: bool
    device_reads: int
    device_read_sites: dict[str, int]
    context_bytes: int  # the device memory the virtual GPU kept for the context
    max_rss_bytes: int  # the recorded process's peak resident memory (0: it wrote nothing)
    unseen: tuple[str, ...]
    fits_table: tuple[Fit, ...] = ()  # each device of the fits table (a run that ended)
    applied: tuple[str, ...] = ()  # a ROCm build's workspaces, set for an AMD device
    # cuDNN convolution plans by how the stand-in answered their workspace: "measured" (the
    # GPU's table), "from_other_batch_sizes" (interpolated), "not_measured" (from an alike one)
    cudnn_convolutions: dict[str, int] = field(default_factory=dict)
    # GradScaler steps taken because their overflow check read zero (on a GPU, a step whose
    # gradients overflow is skipped and allocates no optimizer state yet)
    grad_scaler_steps: int = 0


def record(request: RecordRequest, *, notice: Callable[[str], None] | None = None) -> Recording:
    """Run the request's command on the virtual GPU; the snapshot goes to request.output."""
    if not request.command:
        raise ReplayUsageError("no command to record (give it after --)", parameter="command")
    executable = shutil.which(request.command[0])
    if executable is None:
        raise ReplayUsageError("command not found", parameter="command", value=request.command[0])
    python = interpreter(executable)
    torch = installed_release(request.torch, python) if request.torch else commands_torch(python)
    headers = torch_fetch.fetch(torch.version.split("+")[0], notice=notice).include_dirs
    folder = build.build(torch.package, torch.version, torch.cuda_major, list(headers))
    user_env = {**os.environ, **request.environment}
    workspaces, applied = rocm_workspaces(request.device, torch.version, user_env)
    with tempfile.TemporaryDirectory(prefix="hipmem-record-") as work:
        started = time.perf_counter()
        exit_code = _run(request, executable, torch, folder, Path(work), workspaces)
        wall_s = time.perf_counter() - started
        done = _collect(request, torch, Path(work), exit_code, wall_s)
        conf = user_env.get("PYTORCH_CUDA_ALLOC_CONF", "") if request.alloc_conf is None else (
            request.alloc_conf)  # fmt: skip
        ignored = expandable_note(request.device, torch.version.split("+")[0], conf)
        done = dataclasses.replace(
            done, applied=applied, unseen=(*done.unseen, *filter(None, [ignored]))
        )
        if request.fits_table and exit_code == 0 and not done.out_of_memory and done.max_rss_bytes:
            done = dataclasses.replace(
                done, fits_table=_fits_table(Path(work) / "snapshot.pickle", torch)
            )
        return done


def _fits_table(snapshot: Path, torch: RecordTorch) -> tuple[Fit, ...]:
    """The recorded snapshot replayed on each device of the fits table, under the settings it
    ran with, by the release that recorded it."""
    options = ReplayOptions(backend="virtual", torch_version=torch.version.split("+")[0])
    return tuple(fits_table(load_log(snapshot), parse_spec("torch:settings=recorded"), options))


def _run(request: RecordRequest, executable: str, torch: RecordTorch, folder: Path,
         work: Path, workspaces: dict[str, str]) -> int:  # fmt: skip
    env = dict(os.environ)
    env.update(request.environment)
    env.update(workspaces)
    env.update(environment(request.device))
    env.update(device_attributes.environment(request.device))
    env["HIPMEM_VCUDA_CONTEXT_BYTES"] = str(context_bytes(request))
    preload = build.preload_order(folder, f"libcudart.so.{torch.cuda_major}")
    env["LD_PRELOAD"] = ":".join([*map(str, preload), *filter(None, [env.get("LD_PRELOAD")])])
    sites = [site for site in (torch.site, torch.triton_site) if site is not None]
    paths = [str(BOOT), *map(str, sites), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    env["HIPMEM_RECORD_DIR"] = str(work)
    env.update(compile_environment(folder, work))
    if request.alloc_conf is not None:  # both names: PyTorch 2.9 on reads the newer first
        env["PYTORCH_CUDA_ALLOC_CONF"] = env["PYTORCH_ALLOC_CONF"] = request.alloc_conf
    try:
        stdout = sys.stderr if request.stdout_to_stderr else None
        done = subprocess.run([executable, *request.command[1:]], env=env, stdout=stdout,
                              check=False)  # fmt: skip
        return done.returncode
    except OSError as err:
        raise RecordError(f"{request.command[0]} could not start: {err.strerror}") from None


def compile_environment(standins: Path, work: Path) -> dict[str, str]:
    """torch.compile in a recording: Triton links its launcher against the stand-in driver,
    and Inductor's and Triton's caches are the recording's own (removed with it), so that
    nothing compiled against the stand-ins is kept, or read from a GPU run's caches."""
    return {
        "TRITON_LIBCUDA_PATH": str(standins),
        "TRITON_HOME": str(work / "triton"),
        "TRITON_CACHE_DIR": str(work / "triton" / "cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
    }


def context_bytes(request: RecordRequest) -> int:
    return NVIDIA_CONTEXT_BYTES if request.device.vendor == NVIDIA else 0


def _unseen(request: RecordRequest) -> tuple[str, ...]:
    return UNSEEN if request.device.vendor == NVIDIA else (*UNSEEN, UNSEEN_AMD)


def _collect(request: RecordRequest, torch: RecordTorch, work: Path, exit_code: int,
             wall_s: float) -> Recording:  # fmt: skip
    refused = work / "refused.txt"  # the boot's REFUSED
    if refused.is_file():
        raise RecordError(refused.read_text(errors="replace")[:500])
    run_file = work / "run.json"
    if not run_file.is_file():
        return Recording(request, torch.version, exit_code, wall_s, None, 0, 0, 0, False, 0, {},
                         context_bytes(request), 0, _unseen(request))  # fmt: skip
    run = json.loads(run_file.read_text())
    snapshot = None
    if request.output is not None:
        data = (work / "snapshot.pickle").read_bytes()
        if request.output.name.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        write_bytes_atomically(request.output, data)
        snapshot = request.output
    return Recording(
        request, torch.version, exit_code, wall_s, snapshot,
        int(run["max_memory_reserved"]), int(run["max_memory_allocated"]), int(run["allocations"]),
        int(run["num_ooms"]) > 0, int(run["device_reads"]),
        {str(k): int(v) for k, v in run["device_read_sites"].items()},
        context_bytes(request), int(run["max_rss_bytes"]), _unseen(request),
        cudnn_convolutions={str(k): int(v) for k, v in run.get("cudnn_convolutions", {}).items()},
        grad_scaler_steps=int(run.get("grad_scaler_steps", 0)),
    )  # fmt: skip
