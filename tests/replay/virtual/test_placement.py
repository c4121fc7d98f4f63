"""The virtual GPU puts each segment where the recording's driver put it
(replay/virtual/placement.py): the plan keeps the recorded order of addresses, the stand-in
follows it while the calls agree, and the two-rank FSDP2 snapshots recorded on two H200s replay
to each rank's reserved bytes, which top-down placement missed by 4 MiB on rank 0."""

from __future__ import annotations

import ctypes
import gzip
import json
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import hipmem
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.pytorch import allocator as torch_allocator
from hipmem.replay.snapshots import native as snapshot_native
from hipmem.replay.snapshots.reader import read_snapshot
from hipmem.replay.virtual import build as vcuda_build
from hipmem.replay.virtual.placement import GRANULE_BYTES, plan_of
from tests.cli_run import hipmem as run_hipmem

MiB = 1 << 20
REPO = Path(__file__).resolve().parents[3]
DISTRIBUTED = REPO / "tests" / "data" / "distributed"
RANKS = sorted(p.name.removesuffix(".pickle.gz") for p in DISTRIBUTED.glob("*.pickle.gz"))


def _pairs(plan: np.ndarray) -> list[tuple[int, int]]:
    return [(int(size), int(offset)) for size, offset in plan.reshape(-1, 2)]


# ---- what the reader keeps -------------------------------------------------------------------


@pytest.mark.parametrize("machine", ["native", "python"])
def test_each_segment_alloc_is_kept_with_its_address_and_size(
    machine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(snapshot_native.READER_ENV, machine)
    path = DISTRIBUTED / "fsdp2-defaults-rank0.pickle.gz"
    trace = pickle.loads(gzip.decompress(path.read_bytes()))["device_traces"][0]  # our own file
    signs = {"segment_alloc": 1, "segment_free": -1}
    recorded = [[e["addr"], signs[e["action"]] * e["size"]] for e in trace if e["action"] in signs]
    (part,) = read_snapshot(path)
    assert part.recording.segment_places.tolist() == recorded and len(recorded) == 135
    # Expandable segments map pages (segment_map), not cudaMalloc's segments: nothing placed.
    (mapped,) = read_snapshot(DISTRIBUTED / "fsdp2-expandable-rank0.pickle.gz")
    assert mapped.recording.segment_places.shape == (0, 2)


# ---- the plan --------------------------------------------------------------------------------


def test_the_plan_keeps_the_recorded_order_of_addresses_and_packs_the_gaps() -> None:
    base = 0x7F00_0000_0000
    far = base - (1 << 46)
    rows = [[base, 20 * MiB], [base + 1128 * MiB, 20 * MiB], [base - 32 * MiB, 20 * MiB]]
    places = np.array([*rows, [far, 2 * MiB]], dtype=np.int64)
    plan = _pairs(plan_of(places))
    assert [size for size, _ in plan] == [20 * MiB, 20 * MiB, 20 * MiB, 2 * MiB]
    offsets = [offset for _, offset in plan]
    # The recorded order of addresses: the far one lowest, then -32 MiB, then 0, then +1128 MiB.
    assert sorted(range(4), key=lambda i: offsets[i]) == [3, 2, 0, 1]
    assert all(offset % GRANULE_BYTES == 0 for offset in offsets)
    # Packed: the 128 TiB between the lowest and the rest is one granule in the plan.
    assert max(offsets) < 100 * MiB


def test_ranges_that_overlapped_in_the_recording_keep_their_distance() -> None:
    # A 24 MiB segment freed, then a 12 MiB one at its address and a 2 MiB one inside it.
    base = 0x7F00_0000_0000
    places = np.array([[base, 24 * MiB], [base, 12 * MiB], [base + 14 * MiB, 2 * MiB]], np.int64)
    first, second, third = (offset for _, offset in _pairs(plan_of(places)))
    assert second == first and third == first + 14 * MiB


def test_a_free_is_a_step_at_its_segments_place_and_an_unknown_one_ends_the_plan() -> None:
    base = 0x7F00_0000_0000
    places = np.array([[base, 20 * MiB], [base - 32 * MiB, 4 * MiB], [base, -20 * MiB],
                       [base - 64 * MiB, -2 * MiB]], np.int64)  # fmt: skip
    made, other, freed, unknown = _pairs(plan_of(places))
    assert freed == (0, made[1]) and other[1] < made[1]
    assert unknown[0] == 0 and unknown[1] not in (made[1], other[1])


def test_a_recording_with_no_segment_allocated_has_no_plan() -> None:
    assert len(plan_of(np.zeros((0, 2), np.int64))) == 0


# ---- the stand-in follows it -----------------------------------------------------------------


@pytest.fixture(scope="module")
def runtime(torch211: torch_allocator.TorchAllocator) -> ctypes.CDLL:
    library = ctypes.CDLL(str(vcuda_build.build(torch211) / "libcudart.so.13"))
    assert library.hipmem_vcuda_configure(ctypes.c_ulonglong(8 << 30), ctypes.c_ulonglong(0)) == 0
    return library


def _malloc(runtime: ctypes.CDLL, size: int) -> int:
    pointer = ctypes.c_void_p()
    assert runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size)) == 0
    return pointer.value or 0


def _place(runtime: ctypes.CDLL, pairs: list[tuple[int, int]]) -> int:
    flat = (ctypes.c_ulonglong * (2 * len(pairs)))(*(v for pair in pairs for v in pair))
    status: int = runtime.hipmem_vcuda_place(flat, ctypes.c_ulonglong(len(pairs)))
    return status


def test_cudamalloc_follows_the_plan_until_a_call_asks_another_size(runtime: ctypes.CDLL) -> None:
    plan = [(4 * MiB, 10 * MiB), (2 * MiB, 40 * MiB), (6 * MiB, 2 * MiB), (2 * MiB, 20 * MiB)]
    assert _place(runtime, plan) == 0
    first, second, third = (_malloc(runtime, size) for size in (4 * MiB, 2 * MiB, 6 * MiB))
    # The recorded order (third lowest, second highest), not top down.
    assert third - 2 * MiB == first - 10 * MiB == second - 40 * MiB
    off_plan = _malloc(runtime, 8 * MiB)  # the plan's next size is 2 MiB: the run went its way
    assert off_plan > second  # placed top down, far above the plan's ranges
    after = _malloc(runtime, 2 * MiB)  # the plan is over, even for the size it held next
    assert after != third - 2 * MiB + 20 * MiB and after < off_plan
    assert _place(runtime, []) == -1  # memory in use: the plan does not change under it
    for pointer in (first, second, third, off_plan, after):
        assert runtime.cudaFree(ctypes.c_void_p(pointer)) == 0
    assert _place(runtime, []) == 0


def test_a_free_the_recording_did_not_make_ends_the_plan(runtime: ctypes.CDLL) -> None:
    plan = [(4 * MiB, 10 * MiB), (0, 10 * MiB), (4 * MiB, 20 * MiB), (2 * MiB, 30 * MiB)]
    assert _place(runtime, plan) == 0
    first = _malloc(runtime, 4 * MiB)
    assert runtime.cudaFree(ctypes.c_void_p(first)) == 0  # the recorded free
    second = _malloc(runtime, 4 * MiB)
    assert second == first + 10 * MiB  # still on the plan
    assert runtime.cudaFree(ctypes.c_void_p(second)) == 0  # a free the recording did not make
    third = _malloc(runtime, 2 * MiB)
    assert third != first + 20 * MiB and third > second  # off the plan: top down
    assert runtime.cudaFree(ctypes.c_void_p(third)) == 0
    assert _place(runtime, []) == 0


def test_a_place_already_taken_ends_the_plan(runtime: ctypes.CDLL) -> None:
    assert _place(runtime, [(4 * MiB, 8 * MiB), (4 * MiB, 10 * MiB)]) == 0  # overlapping
    first = _malloc(runtime, 4 * MiB)
    second = _malloc(runtime, 4 * MiB)
    assert second != first + 2 * MiB and not first <= second < first + 4 * MiB
    for pointer in (first, second):
        assert runtime.cudaFree(ctypes.c_void_p(pointer)) == 0
    assert _place(runtime, []) == 0


# ---- two ranks on two H200s ------------------------------------------------------------------


@pytest.mark.parametrize("name", RANKS)
def test_each_rank_replays_to_what_its_gpu_reserved(
    name: str, torch211: torch_allocator.TorchAllocator
) -> None:
    stats = json.loads((DISTRIBUTED / f"{name}.stats.json").read_text())
    log = hipmem.load_log(DISTRIBUTED / f"{name}.pickle.gz")
    options = ReplayOptions(backend="virtual", torch_version="2.11", device_name="H200")
    report = hipmem.replay_log(log, parse_spec("torch:settings=recorded"), options)
    assert report.peak_reserved_bytes == stats["max_memory_reserved"]


def test_top_down_placement_misses_fsdp2_rank_0_by_one_segment(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    # What the plan changes: the same log with no recorded placement reserves 4 MiB more.
    log = hipmem.load_log(DISTRIBUTED / "fsdp2-defaults-rank0.pickle.gz")
    (recording,) = log.recordings
    assert len(build_program(log).placement) == 2 * len(recording.segment_places) == 2 * 135
    unplaced = replace(log, recordings=[replace(recording, segment_places=np.zeros((0, 2)))])
    options = ReplayOptions(backend="virtual", torch_version="2.11", device_name="H200")
    report = hipmem.replay_log(unplaced, parse_spec("torch:settings=recorded"), options)
    assert report.peak_reserved_bytes == 10_575_937_536 + 4 * MiB


# ---- settings the recording did not run, against the GPU ---------------------------------------

WHATIF = REPO / "tests" / "data" / "whatif"


def test_explain_under_a_cap_gives_each_settings_gpu_figures(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    # train-default's training run again on the H200 under a 570,000,000-byte cap with each
    # setting: the defaults ran out of memory, the others ran. Each what-if replay follows the
    # recorded placement while its calls are the recorded ones; top down, max_split_size_mb:46
    # read 566,231,040 bytes and 72 segments, :42 82 segments.
    truth = json.loads((WHATIF / "train-default-cap570000000-h200.json").read_text())
    done = run_hipmem("explain", str(REPO / truth["snapshot"]), "--device", "H200",
                      "--cap", str(truth["cap_bytes"]), "--torch", "2.11", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    served = {row["settings"]: row for row in answer["avoided_by"]}
    for run in truth["runs"]:
        if run["ran_out_of_memory"]:
            assert run["alloc_conf"] == answer["settings"] == "" and answer["refused"]
            continue
        row = served[run["alloc_conf"]]
        figures = (row["peak_reserved_bytes"], row["segment_allocations"])
        assert figures == (run["reserved_bytes_peak"], run["segment_allocations"]), row
