"""The column parsers: a log's CSV columns converted to the event columns, vectorised.

Every conversion is a numpy or arrow operation over a whole record batch, with no Python
object per row; the text columns (Action, Pointer, Stream) are parsed once per distinct
value. On the tolerant path every column arrives as raw bytes and is validated by the rules
arrow's reader applies on the fast path (numbers and times may have spaces around them;
integers may be 0x-hex; a time may leave out its fraction), so a row fares the same
whichever path reads it. Times are unwrapped at midnight per file (`unwrap_midnight`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .events import ALLOCATE, ALLOCATE_FAILURE, COLUMNS, FREE

if TYPE_CHECKING:
    from .csv_header import CsvLayout

DAY_NS = 86_400 * 1_000_000_000
_HALF_DAY_NS = DAY_NS // 2
_ACTION_CODES = {b"allocate": ALLOCATE, b"free": FREE, b"allocate failure": ALLOCATE_FAILURE}

BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]


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


def convert_columns(
    held: list[pa.Table], layout: CsvLayout, numbers: Int64Array | None, file_index: int
) -> tuple[dict[str, np.ndarray], BoolArray, dict[str, BoolArray], pa.Table]:
    """Every column converted to its numpy type, the mask of rows with a bad value, per CSV
    column that had any, the mask of its bad values, and the table left: the columns that
    had a bad value (for `why_bad`); `line` is `numbers`, or (None) line 2 onwards in order,
    and `file_index` is constant.

    The table is handed over in `held` (emptied here), so that each CSV column is freed as
    soon as it is converted and its memory serves the next output column: the table and the
    columns are never held whole together (20 M rows: 0.7 GB and 1 GB).

    Each column's record batches are converted on a thread pool: numpy and pyarrow release
    the GIL, and on a small machine this is what keeps loading close to pyarrow's own
    parsing speed. Converters write into the output columns directly, so no batch is copied
    twice."""
    table = held.pop()
    n = table.num_rows
    bad = np.zeros(n, np.bool_)  # zero pages cost nothing until a bad row is written
    bad_by_column: dict[str, BoolArray] = {}
    lock = threading.Lock()
    out: dict[str, np.ndarray] = {}
    converters = dict(_CONVERTERS)
    if layout.colon_times:
        converters["time_ns"] = ("Time", _colon_times)
    if not layout.has_thread:
        out["thread"] = np.zeros(n, COLUMNS["thread"])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for name, (csv_name, column_converter) in converters.items():
            if csv_name not in table.column_names:
                continue
            column = out[name] = _empty(n, COLUMNS[name])
            chunks = table.column(csv_name).chunks
            starts = np.concatenate(([0], np.cumsum([len(c) for c in chunks])))

            def convert(k: int, csv_name: str = csv_name, converter: Converter = column_converter,
                        column: np.ndarray = column, chunks: list[pa.Array] = chunks,
                        starts: np.ndarray = starts) -> None:  # fmt: skip
                rows = slice(int(starts[k]), int(starts[k + 1]))
                bad_values = converter(chunks[k], column[rows])
                if bad_values is not None:
                    bad[rows] |= bad_values
                    with lock:
                        column_bad = bad_by_column.setdefault(csv_name, np.zeros(n, np.bool_))
                    column_bad[rows] = bad_values

            list(pool.map(convert, range(len(chunks))))
            del chunks, convert
            if csv_name not in bad_by_column:  # nothing to say about it: free it now
                table = table.drop_columns([csv_name])
                pa.default_memory_pool().release_unused()
    # Made last, once the CSV columns are freed.
    out["file_index"] = np.full(n, file_index, COLUMNS["file_index"])
    # The fast read: every line after the header is a row.
    out["line"] = np.arange(2, n + 2, dtype=COLUMNS["line"]) if numbers is None else numbers
    return out, bad, bad_by_column, table


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


_WHAT_IS_EXPECTED = {
    "Thread": "is not a non-negative integer",
    "Time": "is not a time of day HH:MM:SS.ffffff",
    "Action": "is not allocate, free or allocate failure",
    "Pointer": "is not hex (0x...) or (nil)",
    "Size": "is not a non-negative integer",
    "Stream": "is not hex (0x...) or 0",
}


def why_bad(table: pa.Table, row: int, bad_by_column: dict[str, BoolArray], columns: int) -> str:
    """The reason for one bad row: its first value that the conversion refused. `table`
    holds at least the columns with a bad value; `columns` is how many the file has (an
    empty line has a bad value in each)."""
    values = {name: column[0] for name, column in table.slice(row, 1).to_pydict().items()}
    if len(values) == columns and all(value in (b"", "") for value in values.values()):
        return "empty line"
    for name, value in values.items():
        if name in bad_by_column and bad_by_column[name][row]:
            text = value if isinstance(value, bytes) else str(value).encode()
            return f"{name.lower()} '{_decode(text)}' {_WHAT_IS_EXPECTED[name]}"
    return "unreadable row"


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", "backslashreplace")
    return text if len(text) <= 40 else text[:37] + "..."
