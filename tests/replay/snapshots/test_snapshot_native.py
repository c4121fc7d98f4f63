"""The C snapshot reader (replay/snapshots/csrc/) against the Python
reference machine (replay/snapshots/pickle_machine.py): the same columns, recordings, skipped
entries and errors on every committed snapshot and on mutated ones; and the Python machine where
the install could not build the C one."""

from __future__ import annotations

import gzip
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipmem.replay.logs.events import LineRef
from hipmem.replay.snapshots import native as snapshot_native
from hipmem.replay.snapshots import reader as snapshot
from tests.snapshot_reference import NAMES

REPO = Path(__file__).resolve().parents[3]
SNAPSHOTS = REPO / "tests" / "data" / "snapshots"
READER = snapshot_native.READER_ENV
# The committed snapshots the mutation tests start from: a complete one, one started late, an
# OOM, several streams (small enough for ~150 readings each by the Python machine).
MUTATED = ("oom", "multistream-oom", "train-late", "multistream")
_DECOMPRESSED = {name: gzip.decompress((SNAPSHOTS / f"{name}.pickle.gz").read_bytes())
                 for name in MUTATED}  # fmt: skip


def _read(path: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What read_snapshot gives with the machine `how`: comparable values, or the error."""
    monkeypatch.setenv(READER, how)
    try:
        parts = snapshot.read_snapshot(path)
    except Exception as err:  # compared as they are: the same class and words
        return ("error", type(err).__name__, str(err))
    found = []
    for part in parts:
        columns = {name: (str(col.dtype), col.tolist()) for name, col in part.columns.items()}
        recording = {
            key: (value.tolist() if isinstance(value, np.ndarray) else value)
            for key, value in vars(part.recording).items()
        }
        found.append((columns, part.skipped, part.skipped_count, recording))
    return found


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    return _read(path, "python", monkeypatch), _read(path, "native", monkeypatch)


def _raw_reads_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: bytes) -> None:
    """A protocol 4 pickle of `body`'s opcodes reads alike (or fails alike) in both machines."""
    path = tmp_path / "raw.pickle"
    path.write_bytes(b"\x80\x04" + body)
    python, native = _both(path, monkeypatch)
    assert python == native


def test_the_native_reader_is_the_default_here() -> None:
    # This machine has a C compiler and Python's headers: the C machine must be the one used.
    assert "HIPMEM_SNAPSHOT_READER" not in os.environ
    assert snapshot_native.restricted_pickle() is snapshot_native.NativeRestrictedPickle


@pytest.mark.parametrize("name", NAMES)
def test_committed_snapshots_read_the_same(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    python, native = _both(SNAPSHOTS / f"{name}.pickle.gz", monkeypatch)
    assert python[0] != "error" and python == native


@pytest.mark.parametrize("line", [1, 2, 3679])
def test_frames_of_an_entry_read_the_same(line: int, monkeypatch: pytest.MonkeyPatch) -> None:
    where = LineRef(f"{SNAPSHOTS / 'train-default.pickle.gz'}#dev0", line)
    found = {}
    for how in ("python", "native"):
        monkeypatch.setenv(READER, how)
        found[how] = snapshot.entry_frames(where)
    assert found["python"] and found["python"] == found["native"]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(MUTATED),
    where=st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=4),
    values=st.lists(st.integers(min_value=0, max_value=255), min_size=4, max_size=4),
    cut=st.one_of(st.none(), st.integers(min_value=0, max_value=10**9)),
)
def test_byte_mutated_snapshots_read_the_same(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    where: list[int],
    values: list[int],
    cut: int | None,
) -> None:
    data = bytearray(_DECOMPRESSED[name])
    for spot, value in zip(where, values, strict=False):
        data[spot % len(data)] = value
    if cut is not None:
        del data[cut % len(data) :]
    path = tmp_path / "mutated.pickle"
    path.write_bytes(bytes(data))
    python, native = _both(path, monkeypatch)
    assert python == native


_VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=1 << 40),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.booleans(),
    st.none(),
    st.lists(st.integers(min_value=0, max_value=9), max_size=3),
    st.dictionaries(st.sampled_from(["action", "addr", "x"]), st.integers(0, 9), max_size=2),
    st.sampled_from(["alloc", "free_completed", "oom", "segment_alloc", "segment_free"]),
)
_FIELDS = ("action", "addr", "size", "stream", "time_us", "frames", "device_free", "extra")


def _changes(fields: tuple[str, ...], values: Any) -> Any:
    """One to four (index, field, value) changes to make to a committed snapshot."""
    item = st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(fields), values)
    return st.lists(item, min_size=1, max_size=4)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.sampled_from(MUTATED), changes=_changes((*_FIELDS, "<entry>", "<delete>"), _VALUES))
def test_field_mutated_snapshots_read_the_same(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    changes: list[tuple[int, str, Any]],
) -> None:
    data = pickle.loads(_DECOMPRESSED[name])  # the project's own recording
    trace = data["device_traces"][0]
    for index, field, value in changes:
        at = index % len(trace)
        if field == "<entry>":
            trace[at] = value  # the entry itself replaced by another value
        elif field == "<delete>" and isinstance(trace[at], dict):
            trace[at] = {k: v for k, v in trace[at].items() if k != "size"}
        elif isinstance(trace[at], dict):
            trace[at] = {**trace[at], field: value}
    path = tmp_path / "fields.pickle"
    path.write_bytes(pickle.dumps(data, protocol=4))
    python, native = _both(path, monkeypatch)
    assert python == native


_SEGMENT_FIELDS = ("device", "blocks", "total_size", "stream", "<segment>")
_BLOCK_FIELDS = ("state", "address", "requested_size", "<block>")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(MUTATED),
    changes=_changes(
        _SEGMENT_FIELDS + _BLOCK_FIELDS,
        st.one_of(_VALUES, st.sampled_from(["active_allocated", "active_pending_free"])),
    ),
)
def test_segment_mutated_snapshots_read_the_same(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    changes: list[tuple[int, str, Any]],
) -> None:
    # The segments are walked in C after the C machine (`device_segments`), in Python after
    # the Python one: the same devices, reserved bytes and blocks active at dump time.
    data = pickle.loads(_DECOMPRESSED[name])
    segments = data["segments"]
    for index, field, value in changes:
        segment = segments[index % len(segments)]
        blocks = segment.get("blocks") if isinstance(segment, dict) else None
        if field == "<segment>":
            segments[index % len(segments)] = value
        elif field in _SEGMENT_FIELDS and isinstance(segment, dict):
            segment[field] = value
        elif isinstance(blocks, list) and blocks:
            at = index % len(blocks)
            if field == "<block>":
                blocks[at] = value
            elif isinstance(blocks[at], dict):
                blocks[at][field] = value
    path = tmp_path / "segments.pickle"
    path.write_bytes(pickle.dumps(data, protocol=4))
    python, native = _both(path, monkeypatch)
    assert python == native


@pytest.mark.parametrize(
    "body",
    [
        b"cbuiltins\nlen\n.",
        b"cbuiltins\nlen",
        b"K\x01K\x02\x85R.",
        b"I1\n.",
        b"(]\x91.",
        b"}](K\x01s.",
        b"\x8d" + (2**64 - 1).to_bytes(8, "little") + b"abc.",
        b"}\x94(\x8c\x06action",
        b"h\x07.",
        b"]K\x01]\x86.",
        b"e.",
        b"K\x01q",
        b"q\x01.",
        b"r\x00\x00\x01\x00.",
        b"\x8b\xff\xff\xff\xff.",
        b"\x8c\x02\xff\xfe.",
        b"(" * 10_001,
        b"\x8f(]\x90.",
        b"K\x01(K\x02\x90.",
        b"\x8c\x01a\x8c\x01b\x93.",
        b"\x80\x01.",
        b"}(\x8c\x0ddevice_traces](](}\x8c\x06actionK\x01s]ee\x94u.",
    ],
)
def test_hostile_opcodes_say_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: bytes
) -> None:
    _raw_reads_the_same(tmp_path, monkeypatch, body)


_ENTRY = {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 7}
_HELD = b"}\x94(\x8c\x06action\x8c\x05alloc\x8c\x04sizeK\x05u"  # memo 0, held back


def _shared_entry(where: str) -> Any:
    entry = dict(_ENTRY)  # one object, so pickle writes it once and BINGETs it after
    return {
        "value first": {"segments": [{"device": 0, "x": entry}], "device_traces": [[entry]]},
        "value after": {"device_traces": [[entry]], "segments": [{"x": entry}]},
        "two lists": {"device_traces": [[entry], [entry]], "segments": []},
        "tuple first": {"t": (entry,), "device_traces": [[entry]]},
        "top level": entry,
        "a list of its own": {"device_traces": [[entry]], "other": [entry]},
    }[where]


@pytest.mark.parametrize(
    "where",
    ["value first", "value after", "two lists", "tuple first", "top level", "a list of its own"],
)
def test_an_entry_read_elsewhere_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # The C machine holds an entry's keys and values back, its dict empty, until it is read
    # into columns; wherever else the dict shows up first, it must already be whole.
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps(_shared_entry(where), protocol=4))
    python, native = _both(path, monkeypatch)
    assert python == native


@pytest.mark.parametrize(
    "body",
    [
        _HELD + b"(K\x01e.",  # APPENDS to it: the message shows it whole
        _HELD + b"h\x00\x85.",  # fetched again, then in a tuple
        _HELD + b"0h\x00\x85.",  # popped, fetched from the memo
        _HELD + b"(\x8c\x06streamK\x00u\x85.",  # a second SETITEMS
        _HELD + b"\x85.",  # in a tuple
        _HELD + b"}(\x8c\x01ah\x00u\x86.",  # a value of another dict
        _HELD + b"}(h\x00K\x01u.",  # a key of another dict
        b"}\x94(\x8c\x06actionh\x00u\x85.",  # its own value: never held
        b"}(\x8c\x06action\x8c\x05alloc\x8c\x06action\x8c\x03oomu\x85.",  # a key twice
        b"}(\x8c\x11action_is_longer_\x8c\x01a\x8c\x06actionK\x01u\x85.",  # a long key
        _HELD + b"\x8a\x01\x01.",  # LONG1 leaves it held; STOP fills it
    ],
)
def test_a_held_back_entry_says_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: bytes
) -> None:
    _raw_reads_the_same(tmp_path, monkeypatch, body)


def test_the_caps_say_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"action": "alloc", "addr": 4096, "size": 1, "stream": 0, "time_us": 1}
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps({"device_traces": [[entry] * 3000], "segments": []}))
    monkeypatch.setattr(snapshot, "MAX_TRACE_ENTRIES", 2000)
    python, native = _both(path, monkeypatch)
    assert python[0] == "error" and "more than 2,000 trace entries" in python[2]
    assert python == native
    monkeypatch.undo()
    monkeypatch.setattr(snapshot, "MAX_HELD_OBJECTS", 1000)
    path.write_bytes(pickle.dumps({"device_traces": [[entry]], "pad": list(range(2000))}))
    python, native = _both(path, monkeypatch)
    assert python[0] == "error" and "more than 1,000 objects held at once" in python[2]
    assert python == native
    monkeypatch.setenv("HIPMEM_SNAPSHOT_MAX_BYTES", "4KiB")
    path.write_bytes(pickle.dumps({"device_traces": [[entry]], "pad": "x" * 10_000}))
    python, native = _both(path, monkeypatch)
    assert python[0] == "error" and "more than 4,096 bytes once decompressed" in python[2]
    assert python == native


def test_a_batch_of_appends_is_read_an_entry_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pickle appends 1,000 items per APPENDS; held until then, this batch would be ~7,000
    # objects, past a cap of 2,000. Each entry is read as the next begins: one at a time.
    entries = [
        {"action": "alloc", "addr": 4096 * (i + 1), "size": i + 1, "stream": 0, "time_us": i}
        for i in range(1000)
    ]
    path = tmp_path / "batch.pickle"
    path.write_bytes(pickle.dumps({"device_traces": [entries], "segments": []}, protocol=4))
    monkeypatch.setattr(snapshot, "MAX_HELD_OBJECTS", 2000)
    python, native = _both(path, monkeypatch)
    assert python[0] != "error", python
    assert python == native
    columns, _, _, recording = python[0]
    assert recording["trace_entries"] == 1000 and columns["size_bytes"][1][-1] == 1000


def _hipmem(env: dict[str, str], *args: str, block_native: bool = False) -> Any:
    """`hipmem ARGS` in a fresh process; `block_native`: as installed without the C reader
    (its import fails, as when setuptools could not build the optional extension)."""
    code = (
        "import runpy, sys\n"
        "class NotBuilt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'hipmem.replay.snapshots._snapshot_reader':\n"
        "            raise ImportError('not built')\n"
        "if sys.argv.pop(1) == 'block':\n"
        "    sys.meta_path.insert(0, NotBuilt())\n"
        "runpy.run_module('hipmem.cli.main', run_name='__main__', alter_sys=True)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "block" if block_native else "keep", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        check=False,
    )


def test_the_native_reader_is_imported_with_its_package() -> None:
    # Built by the install (setup.py), next to the module that imports it: nothing is built,
    # looked up or checked when a snapshot is read.
    module = snapshot_native.load()
    assert Path(module.__file__ or "").parent == Path(snapshot_native.__file__).parent


def test_without_the_extension_the_python_machine_reads() -> None:
    path = str(SNAPSHOTS / "oom.pickle.gz")
    usual = _hipmem({}, "log", "inspect", path)
    assert usual.returncode == 0, usual.stderr
    quiet = _hipmem({}, "log", "inspect", path, block_native=True)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert quiet.stdout == usual.stdout
    forced = _hipmem({READER: "native"}, "log", "inspect", path, block_native=True)
    assert forced.returncode == 1
    assert forced.stderr.count("\n") == 1, forced.stderr
    assert "the C snapshot reader was not built when hipmem was installed" in forced.stderr
    assert "pip install" in forced.stderr


def test_a_reader_built_in_place_is_as_new_as_its_source() -> None:
    # In a checkout, `pip install -e .` builds the C machine beside its package; an edit of
    # its source without building again would test the old machine against the Python one.
    module = snapshot_native._native_module
    if module is None or module.__file__ is None:
        pytest.skip("installed without the C snapshot reader")
    built = Path(module.__file__)
    folder = REPO / "replay" / "snapshots" / "csrc"
    if built.parent != folder.parent:
        pytest.skip("an installed package: its source is not here")
    sources = sorted((*folder.glob("*.c"), *folder.glob("*.h")))
    assert len(sources) > 2
    for source in sources:
        assert built.stat().st_mtime >= source.stat().st_mtime, (
            f"{built.name} is older than {source.name}: run `pip install -e .` to build it again"
        )
