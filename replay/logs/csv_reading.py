"""The two ways a log file's rows are read into an arrow table.

The fast path hands the whole file to pyarrow's multithreaded CSV reader with typed columns;
it cannot say where a row was that it could not convert, so on any such trouble (or a
damaged gzip) the file is read again on the tolerant path: numpy splits the bytes into
lines and counts their fields (so every line keeps its number), and pyarrow reads the
well-formed ones with every column as raw bytes, for the column parsers
(replay/logs/csv_columns.py) to validate. Lines end at \n (a \r before it is dropped).

Arrow's threads never touch a Python object. Its threaded reader keeps reading ahead on its
own threads after a read fails (reader.cc: no child stop token), and a thread that still
holds a Python file, or a buffer that Python owns, when the interpreter exits must take the
GIL to let it go: Python ends that thread (pthread_exit) inside a noexcept destructor, and
the process aborts ("terminate called without an active exception", exit 134). So both
paths hand arrow only what arrow owns: the file opened by arrow (a gzip one inflated by
arrow's own gzip stream), and the tolerant path's rows copied into a buffer arrow allocated.
A file of which no row has the right number of fields never reaches arrow at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from ..errors import LogFormatError
from .csv_columns import Int64Array
from .csv_header import CsvLayout
from .events import MAX_KEPT_SKIPS
from .gzip_salvage import is_gzip, open_log

#: Longer lines are skipped as unreadable (pyarrow cannot read a row longer than its block).
MAX_LINE_BYTES = 1 << 20
_ENDLESS_LINE_BYTES = 64 << 20


class NeedsTolerantRead(Exception):
    """The fast read met something it cannot locate; read again on the tolerant path."""


_CSV_PARSE = pa_csv.ParseOptions(quote_char=False, ignore_empty_lines=False)
_CSV_CONVERT: dict[str, Any] = {
    "null_values": [],  # an empty field is bad, never null
    "strings_can_be_null": False,
    "quoted_strings_can_be_null": False,
}


def read_fast(path: Path, layout: CsvLayout) -> pa.Table:
    """All threads, typed columns; any malformed row or unconvertible value, or damaged gzip,
    raises `NeedsTolerantRead` (pyarrow cannot say on which line)."""
    text = pa.dictionary(pa.int32(), pa.binary())
    types: dict[str, Any] = {"Thread": pa.int64(), "Action": text, "Pointer": text}
    types |= {"Size": pa.int64(), "Stream": text}
    types["Time"] = pa.binary() if layout.colon_times else pa.time64("us")
    # Arrow's own streams (the module docstring says why): a damaged gzip raises here, and
    # the tolerant path reads it up to its damage and says where that is.
    compression = "gzip" if is_gzip(path) else None
    try:
        with pa.input_stream(str(path), compression=compression) as stream:
            return pa_csv.read_csv(
                stream,
                read_options=pa_csv.ReadOptions(
                    column_names=layout.names, skip_rows=1, block_size=1 << 22
                ),
                parse_options=_CSV_PARSE,  # a malformed row raises
                convert_options=pa_csv.ConvertOptions(column_types=types, **_CSV_CONVERT),
            )
    except (pa.ArrowException, OSError) as err:  # arrow's gzip errors are OSError
        raise NeedsTolerantRead from err


@dataclass
class SplitLines:
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


def split_lines(path: Path, fields: int, *, block_bytes: int = 1 << 26) -> SplitLines:
    """Read the file in blocks of whole lines (after the header) and split them."""
    lines = SplitLines()
    with open_log(path) as stream:
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


def read_tolerant(path: Path, layout: CsvLayout) -> tuple[pa.Table, Int64Array, SplitLines]:
    """Every row with the right number of fields, as raw bytes, with its line number."""
    lines = split_lines(path, len(layout.names))
    good = _arrow_owned(lines.good)
    numbers = np.concatenate(lines.good_lines) if lines.good_lines else np.zeros(0, np.int64)
    lines.good, lines.good_lines = [], []
    if not good.size:  # no row to read (arrow would say "Empty CSV file")
        empty = pa.array([], pa.binary())
        return pa.table({name: empty for name in layout.names}), numbers, lines
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


def _arrow_owned(blocks: list[np.ndarray]) -> pa.Buffer:
    """The blocks' bytes, one after another, in a buffer arrow allocated (no Python object
    for arrow's threads to let go of)."""
    buffer = pa.allocate_buffer(sum(len(block) for block in blocks))
    np.concatenate(blocks or [np.zeros(0, np.uint8)], out=np.frombuffer(buffer, np.uint8))
    return buffer


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
