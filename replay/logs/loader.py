"""Load RMM/hipMM allocation logs (every format era, plain or gzip) into an `AllocationLog`.

The log is CSV written by RMM's `logging_resource_adaptor`:

    Thread,Time,Action,Pointer,Size,Stream          (from mid-2020)
    Time,Action,Pointer,Size,Stream                 (before: no Thread column)

Time is time of day, `HH:MM:SS.ffffff` (from 21.06) or `HH:MM:SS:ffffff` (before), and wraps
at midnight; Action is `allocate`, `free` or `allocate failure`; Pointer is hex, `(nil)` or
`0x0`; Stream is `0`, `0x0` or hex. rmm's Python side writes one `<name>.dev<N>.csv` per device.

How it stays fast: pyarrow's multithreaded CSV reader does the parsing, with Thread and Size
read as int64, Time as time64 and the text columns dictionary-encoded, so the hex parsing
(arrow's own integer cast) runs over each chunk's distinct values only. Record batches are
converted on a thread pool straight into columns allocated by arrow's allocator; every
conversion is a numpy or arrow operation over a whole batch, with no Python object per row.

How it stays honest about bad rows: the fast read cannot say where a row was that it could
not convert, so on any such trouble the file is read again on a tolerant path: numpy splits
the bytes into lines and counts their fields (so every line keeps its number), and pyarrow
reads the well-formed ones with every column as raw bytes, each value then validated
vectorised, by the rules arrow's reader applies on the fast path (numbers and times may
have spaces around them; integers may be 0x-hex; a time may leave out its fraction), so a
row fares the same whichever path reads it. Lines end at \n (a \r before it is dropped).
A row that cannot be read is skipped and recorded with its line number (header = line 1);
with `strict=True` the first one is an error instead.

Times are unwrapped per file: whenever time of day jumps back by more than 12 hours the day
advances (and a jump forward by more than 12 hours steps back a day, for a late row that
was stamped before midnight). `time_ns` counts from midnight of the file's first day.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from hipmem._core.close_names import closest
from hipmem._core.progress import ProgressCallback
from hipmem._core.skipped_input import NothingToAnswer

from ..errors import LogFormatError, ReplayUsageError
from ..snapshots.reader import is_snapshot, read_snapshot
from .events import (
    ALLOCATE,
    ALLOCATE_FAILURE,
    COLUMNS,
    FREE,
    AllocationLog,
    Recording,
    SkippedRow,
)

HEADER_WITH_THREAD = "Thread,Time,Action,Pointer,Size,Stream"
HEADER_WITHOUT_THREAD = "Time,Action,Pointer,Size,Stream"
KNOWN_HEADERS = (HEADER_WITH_THREAD, HEADER_WITHOUT_THREAD)

#: Skipped rows kept in full in `AllocationLog.skipped`; the rest are only counted.
MAX_KEPT_SKIPS = 100
#: Longer lines are skipped as unreadable (pyarrow cannot read a row longer than its block).
MAX_LINE_BYTES = 1 << 20
#: No device holds a petabyte: a larger size is a damaged row, skipped and reported. With
#: every size below this, sums of sizes fit int64 unless the log allocates 2**62 bytes in
#: all, which `load_log` refuses; so live bytes, totals and peaks never wrap.
MAX_PLAUSIBLE_BYTES = 1 << 50
MAX_TOTAL_BYTES = 1 << 62
_ENDLESS_LINE_BYTES = 64 << 20
_INFLATE_STEP_BYTES = 1 << 20

DAY_NS = 86_400 * 1_000_000_000
_HALF_DAY_NS = DAY_NS // 2
_GZIP_MAGIC = b"\x1f\x8b"
_ACTION_CODES = {b"allocate": ALLOCATE, b"free": FREE, b"allocate failure": ALLOCATE_FAILURE}
_DEVICE_NAME = re.compile(r"\.dev(\d+)\.csv(\.gz)?$")

BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]


class LogFileNotFoundError(ReplayUsageError):
    """A log path given on the command line does not exist."""


class NotGzipError(LogFormatError):
    """A file named `.gz` does not hold gzip data."""


class LogHeaderError(LogFormatError):
    """The first line is not an RMM/hipMM log header: the file given is not a log, an input
    file hipmem cannot use (usage, as for a workload or snapshot that is not one)."""

    exit_code = 2


class BadLogRowError(LogFormatError):
    """A row cannot be read and strict loading was asked for."""


# --------------------------------------------------------------------------- file names


def device_of(path: str | Path) -> int | None:
    """The device number in rmm's `<name>.dev<N>.csv` naming, else None."""
    match = _DEVICE_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def find_log_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Resolve the paths a user gave: each existing file as is; a missing `<name>.csv[.gz]`
    whose per-device siblings `<name>.dev<N>.csv[.gz]` exist stands for those, by device."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_file():
            found.append(path)
            continue
        if path.exists():  # a FIFO or a device (/dev/zero): say what it is
            raise LogFileNotFoundError(f"{given}: {_not_a_file(path)}")
        siblings = _device_siblings(path)
        if not siblings:
            raise LogFileNotFoundError(f"log file '{given}' does not exist")
        found.extend(siblings)
    return found


def _not_a_file(path: Path) -> str:
    mode = path.stat().st_mode
    if stat.S_ISFIFO(mode):
        return "is a FIFO; allocation logs are read twice when damaged, save it to a file first"
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISCHR: "a character device"}
    what = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
    return f"is {what}, not a log file" if what.startswith("a ") else f"is {what}"


def _device_siblings(path: Path) -> list[Path]:
    name = path.name
    for suffix in (".csv.gz", ".csv"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            candidates = list(path.parent.glob(f"{glob_escape(stem)}.dev*{suffix}"))
            numbered = [(device_of(p), p) for p in candidates if p.name.endswith(suffix)]
            return [p for dev, p in sorted((d, p) for d, p in numbered if d is not None)]
    return []


def glob_escape(text: str) -> str:
    """Escape glob metacharacters in a literal file-name part."""
    return re.sub(r"([*?\[])", r"[\1]", text)


# --------------------------------------------------------------------------- opening


class _SalvagingGzip(io.RawIOBase):
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


def _is_gzip(path: Path) -> bool:
    """Whether the file holds gzip data; a `.gz` name that does not is an error."""
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == _GZIP_MAGIC:
        return True
    if path.name.endswith(".gz"):
        raise NotGzipError(f"{path}: named .gz but is not gzip data")
    return False


def _open(path: Path) -> BinaryIO:
    """The file's decompressed bytes as a stream."""
    if _is_gzip(path):
        return io.BufferedReader(_SalvagingGzip(path), buffer_size=1 << 20)
    return path.open("rb")


# --------------------------------------------------------------------------- header


@dataclass(frozen=True)
class _Layout:
    """What the header and first row say about a file's era."""

    has_thread: bool
    colon_times: bool  # HH:MM:SS:ffffff, written before RMM 21.06

    @property
    def names(self) -> list[str]:
        return (HEADER_WITH_THREAD if self.has_thread else HEADER_WITHOUT_THREAD).split(",")


def _read_layout(source: str, stream: BinaryIO) -> _Layout:
    head = stream.read(64 * 1024)
    if not head:
        raise LogHeaderError(f"{source}:1: empty file; expected the header '{HEADER_WITH_THREAD}'")
    lines = head.splitlines()
    header = lines[0].decode("utf-8", "replace").strip().lstrip("\ufeff")
    if header not in KNOWN_HEADERS:
        raise LogHeaderError(f"{source}:1: {_header_complaint(header)}")
    has_thread = header == HEADER_WITH_THREAD
    colon_times = False
    if len(lines) > 1:
        fields = lines[1].split(b",")
        time_field = fields[1 if has_thread else 0] if len(fields) > 1 else b""
        colon_times = time_field.count(b":") == 3
    return _Layout(has_thread=has_thread, colon_times=colon_times)


def _header_complaint(header: str) -> str:
    shown = header if len(header) <= 60 else header[:57] + "..."
    close = closest(header, KNOWN_HEADERS, n=1, cutoff=0.6)
    if close:
        return f"header '{shown}' is misspelt; expected '{close[0]}'"
    return (
        f"no RMM log header (found '{shown}'); expected '{HEADER_WITH_THREAD}' "
        f"(or '{HEADER_WITHOUT_THREAD}' for logs before mid-2020)"
    )


# --------------------------------------------------------------------------- reading


class _NeedsTolerantRead(Exception):
    """The fast read met something it cannot locate; read again on the tolerant path."""


_CSV_PARSE = pa_csv.ParseOptions(quote_char=False, ignore_empty_lines=False)
_CSV_CONVERT: dict[str, Any] = {
    "null_values": [],  # an empty field is bad, never null
    "strings_can_be_null": False,
    "quoted_strings_can_be_null": False,
}


def _read_fast(path: Path, layout: _Layout) -> pa.Table:
    """All threads, typed columns; any malformed row or unconvertible value, or damaged gzip,
    raises `_NeedsTolerantRead` (pyarrow cannot say on which line)."""
    text = pa.dictionary(pa.int32(), pa.binary())
    types: dict[str, Any] = {"Thread": pa.int64(), "Action": text, "Pointer": text}
    types |= {"Size": pa.int64(), "Stream": text}
    types["Time"] = pa.binary() if layout.colon_times else pa.time64("us")
    # A plain file goes to pyarrow by name: its native reader is faster than a Python file.
    with _open(path) if _is_gzip(path) else contextlib.nullcontext(str(path)) as stream:
        try:
            table = pa_csv.read_csv(
                stream,
                read_options=pa_csv.ReadOptions(
                    column_names=layout.names, skip_rows=1, block_size=1 << 22
                ),
                parse_options=_CSV_PARSE,  # a malformed row raises
                convert_options=pa_csv.ConvertOptions(column_types=types, **_CSV_CONVERT),
            )
        except pa.ArrowException as err:
            raise _NeedsTolerantRead from err
        if getattr(getattr(stream, "raw", None), "damage", None) is not None:
            raise _NeedsTolerantRead
    return table


@dataclass
class _Lines:
    """The tolerant path's split of a file into rows that have the right number of fields
    (their bytes and line numbers) and lines that do not (line number and reason)."""

    good: list[np.ndarray] = field(default_factory=list)
    good_lines: list[Int64Array] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)
    bad_count: int = 0
    lines_seen: int = 1  # the header
    damage: tuple[int, str] | None = None  # where a damaged gzip ends the file, and why

    def add_block(self, block: bytes, fields: int) -> None:
        """Split one block of whole lines (ending in \\n), vectorised."""
        buf = np.frombuffer(block, np.uint8)
        ends = np.flatnonzero(buf == ord("\n"))
        starts = np.concatenate(([0], ends[:-1] + 1))
        commas = np.flatnonzero(buf == ord(","))
        found = np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1
        numbers = self.lines_seen + 1 + np.arange(len(ends))
        self.lines_seen += len(ends)
        too_long = ends - starts > MAX_LINE_BYTES
        good = (found == fields) & ~too_long
        for k in np.flatnonzero(~good):
            self.bad_count += 1
            if len(self.bad) < MAX_KEPT_SKIPS:
                empty = not block[starts[k] : ends[k]].strip()
                why = "empty line" if empty else f"expected {fields} fields, found {found[k]}"
                if too_long[k]:
                    why = f"line longer than {MAX_LINE_BYTES:,} bytes"
                self.bad.append((int(numbers[k]), why))
        kept = buf if good.all() else buf[np.repeat(good, ends - starts + 1)]
        # pyarrow ends a row at a lone \r too; make it an ordinary (invalid) byte instead.
        carriage = np.flatnonzero(kept == ord("\r"))
        lone = carriage[kept[np.minimum(carriage + 1, len(kept) - 1)] != ord("\n")]
        if len(lone):
            kept = kept.copy()
            kept[lone] = ord("?")
        self.good.append(kept)
        self.good_lines.append(numbers[good])


def _split_lines(path: Path, fields: int, *, block_bytes: int = 1 << 26) -> _Lines:
    """Read the file in blocks of whole lines (after the header) and split them."""
    lines = _Lines()
    with _open(path) as stream:
        stream.readline(1 << 16)  # the header, checked already
        carry = b""
        while True:
            chunk = stream.read(block_bytes)
            if chunk:
                cut = chunk.rfind(b"\n") + 1
                # Checked before joining: a line with no end costs no copy of itself.
                if len(carry) + len(chunk) - cut > _ENDLESS_LINE_BYTES:
                    line = lines.lines_seen + chunk.count(b"\n", 0, cut) + 1
                    raise LogFormatError(
                        f"{path}:{line}: a line with no end after "
                        f"{_ENDLESS_LINE_BYTES >> 20} MiB: not an allocation log"
                    )
                if cut:
                    block, carry = carry + chunk[:cut], chunk[cut:]
                else:
                    block, carry = b"", carry + chunk
            else:
                block, carry = (carry + b"\n" if carry else b""), b""
            if block:
                lines.add_block(block, fields)
            if not chunk:
                break
        damage = getattr(getattr(stream, "raw", None), "damage", None)
    if damage is not None:
        lines.bad_count += 1
        read = f"read up to line {lines.lines_seen:,}" if lines.lines_seen > 1 else "no row read"
        lines.damage = (lines.lines_seen + 1, f"{damage}; {read}, the rest is lost")
        lines.bad.append(lines.damage)
    return lines


def _read_tolerant(path: Path, layout: _Layout) -> tuple[pa.Table, Int64Array, _Lines]:
    """Every row with the right number of fields, as raw bytes, with its line number."""
    lines = _split_lines(path, len(layout.names))
    good = pa.py_buffer(np.concatenate(lines.good) if lines.good else b"")
    numbers = np.concatenate(lines.good_lines) if lines.good_lines else np.zeros(0, np.int64)
    lines.good, lines.good_lines = [], []
    try:
        table = pa_csv.read_csv(
            pa.BufferReader(good),
            read_options=pa_csv.ReadOptions(column_names=layout.names, block_size=1 << 22),
            parse_options=_CSV_PARSE,
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.binary() for name in layout.names}, **_CSV_CONVERT
            ),
        )
    except pa.ArrowException as err:  # not expected: every row has the right field count
        raise LogFormatError(f"{path}: cannot be read as CSV: {_first_line(err)}") from err
    if table.num_rows != len(numbers):
        raise LogFormatError(f"{path}: cannot be read as CSV (rows and lines disagree)")
    return table, numbers, lines


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


# --------------------------------------------------------------------------- conversion


@dataclass
class _FileEvents:
    """One file's good rows as numpy columns, plus what was skipped."""

    columns: dict[str, np.ndarray]
    skipped: list[SkippedRow]
    skipped_count: int


def _right_aligned(arr: pa.Array, width: int, fill: int) -> tuple[np.ndarray, Int64Array]:
    """Each value of a binary array as one row of a (n, width) byte matrix, right-aligned and
    padded on the left with `fill`; values longer than `width` keep their last bytes (the
    caller rejects them by length)."""
    n = len(arr)
    if n == 0:
        return np.zeros((0, width), np.uint8), np.zeros(0, np.int64)
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, n + 1, arr.offset * 4).astype(np.int64)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    start, stop = int(offsets[0]), int(offsets[-1])
    padded = np.full(stop - start + width, fill, np.uint8)
    padded[width:] = data[start:stop]
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)
    matrix = windows[offsets[1:] - start]  # the window ending at each value's last byte
    short = lengths < width
    if short.any():
        columns = np.arange(width)
        matrix[short] = np.where(
            columns[None, :] < (width - lengths[short])[:, None], fill, matrix[short]
        )
    return matrix, lengths


_HEX_VALUE = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_VALUE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX_VALUE[_c] = 10 + _i


def parse_hex(arr: pa.Array) -> tuple[UInt64Array, BoolArray]:
    """`0x`-prefixed hex (1 to 16 digits), `(nil)` or `0` -> uint64, plus a bad-value mask."""
    arr = arr.cast(pa.binary())
    width = 18  # "0x" + 16 digits
    matrix, lengths = _right_aligned(arr, width, ord("0"))
    rows = np.arange(len(arr))
    first = width - np.clip(lengths, 2, width)  # column of the "0x" prefix
    prefix_ok = (matrix[rows, first] == ord("0")) & ((matrix[rows, first + 1] | 0x20) == ord("x"))
    matrix[rows, first + 1] = ord("0")  # so that the prefix reads as leading zeros
    nibbles = _HEX_VALUE[matrix[:, 2:]]
    good_hex = prefix_ok & (nibbles != 255).all(axis=1) & (lengths >= 3) & (lengths <= width)
    is_nil = np.asarray(pc.equal(arr, b"(nil)").to_numpy(zero_copy_only=False), np.bool_)
    is_zero = np.asarray(pc.equal(arr, b"0").to_numpy(zero_copy_only=False), np.bool_)
    nibbles[~good_hex] = 0
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    values = np.ascontiguousarray(packed).view(">u8").ravel().astype(np.uint64)
    return values, ~(good_hex | is_nil | is_zero)


def parse_decimal(arr: pa.Array) -> tuple[Int64Array, BoolArray]:
    """1 to 18 ASCII digits -> int64, plus a bad-value mask (signs and spaces are bad)."""
    width = 18
    matrix, lengths = _right_aligned(arr.cast(pa.binary()), width, ord("0"))
    digits = matrix.astype(np.int64) - ord("0")
    bad = ((digits < 0) | (digits > 9)).any(axis=1) | (lengths < 1) | (lengths > width)
    digits[bad] = 0
    values = digits @ (10 ** np.arange(width - 1, -1, -1, dtype=np.int64))
    return values, bad


def parse_time_of_day(arr: pa.Array) -> tuple[Int64Array, BoolArray]:
    """`HH:MM:SS.ffffff` or `HH:MM:SS:ffffff` -> nanoseconds since midnight, plus a mask."""
    width = 15
    matrix, lengths = _right_aligned(arr.cast(pa.binary()), width, ord("0"))
    digits = matrix.astype(np.int64) - ord("0")
    digit_columns = [0, 1, 3, 4, 6, 7, 9, 10, 11, 12, 13, 14]
    digits_ok = ((digits[:, digit_columns] >= 0) & (digits[:, digit_columns] <= 9)).all(axis=1)
    separators_ok = (matrix[:, 2] == ord(":")) & (matrix[:, 5] == ord(":"))
    separators_ok &= (matrix[:, 8] == ord(".")) | (matrix[:, 8] == ord(":"))
    hours = digits[:, 0] * 10 + digits[:, 1]
    minutes = digits[:, 3] * 10 + digits[:, 4]
    seconds = digits[:, 6] * 10 + digits[:, 7]
    micros = digits[:, 9:15] @ (10 ** np.arange(5, -1, -1, dtype=np.int64))
    ranges_ok = (hours < 24) & (minutes < 60) & (seconds < 60)
    bad = ~(digits_ok & separators_ok & ranges_ok & (lengths == width))
    nanos = ((hours * 3600 + minutes * 60 + seconds) * 1_000_000 + micros) * 1000
    nanos[bad] = 0
    return nanos, bad


def parse_address(arr: pa.Array) -> tuple[UInt64Array, BoolArray]:
    """Like `parse_hex`, but arrow's own integer cast (which reads `0x` hex) does the work;
    `parse_hex` runs only when some value does not cast (a damaged log)."""
    try:
        text = arr.cast(pa.string())  # fails on bytes that are not UTF-8
        nil = pc.equal(text, "(nil)")
        zero_texts = pc.if_else(nil, "0", text) if pc.any(nil).as_py() else text
        values = pc.cast(zero_texts, pa.uint64()).to_numpy(zero_copy_only=False)
    except pa.ArrowException:
        return parse_hex(arr)
    # The cast also reads plain decimal, which RMM never writes: such a value is bad.
    prefixed = pc.or_(pc.starts_with(text, "0x"), pc.starts_with(text, "0X"))
    good = pc.or_(prefixed, pc.or_(nil, pc.equal(text, "0")))
    return np.asarray(values, np.uint64), ~good.to_numpy(zero_copy_only=False)


def _action_codes(arr: pa.Array) -> tuple[npt.NDArray[np.int8], BoolArray]:
    raw = arr.cast(pa.binary()).to_pylist()  # a dictionary: a handful of distinct values
    codes = np.array([_ACTION_CODES.get(v, -1) for v in raw], np.int8)
    return codes, codes < 0


Parser = Callable[[pa.Array], "tuple[np.ndarray, BoolArray]"]
# A column converter writes one batch's values into `out` (a slice of the output column)
# and returns the mask of bad values, or None when every value is good.
Converter = Callable[[pa.Array, np.ndarray], "BoolArray | None"]


def _any_bad(bad: BoolArray) -> BoolArray | None:
    return bad if bad.any() else None


def _through_dictionary(parse: Parser) -> Converter:
    """Parse each distinct value once: logs repeat pointers, streams and actions a lot."""

    def convert(arr: pa.Array, out: np.ndarray) -> BoolArray | None:
        if not isinstance(arr, pa.DictionaryArray):
            arr = arr.dictionary_encode()
        values, bad = parse(arr.dictionary)
        if len(values) == 1 and arr.null_count == 0:  # one stream, say: no gather needed
            out.fill(values[0])
            return np.ones(len(out), np.bool_) if bad[0] else None
        indices = arr.indices.to_numpy(zero_copy_only=False)
        np.take(values.astype(out.dtype, copy=False), indices, out=out)
        # Gather the row mask only when some distinct value is bad (rare).
        return bad[indices] if bad.any() else None

    return convert


# The tolerant path reads every column as bytes; where the fast path let arrow's CSV reader
# convert a column (Thread and Size as int64, Time as time64), the tolerant path must accept
# exactly what that reader accepts, or a row's fate would hang on whether some other row of
# the file is damaged. Arrow's reader trims spaces and tabs around numbers and times, reads
# integers as decimal or 0x-hex, and times as HH:MM:SS with an optional fraction.


def _trimmed_text(arr: pa.Array) -> tuple[pa.Array, BoolArray]:
    """The values as strings without surrounding spaces and tabs, and the mask of values that
    are not ASCII (emptied here: no number or time has such bytes, so they are bad)."""
    binary = arr.cast(pa.binary())
    data = binary.buffers()[2]
    bytes_ = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    offsets = np.frombuffer(binary.buffers()[1], np.int32, len(binary) + 1, binary.offset)
    high = np.flatnonzero(bytes_ >= 0x80)
    non_ascii = np.zeros(len(binary), np.bool_)
    if len(high):  # the value each high byte falls in
        owners = np.searchsorted(offsets, high, side="right") - 1
        non_ascii[owners[(owners >= 0) & (owners < len(binary))]] = True
        binary = pc.if_else(pa.array(non_ascii), b"", binary)
    return pc.utf8_trim(binary.cast(pa.string()), characters=" \t"), non_ascii


def _integers(arr: pa.Array, out: np.ndarray) -> BoolArray | None:
    if pa.types.is_integer(arr.type):  # the fast read parsed it already
        out[:] = arr.to_numpy(zero_copy_only=False)
        return _any_bad(out < 0)
    values, bad = parse_integers_like_arrow(arr)
    out[:] = values
    return _any_bad(bad)


# A superset of what arrow's integer conversion accepts (after trimming spaces and tabs).
_ARROW_INTEGER = r"^[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)$"


def parse_integers_like_arrow(arr: pa.Array) -> tuple[Int64Array, BoolArray]:
    """Bytes -> int64 as arrow's CSV reader converts them, plus a bad-value mask (negative
    values are bad: no thread id or size is)."""
    text, non_ascii = _trimmed_text(arr)
    with contextlib.suppress(pa.ArrowException):
        values = pc.cast(text, pa.int64()).to_numpy(zero_copy_only=False)
        return values, (values < 0) | non_ascii
    # Some value does not convert: plain digits the vectorised way, the rest one by one,
    # but only those that look like a number at all (a damaged file can have millions).
    values, bad = parse_decimal(text)
    rest = np.flatnonzero(bad & ~non_ascii)
    if len(rest):
        numeric = pc.match_substring_regex(text.take(pa.array(rest)), _ARROW_INTEGER)
        rest = rest[numeric.to_numpy(zero_copy_only=False)]
    for row in rest:
        with contextlib.suppress(pa.ArrowException):
            values[row] = pa.array([text[int(row)].as_py()]).cast(pa.int64())[0].as_py()
            bad[row] = values[row] < 0
    return values, bad


def _times(arr: pa.Array, out: np.ndarray) -> BoolArray | None:
    if pa.types.is_time(arr.type):  # the fast read parsed it already
        micros = arr.cast(pa.time64("us")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        np.multiply(micros, 1000, out=out)
        return None
    # Arrow reads HH:MM:SS, HH:MM:SS. and 1 to 6 fraction digits: pad to HH:MM:SS.ffffff.
    text, non_ascii = _trimmed_text(arr)
    lengths = pc.utf8_length(text)
    dotted = pc.if_else(pc.equal(lengths, 8), pc.binary_join_element_wise(text, ".", ""), text)
    padded = pc.utf8_rpad(dotted, width=15, padding="0")
    nanos, bad = parse_time_of_day(padded)
    bad |= pc.greater(lengths, 15).to_numpy(zero_copy_only=False) | non_ascii
    # parse_time_of_day also takes the older HH:MM:SS:ffffff, which arrow reads as bad.
    dot = pc.equal(pc.utf8_slice_codeunits(padded, 8, 9), ".")
    bad |= ~dot.to_numpy(zero_copy_only=False)
    nanos[bad] = 0
    out[:] = nanos
    return _any_bad(bad)


def _colon_times(arr: pa.Array, out: np.ndarray) -> BoolArray | None:
    """HH:MM:SS:ffffff (RMM before 21.06): read as bytes on both paths, strictly."""
    nanos, bad = parse_time_of_day(arr)
    out[:] = nanos
    return _any_bad(bad)


# Output column <- (CSV column, converter).
_CONVERTERS: dict[str, tuple[str, Converter]] = {
    "thread": ("Thread", _integers),
    "time_ns": ("Time", _times),
    "action": ("Action", _through_dictionary(_action_codes)),
    "pointer": ("Pointer", _through_dictionary(parse_address)),
    "size_bytes": ("Size", _integers),
    "stream": ("Stream", _through_dictionary(parse_address)),
}


def _empty(rows: int, dtype: str) -> np.ndarray:
    """An uninitialised column in memory from arrow's allocator, the one that just read the
    file: it hands out memory the way pyarrow's own columns get it (numpy's first touch of
    fresh pages was the larger cost of converting on our VMs)."""
    dt = np.dtype(dtype)
    buffer = pa.allocate_buffer(max(rows * dt.itemsize, 1))
    return np.frombuffer(buffer, dt, rows)


def _convert(
    table: pa.Table, layout: _Layout, numbers: Int64Array | None, file_index: int
) -> tuple[dict[str, np.ndarray], BoolArray, dict[str, BoolArray]]:
    """Every column converted to its numpy type, the mask of rows with a bad value, and per
    CSV column that had any, the mask of its bad values; `line` is `numbers`, or (None) line
    2 onwards in order, and `file_index` is constant.

    Record batches are converted on a thread pool: numpy and pyarrow release the GIL, and
    on a small machine this is what keeps loading close to pyarrow's own parsing speed.
    Converters write into the output columns directly, so no batch is copied twice."""
    n = table.num_rows
    out = {name: _empty(n, COLUMNS[name]) for name in (*_CONVERTERS, "line", "file_index")}
    bad = np.zeros(n, np.bool_)  # zero pages cost nothing until a bad row is written
    bad_by_column: dict[str, BoolArray] = {}
    lock = threading.Lock()
    if not layout.has_thread:
        out["thread"][:] = 0
    batches = table.to_batches()
    starts = np.concatenate(([0], np.cumsum([b.num_rows for b in batches])))

    converters = dict(_CONVERTERS)
    if layout.colon_times:
        converters["time_ns"] = ("Time", _colon_times)

    def convert(k: int) -> None:
        batch, rows = batches[k], slice(int(starts[k]), int(starts[k + 1]))
        out["file_index"][rows] = file_index
        if numbers is None:  # the fast read: every line after the header is a row
            out["line"][rows] = np.arange(rows.start + 2, rows.stop + 2)
        else:
            out["line"][rows] = numbers[rows]
        for name, (csv_name, column_converter) in converters.items():
            if csv_name not in batch.schema.names:
                continue
            bad_values = column_converter(batch.column(csv_name), out[name][rows])
            if bad_values is not None:
                bad[rows] |= bad_values
                with lock:
                    column_bad = bad_by_column.setdefault(csv_name, np.zeros(n, np.bool_))
                column_bad[rows] = bad_values

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(convert, range(len(batches))))
    return out, bad, bad_by_column


def unwrap_midnight(time_ns: Int64Array, *, block_rows: int = 1 << 16) -> Int64Array:
    """Time of day -> time since the first row's midnight, in place (and returned).

    A step back of more than 12 h is taken as the next day; a step forward of more than
    12 h as a late row stamped before the midnight already passed."""
    jumps: list[tuple[int, int]] = []  # (row, +1 or -1 day from that row on)
    # Steps are found a cache-sized block at a time, in two reused buffers.
    steps_ns, big = np.empty(block_rows, np.int64), np.empty(block_rows, np.bool_)
    for start in range(1, len(time_ns), block_rows):
        stop = min(start + block_rows, len(time_ns))
        steps = np.subtract(
            time_ns[start:stop], time_ns[start - 1 : stop - 1], out=steps_ns[: stop - start]
        )
        np.abs(steps, out=steps)
        if not np.greater(steps, _HALF_DAY_NS, out=big[: stop - start]).any():
            continue
        for found in start + np.flatnonzero(big[: stop - start]):
            jumps.append((int(found), 1 if time_ns[found] < time_ns[found - 1] else -1))
    # Each stretch between two jumps is shifted once, so a log of many days costs one pass.
    days = 0
    ends = [row for row, _ in jumps[1:]] + [len(time_ns)] if jumps else []
    for (row, step), end in zip(jumps, ends, strict=True):
        days += step
        if days:
            time_ns[row:end] += days * DAY_NS
    return time_ns


# --------------------------------------------------------------------------- why a row is bad

_WHAT_IS_EXPECTED = {
    "Thread": "is not a non-negative integer",
    "Time": "is not a time of day HH:MM:SS.ffffff",
    "Action": "is not allocate, free or allocate failure",
    "Pointer": "is not hex (0x...) or (nil)",
    "Size": "is not a non-negative integer",
    "Stream": "is not hex (0x...) or 0",
}


def _why_bad(table: pa.Table, row: int, bad_by_column: dict[str, BoolArray]) -> str:
    """The reason for one bad row: its first value that the conversion refused."""
    values = {name: column[0] for name, column in table.slice(row, 1).to_pydict().items()}
    if all(value in (b"", "") for value in values.values()):
        return "empty line"
    for name, value in values.items():
        if name in bad_by_column and bad_by_column[name][row]:
            text = value if isinstance(value, bytes) else str(value).encode()
            return f"{name.lower()} '{_decode(text)}' {_WHAT_IS_EXPECTED[name]}"
    return "unreadable row"


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", "backslashreplace")
    return text if len(text) <= 40 else text[:37] + "..."


# --------------------------------------------------------------------------- one file


def load_log_file(path: Path, file_index: int, *, source: str | None = None) -> _FileEvents:
    """One file's rows, converted and validated; bad rows skipped with their line numbers."""
    name = source or str(path)
    with _open(path) as stream:
        layout = _read_layout(name, stream)
    try:
        table = _read_fast(path, layout)
        numbers: Int64Array | None = None
        lines = _Lines()
    except _NeedsTolerantRead:
        table, numbers, lines = _read_tolerant(path, layout)
    events, bad, bad_by_column = _convert(table, layout, numbers, file_index)
    implausible = (events["size_bytes"] > MAX_PLAUSIBLE_BYTES) & ~bad
    bad |= implausible

    skipped = [SkippedRow(name, line, reason) for line, reason in lines.bad]
    bad_rows = np.flatnonzero(bad)
    for row in bad_rows[:MAX_KEPT_SKIPS]:
        line = int(events["line"][row])
        if implausible[row]:
            size = int(events["size_bytes"][row])
            why = f"size {size:,} is more than any device holds (over {MAX_PLAUSIBLE_BYTES:,})"
        else:
            why = _why_bad(table, int(row), bad_by_column)
        skipped.append(SkippedRow(name, line, why))
    skipped.sort(key=lambda s: s.line)
    del table

    if len(bad_rows):
        keep = ~bad
        events = {key: values[keep] for key, values in events.items()}
    unwrap_midnight(events["time_ns"])
    kept = skipped[:MAX_KEPT_SKIPS]
    if lines.damage is not None and kept[-1].line != lines.damage[0]:  # always said
        kept[-1] = SkippedRow(name, *lines.damage)
    return _FileEvents(events, kept, lines.bad_count + len(bad_rows))


# --------------------------------------------------------------------------- many files


def load_log(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    strict: bool = False,
    progress: ProgressCallback | None = None,
) -> AllocationLog:
    """Load one or more log files into one `AllocationLog` (file order, then row order).

    `paths` is one path or a list of them.

    Lenient (default): rows that cannot be read are skipped, counted and kept (the first
    `MAX_KEPT_SKIPS`) with their line numbers. Strict: the first such row raises
    `BadLogRowError` naming file and line. Unreadable files (missing, empty, no header,
    `.gz` that is not gzip) raise in both modes.
    """
    # A lone path is one file, never a sequence of one-character names.
    files = find_log_files([paths] if isinstance(paths, (str, os.PathLike)) else paths)
    if len(files) > np.iinfo(np.int16).max:
        raise ReplayUsageError(f"too many log files ({len(files)}); at most 32767 at once")
    total_bytes = sum(f.stat().st_size for f in files)
    done_bytes = 0
    parts: list[_FileEvents] = []
    sources: list[str] = []
    recordings: list[Recording] = []
    for path in files:
        if progress:
            progress(done_bytes, total_bytes, path.name)
        # A PyTorch snapshot is recognised by its content: one source per device it holds.
        if is_snapshot(path):
            for device in read_snapshot(path):
                device.columns["file_index"] = np.full(
                    len(device.columns["line"]), len(sources), dtype=np.int16
                )
                file_part = _FileEvents(device.columns, device.skipped, device.skipped_count)
                parts.append(_checked_strict(file_part, strict))
                sources.append(device.recording.source)
                recordings.append(device.recording)
        else:
            parts.append(_checked_strict(load_log_file(path, len(sources)), strict))
            sources.append(str(path))
        done_bytes += path.stat().st_size
    if progress:
        progress(total_bytes, total_bytes, "")
    _check_total(parts, sources)
    log = _join(parts, sources)
    log.recordings = recordings
    _refuse_nothing_readable(log)
    return log


def _refuse_nothing_readable(log: AllocationLog) -> None:
    """Rows were skipped and none read (a snapshot's line-0 rows are blocks allocated before
    recording, not rows it holds): nothing to answer about, in every command."""
    if log.skipped_count and not bool((log.events["line"] > 0).any()):
        raise NothingToAnswer(log.skipped_count, log.skipped_places())


def _checked_strict(part: _FileEvents, strict: bool) -> _FileEvents:
    if strict and part.skipped_count:
        first = part.skipped[0]
        more = part.skipped_count - 1
        tail = f" (and {more} more bad rows)" if more else ""
        raise BadLogRowError(f"{first.source}:{first.line}: {first.reason}{tail}")
    return part


def _check_total(parts: list[_FileEvents], sources: list[str]) -> None:
    """Every sum of sizes fits int64 when all allocations together do (sizes are >= 0)."""
    total = sum(
        float(part.columns["size_bytes"][part.columns["action"] == ALLOCATE].sum(dtype=np.float64))
        for part in parts
    )
    if total >= MAX_TOTAL_BYTES:
        names = ", ".join(sources)
        raise LogFormatError(
            f"{names}: the allocations add up to more than 2**62 bytes; not a log of a real device"
        )


def _join(parts: list[_FileEvents], sources: list[str]) -> AllocationLog:
    columns: dict[str, np.ndarray] = {}
    for name, dtype in COLUMNS.items():
        pieces = [part.columns[name] for part in parts]
        joined = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        columns[name] = joined.astype(dtype, copy=False)
    events = pd.DataFrame(columns, copy=False)
    skipped = [row for part in parts for row in part.skipped][:MAX_KEPT_SKIPS]
    return AllocationLog(
        events=events,
        sources=sources,
        skipped=skipped,
        skipped_count=sum(part.skipped_count for part in parts),
    )
