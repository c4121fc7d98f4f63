"""A snapshot file: telling one from a CSV log, and reading it within the decompressed-size cap
(gzip inflates as it is read, so a bomb stops at the cap, never past it)."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path
from typing import Any

from hipmem._core.byte_sizes import GiB, parse_bytes

from .pickle_machine import MAX_BYTES_ENV, SnapshotError

DEFAULT_MAX_BYTES = 2 * GiB  # decompressed pickle; 10 M entries with frames are ~0.6 GB
GZIP_MAGIC = b"\x1f\x8b"
PICKLE_PROTO = 0x80  # protocol 2+ pickles (PyTorch writes 4) start with PROTO
READ_BYTES = 1 << 13


def is_snapshot(path: Path) -> bool:
    """True when the file (plain or gzip) starts like a pickle rather than a CSV."""
    with path.open("rb") as file:
        head = file.read(2)
    if head == GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as file:
                head = file.read(1)
        except (OSError, EOFError):
            return False
    return bool(head) and head[0] == PICKLE_PROTO


def max_bytes_from_env() -> int:
    """The decompressed-size cap: HIPMEM_SNAPSHOT_MAX_BYTES (byte grammar), else 2 GiB."""
    text = os.environ.get(MAX_BYTES_ENV)
    return DEFAULT_MAX_BYTES if not text else parse_bytes(text, name=MAX_BYTES_ENV)


class CappedReader(io.RawIOBase):
    """Reads from `raw`, refusing to hand out more than `limit_bytes` in total: gzip inflates
    as it is read, so a bomb stops at the cap, never past it."""

    def __init__(self, raw: Any, limit_bytes: int, name: str) -> None:
        self._raw, self._left, self._limit, self._name = raw, limit_bytes, limit_bytes, name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._raw.read(min(len(view), self._left + 1))
        if len(data) > self._left:
            raise SnapshotError(
                f"{self._name}: more than {self._limit:,} bytes once decompressed "
                f"(raise {MAX_BYTES_ENV} if this snapshot is genuine)"
            )
        self._left -= len(data)
        view[: len(data)] = data
        return len(data)
