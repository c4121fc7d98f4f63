"""A snapshot file: telling one from a CSV log, and reading it within the decompressed-size cap
(gzip inflates only what is asked for, so a bomb stops at the cap, never past it)."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hipmem._core.byte_sizes import GiB, parse_bytes

from .pickle_machine import MAX_BYTES_ENV, SnapshotError

DEFAULT_MAX_BYTES = 2 * GiB  # decompressed pickle; 10 M entries with frames are ~0.6 GB
GZIP_MAGIC = b"\x1f\x8b"
PICKLE_PROTO = 0x80  # protocol 2+ pickles (PyTorch writes 4) start with PROTO
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip member: zlib reads its header and checks its trailer
_INPUT_BYTES = 1 << 16  # compressed bytes read at a time
_WHOLE_BYTES = 1 << 16  # a member this small (its trailer says) is inflated in one call


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


def capped_read(
    read: Callable[[int], bytes], limit_bytes: int, name: str
) -> Callable[[int], bytes]:
    """`read`, refusing to hand out more than `limit_bytes` in total: gzip inflates only as
    much as is asked for, so a bomb stops at the cap, never past it."""
    left = limit_bytes

    def read_capped(size: int) -> bytes:
        nonlocal left
        data = read(min(size, left + 1))
        if len(data) > left:
            raise SnapshotError(
                f"{name}: more than {limit_bytes:,} bytes once decompressed "
                f"(raise {MAX_BYTES_ENV} if this snapshot is genuine)"
            )
        left -= len(data)
        return data

    return read_capped


class GzipStream:
    """The decompressed bytes of a gzip file, member after member as `gzip` reads them (zero
    padding between members skipped), from one open file, inflating only what `read` asks
    for: the output is bounded whatever the input.

    A small file (its trailer's ISIZE, an untrusted hint, at most 64 KiB) is inflated in one
    call on the first read, which may then return more than asked (at most 64 KiB): zlib then
    needs no 32 KiB window, and a snapshot of a hundred entries costs a few KiB, not 40.
    Damaged data raises `zlib.error` or `EOFError` (truncated)."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._inflate = zlib.decompressobj(_GZIP_WBITS)
        # Reads never ask past the size: a read of 64 KiB allocates 64 KiB, whatever it gets.
        self._left_bytes = size = os.fstat(file.fileno()).st_size - file.tell()
        self._input = self._read_input()  # the whole of a small file, in one read
        self._first_bytes = 0
        if 18 <= size == len(self._input):  # a header and a trailer at least
            hint = int.from_bytes(self._input[-4:], "little")
            self._first_bytes = min(hint, _WHOLE_BYTES) + 1  # + 1: the member's end seen

    def _read_input(self) -> bytes:
        data = self._file.read(min(self._left_bytes, _INPUT_BYTES)) if self._left_bytes else b""
        self._left_bytes -= len(data)
        return data

    def read(self, size: int) -> bytes:
        want = max(size, self._first_bytes)
        self._first_bytes = 0
        parts: list[bytes] = []
        while want > 0:
            inflate = self._inflate
            if inflate.eof:  # the member ended: another may follow
                rest = inflate.unused_data
                while not rest.strip(b"\0"):
                    more = self._read_input()
                    if not more:
                        return b"".join(parts)
                    rest = more
                self._inflate = inflate = zlib.decompressobj(_GZIP_WBITS)
                self._input = rest.lstrip(b"\0")
            if not self._input:
                self._input = self._read_input()
                if not self._input:
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
            data = inflate.decompress(self._input, want)
            self._input = inflate.unconsumed_tail
            if data:
                parts.append(data)
                want -= len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)
