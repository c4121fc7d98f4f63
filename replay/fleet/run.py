"""A fleet sweep: every (log, resource) pair replayed on a Dask cluster, results as they come.

The client only names logs (paths, or with `send_logs` their bytes, read one task at a time)
and collects small records; workers hash and replay (replay/fleet/pair.py). Steps:

1. every log is hashed on a worker (SHA-256 of its bytes): the key of its pairs; small logs
   several to a task (batches.py);
2. pairs already `ok` in the results file are skipped (a resumed sweep starts where the last
   one stopped); every line of the file is checked first, and one that is not a record
   hipmem wrote is named and never used (results.py, resume.py);
3. the others are submitted (submit.py), at most a few tasks per worker at a time so the
   client holds little whatever the fleet's size, small logs' pairs several to a task, and
   each task's records are checked (records.py) and appended to the results file at once;
4. with log affinity (queue.py): loading a log of 1.5 M events costs a worker about a
   second, and a worker keeps the last log it loaded, so the client gives each worker a log
   of its own and, as a slot frees on a worker, the next pair of that worker's log, else a
   log nobody has started, else (at the end) a pair of the log another worker is on, so that
   no worker idles while work remains;
5. a task whose worker died (a GPU fault, a killed process) is submitted again, up to
   `retries` times (submit.py says how); then its pairs are recorded as failed with the
   reason, and the sweep goes on.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.progress import ProgressCallback
from hipmem._core.skipped_input import SkippedPlace

from ..capacity.confirmation import CONFIRM_RUNS
from ..engine.options import ReplayOptions
from ..engine.resources import ResourceSpec
from ..errors import ReplayError, ReplayUsageError
from ..logs.log_files import LogFileNotFoundError
from . import batches
from .pair import LogRef, PairTask, hash_logs, one_line, run_pairs
from .queue import WorkQueue
from .records import (
    RESULTS_VERSION,
    STATUS_FAILED,
    TASK_CAPACITY,
    TASK_REPLAY,
    BadRecord,
    check_record,
)
from .results import ResultsFile
from .resume import Resume
from .submit import submit_all

# What a folder given as a log holds that hipmem reads: RMM CSVs and PyTorch snapshots.
LOG_SUFFIXES = (".csv", ".csv.gz", ".pickle", ".pickle.gz", ".pkl", ".pkl.gz")
DEFAULT_RETRIES = 2


class FleetError(ReplayError):
    """The sweep itself cannot go on (no workers, a results file that cannot be written)."""


@dataclass(frozen=True)
class FleetRequest:
    """What to sweep and how."""

    logs: list[Path]
    specs: list[ResourceSpec]
    options: ReplayOptions = field(default_factory=ReplayOptions)
    find_capacity: bool = False
    confirm_runs: int = CONFIRM_RUNS
    retries: int = DEFAULT_RETRIES  # extra attempts for a pair whose worker died
    send_logs: bool = False  # send each log's bytes with its task, for workers that cannot see it

    @property
    def task(self) -> str:
        return TASK_CAPACITY if self.find_capacity else TASK_REPLAY

    @property
    def settings(self) -> str:
        """The replay settings that change a pair's figures: part of its key."""
        o = self.options
        text = f"backend={o.backend},threads={o.threads},streams={o.streams}"
        text += f",on_failure={o.on_failure}"
        if o.backend == "virtual" or o.device_name or o.device_memory_bytes or o.torch_version:
            device = o.virtual_device()  # what the virtual GPU's figures depend on
            text += f",device={device.name}:{device.memory_bytes},torch={o.torch_version or ''}"
        if o.rmm_version:  # (absent when not given: the keys of earlier results still match)
            text += f",rmm={o.rmm_version}"
        return text + (f",confirm_runs={self.confirm_runs}" if self.find_capacity else "")

    def check(self) -> None:
        self.options.check()
        if not self.logs:
            raise ReplayUsageError("no log files found", parameter="logs")
        if not self.specs:
            raise ReplayUsageError("at least one resource is needed", parameter="spec")
        if self.retries < 0:
            raise ReplayUsageError("must be 0 or more", parameter="retries", value=self.retries)
        if self.confirm_runs < 0:
            raise ReplayUsageError(
                "must be 0 or more", parameter="confirm_runs", value=self.confirm_runs
            )


@dataclass
class FleetRun:
    """What a sweep did: every record of this sweep's pairs (resumed ones included)."""

    records: list[dict[str, Any]]
    skipped_pairs: int  # already done in the results file
    replayed_pairs: int  # run in this sweep
    workers: int
    unused_lines: int = 0  # lines of the results file that could not be used (named below)
    unused_places: list[SkippedPlace] = field(default_factory=list)  # the first ones, and why


def check_fleet_paths(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Each path given names a file or a folder (before any folder is searched)."""
    for given in paths:
        path = Path(given)
        if path.exists() and not (path.is_dir() or path.is_file()):
            raise LogFileNotFoundError(f"{given}: not a regular file or a folder")
        if not path.exists():
            raise LogFileNotFoundError(f"log file '{given}' does not exist")


def find_fleet_logs(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Each file as given; each folder's logs (by suffix, in every subfolder), sorted."""
    check_fleet_paths(paths)
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = [p for p in sorted(path.rglob("*")) if p.is_file() and _is_log_name(p)]
            if not inside:
                raise LogFileNotFoundError(
                    f"{given}: a folder with no logs in it ({', '.join(LOG_SUFFIXES)})"
                )
            found.extend(inside)
        else:
            found.append(path)
    return list(dict.fromkeys(found))  # a log named twice is swept once


def _is_log_name(path: Path) -> bool:
    return not path.name.startswith(".") and path.name.lower().endswith(LOG_SUFFIXES)


def run_fleet(
    client: Any,
    request: FleetRequest,
    results: ResultsFile | None = None,
    progress: ProgressCallback | None = None,
) -> FleetRun:
    """Sweep every (log, spec) pair of `request` on the Dask `client`'s workers."""
    request.check()
    workers = _workers(client)
    refs = [LogRef(str(path)) for path in request.logs]
    sizes = [_size(path) for path in request.logs]
    hashes, unreadable = _hash_logs(client, refs, sizes, request, workers, progress)
    labels = [spec.label for spec in request.specs]
    resume = Resume([r.path for r in refs], hashes, labels, request.task, request.settings)
    if results is not None:
        resume.read(results)
    records: dict[tuple[int, int], dict[str, Any]] = {}
    todo: list[tuple[int, int]] = []
    for i, ref in enumerate(refs):
        for j, spec in enumerate(request.specs):
            if i in unreadable:  # the workers could not read the log at all
                records[i, j] = _failed(request, ref, "", spec, unreadable[i], 1)
                continue
            previous = resume.record(hashes[i], spec.label)
            if previous is not None:
                records[i, j] = {**previous, "log": ref.path}
            else:
                todo.append((i, j))
    unused = resume.skipped([(refs[i].path, labels[j]) for i, j in todo])
    skipped = len(records)
    tracker = _Tracker(len(refs) * len(request.specs), skipped, progress)

    def make(batch: tuple[tuple[int, int], ...]) -> list[PairTask]:
        return [
            PairTask(
                log=_with_content(refs[i], request.send_logs),
                log_sha256=hashes[i],
                spec=labels[j],
                task=request.task,
                settings=request.settings,
                options=request.options,
                confirm_runs=request.confirm_runs,
            )
            for i, j in batch
        ]

    def finished(done: list[tuple[tuple[int, int], dict[str, Any]]]) -> None:
        checked = [(at, _checked(record, request, refs, hashes, at)) for at, record in done]
        if results is not None:
            results.append(*(record for _, record in checked))
        for index, record in checked:
            records[index] = record
            tracker.pair_done(record)

    def gave_up(index: tuple[int, int], reason: str, attempts: int) -> dict[str, Any]:
        i, j = index
        return _failed(request, refs[i], hashes[i], request.specs[j], reason, attempts)

    most = batches.batch_units(len(todo), workers, batches.PAIR_BATCH_PAIRS)
    pair_batches = batches.batched(
        todo, lambda pair: sizes[pair[0]], most, batches.PAIR_BATCH_BYTES
    )
    by_log = WorkQueue(pair_batches, log_of=lambda batch: batch[0][0])
    submit_all(client, by_log, make, run_pairs, finished, gave_up, request.retries)
    ordered = [records[i, j] for i in range(len(refs)) for j in range(len(request.specs))]
    return FleetRun(ordered, skipped, len(todo), workers, unused.skipped, unused.places)


def _workers(client: Any, wait_s: float = 60) -> int:
    """How many workers the cluster has, waiting a while for a first one (a worker restarting
    after a crash, or an external cluster whose workers are still starting)."""
    if not client.scheduler_info()["workers"]:
        try:
            client.wait_for_workers(1, timeout=wait_s)
        except TimeoutError:
            raise FleetError(f"the Dask cluster has had no worker for {wait_s:.0f} s") from None
    return len(client.scheduler_info()["workers"])


def _size(path: Path) -> int:
    """The log's size as the client sees it (0 when it cannot: the workers will say why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _checked(
    record: dict[str, Any],
    request: FleetRequest,
    refs: list[LogRef],
    hashes: list[str],
    index: tuple[int, int],
) -> dict[str, Any]:
    """A worker's record as it may be summed: checked as a results line is; a record that is
    not (a worker of another hipmem, a bug) is a failed pair saying why."""
    try:
        return check_record(record)
    except BadRecord as err:
        i, j = index
        reason = f"the worker's record cannot be used: {err}"
        attempts = record.get("attempts") if isinstance(record, dict) else None
        tries = attempts if type(attempts) is int and attempts >= 1 else 1
        return _failed(request, refs[i], hashes[i], request.specs[j], reason, tries)


def _with_content(ref: LogRef, send: bool) -> LogRef:
    # Read only when the task is submitted: at most a few logs are in the client at a time.
    return LogRef(ref.path, Path(ref.path).read_bytes()) if send else ref


def _failed(
    request: FleetRequest, ref: LogRef, sha256: str, spec: ResourceSpec, reason: str, attempts: int
) -> dict[str, Any]:
    return {
        "version": RESULTS_VERSION,
        "log": ref.path,
        "log_sha256": sha256,
        "spec": spec.label,
        "task": request.task,
        "settings": request.settings,
        "status": STATUS_FAILED,
        "reason": one_line(reason),
        "attempts": attempts,
    }


def _hash_logs(
    client: Any,
    refs: list[LogRef],
    sizes: list[int],
    request: FleetRequest,
    workers: int,
    progress: ProgressCallback | None,
) -> tuple[list[str], dict[int, str]]:
    """Each log's SHA-256, computed on the workers; and why, for the logs they cannot read."""
    hashes = [""] * len(refs)
    unreadable: dict[int, str] = {}
    count = [0]
    if progress:
        progress(0, len(refs), "logs hashed")

    def finished(done: list[tuple[int, str | dict[str, str]]]) -> None:
        for index, outcome in done:
            if isinstance(outcome, dict):
                unreadable[index] = outcome["reason"]
            else:
                hashes[index] = outcome
        count[0] += len(done)
        if progress:
            progress(count[0], len(refs), "logs hashed")

    def gave_up(index: int, reason: str, attempts: int) -> dict[str, str]:
        return {"reason": reason}

    most_bytes = batches.SENT_BATCH_BYTES if request.send_logs else batches.HASH_BATCH_BYTES
    most = batches.batch_units(len(refs), workers, batches.HASH_BATCH_LOGS)
    log_batches = batches.batched(range(len(refs)), sizes.__getitem__, most, most_bytes)
    submit_all(
        client,
        WorkQueue(log_batches, log_of=lambda batch: batch[0]),  # first in, first out
        lambda batch: [_with_content(refs[i], request.send_logs) for i in batch],
        hash_logs,
        finished,
        gave_up,
        request.retries,
    )
    return hashes, unreadable


class _Tracker:
    """Pairs and events done, for the progress callback."""

    def __init__(self, total: int, skipped: int, progress: ProgressCallback | None) -> None:
        self.total, self.done, self.events = total, skipped, 0
        self.progress = progress
        self._report()

    def pair_done(self, record: dict[str, Any]) -> None:
        self.done += 1
        self.events += int(record.get("events") or 0)
        self._report()

    def _report(self) -> None:
        if self.progress:
            self.progress(self.done, self.total, f"pairs, {self.events:,} events replayed")
