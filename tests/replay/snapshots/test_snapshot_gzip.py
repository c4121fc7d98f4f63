"""A gzip snapshot as the reader inflates it (replay/snapshots/snapshot_file.py, GzipStream): what
`gzip` reads (members one after another, zero padding between them), from one open of the
file, and a damaged stream said in one line naming the file."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hipmem.replay.snapshots import reader as snapshot
from hipmem.replay.snapshots.native import READER_ENV
from tests.snapshot_reference import SNAPSHOTS

# A small file (inflated in one call) and one past the 64 KiB of a first read.
NAMES = ("oom", "train-default")
_opened: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and isinstance(args[0], str) and args[0].endswith(".pickle.gz"):
        _opened.append(args[0])


sys.addaudithook(_audit)


def _columns(path: Path) -> list[Any]:
    found = []
    for part in snapshot.read_snapshot(path):
        recording = {
            key: (value.tolist() if isinstance(value, np.ndarray) else value)
            for key, value in vars(part.recording).items()
            if key not in ("source", "ooms")  # both name the file
        }
        recording["ooms"] = [(o.where.line, o.size_bytes, o.device_free_bytes)
                             for o in part.recording.ooms]  # fmt: skip
        columns = {name: col.tolist() for name, col in part.columns.items()}
        found.append((columns, [(r.line, r.reason) for r in part.skipped], recording))
    return found


@pytest.mark.parametrize("how", ["native", "python"])
@pytest.mark.parametrize("name", NAMES)
def test_members_and_zero_padding_read_as_one_file(
    name: str, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(READER_ENV, how)
    source = SNAPSHOTS / f"{name}.pickle.gz"
    plain = gzip.decompress(source.read_bytes())
    cut = len(plain) // 3
    split = tmp_path / f"{name}.pickle.gz"
    split.write_bytes(
        gzip.compress(plain[:cut]) + b"\0" * 7 + gzip.compress(plain[cut:]) + b"\0" * 3
    )
    assert _columns(split) == _columns(source)


@pytest.mark.parametrize("name", NAMES)
def test_a_read_opens_the_file_once(name: str) -> None:
    path = SNAPSHOTS / f"{name}.pickle.gz"
    _opened.clear()
    snapshot.read_snapshot(path)
    assert _opened == [str(path)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "damage",
    ["truncated", "size", "crc", "garbage after"],
)
def test_a_damaged_stream_is_one_line_naming_the_file(
    name: str, damage: str, tmp_path: Path
) -> None:
    data = bytearray((SNAPSHOTS / f"{name}.pickle.gz").read_bytes())
    if damage == "truncated":
        del data[len(data) // 2 :]
    elif damage == "size":  # the trailer's ISIZE, which the first read takes as a hint
        data[-4:] = (10).to_bytes(4, "little")
    elif damage == "crc":
        data[-8] ^= 0xFF
    else:
        data += b"not gzip"
    path = tmp_path / "damaged.pickle.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(snapshot.SnapshotError) as raised:
        snapshot.read_snapshot(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
