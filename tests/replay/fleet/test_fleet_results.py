"""A fleet's results file is input: every line resumed is checked, and one that is not a record
hipmem wrote (wrong types, out of range, edited, truncated, too long, of a log that changed
since) is named `FILE:LINE: why` and its pair replayed again, never summed. Read in bounded
memory; a write that fails names the file. On a real local Dask cluster, over real logs."""

from __future__ import annotations

import hashlib
import json
import resource
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.fleet.cluster import fleet_client, plan_local_cluster
from hipmem.replay.fleet.results import MAX_LINE_BYTES, ResultsFile, ResultsFileError
from hipmem.replay.fleet.run import FleetRequest, run_fleet
from hipmem.replay.fleet.summary import summarize_fleet
from tests.cli_run import environment
from tests.cli_run import hipmem as run_hipmem
from tests.fleet_logs import real_fleet

REPO = Path(__file__).resolve().parents[3]
SPECS = ["host", "host:limit=600MiB"]
BYTES_BOUND = 1 << 62


@pytest.fixture(scope="module")
def client() -> Any:
    with fleet_client(plan=plan_local_cluster(gpus_needed=False, workers=2)) as client:
        yield client


@pytest.fixture(scope="module")
def fresh(client: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Six real logs (windows and shifts of the three real ones) through two resources, with
    a capacity search: the results file's lines and the summary of a fresh sweep."""
    folder = tmp_path_factory.mktemp("logs")
    logs = real_fleet(folder, windows=1, shifts=1, rows=600)
    request = FleetRequest(logs, [parse_spec(s) for s in SPECS], find_capacity=True)
    results = ResultsFile(folder / "fresh.jsonl")
    run = run_fleet(client, request, results)
    assert run.replayed_pairs == len(logs) * len(SPECS) and run.unused_lines == 0
    return {
        "logs": logs,
        "request": request,
        "lines": results.path.read_bytes().splitlines(keepends=True),
        "summary": figures(run.records),
    }


def figures(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fleet's answer, less the replays' wall time (a fact of the run, not of the logs)."""
    answers = [s.as_dict() for s in summarize_fleet(records, SPECS)]
    return [{k: v for k, v in a.items() if k != "replay_wall_ns"} for a in answers]


def sealed(record: dict[str, Any]) -> bytes:
    """A line as hipmem writes it: the record, then the SHA-256 of its canonical JSON."""
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return json.dumps({**record, "digest": digest}, separators=(",", ":")).encode() + b"\n"


def edited(**changes: Any) -> Any:
    """A damage: fields changed, the digest left as it was (an edit by hand)."""
    return lambda record, line: json.dumps({**json.loads(line), **changes}).encode() + b"\n"


def plausible_peak(record: dict[str, Any], line: bytes) -> bytes:
    """The tester's edit: a peak of 999,999,999,999, the fragmentation made to agree."""
    peak = 999_999_999_999
    ratio = round(peak / record["peak_requested_bytes"], 4)
    return edited(peak_reserved_bytes=peak, fragmentation=ratio)(record, line)


def without(name: str) -> Any:
    def damage(record: dict[str, Any], line: bytes) -> bytes:
        parsed = json.loads(line)
        del parsed[name]
        return json.dumps(parsed).encode() + b"\n"

    return damage


def changed_log(record: dict[str, Any], line: bytes) -> bytes:
    """A whole, sealed line of this log as it was before it changed: another content hash."""
    fields = {k: v for k, v in record.items() if k != "digest"}
    return sealed({**fields, "log_sha256": hashlib.sha256(b"the log before").hexdigest()})


# What a hostile or careless hand does to a line, and the words its line is named with.
DAMAGES: dict[str, tuple[Any, str]] = {
    "peak as a string": (edited(peak_reserved_bytes="12"), "is not a byte count"),
    "negative peak": (edited(peak_reserved_bytes=-5), "is not a byte count"),
    "peak past 2**62": (edited(peak_reserved_bytes=2**70), "is not a byte count"),
    "events as a float": (edited(events=2000.0), "is not a count"),
    "attempts as a bool": (edited(attempts=True), "is not a count from 1"),
    "capacity past 2**62": (edited(capacity_bytes=2**62), "is not a byte count"),
    "fragmentation NaN": (edited(fragmentation=float("nan")), "is not a number"),
    "a plausible peak": (plausible_peak, "does not match its digest"),
    "no digest": (without("digest"), "has no digest"),
    "no events": (without("events"), "no 'events'"),
    "a field of its own": (edited(note="x"), "a field 'note' hipmem never writes"),
    "a hash that is no SHA-256": (edited(log_sha256="xyz"), "is not a SHA-256"),
    "the log changed since": (changed_log, "has changed since this line was written"),
    "a spec that does not parse": (edited(spec="pool:maximum=8GB"), "is not a resource spec"),
    "a spec not as hipmem spells it": (edited(spec=" host"), "is not spelled as hipmem"),
    "another spec": (edited(spec="HOST"), "does not match its digest"),
    "version 2": (edited(version=2), "'version' 2 is not 1"),
    "a list": (lambda record, line: b"[1, 2]\n", "is not a JSON object"),
    "truncated JSON": (lambda record, line: line[: len(line) // 2] + b"\n", "not a JSON line"),
    "an integer of 5,000 digits": (
        lambda record, line: line.replace(b'"events":', b'"events":' + b"9" * 5000, 1),
        "not a JSON line",
    ),
    "a very long line": (
        lambda record, line: line[:-2] + b',"pad":"' + b"x" * MAX_LINE_BYTES + b'"}\n',
        f"longer than {MAX_LINE_BYTES:,} bytes",
    ),
}


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_hostile_records_are_named_and_run_again(client, fresh, tmp_path_factory, data):
    lines: list[bytes] = fresh["lines"]
    damaged = data.draw(
        st.dictionaries(
            st.integers(0, len(lines) - 1), st.sampled_from(sorted(DAMAGES)), min_size=1
        ),
        label="line -> damage",
    )
    written = list(lines)
    for index, name in damaged.items():
        written[index] = DAMAGES[name][0](json.loads(lines[index]), lines[index])
    path = tmp_path_factory.mktemp("resumed") / "results.jsonl"
    path.write_bytes(b"".join(written))

    run = run_fleet(client, fresh["request"], ResultsFile(path))

    named = {str(place.where): place.reason for place in run.unused_places}
    assert run.unused_lines == len(damaged) == len(named), named
    for index, name in damaged.items():
        reason = named[f"{path}:{index + 1}"]
        assert DAMAGES[name][1] in reason, (name, reason)
        assert "\n" not in reason and len(reason) < 400  # one line, never the input echoed
    assert run.replayed_pairs == len(damaged)  # each damaged line's pair, and no other
    assert figures(run.records) == fresh["summary"]
    for record in run.records:
        assert all(
            0 <= record[k] < BYTES_BOUND
            for k in ("peak_reserved_bytes", "peak_requested_bytes", "capacity_bytes")
        )


def test_the_testers_edits_through_the_command(fresh, tmp_path):
    """The records that fell: a peak of 999,999,999,999 (fragmentation to match), -5, "12" and
    2**70. Each is named on a line of its own, its pair run again, and the answer is a fresh
    run's, with the fresh run's exit code."""
    lines = list(fresh["lines"])
    tester = [plausible_peak, edited(peak_reserved_bytes=-5), edited(peak_reserved_bytes="12")]
    tester.append(edited(peak_reserved_bytes=2**70))
    for index, damage in enumerate(tester):
        lines[index] = damage(json.loads(lines[index]), lines[index])
    results = tmp_path / "results.jsonl"
    results.write_bytes(b"".join(lines))
    logs = [str(p) for p in fresh["logs"]]
    args = ["fleet", *logs, *(w for s in SPECS for w in ("-r", s)), "--find-capacity"]
    done = run_hipmem(*args, "--workers", "2", "--results", str(results), "--json",
                      cwd=REPO, PYTHONPATH=str(REPO))  # fmt: skip
    warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
    assert warnings == [
        f"Warning: {results}:1: line not used: the line does not match its digest: edited "
        "or damaged since hipmem wrote it",
        f"Warning: {results}:2: line not used: 'peak_reserved_bytes' -5 is not a byte count "
        "from 0 to below 2**62",
        f"Warning: {results}:3: line not used: 'peak_reserved_bytes' '12' is not a byte count "
        "from 0 to below 2**62",
        "Warning: and 1 more line of the results file not used (--json lists the first 100: "
        "results_lines_not_used)",
    ]
    payload = json.loads(done.stdout)
    assert payload["pairs_run"] == 4 and payload["results_lines_not_used"]["count"] == 4
    assert payload["results_lines_not_used"]["first"][3] == {
        "where": f"{results}:4",
        "reason": "'peak_reserved_bytes' 1180591620717411303424 is not a byte count from 0 "
        "to below 2**62",
    }
    answers = [{k: v for k, v in r.items() if k != "replay_wall_ns"} for r in payload["resources"]]
    assert answers == fresh["summary"]
    fresh_code = 1 if any(r["status"] != "ok" for r in payload["records"]) else 0
    assert done.returncode == fresh_code, done.stderr


# --------------------------------------------------------------------------- bounded reading


def test_a_long_line_is_read_past_in_bounded_memory(fresh, tmp_path):
    """A 64 MiB line between two records: named with its line, never held whole (traced
    memory stays within a few blocks of 1 MiB), and the records after it are read."""
    path = tmp_path / "results.jsonl"
    with path.open("wb") as out:
        out.write(fresh["lines"][0])
        for _ in range(64):
            out.write(b"x" * (1 << 20))
        out.write(b"\n")
        out.write(fresh["lines"][1])
    tracemalloc.start()
    try:
        read = ResultsFile(path).read()
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 8 << 20, f"{peak_bytes:,} bytes traced reading a 64 MiB line"
    assert [str(p) for p in read.places] == [
        f"{path}:2: longer than {MAX_LINE_BYTES:,} bytes, skipped unread"
    ]
    assert len(read.records) == 2


def test_a_long_fragment_is_cut_back_to_the_last_whole_line(fresh, tmp_path):
    """A last line with no newline is cut off by the next append, however long it is: the
    lines before it stay. (One shorter than a line's bound is what a crash leaves, and is
    passed over in silence; a longer one is not, and is named as any long line is.)"""
    path = tmp_path / "results.jsonl"
    path.write_bytes(fresh["lines"][0] + b'{"version":1,"log_sha')
    results = ResultsFile(path)
    assert len(results.read().records) == 1 and results.read().skipped == 0
    path.write_bytes(fresh["lines"][0] + b"y" * (3 << 20))  # no newline at the end
    read = results.read()
    assert len(read.records) == 1 and [p.where for p in read.places] == [f"{path}:2"]
    record = {k: v for k, v in json.loads(fresh["lines"][1]).items() if k != "digest"}
    results.append(record)
    assert path.read_bytes().splitlines(keepends=True) == [fresh["lines"][0], fresh["lines"][1]]


# --------------------------------------------------------------------------- a full disk


def test_a_full_disk_names_the_results_file():
    """/dev/full: every write fails with ENOSPC, as on a full disk."""
    with pytest.raises(ResultsFileError) as raised:
        ResultsFile(Path("/dev/full")).append({"version": 1})
    assert str(raised.value) == "cannot write /dev/full: No space left on device"


def test_the_command_stops_in_one_line_when_the_results_file_cannot_grow(fresh, tmp_path):
    """A real limit on the size of files the command may write (RLIMIT_FSIZE, with SIGXFSZ
    ignored: the write fails with EFBIG as one on a full disk fails with ENOSPC): one line
    naming the file, exit 1, and the file keeps whole lines only."""
    results = tmp_path / "results.jsonl"
    results.write_bytes(fresh["lines"][0])
    limit = len(fresh["lines"][0]) + 100

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    logs = [str(p) for p in fresh["logs"]]
    done = subprocess.run(
        [sys.executable, "-m", "hipmem.cli.main", "fleet", *logs, "-r", "host",
         "--workers", "1", "--results", str(results)],
        capture_output=True, text=True, cwd=REPO, env=environment(PYTHONPATH=str(REPO)),
        preexec_fn=small_files, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if not line.startswith("fleet: ")]
    assert errors == [f"Error: cannot write {results}: File too large"]
    assert results.read_bytes() == fresh["lines"][0]  # the partial line taken back out
