"""Per-owner figures of a log (the owner is the thread or stream that allocated), in memory
that stays near the size of the columns: counting by `np.bincount` over the sorted distinct
owners and a per-owner running sum over a radix sort, where pandas' `crosstab` and `groupby`
built several frames of the whole log (2 GB for 20 M rows; replay.logs.analysis states the
rules). `owner_figures` (what `log inspect` reports) goes a block of rows at a time and keeps
only a running total and peak per owner; `owner_live_bytes` (what a plot draws) keeps every
change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from .events import ALLOCATE, ALLOCATE_FAILURE, FREE
from .pointer_links import BLOCK_ROWS, RowArray

Int64Array = npt.NDArray[np.int64]


@dataclass
class OwnerFigures:
    """The distinct owners, ascending, and for each its rows per action and peak live bytes."""

    keys: np.ndarray
    action_rows: Int64Array  # (owners, 3): rows of ALLOCATE, FREE and ALLOCATE_FAILURE
    peak_live_bytes: Int64Array  # the most its allocations held at once (0 if none)


def owner_figures(
    owner: np.ndarray, action: np.ndarray, size: Int64Array, prev_alloc: RowArray
) -> OwnerFigures:
    """Each owner's rows per action and its peak live bytes (the maximum of the running sums
    `owner_live_bytes` gives, and 0), a block of rows at a time."""
    keys = np.sort(pd.unique(owner))
    counts = np.zeros(3 * len(keys), np.int64)
    running = np.zeros(len(keys), np.int64)  # each owner's live bytes so far
    peaks = np.zeros(len(keys), np.int64)
    for start in range(0, len(owner), BLOCK_ROWS):
        block = slice(start, start + BLOCK_ROWS)
        codes = np.searchsorted(keys, owner[block])
        counts += np.bincount(codes * 3 + action[block], minlength=3 * len(keys))
        rows, owners, deltas = _changes(owner, action, size, prev_alloc, block)
        if len(rows):
            _running_peaks(np.searchsorted(keys, owners), deltas, running, peaks)
    order = [ALLOCATE, FREE, ALLOCATE_FAILURE]
    return OwnerFigures(np.asarray(keys), counts.reshape(-1, 3)[:, order], peaks)


def _running_peaks(
    codes: np.ndarray, deltas: Int64Array, running: Int64Array, peaks: Int64Array
) -> None:
    """Add one block's changes (in log order) to each owner's running sum and peak."""
    narrow = codes.astype(np.int16) if len(running) < (1 << 15) else codes
    order = np.argsort(narrow, kind="stable")  # each owner's changes stay in log order
    del narrow
    codes, deltas = codes[order], deltas[order]
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    owners = codes[starts]
    sums = np.cumsum(deltas)
    # Within a run of one owner: its running sum so far, plus the sum its earlier blocks left.
    before = sums[starts] - deltas[starts] - running[owners]
    sums -= np.repeat(before, np.diff(np.append(starts, len(sums))))
    np.maximum.at(peaks, owners, np.maximum.reduceat(sums, starts))
    running[owners] = sums[np.append(starts[1:], len(sums)) - 1]


def owner_live_bytes(
    owner: np.ndarray, action: np.ndarray, size: Int64Array, prev_alloc: RowArray
) -> dict[int, tuple[Int64Array, Int64Array]]:
    """For each owner, the rows where its live bytes changed and its live bytes after each.

    An allocate credits its own owner; a free of a live pointer debits the allocating row's
    owner; an allocate that replaces a live block first debits the old block's owner."""
    if len(owner) and bool((owner == owner[0]).all()):  # one thread or stream: no grouping
        rows, live = _changes(owner[:1], action, size, prev_alloc, owned=False)[::2]
        return {int(owner[0]): (rows, np.cumsum(live, out=live))} if len(rows) else {}
    rows, owners, deltas = _changes(owner, action, size, prev_alloc)
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
    owner: np.ndarray,
    action: np.ndarray,
    size: Int64Array,
    prev_alloc: RowArray,
    block: slice = slice(0, None),
    *,
    owned: bool = True,
) -> tuple[Int64Array, np.ndarray, Int64Array]:
    """The rows of `block` that change some owner's live bytes (a replacing allocate twice),
    whose bytes they change (only when `owned`: else `owner` is left as given) and by how
    much."""
    start = block.start or 0
    kinds, prev = action[block], prev_alloc[block]
    is_alloc = kinds == ALLOCATE
    has_prev = prev >= 0
    rows = np.flatnonzero(is_alloc | ((kinds == FREE) & has_prev))
    mine = is_alloc[rows]
    source = prev[rows].astype(np.int64)  # whose bytes change: the allocating row's
    rows += start
    np.copyto(source, rows, where=mine)
    owners = owner[source] if owned else owner
    deltas = size[source]
    np.negative(deltas, out=deltas, where=~mine)
    del mine, source
    # An allocate at a live pointer (rare: an anomaly) first debits the replaced block.
    extra = np.flatnonzero(is_alloc & has_prev)
    if len(extra):
        old = prev[extra]
        extra += start
        at = np.searchsorted(rows, extra)  # before the row's own change
        rows = np.insert(rows, at, extra)
        if owned:
            owners = np.insert(owners, at, owner[old])
        deltas = np.insert(deltas, at, -size[old])
    return rows, owners, deltas
