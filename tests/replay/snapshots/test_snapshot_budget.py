"""A small snapshot file stays small (issue 48: a 292 KB `.pickle.gz` reached 2.4 GB before
its refusal): memo and stack bombs, memo indexes far past the end, sets, entries and strings
are each refused by a bound that grows with the file's size (replay/snapshots/budget.py), in
both machines alike, within a measured amount of memory; real snapshots fit those bounds
eight times over."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pytest

from hipmem.replay.snapshots import budget, native
from hipmem.replay.snapshots.pickle_machine import SnapshotError
from hipmem.replay.snapshots.reader import read_snapshot
from tests.bounded import python_bounded

SNAPSHOTS = Path(__file__).parents[2] / "data" / "snapshots"


def _snapshot(trace_body: bytes) -> bytes:
    """`{'device_traces': [[...trace_body...]], 'segments': []}`, opcode by opcode."""
    head = b"\x80\x04}(\x8c\x0ddevice_traces]]"
    return head + trace_body + b"a\x8c\x08segments]u."


_KEYS = b"".join(
    b"\x8c" + bytes([len(word)]) + word + b"\x94"
    for word in (b"action", b"alloc", b"addr", b"size", b"stream", b"time_us")
)
# What each bomb is, written as pickle writes nothing like it, and what it asks for.
BOMBS = {
    # 3 million memo references (LONG_BINGET) to one 1,000-item list, before any entry
    "memo references": b"](" + b"K\x01" * 1000 + b"er\x00\x00\x00\x000("
    + b"j\x00\x00\x00\x00" * 3_000_000 + b"e",
    # LONG_BINPUT 65,536 slots past the memo's end, 2,000 times: 131 million empty slots
    "memo gaps": b"K\x01" + b"".join(b"r" + struct.pack("<I", k << 16) for k in range(1, 2001))
    + b"0",
    # 2 million empty sets (216 bytes each) in one batch
    "sets": b"(" + b"\x8f" * 2_000_000 + b"e",
    # 2 million trace entries, every key and value from the memo
    "entries": _KEYS + b"0" * 6 + b"}(h\x00h\x01h\x02K\x00h\x03K\x10h\x04K\x00h\x05K\x00ua"
    * 2_000_000,
    # 1,100 strings of 65,535 characters: 72 MB of pickle from a 0.1 MB file
    "strings": b"(" + (b"X\xff\xff\x00\x00" + b"a" * 65_535) * 1_100 + b"e",
}  # fmt: skip
REFUSED = {
    "memo references": "more than 1,000,000 objects held at once",
    "memo gaps": "more than 1,000,000 objects held at once",
    "sets": "more than 1,000,000 objects held at once",
    "entries": "a device has more than 1,000,000 trace entries",
    "strings": "more than 67,108,864 bytes once decompressed",
}


def _bomb(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind.replace(' ', '-')}.pickle.gz"
    path.write_bytes(gzip.compress(_snapshot(BOMBS[kind]), compresslevel=9))
    assert path.stat().st_size < 130_000  # a small file
    return path


@pytest.mark.parametrize("kind", list(BOMBS))
def test_a_bomb_in_a_small_file_is_refused_within_memory(tmp_path: Path, kind: str) -> None:
    """Refused by its file's bound, naming the file, the process growing by at most 120 MB
    (the sets, 216 bytes each, cost the most); before, up to 3.7 GB."""
    path = _bomb(tmp_path, kind)
    done = python_bounded(
        "import json, resource\n"
        "from pathlib import Path\n"
        "from hipmem.replay.snapshots.reader import read_snapshot, SnapshotError\n"
        "def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
        "start = peak()\n"
        f"try:\n    read_snapshot(Path({str(path)!r})); said = ''\n"
        "except SnapshotError as err:\n    said = str(err)\n"
        "print(json.dumps({'said': said, 'grew': peak() - start}))\n",
        memory_bytes=2 << 30,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["said"].startswith(f"{path}: "), result["said"]
    assert REFUSED[kind] in result["said"]
    assert f"the bound for a file of {path.stat().st_size:,} bytes" in result["said"]
    assert result["grew"] < 120 << 20, result


@pytest.mark.parametrize("kind", list(BOMBS))
def test_both_machines_refuse_a_bomb_alike(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _bomb(tmp_path, kind)
    said = {}
    for how in ("python", "native"):
        monkeypatch.setenv(native.READER_ENV, how)
        with pytest.raises(SnapshotError) as caught:
            read_snapshot(path)
        said[how] = str(caught.value)
    assert said["python"] == said["native"]


def test_vouching_for_the_file_lifts_the_inflation_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HIPMEM_SNAPSHOT_MAX_BYTES set: the user's cap holds alone (the strings then pass it
    and are named as what they are: no trace entry)."""
    path = _bomb(tmp_path, "strings")
    monkeypatch.setenv("HIPMEM_SNAPSHOT_MAX_BYTES", "128MiB")
    parts = read_snapshot(path)
    assert parts[0].skipped_count == 1_100


@pytest.mark.parametrize("snapshot", sorted(SNAPSHOTS.glob("*.pickle.gz")), ids=lambda p: p.name)
def test_real_snapshots_fit_an_eighth_of_the_bounds(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no floor and every rate divided by 8, each committed snapshot still reads: the
    bounds leave real files 8 times the room they need."""
    monkeypatch.setattr(budget, "MIN_PICKLE_BYTES", 0)
    monkeypatch.setattr(budget, "MIN_HELD_OBJECTS", 0)
    monkeypatch.setattr(budget, "MIN_TRACE_ENTRIES", 0)
    monkeypatch.setattr(budget, "INFLATION_PER_FILE_BYTE", budget.INFLATION_PER_FILE_BYTE / 8)
    monkeypatch.setattr(budget, "HELD_OBJECTS_PER_FILE_BYTE", budget.HELD_OBJECTS_PER_FILE_BYTE / 8)
    monkeypatch.setattr(
        budget, "TRACE_ENTRIES_PER_FILE_BYTE", budget.TRACE_ENTRIES_PER_FILE_BYTE / 8
    )
    for how in ("python", "native"):
        monkeypatch.setenv(native.READER_ENV, how)
        assert read_snapshot(snapshot)
