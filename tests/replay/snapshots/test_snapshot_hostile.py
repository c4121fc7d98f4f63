"""Hostile snapshot shapes: each is one clear error or skipped entries, within bounded memory
and time (the CLI cases run under tests/bounded.py's address-space limit)."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipmem
from hipmem.replay.logs.events import LineRef
from hipmem.replay.snapshots import reader as snapshot
from hipmem.replay.snapshots.pickle_machine import SnapshotError, SnapshotRefused
from tests.bounded import run_bounded

SNAPSHOTS = Path(__file__).parents[2] / "data" / "snapshots"
HIPMEM = [sys.executable, "-m", "hipmem.cli.main"]


def _entry(**fields: object) -> dict[str, object]:
    return {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 10, **fields}


def _write(tmp_path: Path, data: object, name: str = "run.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data, protocol=4))
    return path


def _raw(tmp_path: Path, body: bytes, name: str = "raw.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(b"\x80\x04" + body)
    return path


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (1.5, "1.5"),
        ("512", "'512'"),
        (True, "True"),
        (-(2**70), "-1180591620717411303424"),
        (-1, "-1"),
        ([1] * 1000, "[1, 1, 1, 1, 1, 1, ...]"),
    ],
)
def test_an_int_field_of_another_type_is_a_skipped_entry(
    tmp_path: Path, value: object, shown: str
) -> None:
    trace = [_entry(), _entry(addr=8192, size=value)]
    log = hipmem.load_log(_write(tmp_path, {"device_traces": [trace], "segments": []}))
    assert len(log.events) == 1 and log.skipped_count == 1
    assert log.skipped[0].line == 2
    assert log.skipped[0].reason == f"alloc entry: size {shown} is not a non-negative integer"


def test_an_integer_of_a_megabyte_is_not_decoded(tmp_path: Path) -> None:
    huge = 1 << (8 * 1_000_000)  # LONG4 of a million bytes
    trace = [_entry(), _entry(addr=8192, size=huge)]
    log = hipmem.load_log(_write(tmp_path, {"device_traces": [trace], "segments": []}))
    assert log.skipped[0].reason == (
        "alloc entry: size an integer of 1,000,001 bytes is past 2**63 - 1"
    )


def test_a_time_past_the_int64_nanosecond_range_is_a_skipped_entry(tmp_path: Path) -> None:
    trace = [_entry(), _entry(addr=8192, time_us=2**62)]
    log = hipmem.load_log(_write(tmp_path, {"device_traces": [trace], "segments": []}))
    assert log.skipped_count == 1
    assert "time_us 4611686018427387904 is past year 2262" in log.skipped[0].reason


def test_segment_sizes_that_sum_past_2_63_are_refused_not_wrapped(tmp_path: Path) -> None:
    segments = [{"device": 0, "total_size": 2**62, "stream": 0, "blocks": []}] * 3
    path = _write(tmp_path, {"device_traces": [[_entry()]], "segments": segments})
    with pytest.raises(SnapshotError, match="add up to more than 2\\*\\*62 bytes"):
        hipmem.load_log(path)


def test_reserved_changes_that_sum_past_2_63_are_refused(tmp_path: Path) -> None:
    grow = [_entry(action="segment_alloc", addr=k, size=2**62, time_us=10 + k) for k in range(3)]
    path = _write(tmp_path, {"device_traces": [grow], "segments": []})
    with pytest.raises(SnapshotError, match="add up to more than 2\\*\\*62 bytes"):
        hipmem.load_log(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"cbuiltins\nlen\n.", "refusing to load the global builtins.len"),
        (b"K\x01K\x02\x85R.", "refusing to load the opcode REDUCE"),
        (b"I1\n.", r"the opcode b'I'"),  # protocol 0: pickle never writes it for a snapshot
        (b"(]\x91.", r"a set holding \[\]"),  # a frozenset of a list
        (b"}](K\x01s.", "a dict key of unhashable type: 'list'"),
        (b"\x8d" + (2**40).to_bytes(8, "little") + b"abc.", "more than .* bytes once decompressed"),
        (b"}\x94(\x8c\x06action", "ends early"),
        (b"h\x07.", "a memo reference past the memo's end"),
        (b"]K\x01]\x86.", r"a tuple holding \[\]"),
        (b"e.", "too few values"),
    ],
)
def test_a_hostile_opcode_is_one_clear_error(tmp_path: Path, body: bytes, message: str) -> None:
    path = _raw(tmp_path, body)
    with pytest.raises(SnapshotError, match=message):
        hipmem.load_log(path)


def test_code_is_refused_as_such(tmp_path: Path) -> None:
    with pytest.raises(SnapshotRefused):
        hipmem.load_log(_raw(tmp_path, b"K\x01K\x02\x85R."))


def test_deep_nesting_is_read_without_recursion(tmp_path: Path) -> None:
    depth = 1_000_000
    nested = b"]" * depth + b"a" * (depth - 1)  # a list in a list ... a million deep
    entries = b"(" + nested + b"e"
    top = b"}(\x8c\x0ddevice_traces](]" + entries + b"eu."
    with pytest.raises(hipmem.HipmemError, match=r"dev0:1: entry is a list, not a dict"):
        hipmem.load_log(_raw(tmp_path, top))  # nothing readable: nothing to answer


def test_allocator_settings_that_are_not_plain_data_are_left_out(tmp_path: Path) -> None:
    nested: object = 0
    for _ in range(50):
        nested = [nested]
    settings = {"x": nested, ("a", 1): 2, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    data = {"device_traces": [[_entry()]], "segments": [], "allocator_settings": settings}
    log = hipmem.load_log(_write(tmp_path, data))
    assert log.recordings[0].allocator_settings == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"
    }


def test_objects_held_at_once_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "MAX_HELD_OBJECTS", 10_000)
    data = {"device_traces": [[_entry()]], "segments": [], "pad": list(range(20_000))}
    with pytest.raises(SnapshotError, match="more than 10,000 objects held at once"):
        hipmem.load_log(_write(tmp_path, data))


def test_frames_shared_between_entries_do_not_cost_once_per_entry(tmp_path: Path) -> None:
    frames = [{"filename": "a.py", "line": k, "name": "f"} for k in range(100_000)]
    trace = [_entry(addr=4096 * k, time_us=10 + k, frames=frames) for k in range(1, 20_000)]
    path = _write(tmp_path, {"device_traces": [trace], "segments": []})
    assert path.stat().st_size < 3_000_000
    log = hipmem.load_log(path)
    assert len(log.events) == 19_999 and log.skipped_count == 0
    first = snapshot.entry_frames(LineRef(f"{path}#dev0", 1))
    assert len(first) == 10_000 and str(first[3]) == "a.py:3 in f"  # capped at MAX_FRAMES


def test_entries_sharing_one_large_list_are_skipped_fast_in_bounded_memory(tmp_path: Path) -> None:
    shared = list(range(100_000))
    path = _write(tmp_path, {"device_traces": [[shared] * 200_000], "segments": []})
    assert path.stat().st_size < 1_000_000
    done = run_bounded([*HIPMEM, "log", "inspect", str(path)])
    assert done.returncode in (0, 1), done.stderr  # nothing readable: the gate's exit code
    assert "internal error" not in done.stderr
    assert "200,000" in done.stdout + done.stderr


def test_a_gzip_bomb_stops_at_the_cap_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.pickle.gz"
    with gzip.open(path, "wb") as out:
        out.write(b"\x80\x04\x8e" + struct.pack("<Q", 1 << 30))
        zeros = bytes(1 << 20)
        for _ in range(1024):
            out.write(zeros)
        out.write(b".")
    assert path.stat().st_size < 2_000_000
    env = {**os.environ, "HIPMEM_SNAPSHOT_MAX_BYTES": "64MiB"}
    done = run_bounded([*HIPMEM, "log", "inspect", str(path)], memory_bytes=1 << 30, env=env)
    assert done.returncode == 1
    assert "more than 67,108,864 bytes once decompressed" in done.stderr
    assert "internal error" not in done.stderr and done.stderr.count("\n") == 1


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    where=st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=4),
    values=st.lists(st.integers(min_value=0, max_value=255), min_size=4, max_size=4),
)
def test_mutated_committed_snapshots_load_or_say_why(
    tmp_path: Path, where: list[int], values: list[int]
) -> None:
    data = bytearray(gzip.decompress((SNAPSHOTS / "oom.pickle.gz").read_bytes()))
    for spot, value in zip(where, values, strict=False):
        data[spot % len(data)] = value
    path = tmp_path / "mutated.pickle"
    path.write_bytes(bytes(data))
    try:
        log = hipmem.load_log(path)
    except hipmem.HipmemError as err:
        # one line naming the file (at its start, or at the places it names)
        assert str(path) in str(err) and "\n" not in str(err)
        return
    assert log.skipped_count >= 0 and len(log.events) >= 0


@pytest.mark.parametrize("line", [1, 2, 3679])  # a segment_alloc, an alloc, a free_completed
def test_frames_of_a_committed_entry_match_a_plain_reading(line: int) -> None:
    path = SNAPSHOTS / "train-default.pickle.gz"
    with gzip.open(path) as file:
        plain = pickle.load(file)["device_traces"][0][line - 1]["frames"]  # our own file
    frames = snapshot.entry_frames(LineRef(f"{path}#dev0", line))
    assert [(f.filename, f.line, f.name) for f in frames] == [
        (f["filename"], f["line"], f["name"]) for f in plain
    ]
    assert frames  # train-default was recorded with stacks
