"""`hipmem fleet` on a real local Dask cluster (worker processes, no GPU, the host backend),
over fleets made from the repository's real logs: the figures equal a serial run's, a worker
killed mid-sweep is retried elsewhere (or recorded as failed past the retry limit), and a
resumed sweep skips the pairs already done."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")

from hipmem.replay.capacity.search import find_capacity
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.fleet.cluster import ClusterPlan, fleet_client, plan_local_cluster
from hipmem.replay.fleet.results import ResultsFile
from hipmem.replay.fleet.run import FleetRequest, find_fleet_logs, run_fleet
from hipmem.replay.fleet.summary import summarize_fleet
from hipmem.replay.logs.loader import load_log
from tests.cli_run import hipmem as run_hipmem
from tests.fleet_logs import REAL, SNAPSHOTS, read_rows, real_fleet, tiled, write_log

REPO = Path(__file__).resolve().parents[3]
SPECS = ["host", "host:limit=600MiB"]


@pytest.fixture(scope="module")
def client() -> Any:
    """Two worker processes, one thread each, as `hipmem fleet --workers 2` starts them."""
    with fleet_client(plan=plan_local_cluster(gpus_needed=False, workers=2)) as client:
        yield client


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Windows and shifts of the three real RMM logs, and three real PyTorch snapshots."""
    folder = tmp_path_factory.mktemp("fleet")
    logs = real_fleet(folder, windows=1, shifts=1)
    for name in ("train-default", "multistream", "oom"):
        target = folder / f"{name}.pickle.gz"
        target.write_bytes((SNAPSHOTS / target.name).read_bytes())
        logs.append(target)
    return logs


@pytest.fixture(scope="module")
def long_logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Each real log tiled 12 times: pairs long enough (about a second) to kill one mid-way."""
    folder = tmp_path_factory.mktemp("long")
    return [
        write_log(folder / f"{p.name.split('.')[0]}-x12.csv.gz", tiled(read_rows(p), 12))
        for p in sorted(REAL.glob("*.csv.gz"))
    ]


@functools.cache
def serial(path: Path, spec_text: str, capacity: bool) -> dict[str, Any]:
    """The same pair replayed in this process, one after another: what the fleet must equal.
    Kept per pair: several tests sweep the same long logs (nobody changes a returned dict)."""
    log = load_log(path)
    spec = parse_spec(spec_text)
    program = build_program(log)
    report = replay_log(log, spec, ReplayOptions(), program=program)
    figures = {
        "outcome": report.outcome,
        "failure_count": report.failure_count,
        "peak_requested_bytes": report.peak_requested_bytes,
        "peak_reserved_bytes": report.peak_reserved_bytes,
    }
    if capacity and len(program.streams) == 1:  # exact on one stream (README, capacity)
        figures["capacity_bytes"] = find_capacity(log, spec, program=program).capacity_bytes
    return figures


def same_figures(record: dict[str, Any], expected: dict[str, Any]) -> None:
    assert record["status"] == "ok", record
    got = {key: record[key] for key in expected}
    assert got == expected, record["log"]


def test_every_pair_equals_a_serial_run(client, fleet, tmp_path):
    results = ResultsFile(tmp_path / "results.jsonl")
    request = FleetRequest(fleet, [parse_spec(s) for s in SPECS], find_capacity=True)
    seen: list[tuple[int, int | None, str]] = []
    run = run_fleet(client, request, results, progress=lambda *a: seen.append(a))

    assert len(run.records) == len(fleet) * len(SPECS) == run.replayed_pairs
    for record in run.records:
        same_figures(record, serial(Path(record["log"]), record["spec"], capacity=True))
        content = Path(record["log"]).read_bytes()
        assert record["log_sha256"] == hashlib.sha256(content).hexdigest()
        # A local cluster listens on loopback only (replay/fleet/cluster.py says why).
        assert record["where"]["worker"].startswith("tcp://127.0.0.1:")
        assert record["unreturned_bytes"] == 0  # every byte back, on every worker
    assert len({r["where"]["pid"] for r in run.records}) == 2  # both workers did work
    # Some of these logs are refused allocations under 600 MiB; none are under plain host.
    refused = {r["log"] for r in run.records if r["spec"] == SPECS[1] and r["failure_count"]}
    assert refused and not any(r["failure_count"] for r in run.records if r["spec"] == "host")

    # Results as they came: one whole JSON line per pair, the same records.
    lines = results.path.read_text().splitlines()

    def by_pair(r: dict[str, Any]) -> tuple[str, str]:
        return r["log"], r["spec"]

    written = [{k: v for k, v in json.loads(line).items() if k != "digest"} for line in lines]
    assert sorted(written, key=by_pair) == sorted(run.records, key=by_pair)
    # The progress bar counted pairs, and events.
    pairs_done = [done for done, _, label in seen if "events" in label]
    assert pairs_done[-1] == len(run.records) and seen[-1][1] == len(run.records)
    assert f"{sum(r['events'] for r in run.records):,} events" in seen[-1][2]

    # The fleet answer: percentiles over real logs, the logs at the maximum named.
    host, limited = summarize_fleet(run.records, SPECS)
    capacities = sorted(r["capacity_bytes"] for r in run.records if r["spec"] == "host")
    assert host.capacity is not None and host.capacity.max == capacities[-1]
    # Each percentile is a real log's capacity, and covers that share of the logs.
    assert {host.capacity.p50, host.capacity.p95} <= set(capacities)
    assert sum(c <= host.capacity.p95 for c in capacities) >= 0.95 * len(capacities)
    assert sum(c <= host.capacity.p50 for c in capacities) >= 0.5 * len(capacities)
    top = [
        r["log"]
        for r in run.records
        if r["spec"] == "host" and r["capacity_bytes"] == capacities[-1]
    ]
    assert host.capacity_drivers == top
    assert host.no_failure == len(fleet) and limited.with_refusals == len(refused)
    assert sorted(limited.refusing_logs) == sorted(refused)


def test_the_pairs_of_a_log_go_to_the_worker_that_loaded_it(client, fleet):
    """Log affinity: a log is loaded (hashed, parsed, built) by one worker, not by every worker
    its pairs happen to land on. Stealing at the end may put a log on a second worker, at
    most once per worker; Dask's free-worker scheduling spread nearly every log over both."""
    logs, specs = fleet[:4], [*SPECS, "host:limit=1GiB"]
    run = run_fleet(client, FleetRequest(logs, [parse_spec(s) for s in specs]))
    assert len(run.records) == len(logs) * len(specs)
    loaded = {(r["log"], r["where"]["pid"]) for r in run.records}
    assert len({pid for _, pid in loaded}) == run.workers == 2  # both workers did work
    assert len(loaded) <= len(logs) + run.workers, sorted(loaded)
    for record in run.records:
        same_figures(record, serial(Path(record["log"]), record["spec"], capacity=False))


def test_a_resumed_sweep_skips_finished_pairs(client, fleet, tmp_path):
    results = ResultsFile(tmp_path / "results.jsonl")
    first = FleetRequest(fleet[:4], [parse_spec("host")])
    run_fleet(client, first, results)
    # Interrupted: the last line was being written when the client died.
    with results.path.open("ab") as stream:
        stream.write(b'{"version":1,"log_sha256":"ab')
    again = run_fleet(client, FleetRequest(fleet, [parse_spec("host")]), results)
    assert (again.skipped_pairs, again.replayed_pairs) == (4, len(fleet) - 4)
    lines = results.path.read_bytes().splitlines(keepends=True)
    assert len(lines) == len(fleet) and all(line.endswith(b"\n") for line in lines)
    assert all(json.loads(line)["status"] == "ok" for line in lines)
    # A plain replay is answered by a capacity search's record too: nothing is run again.
    assert run_fleet(client, FleetRequest(fleet, [parse_spec("host")]), results).replayed_pairs == 0


def _kill_a_busy_worker(client: Any, killed: list[str]) -> threading.Thread:
    """Once a worker is replaying a pair, kill its process (SIGKILL: no goodbye to anyone)."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            processing = client.processing().items()
            busy = [a for a, keys in processing if any("run_pair" in str(k) for k in keys)]
            if busy:
                pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                os.kill(pid, signal.SIGKILL)
                killed.append(busy[0])
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_mid_sweep_is_retried_elsewhere(client, long_logs, tmp_path):
    results = ResultsFile(tmp_path / "results.jsonl")
    request = FleetRequest(long_logs, [parse_spec("host")], find_capacity=True, retries=2)
    killed: list[str] = []
    watcher = _kill_a_busy_worker(client, killed)
    run = run_fleet(client, request, results)
    watcher.join()
    assert killed, "no worker was busy"
    retried = [r for r in run.records if r["attempts"] > 1]
    assert retried, "the killed worker's pair was not retried"
    for record in run.records:
        same_figures(record, serial(Path(record["log"]), "host", capacity=True))
    assert all(r["where"]["worker"] != killed[0] for r in retried)
    assert len(results.path.read_text().splitlines()) == len(long_logs)


def test_past_the_retry_limit_the_pair_is_recorded_failed_and_the_sweep_goes_on(
    client, long_logs, tmp_path
):
    results = ResultsFile(tmp_path / "results.jsonl")
    request = FleetRequest(long_logs, [parse_spec("host")], find_capacity=True, retries=0)
    killed: list[str] = []
    watcher = _kill_a_busy_worker(client, killed)
    run = run_fleet(client, request, results)
    watcher.join()
    failed = [r for r in run.records if r["status"] == "failed"]
    assert killed and failed
    assert all("worker died" in r["reason"] and r["attempts"] == 1 for r in failed)
    assert len(failed) < len(long_logs)  # the others were replayed
    for record in run.records:
        if record["status"] == "ok":
            same_figures(record, serial(Path(record["log"]), "host", capacity=True))
    # The failed pairs are tried again by the next run; the others are not.
    again = run_fleet(client, request, results)
    assert again.replayed_pairs == len(failed)
    assert all(r["status"] == "ok" for r in again.records)


def test_a_worker_that_joins_mid_sweep_gets_work(long_logs):
    """Affinity gives tasks to the workers the client knows of; it asks the scheduler again
    as the sweep goes, so a worker started later (an external cluster growing) is used."""
    specs = [parse_spec(s) for s in ("host", "host:limit=1GiB")]
    request = FleetRequest(long_logs, specs, find_capacity=True)
    with fleet_client(plan=plan_local_cluster(gpus_needed=False, workers=1)) as client:
        command = [sys.executable, "-m", "distributed.cli.dask_worker", client.scheduler.address,
                   "--nthreads", "1", "--no-dashboard"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        joining = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        try:
            run = run_fleet(client, request)
        finally:
            joining.terminate()
            joining.wait(timeout=60)
    workers = {r["where"]["worker"] for r in run.records}
    assert len(workers) == 2, workers
    first = run.records[0]["where"]["worker"]  # the sweep starts on the worker it knew
    joined = [r for r in run.records if r["where"]["worker"] != first]
    # Every pair of a sweep equals a serial run (test_every_pair_equals_a_serial_run); here,
    # the ones the late worker did.
    for record in joined:
        same_figures(record, serial(Path(record["log"]), record["spec"], capacity=True))


def test_sent_logs_give_the_same_figures_under_their_own_names(client, fleet):
    sent = run_fleet(client, FleetRequest(fleet, [parse_spec(SPECS[1])], send_logs=True))
    read = run_fleet(client, FleetRequest(fleet, [parse_spec(SPECS[1])]))
    keys = ("log", "log_sha256", "peak_reserved_bytes", "failure_count", "first_failure")
    assert [{k: r[k] for k in keys} for r in sent.records] == [
        {k: r[k] for k in keys} for r in read.records
    ]
    assert any(r["first_failure"] for r in sent.records)


def test_each_gpu_worker_sees_only_its_own_device(fleet):
    """The AMD way (dask-cuda does not run there): one worker per GPU, HIP_VISIBLE_DEVICES
    naming it. Run here with host memory: the environment reaches the worker processes."""
    plan = ClusterPlan("hip", [{"HIP_VISIBLE_DEVICES": "0"}, {"HIP_VISIBLE_DEVICES": "1"}])
    with fleet_client(plan=plan) as client:
        run = run_fleet(client, FleetRequest(fleet, [parse_spec("host")]))
    by_worker = {r["where"]["pid"]: r["where"]["visible_devices"] for r in run.records}
    assert sorted(by_worker.values()) == ["0", "1"]


def test_a_log_the_workers_cannot_read_is_a_failed_pair(client, fleet, tmp_path):
    unreadable = tmp_path / "gone.csv"
    unreadable.write_text("Thread,Time,Action,Pointer,Size,Stream\n")
    unreadable.chmod(0)
    if os.access(unreadable, os.R_OK):  # root reads everything
        pytest.skip("running as root: every file is readable")
    run = run_fleet(client, FleetRequest([fleet[0], unreadable], [parse_spec("host")]))
    assert run.records[0]["status"] == "ok"
    assert run.records[1]["status"] == "failed" and "cannot be read" in run.records[1]["reason"]


def test_a_damaged_log_is_a_failed_pair_with_its_reason(client, fleet, tmp_path):
    damaged = tmp_path / "damaged.csv.gz"
    damaged.write_bytes(b"not gzip at all")
    run = run_fleet(client, FleetRequest([fleet[0], damaged], [parse_spec("host")]))
    assert run.records[0]["status"] == "ok"
    assert run.records[1]["status"] == "failed" and "gzip" in run.records[1]["reason"]


def test_a_log_with_nothing_readable_is_a_failed_pair_in_one_line(client, fleet, tmp_path):
    unreadable = tmp_path / "unreadable.csv"
    rows = "".join(f"1,10:00:00.00000{i},allocate,0x1{i},4k,0x0\n" for i in range(5))
    unreadable.write_text("Thread,Time,Action,Pointer,Size,Stream\n" + rows)
    run = run_fleet(client, FleetRequest([fleet[0], unreadable], [parse_spec("host")]))
    assert run.records[0]["status"] == "ok"
    reason = run.records[1]["reason"]
    assert run.records[1]["status"] == "failed" and "\n" not in reason
    assert reason.startswith(f"nothing to answer: 5 unreadable entries skipped: {unreadable}:2: ")


def test_folders_are_searched_for_logs(fleet):
    folder = fleet[0].parent
    assert find_fleet_logs([folder]) == sorted(fleet)
    assert find_fleet_logs([fleet[0], folder]) == [
        fleet[0],
        *sorted(p for p in fleet if p != fleet[0]),
    ]


# --------------------------------------------------------------------------- the results file


def a_record(sha256: str) -> dict[str, Any]:
    """A finished pair as a worker writes it (a checked record)."""
    return {"version": 1, "log": "a.csv", "log_sha256": sha256, "spec": "host",
            "task": "replay", "settings": "s", "events": 2, "wall_ns": 10,
            "events_per_s": 2e8, "outcome": "completed", "failure_count": 0,
            "logged_failure_count": 0, "first_failure": None, "peak_requested_bytes": 4096,
            "peak_reserved_bytes": 4096, "fragmentation": 1.0, "unreturned_bytes": 0,
            "status": "ok", "attempts": 1}  # fmt: skip


def test_a_crash_leaves_only_whole_lines(tmp_path):
    results = ResultsFile(tmp_path / "r.jsonl")
    record = a_record("a" * 64)
    results.append(record)
    with results.path.open("ab") as stream:
        stream.write(b'{"version":1,"log_sha')  # the client died mid-write
    read = results.read()
    assert list(read.records.values()) == [record] and read.skipped == 0
    results.append({**record, "log_sha256": "b" * 64})
    assert results.path.read_text().count("\n") == 2
    assert [r["log_sha256"] for r in results.read().records.values()] == ["a" * 64, "b" * 64]


def test_a_foreign_file_is_refused_and_a_foreign_line_named(tmp_path):
    from hipmem.replay.fleet.results import ForeignResultsFile

    path = tmp_path / "r.jsonl"
    path.write_text("Thread,Time,Action,Pointer,Size,Stream\nhello\n")  # a log, not results
    with pytest.raises(ForeignResultsFile, match="holds no line of a hipmem fleet results"):
        ResultsFile(path).check_writable()
    assert path.read_text() == "Thread,Time,Action,Pointer,Size,Stream\nhello\n"  # untouched
    path.write_text('{"version":1,"log_sha')  # all a crash left of a first line: results
    ResultsFile(path).check_writable()
    path.write_text("")
    ResultsFile(path).append(a_record("a" * 64))
    with path.open("a") as stream:
        stream.write("hello\n")
    ResultsFile(path).check_writable()  # one line of hipmem's: results, damaged or not
    read = ResultsFile(path).read()
    assert len(read.records) == 1
    assert [str(p) for p in read.places] == [f"{path}:2: not a JSON line"]


# --------------------------------------------------------------------------- the command


def hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO, PYTHONPATH=str(REPO), COLUMNS="200")


def test_the_command_on_a_folder_of_logs(fleet, tmp_path):
    folder = str(fleet[0].parent)
    results = tmp_path / "results.jsonl"
    plot = tmp_path / "capacity.png"
    args = ["fleet", folder, "-r", "host", "--workers", "2", "--results", str(results)]
    done = hipmem(*args, "--find-capacity", "--json", "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["pairs"] == payload["pairs_run"] == len(fleet)
    (host,) = payload["resources"]
    capacities = [r["capacity_bytes"] for r in payload["records"]]
    assert host["capacity"]["covers_all_bytes"] == max(capacities)
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"

    # Refused allocations: exit 1, and the table names the logs; nothing run twice for host.
    done = hipmem(*args, "-r", "host:limit=600MiB")
    assert done.returncode == 1, done.stderr
    assert (
        f"{2 * len(fleet)} pairs on a local cluster of 2 CPU worker(s): {len(fleet)} run now"
        in " ".join(done.stdout.split())  # prose wraps at 80 columns, piped too
    )
    assert "host:limit=600MiB: refused allocations in" in done.stdout
    assert "covers" not in done.stdout and "peak reserved p95" in done.stdout


def test_the_command_resumes_after_ctrl_c(long_logs, tmp_path):
    results = tmp_path / "results.jsonl"
    logs = long_logs
    args = [sys.executable, "-m", "hipmem.cli.main", "fleet", *map(str, logs), "-r", "host",
            "--find-capacity", "--workers", "1", "--results", str(results)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sweep = subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (results.exists() and results.read_bytes()):
        time.sleep(0.05)
    sweep.send_signal(signal.SIGINT)
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, stderr
    done_before = len(results.read_text().splitlines())
    assert 1 <= done_before < len(logs)
    again = hipmem(*args[3:], "--json")
    assert again.returncode == 0, again.stderr
    payload = json.loads(again.stdout)
    assert (payload["pairs_resumed"], payload["pairs_run"]) == (
        done_before,
        len(logs) - done_before,
    )


def test_usage_errors_before_any_worker_starts(fleet, tmp_path):
    """One line each, and nothing else (no "finding logs" before the refusal)."""
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my notes\n")
    for args, words in [
        (["--results", str(tmp_path)], ["--results", "directory"]),
        (["--results", str(foreign)], ["--results", "holds no line of a hipmem fleet"]),
        (["-r", "pool:maximum=8GB"], ["ambiguous"]),
    ]:
        done = hipmem("fleet", str(fleet[0]), "-r", "host", *args)
        assert done.returncode == 2 and all(w in done.stderr for w in words), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
    assert foreign.read_text() == "my notes\n"
    done = hipmem("fleet", str(tmp_path / "none.csv"), "-r", "host")
    assert done.returncode == 2 and "does not exist" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_without_dask_the_command_says_which_extra_to_install(fleet):
    """As on a machine where `pip install hipmem` ran without the fleet extra."""
    block = (
        "import sys\n"
        "sys.modules.update(dask=None, distributed=None, dask_cuda=None)  # not installed\n"
        "sys.argv = ['hipmem', *sys.argv[1:]]\n"
        "from hipmem.cli.main import main\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", block, "fleet", str(fleet[0]), "-r", "host"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "pip install 'hipmem[fleet]'" in done.stderr and "Traceback" not in done.stderr


def test_a_local_cluster_listens_on_loopback_only(client):
    """A Dask scheduler runs whatever task it is sent: the local one is never on the network."""
    info = client.scheduler_info()
    addresses = [info["address"], *info["workers"]]
    assert addresses and all(a.startswith("tcp://127.0.0.1:") for a in addresses), addresses
