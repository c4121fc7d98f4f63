"""The loader against the real logs and crafted ones, checked row by row against a plain
csv-module reading (tests/log_reference.py)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from hipmem.replay.errors import LogFormatError, ReplayUsageError
from hipmem.replay.logs.csv_columns import parse_address, unwrap_midnight
from hipmem.replay.logs.csv_header import HEADER_WITH_THREAD
from hipmem.replay.logs.events import ACTION_NAMES, COLUMNS
from hipmem.replay.logs.loader import load_log
from hipmem.replay.logs.log_files import device_of, find_log_files
from tests.log_reference import DATA_LOGS, REAL_LOGS, read_rows

ERA_LOGS = sorted(p for p in DATA_LOGS.glob("*.csv*") if p.name != "bad_rows.csv")


def _assert_matches_reference(path: Path) -> None:
    log = load_log([path])
    rows, bad = read_rows(path)
    events = log.events
    assert list(events.columns) == list(COLUMNS)
    assert {c: str(t) for c, t in events.dtypes.items()} == COLUMNS
    assert len(events) == len(rows)
    assert log.skipped_count == len(bad)
    assert events["line"].tolist() == [r.line for r in rows]
    assert events["thread"].tolist() == [r.thread for r in rows]
    assert events["time_ns"].tolist() == [r.time_ns for r in rows]
    assert [ACTION_NAMES[a] for a in events["action"].tolist()] == [r.action for r in rows]
    assert events["pointer"].tolist() == [r.pointer for r in rows]
    assert events["size_bytes"].tolist() == [r.size for r in rows]
    assert events["stream"].tolist() == [r.stream for r in rows]
    assert (events["file_index"] == 0).all()
    assert log.sources == [str(path)]


def test_the_committed_real_logs_are_there() -> None:
    # A guard that can fail: every parametrised test below would silently vanish otherwise.
    missing = [p.name for p in REAL_LOGS if not p.is_file()]
    assert not missing, f"committed real logs missing from tests/data/real: {missing}"


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.name)
def test_real_logs_match_a_plain_csv_reading(path: Path) -> None:
    _assert_matches_reference(path)


@pytest.mark.parametrize("name", ["cnn.csv.gz", "gpt.csv.gz", "serve.csv.gz"])
def test_full_shared_logs_match_a_plain_csv_reading(shared_logs: Path, name: str) -> None:
    _assert_matches_reference(shared_logs / name)


@pytest.mark.parametrize("path", ERA_LOGS, ids=lambda p: p.name)
def test_every_era_matches_a_plain_csv_reading(path: Path) -> None:
    _assert_matches_reference(path)


def test_real_logs_have_what_the_notes_promise() -> None:
    # Two or more threads, hex streams in serve, zero-byte (nil) allocations in gpt.
    serve = load_log([p for p in REAL_LOGS if p.name == "serve.csv.gz"])
    assert serve.events["stream"].nunique() == 5
    assert serve.events["thread"].nunique() >= 2
    gpt = load_log([p for p in REAL_LOGS if p.name == "gpt.csv.gz"])
    zero = gpt.events[gpt.events["size_bytes"] == 0]
    assert len(zero) > 0 and (zero["pointer"] == 0).all()


def test_eras_read_the_same_events() -> None:
    # The same two events written in the 2019 (no Thread, colon time) and 2024 styles.
    old = "Time,Action,Pointer,Size,Stream\n10:00:00:000001,allocate,0x7f00,64,0x0\n"
    new = HEADER_WITH_THREAD + "\n0,10:00:00.000001,allocate,0x7f00,64,0\n"
    tail_old = "10:00:00:000002,allocate failure,0x0,128,0x0\n"
    tail_new = "0,10:00:00.000002,allocate failure,(nil),128,0\n"
    a = _write(DATA_LOGS.parent.parent / ".tmp_old.csv", old + tail_old)
    b = _write(DATA_LOGS.parent.parent / ".tmp_new.csv", new + tail_new)
    try:
        left, right = load_log([a]).events, load_log([b]).events
        assert left.to_dict("list") == right.to_dict("list")
        assert left["action"].tolist() == [0, 2]
    finally:
        a.unlink()
        b.unlink()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_gzip_and_plain_load_identically(tmp_path: Path) -> None:
    plain = DATA_LOGS / "era2024_printf.csv"
    packed = tmp_path / "log.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert load_log([plain]).events.equals(load_log([packed]).events)


def test_gzip_without_gz_name_is_still_read(tmp_path: Path) -> None:
    odd = tmp_path / "log.csv"
    odd.write_bytes(gzip.compress((DATA_LOGS / "anomalies.csv").read_bytes()))
    assert len(load_log([odd]).events) == len(read_rows(DATA_LOGS / "anomalies.csv")[0])


def test_midnight_is_unwrapped() -> None:
    events = load_log([DATA_LOGS / "midnight.csv"]).events
    day = 86_400 * 10**9
    # 23:59:59.999 on day 0, past midnight on day 1, and the late row stays on day 0.
    assert events["time_ns"].iat[0] == (23 * 3600 + 59 * 60 + 59) * 10**9 + 999_000_000
    assert events["time_ns"].iat[2] == day + 100_000
    assert events["time_ns"].iat[3] == day - 50_000
    assert events["time_ns"].iat[7] == 2 * day + 10**9


def test_unwrap_midnight_on_arrays() -> None:
    hour = 3600 * 10**9
    half = hour // 2
    # Back by over 12 h: the next day. Forward by over 12 h: a late row of the day before.
    times = np.array([23 * hour, 1 * hour, 13 * hour, half, 23 * hour + half], np.int64)
    assert unwrap_midnight(times).tolist() == [
        23 * hour, 25 * hour, 37 * hour, 48 * hour + half, 47 * hour + half,
    ]  # fmt: skip


def _unwrapped_by_hand(times: list[int]) -> list[int]:
    day_ns, half_ns, days, out = 86_400 * 10**9, 43_200 * 10**9, 0, []
    for k, t in enumerate(times):
        if k and t - times[k - 1] < -half_ns:
            days += 1
        elif k and t - times[k - 1] > half_ns:
            days -= 1
        out.append(t + days * day_ns)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_unwrap_midnight_over_many_days_and_blocks(seed: int) -> None:
    # Steps of up to 20 h cross midnight often; a block of 7 rows puts jumps on block edges.
    rng = np.random.default_rng(seed)
    day_ns = 86_400 * 10**9
    times = (np.cumsum(rng.integers(0, 20 * 3600 * 10**9, 500)) % day_ns).astype(np.int64)
    expected = _unwrapped_by_hand(times.tolist())
    assert unwrap_midnight(times.copy(), block_rows=7).tolist() == expected
    assert unwrap_midnight(times.copy()).tolist() == expected


def test_parse_address_reads_hex_and_flags_everything_else() -> None:
    good = ["0x7fab12800000", "0X1F", "0xabcDEF", "0x0", "0", "(nil)", "0x" + "f" * 16]
    bad = ["123", "0x", "0xg1", "7fab", "-0x1", " 0x1", "0x" + "1" * 17, "nil", ""]
    values, flagged = parse_address(pa.array([s.encode() for s in good + bad], pa.binary()))
    expected = [0 if s in ("0", "(nil)") else int(s, 16) for s in good]
    assert values[: len(good)].tolist() == expected
    assert flagged.tolist() == [False] * len(good) + [True] * len(bad)
    # Bytes that are not UTF-8 are bad too, and do not spoil the good values beside them.
    values, flagged = parse_address(pa.array([b"0x10", b"\xff\xfe"], pa.binary()))
    assert values[0] == 16 and flagged.tolist() == [False, True]


def test_several_files_keep_file_order_and_index() -> None:
    paths = [DATA_LOGS / "anomalies.csv", DATA_LOGS / "era2024_printf.csv"]
    log = load_log(paths)
    first, second = (read_rows(p)[0] for p in paths)
    assert log.sources == [str(p) for p in paths]
    assert log.events["file_index"].tolist() == [0] * len(first) + [1] * len(second)
    assert log.events["line"].tolist() == [r.line for r in first + second]


def test_device_naming_expands_to_each_device(tmp_path: Path) -> None:
    for name in ("model.dev0.csv", "model.dev1.csv"):
        shutil.copy(DATA_LOGS / name, tmp_path / name)
    shutil.copy(DATA_LOGS / "model.dev0.csv", tmp_path / "model.dev10.csv")
    found = find_log_files([tmp_path / "model.csv"])
    assert [p.name for p in found] == ["model.dev0.csv", "model.dev1.csv", "model.dev10.csv"]
    assert [device_of(p) for p in found] == [0, 1, 10]
    assert device_of("x.dev3.csv.gz") == 3 and device_of("x.csv") is None
    log = load_log([tmp_path / "model.csv"])
    assert log.events["file_index"].tolist() == [0, 0, 1, 1, 2, 2]


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayUsageError, match=r"log file '.*nope.csv' does not exist") as err:
        load_log([tmp_path / "nope.csv"])
    assert err.value.exit_code == 2


# --------------------------------------------------------------------------- bad input

BAD = DATA_LOGS / "bad_rows.csv"
BAD_REASONS = {
    3: "size 'abc' is not a non-negative integer",
    4: "size '-5' is not a non-negative integer",
    5: "pointer '0xZZ00' is not hex (0x...) or (nil)",
    6: "action 'reallocate' is not allocate, free or allocate failure",
    7: "empty line",
    8: "expected 6 fields, found 5",
    10: "thread 'x' is not a non-negative integer",
    11: "time '9:00:00.000009' is not a time of day HH:MM:SS.ffffff",
    12: "expected 6 fields, found 5",  # the truncated last line
}


def test_lenient_skips_each_bad_row_with_its_line() -> None:
    log = load_log([BAD])
    rows, bad = read_rows(BAD)
    assert sorted(BAD_REASONS) == bad  # the crafted file and the reference agree
    assert {s.line: s.reason for s in log.skipped} == BAD_REASONS
    assert log.skipped_count == len(BAD_REASONS)
    assert log.events["line"].tolist() == [r.line for r in rows] == [2, 9]


def test_a_row_empty_but_for_its_good_thread_is_not_an_empty_line(tmp_path: Path) -> None:
    # The loader frees each CSV column that had no bad value as soon as it is converted;
    # the reason of a bad row must still see that its thread was there.
    log_file = tmp_path / "x.csv"
    log_file.write_text(
        HEADER_WITH_THREAD + "\n1,10:00:00.000001,allocate,0x1,1,0\n1,,,,,\n,,,,,\n"
    )
    log = load_log([log_file])
    assert {s.line: s.reason for s in log.skipped} == {
        3: "time '' is not a time of day HH:MM:SS.ffffff",
        4: "empty line",
    }


def test_strict_names_the_first_bad_row() -> None:
    with pytest.raises(LogFormatError) as err:
        load_log([BAD], strict=True)
    assert str(err.value) == (
        f"{BAD}:3: size 'abc' is not a non-negative integer (and 8 more bad rows)"
    )
    assert err.value.exit_code == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", r"x\.csv:1: empty file; expected the header 'Thread,Time,Action,Pointer,Size,Stream"),
        (
            b"Thread,Tim,Action,Pointer,Size,Stream\n1,10:00:00.000001,free,0x1,1,0\n",
            r"x\.csv:1: header 'Thread,Tim,Action,Pointer,Size,Stream' is misspelt; "
            r"expected 'Thread,Time,Action,Pointer,Size,Stream'",
        ),
        (
            b"1,10:00:00.000001,allocate,0x1,1,0\n",
            r"x\.csv:1: no RMM log header \(found '1,10:00:00.000001,allocate,0x1,1,0'\); "
            r"expected 'Thread,Time,Action,Pointer,Size,Stream'",
        ),
        (b"\x00\xff\xfe garbage \x13\x37" * 20, r"x\.csv:1: no RMM log header"),
    ],
    ids=["empty", "misspelt", "missing", "binary"],
)
def test_unreadable_files_are_errors_in_both_modes(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "x.csv"
    path.write_bytes(content)
    for strict in (False, True):
        with pytest.raises(LogFormatError, match=f"^{tmp_path}/{message}"):
            load_log([path], strict=strict)


def test_gz_name_without_gzip_data_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "log.csv.gz"
    path.write_bytes((DATA_LOGS / "anomalies.csv").read_bytes())
    with pytest.raises(LogFormatError, match=r"log\.csv\.gz: named \.gz but is not gzip data$"):
        load_log([path])


def test_truncated_gzip_keeps_what_was_written(tmp_path: Path) -> None:
    source = REAL_LOGS[0]
    path = tmp_path / "cut.csv.gz"
    data = source.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    log = load_log([path])
    rows, _ = read_rows(source)
    assert 0 < len(log.events) < len(rows)
    # Every row kept is the real row at that line.
    kept = log.events["size_bytes"].tolist()
    assert kept == [r.size for r in rows[: len(kept)]]
    assert log.skipped[-1].reason == (
        f"gzip data ends early (truncated file); read up to line {len(kept) + 2:,}, the rest is "
        "lost"
    )
    with pytest.raises(LogFormatError, match=r"cut\.csv\.gz:\d+: "):
        load_log([path], strict=True)


def test_binary_garbage_inside_a_log_is_skipped_by_line(tmp_path: Path) -> None:
    good = (DATA_LOGS / "anomalies.csv").read_bytes().splitlines(keepends=True)
    path = tmp_path / "dirty.csv"
    path.write_bytes(b"".join([*good[:3], b"\x00\xff\xfe\x80garbage,,\n", *good[3:]]))
    log = load_log([path])
    assert [(s.line, s.reason) for s in log.skipped] == [(4, "expected 6 fields, found 3")]
    assert len(log.events) == len(good) - 1
    assert log.events["line"].tolist() == [2, 3, *range(5, len(good) + 2)]
