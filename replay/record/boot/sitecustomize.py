"""Runs first in every Python process of a recorded command (hipmem puts this folder first on
PYTHONPATH): in the process that uses the virtual GPU it records PyTorch's allocator history
and, at exit, writes the snapshot and the run's figures where hipmem waits for them.

Only the standard library and torch are used: this runs in the user's interpreter, with the
user's packages, not hipmem's. What it writes (HIPMEM_RECORD_DIR):

- `snapshot.pickle`: `torch.cuda.memory._dump_snapshot`'s file, PyTorch's own format;
- `run.json`: the peaks, the allocator's counters, the device reads and where the first were;
- `refused.txt`: why it would not run the command (a PyTorch that is not a CUDA build).

Each is written to a temporary name and renamed; the first process to finish with the GPU
in use writes them (a DataLoader's workers never touch it). Another `sitecustomize` on the
user's path still runs, after this one.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import json
import os
import resource
import sys
import traceback
from pathlib import Path
from types import FrameType

RECORD_DIR = Path(os.environ["HIPMEM_RECORD_DIR"]) if os.environ.get("HIPMEM_RECORD_DIR") else None
MAX_ENTRIES = int(os.environ.get("HIPMEM_RECORD_MAX_ENTRIES", "5000000"))
BOOT = Path(__file__).parent  # this folder: its frames are hipmem's, never the user's line
READ_SITES = 5  # the user's lines named for device reads
REFUSED = "refused.txt"  # why this process would not run the command (hipmem says it)
# Where a GradScaler reads its overflow flag before it steps (torch/amp/grad_scaler.py): a
# zero read there is a step taken, which on the GPU may have been skipped.
SCALER_FILE, SCALER_STEP = ("amp", "grad_scaler.py"), "_maybe_opt_step"
SCALER_DEPTH = 8  # frames searched above a device read
_reads: dict[str, int] = {}
_scaler_steps = 0


def _chain_user_sitecustomize() -> None:
    """The user's own sitecustomize, which this module's name hides on the path."""
    here = Path(__file__).resolve().parent
    path = [p for p in sys.path if Path(p or ".").resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _user_line() -> str:
    """The innermost frame outside torch and this file: where the user read a device value."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename
        if "/torch/" in name or Path(name).parent == BOOT or name.startswith("<"):
            continue
        return f"{_shown(name)}:{frame.lineno}"
    return "(inside PyTorch)"


def _shown(filename: str) -> str:
    """A path as the user typed it: relative to the folder the command ran in, when inside."""
    path = Path(filename)
    try:
        return str(path.relative_to(Path.cwd())) if path.is_absolute() else filename
    except ValueError:
        return filename


def _in_scaler_step() -> bool:
    """Whether a GradScaler's step is reading its overflow flag (a few frames up)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(SCALER_DEPTH):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == SCALER_STEP and Path(code.co_filename).parts[-2:] == SCALER_FILE:
            return True
        frame = frame.f_back
    return False


def _on_device_read(nbytes: int) -> None:
    global _scaler_steps
    del nbytes
    if len(_reads) < READ_SITES:
        site = _user_line()
        _reads[site] = _reads.get(site, 0) + 1
    if _in_scaler_step():
        _scaler_steps += 1


def _write_atomically(path: Path, write) -> None:  # type: ignore[no-untyped-def]
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    write(str(temporary))
    temporary.replace(path)


def _finish(torch, library) -> None:  # type: ignore[no-untyped-def]
    assert RECORD_DIR is not None
    if not torch.cuda.is_initialized():
        return
    stats = torch.cuda.memory_stats()
    # A process that started CUDA but asked nothing of the allocator leaves the record to the
    # one that did: torch.compile's workers read the device's properties and end before the
    # script does.
    if not (stats.get("allocation.all.allocated", 0) or stats.get("num_ooms", 0)):
        return
    try:  # the first process to finish with the GPU writes; a second one leaves it
        (RECORD_DIR / "claimed").touch(exist_ok=False)
    except FileExistsError:
        return
    snapshot = RECORD_DIR / "snapshot.pickle"
    _write_atomically(snapshot, torch.cuda.memory._dump_snapshot)
    run = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "num_ooms": stats.get("num_ooms", 0),
        "allocations": stats.get("allocation.all.allocated", 0),
        "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "device_reads": int(library.hipmem_record_device_reads()),
        "device_read_sites": _reads,
        "grad_scaler_steps": _scaler_steps,
        "cudnn_convolutions": _cudnn_convolutions(library),
        "pid": os.getpid(),
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }

    def dump(path: str) -> None:
        Path(path).write_text(json.dumps(run))

    _write_atomically(RECORD_DIR / "run.json", dump)


def _cudnn_convolutions(library) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """How the stand-in cuDNN answered convolution workspaces (csrc/libraries/
    cudnn_convolution.c): from a measured batch size, from others, or not in its table."""
    import ctypes

    counts = (ctypes.c_int64 * 3)()
    library.hipmem_record_cudnn_convolutions(counts)
    return dict(zip(("measured", "from_other_batch_sizes", "not_measured"), counts, strict=True))


def _refuse_distributed(torch) -> None:  # type: ignore[no-untyped-def]
    """torch.distributed is not recorded: one line, where the script starts it."""
    if not torch.distributed.is_available():
        return

    def refused(*args: object, **kwargs: object) -> None:
        del args, kwargs
        raise RuntimeError(
            "hipmem record: torch.distributed is not recorded yet (one process on one virtual "
            "GPU); record a single-process run of the script"
        )

    torch.distributed.init_process_group = refused
    torch.distributed.distributed_c10d.init_process_group = refused


def _start() -> None:
    import ctypes

    import torch

    if torch.version.cuda is None:  # hipmem says it (replay/record/run.py reads REFUSED)
        assert RECORD_DIR is not None
        (RECORD_DIR / REFUSED).write_text(
            f"PyTorch {torch.__version__} is not a CUDA build; a recording runs a CUDA build of "
            "PyTorch on the virtual GPU (give --torch VERSION, e.g. --torch 2.11)"
        )
        os._exit(2)
    # cuDNN on, as on the GPU, but off around the calls whose cuDNN sizes the stand-in cannot
    # answer (batch norm, RNNs, CTC loss, grid sampling: _hipmem_cudnn says which). Convolution
    # workspaces come from the GPU's table, attention plans as the GPU answers them.
    import _hipmem_cudnn  # type: ignore[import-not-found]  # beside this file

    _start.cudnn = _hipmem_cudnn.start()  # type: ignore[attr-defined]
    # torch.compile's pad decision as the GPU makes it (_hipmem_compile says why).
    import _hipmem_compile  # type: ignore[import-not-found]  # beside this file

    _hipmem_compile.start()
    # Small device values followed on the host, so that what the script reads back is what
    # the GPU computed where the host can compute it (_hipmem_host_values says how).
    import _hipmem_host_values  # type: ignore[import-not-found]  # beside this file at run time

    _start.host_values = _hipmem_host_values.start()  # type: ignore[attr-defined]
    library = ctypes.CDLL(None)
    callback = ctypes.CFUNCTYPE(None, ctypes.c_ulonglong)(_on_device_read)
    library.hipmem_record_on_device_read(callback)
    _start.callback = callback  # type: ignore[attr-defined]  # kept alive: C holds it
    _refuse_distributed(torch)
    torch.cuda.memory._record_memory_history(
        max_entries=MAX_ENTRIES, context="alloc", stacks="python"
    )
    atexit.register(_finish, torch, library)


if RECORD_DIR is not None:
    _start()
_chain_user_sitecustomize()
