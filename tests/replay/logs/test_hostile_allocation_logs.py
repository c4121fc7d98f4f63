"""Hostile and damaged allocation logs (issue 12), for `hipmem log inspect` and `hipmem replay`:
nothing before the damage is lost, every skipped row is reported, sizes never wrap. Inputs are
generated here; each run is a subprocess under RLIMIT_AS and a deadline (tests/bounded.py)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from hipmem.replay.logs.csv_reading import MAX_LINE_BYTES
from hipmem.replay.logs.loader import load_log
from tests.bounded import hipmem_bounded

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "samples" / "serve-first-2000.csv.gz"
HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def _rows(count: int, size: int = 4096) -> str:
    """`count` allocations and their frees, one second apart, well-formed."""
    lines = []
    for index in range(count):
        lines.append(f"1,10:00:{index % 60:02d}.000001,allocate,0x{index + 1:x},{size},0x0\n")
    for index in range(count):
        lines.append(f"1,10:01:{index % 60:02d}.000001,free,0x{index + 1:x},{size},0x0\n")
    return "".join(lines)


def test_a_corrupt_gzip_keeps_the_rows_before_the_damage(tmp_path: Path) -> None:
    plain = gzip.decompress(SAMPLE.read_bytes())
    data = bytearray(gzip.compress(plain * 20, compresslevel=1))  # ~40,000 rows
    middle = len(data) // 2
    data[middle] ^= 0xFF
    data[middle + 1] ^= 0xFF
    damaged = tmp_path / "damaged.csv.gz"
    damaged.write_bytes(bytes(data))
    done = hipmem_bounded("log", "inspect", str(damaged), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["events"] > 10_000  # everything before the damage
    reasons = [row["reason"] for row in summary["skipped_rows"]["first"]]
    damage = next(reason for reason in reasons if reason.startswith("gzip data is corrupt"))
    assert "near compressed byte" in damage and "read up to line" in damage
    assert "gzip data is corrupt near compressed byte" in done.stderr
    strict = hipmem_bounded("log", "inspect", str(damaged), "--strict")
    assert strict.returncode == 1
    assert strict.stderr.startswith(f"Error: {damaged}:")


def test_one_very_long_field_skips_that_row_only(tmp_path: Path) -> None:
    log = tmp_path / "long.csv"
    rows = _rows(50).splitlines(keepends=True)
    long_row = f"1,10:00:00.000001,allocate,0x{'f' * (5 << 20)},64,0x0\n"
    # A short damaged row as well: the file takes the tolerant path, whose CSV reader refused
    # the whole file ("straddling object") when one row was longer than its block.
    log.write_text(HEADER + "".join(rows[:10]) + long_row + "".join(rows[10:]) + "1,2\n")
    loaded = load_log([log])
    assert [(s.line, s.reason) for s in loaded.skipped] == [
        (12, f"line longer than {MAX_LINE_BYTES:,} bytes"),
        (103, "expected 6 fields, found 2"),
    ]
    assert len(loaded.events) == 100
    alone = tmp_path / "alone.csv"  # the fast path skips the row too (by its pointer)
    alone.write_text(HEADER + "".join(rows[:10]) + long_row + "".join(rows[10:]))
    assert [s.line for s in load_log([alone]).skipped] == [12]


def test_a_line_with_no_end_is_refused_within_bounds(tmp_path: Path) -> None:
    log = tmp_path / "endless.csv"
    with log.open("wb") as out:
        out.write(HEADER.encode() + _rows(3).encode())
        chunk = b"0" * (1 << 20)
        for _ in range(70):
            out.write(chunk)
    done = hipmem_bounded("log", "inspect", str(log))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: {log}:8: a line with no end after 64 MiB: not an allocation log"
    )


def test_live_bytes_never_wrap(tmp_path: Path) -> None:
    log = tmp_path / "wrap.csv"
    huge = 2**63 - 1
    log.write_text(HEADER + _rows(2) + _rows(4, size=huge).replace("0x", "0xa"))
    done = hipmem_bounded("log", "inspect", str(log), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["peak_live_bytes"] == 2 * 4096
    assert summary["skipped_rows"]["count"] == 8
    first = summary["skipped_rows"]["first"][0]
    assert first["reason"] == (
        f"size {huge:,} is more than any device holds (over 1,125,899,906,842,624)"
    )
    assert "-4 B" not in done.stdout


def test_allocations_adding_up_past_2_62_are_refused(tmp_path: Path) -> None:
    log = tmp_path / "sum.csv"
    log.write_text(HEADER + _rows(4097, size=2**50))
    done = hipmem_bounded("log", "inspect", str(log))
    assert done.returncode == 1
    assert "the allocations add up to more than 2**62 bytes" in done.stderr


def test_dev_zero_and_fifos_are_named(tmp_path: Path) -> None:
    done = hipmem_bounded("log", "inspect", "/dev/zero")
    assert done.returncode == 2
    assert done.stderr.strip() == "Error: /dev/zero: is a character device, not a log file"
    fifo = tmp_path / "log.csv"
    os.mkfifo(fifo)
    done = hipmem_bounded("log", "inspect", str(fifo), deadline_s=30)
    assert done.returncode == 2
    assert "is a FIFO; allocation logs are read twice when damaged" in done.stderr


@pytest.mark.parametrize(
    ("plot", "message"),
    [
        ("/proc/live.png", "--plot '/proc/live.png': cannot write in folder '/proc'"),
        ("/sys/live.png", "--plot '/sys/live.png': cannot write in folder '/sys'"),
        ("{tmp}", "--plot '{tmp}': is a directory"),
    ],
)
def test_plot_paths_are_checked_before_any_work(tmp_path: Path, plot: str, message: str) -> None:
    folder = tmp_path / "plots.png"
    folder.mkdir()
    target = plot.format(tmp=folder)
    missing = str(tmp_path / "missing.csv")  # the plot is refused before the log is looked at
    for command in (["log", "inspect", missing], ["replay", missing, "-r", "host"]):
        done = hipmem_bounded(*command, "--plot", target)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"Error: {message.format(tmp=folder)}"), done.stderr
        assert "tmp" not in done.stderr.replace(str(tmp_path), "")


def test_replay_reports_unreadable_rows_like_log_inspect(tmp_path: Path) -> None:
    log = tmp_path / "dirty.csv"
    rows = _rows(20).splitlines(keepends=True)
    log.write_text(HEADER + "".join(rows[:5]) + "garbage\n" + "".join(rows[5:]))
    done = hipmem_bounded("replay", str(log), "-r", "host", "--backend", "host", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["skipped_rows"] == {
        "count": 1,
        "first": [{"source": str(log), "line": 7, "reason": "expected 6 fields, found 1"}],
    }
    assert f"Warning: 1 unreadable entry skipped: {log}:7: expected 6 fields" in done.stderr
    strict = hipmem_bounded("replay", str(log), "-r", "host", "--backend", "host", "--strict")
    assert strict.returncode == 1
    assert strict.stderr.strip() == f"Error: {log}:7: expected 6 fields, found 1"


@pytest.mark.parametrize("name", ["wide.csv", "wide.csv.gz"])
def test_rows_of_100006_fields_are_named_never_an_empty_file(tmp_path: Path, name: str) -> None:
    """Issue 48: 20 rows of 100,006 fields were "cannot be read as CSV: Empty CSV file", and
    now and then an abort (exit 134)."""
    row = "1,10:00:00.000001,allocate,0x10,4096,0x0" + ",9" * 100_000 + "\n"
    content = (HEADER + row * 20).encode()
    log = tmp_path / name
    log.write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
    done = hipmem_bounded("log", "inspect", str(log))
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        f"Error: nothing to answer: 20 unreadable entries skipped: {log}:2: expected 6 fields, "
        "found 100006;"
    ), done.stderr
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(HEADER + _rows(2) + row)
    done = hipmem_bounded("replay", str(mixed), "-r", "host", "--backend", "host")
    assert done.returncode == 0, done.stderr
    assert f"1 unreadable entry skipped: {mixed}:6: expected 6 fields, found 100006" in done.stderr


def test_arrow_reads_only_its_own_streams(tmp_path: Path, monkeypatch) -> None:
    """Arrow reads ahead on its own threads after a read fails; a Python file there, let go of
    while Python exits, aborts the process (terminate called without an active exception).
    So the fast path hands arrow a stream arrow made (a gzip one too), never a Python file."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    given: list[object] = []
    read_csv = pa_csv.read_csv

    def recording(source: object, *args: object, **kwargs: object) -> object:
        given.append(source)
        return read_csv(source, *args, **kwargs)

    monkeypatch.setattr(pa_csv, "read_csv", recording)
    content = (HEADER + _rows(3) + "x,y\n").encode()  # a bad row: the fast read fails
    for name in ("a.csv", "a.csv.gz"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
        assert load_log([path]).skipped_count == 1
    assert len(given) == 4  # the fast read, then the tolerant one, of each file
    assert all(isinstance(source, pa.NativeFile) for source in given), given
