"""Replaying out-of-memory requests and `hipmem explain`, on the snapshots recorded on the H200
(tests/data/snapshots/, with the memory fraction each ran under in its .stats.json) and
PyTorch's real allocator on the virtual GPU. Every verdict `explain` gives is checked against
a replay of its own, through the public replay path (`hipmem.replay`), not against explain."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import hipmem
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.report import ReplayReport
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.engine.run import replay_log
from hipmem.replay.explain.explanation import explain
from hipmem.replay.explain.variables import variable_advice
from tests.cli_run import hipmem as run_hipmem
from tests.snapshot_reference import SNAPSHOTS

REPO = Path(__file__).resolve().parents[3]
OOM_SNAPSHOTS = ("oom", "multistream-oom", "multistream-oom-expandable")
H200 = "H200"


@pytest.fixture(autouse=True)
def _allocators(torch_allocators: dict[str, Any]) -> None:
    """Every test here needs a fetched allocator (the fixture fetches it once)."""


def _stats(name: str) -> dict[str, Any]:
    stats: dict[str, Any] = json.loads((SNAPSHOTS / f"{name}.stats.json").read_text())
    return stats


def _recorded_cap(name: str) -> int:
    """The per-process cap the snapshot ran under, in bytes, as the driver computes it."""
    stats = _stats(name)
    return int(stats["memory_fraction"] * stats["device_total_bytes"])


def _replay(name: str, settings: str, cap_bytes: int) -> ReplayReport:
    spec = f"torch:limit={cap_bytes}" + (f",settings={settings}" if settings else "")
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    options = ReplayOptions(backend="virtual", device_name=H200, time_calls=False)
    return replay_log(log, parse_spec(spec), options)


@pytest.mark.parametrize("name", OOM_SNAPSHOTS)
def test_recorded_out_of_memory_requests_are_refused_again_under_the_recorded_conditions(
    name: str,
) -> None:
    stats = _stats(name)
    report = _replay(name, stats["alloc_conf"], _recorded_cap(name))
    # Each `oom` of the trace is replayed as the request it was and refused again: as many
    # refusals as the H200 counted (torch.cuda.memory_stats()["num_ooms"]), all of them the
    # requests that failed there.
    assert report.failure_count == stats["num_ooms"]
    assert report.anomalies.recorded_failed == stats["num_ooms"]
    assert all(f.recorded_failed for f in report.failures)
    assert report.outcome == "completed"


@pytest.mark.parametrize("name", OOM_SNAPSHOTS)
def test_the_cap_explain_says_the_recorded_settings_need_serves_every_request(name: str) -> None:
    stats = _stats(name)
    found = explain(
        SNAPSHOTS / f"{name}.pickle.gz", device=H200, cap_bytes=_recorded_cap(name), jobs=2
    )
    assert found.refused is not None and found.refused.recorded_failed
    assert found.settings == stats["alloc_conf"]
    assert found.needed_bytes is not None and found.missing_bytes is not None
    assert found.missing_bytes == found.needed_bytes - _recorded_cap(name) > 0
    served = _replay(name, found.settings, found.needed_bytes)
    assert served.failure_count == 0  # the recorded-failed requests were served this time
    assert served.anomalies.recorded_failed == stats["num_ooms"]
    short = _replay(name, found.settings, found.needed_bytes - 2 * 1024 * 1024)
    assert short.failure_count > 0


def test_explain_names_settings_that_avoid_a_recorded_oom_and_each_serves_every_request() -> None:
    # multistream-oom-expandable under a cap of 830,000,000 bytes: with its recorded settings
    # (expandable segments) a request that failed on the H200 is refused again; some settings
    # of the grid serve everything under that same cap.
    name, cap = "multistream-oom-expandable", 830_000_000
    found = explain(SNAPSHOTS / f"{name}.pickle.gz", device=H200, cap_bytes=cap, jobs=2)
    assert found.refused is not None and found.refused.recorded_failed
    assert found.settings == "expandable_segments:True"
    assert found.avoiding and found.recommended is not None
    assert found.variables is not None and found.variables.settings == found.recommended.settings
    for candidate in found.avoiding:
        assert _replay(name, candidate.settings, cap).failure_count == 0, candidate.settings
    refusing = [c for c in found.candidates if not c.replayed and c.error is None]
    assert refusing
    for candidate in refusing[:3]:
        assert _replay(name, candidate.settings, cap).failure_count > 0, candidate.settings
    # The recorded settings themselves are refused here, as explain says.
    assert _replay(name, found.settings, cap).failure_count > 0


def test_explain_gives_the_h200s_verdicts_on_the_inference_job_recorded_whole() -> None:
    """The H200 ran this job again under each setting of the grid and a cap of 153,092,096
    bytes (benchmarks/results/explain-h200-2026-11-24/explain-h200-4-*.json): the settings
    with expandable segments ran to the end, every other one ran out of memory. Explain,
    from the job's uncapped snapshot on a virtual H200 under the same cap, says the same."""
    on_gpu = json.loads(
        (REPO / "benchmarks/results/explain-h200-2026-11-24"
         / "explain-h200-4-infer-full-153092096.json").read_text()
    )  # fmt: skip
    ran_to_the_end = {row["settings"]: row["gpu_num_ooms"] == 0 for row in on_gpu}
    found = explain(SNAPSHOTS / "infer-full.pickle.gz", device=H200, cap_bytes=153_092_096,
                    torch_version="2.11.0", torch_build="cuda", jobs=2)  # fmt: skip
    assert found.refused is not None and not found.refused.recorded_failed
    served = {c.settings: c.replayed for c in found.candidates if c.error is None}
    # The grid's split sizes come from the snapshot's blocks: this uncapped one adds one
    # (max_split_size_mb:32) that the GPU's capped recording did not give. Every setting the
    # GPU ran is here, with its verdict.
    assert {k: served[k] for k in ran_to_the_end} == ran_to_the_end
    assert any(ran_to_the_end.values()) and not all(ran_to_the_end.values())


def test_the_state_at_the_refusal_is_the_allocators_own_and_adds_up() -> None:
    found = explain(
        SNAPSHOTS / "train-default.pickle.gz", device=H200, cap_bytes=570_000_000, jobs=2
    )
    state, refused, live = found.state, found.refused, found.live
    assert state is not None and refused is not None and live is not None
    assert not refused.recorded_failed  # served on the H200, without a cap
    # PyTorch's statistics agree with its segments and blocks (two views of its state).
    assert sum(s.total_bytes for s in state.segments) == state.reserved_bytes
    assert sum(b.size_bytes for s in state.segments for b in s.blocks if b.allocated) == (
        state.allocated_bytes
    )
    for segment in state.segments:
        assert sum(b.size_bytes for b in segment.blocks) == segment.total_bytes
    assert state.unallocated_bytes == state.reserved_bytes - state.allocated_bytes
    # What the program held is what the allocator says was requested.
    assert live.live_bytes == state.requested_bytes
    assert sum(g.live_bytes for g in live.groups) <= live.live_bytes
    # The snapshot holds stacks: the program's own lines name the memory.
    assert any("snapshot_recorder.py:" in g.where and "_train" in g.where for g in live.groups)
    # The reason is PyTorch's: no block of the pool large enough, and no room for a segment.
    largest = state.largest_free_bytes(large=True)
    assert largest < refused.size_bytes
    assert f"its largest is {largest:,}" in (found.reason or "")
    assert found.recommended is not None
    assert _replay("train-default", found.recommended.settings, 570_000_000).failure_count == 0


def test_nothing_refused_is_said_plainly() -> None:
    # The device's memory given (so nothing inferred) and no cap.
    memory = ReplayOptions(backend="virtual", device_name=H200).virtual_device().memory_bytes
    found = explain(SNAPSHOTS / "oom.pickle.gz", device_memory_bytes=memory, jobs=2)
    assert found.refused is None and found.recorded_ooms == 2 and found.inferred is None
    assert found.as_dict()["refused"] is None
    # Uncapped, the recorded refusals do not come back: said, never taken for an answer.
    assert found.recorded_oom_not_reproduced and found.pre_recording_allocations == 0
    assert found.as_dict()["recorded_oom_not_reproduced"] is True


@pytest.mark.parametrize("name", OOM_SNAPSHOTS)
def test_with_no_cap_the_cap_each_ran_under_is_inferred_and_its_refusal_reproduced(
    name: str,
) -> None:
    found = explain(SNAPSHOTS / f"{name}.pickle.gz", device=H200, jobs=2)
    conditions = found.conditions
    assert conditions is not None and conditions.kind == "cap"
    assert conditions.lo_bytes <= _recorded_cap(name) < conditions.hi_bytes
    assert found.refused is not None and found.refused.recorded_failed


def test_a_trace_that_starts_mid_run_says_why_its_oom_may_not_come_back(tmp_path: Path) -> None:
    """The H200's capped inference job (max_entries=4000) ran out of memory once, and its
    replay under the same cap served everything: the ring buffer had dropped allocations
    whose frees it kept. A trace cut the same way says so."""
    import gzip
    import pickle

    with gzip.open(SNAPSHOTS / "oom.pickle.gz", "rb") as stream:
        snapshot = pickle.load(stream)  # the test's own committed file, trusted
    trace = snapshot["device_traces"][0]
    first_alloc = next(i for i, e in enumerate(trace) if e["action"] == "alloc")
    del trace[first_alloc]  # dropped, as a ring buffer drops its oldest entries; its free kept
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(pickle.dumps(snapshot))
    # The device's memory given: nothing inferred (a cut trace's conditions are not known).
    memory = ReplayOptions(backend="virtual", device_name=H200).virtual_device().memory_bytes
    found = explain(cut, device_memory_bytes=memory, jobs=2)
    assert found.refused is None and found.recorded_ooms == 2
    assert found.pre_recording_allocations >= 1
    shown = _hipmem("explain", str(cut), "--device-memory", str(memory))
    assert shown.returncode == 0, shown.stderr
    assert "does not reproduce the recording" in shown.stderr
    assert "before the trace's first entry" in shown.stderr and "max_entries" in shown.stderr


def _hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    unset = [k for k in os.environ if "ALLOC_CONF" in k]
    return run_hipmem(*args, cwd=REPO, unset=unset, **{"COLUMNS": "200", **env})


def test_explain_cli_json_text_and_plot(tmp_path: Path) -> None:
    snapshot = str(SNAPSHOTS / "train-default.pickle.gz")
    done = _hipmem("explain", snapshot, "--device", H200, "--cap", "570000000", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["refused"]["line"] > 0 and data["recommended"] == "expandable_segments:True"
    assert data["variables"]["variable"] == "PYTORCH_CUDA_ALLOC_CONF"
    plot = tmp_path / "state.svg"
    done = _hipmem(
        "explain",
        snapshot,
        "--device",
        H200,
        "--cap",
        "570000000",
        "--plot",
        str(plot),
        PYTORCH_HIP_ALLOC_CONF="max_split_size_mb:64",
    )
    assert done.returncode == 0, done.stderr
    assert "export PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'" in done.stdout
    assert "PYTORCH_HIP_ALLOC_CONF is set" in done.stderr + done.stdout
    assert plot.read_text().lstrip().startswith("<?xml")
    bad = _hipmem("explain", snapshot, "--cap", "12GB")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_check_explain_explains_the_refused_snapshot() -> None:
    snapshot = str(SNAPSHOTS / "multistream-oom.pickle.gz")
    done = _hipmem("check", "--from-snapshot", snapshot, "--device-memory", "700MiB", "--explain")
    assert done.returncode == 1
    assert "Refused: " in done.stdout and "recorded-failed" in done.stdout
    assert "Nothing in the grid avoids it" in done.stdout


def test_the_variable_and_what_is_never_recommended() -> None:
    advice = variable_advice("expandable_segments:True", "2.11.0", environment={})
    assert advice.variable == "PYTORCH_CUDA_ALLOC_CONF" and not advice.warnings
    shadowed = variable_advice(
        "expandable_segments:True",
        "2.11.0",
        environment={"PYTORCH_ALLOC_CONF": "x", "PYTORCH_CUDA_ALLOC_CONF": ""},
    )
    assert len(shadowed.warnings) == 2
    harmful = variable_advice(
        "expandable_segments:True,max_split_size_mb:64", "2.11.0", environment={}
    )
    assert any("#193400" in w for w in harmful.warnings)
    assert not variable_advice(
        "expandable_segments:True,max_split_size_mb:64", "2.9.1", environment={}
    ).warnings


def test_expandable_segments_is_never_recommended_where_it_does_nothing() -> None:
    snapshot = SNAPSHOTS / "train-default.pickle.gz"
    rocm = explain(snapshot, device=H200, cap_bytes=570_000_000, torch_version="2.9", jobs=2)
    cuda = explain(
        snapshot,
        device=H200,
        cap_bytes=570_000_000,
        torch_version="2.9",
        torch_build="cuda",
        jobs=2,
    )
    assert any("expandable_segments" in c.settings for c in rocm.avoiding)
    assert rocm.recommended is not None and "expandable" not in rocm.recommended.settings
    assert cuda.recommended is not None and "expandable" in cuda.recommended.settings


def test_recommend_for_rocm_leaves_out_expandable_segments_where_it_does_nothing() -> None:
    snapshot = [SNAPSHOTS / "train-default.pickle.gz"]
    cuda = hipmem.recommend_allocator_settings(
        snapshot, torch_version="2.9", capacity="recommended"
    )
    rocm = hipmem.recommend_allocator_settings(
        snapshot, torch_version="2.9", capacity="recommended", rocm=True
    )
    assert cuda.settings is not None and "expandable_segments" in cuda.settings
    assert rocm.settings is not None and "expandable_segments" not in rocm.settings
    assert any("does nothing on a ROCm build" in note for note in rocm.notes)
