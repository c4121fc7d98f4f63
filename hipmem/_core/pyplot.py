"""matplotlib, which only the plots need: an optional dependency (`pip install 'hipmem[plot]'`).

Sizing in CI and replay from Python never draw, and matplotlib with its dependencies is the
largest part of an install; so it is an extra, and asking for a plot without it is one line.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from hipmem._core.errors import UsageError

INSTALL_HINT = "plots need matplotlib: pip install 'hipmem[plot]'"


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
