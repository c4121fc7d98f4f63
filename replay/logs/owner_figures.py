"""Per-owner figures of a log (the owner is the thread or stream that allocated), in memory
that stays near the size of the columns: counting by `np.bincount` over factorized keys and
a per-owner running sum over a radix sort, where pandas' `crosstab` and `groupby` built
several frames of the whole log (2 GB for 20 M rows; replay.logs.analysis states the rules).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from .events import ALLOCATE, ALLOCATE_FAILURE, FREE

Int64Array = npt.NDArray[np.int64]


def action_counts(owner: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, Int64Array]:
    """The distinct owners, ascending, and for each its rows of ALLOCATE, FREE and
    ALLOCATE_FAILURE (an (owners, 3) array)."""
    codes, keys = pd.factorize(owner, sort=True)
    codes *= 3  # in place: one array of the log's length, not three
    codes += action
    counts = np.bincount(codes, minlength=3 * len(keys)).reshape(-1, 3)
    order = [ALLOCATE, FREE, ALLOCATE_FAILURE]
    return np.asarray(keys), counts[:, order].astype(np.int64)


def owner_live_bytes(
    owner: np.ndarray, action: np.ndarray, size: Int64Array, prev_alloc: Int64Array
) -> dict[int, tuple[Int64Array, Int64Array]]:
    """For each owner, the rows where its live bytes changed and its live bytes after each.

    An allocate credits its own owner; a free of a live pointer debits the allocating row's
    owner; an allocate that replaces a live block first debits the old block's owner."""
    if len(owner) and bool((owner == owner[0]).all()):  # one thread or stream: no grouping
        rows, live = _changes(owner[:1], action, size, prev_alloc, owned=False)[::2]
        return {int(owner[0]): (rows, np.cumsum(live, out=live))} if len(rows) else {}
    rows, owners, deltas = _changes(owner, action, size, prev_alloc, owned=True)
    codes, keys = pd.factorize(owners, sort=True)
    del owners
    result: dict[int, tuple[Int64Array, Int64Array]] = {}
    # A stable sort keeps each owner's rows in log order; 16-bit codes sort by radix.
    narrow = codes.astype(np.int16) if len(keys) < (1 << 15) else codes
    order = np.argsort(narrow, kind="stable")
    del narrow
    bounds = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=len(keys)))))
    del codes
    for k, key in enumerate(keys):
        positions = order[bounds[k] : bounds[k + 1]]
        result[int(key)] = (rows[positions], np.cumsum(deltas[positions]))
    return result


def _changes(
    owner: np.ndarray, action: np.ndarray, size: Int64Array, prev_alloc: Int64Array, *, owned: bool
) -> tuple[Int64Array, np.ndarray, Int64Array]:
    """The rows that change some owner's live bytes (a replacing allocate twice), whose
    bytes they change (only when `owned`: else `owner` is left as given) and by how much."""
    is_alloc = action == ALLOCATE
    has_prev = prev_alloc >= 0
    rows = np.flatnonzero(is_alloc | ((action == FREE) & has_prev))
    mine = is_alloc[rows]
    source = prev_alloc[rows]  # whose bytes change: the allocating row's
    np.copyto(source, rows, where=mine)
    owners = owner[source] if owned else owner
    deltas = size[source]
    np.negative(deltas, out=deltas, where=~mine)
    del mine, source
    # An allocate at a live pointer (rare: an anomaly) first debits the replaced block.
    extra_rows = np.flatnonzero(is_alloc & has_prev)
    if len(extra_rows):
        at = np.searchsorted(rows, extra_rows)  # before the row's own change
        old = prev_alloc[extra_rows]
        rows = np.insert(rows, at, extra_rows)
        if owned:
            owners = np.insert(owners, at, owner[old])
        deltas = np.insert(deltas, at, -size[old])
    return rows, owners, deltas
