"""The one way hipmem thins a series before drawing it: never a stride, always every peak.

A picture is about 4,000 pixel columns wide; a trace can hold ten million points. Taking
every Nth point draws a short spike only when it lands on a sample, and a user sizing from
the picture would then size too small. Instead the rows are cut into equal runs (one per
pixel column) and each run keeps its lowest and its highest point, in the order they
happened: the drawn line passes through every maximum and every minimum of the series, so
its highest point is the series' highest point. Where there are few points (at most two per
column) all are kept. The kept points are real rows, so an interactive page can say which
op each one is (`replay/html_report.py`). Every plot and page of hipmem goes through here.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MAX_COLUMNS = 4000  # runs per series: about one per pixel column of a wide figure


def peak_rows(y: npt.ArrayLike, columns: int = MAX_COLUMNS) -> npt.NDArray[np.int64]:
    """Indices of the rows of `y` to draw, ascending: all of them when there are at most
    2*`columns`, else the lowest and the highest row of each of `columns` equal runs (the
    first of equal values). NaN (a gap) is skipped as a candidate; a run of NaN keeps its
    first row, so the gap stays a gap."""
    values = np.asarray(y)
    n = len(values)
    if n <= 2 * columns:
        return np.arange(n, dtype=np.int64)
    starts = np.linspace(0, n, columns + 1).astype(np.int64)[:-1]
    run = np.repeat(np.arange(columns), np.diff(np.append(starts, n)))
    if values.dtype.kind == "f":
        highest = np.fmax.reduceat(values, starts)
        lowest = np.fmin.reduceat(values, starts)
    else:
        highest = np.maximum.reduceat(values, starts)
        lowest = np.minimum.reduceat(values, starts)
    kept = [starts[np.isnan(highest)]] if values.dtype.kind == "f" else []
    for target in (highest, lowest):
        hits = np.flatnonzero(values == target[run])
        # the first hit of each run: np.unique returns the index of each run's first hit
        _, first = np.unique(run[hits], return_index=True)
        kept.append(hits[first])
    return np.unique(np.concatenate(kept)).astype(np.int64)


def envelope(
    x: npt.ArrayLike, y: npt.ArrayLike, columns: int = MAX_COLUMNS
) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) points to draw for the series: see `peak_rows`."""
    xs, ys = np.asarray(x), np.asarray(y)
    rows = peak_rows(ys, columns)
    return xs[rows], ys[rows]
