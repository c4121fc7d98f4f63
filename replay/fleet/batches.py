"""Work handed to the workers in batches: several small logs to a task.

A Dask task has a cost of its own besides its work: the client, the scheduler and the worker
each handle it, a round trip or two. Measured on 2 CPU workers (a loaded 2-core machine),
a task cost 80 ms whatever it did, where hashing a small log takes 0.3 ms and replaying a pair
of a 2-event log 33 ms: a sweep of 10,000 small logs spent 800 s hashing, nearly all of it on
the tasks themselves. So small logs go several to a task; a large log (whose loading is worth
keeping for its next pair, `queue.py`) still goes one pair to a task, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Unit = TypeVar("Unit")

HASH_BATCH_LOGS = 64  # logs hashed by one task...
HASH_BATCH_BYTES = 256 << 20  # ...or this many of their bytes (a second or so of SHA-256)
SENT_BATCH_BYTES = 64 << 20  # with --send-logs: the bytes a task carries from the client
PAIR_BATCH_PAIRS = 32  # pairs replayed by one task...
PAIR_BATCH_BYTES = 4 << 20  # ...of logs this large in all (a pair of a 4 MiB log: ~0.1 s)
BATCHES_PER_WORKER = 4  # at least: a small sweep is spread over every worker all the same


def batch_units(units: int, workers: int, most: int) -> int:
    """Units to a batch: `most`, or fewer where that would leave a worker without work."""
    return max(1, min(most, units // (max(1, workers) * BATCHES_PER_WORKER)))


def batched(
    units: Sequence[Unit], bytes_of: Callable[[Unit], int], most: int, most_bytes: int
) -> list[tuple[Unit, ...]]:
    """`units` in order, cut into runs of at most `most` units and `most_bytes` bytes (a unit
    larger than that is a batch of its own)."""
    batches: list[tuple[Unit, ...]] = []
    batch: list[Unit] = []
    batch_bytes = 0
    for unit in units:
        size = bytes_of(unit)
        if batch and (len(batch) == most or batch_bytes + size > most_bytes):
            batches.append(tuple(batch))
            batch, batch_bytes = [], 0
        batch.append(unit)
        batch_bytes += size
    if batch:
        batches.append(tuple(batch))
    return batches
