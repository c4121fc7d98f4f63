"""`hipmem replay` driven as a user would (tests/cli_run.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hipmem.replay.engine.backends import cuda_device_count, hip_device_count
from hipmem.replay.logs.loader import load_log
from tests.cli_run import hipmem as run_hipmem
from tests.log_reference import REAL_LOGS_DIR
from tests.replay_reference import reference_failures, reference_peak_bytes

LOGS = REAL_LOGS_DIR
REPO = Path(__file__).resolve().parents[2]
SERVE = LOGS / "serve.csv.gz"


def hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO, COLUMNS="200")


def test_two_resources_side_by_side_as_json():
    log = load_log([SERVE])
    limit = 600 << 20
    done = hipmem("replay", str(SERVE), "-r", "host", "-r", "host:limit=600MiB", "--json")
    assert done.returncode == 1, done.stderr  # the limited resource refused allocations
    payload = json.loads(done.stdout)
    plain, limited = payload["resources"]
    assert (plain["resource"], limited["resource"]) == ("host", "host:limit=600MiB")
    assert plain["peak_requested_bytes"] == reference_peak_bytes(log)
    assert plain["failure_count"] == 0 and plain["outcome"] == "completed"
    assert limited["failure_count"] == len(reference_failures(log, limit))
    assert plain["thread_count"] == 5 and plain["backend"] == "host"
    # `log inspect`'s vocabulary and counting rules: the same names, the same figures.
    inspected = json.loads(hipmem("log", "inspect", str(SERVE), "--json").stdout)
    assert payload["sources"] == inspected["sources"]
    assert plain["anomalies"]["live_at_end"] == inspected["live_at_end"]
    assert plain["anomalies"]["zero_byte_live_at_end"] == inspected["zero_byte_live_at_end"]
    assert limited["failures"] and all(
        f["source"] == str(SERVE) and f["line"] > 1 for f in limited["failures"]
    )


def test_table_shows_each_resource_and_the_anomaly_note():
    done = hipmem(
        "replay", str(SERVE), "-r", "host", "-r", "host:limit=600MiB", "--threads", "single"
    )
    assert done.returncode == 1, done.stderr
    assert "host:limit=600MiB" in done.stdout and "events/s" in done.stdout
    events = len(load_log([SERVE]).events)
    assert f"{events:,} log events, {events:,} allocator calls" in done.stdout


def test_find_capacity_as_json():
    done = hipmem("replay", str(SERVE), "-r", "host", "--find-capacity", "--json")
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)["capacities"]
    mib = 1 << 20
    assert found["capacity_bytes"] == -(-reference_peak_bytes(load_log([SERVE])) // mib) * mib


def test_find_capacity_table_confirms_and_warns_only_for_stream_ordered_resources():
    done = hipmem("replay", str(SERVE), "-r", "host", "--find-capacity", "--confirm-runs", "3")
    assert done.returncode == 0, done.stderr
    assert "each size passed 4 replays in a row" in done.stdout
    assert "stream-ordered" not in done.stdout  # host memory knows no streams
    as_json = hipmem("replay", str(SERVE), "-r", "host", "--find-capacity", "--json")
    assert json.loads(as_json.stdout)["capacities"][0]["confirm_runs"] == 2


def test_plot_is_written(tmp_path):
    target = tmp_path / "reserved.png"
    done = hipmem("replay", str(SERVE), "-r", "host", "--plot", str(target))
    assert done.returncode == 0, done.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["reserved.png"]  # no temp file left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-r", "bogus"], "Error: --resource 'bogus': unknown resource kind 'bogus'"),
        (
            ["-r", "host", "--threads", "many"],
            "Error: --threads 'many': not one of logged, single",
        ),
        (
            ["-r", "host", "--on-failure", "retry"],
            "Error: --on-failure 'retry': not one of skip, stop",
        ),
        (
            ["-r", "pool", "--backend", "tpu"],
            "Error: --backend 'tpu': not one of auto, cuda, hip, host",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, message):
    done = hipmem("replay", str(SERVE), *args)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1
    assert done.stdout == ""


@pytest.mark.skipif(
    cuda_device_count()[0] > 0 or hip_device_count()[0] > 0, reason="a GPU is present"
)
def test_no_gpu_is_one_line_exit_1():
    # (RMM's pool, arena, binning, fixed and cuda replay on the virtual GPU: test_rmm_virtual)
    done = hipmem("replay", str(SERVE), "-r", "async")
    assert done.returncode == 1
    assert (
        done.stderr.startswith("Error: no GPU to replay 'async' on (")
        and done.stderr.count("\n") == 1
    )


@pytest.mark.skipif(hip_device_count()[0] > 0, reason="an AMD GPU is present")
def test_hip_without_rocm_says_what_is_missing():
    done = hipmem("replay", str(SERVE), "-r", "hip", "--backend", "hip")
    assert done.returncode == 1
    assert (
        done.stderr.startswith("Error: the hip backend found no GPU 0: ")
        and done.stderr.count("\n") == 1
    )


def test_repeats_show_every_pass_in_the_table_and_the_json():
    args = ("replay", str(SERVE), "-r", "host", "--threads", "single", "--repeats", "3")
    table = hipmem(*args)
    assert table.returncode == 0, table.stderr
    assert "events/s of passes: min / median / max" in table.stdout
    assert "(3 passes)" in table.stdout
    done = hipmem(*args, "--json")
    assert done.returncode == 0, done.stderr
    [resource] = json.loads(done.stdout)["resources"]
    passes = resource["passes"]
    assert passes["count"] == 3 and len(passes["wall_ns"]) == 3
    assert resource["wall_ns"] == min(passes["wall_ns"])  # the existing keys: the best pass
    events = resource["log_events"]
    rates = sorted(events / (ns / 1e9) for ns in passes["wall_ns"])
    assert passes["events_per_s_max"] == pytest.approx(resource["events_per_s"], abs=0.1)
    assert passes["events_per_s_min"] == pytest.approx(rates[0], abs=0.1)
    assert passes["events_per_s_median"] == pytest.approx(rates[1], abs=0.1)
    assert passes["spread"] == pytest.approx(rates[2] / rates[0], abs=1e-3)


def test_one_pass_adds_no_pass_rows():
    done = hipmem("replay", str(SERVE), "-r", "host", "--threads", "single")
    assert done.returncode == 0, done.stderr
    assert "events/s of passes" not in done.stdout
