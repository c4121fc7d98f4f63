"""Which PyTorch wrote a snapshot, read from its fields: real snapshots written by six releases
(tests/data/snapshot-releases/, `hipmem record --torch V` of allocate.py there), read by
both pickle machines, and the line each command says when the replaying release is outside."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from hipmem.replay.snapshots import native
from hipmem.replay.snapshots.reader import read_snapshot
from hipmem.replay.snapshots.release_range import ReleaseRange, outside_notes, written_by
from tests.cli_run import hipmem
from tests.snapshot_reference import SNAPSHOTS

RELEASES = SNAPSHOTS.parent / "snapshot-releases"
# Each release's snapshot, and the range its fields say: the release itself lies in it.
SAID = {
    "2.4.1": "PyTorch 2.4 or earlier",
    "2.9.1": "PyTorch 2.9",
    "2.11.0": "PyTorch 2.10 or 2.11",
    "2.12.1": "PyTorch 2.12",
    "2.13.0": "PyTorch 2.13",
    "2.14.1": "PyTorch 2.14 or later",
}


@pytest.fixture(params=["native", "python"])
def machine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "native":
        native.load()  # built at install: its absence is a failure here, not a skip
    monkeypatch.setenv(native.READER_ENV, request.param)
    return str(request.param)


@pytest.mark.parametrize("version", sorted(SAID))
def test_each_releases_snapshot_reads_as_a_range_holding_that_release(
    version: str, machine: str
) -> None:
    parts = read_snapshot(RELEASES / f"{version}.pickle")
    found = parts[0].recording.written_by
    assert found is not None and found.said() == SAID[version]
    assert found.includes(version) and found.includes(f"{version}+cu130")
    others = [v for v in SAID if SAID[v] != SAID[version]]
    assert not any(found.includes(v) for v in others)


def test_the_committed_h200_snapshots_read_as_recorded_by_2_11(machine: str) -> None:
    for path in sorted(SNAPSHOTS.glob("*.pickle.gz")):
        found = read_snapshot(path)[0].recording.written_by
        assert found is not None and found.said() == "PyTorch 2.10 or 2.11", path
        assert found.evidence == ("user_metadata in its trace", "no pool_id")


def _load(version: str) -> dict[str, Any]:
    data: dict[str, Any] = pickle.loads((RELEASES / f"{version}.pickle").read_bytes())
    return data


def _range(data: dict[str, Any]) -> ReleaseRange:
    entry = next((trace[0] for trace in data["device_traces"] if trace), None)
    return written_by(data, data.get("allocator_settings"), None if entry is None else entry)


def test_a_field_removed_by_hand_lowers_the_range_and_one_added_raises_it() -> None:
    data = _load("2.12.1")
    for trace in data["device_traces"]:
        for entry in trace:
            del entry["pool_id"]
    assert _range(data).said() == "PyTorch 2.10 or 2.11"  # the first absent field decides
    data = _load("2.9.1")
    data["allocator_settings"]["max_cached_size"] = -1  # a 2.13 field and no user_metadata
    found = _range(data)
    assert found.said() == "PyTorch 2.13 or later"  # no one release: the floor only
    assert found.evidence == ("max_cached_size in its allocator settings",)


def test_a_place_not_read_says_nothing_and_odd_keys_are_ignored() -> None:
    data = _load("2.11.0")  # its top level only: 2.5 on, and no host_segments
    assert written_by(data, None, None).said() == "PyTorch 2.5 to 2.13"
    odd: dict[object, object] = {7: 1, "x" * 10_000: 1, "external_annotations": []}
    assert written_by(odd, None, None).said() == "PyTorch 2.5 to 2.13"


def test_versions_hipmem_cannot_read_are_not_said_to_be_outside() -> None:
    found = ReleaseRange("2.10", "2.11", ("user_metadata in its trace", "no pool_id"))
    assert found.includes("not-a-version") and found.includes("2.11.0+cu130")
    assert not found.includes("2.9.1") and not found.includes("2.12.0")
    notes = outside_notes([("a.pickle#dev0", found), ("a.pickle#dev1", found)], "2.14.1")
    assert notes == [
        "a.pickle: its fields say PyTorch 2.10 or 2.11 wrote it (user_metadata in its trace, "
        "no pool_id), and PyTorch 2.14.1's allocator replayed it: another release can answer "
        "differently (--torch 2.11)"
    ]
    assert outside_notes([("a.pickle#dev0", found)], "2.11.0") == []


@pytest.mark.slow
def test_each_command_says_a_release_outside_the_snapshots_fields(
    torch_allocators: dict[str, Any], tmp_path: Path
) -> None:
    newest = str(torch_allocators["newest"].version)
    snapshot = tmp_path / "oom.pickle.gz"
    shutil.copyfile(SNAPSHOTS / "oom.pickle.gz", snapshot)
    said = f"{snapshot}: its fields say PyTorch 2.10 or 2.11 wrote it"
    commands = (
        ["explain", str(snapshot), "--device", "H200"],
        ["check", "--from-snapshot", str(snapshot), "--device", "H200"],
        ["recommend", "--from-snapshot", str(snapshot), "--device", "H200"],
        ["replay", str(snapshot), "-r", "torch:settings=recorded", "--device", "H200"],
    )
    for command in commands:
        outside = hipmem(*command, "--torch", newest, COLUMNS="400")
        assert said in outside.stderr and f"PyTorch {newest}'s allocator" in outside.stderr, (
            command, outside.stderr)  # fmt: skip
        inside = hipmem(*command, "--torch", "2.11.0", COLUMNS="400")
        assert said not in inside.stderr + inside.stdout, command
    done = hipmem("explain", str(snapshot), "--device", "H200", "--torch", newest, "--json")
    notes = json.loads(done.stdout)["release_notes"]
    assert len(notes) == 1 and notes[0].startswith(said), notes


def test_a_gzipped_snapshot_reads_the_same(tmp_path: Path, machine: str) -> None:
    packed = tmp_path / "2.12.1.pickle.gz"
    packed.write_bytes(gzip.compress((RELEASES / "2.12.1.pickle").read_bytes()))
    found = read_snapshot(packed)[0].recording.written_by
    assert found is not None and found.said() == "PyTorch 2.12"
