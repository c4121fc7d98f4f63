"""The one rule for files a command writes (plots, converted logs, results, $GITHUB_ENV):
checked before any work, so that a path that cannot be written costs nothing and is said in
one line, never found after a long replay as an internal error.

A path is refused when it is a directory or another non-regular file, when its folder does
not exist, or when no file can be created in that folder (read-only, /proc, /sys: a
temporary file is created there and removed at once).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hipmem._core.errors import UsageError


class OutputPathError(UsageError):
    """A file a command was asked to write cannot be written there (said before any work)."""


def check_output_file(path: Path, *, parameter: str) -> None:
    """Refuse `path` (naming `parameter`) unless a regular file can be written there."""
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_outputs(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Several files written all or none: yield one temporary path beside each target; only
    when every one was written are they renamed over their targets. An error while writing
    (or renaming) leaves no temporary file and no new target behind."""
    temps: list[Path] = []
    renamed: list[Path] = []
    try:
        for path in paths:
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            temps.append(Path(name))
        yield list(temps)
        for tmp, path in zip(temps, paths, strict=True):
            tmp.chmod(0o666 & ~_umask())
            tmp.replace(path)
            renamed.append(path)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        for path in renamed:  # a rename failed after others: none is left half done
            path.unlink(missing_ok=True)
        raise
