"""The rule for `--html FILE` pages, and plotly, which only the pages need (an extra:
`pip install 'hipmem[html]'`), as matplotlib is for the plots (hipmem/_core/pyplot.py).

Checked before any work starts, so that a typo or a missing extra costs nothing: the suffix
(.html or .htm), the folder (that of every output file, hipmem/_core/plot_files.py) and plotly.
The page itself is written atomically (hipmem/_core/atomic_write.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hipmem._core.errors import UsageError
from hipmem._core.plot_files import PlotPathError, check_writable

HTML_SUFFIXES = (".html", ".htm")
INSTALL_HINT = "pages need plotly: pip install 'hipmem[html]'"


class PageUnavailable(UsageError):
    """A page was asked for, but plotly is not installed."""


def check_html_path(path: Path) -> None:
    """Refuse, before any work, a page that could not be written: plotly missing, another
    suffix than .html/.htm, or a path no file can be written to."""
    if importlib.util.find_spec("plotly") is None:
        raise PageUnavailable(INSTALL_HINT, parameter="html")
    if path.suffix.lower() not in HTML_SUFFIXES:
        raise PlotPathError("must end in .html or .htm", parameter="html", value=str(path))
    check_writable(path, "html")
