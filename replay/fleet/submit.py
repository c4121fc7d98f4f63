"""Handing batches to the cluster's workers and collecting what comes back, as it comes.

Each live worker holds IN_FLIGHT_PER_WORKER tasks; the next one for a worker is chosen by the
work queue (log affinity, `queue.py`). Each task asks for its worker loosely
(`allow_other_workers`): a worker gone by then does not strand it. Workers are asked of the
scheduler as the sweep goes, so a worker that joins (or restarts) gets work too.

A task whose worker died (a GPU fault, a killed process) is submitted again, to whichever
worker is free, up to `retries` times; a batch of several units is then submitted one unit to
a task, so that a log that kills its worker takes down only its own pairs. Past the retries a
unit is given up on with the reason, and the sweep goes on.

The worker death is seen through Dask's `KilledWorker`. On a local cluster the scheduler is
told to allow no failure of its own (`distributed.scheduler.allowed-failures: 0`), so every
death reaches this loop and counts against `retries`; an external scheduler first retries on
its own (its `allowed-failures`, 3 by default), and this loop then counts its `KilledWorker`
as one attempt.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from .queue import WorkQueue

IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker: enough to keep it busy, no more

Batch = tuple[Any, ...]
Finished = Callable[[list[tuple[Any, Any]]], None]  # (unit, outcome) of a batch, in order
GaveUp = Callable[[Any, str, int], Any]  # (unit, reason, attempts) -> its outcome


def submit_all(
    client: Any,
    queue: WorkQueue[Batch],
    make: Callable[[Batch], Any],
    function: Callable[[Any], list[Any]],
    finished: Finished,
    gave_up: GaveUp,
    retries: int,
) -> None:
    """Run `function(make(batch))` (a list, one outcome per unit) for every batch of `queue`,
    and hand each batch's outcomes to `finished` as it comes."""
    from distributed import as_completed

    running = as_completed()
    asked: dict[str, tuple[Batch, str | None]] = {}  # future key -> (batch, the worker asked)
    attempts: dict[Batch, int] = {}
    live = _LiveWorkers(client)

    def submit(batch: Batch, worker: str | None) -> None:
        attempts[batch] = attempts.get(batch, 0) + 1
        # Loose: should `worker` be gone by the time it is scheduled, any other runs it.
        where = {"workers": [worker], "allow_other_workers": True} if worker else {}
        future = client.submit(function, make(batch), pure=False, retries=0, **where)
        asked[future.key] = (batch, worker)
        running.add(future)

    def top_up(fresh: bool) -> None:
        busy = Counter(worker for _, worker in asked.values())
        for worker in _slots(live.addresses(fresh), busy):
            batch = queue.take(worker)
            if batch is None:
                return
            submit(batch, worker)
        anyone = queue.take(None) if not asked else None
        if anyone is not None:  # no worker known just now: one task for whoever comes
            submit(anyone, None)

    def again(batch: Batch) -> None:
        """To whichever worker is free (the dead one is gone); a batch one unit at a time."""
        tries = attempts.pop(batch)
        for part in [(unit,) for unit in batch]:  # a batch of one unit: itself
            attempts[part] = tries
            submit(part, None)

    top_up(fresh=False)
    for future in running:
        batch, _ = asked.pop(future.key)
        nothing = future.status != "finished"  # a worker may have died: ask for workers again
        if _collect(future, batch, attempts[batch], retries, finished, gave_up):
            again(batch)
        future.release()
        top_up(fresh=nothing)


def _slots(workers: list[str], busy: Counter[str | None]) -> Iterator[str]:
    """Each worker once per free slot, a round at a time, so that at the start each worker is
    given a log of its own before any is given a second task."""
    for round_ in range(IN_FLIGHT_PER_WORKER):
        yield from (w for w in workers if busy[w] <= round_)


def _collect(
    future: Any, batch: Batch, attempts: int, retries: int, finished: Finished, gave_up: GaveUp
) -> bool:
    """Hand a done future's outcomes to `finished`; True (and nothing handed) when its worker
    died and the batch has attempts left: to be submitted again."""
    if future.status == "finished":
        outcomes = future.result()
        for outcome in outcomes:
            if isinstance(outcome, dict) and "status" in outcome:
                outcome["attempts"] = attempts
        finished(list(zip(batch, outcomes, strict=True)))
        return False
    reason, died = _why_nothing(future)
    if died and attempts <= retries:
        return True
    finished([(unit, gave_up(unit, reason, attempts)) for unit in batch])
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
