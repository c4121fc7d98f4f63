"""A fleet sweep: every (log, resource) pair as a Dask task, results as they come.

The client only names logs (paths, or with `send_logs` their bytes, read one task at a time)
and collects small records; workers hash and replay (replay/fleet/pair.py). Steps:

1. every log is hashed on a worker (SHA-256 of its bytes): the key of its pairs;
2. pairs already `ok` in the results file are skipped (a resumed sweep starts where the last
   one stopped);
3. the others are submitted, at most a few per worker at a time so the client holds little
   whatever the fleet's size, and each finished pair is appended to the results file at once;
4. with log affinity (replay/fleet/queue.py): loading a log of 1.5 M events costs a worker
   about a second, and a worker keeps the last log it loaded, so the client gives each worker
   a log of its own and, as a slot frees on a worker, the next pair of that worker's log,
   else a log nobody has started, else (at the end) a pair of the log another worker is on,
   so that no worker idles while work remains. Each task asks for its worker loosely
   (`allow_other_workers`): a worker gone by then does not strand it. Workers are asked of
   the scheduler as the sweep goes, so a worker that joins (or restarts) gets work too;
5. a pair whose worker died (a GPU fault, a killed process) is submitted again, to whichever
   worker is free, up to `retries` times; then it is recorded as failed with the reason,
   and the sweep goes on.

The worker death is seen through Dask's `KilledWorker`. On a local cluster the scheduler is
told to allow no failure of its own (`distributed.scheduler.allowed-failures: 0`), so every
death reaches this loop and counts against `retries`; an external scheduler first retries on
its own (its `allowed-failures`, 3 by default), and this loop then counts its `KilledWorker`
as one attempt.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.progress import ProgressCallback

from ..engine.options import ReplayOptions
from ..engine.resources import ResourceSpec
from ..errors import ReplayError, ReplayUsageError
from ..logs.log_files import LogFileNotFoundError
from .pair import LogRef, PairTask, hash_log, run_pair
from .queue import WorkQueue
from .results import (
    STATUS_FAILED,
    STATUS_OK,
    TASK_CAPACITY,
    TASK_REPLAY,
    PairKey,
    ResultsFile,
)

# What a folder given as a log holds that hipmem reads: RMM CSVs and PyTorch snapshots.
LOG_SUFFIXES = (".csv", ".csv.gz", ".pickle", ".pickle.gz", ".pkl", ".pkl.gz")
IN_FLIGHT_PER_WORKER = 2  # pairs queued per worker: enough to keep it busy, no more
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
    confirm_runs: int = 2
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


def find_fleet_logs(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Each file as given; each folder's logs (by suffix, in every subfolder), sorted."""
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
        elif path.is_file():
            found.append(path)
        elif path.exists():
            raise LogFileNotFoundError(f"{given}: not a regular file or a folder")
        else:
            raise LogFileNotFoundError(f"log file '{given}' does not exist")
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
    hashes, unreadable = _hash_logs(client, refs, request, progress)
    done = results.read() if results is not None else {}
    records: dict[tuple[int, int], dict[str, Any]] = {}
    todo: list[tuple[int, int]] = []
    for i, ref in enumerate(refs):
        for j, spec in enumerate(request.specs):
            if i in unreadable:  # the workers could not read the log at all
                records[i, j] = _failed(request, ref, "", spec, unreadable[i], 1)
                continue
            key = PairKey(hashes[i], spec.label, request.task, request.settings)
            previous = _finished(done, key)
            if previous is not None:
                records[i, j] = {**previous, "log": ref.path}
            else:
                todo.append((i, j))
    skipped = len(records)
    total = len(refs) * len(request.specs)
    tracker = _Tracker(total, skipped, progress)

    def make(index: tuple[int, int]) -> PairTask:
        i, j = index
        return PairTask(
            log=_with_content(refs[i], request.send_logs),
            log_sha256=hashes[i],
            spec=request.specs[j].label,
            task=request.task,
            settings=request.settings,
            options=request.options,
            confirm_runs=request.confirm_runs,
        )

    def finished(index: tuple[int, int], record: dict[str, Any]) -> None:
        if results is not None:
            results.append(record)
        records[index] = record
        tracker.pair_done(record)

    def gave_up(index: tuple[int, int], reason: str, attempts: int) -> dict[str, Any]:
        i, j = index
        return _failed(request, refs[i], hashes[i], request.specs[j], reason, attempts)

    by_log = WorkQueue(todo, log_of=lambda pair: pair[0])
    _submit_all(client, by_log, make, run_pair, finished, gave_up, request.retries)
    ordered = [records[i, j] for i in range(len(refs)) for j in range(len(request.specs))]
    return FleetRun(ordered, skipped, len(todo), workers)


def _workers(client: Any, wait_s: float = 60) -> int:
    """How many workers the cluster has, waiting a while for a first one (a worker restarting
    after a crash, or an external cluster whose workers are still starting)."""
    if not client.scheduler_info()["workers"]:
        try:
            client.wait_for_workers(1, timeout=wait_s)
        except TimeoutError:
            raise FleetError(f"the Dask cluster has had no worker for {wait_s:.0f} s") from None
    return len(client.scheduler_info()["workers"])


def _finished(done: dict[PairKey, dict[str, Any]], key: PairKey) -> dict[str, Any] | None:
    """The `ok` record of this key; a capacity search also answers a plain replay."""
    keys = [key]
    if key.task == TASK_REPLAY:
        capacity_settings = [k for k in done if k.task == TASK_CAPACITY]
        keys += [
            k
            for k in capacity_settings
            if (k.log_sha256, k.spec) == (key.log_sha256, key.spec)
            and k.settings.startswith(key.settings + ",")
        ]
    for candidate in keys:
        record = done.get(candidate)
        if record is not None and record.get("status") == STATUS_OK:
            return record
    return None


def _with_content(ref: LogRef, send: bool) -> LogRef:
    # Read only when the task is submitted: at most a few logs are in the client at a time.
    return LogRef(ref.path, Path(ref.path).read_bytes()) if send else ref


def _failed(
    request: FleetRequest, ref: LogRef, sha256: str, spec: ResourceSpec, reason: str, attempts: int
) -> dict[str, Any]:
    from .results import RESULTS_VERSION

    return {
        "version": RESULTS_VERSION,
        "log": ref.path,
        "log_sha256": sha256,
        "spec": spec.label,
        "task": request.task,
        "settings": request.settings,
        "status": STATUS_FAILED,
        "reason": reason,
        "attempts": attempts,
    }


def _hash_logs(
    client: Any,
    refs: list[LogRef],
    request: FleetRequest,
    progress: ProgressCallback | None,
) -> tuple[list[str], dict[int, str]]:
    """Each log's SHA-256, computed on the workers; and why, for the logs they cannot read."""
    hashes = [""] * len(refs)
    unreadable: dict[int, str] = {}
    count = [0]
    if progress:
        progress(0, len(refs), "logs hashed")

    def finished(index: int, outcome: str | dict[str, str]) -> None:
        if isinstance(outcome, dict):
            unreadable[index] = outcome["reason"]
        else:
            hashes[index] = outcome
        count[0] += 1
        if progress:
            progress(count[0], len(refs), "logs hashed")

    def gave_up(index: int, reason: str, attempts: int) -> dict[str, str]:
        return {"reason": reason}

    _submit_all(
        client,
        WorkQueue(range(len(refs)), log_of=lambda i: i),  # one item per log: first in, first out
        lambda i: _with_content(refs[i], request.send_logs),
        _hash_or_reason,
        finished,
        gave_up,
        request.retries,
    )
    return hashes, unreadable


def _hash_or_reason(ref: LogRef) -> str | dict[str, str]:
    try:
        return hash_log(ref)[0]
    except OSError as err:
        return {"reason": f"{ref.path}: cannot be read on the worker: {err.strerror or err}"}


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


def _submit_all(
    client: Any,
    queue: WorkQueue[Any],
    make: Callable[[Any], Any],
    function: Callable[[Any], Any],
    finished: Callable[[Any, Any], None],
    gave_up: Callable[[Any, str, int], Any],
    retries: int,
) -> None:
    """Run `function(make(item))` for every item of `queue`, results as they come: each live
    worker holds IN_FLIGHT_PER_WORKER tasks, the next one for a worker chosen by `queue` (log
    affinity); a task whose worker died is retried, on any worker, up to `retries` times."""
    from distributed import as_completed

    running = as_completed()
    asked: dict[str, tuple[Any, str | None]] = {}  # future key -> (item, the worker asked)
    attempts: dict[Any, int] = {}
    live = _LiveWorkers(client)

    def submit(item: Any, worker: str | None) -> None:
        attempts[item] = attempts.get(item, 0) + 1
        # Loose: should `worker` be gone by the time it is scheduled, any other runs it.
        where = {"workers": [worker], "allow_other_workers": True} if worker else {}
        future = client.submit(function, make(item), pure=False, retries=0, **where)
        asked[future.key] = (item, worker)
        running.add(future)

    def top_up(fresh: bool) -> None:
        busy = Counter(worker for _, worker in asked.values())
        for worker in _slots(live.addresses(fresh), busy):
            item = queue.take(worker)
            if item is None:
                return
            submit(item, worker)
        if not asked and len(queue):  # no worker known just now: one task for whoever comes
            submit(queue.take(None), None)

    top_up(fresh=False)
    for future in running:
        item, _ = asked.pop(future.key)
        nothing = future.status != "finished"  # a worker may have died: ask for workers again
        if _collect(future, item, attempts[item], retries, finished, gave_up):
            submit(item, None)  # to whichever worker is free: the dead one is gone
        future.release()
        top_up(fresh=nothing)


def _slots(workers: list[str], busy: Counter[str | None]) -> Iterator[str]:
    """Each worker once per free slot, a round at a time, so that at the start each worker is
    given a log of its own before any is given a second task."""
    for round_ in range(IN_FLIGHT_PER_WORKER):
        yield from (w for w in workers if busy[w] <= round_)


def _collect(
    future: Any,
    item: Any,
    attempts: int,
    retries: int,
    finished: Callable[[Any, Any], None],
    gave_up: Callable[[Any, str, int], Any],
) -> bool:
    """Hand a done future's outcome to `finished`; True (and nothing handed) when its worker
    died and the item has attempts left: to be submitted again."""
    if future.status == "finished":
        outcome = future.result()
        if isinstance(outcome, dict) and "status" in outcome:
            outcome["attempts"] = attempts
        finished(item, outcome)
        return False
    reason, died = _why_nothing(future)
    if died and attempts <= retries:
        return True
    finished(item, gave_up(item, reason, attempts))
    return False


class _LiveWorkers:
    """The cluster's worker addresses. Asking the scheduler is a round trip, so at most once
    a second, or at once after a worker died (a restarted one comes back at a new address)."""

    REFRESH_S = 1.0

    def __init__(self, client: Any) -> None:
        self._client = client
        self._addresses: list[str] = []
        self._asked_at = -self.REFRESH_S

    def addresses(self, fresh: bool) -> list[str]:
        if fresh or time.monotonic() - self._asked_at >= self.REFRESH_S:
            self._addresses = sorted(self._client.scheduler_info()["workers"])
            self._asked_at = time.monotonic()
        return self._addresses


def _why_nothing(future: Any) -> tuple[str, bool]:
    """(reason, whether the worker died) for a task that returned nothing."""
    from distributed import KilledWorker

    if future.status == "cancelled":  # the scheduler lost it (restarted, or lost its worker)
        return "the cluster cancelled it", True
    error = future.exception()
    if isinstance(error, KilledWorker):
        return f"its worker died while running it ({error})", True
    # A bug, not a property of the log: reported with the pair, and the sweep goes on.
    return f"internal error: {type(error).__name__}: {error}", False
