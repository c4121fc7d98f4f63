"""Opening files that users name as input (call logs, workload files), whatever they are.

A regular file is read as is. A pipe or FIFO is read as a stream (`--from-log <(zcat x.gz)`);
a FIFO is opened without waiting for a writer, so one that nobody writes to reads as empty
instead of hanging. Directories, devices (`/dev/zero`, a terminal) and sockets are refused
with what they are: they are not files, and a device can be endless.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO


class UnreadableInput(Exception):
    """The path cannot be read as an input file; the message names it and says why."""


class NotAFile(UnreadableInput):
    """The path is no file at all (a directory, a device, a socket): the user named the
    wrong thing (usage, exit 2), unlike a file that cannot be read (exit 1)."""


def describe(mode: int) -> str | None:
    """What a non-file is ("a directory", ...), or None for a file, pipe or FIFO."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def open_input(path: Path) -> BinaryIO:
    """A binary stream of the file's bytes. Raises UnreadableInput."""
    try:
        mode = path.stat().st_mode
        what = describe(mode)
        if what is not None:
            raise NotAFile(f"{path}: is {what}, not a file")
        flags = os.O_RDONLY | (os.O_NONBLOCK if stat.S_ISFIFO(mode) else 0)
        fd = os.open(path, flags)
    except OSError as err:
        raise UnreadableInput(f"{path}: cannot read: {err.strerror or err}") from None
    if stat.S_ISFIFO(mode):  # opened without waiting for a writer; now read normally
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "rb")


def read_capped(path: Path, limit_bytes: int) -> bytes:
    """The whole file, refused when longer than `limit_bytes`. Raises UnreadableInput."""
    with open_input(path) as stream:
        try:
            data = stream.read(limit_bytes + 1)
        except OSError as err:
            raise UnreadableInput(f"{path}: cannot read: {err.strerror or err}") from None
    if len(data) > limit_bytes:
        raise UnreadableInput(f"{path}: longer than {limit_bytes:,} bytes, refused")
    return data
