"""A gate answers about the whole input or not at all, and no input reaches "internal error".

`check --from-snapshot` and `recommend --from-snapshot` replay through PyTorch's real
allocator on the virtual GPU (the `torch211` fixture fetches it once); every input here is
generated from the committed snapshots and logs, damaged field by field or byte by byte.
Commands run in process (tests/gate_inputs.py) through the console script's own error
boundary; where the process boundary is the point, tests/**/test_hostile_*.py run subprocesses.
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gate_inputs import (
    CSV_HEADER,
    assert_named_failure,
    compressed_csv,
    csv_rows,
    deeply_nested_size,
    hipmem,
    raw_pickle,
    readme_fail_example,
    snapshot,
    tracked_entries,
    write_snapshot,
)
from tests.snapshot_reference import SNAPSHOTS

README_FAIL = ("--alloc-conf", "expandable_segments:True", "--device-memory", "560MiB")
# A field PyTorch writes as an int, stored as anything else: a skipped entry, never a size.
NOT_AN_INT = st.sampled_from([135_680_000.0, "4096", None, -1, 2**63, 2**64 + 3, [4096],
                              {"size": 1}, True, b"\x00\x01", 1e300])  # fmt: skip
FIELDS = st.sampled_from(["addr", "size", "stream", "time_us"])
FEW = settings(max_examples=12, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


# --- the gate: check and recommend never answer from part of the input ----------------------


def test_the_readme_fail_example_with_a_float_size_no_longer_passes(
    tmp_path: Path, torch211: object
) -> None:
    damaged = readme_fail_example(tmp_path)
    refused = hipmem("check", "--from-snapshot", str(damaged), *README_FAIL)
    line = assert_named_failure(refused, codes=(1,))
    assert line == (
        f"Error: 2 unreadable entries skipped: {damaged}#dev0:2003: alloc entry: size "
        f"135680000.0 is not a non-negative integer; {damaged}#dev0:2008: free_completed entry: "
        "size 135680000.0 is not a non-negative integer; no answer from part of the input "
        "(--accept-skipped answers from the readable rest)"
    )
    assert refused.stdout == ""
    # --strict is what it is everywhere: the first unreadable entry is the error.
    strict = hipmem("check", "--from-snapshot", str(damaged), *README_FAIL, "--strict",
                    "--accept-skipped")  # fmt: skip
    assert assert_named_failure(strict, codes=(1,)) == (
        f"Error: {damaged}#dev0:2003: alloc entry: size 135680000.0 is not a non-negative "
        "integer (and 1 more bad rows)")  # fmt: skip
    # Told to accept them, it answers from the rest, and says what it did without.
    accepted = hipmem("check", "--from-snapshot", str(damaged), *README_FAIL, "--accept-skipped",
                      "--json")  # fmt: skip
    assert accepted.code == 0, accepted.stderr
    verdict = json.loads(accepted.stdout)["allocator_settings"]
    assert verdict["fits"] is True
    assert verdict["skipped_entries"]["count"] == 2
    assert [e["where"] for e in verdict["skipped_entries"]["first"]] == [
        f"{damaged}#dev0:2003", f"{damaged}#dev0:2008"]  # fmt: skip
    assert "(accepted: --accept-skipped)" in accepted.stderr
    # The undamaged snapshot still fails as the README says, with nothing skipped.
    original = hipmem("check", "--from-snapshot", str(SNAPSHOTS / "train-default.pickle.gz"),
                      *README_FAIL, "--json")  # fmt: skip
    assert original.code == 1
    assert json.loads(original.stdout)["allocator_settings"]["skipped_entries"] == {
        "count": 0, "first": []}  # fmt: skip


def test_recommend_refuses_a_snapshot_with_a_skipped_entry(
    tmp_path: Path, torch211: object
) -> None:
    data = snapshot("oom")
    data["device_traces"][0][tracked_entries(data)[-1]]["size"] = 2**63 + 5  # past int64
    damaged = write_snapshot(tmp_path / "huge.pickle.gz", data)
    ran = hipmem("recommend", "--from-snapshot", str(damaged), "--format", "shell")
    line = assert_named_failure(ran, codes=(1,))
    assert f"{damaged}#dev0:" in line and "--accept-skipped" in line
    assert ran.stdout == ""  # no setting emitted, not even an empty one


@FEW
@given(data=st.data(), value=NOT_AN_INT, field=FIELDS)
def test_check_never_passes_on_a_snapshot_with_a_skipped_entry(
    tmp_path_factory: pytest.TempPathFactory, torch211: object, data: Any, value: object,
    field: str,
) -> None:  # fmt: skip
    snap = snapshot("oom")
    index = data.draw(st.sampled_from(tracked_entries(snap)))
    snap["device_traces"][0][index][field] = value
    damaged = write_snapshot(tmp_path_factory.mktemp("field") / "damaged.pickle.gz", snap)
    ran = hipmem("check", "--from-snapshot", str(damaged), "--device-memory", "80GiB")
    line = assert_named_failure(ran, codes=(1,))
    assert f"{damaged}#dev0:{index + 1}: " in line
    assert f" {field} " in line


def test_nothing_readable_is_nothing_to_answer_in_every_command(
    tmp_path: Path, torch211: object
) -> None:
    data = snapshot("oom")
    data["device_traces"][0] = [7] * len(data["device_traces"][0])  # ints where dicts belong
    data["segments"] = []
    snap = write_snapshot(tmp_path / "unreadable.pickle.gz", data)
    csv = compressed_csv(tmp_path / "unreadable.csv.gz", CSV_HEADER + csv_rows(9, size="4k"))
    out = tmp_path / "out.csv"
    for log in (snap, csv):
        for args in (("log", "inspect", str(log)), ("log", "inspect", str(log), "--json"),
                     ("replay", str(log), "-r", "host", "--backend", "host"),
                     ("log", "convert", str(log), "-o", str(out)),
                     ("check", "--from-snapshot", str(log)),
                     ("recommend", "--from-snapshot", str(log), "--accept-skipped")):  # fmt: skip
            if args[0] in ("check", "recommend") and log == csv:
                continue  # not a snapshot: a usage error of its own
            ran = hipmem(*args)
            line = assert_named_failure(ran, codes=(1,))
            assert line.startswith("Error: nothing to answer: "), (args, line)
            assert f"{log}" in line and line.endswith(", none readable")
    assert not out.exists()


def test_a_header_only_log_is_still_an_empty_log_not_an_error(tmp_path: Path) -> None:
    """Nothing skipped, nothing read: an empty log (0 events), as before."""
    log = compressed_csv(tmp_path / "empty.csv", CSV_HEADER)
    ran = hipmem("log", "inspect", str(log), "--json")
    assert ran.code == 0, ran.stderr
    assert json.loads(ran.stdout)["events"] == 0


# --- every input problem named: one line, never "internal error" ----------------------------


def _header_2_40(tmp_path: Path) -> Path:
    return raw_pickle(tmp_path / "s.pickle", b"\x8d" + struct.pack("<Q", 2**40) + b"abc")


HOSTILE_PICKLES = {
    "a size nested 100,000 lists deep (RecursionError)": (
        lambda p: raw_pickle(p / "s.pickle", deeply_nested_size(100_000)), "size [[[...]]]"),
    "a list as a dict key (TypeError)": (
        lambda p: raw_pickle(p / "s.pickle", b"}(]K\x01u"), "unhashable type: 'list'"),
    "a REDUCE of a non-callable (TypeError)": (
        lambda p: raw_pickle(p / "s.pickle", b"}(K\x01K\x02tRu"), "the opcode REDUCE"),
    "a 2**40-byte string header (MemoryError)": (_header_2_40, "not a readable snapshot"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE_PICKLES))
def test_hostile_pickles_are_one_line(tmp_path: Path, case: str) -> None:
    make, said = HOSTILE_PICKLES[case]
    path = make(tmp_path)
    for args in (("log", "inspect", str(path)), ("log", "convert", str(path), "-o",
                                                 str(tmp_path / "o.csv"))):  # fmt: skip
        line = assert_named_failure(hipmem(*args))
        assert str(path) in line and said in line, line
        assert len(line) < 400  # an excerpt, never the input's repr


@pytest.mark.parametrize(
    "case",
    ["huge timestamp", "segments sum past 2**63", "ints where lists belong",
     "frozenset settings key", "tuple settings key", "unhashable settings value"],
)  # fmt: skip
def test_hostile_snapshot_fields_are_named_or_skipped(tmp_path: Path, case: str) -> None:
    data = snapshot("oom")
    trace = data["device_traces"][0]
    first = tracked_entries(data)[0]
    if case == "huge timestamp":
        trace[first]["time_us"] = 2**62  # a valid int64, but not as nanoseconds
    elif case == "segments sum past 2**63":
        for segment in data["segments"][:2]:
            segment["total_size"] = 2**62  # each plausible alone: the sum would wrap
    elif case == "ints where lists belong":
        data["segments"][0]["blocks"] = 5
        trace[first]["frames"] = 7
    elif case == "frozenset settings key":
        data["allocator_settings"][frozenset([1])] = 1
    elif case == "tuple settings key":
        data["allocator_settings"][(1, 2)] = [1]
    else:
        data["allocator_settings"]["roundup_power2_divisions"] = {"1": {1, 2}}
    path = write_snapshot(tmp_path / "s.pickle.gz", data)
    ran = hipmem("log", "inspect", str(path), "--json")
    if case == "segments sum past 2**63":
        line = assert_named_failure(ran, codes=(1,))
        assert line == (f"Error: {path}#dev0: the segments add up to more than 2**62 bytes; "
                        "not a snapshot of a real device")  # fmt: skip
        return
    assert ran.code == 0, ran.stderr
    assert "EiB" not in ran.stdout
    report = json.loads(ran.stdout)
    if case == "huge timestamp":
        assert report["skipped_rows"]["first"][0]["line"] == first + 1
        assert "past year 2262" in report["skipped_rows"]["first"][0]["reason"]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data())
def test_a_snapshot_damaged_byte_by_byte_is_read_or_named(
    tmp_path_factory: pytest.TempPathFactory, torch211: object, data: Any
) -> None:
    raw = bytearray(gzip.decompress((SNAPSHOTS / "oom.pickle.gz").read_bytes()))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(1, len(raw))))
    path = tmp_path_factory.mktemp("bytes") / "damaged.pickle"
    path.write_bytes(bytes(raw[:cut]))
    ran = hipmem("log", "inspect", str(path), "--json")
    assert ran.code in (0, 1, 2), ran.stderr
    assert "internal error" not in ran.stderr and "Traceback" not in ran.stderr
    if ran.code != 0:
        assert_named_failure(ran)
        return
    if json.loads(ran.stdout)["skipped_rows"]["count"]:  # the gate never passes on those
        gate = hipmem("check", "--from-snapshot", str(path), "--device-memory", "80GiB")
        assert_named_failure(gate, codes=(1,))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data())
def test_a_csv_log_damaged_byte_by_byte_is_read_or_named(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    raw = bytearray((CSV_HEADER + csv_rows(40)).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("bytes") / "damaged.csv"
    path.write_bytes(bytes(raw))
    ran = hipmem("log", "inspect", str(path), "--json")
    assert ran.code in (0, 1, 2), ran.stderr
    assert "internal error" not in ran.stderr and "Traceback" not in ran.stderr
    if ran.code != 0:
        assert_named_failure(ran)


# --- output paths: checked before the work; several files all or none ----------------------


def test_an_output_that_cannot_be_written_is_refused_before_the_log_is_read(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "taken.csv"
    folder.mkdir()
    log = str(SNAPSHOTS / "oom.pickle.gz")
    for out, said in ((folder, "is a directory"), (Path("/proc/x.csv"), "cannot write in folder"),
                      (tmp_path / "no" / "x.csv", "does not exist")):  # fmt: skip
        line = assert_named_failure(hipmem("log", "convert", log, "-o", str(out)), codes=(2,))
        assert line.startswith(f"Error: --output '{out}': ") and said in line


def test_a_multi_device_convert_writes_every_file_or_none(tmp_path: Path) -> None:
    data = snapshot("oom")
    # A second device, its own entries (PyTorch never shares an entry between devices; the
    # streaming reader reads a second reference to one as a skipped entry).
    data["device_traces"].append([dict(entry) for entry in data["device_traces"][0]])
    path = write_snapshot(tmp_path / "two.pickle.gz", data)
    (tmp_path / "out.dev1.csv").mkdir()  # the second output cannot be written
    ran = hipmem("log", "convert", str(path), "-o", str(tmp_path / "out.csv"))
    line = assert_named_failure(ran, codes=(2,))
    assert "out.dev1.csv': is a directory" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.dev1.csv", "two.pickle.gz"]
    (tmp_path / "out.dev1.csv").rmdir()
    done = hipmem("log", "convert", str(path), "-o", str(tmp_path / "out.csv"))
    assert done.code == 0, done.stderr
    assert (tmp_path / "out.dev0.csv").read_bytes() == (tmp_path / "out.dev1.csv").read_bytes()


def test_github_env_that_is_a_directory_is_refused_before_the_replays(
    tmp_path: Path, torch211: object
) -> None:
    ran = hipmem("recommend", "--from-snapshot", str(SNAPSHOTS / "oom.pickle.gz"), "--format",
                 "github", GITHUB_ENV=str(tmp_path))  # fmt: skip
    line = assert_named_failure(ran, codes=(1,))
    assert line == f"Error: cannot append to $GITHUB_ENV ({tmp_path}): Is a directory"
    assert "allocator settings" not in ran.stderr  # no grid was replayed


# --- figures never wrap -----------------------------------------------------------------------


def test_fleet_totals_are_exact_past_2_63() -> None:
    from hipmem.replay.fleet.summary import Spread

    peaks = [2**62 - 1, 2**62 - 3, 2**62 - 5]
    spread = Spread.of(peaks)
    assert spread is not None
    assert spread.as_bytes()["total_bytes"] == sum(peaks) > 2**63
    assert spread.as_bytes()["max_bytes"] == 2**62 - 1
