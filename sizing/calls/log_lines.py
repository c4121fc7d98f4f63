"""The lines of a call log, read with bounds whatever the file holds: in blocks, a line past
MAX_LINE_BYTES skipped unread, a "line" with no end refused. The rocBLAS/rocSOLVER logs
(`logs.py`) and hipBLASLt's (`sizing/hipblaslt/log.py`) are read through it; the reading
itself is `hipmem._core.bounded_lines`, shared with the fleet's results file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from hipmem._core.bounded_lines import LineWithNoEnd
from hipmem._core.bounded_lines import bounded_lines as _bounded_lines
from hipmem._core.progress import ProgressCallback

from ..errors import CallLogError

# One line: the longest real ones, gemm_ex traces, are under 1 KiB.
MAX_LINE_BYTES = 64 << 10
ENDLESS_LINE_BYTES = 64 << 20


def bounded_lines(
    path: Path, stream: BinaryIO, progress: ProgressCallback | None
) -> Iterator[bytes | None]:
    """The file's lines (without their \\n), read in blocks; None for a line longer than
    MAX_LINE_BYTES (the rest of it is read past). Memory stays within a block and a line
    whatever the file holds; a "line" with no end in `ENDLESS_LINE_BYTES` (a stream of
    zeros) ends the read with CallLogError."""
    try:
        yield from _bounded_lines(
            stream,
            max_line_bytes=MAX_LINE_BYTES,
            endless_line_bytes=ENDLESS_LINE_BYTES,
            progress=progress,
        )
    except LineWithNoEnd:
        raise CallLogError(
            f"{path}: a line with no end after {ENDLESS_LINE_BYTES >> 20} MiB: "
            "not a call log, reading stopped"
        ) from None
