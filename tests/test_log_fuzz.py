"""The loader never crashes: arbitrary bytes and mutated real logs end in a clean result or a
`LogFormatError`, and whatever loads is consistent with the lines of the file."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.errors import LogFormatError
from replay.log_loader import load_log
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
