"""PyTorch's allocator settings recommended from snapshots (replay/settings/recommend.py), with
PyTorch's real allocator on the virtual GPU (fetched once by the `torch_allocators` fixture).

The expected figures come from separate replays (`hipmem.replay` of each setting, a fresh
process each) and from an independent plain-Python reading of the snapshots
(tests/snapshot_reference.py), never from the code under test."""

from __future__ import annotations

import gzip
import math
import os
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hipmem
from hipmem._core.alloc_conf import BadAllocConf, check_alloc_conf, settings_pairs
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program, logged_allocation_sizes, program_arrays
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.errors import ReplayUsageError
from hipmem.replay.pytorch.allocator import TorchAllocator
from hipmem.replay.settings import grid as allocator_grid
from hipmem.replay.settings.recommend import AllocatorRecommendation
from hipmem.replay.settings.workloads import load_workloads
from hipmem.replay.virtual.devices import find_device
from hipmem.replay.virtual.gpu import VirtualGpu
from tests.snapshot_reference import COMPLETE, SNAPSHOTS, UNCAPPED, figures, load

MiB = 1 << 20
DEVICE = "MI300X"


@pytest.fixture(scope="module")
def advice(torch211: TorchAllocator) -> dict[str, AllocatorRecommendation]:
    """The recommendation for each committed complete snapshot, every capacity searched."""
    return {
        name: hipmem.recommend_allocator_settings(
            [SNAPSHOTS / f"{name}.pickle.gz"], device=DEVICE, torch_version="2.11"
        )
        for name in UNCAPPED
    }


def _virtual(**kwargs: Any) -> ReplayOptions:
    return ReplayOptions(backend="virtual", device_name=DEVICE, torch_version="2.11", **kwargs)


# ---- the recommendation ---------------------------------------------------------------------


@pytest.mark.parametrize("name", UNCAPPED)
def test_the_recommended_reserved_peak_is_the_lowest_of_the_grid_that_refuses_nothing(
    name: str, advice: dict[str, AllocatorRecommendation]
) -> None:
    found = advice[name]
    # Settings that cap the process are recommended only when asked for (allow_cap).
    fitting = [
        c
        for c in found.candidates
        if c.error is None and c.refused_count == 0 and c.entry.cap_bytes is None
    ]
    assert found.recommended is not None and len(fitting) >= 10
    lowest = min(c.peak_reserved_bytes or 0 for c in fitting)
    assert found.recommended.peak_reserved_bytes == lowest
    # ties: fewer segment allocations, then fewer settings, then the shorter string
    tied = [c for c in fitting if c.peak_reserved_bytes == lowest]
    fewest = min(c.segment_allocations for c in tied)
    assert found.recommended.segment_allocations == fewest
    simplest = min(
        (len(settings_pairs(c.settings)), len(c.settings))
        for c in tied
        if c.segment_allocations == fewest
    )
    assert (len(settings_pairs(found.settings or "")), len(found.settings or "")) == simplest
    assert found.default.settings == "" and found.default is found.candidates[0]


def test_a_setting_that_caps_the_process_is_recommended_only_when_allowed(
    advice: dict[str, AllocatorRecommendation],
) -> None:
    # On train-default, garbage collection under a cap at the defaults' peak reserves the least
    # of the whole grid; it is shown and said, and recommended with allow_cap alone.
    found = advice["train-default"]
    everything = [c for c in found.candidates if c.error is None and c.refused_count == 0]
    lowest = min(everything, key=lambda c: c.rank())
    assert lowest.entry.cap_bytes is not None and lowest.capacity_bytes is None
    assert found.recommended is not None and found.recommended.entry.cap_bytes is None
    assert (lowest.peak_reserved_bytes or 0) < (found.recommended.peak_reserved_bytes or 0)
    assert any(lowest.settings in note and "--allow-cap" in note for note in found.notes)
    allowed = hipmem.recommend_allocator_settings(
        [SNAPSHOTS / "train-default.pickle.gz"], device=DEVICE, torch_version="2.11",
        capacity="recommended", allow_cap=True,
    )  # fmt: skip
    assert allowed.settings == lowest.settings
    assert allowed.recommended is not None
    assert allowed.recommended.peak_reserved_bytes == lowest.peak_reserved_bytes
    assert not any("--allow-cap" in note for note in allowed.notes)


@pytest.mark.parametrize("name", UNCAPPED)
def test_each_candidate_is_what_a_separate_replay_of_its_setting_gives(
    name: str, advice: dict[str, AllocatorRecommendation]
) -> None:
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    requested = figures(SNAPSHOTS / f"{name}.pickle.gz")[0].peak_requested_bytes
    for candidate in advice[name].candidates:
        assert candidate.error is None, candidate.error
        (run,) = candidate.runs
        spec = parse_spec(f"torch:settings={candidate.settings}" if candidate.settings else "torch")
        report = hipmem.replay_log(log, spec, _virtual())
        assert report.peak_reserved_bytes == run.peak_reserved_bytes, candidate.settings
        assert report.failure_count == run.refused_count, candidate.settings
        assert run.peak_requested_bytes == requested


def test_the_defaults_replay_as_the_h200_recorded_them(
    advice: dict[str, AllocatorRecommendation],
) -> None:
    # train-default and multistream were recorded with PyTorch's defaults: the grid's first
    # row is the recording's own reserved peak (PyTorch's statistics on the H200).
    for name in ("train-default", "multistream"):
        stats = figures(SNAPSHOTS / f"{name}.pickle.gz")[0]
        assert advice[name].default.peak_reserved_bytes == stats.peak_reserved_bytes


@pytest.mark.parametrize("name", UNCAPPED)
def test_the_recommended_capacity_replays_and_2_mib_less_does_not(
    name: str, advice: dict[str, AllocatorRecommendation]
) -> None:
    chosen = advice[name].recommended
    assert chosen is not None and chosen.capacity_bytes is not None
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    at = ReplayOptions(
        backend="virtual", device_memory_bytes=chosen.capacity_bytes, torch_version="2.11"
    )
    below = ReplayOptions(
        backend="virtual", device_memory_bytes=chosen.capacity_bytes - 2 * MiB, torch_version="2.11"
    )
    assert hipmem.replay_log(log, chosen.spec, at).failure_count == 0
    assert hipmem.replay_log(log, chosen.spec, below).failure_count > 0
    headroom = find_device(DEVICE).memory_bytes - (chosen.peak_reserved_bytes or 0)
    assert advice[name].headroom_bytes == headroom


def test_several_snapshots_get_one_setting_for_all_driven_by_the_largest(
    advice: dict[str, AllocatorRecommendation],
) -> None:
    names = ("train-default", "multistream")
    both = hipmem.recommend_allocator_settings(
        [SNAPSHOTS / f"{name}.pickle.gz" for name in names],
        device=DEVICE,
        torch_version="2.11",
        capacity="recommended",
    )
    assert both.snapshots == [f"{SNAPSHOTS / name}.pickle.gz#dev0" for name in names]
    logs = {name: hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz") for name in names}
    for candidate in both.candidates:
        # each snapshot alone, replayed apart (the gc caps are the largest peak of the two)
        alone = [hipmem.replay_log(logs[name], candidate.spec, _virtual()) for name in names]
        assert candidate.peak_reserved_bytes == max(r.peak_reserved_bytes or 0 for r in alone)
        assert candidate.refused_count == sum(r.failure_count for r in alone)
        driving = max(zip(alone, names, strict=True), key=lambda a: a[0].peak_reserved_bytes or 0)
        assert candidate.driving is not None
        assert candidate.driving.snapshot.endswith(f"{driving[1]}.pickle.gz#dev0")
    # the pooled sizes give one max_split_size grid for both snapshots
    pooled = [
        *figures(SNAPSHOTS / "train-default.pickle.gz")[0].events,
        *figures(SNAPSHOTS / "multistream.pickle.gz")[0].events,
    ]
    large = [size for action, _, size, _ in pooled if action == "allocate" and size > 20 * MiB]
    splits = sorted({max(21, -(-_quantile_higher(large, q) // MiB)) for q in (0.25, 0.5, 0.75)})
    assert [c.settings for c in both.candidates if c.entry.rule.startswith("split limit")] == [
        f"max_split_size_mb:{mib}" for mib in splits
    ]
    fitting = [c for c in both.candidates if c.replayed and c.entry.cap_bytes is None]
    assert both.recommended is not None
    assert both.recommended.peak_reserved_bytes == min(c.peak_reserved_bytes or 0 for c in fitting)
    # capacity: the largest over the snapshots, each a smallest device of its own
    chosen = both.recommended
    assert chosen.capacity_bytes is not None and chosen.capacity_snapshot in both.snapshots
    for name in names:
        log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
        at = ReplayOptions(
            backend="virtual", device_memory_bytes=chosen.capacity_bytes, torch_version="2.11"
        )
        assert hipmem.replay_log(log, chosen.spec, at).failure_count == 0


def test_a_setting_that_refuses_is_never_recommended(torch211: TorchAllocator) -> None:
    # On a device just above the requested peak, most settings refuse allocations.
    requested = figures(SNAPSHOTS / "train-default.pickle.gz")[0].peak_requested_bytes
    found = hipmem.recommend_allocator_settings(
        [SNAPSHOTS / "train-default.pickle.gz"],
        device_memory_bytes=requested + 80 * MiB,
        torch_version="2.11",
        capacity="recommended",
    )
    refusing = [c for c in found.candidates if c.refused_count]
    assert refusing and found.recommended is not None and found.recommended.refused_count == 0
    first = refusing[0].runs[0].first_refused
    assert first is not None and first.source.endswith("train-default.pickle.gz#dev0")


def test_no_setting_fits_a_device_below_the_requested_peak(torch211: TorchAllocator) -> None:
    requested = figures(SNAPSHOTS / "train-default.pickle.gz")[0].peak_requested_bytes
    found = hipmem.recommend_allocator_settings(
        [SNAPSHOTS / "train-default.pickle.gz"],
        device_memory_bytes=requested // 2,
        torch_version="2.11",
        capacity="recommended",
    )
    assert found.recommended is None and found.variables() == []
    assert all(c.refused_count > 0 for c in found.candidates if c.error is None)


# ---- the grid's rules -------------------------------------------------------------------


def _quantile_higher(values: list[int], share: float) -> int:
    """numpy's quantile method "higher", by hand: the value at index ceil(share * (n - 1))."""
    ordered = sorted(values)
    return ordered[math.ceil(share * (len(ordered) - 1))]


@pytest.mark.parametrize("name", COMPLETE)
def test_max_split_values_are_quantiles_of_the_large_requests_in_whole_mib(name: str) -> None:
    events = figures(SNAPSHOTS / f"{name}.pickle.gz")[0].events
    large = [size for action, _, size, _ in events if action == "allocate" and size > 20 * MiB]
    expected = sorted({max(21, -(-_quantile_higher(large, q) // MiB)) for q in (0.25, 0.5, 0.75)})
    program = build_program(hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz"))
    sizes = allocator_grid.large_request_sizes([logged_allocation_sizes(program)])
    assert list(allocator_grid.split_sizes_mib(sizes)) == expected
    grid = [e.settings for e in allocator_grid.first_round(sizes)]
    assert [s for s in grid if s.startswith("max_split_size_mb:")] == [
        f"max_split_size_mb:{mib}" for mib in expected
    ]


def test_max_split_is_never_below_what_pytorch_takes() -> None:
    small = np.array([20 * MiB + 1, 20 * MiB + 2, 30 * MiB], dtype=np.int64)
    assert list(allocator_grid.split_sizes_mib(small)) == [21, 30]
    assert allocator_grid.split_sizes_mib(np.zeros(0, dtype=np.int64)) == {}
    # 20 MiB is refused by 2.9 ("more than 20"), 21 by neither: the floor is PyTorch's own.
    assert allocator_grid.MIN_MAX_SPLIT_MIB == 21


def test_the_grid_has_every_family_and_valid_strings() -> None:
    grid = allocator_grid.first_round(np.array([64 * MiB] * 4, dtype=np.int64))
    texts = [entry.settings for entry in grid]
    assert texts[:2] == ["", "expandable_segments:True"]
    for divisions in (1, 4, 8, 16):
        assert f"roundup_power2_divisions:{divisions}" in texts
    assert "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]" in texts
    assert "expandable_segments:True,roundup_power2_divisions:8" in texts
    assert "max_split_size_mb:64" in texts
    assert len(set(texts)) == len(texts)
    for text in texts:
        assert check_alloc_conf(text) == text


def test_a_fraction_is_rounded_up_so_its_cap_holds_the_peak() -> None:
    device = find_device(DEVICE).memory_bytes
    for peak in (943_718_400, 176_160_768, 1_476_395_008, 3 * MiB, device - 2 * MiB):
        text = allocator_grid.fraction_text(peak, device)
        assert "e" not in text and len(text.rstrip("0").replace("0.", "").lstrip("0")) <= 6
        cap = allocator_grid.cap_bytes(text, device)
        assert peak <= cap <= peak + device // 10**5


def test_garbage_collection_entries_are_capped_at_their_base_settings_peak(
    advice: dict[str, AllocatorRecommendation],
) -> None:
    found = advice["train-default"]
    by_settings = {c.settings: c for c in found.candidates}
    capped = [c for c in found.candidates if c.entry.cap_bytes is not None]
    assert len(capped) >= 3
    device = found.device.memory_bytes
    for candidate in capped:
        base = by_settings[candidate.entry.base or ""]
        pairs = dict(settings_pairs(candidate.settings))
        assert float(pairs["garbage_collection_threshold"]) in (0.6, 0.8)
        cap = allocator_grid.cap_bytes(pairs["per_process_memory_fraction"], device)
        assert cap == candidate.entry.cap_bytes
        assert base.peak_reserved_bytes is not None
        assert base.peak_reserved_bytes <= cap < base.peak_reserved_bytes + 4 * MiB
        # under its cap: PyTorch never reserves more than the cap (default allocator)
        if "expandable" not in candidate.settings:
            assert (candidate.peak_reserved_bytes or 0) <= cap


def test_garbage_collection_without_a_fraction_changes_nothing(torch211: TorchAllocator) -> None:
    # The folklore setting alone is a no-op: PyTorch collects only under a memory fraction.
    log = hipmem.load_log(SNAPSHOTS / "train-default.pickle.gz")
    alone = hipmem.replay_log(log, parse_spec("torch:garbage_collection_threshold=0.6"), _virtual())
    default = hipmem.replay_log(log, parse_spec("torch"), _virtual())
    cap = default.peak_reserved_bytes
    capped = hipmem.replay_log(
        log, parse_spec(f"torch:garbage_collection_threshold=0.6,limit={cap}"), _virtual()
    )
    assert alone.peak_reserved_bytes == default.peak_reserved_bytes
    assert (capped.peak_reserved_bytes or 0) < (default.peak_reserved_bytes or 0)


def test_a_fraction_in_the_settings_is_the_per_process_cap_of_a_limit(
    torch211: TorchAllocator,
) -> None:
    # per_process_memory_fraction:F (PyTorch 2.11) replays as torch.cuda.
    # set_per_process_memory_fraction(F) does: the same figures as `limit=` that many bytes.
    log = hipmem.load_log(SNAPSHOTS / "multistream.pickle.gz")
    device = find_device(DEVICE).memory_bytes
    fraction = allocator_grid.fraction_text(150 * MiB, device)
    cap = allocator_grid.cap_bytes(fraction, device)
    in_settings = hipmem.replay_log(
        log,
        parse_spec(
            f"torch:settings=garbage_collection_threshold:0.6,per_process_memory_fraction:{fraction}"
        ),
        _virtual(),
    )
    as_limit = hipmem.replay_log(
        log, parse_spec(f"torch:garbage_collection_threshold=0.6,limit={cap}"), _virtual()
    )
    assert in_settings.peak_reserved_bytes == as_limit.peak_reserved_bytes
    assert in_settings.failure_count == as_limit.failure_count


def test_pytorch_2_9_gets_no_garbage_collection_round_and_says_why(
    torch_allocators: dict[str, TorchAllocator],
) -> None:
    assert not allocator_grid.takes_memory_fraction(torch_allocators["2.9.1"])
    assert allocator_grid.takes_memory_fraction(torch_allocators["2.11.0"])
    found = hipmem.recommend_allocator_settings(
        [SNAPSHOTS / "multistream.pickle.gz"], torch_version="2.9", capacity="recommended"
    )
    assert found.torch_version.startswith("2.9.1")
    assert not any("garbage_collection" in c.settings for c in found.candidates)
    assert any("no per_process_memory_fraction" in note for note in found.notes)


def test_a_partial_trace_is_said(torch211: TorchAllocator) -> None:
    found = hipmem.recommend_allocator_settings(
        [SNAPSHOTS / "train-late.pickle.gz"], torch_version="2.11", capacity="recommended"
    )
    early = figures(SNAPSHOTS / "train-late.pickle.gz")[0].before_recording
    assert early > 0
    assert any(f"{early:,} allocations were made before recording" in n for n in found.notes)


def test_variables_name_the_builds_pytorch_reads(
    advice: dict[str, AllocatorRecommendation],
) -> None:
    found = advice["train-default"]
    value = found.settings
    assert found.variables("rocm") == [("PYTORCH_HIP_ALLOC_CONF", value)]
    assert found.variables("cuda") == [("PYTORCH_CUDA_ALLOC_CONF", value)]
    assert found.variables() == [
        ("PYTORCH_HIP_ALLOC_CONF", value),
        ("PYTORCH_CUDA_ALLOC_CONF", value),
    ]
    with pytest.raises(ReplayUsageError, match="torch_build='hip': not one of rocm, cuda, both"):
        found.variables("hip")
    # a variable already set that a build reads before those written, as `recommend` warns
    cuda_set = replace(found, environment={"PYTORCH_CUDA_ALLOC_CONF": ""})
    assert len(cuda_set.environment_warnings("rocm")) == 1
    assert cuda_set.environment_warnings("both") == []


def test_a_file_that_is_not_a_snapshot_is_refused_before_any_work(tmp_path: Path) -> None:
    log = tmp_path / "run.csv"
    log.write_text("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.0,allocate,0x1,8,0x0\n")
    with pytest.raises(ReplayUsageError, match="not a PyTorch memory snapshot"):
        load_workloads([log])


def test_every_device_of_a_snapshot_is_a_workload_of_its_own(tmp_path: Path) -> None:
    data = load(SNAPSHOTS / "multistream.pickle.gz")
    data["device_traces"] = [data["device_traces"][0], data["device_traces"][0]]
    data["segments"] = data["segments"] + [{**s, "device": 1} for s in data["segments"]]
    path = tmp_path / "two-ranks.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(data)))
    workloads = load_workloads([path])
    assert [w.name for w in workloads] == [f"{path}#dev0", f"{path}#dev1"]
    one = build_program(hipmem.load_log(SNAPSHOTS / "multistream.pickle.gz"))
    for workload in workloads:
        assert workload.program.peak_requested_bytes == one.peak_requested_bytes
        assert workload.program.op_count == one.op_count


# ---- which variable PyTorch reads ---------------------------------------------------------


CASES = [
    # (variable carrying the setting, others set, does the setting take effect in 2.11, 2.9)
    ("PYTORCH_CUDA_ALLOC_CONF", {}, True, True),
    ("PYTORCH_HIP_ALLOC_CONF", {}, True, False),  # a CUDA build: 2.9 reads HIP only on ROCm
    ("PYTORCH_ALLOC_CONF", {}, True, False),
    # an empty PYTORCH_CUDA_ALLOC_CONF is read (the defaults) before the others
    ("PYTORCH_HIP_ALLOC_CONF", {"PYTORCH_CUDA_ALLOC_CONF": ""}, False, False),
    ("PYTORCH_ALLOC_CONF", {"PYTORCH_HIP_ALLOC_CONF": ""}, False, False),
]


@pytest.mark.parametrize(("variable", "others", "in_211", "in_29"), CASES)
def test_the_order_pytorch_reads_its_variables_in(
    variable: str,
    others: dict[str, str],
    in_211: bool,
    in_29: bool,
    torch_allocators: dict[str, TorchAllocator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What docs/allocator-settings.md says of the order, on the CUDA builds' libraries (a
    ROCm build compiles the same source with USE_ROCM, which adds PYTORCH_HIP_ALLOC_CONF)."""
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    for name, value in others.items():
        monkeypatch.setenv(name, value)
    program = build_program(hipmem.load_log(SNAPSHOTS / "train-default.pickle.gz"))
    for version, takes_effect in (("2.11.0", in_211), ("2.9.1", in_29)):
        peaks = {}
        for conf in ("", "expandable_segments:True"):
            with VirtualGpu(
                program_arrays(program),
                program.slot_count,
                1,
                conf,
                find_device(DEVICE),
                torch_allocators[version],
                variable=variable,
            ) as gpu:
                peaks[conf] = gpu.replay().peak_reserved_bytes
        assert (peaks["expandable_segments:True"] != peaks[""]) == takes_effect, version


# ---- setting strings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "expandable_segments:True",
        "max_split_size_mb:256,garbage_collection_threshold:0.6",
        "roundup_power2_divisions:[256:1,512:2,>:8]",
        "per_process_memory_fraction:0.00457764",
    ],
)
def test_pytorchs_setting_strings_are_accepted(text: str) -> None:
    assert check_alloc_conf(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "expandable_segments: True",
        "a:'b'",
        "a:$(x)",
        "a:`x`",
        "a:1;b:2",
        "a:1\nb:2",
        "expandable_segments",
        "a:[1:2",
        "A:1",
        "a:1,",
        ",a:1",
        "a:1" + ",b:2" * 400,
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(BadAllocConf):
        check_alloc_conf(text)


def test_a_spec_takes_a_whole_setting_string_as_its_last_option() -> None:
    spec = parse_spec("torch:limit=1GiB,settings=expandable_segments:True,max_split_size_mb:64")
    assert spec.options["settings"] == "expandable_segments:True,max_split_size_mb:64"
    assert spec.limit_bytes == 1 << 30
    assert parse_spec("torch:settings=recorded,limit=1GiB").options["settings"] == "recorded"
    with pytest.raises(ReplayUsageError, match="put expandable_segments in it"):
        parse_spec("torch:expandable_segments=1,settings=max_split_size_mb:64")
    with pytest.raises(ReplayUsageError, match="expected PyTorch's allocator settings"):
        parse_spec("torch:settings=max_split_size_mb 64")


def test_the_gate_checks_the_variables_setting_when_given_none(torch211: TorchAllocator) -> None:
    snapshot, setting = SNAPSHOTS / "oom.pickle.gz", "expandable_segments:True"
    gate = hipmem.check_allocator_settings(
        [snapshot], torch_version="2.11", environ={"PYTORCH_HIP_ALLOC_CONF": setting}
    )
    assert (gate.settings, gate.source) == (setting, "$PYTORCH_HIP_ALLOC_CONF")
    assert gate.as_dict()["source"] == gate.source
    assert {verdict.path for verdict in gate.verdicts} == {snapshot}  # less its `#dev0`


def test_the_process_environment_is_left_as_it_was(torch211: TorchAllocator) -> None:
    before = dict(os.environ)
    hipmem.check_allocator_settings(
        [SNAPSHOTS / "oom.pickle.gz"], "expandable_segments:True", torch_version="2.11"
    )
    assert dict(os.environ) == before


def test_ctrl_c_ends_the_grid_and_leaves_nothing_behind(
    tmp_path: Path, torch211: TorchAllocator
) -> None:
    """Several drivers at once, each with its own folder, and the shared program's: a Ctrl-C
    (the terminal's: the whole process group) ends them all and removes every file."""
    import signal
    import subprocess
    import sys
    import time

    code = (  # Ctrl-C as at a terminal (a background job's shell may have it ignored)
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import hipmem\n"
        "print('recommending', flush=True)\n"
        "for _ in range(100):\n"
        "    hipmem.recommend_allocator_settings(\n"
        "        ['tests/data/snapshots/train-default.pickle.gz'], torch_version='2.11')\n"
    )
    repo = Path(__file__).resolve().parents[3]
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        start_new_session=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "recommending\n"
    time.sleep(1.5)  # in the grid or a capacity search (one recommendation takes seconds)
    os.killpg(child.pid, signal.SIGINT)
    child.wait(timeout=60)
    assert child.returncode in (-signal.SIGINT, 1, 130)
    assert list(tmp_path.iterdir()) == []  # no program, no driver folder left
    drivers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert drivers.stdout == ""


@pytest.mark.parametrize("settings", ["", "expandable_segments:True"])
def test_the_sampled_reserved_bytes_reach_the_reserved_peak(
    settings: str, torch211: TorchAllocator
) -> None:
    """The driver looks at every call and keeps the highest of each window: the plot draws
    the peak the statistics report, where it happened."""
    log = hipmem.load_log(SNAPSHOTS / "train-default.pickle.gz")
    spec = parse_spec(f"torch:settings={settings}" if settings else "torch")
    report = hipmem.replay_log(log, spec, _virtual(plot_samples=100))
    samples = report.samples
    assert samples is not None and 90 <= len(samples.op_index) <= 110
    assert samples.reserved_bytes.max() == report.peak_reserved_bytes
    assert (np.diff(samples.op_index) > 0).all()
    program = build_program(log)
    assert (samples.live_bytes == program.live_bytes[samples.op_index]).all()
