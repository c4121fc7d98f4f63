"""The lines of a call log, read with bounds whatever the file holds: in blocks, a line past
MAX_LINE_BYTES skipped unread, a "line" with no end refused. The rocBLAS/rocSOLVER logs
(`logs.py`) and hipBLASLt's (`sizing/hipblaslt/log.py`) are read through it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from hipmem._core.progress import ProgressCallback

from ..errors import CallLogError

# One line: the longest real ones, gemm_ex traces, are under 1 KiB.
MAX_LINE_BYTES = 64 << 10
BLOCK_BYTES = 1 << 20
ENDLESS_LINE_BYTES = 64 << 20


def bounded_lines(
    path: Path, stream: BinaryIO, progress: ProgressCallback | None
) -> Iterator[bytes | None]:
    """The file's lines (without their \\n), read in blocks; None for a line longer than
    MAX_LINE_BYTES (the rest of it is read past). Memory stays within a block and a line
    whatever the file holds; a "line" with no end in `ENDLESS_LINE_BYTES` (a stream of
    zeros) ends the read with CallLogError."""
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
                if skipped_bytes > ENDLESS_LINE_BYTES:
                    raise CallLogError(
                        f"{path}: a line with no end after {ENDLESS_LINE_BYTES >> 20} MiB: "
                        "not a call log, reading stopped"
                    )
                continue
            chunk, skipped_bytes = chunk[end + 1 :], -1
        lines = (carry + chunk).split(b"\n")
        carry = lines.pop()
        for line in lines:
            yield line if len(line) <= MAX_LINE_BYTES else None
        if len(carry) > MAX_LINE_BYTES:
            yield None
            carry, skipped_bytes = b"", len(carry)
        if progress is not None:
            progress(done_bytes, total_bytes, "")
    if carry:
        yield carry


def _size_if_regular(stream: BinaryIO) -> int | None:
    info = os.fstat(stream.fileno())
    return info.st_size if stat.S_ISREG(info.st_mode) else None
