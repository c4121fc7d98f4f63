"""The figures of `analyze` that look at every row, gathered a block of rows at a time.

Over whole columns, each mask, index and sum `analyze` needs was a temporary of the log's
length (20 M rows: 20 MB a mask, 160 MB an int64 column), a dozen of them alive together on
top of the columns; a block of `BLOCK_ROWS` keeps each a few MB, with what crosses a block's
edge carried (live bytes, the last time stamp, the largest allocations so far). The rules
are replay.logs.analysis'; the figures are the same integers the whole-column form gave.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .events import ALLOCATE, ALLOCATE_FAILURE, FREE
from .pointer_links import BLOCK_ROWS, BoolArray, RowArray

Int64Array = npt.NDArray[np.int64]

#: Power-of-two buckets: sizes are below 2**62 (the loader refuses larger sums).
BUCKETS = 64


def live_deltas(
    action: np.ndarray, size: Int64Array, prev: RowArray, all_sizes: Int64Array
) -> Int64Array:
    """How each row changes the live bytes: an allocate adds its size, an allocate or free
    that meets a live allocation takes that allocation's size away (failures change nothing;
    they meet no allocation)."""
    delta = np.where(action == ALLOCATE, size, 0).astype(np.int64, copy=False)
    met = np.flatnonzero(prev >= 0)
    delta[met] -= all_sizes[prev[met]]
    return delta


def live_blocks(
    action: np.ndarray, size: Int64Array, prev: RowArray
) -> Iterator[tuple[int, Int64Array]]:
    """The live bytes after each row, a block at a time: (first row, live bytes of the block)."""
    carried = 0
    for start in range(0, len(action), BLOCK_ROWS):
        end = start + BLOCK_ROWS
        live = np.cumsum(live_deltas(action[start:end], size[start:end], prev[start:end], size))
        live += carried
        carried = int(live[-1])
        yield start, live


class SizeBuckets:
    """Counts and exact int64 totals of sizes in power-of-two buckets, fed in blocks."""

    def __init__(self) -> None:
        self.counts = np.zeros(BUCKETS, np.int64)
        self.totals_bytes = np.zeros(BUCKETS, np.int64)

    def add(self, sizes_bytes: Int64Array) -> None:
        sizes = sizes_bytes[sizes_bytes > 0]
        if not len(sizes):
            return
        _, exponent = np.frexp(sizes.astype(np.float64))
        k = exponent.astype(np.int64) - 1
        # float64 rounding can lift a size just under 2^k above 53 bits into bucket k: fix it.
        k -= (np.left_shift(np.int64(1), k) > sizes).astype(np.int64)
        self.counts += np.bincount(k, minlength=BUCKETS)
        np.add.at(self.totals_bytes, k, sizes)


@dataclass
class RowFigures:
    """What `analyze` reports from every row; rows are positions in the events."""

    allocate_rows: int = 0
    free_rows: int = 0
    failure_rows: int = 0
    anomaly_counts: dict[str, int] = field(default_factory=dict)
    anomaly_rows: dict[str, list[int]] = field(default_factory=dict)  # the first few
    peak_live_bytes: int = 0
    peak_row: int = -1  # the first row where the live bytes reach their maximum
    failures: list[tuple[int, int]] = field(default_factory=list)  # (row, live bytes)
    live_at_end_count: int = 0  # zero-byte allocations excluded
    live_at_end_bytes: int = 0
    zero_byte_allocations: int = 0
    zero_byte_live_at_end: int = 0
    buckets: SizeBuckets = field(default_factory=SizeBuckets)
    largest_rows: list[int] = field(default_factory=list)  # by size, the earlier row first

    def count(self, name: str, mask: BoolArray, start: int, kept: int) -> None:
        """Add one block's rows of the anomaly `name`, keeping the first `kept` rows."""
        self.anomaly_counts[name] = self.anomaly_counts.get(name, 0) + int(np.count_nonzero(mask))
        rows = self.anomaly_rows.setdefault(name, [])
        if len(rows) < kept:
            rows.extend(int(r) + start for r in np.flatnonzero(mask)[: kept - len(rows)])


def row_figures(
    action: np.ndarray,
    size: Int64Array,
    time_ns: Int64Array,
    file_index: np.ndarray,
    prev: RowArray,
    has_next: BoolArray,
    *,
    names: dict[str, str],
    first_kept: int,
    failures_kept: int,
    largest_kept: int,
) -> RowFigures:
    """Every figure of `analyze` that reads each row; `names` maps the anomaly kinds
    (`free_unknown`, `replaced`, `replaced_zero`, `size_mismatch`, `late`, `failed`) to the
    names they are reported by."""
    figures = RowFigures()
    for name in names.values():
        figures.anomaly_counts[name] = 0
        figures.anomaly_rows[name] = []
    largest = np.zeros(0, np.int64)
    for start, live in live_blocks(action, size, prev):
        end = start + len(live)
        a, s, p = action[start:end], size[start:end], prev[start:end]
        is_alloc, is_free, is_failure = a == ALLOCATE, a == FREE, a == ALLOCATE_FAILURE
        figures.allocate_rows += int(np.count_nonzero(is_alloc))
        figures.free_rows += int(np.count_nonzero(is_free))
        figures.failure_rows += int(np.count_nonzero(is_failure))

        met = p >= 0
        met_size = np.zeros(len(p), np.int64)
        met_size[met] = size[p[met]]
        replaced = is_alloc & met
        replaced_zero = replaced & ((s == 0) | (met_size == 0))
        figures.count(names["free_unknown"], is_free & ~met, start, first_kept)
        figures.count(names["replaced"], replaced & ~replaced_zero, start, first_kept)
        figures.count(names["replaced_zero"], replaced_zero, start, first_kept)
        mismatch = is_free & met & (s != met_size)
        figures.count(names["size_mismatch"], mismatch, start, first_kept)
        del met, met_size, replaced, replaced_zero, mismatch
        before = max(start - 1, 0)  # a row is late against the row before it, in one file
        t, f = time_ns[before:end], file_index[before:end]
        late = (t[1:] < t[:-1]) & (f[1:] == f[:-1])
        figures.count(
            names["late"], late if start else np.concatenate(([False], late)), start, first_kept
        )
        figures.count(names["failed"], is_failure, start, first_kept)

        top = int(np.argmax(live)) if len(live) else 0
        if len(live) and int(live[top]) > figures.peak_live_bytes:
            figures.peak_live_bytes, figures.peak_row = int(live[top]), start + top
        if len(figures.failures) < failures_kept:
            rows = np.flatnonzero(is_failure)[: failures_kept - len(figures.failures)]
            figures.failures += [(start + int(r), int(live[r])) for r in rows]

        # An allocation is live at the end when no later row touches its pointer.
        live_end = is_alloc & ~has_next[start:end]
        zero = s == 0
        figures.live_at_end_count += int(np.count_nonzero(live_end & ~zero))
        figures.live_at_end_bytes += int(s[live_end].sum())
        figures.zero_byte_allocations += int(np.count_nonzero(is_alloc & zero))
        figures.zero_byte_live_at_end += int(np.count_nonzero(live_end & zero))
        allocated = s[is_alloc]
        figures.buckets.add(allocated)
        largest = _largest(largest, np.flatnonzero(is_alloc) + start, allocated, size, largest_kept)
    figures.largest_rows = [int(r) for r in largest]
    return figures


def _largest(
    held: Int64Array, rows: Int64Array, sizes: Int64Array, all_sizes: Int64Array, kept: int
) -> Int64Array:
    """The `kept` largest allocations of `held` (earlier rows) and `rows`, largest first and,
    among equal sizes, the earlier row first (a stable sort of all rows by size, descending)."""
    if len(held) == kept:  # a later row of equal size never displaces a held one
        larger = sizes > all_sizes[held[-1]]
        rows, sizes = rows[larger], sizes[larger]
    if not len(rows):
        return held
    both = np.concatenate((held, rows))
    both_sizes = np.concatenate((all_sizes[held], sizes))
    return both[np.argsort(-both_sizes, kind="stable")[:kept]]
