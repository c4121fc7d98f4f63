"""Writing a file so that readers see the old file or the new one, never half of either.

The new content goes to a temporary file in the same folder, which is then renamed over the
target. Unlike `tempfile.mkstemp` files (always 0600), the result follows the user's umask, as
any file the user writes by hand would.

A write that fails (a full disk, a quota, a file-size limit, an I/O error) is `CannotWriteFile`:
one line naming the file and the system's reason (`cannot write 'out.csv': No space left on
device`), exit 1, with the temporary file removed and the old file, if any, untouched. Code
that writes a file some other way (appending, a folder of files) says its failures with the
same class through `naming_write_errors(path)`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hipmem._core.errors import HipmemError


class CannotWriteFile(HipmemError):
    """Writing a file failed part-way (disk full, quota, file-size limit, I/O error): the
    request was sound, so exit 1; the message names the file and the system's reason."""


def cannot_write(path: Path | str, err: OSError) -> CannotWriteFile:
    """The one line for `err`, raised while writing `path`."""
    reason = err.strerror or str(err) or type(err).__name__
    return CannotWriteFile(f"cannot write {str(path)!r}: {reason}")


@contextmanager
def naming_write_errors(path: Path | str) -> Iterator[None]:
    """Say an OSError raised in the block as `CannotWriteFile` naming `path` (for writers
    that do not go through `atomic_output`: appends, folders of files)."""
    try:
        yield
    except OSError as err:
        raise cannot_write(path, err) from err


def umask() -> int:
    """The process's umask (read by setting and restoring it: there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(path: Path, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path`, else it vanishes.

    `suffix` lets writers that pick a format by extension (matplotlib) see the right one.
    """
    path = Path(path)
    with naming_write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        os.close(fd)
    tmp = Path(tmp_name)
    try:
        with naming_write_errors(path):
            yield tmp
            tmp.chmod(0o666 & ~umask())
            tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_outputs(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Several files written all or none: yield one temporary path beside each target; only
    when every one was written are they renamed over their targets. An error while writing
    (or renaming) leaves no temporary file and no new target behind. An OSError of the block
    names the first target (the caller names the file it was writing with
    `naming_write_errors` where there are several)."""
    temps: list[Path] = []
    renamed: list[Path] = []
    try:
        for path in paths:
            with naming_write_errors(path):
                fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
                os.close(fd)
            temps.append(Path(name))
        with naming_write_errors(paths[0] if paths else "."):
            yield list(temps)
        for tmp, path in zip(temps, paths, strict=True):
            with naming_write_errors(path):
                tmp.chmod(0o666 & ~umask())
                tmp.replace(path)
            renamed.append(path)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        for path in renamed:  # a rename failed after others: none is left half done
            path.unlink(missing_ok=True)
        raise


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one step."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) in one step."""
    write_bytes_atomically(path, text.encode())
