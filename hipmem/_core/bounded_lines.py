"""The lines of an untrusted file, read with bounds whatever it holds: in blocks, a line past
a limit skipped unread, and (where the file need not be finite) a "line" with no end refused.

Call logs (`sizing/calls/log_lines.py`) and a fleet's results file
(`replay/fleet/results.py`) are read through it; each says what its own bounds are and what
its file is not.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from hipmem._core.progress import ProgressCallback

BLOCK_BYTES = 1 << 20


class LineWithNoEnd(Exception):
    """No newline in `endless_line_bytes`: a stream of zeros, not a text file. Not a
    HipmemError: the caller names the file and says what it is not."""

    def __init__(self, read_bytes: int) -> None:
        super().__init__(f"a line with no end after {read_bytes:,} bytes")
        self.read_bytes = read_bytes


def bounded_lines(
    stream: BinaryIO,
    *,
    max_line_bytes: int,
    endless_line_bytes: int | None = None,
    progress: ProgressCallback | None = None,
    unterminated_last: bool = True,
) -> Iterator[bytes | None]:
    """The file's lines (without their \\n), read in blocks of BLOCK_BYTES; None, once, for
    a line longer than `max_line_bytes` (the rest of it is read past, never held). Memory
    stays within a block and a line whatever the file holds.

    `endless_line_bytes`: a "line" with no end in that many bytes raises LineWithNoEnd (None:
    read past it to the end of the file). `unterminated_last=False` leaves out a last line
    with no newline (what a writer killed mid-line leaves).
    """
    total_bytes = _size_if_regular(stream)
    done_bytes = 0
    carry = b""
    skipped_bytes = -1  # >= 0 while reading past an over-long line
    while chunk := stream.read(BLOCK_BYTES):
        done_bytes += len(chunk)
        if skipped_bytes >= 0:
            end = chunk.find(b"\n")
            if end < 0:
                skipped_bytes += len(chunk)
                if endless_line_bytes is not None and skipped_bytes > endless_line_bytes:
                    raise LineWithNoEnd(skipped_bytes)
                continue
            chunk, skipped_bytes = chunk[end + 1 :], -1
        lines = (carry + chunk).split(b"\n")
        carry = lines.pop()
        for line in lines:
            yield line if len(line) <= max_line_bytes else None
        if len(carry) > max_line_bytes:
            yield None
            carry, skipped_bytes = b"", len(carry)
        if progress is not None:
            progress(done_bytes, total_bytes, "")
    if carry and unterminated_last:
        yield carry


def _size_if_regular(stream: BinaryIO) -> int | None:
    info = os.fstat(stream.fileno())
    return info.st_size if stat.S_ISREG(info.st_mode) else None
