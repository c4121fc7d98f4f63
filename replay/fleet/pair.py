"""What a fleet worker does: hash a log, and replay one (log, resource) pair.

These functions run on Dask workers, each in a process of its own that sees only its own GPU
(`CUDA_VISIBLE_DEVICES` / `HIP_VISIBLE_DEVICES` name it first, so it is device 0 there). They
take and return plain data (paths, strings, dicts), so nothing but a path, or a log's bytes
when logs are sent, crosses the network, and the client never loads a log. A task is a batch:
several small logs to hash, or several pairs of small logs to replay (`batches.py`), one after
another, each with its own answer.

What a replay needs (pandas, pyarrow, the engine) is imported on a worker's first pair: the
client imports this module for its task types, and starts in a fraction of the time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from ..capacity.confirmation import CONFIRM_RUNS
from ..engine.options import ReplayOptions
from ..errors import ReplayError
from .records import RESULTS_VERSION, STATUS_FAILED, STATUS_OK, TASK_CAPACITY, TEXT_CHARS

if TYPE_CHECKING:
    from ..engine.program import ReplayProgram
    from ..logs.events import AllocationLog

_HASH_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class LogRef:
    """A log as a worker reaches it: a path on a filesystem it shares, or the file's bytes."""

    path: str
    content: bytes | None = None  # set when the log is sent rather than read in place


@dataclass(frozen=True)
class PairTask:
    """One (log, resource) pair and how to replay it."""

    log: LogRef
    log_sha256: str
    spec: str
    task: str  # TASK_REPLAY or TASK_CAPACITY
    settings: str
    options: ReplayOptions
    confirm_runs: int = CONFIRM_RUNS


def hash_log(log: LogRef) -> tuple[str, int]:
    """(SHA-256 hex, size in bytes) of the log's bytes, read in blocks (bounded memory)."""
    digest = hashlib.sha256()
    if log.content is not None:
        digest.update(log.content)
        return digest.hexdigest(), len(log.content)
    size = 0
    with Path(log.path).open("rb") as stream:
        while block := stream.read(_HASH_BLOCK_BYTES):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def hash_logs(logs: list[LogRef]) -> list[str | dict[str, str]]:
    """Each log's SHA-256 hex, or {"reason": why} for a log this worker cannot read."""
    return [_hash_or_reason(log) for log in logs]


def _hash_or_reason(ref: LogRef) -> str | dict[str, str]:
    try:
        return hash_log(ref)[0]
    except OSError as err:
        return {"reason": f"{ref.path}: cannot be read on the worker: {err.strerror or err}"}


def where_am_i(backend: str) -> dict[str, Any]:
    """Which process and GPU did the work: host, pid, the worker and the device it sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES")
    found: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "worker": _worker_address(),
        "backend": backend,
        "visible_devices": visible,
        "gpu": _gpu_bus_id() if backend in ("cuda", "torch") else None,
    }
    return found


def _worker_address() -> str | None:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return None  # not on a Dask worker (a serial run, or a test)


def _gpu_bus_id() -> str | None:
    """The PCI bus id of device 0 as this process sees it: which physical GPU it was."""
    try:
        from cuda.bindings import runtime

        err, bus_id = runtime.cudaDeviceGetPCIBusId(32, 0)
        if int(err) != 0:
            return None
        text = bytes(bus_id).split(b"\0", 1)[0] if not isinstance(bus_id, str) else bus_id
        return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # no cuda-bindings, or no GPU: the visible-device list still says it
        return None


def run_pairs(pairs: list[PairTask]) -> list[dict[str, Any]]:
    """Each pair's record, one pair after another (a log kept loaded for its next pair)."""
    return [run_pair(pair) for pair in pairs]


def run_pair(pair: PairTask) -> dict[str, Any]:
    """Replay one pair (and with TASK_CAPACITY, search its capacity): one results record.

    Every error (a damaged log, no capacity found, a crashed allocator, a bug) becomes a
    `failed` record with its one-line reason; a worker that dies returns nothing, and the
    client retries the pair elsewhere.
    """
    record: dict[str, Any] = {
        "version": RESULTS_VERSION,
        "log": pair.log.path,
        "log_sha256": pair.log_sha256,
        "spec": pair.spec,
        "task": pair.task,
        "settings": pair.settings,
    }
    started_ns = perf_counter_ns()
    try:
        record.update(_replay_pair(pair))
        record["status"] = STATUS_OK
    except Exception as err:
        from hipmem._core.errors import HipmemError

        # One line in the results, never a traceback in the worker's log: a bug (anything
        # but a HipmemError) is named as one, and the sweep goes on.
        reason = str(err) if isinstance(err, HipmemError) else (
            f"internal error: {type(err).__name__}: {err}")  # fmt: skip
        record.update(status=STATUS_FAILED, reason=one_line(reason))
    record["task_wall_ns"] = perf_counter_ns() - started_ns
    record.setdefault("where", where_am_i(pair.options.backend))
    return record


def one_line(reason: str) -> str:
    """A failure's reason as a record holds it: one line, at most 2,000 characters."""
    return " ".join(reason.split())[: min(2000, TEXT_CHARS)]


# The last log this worker loaded, with its program: the next pair is often the same log
# through another resource. One log at a time, so a worker's memory stays one log's.
_last_loaded: tuple[tuple[str, str], AllocationLog, ReplayProgram] | None = None


def _loaded(pair: PairTask) -> tuple[AllocationLog, ReplayProgram]:
    from ..engine.program import build_program
    from ..logs.loader import load_log

    global _last_loaded
    key = (pair.log.path, pair.log_sha256)
    last = _last_loaded
    if last is not None and last[0] == key:
        return last[1], last[2]
    _last_loaded = None  # let the previous log go before the next one is read
    with _log_file(pair.log) as path:
        sha256, _ = hash_log(LogRef(str(path)))
        if sha256 != pair.log_sha256:
            raise ReplayError(f"{pair.log.path}: the file changed during the sweep")
        log = load_log(path)
    if pair.log.content is not None:  # name the log as the user did, not the worker's copy
        log.rename_file(str(path), pair.log.path)
    program = build_program(log)
    _last_loaded = (key, log, program)
    return log, program


def _replay_pair(pair: PairTask) -> dict[str, Any]:
    from ..capacity.search import find_capacity
    from ..engine.resources import parse_spec
    from ..engine.run import replay_log
    from ..logs.events import ALLOCATE_FAILURE

    log, program = _loaded(pair)
    spec = parse_spec(pair.spec)
    options = dataclasses.replace(pair.options, plot_samples=0)
    report = replay_log(log, spec, options, program=program)
    first = report.failures[0] if report.failures else None
    figures: dict[str, Any] = {
        "where": where_am_i(report.backend),
        "events": report.log_events,
        "wall_ns": report.wall_ns,
        "events_per_s": round(report.events_per_s, 1),
        "outcome": report.outcome,
        "failure_count": report.failure_count,
        "logged_failure_count": int((log.events["action"] == ALLOCATE_FAILURE).sum()),
        "first_failure": None
        if first is None
        else {**first.where.as_dict(), "size_bytes": first.size_bytes},
        "peak_requested_bytes": report.peak_requested_bytes,
        "peak_reserved_bytes": report.peak_reserved_bytes,
        "fragmentation": None if report.fragmentation is None else round(report.fragmentation, 4),
        "unreturned_bytes": report.unreturned_bytes,
    }
    if pair.task == TASK_CAPACITY:
        found = find_capacity(
            log, spec, pair.options, program=program, confirm_runs=pair.confirm_runs
        )
        figures.update(
            capacity_bytes=found.capacity_bytes,
            sized_option=found.sized_option,
            sized_spec=found.sized_spec,
            probes=len(found.probes),
        )
    return figures


@contextmanager
def _log_file(log: LogRef) -> Iterator[Path]:
    """The log's path on this worker: the shared path, or a private copy of sent bytes."""
    if log.content is None:
        yield Path(log.path)
        return
    with tempfile.TemporaryDirectory(prefix="hipmem-fleet-") as folder:
        # The same name: the loader recognises gzip and snapshots by their content; the
        # name only names the sources.
        path = Path(folder) / Path(log.path).name
        path.write_bytes(log.content)
        yield path
