"""The work a fleet sweep has still to hand out, grouped by log, with log affinity.

Loading a log on a worker costs about a second for 1.5 M events (SHA-256 check, parsing,
building the replay program), and a worker keeps the last log it loaded
(replay/fleet/pair.py). So when a worker has room for one more task it gets, in this order:

1. the next pair of the log it was last given (loaded already, or about to be);
2. the first pair of a log nobody has started (a load, but one nobody else makes);
3. else a pair of the log another worker is on with the most pairs left: a second load of
   that log, but no worker idles while work remains (at the end, balance beats affinity).

With one item per "log" (the hashing phase), this is a plain first-in first-out queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class WorkQueue(Generic[Item]):
    """Items still to run, by log, and the log each worker was last given."""

    def __init__(self, items: Iterable[Item], log_of: Callable[[Item], Hashable]) -> None:
        self._left: dict[Hashable, deque[Item]] = {}
        for item in items:
            self._left.setdefault(log_of(item), deque()).append(item)
        self._unstarted: deque[Hashable] = deque(self._left)  # in the order given
        self._on: dict[str, Hashable] = {}  # worker address -> the log it was last given
        self._count = sum(len(items) for items in self._left.values())

    def __len__(self) -> int:
        return self._count

    def take(self, worker: str | None) -> Item | None:
        """The next item for `worker` (None: for whichever worker is free), or None when
        nothing is left."""
        log = self._choose(worker)
        if log is None:
            return None
        if worker is not None:
            self._on[worker] = log
        items = self._left[log]
        item = items.popleft()
        if not items:
            del self._left[log]
        self._count -= 1
        return item

    def _choose(self, worker: str | None) -> Hashable | None:
        mine = self._on.get(worker) if worker is not None else None
        if mine is not None and mine in self._left:
            return mine
        if self._unstarted:
            return self._unstarted.popleft()
        if self._left:  # steal: the log with the most pairs left
            return max(self._left, key=lambda log: len(self._left[log]))
        return None
