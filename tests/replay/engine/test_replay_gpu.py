"""The cuda backend on a real NVIDIA GPU (RMM wheels + nvcc). Skipped without them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from hipmem.replay.capacity.search import find_capacity
from hipmem.replay.engine import native
from hipmem.replay.engine.backends import cuda_device_count
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.logs.loader import load_log
from tests.log_reference import REAL_LOGS_DIR
from tests.replay_reference import reference_first_failure, reference_peak_bytes

LOGS = REAL_LOGS_DIR
REPO = Path(__file__).resolve().parents[3]


def _why_no_gpu() -> str | None:
    count, why = cuda_device_count()
    if count == 0:
        return f"no NVIDIA GPU ({why})"
    try:
        native.rmm_toolchain()
    except native.NativeCoreUnavailable as missing:
        return str(missing)
    return None


_SKIP = _why_no_gpu()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]


@pytest.fixture(scope="module")
def gpt():
    log = load_log([LOGS / "gpt.csv.gz"])
    return log, build_program(log)


def _device_free_bytes() -> int:
    from cuda.bindings import runtime

    err, free, _total = runtime.cudaMemGetInfo()
    assert int(err) == 0
    return int(free)


@pytest.mark.parametrize(
    "text",
    [
        "pool:initial=1GiB",
        "arena:size=16GiB",
        "binning",
        "async",
        "cuda",
        "managed",
        "async:pool=default",
        "host:pinned=1",
        "managed:prefetch=1,advise=preferred_location",
    ],
)
def test_every_resource_replays_gpt_and_returns_every_byte(gpt, text):
    log, program = gpt
    report = replay_log(log, parse_spec(text), ReplayOptions(backend="cuda"), program=program)
    assert report.outcome == "completed"
    assert report.failure_count == 0
    assert report.peak_requested_bytes == reference_peak_bytes(log)
    assert report.unreturned_bytes < 64 << 20  # device memory back after teardown
    # every allocate row is one timed call (a replaced live pointer adds a free, not an alloc)
    allocates = int((log.events["action"] == 0).sum())
    assert report.alloc_latency is not None and report.alloc_latency.count == allocates
    if text.startswith(("pool", "binning", "arena", "async")):
        assert (report.peak_reserved_bytes or 0) >= report.peak_requested_bytes


def test_fixed_refuses_what_is_larger_than_its_block(gpt):
    log, program = gpt
    report = replay_log(
        log, parse_spec("fixed:block=4MiB"), ReplayOptions(backend="cuda"), program=program
    )
    events = log.events
    larger = int(((events["action"] == 0) & (events["size_bytes"] > 4 << 20)).sum())
    assert report.failure_count == larger
    assert report.unreturned_bytes < 64 << 20


def test_a_limit_fails_first_where_the_reference_says(gpt):
    log, program = gpt
    limit = reference_peak_bytes(log) // 2
    report = replay_log(
        log, parse_spec(f"cuda:limit={limit}"), ReplayOptions(backend="cuda"), program=program
    )
    expected_event, expected_live = reference_first_failure(log, limit, alignment=256)
    first = report.failures[0]
    assert (first.event_index, first.live_bytes) == (expected_event, expected_live)
    assert first.size_bytes == int(log.events["size_bytes"].iat[expected_event])
    assert report.outcome == "completed" and report.failure_count > 1  # skip goes on


def test_stop_on_failure_stops_at_the_first(gpt):
    log, program = gpt
    limit = reference_peak_bytes(log) // 2
    report = replay_log(
        log,
        parse_spec(f"pool:initial=0,maximum={limit // 256 * 256}"),
        ReplayOptions(backend="cuda", on_failure="stop"),
        program=program,
    )
    assert report.outcome == "stopped at first failure"
    assert report.failure_count == 1
    assert report.ops_done == int(
        np.flatnonzero(program.event_index == report.failures[0].event_index)[-1]
    )


def test_serve_streams_and_threads_replay_on_real_streams():
    log = load_log([LOGS / "serve.csv.gz"])
    for threads in ("logged", "single"):
        report = replay_log(
            log, parse_spec("pool:initial=256MiB"), ReplayOptions(backend="cuda", threads=threads)
        )
        assert report.outcome == "completed" and report.failure_count == 0
        assert report.thread_count == (5 if threads == "logged" else 1)


@pytest.mark.parametrize("threads", ["logged", "single"])
@pytest.mark.parametrize("streams", ["logged", "default"])
def test_the_null_resource_runs_in_the_cuda_core_in_every_mode(threads, streams):
    """The machinery's own cost: the same core as every GPU resource, nothing reserved."""
    log = load_log([LOGS / "serve.csv.gz"])
    options = ReplayOptions(backend="cuda", threads=threads, streams=streams, repeats=2)
    report = replay_log(log, parse_spec("null"), options)
    assert (report.backend, report.engine, report.outcome) == ("cuda", "native", "completed")
    assert report.ops_done == report.ops and report.failure_count == 0
    assert report.peak_reserved_bytes is None
    assert report.unreturned_bytes < 64 << 20  # it took nothing from the device
    assert report.thread_count == (5 if threads == "logged" else 1)


def test_serve_on_the_default_stream_and_the_allocator_time():
    log = load_log([LOGS / "serve.csv.gz"])
    for streams, count in (("logged", 5), ("default", 1)):
        report = replay_log(
            log, parse_spec("async"), ReplayOptions(backend="cuda", streams=streams)
        )
        assert report.outcome == "completed" and report.failure_count == 0
        assert report.stream_count == count
        assert report.allocator_ns is not None and 0 < report.allocator_ns < report.wall_ns


def test_capacity_on_many_streams_and_threads_is_confirmed():
    # RMM's pools steal blocks across streams in an order that can change between runs, so a
    # size at the edge may pass once and fail the next time: the search confirms its answer.
    log = load_log([LOGS / "serve.csv.gz"])
    program = build_program(log)
    options = ReplayOptions(backend="cuda")  # logged threads and streams
    found = find_capacity(log, parse_spec("pool"), options, program=program, confirm_runs=2)
    at_answer = [p.replayed for p in found.probes if p.size_bytes == found.capacity_bytes]
    assert at_answer[-3:] == [True, True, True]  # found, then confirmed twice
    failed = [p.size_bytes for p in found.probes if not p.replayed]
    assert failed and max(failed) < found.capacity_bytes  # no try at or above it failed
    again = replay_log(log, parse_spec(found.sized_spec), options, program=program)
    assert again.outcome == "completed"


def test_python_engine_agrees_with_native_on_failures(gpt):
    log, program = gpt
    spec = parse_spec(f"cuda:limit={reference_peak_bytes(log) // 2}")
    fast = replay_log(log, spec, ReplayOptions(backend="cuda", threads="single"), program=program)
    slow = replay_log(
        log, spec, ReplayOptions(backend="cuda", threads="single", engine="python"), program=program
    )
    assert [f.event_index for f in fast.failures] == [f.event_index for f in slow.failures]


def test_capacity_of_a_pool_replays_and_one_step_less_does_not(gpt):
    # gpt is one stream: a multi-stream pool's failures can vary from run to run near the edge
    log, program = gpt
    options = ReplayOptions(backend="cuda", threads="single")
    found = find_capacity(log, parse_spec("pool"), options, program=program)
    assert found.capacity_bytes >= reference_peak_bytes(log)
    ok = replay_log(log, parse_spec(found.sized_spec), options, program=program)
    assert ok.failure_count == 0
    smaller = parse_spec(f"pool:maximum={found.capacity_bytes - found.resolution_bytes}")
    assert replay_log(log, smaller, options, program=program).failure_count > 0


def test_ctrl_c_returns_every_byte(gpt):
    log, program = gpt
    before = _device_free_bytes()
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        replay_log(
            log, parse_spec("cuda"), ReplayOptions(backend="cuda", repeats=50), program=program
        )
    timer.cancel()
    assert before - _device_free_bytes() < 64 << 20


def test_cli_compares_two_resources_as_json():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hipmem.cli.main",
            "replay",
            str(LOGS / "cnn.csv.gz"),
            "-r",
            "pool:initial=1GiB",
            "-r",
            "arena",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [r["resource"] for r in payload["resources"]] == ["pool:initial=1GiB", "arena"]
    assert all(r["backend"] == "cuda" and r["engine"] == "native" for r in payload["resources"])
