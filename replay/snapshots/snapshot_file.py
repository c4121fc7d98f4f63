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
_WHOLE_BYTES = 1 << 16  # a file this small is read, and inflated, in one call


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


def small_file_read(file: Any, limit_bytes: int) -> Callable[[int], bytes] | None:
    """A reader of the pickle bytes of a small file, read and inflated in one call each (a
    small snapshot's read time is mostly calls): its first call gives them all, the next
    ones nothing. Small: at most 64 KiB, inflating to at most 64 KiB and `limit_bytes`, a
    gzip file one whole member. None for any other file, a damaged one too: `GzipStream`
    reads it from the start and says what is wrong where. Inflated in one call, a small
    member needs no 32 KiB window from zlib."""
    size = os.fstat(file.fileno()).st_size
    if size > _WHOLE_BYTES:
        return None
    raw = file.read(size + 1)  # a read allocates what it asks for: no more than the file
    most_bytes = min(limit_bytes, _WHOLE_BYTES)
    data = _small_pickle_bytes(raw, most_bytes) if len(raw) <= _WHOLE_BYTES else b""
    if not data:
        file.seek(0)
        return None
    rest = [data]
    return lambda size: rest.pop() if rest else b""


def _small_pickle_bytes(raw: bytes, most_bytes: int) -> bytes:
    """`raw` (a whole file) as pickle bytes of at most `most_bytes`; b"" when it is not."""
    if raw[:2] != GZIP_MAGIC:
        return raw if len(raw) <= most_bytes else b""
    # The trailer's size is untrusted, only a hint: what is inflated is bounded by it, and
    # zlib's output buffer no larger (+ 1: the member's end seen).
    hint_bytes = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else most_bytes + 1
    if hint_bytes > most_bytes:
        return b""
    inflate = zlib.decompressobj(_GZIP_WBITS)
    try:
        data = inflate.decompress(raw, hint_bytes + 1)
    except zlib.error:
        return b""
    whole = inflate.eof and not inflate.unused_data.strip(b"\0")  # one member, no more
    return data if whole and len(data) <= most_bytes else b""


class GzipStream:
    """The decompressed bytes of a gzip file, member after member as `gzip` reads them (zero
    padding between members skipped), from one open file, inflating only what `read` asks
    for: the output is bounded whatever the input. Damaged data raises `zlib.error` or
    `EOFError` (truncated)."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._inflate = zlib.decompressobj(_GZIP_WBITS)
        # Reads never ask past the size: a read of 64 KiB allocates 64 KiB, whatever it gets.
        self._left_bytes = os.fstat(file.fileno()).st_size - file.tell()
        self._input = self._read_input()

    def _read_input(self) -> bytes:
        data = self._file.read(min(self._left_bytes, _INPUT_BYTES)) if self._left_bytes else b""
        self._left_bytes -= len(data)
        return data

    def read(self, size: int) -> bytes:
        want = size
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
