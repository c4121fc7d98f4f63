"""matplotlib, which only the plots need: an optional dependency (`pip install 'hipmem[plot]'`),
and the checks every `--plot` path passes before any work starts. Shared by replay's plots
and sizing's sweep plots.

Sizing in CI and replay from Python never draw, and matplotlib with its dependencies is the
largest part of an install; so it is an extra, and asking for a plot without it is one line.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from typing import Any

from hipmem.errors import UsageError

INSTALL_HINT = "plots need matplotlib: pip install 'hipmem[plot]'"


PLOT_SUFFIXES = (".png", ".svg")
_UNITS = ((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))


class PlotUnavailable(UsageError):
    """A plot was asked for, but matplotlib is not installed."""


def require_matplotlib() -> None:
    """Fail before any work when a plot was asked for and cannot be drawn."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable(INSTALL_HINT, parameter="plot")


def pyplot() -> Any:
    """`matplotlib.pyplot`, rendering to files only (no display)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class PlotPathError(UsageError):
    """The plot file name has a suffix we cannot render, or its folder is missing."""


def check_plot_path(path: Path, *, suffixes: tuple[str, ...] = PLOT_SUFFIXES) -> None:
    """Reject, before any work starts, what the plot could not be written to: a suffix we
    cannot render, a missing folder, a directory, a folder where no file can be created
    (read-only, or /proc and /sys: a temporary file is created there and removed), or a
    missing matplotlib."""
    require_matplotlib()
    if path.suffix.lower() not in suffixes:
        names = " or ".join(suffix for suffix in suffixes if suffix)
        raise PlotPathError(
            f"must end in {names} (the suffix picks it)", parameter="plot", value=str(path)
        )
    if path.is_dir():
        raise PlotPathError("is a directory", parameter="plot", value=str(path))
    if path.exists() and not path.is_file():
        raise PlotPathError("is not a regular file", parameter="plot", value=str(path))
    if not path.parent.is_dir():
        raise PlotPathError(
            f"folder '{path.parent}' does not exist", parameter="plot", value=str(path)
        )
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".hipmem-plot-check-"):
            pass
    except OSError as err:
        raise PlotPathError(
            f"cannot write in folder '{path.parent}': {err.strerror or err}",
            parameter="plot",
            value=str(path),
        ) from None


def byte_unit(peak_bytes: int) -> tuple[int, str]:
    """The unit an axis is labelled in: the largest one the peak holds at least twice."""
    for scale, name in _UNITS:
        if peak_bytes >= 2 * scale:
            return scale, name
    return 1, "B"
