"""`-r torch`: PyTorch's caching allocator as a replay resource. Its settings and errors are
checked everywhere; the replays themselves need PyTorch and a GPU (the `gpu` tests, run on
the lent H200: torch is never a test dependency)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import hipmem
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.pytorch import resource as torch_resource
from tests.cli_run import hipmem as run_hipmem
from tests.snapshot_reference import COMPLETE, NAMES, SNAPSHOTS

REPO = Path(__file__).resolve().parents[3]
TRAIN = SNAPSHOTS / "train-default.pickle.gz"


def test_spec_options_become_pytorch_alloc_conf() -> None:
    log = hipmem.load_log(TRAIN)
    spec = parse_spec(
        "torch:expandable_segments=1,max_split_size=256MiB,garbage_collection_threshold=0.8,"
        "roundup_power2_divisions=4"
    )
    assert torch_resource.alloc_conf(spec, log) == (
        "expandable_segments:True,max_split_size_mb:256,garbage_collection_threshold:0.8,"
        "roundup_power2_divisions:4"
    )
    assert torch_resource.alloc_conf(parse_spec("torch"), log) == ""
    assert torch_resource.alloc_conf(parse_spec("torch:backend=cudaMallocAsync"), log) == (
        "backend:cudaMallocAsync"
    )


def test_settings_recorded_come_from_the_snapshot() -> None:
    log = hipmem.load_log(SNAPSHOTS / "train-expandable.pickle.gz")
    spec = parse_spec("torch:settings=recorded")
    assert torch_resource.alloc_conf(spec, log) == "expandable_segments:True"
    rmm_log = hipmem.load_log(REPO / "tests/data/logs/anomalies.csv")
    with pytest.raises(hipmem.UsageError, match="settings=recorded needs a PyTorch snapshot"):
        torch_resource.alloc_conf(spec, rmm_log)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("torch:settings=recorded,expandable_segments=1", "drop expandable_segments"),
        ("torch:garbage_collection_threshold=1.5", "not a number between 0 and 1"),
        ("torch:backend=jemalloc", "not one of native, cudaMallocAsync"),
        ("torch:max_split_size=8GB", "'gb' is ambiguous"),
    ],
)
def test_bad_torch_specs_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(hipmem.UsageError, match=message):
        parse_spec(text)


def test_max_split_size_must_be_whole_mib_and_at_least_20() -> None:
    # Refused when the spec is read, before any log: never by PyTorch, after the work.
    with pytest.raises(hipmem.UsageError, match=r"max_split_size=1,572,864 bytes: PyTorch takes"):
        parse_spec("torch:max_split_size=1536KiB")
    with pytest.raises(hipmem.UsageError, match=r"'19' is below 21 MiB, the least every PyTorch"):
        parse_spec("torch:max_split_size=19MiB")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed")
def test_without_pytorch_the_gpu_resource_says_so_in_one_line() -> None:
    # With no PyTorch, `auto` replays on the virtual GPU (tests/replay/virtual/test_virtual_gpu.py);
    # a GPU asked for by name needs PyTorch to drive it.
    command = ["replay", str(TRAIN), "-r", "torch", "--backend", "cuda"]
    done = run_hipmem(*command, cwd=REPO, COLUMNS="200")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "Error: the torch resource needs PyTorch with a GPU: pip install 'hipmem[torch]'"
    )


# --------------------------------------------------------------------------- on a GPU


def _torch_gpu() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "no PyTorch"
    import torch

    return None if torch.cuda.is_available() else "PyTorch sees no GPU"


needs_torch_gpu = pytest.mark.skipif(_torch_gpu() is not None, reason=str(_torch_gpu()))


@pytest.mark.gpu
@needs_torch_gpu
@pytest.mark.parametrize("name", NAMES)
def test_settings_recorded_reproduce_the_recorded_reserved_peak(name: str) -> None:
    path = SNAPSHOTS / f"{name}.pickle.gz"
    stats = json.loads((SNAPSHOTS / f"{name}.stats.json").read_text())
    log = hipmem.load_log(path)
    spec = "torch:settings=recorded"
    if "memory_fraction" in stats:  # recorded under a cap: the same cap (the same GPU's bytes)
        spec += f",limit={int(stats['memory_fraction'] * stats['device_total_bytes'])}"
    report = hipmem.replay_log(log, parse_spec(spec))
    if name in COMPLETE:
        # the whole run was recorded: the same events give the same reserved memory, exactly
        assert report.peak_reserved_bytes == stats["reserved_bytes_peak"]
    else:  # what the allocator held before recording began is not in the snapshot
        assert log.recordings[0].pre_recording_allocations > 0
        assert report.peak_reserved_bytes is not None
    assert report.peak_requested_bytes == hipmem.analyze(log).peak_live_bytes
    assert report.reserved_source == torch_resource.RESERVED_FROM_TORCH


@pytest.mark.gpu
@needs_torch_gpu
def test_a_limit_refuses_like_an_oom_and_names_the_line() -> None:
    log = hipmem.load_log(TRAIN)
    peak = hipmem.analyze(log).peak_live_bytes
    report = hipmem.replay_log(log, parse_spec(f"torch:limit={peak // 2}"))
    assert report.failure_count > 0
    first = report.failures[0]
    assert first.where.source.endswith("train-default.pickle.gz#dev0") and first.where.line > 0


@pytest.mark.gpu
@needs_torch_gpu
def test_find_capacity_gives_the_smallest_cap_that_replays() -> None:
    log = hipmem.load_log(SNAPSHOTS / "multistream.pickle.gz")
    spec = parse_spec("torch")
    step = 16 << 20  # a coarse resolution: each probe is a process of its own
    found = hipmem.find_capacity(log, spec, resolution_bytes=step, confirm_runs=1)
    assert found.sized_option == "limit"
    assert found.capacity_bytes >= found.peak_requested_bytes
    assert hipmem.replay_log(log, parse_spec(found.sized_spec)).failure_count == 0
    below = parse_spec(f"torch:limit={found.capacity_bytes - step}")
    assert hipmem.replay_log(log, below).failure_count > 0
