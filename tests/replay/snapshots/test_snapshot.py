"""PyTorch memory snapshots as allocation logs: real snapshots recorded on an H200 (PyTorch 2.11,
tests/snapshot_recorder.py), read here with no GPU and no torch, every figure checked against a
plain-Python reading and against the allocator's own statistics; hostile pickles refused."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hipmem
from hipmem.replay.logs.events import ACTION_NAMES
from hipmem.replay.logs.writer import write_rmm_csv
from hipmem.replay.snapshots import reader as snapshot
from tests.cli_run import hipmem as run_hipmem
from tests.snapshot_reference import NAMES, SNAPSHOTS, figures

REPO = Path(__file__).resolve().parents[3]
PATHS = [SNAPSHOTS / f"{name}.pickle.gz" for name in NAMES]


def hipmem_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO, **{"COLUMNS": "200", **env})


def test_the_committed_snapshots_are_there() -> None:
    missing = [p.name for p in PATHS if not p.is_file()]
    assert not missing, f"snapshots missing from tests/data/snapshots: {missing}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_events_and_figures_match_a_plain_reading(path: Path) -> None:
    log = hipmem.load_log(path)
    summary = hipmem.analyze(log)
    (expected,) = figures(path).values()  # one device each
    events = log.events
    got = list(
        zip(
            (ACTION_NAMES[int(a)] for a in events["action"]),
            events["pointer"].astype(int),
            events["size_bytes"].astype(int),
            events["stream"].astype(int),
            strict=True,
        )
    )
    assert got == expected.events
    assert summary.peak_live_bytes == expected.peak_requested_bytes
    assert summary.streams == len(expected.streams)
    (recording,) = log.recordings
    assert recording.pre_recording_allocations == expected.before_recording
    assert recording.peak_reserved_bytes == expected.peak_reserved_bytes
    assert len(recording.ooms) == expected.ooms == summary.failure_rows
    assert (events["line"] == 0).sum() == expected.before_recording  # placed first, line 0
    assert (np.diff(events["time_ns"].to_numpy()) >= 0).all()


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_figures_match_the_allocators_own_statistics(path: Path) -> None:
    stats = json.loads(path.with_name(path.name.replace(".pickle.gz", ".stats.json")).read_text())
    log = hipmem.load_log(path)
    peak_requested = hipmem.analyze(log).peak_live_bytes
    (recording,) = log.recordings
    assert recording.peak_reserved_bytes == stats["reserved_bytes_peak"]
    assert len(recording.ooms) == stats["num_ooms"]
    assert recording.alloc_conf == stats["alloc_conf"]
    if "max_entries" in stats["record"]:  # the ring buffer dropped the start of the run
        assert recording.pre_recording_allocations > 0
        assert peak_requested <= stats["requested_bytes_peak"]
    else:
        assert peak_requested == stats["requested_bytes_peak"]


def test_several_streams_keep_their_ids() -> None:
    log = hipmem.load_log(SNAPSHOTS / "multistream.pickle.gz")
    (expected,) = figures(SNAPSHOTS / "multistream.pickle.gz").values()
    assert set(log.events["stream"].astype(int)) == expected.streams
    assert len(expected.streams) == 3 and 0 not in expected.streams


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_converted_csv_reads_back_as_the_same_events(path: Path, tmp_path: Path) -> None:
    log = hipmem.load_log(path)
    (written,) = write_rmm_csv(log, tmp_path / "out.csv.gz")
    again = hipmem.load_log(written)
    columns = ["thread", "action", "pointer", "size_bytes", "stream"]
    assert again.skipped_count == 0
    assert again.events[columns].equals(log.events[columns])
    # RMM's times are microseconds of the day: the same instants, to the microsecond.
    assert (again.events["time_ns"] // 1000).equals(log.events["time_ns"] // 1000)


def test_convert_from_the_command_line(tmp_path: Path) -> None:
    done = hipmem_cli(
        "log", "convert", str(SNAPSHOTS / "oom.pickle.gz"), "-o", str(tmp_path / "oom.csv")
    )
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "oom.csv").read_text().splitlines()
    assert text[0] == "Thread,Time,Action,Pointer,Size,Stream"
    assert sum(",allocate failure,(nil),67108864," in line for line in text) == 2
    bad = hipmem_cli("log", "convert", str(SNAPSHOTS / "oom.pickle.gz"), "-o", "x.txt")
    assert bad.returncode == 2 and bad.stderr.startswith("Error: --output 'x.txt': must end in")


def test_inspect_and_replay_show_what_pytorch_reserved() -> None:
    path = SNAPSHOTS / "train-expandable.pickle.gz"
    inspected = hipmem_cli("log", "inspect", str(path), "--json")
    assert inspected.returncode == 0, inspected.stderr
    (recorded,) = json.loads(inspected.stdout)["recorded"]
    assert recorded["alloc_conf"] == "expandable_segments:True"
    stats = json.loads((SNAPSHOTS / "train-expandable.stats.json").read_text())
    assert recorded["peak_reserved_bytes"] == stats["reserved_bytes_peak"]
    replayed = hipmem_cli("replay", str(path), "-r", "host", "--json")
    assert replayed.returncode == 0, replayed.stderr
    payload = json.loads(replayed.stdout)
    assert payload["recorded"]["peak_reserved_bytes"] == stats["reserved_bytes_peak"]
    assert payload["recorded"]["peak_requested_bytes"] == stats["requested_bytes_peak"]
    table = hipmem_cli("replay", str(path), "-r", "host")
    assert "recorded (PyTorch)" in table.stdout and f"{stats['reserved_bytes_peak']:,}" in (
        table.stdout
    )


def test_detected_by_content_not_by_name(tmp_path: Path) -> None:
    disguised = tmp_path / "run.csv"
    disguised.write_bytes(gzip.decompress((SNAPSHOTS / "oom.pickle.gz").read_bytes()))
    assert len(hipmem.load_log(disguised).recordings) == 1
    csv = tmp_path / "log.pickle"
    csv.write_bytes((REPO / "tests/data/logs/anomalies.csv").read_bytes())
    assert hipmem.load_log(csv).recordings == []


# --------------------------------------------------------------------------- hostile pickles


class _RunsCode:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.command,))


def test_a_pickle_that_would_run_code_is_refused_naming_the_global(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = {"device_traces": [[_RunsCode(f"touch {marker}")]], "segments": []}
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(evil))
    with pytest.raises(
        snapshot.SnapshotRefused, match=r"refusing to load the global posix\.system"
    ):
        hipmem.load_log(path)
    done = hipmem_cli("log", "inspect", str(path))
    assert not marker.exists()
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "posix.system" in done.stderr


def test_a_class_instance_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "obj.pkl"
    path.write_bytes(pickle.dumps({"device_traces": [], "x": _RunsCode("true").__class__}))
    with pytest.raises(snapshot.SnapshotRefused, match="_RunsCode"):
        hipmem.load_log(path)


def test_a_decompression_bomb_stops_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "bomb.pickle.gz"
    payload = pickle.dumps({"device_traces": [[]], "pad": b"\0" * (8 << 20)})
    path.write_bytes(gzip.compress(payload))
    assert path.stat().st_size < 100_000
    done = hipmem_cli("log", "inspect", str(path), HIPMEM_SNAPSHOT_MAX_BYTES="1MiB")
    assert done.returncode == 1
    assert "more than 1,048,576 bytes once decompressed" in done.stderr


def test_shared_references_are_bounded_by_the_entry_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = {"action": "alloc", "addr": 4096, "size": 1, "stream": 0, "time_us": 1}
    trace = [entry] * 100_000  # one dict, referenced 100,000 times: a small pickle
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps({"device_traces": [trace], "segments": []}))
    assert path.stat().st_size < 400_000
    monkeypatch.setattr(snapshot, "MAX_TRACE_ENTRIES", 50_000)
    with pytest.raises(snapshot.SnapshotError, match="more than 50,000 trace entries"):
        hipmem.load_log(path)
    monkeypatch.undo()
    # Within the cap, every reference after the first is a skipped entry, never a copy.
    log = hipmem.load_log(path)
    assert len(log.events) == 1 and log.skipped_count == 99_999
    assert log.skipped[0].reason.startswith("entry is the same object as an earlier entry")


def test_damaged_entries_are_skipped_and_named(tmp_path: Path) -> None:
    trace = [
        {"action": "alloc", "addr": 4096, "size": 10, "stream": 0, "time_us": 5},
        {"action": "alloc", "addr": "oops", "size": 10, "stream": 0, "time_us": 6},
        ["not", "a", "dict"],
        {"action": "free_completed", "addr": 4096, "size": 10, "stream": 0, "time_us": 7},
    ]
    path = tmp_path / "damaged.pickle"
    path.write_bytes(pickle.dumps({"device_traces": [trace], "segments": []}))
    log = hipmem.load_log(path)
    assert len(log.events) == 2 and log.skipped_count == 2
    assert [(s.line, s.reason) for s in log.skipped] == [
        (2, "alloc entry: addr 'oops' is not a non-negative integer"),
        (3, "entry is a list, not a dict"),
    ]
    with pytest.raises(hipmem.HipmemError, match=r"damaged\.pickle#dev0:2: alloc entry"):
        hipmem.load_log(path, strict=True)


def test_a_pickle_that_is_not_a_snapshot_says_so(tmp_path: Path) -> None:
    path = tmp_path / "list.pkl"
    path.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(snapshot.SnapshotError, match="not a memory snapshot"):
        hipmem.load_log(path)


def test_reading_snapshots_needs_no_torch() -> None:
    probe = (
        "import sys, hipmem; hipmem.load_log('tests/data/snapshots/oom.pickle.gz'); "
        "assert 'torch' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_snapshot_without_history_says_what_it_can_and_cannot_answer(tmp_path: Path) -> None:
    """`_dump_snapshot` with include_traces=False (or history never on): segments, no trace.
    Every command says in one line what the segments hold and that a replay needs the trace;
    a gate never answers from it (#50)."""
    recorded = pickle.loads(gzip.decompress((SNAPSHOTS / "train-default.pickle.gz").read_bytes()))
    recorded["device_traces"] = [[] for _ in recorded["device_traces"]]
    path = tmp_path / "segments-only.pickle"
    path.write_bytes(pickle.dumps(recorded))
    for command in (["log", "inspect", str(path)],
                    ["check", "--from-snapshot", str(path), "--device", "H200"]):  # fmt: skip
        done = hipmem_cli(*command)
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1
        assert "no allocator history in this snapshot" in done.stderr
        assert "943,718,400 bytes; 67,108,864 bytes in 2 live blocks" in done.stderr
