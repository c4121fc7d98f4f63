"""The one rule for files a command writes (plots, converted logs, results, $GITHUB_ENV):
checked before any work, so that a path that cannot be written costs nothing and is said in
one line, never found after a long replay as an internal error. (Several files are then
written all or none: `hipmem._core.atomic_write.atomic_outputs`.)

A path is refused when it is a directory or another non-regular file, when its folder does
not exist, or when no file can be created in that folder (read-only, /proc, /sys: a
temporary file is created there and removed at once).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hipmem._core.errors import UsageError


class OutputPathError(UsageError):
    """A file a command was asked to write cannot be written there (said before any work)."""


def check_output_file(path: Path, *, parameter: str) -> None:
    """Refuse `path` (naming `parameter`) unless a regular file can be written there."""
    try:
        _check_output_file(path, parameter)
    except OSError as err:  # a name the system refuses (longer than 255 bytes), a loop
        raise OutputPathError(f"cannot be written: {err.strerror or err}", parameter=parameter,
                              value=str(path)) from None  # fmt: skip


def _check_output_file(path: Path, parameter: str) -> None:
    if path.is_dir():
        raise OutputPathError("is a directory", parameter=parameter, value=str(path))
    if path.exists() and not path.is_file():
        raise OutputPathError("is not a regular file", parameter=parameter, value=str(path))
    folder = path.parent
    if not folder.is_dir():
        raise OutputPathError(f"folder '{folder}' does not exist", parameter=parameter,
                              value=str(path))  # fmt: skip
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".hipmem-write-check-"):
            pass
    except OSError as err:
        raise OutputPathError(f"cannot write in folder '{folder}': {err.strerror or err}",
                              parameter=parameter, value=str(path)) from None  # fmt: skip
