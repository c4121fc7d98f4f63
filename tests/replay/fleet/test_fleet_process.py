"""`hipmem fleet` as a process: it says what it is doing before any pair runs, and a SIGTERM
stops it in one line with every worker stopped. Real subprocesses of the real command, on real
Dask clusters; each step waits for the line that says the command got there, never a timer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

pytest.importorskip("distributed")

from tests.cli_run import environment

REPO = Path(__file__).resolve().parents[3]
HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def small_logs(folder: Path, count: int) -> list[Path]:
    """`count` logs of two events each: the smallest real work, many times over."""
    folder.mkdir()
    for i in range(count):
        pointer = hex(0x1000 + i)
        (folder / f"log-{i:05d}.csv").write_text(
            HEADER + f"1,10:00:00.000001,allocate,{pointer},4096,0x0\n"
            f"1,10:00:00.000002,free,{pointer},4096,0x0\n"
        )
    return sorted(folder.iterdir())


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hipmem.cli.main", "fleet", *args],
        cwd=REPO, env=environment(PYTHONPATH=str(REPO)), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def lines_until(stream: IO[str], wanted: str) -> list[str]:
    """stderr's lines up to the first that holds `wanted` (all of them, should it end first)."""
    seen: list[str] = []
    for line in stream:
        seen.append(line.rstrip("\n"))
        if wanted in line:
            break
    return seen


def test_it_says_what_it_does_before_any_pair_runs(tmp_path):
    """On a cluster with no worker yet, no pair can run: the lines that say what the command
    is doing must all be there by then. Then a worker joins, and the sweep runs."""
    from distributed import LocalCluster

    logs = small_logs(tmp_path / "logs", 40)
    results = tmp_path / "results.jsonl"
    with LocalCluster(n_workers=0, dashboard_address=":0", processes=True) as cluster:
        sweep = start(str(tmp_path / "logs"), "-r", "host", "--scheduler",
                      cluster.scheduler_address, "--results", str(results), "--json")  # fmt: skip
        assert sweep.stderr is not None
        early = lines_until(sweep.stderr, "joining the cluster")
        assert early == [
            "fleet: finding logs ...",
            f"fleet: {len(logs)} logs x 1 resource(s): {len(logs)} pairs",
            f"fleet: joining the cluster at {cluster.scheduler_address} ...",
        ]
        assert not results.exists() or results.read_bytes() == b""  # no worker: no pair yet
        cluster.scale(1)
        stdout, rest = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, rest
    later = [line for line in rest.splitlines() if "(still working, " not in line]
    assert later[0] == f"fleet: 0/{len(logs)} logs hashed"
    hashed = later.index(f"fleet: {len(logs)}/{len(logs)} logs hashed")
    assert later[hashed + 1].startswith(f"fleet: 0/{len(logs)} pairs")
    assert later[-1] == f"fleet: {len(logs)}/{len(logs)} pairs, {2 * len(logs)} events replayed"
    assert json.loads(stdout)["pairs_run"] == len(logs)
    assert len(results.read_text().splitlines()) == len(logs)


def test_sigterm_stops_the_sweep_in_one_line_and_every_worker(tmp_path):
    """SIGTERM once the pairs are running (2,000 of them: a worker cannot be done with them in
    the moment it takes to send a signal): `Error: terminated`, exit 143 (128 + 15), no warning
    from Python's resource tracker, the local cluster's worker processes stopped, and the
    results file holding whole lines only."""
    logs = small_logs(tmp_path / "logs", 2000)
    results = tmp_path / "results.jsonl"
    sweep = start(str(tmp_path / "logs"), "-r", "host", "--workers", "1",
                  "--results", str(results))  # fmt: skip
    assert sweep.stderr is not None
    before = lines_until(sweep.stderr, f"0/{len(logs):,} pairs")
    assert before[-1].startswith(f"fleet: 0/{len(logs):,} pairs"), before
    workers = _descendants(sweep.pid)
    assert workers, "a local cluster with no worker process"
    sweep.send_signal(signal.SIGTERM)
    stdout, rest = sweep.communicate(timeout=600)

    assert sweep.returncode == 143, rest
    after = rest.splitlines()
    assert after[-1] == "Error: terminated"
    assert all(line.startswith("fleet: ") for line in after[:-1]), rest  # progress only
    assert stdout == ""  # no answer from part of the sweep
    assert not _still_running(workers), "worker processes outlived the command"
    for line in results.read_bytes().splitlines(keepends=True):
        assert line.endswith(b"\n") and json.loads(line)["status"] == "ok"


def _descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (from /proc: the parent of each)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended while we looked
        children.setdefault(parent, []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _still_running(pids: list[int], deadline_s: float = 60) -> list[int]:
    """The processes not ended (gone, or a zombie waiting for whoever adopted it to collect
    it) within `deadline_s`: a bound for a failure, not a wait the test relies on (the
    command stops its workers before it exits)."""
    running = pids
    deadline = time.monotonic() + deadline_s
    while running and time.monotonic() < deadline:
        running = [pid for pid in running if _alive(pid)]
        time.sleep(0.05 if running else 0)
    return running


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
