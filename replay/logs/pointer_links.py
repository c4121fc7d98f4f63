"""Which rows of a log meet at one pointer, in memory near one column: a stable sort of the
pointer column, then each row's neighbours in that order, a block of rows at a time.

A row's effect depends only on the row before it at its pointer (replay.logs.analysis states
the rules); pandas' `factorize` and `groupby().shift` found those rows in about six int64
columns' worth of memory at their peak (1.04 GiB for 20 M rows). A stable sort keeps the rows
of one pointer in log order, so the row before a row at its pointer is its neighbour in the
sorted order when the two pointers are equal. Row numbers are int32 while the log has fewer
than 2**31 rows (every row number fits), else int64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .events import ALLOCATE, ALLOCATE_FAILURE

#: Rows per block of the passes over whole columns: each block's temporaries are a few MB.
BLOCK_ROWS = 1 << 20

RowArray = npt.NDArray[np.signedinteger]
BoolArray = npt.NDArray[np.bool_]


def row_dtype(rows: int) -> type[np.signedinteger]:
    """The narrowest signed type that holds every row number of a log of `rows` rows, and -1."""
    return np.int32 if rows < (1 << 31) else np.int64


@dataclass
class PointerLinks:
    """For each row, the allocate it meets at its pointer, and whether a row follows there."""

    prev_alloc: RowArray  # row of the live allocation a row meets at its pointer, or -1
    has_next: BoolArray  # a later row (not a failure) touches the same pointer


def pointer_links(
    action: np.ndarray, pointer: np.ndarray, *, want_next: bool = True
) -> PointerLinks:
    """Link the rows at each pointer in log order; allocate failures touch no pointer.

    `prev_alloc[r]` is the row before r at its pointer when that row is an allocate (the
    pointer is then live with its size), else -1. `has_next` is left empty (length 0) when
    not `want_next`."""
    n = len(pointer)
    dtype = row_dtype(n)
    order = _sorted_rows(action, pointer, dtype)
    prev = np.full(n, -1, dtype)
    has_next = np.zeros(n if want_next else 0, np.bool_)
    for start in range(0, len(order), BLOCK_ROWS):
        # Pairs of neighbours (order[i], order[i + 1]) for i in [start - 1, end - 1): each pair
        # once, the one across the block's start included.
        rows = order[max(start - 1, 0) : start + BLOCK_ROWS]
        at = pointer[rows]
        same = at[1:] == at[:-1]
        earlier = rows[:-1][same]
        prev[rows[1:][same]] = earlier
        if want_next:
            has_next[earlier] = True
    del order
    _keep_allocations(prev, action)
    return PointerLinks(prev, has_next)


def _sorted_rows(
    action: np.ndarray, pointer: np.ndarray, dtype: type[np.signedinteger]
) -> RowArray:
    """The rows that touch a pointer, ordered by pointer, in log order within one pointer."""
    order = np.argsort(pointer, kind="stable").astype(dtype, copy=False)
    if not bool((action == ALLOCATE_FAILURE).any()):
        return order
    kept = 0  # failures dropped in place: `kept` never passes the block being read
    for start in range(0, len(order), BLOCK_ROWS):
        rows = order[start : start + BLOCK_ROWS]
        rows = rows[action[rows] != ALLOCATE_FAILURE]  # a copy: safe to write back
        order[kept : kept + len(rows)] = rows
        kept += len(rows)
    return order[:kept]


def _keep_allocations(prev: RowArray, action: np.ndarray) -> None:
    """`prev` becomes -1 where the row before is not an allocate (the pointer is not live)."""
    for start in range(0, len(prev), BLOCK_ROWS):
        block = prev[start : start + BLOCK_ROWS]  # a view: written in place
        linked = np.flatnonzero(block >= 0)
        dead = linked[action[block[linked]] != ALLOCATE]
        block[dead] = -1
