"""Opening a log: plain or gzip, and a damaged gzip read up to its damage.

A log whose writer was killed ends in a truncated gzip member; a disk error leaves corrupt
bytes. Both are read up to the damage, which is remembered and said (`SalvagingGzip.damage`)
so that lenient loading keeps every row before it and strict loading refuses the file.
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import LogFormatError

_INFLATE_STEP_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


class NotGzipError(LogFormatError):
    """A file named `.gz` does not hold gzip data."""


class SalvagingGzip(io.RawIOBase):
    """A gzip stream that ends quietly at the first damage and remembers that it did, so a
    truncated log (the writer was killed) can still be read in lenient mode.

    It inflates at most `_INFLATE_STEP_BYTES` at a time: a megabyte of compressed zeros is a
    gigabyte of output, which must reach the line bound a piece at a time, never at once."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb")
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._fresh = True  # a member not started: the file may end here
        self._input = b""
        self._input_at = 0  # compressed offset of self._input
        self._pending = b""
        self._offset = 0  # into self._pending
        self.damage: str | None = None
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while self._offset >= len(self._pending) and not self._done:
            self._fill()
        count = min(len(view), len(self._pending) - self._offset)
        view[:count] = self._pending[self._offset : self._offset + count]
        self._offset += count
        return count

    def _fill(self) -> None:
        self._pending, self._offset = b"", 0
        if not self._input:
            self._input = self._file.read(1 << 20)
            if not self._input:
                if not self._fresh:
                    self._pending = self._inflate.flush()
                    if not self._inflate.eof:
                        self.damage = "gzip data ends early (truncated file)"
                self._done = True
                return
        data, saved = self._input, self._inflate.copy()
        try:
            self._pending = self._inflate.decompress(data, _INFLATE_STEP_BYTES)
        except zlib.error as err:
            # The step is lost with the exception: inflate it again in small steps from
            # before it, keeping what came out before the damage.
            self._pending, where = _inflate_until_damage(saved, data)
            self.damage = (
                f"gzip data is corrupt near compressed byte {self._input_at + where:,} ({err})"
            )
            self._done = True
            return
        self._fresh = False
        rest = self._inflate.unconsumed_tail
        if self._inflate.eof:
            # Concatenated gzip members are valid gzip: start the next member.
            rest = self._inflate.unused_data
            self._inflate, self._fresh = zlib.decompressobj(16 + zlib.MAX_WBITS), True
        self._input_at += len(data) - len(rest)
        self._input = rest

    def close(self) -> None:
        self._file.close()
        super().close()


def _inflate_until_damage(inflate: Any, compressed: bytes, step: int = 256) -> tuple[bytes, int]:
    """What `inflate` gives for `compressed` before the damage, and the damage's offset in
    it (to within `step` bytes)."""
    out = []
    for offset in range(0, len(compressed), step):
        try:
            out.append(inflate.decompress(compressed[offset : offset + step]))
        except zlib.error:
            return b"".join(out), offset
        if inflate.eof:
            break
    return b"".join(out), len(compressed)


def is_gzip(path: Path) -> bool:
    """Whether the file holds gzip data; a `.gz` name that does not is an error."""
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == _GZIP_MAGIC:
        return True
    if path.name.endswith(".gz"):
        raise NotGzipError(f"{path}: named .gz but is not gzip data")
    return False


def open_log(path: Path) -> BinaryIO:
    """The file's decompressed bytes as a stream."""
    if is_gzip(path):
        return io.BufferedReader(SalvagingGzip(path), buffer_size=1 << 20)
    return path.open("rb")
