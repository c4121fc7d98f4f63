"""The loader never crashes: arbitrary bytes and mutated real logs end in a clean result or a
`LogFormatError`, and whatever loads is consistent with the lines of the file."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipmem._core.skipped_input import NothingToAnswer
from hipmem.replay.errors import LogFormatError
from hipmem.replay.logs.events import AllocationLog
from hipmem.replay.logs.loader import load_log
from tests.log_reference import DATA_LOGS

# A Thread-era log with every anomaly, failures, (nil) pointers and hex streams.
SEED_LOG = (DATA_LOGS / "anomalies.csv").read_bytes() + (
    DATA_LOGS / "era2024_printf.csv"
).read_bytes().split(b"\n", 1)[1]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load(content: bytes, name: str, *, strict: bool = False, plain: bytes | None = None) -> None:
    """Load `content` saved as `name`; `plain` is the text it decompresses to, if gzip."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(content)
        try:
            log = load_log([path], strict=strict)
        except LogFormatError as err:
            assert str(err).startswith(str(path))  # names the file
            assert "\n" not in str(err)  # one line
            return
        except NothingToAnswer as err:  # rows were skipped and none was read
            assert str(err).startswith("nothing to answer:")
            assert str(path) in str(err)  # names the file's first skipped rows
            assert "\n" not in str(err)
            return
        lines = (content if plain is None else plain).count(b"\n") + 1
        events = log.events
        assert len(events) + log.skipped_count <= lines
        assert events["line"].is_monotonic_increasing
        assert ((events["line"] >= 2) & (events["line"] <= lines)).all()
        assert all(2 <= s.line <= lines + 1 for s in log.skipped)
        assert not any(s.reason == "unreadable row" for s in log.skipped)
        if strict:
            assert log.skipped_count == 0


@FUZZ
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(data: bytes) -> None:
    _load(data, "x.csv")
    _load(data, "x.csv.gz")


@FUZZ
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_after_a_valid_header(data: bytes) -> None:
    _load(b"Thread,Time,Action,Pointer,Size,Stream\n" + data, "x.csv")
    _load(b"Time,Action,Pointer,Size,Stream\n" + data, "x.csv", strict=True)


@FUZZ
@given(
    st.lists(
        st.tuples(st.integers(0, len(SEED_LOG) - 1), st.integers(0, 8), st.binary(max_size=12)),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_mutated_logs(edits: list[tuple[int, int, bytes]], compress: bool) -> None:
    data = bytearray(SEED_LOG)
    for at, cut, insert in edits:
        data[at : at + cut] = insert
    content = bytes(data)
    if compress:
        packed = gzip.compress(content)
        cut_packed = packed[: max(20, len(packed) - edits[0][1])]  # maybe truncated
        _load(cut_packed, "m.csv.gz", plain=content)
    _load(content, "m.csv")
    _load(content, "m.csv", strict=True)


# Values arrow's CSV reader converts (the fast path) next to ones it refuses: each row must
# fare the same whether or not another line of the file sends the loader down the tolerant
# path (which reads every column as bytes and converts them itself).
_NUMBERS = ["1", " 2", "3\t", "0x1f", "-0", "007", "-4", "x", "", "12345678901234567890"]
_TIMES = [
    "10:00:00.000001", " 10:00:01.000000", "10:00:02", "10:00:03.", "10:00:04.5",
    "10:00:05.1234567", "9:00:00.000000", "10:00:06:000001", "24:00:00.000000", "",
]  # fmt: skip
_ROW = st.tuples(
    st.sampled_from(_NUMBERS),
    st.sampled_from(_TIMES),
    st.sampled_from(["allocate", "free", "allocate failure", "alloc"]),
    st.sampled_from(["0x10", "0x20", "(nil)", "0", "123", "0xg"]),
    st.sampled_from(_NUMBERS),
    st.sampled_from(["0", "0x0", "0x5", "q"]),
)


@FUZZ
@given(st.lists(_ROW, min_size=1, max_size=40))
def test_a_row_fares_the_same_on_the_fast_and_the_tolerant_path(rows) -> None:
    text = "Thread,Time,Action,Pointer,Size,Stream\n" + "".join(",".join(r) + "\n" for r in rows)
    with tempfile.TemporaryDirectory() as tmp:
        clean, damaged = Path(tmp) / "clean.csv", Path(tmp) / "damaged.csv"
        clean.write_text(text)
        damaged.write_text(text + "1,2,3\n")  # one line with too few fields
        fast, tolerant = _log_or_nothing(clean), _log_or_nothing(damaged)
    if fast is None:  # no row could be read: neither path answers
        assert tolerant is None
        return
    assert tolerant is not None
    assert fast.events.to_dict("list") == tolerant.events.to_dict("list")
    assert [(s.line, s.reason) for s in fast.skipped] == [
        (s.line, s.reason) for s in tolerant.skipped if s.line != len(rows) + 2
    ]
    assert tolerant.skipped_count == fast.skipped_count + 1


def _log_or_nothing(path: Path) -> AllocationLog | None:
    """The log, or None when no row of it can be read (`NothingToAnswer`)."""
    try:
        return load_log([path])
    except NothingToAnswer:
        return None


_GOOD_ROW = "1,10:00:00.000001,allocate,0x{pointer:x},4096,0x0"


@FUZZ
@given(st.lists(st.integers(0, 40), min_size=1, max_size=30), st.booleans())
def test_rows_wider_than_the_header_are_skipped_with_their_lines(extra, compress) -> None:
    """Rows with more fields than the header (issue 48: "Empty CSV file", or an abort) are
    skipped and named with their line, and the rest read; none readable: nothing to answer."""
    lines = [
        _GOOD_ROW.format(pointer=index + 1) + ",9" * fields for index, fields in enumerate(extra)
    ]
    content = ("Thread,Time,Action,Pointer,Size,Stream\n" + "\n".join(lines) + "\n").encode()
    wide = {index + 2: 6 + fields for index, fields in enumerate(extra) if fields}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("wide.csv.gz" if compress else "wide.csv")
        path.write_bytes(gzip.compress(content) if compress else content)
        try:
            log = load_log([path])
        except NothingToAnswer as err:
            assert len(wide) == len(extra)  # only when every row is too wide
            first = min(wide)
            assert f"{path}:{first}: expected 6 fields, found {wide[first]}" in str(err)
            return
    assert [(s.line, s.reason) for s in log.skipped] == [
        (line, f"expected 6 fields, found {found}") for line, found in sorted(wide.items())
    ]
    assert log.events["line"].tolist() == [i + 2 for i, fields in enumerate(extra) if not fields]
