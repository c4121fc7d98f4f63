"""The one rule for plot files, shared by every `--plot` (and, for the folder, `--html`).

The suffix picks the format (.png or .svg, any letter case); the folder must exist and the
path must not be a folder. Checked before any work starts, so that a typo costs nothing. The
file is written atomically: a temporary file beside it, then a rename.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, NoReturn

from hipmem._core.atomic_write import atomic_output
from hipmem._core.errors import UsageError
from hipmem._core.pyplot import require_matplotlib

PLOT_SUFFIXES = (".png", ".svg")
_UNITS = ((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))


class PlotPathError(UsageError):
    """The plot file name has a suffix we cannot render, or it cannot be written there."""


def check_plot_path(path: Path) -> None:
    """Reject, before any work starts, what the plot could not be written to: a suffix we
    do not render, a directory, a missing folder, a folder where no file can be created
    (read-only, or /proc and /sys: a temporary file is created there and removed), or a
    missing matplotlib."""
    require_matplotlib()
    if path.suffix.lower() not in PLOT_SUFFIXES:
        _refuse(path, "must end in .png or .svg (the suffix picks it)")
    check_writable(path, "plot")


def check_writable(path: Path, parameter: str) -> None:
    """Refuse (`parameter` named) a file path no file can be written to: a directory,
    something not a regular file, a missing folder or one where no file can be created."""
    if path.is_dir():
        _refuse(path, "is a directory", parameter)
    if path.exists() and not path.is_file():
        _refuse(path, "is not a regular file", parameter)
    if not path.parent.is_dir():
        _refuse(path, f"folder '{path.parent}' does not exist", parameter)
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".hipmem-plot-check-"):
            pass
    except OSError as err:
        _refuse(path, f"cannot write in folder '{path.parent}': {err.strerror or err}", parameter)


def _refuse(path: Path, why: str, parameter: str = "plot") -> NoReturn:
    raise PlotPathError(why, parameter=parameter, value=str(path))


def byte_unit(peak_bytes: int) -> tuple[int, str]:
    """The unit an axis is labelled in: the largest one the peak holds at least twice."""
    for scale, name in _UNITS:
        if peak_bytes >= 2 * scale:
            return scale, name
    return 1, "B"


def plain_text(text: str) -> str:
    """Text matplotlib draws as written: `$` would start mathtext (`m$\\frac{$x.csv`)."""
    return text.replace("$", r"\$")


def save_atomically(figure: Any, path: Path) -> None:
    fmt = path.suffix.lower().lstrip(".")
    with atomic_output(path, suffix=f".{fmt}") as tmp:
        figure.savefig(tmp, format=fmt, dpi=110)
