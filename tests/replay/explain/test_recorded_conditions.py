"""A snapshot that ran out of memory, answered from what it says (issue #50): the cap or the
device memory it ran under inferred from its `oom` entry and PyTorch's real allocator on the
virtual GPU, checked against the real runs on the H200 under the same cap
(tests/data/record/truths-h200-2026-11-28: oom_cap.py under set_per_process_memory_fraction
(0.099710), oom_device.py out of the device's own memory; each `*.stats.json` has the real
figures), and against the same scripts' runs on an H100, held out (the last tests)."""

from __future__ import annotations

import json
import os
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipmem._core.byte_sizes import BadSize, GiB, MiB, parse_rounded_bytes
from hipmem.replay.explain.explanation import explain
from hipmem.replay.explain.recorded_conditions import CAP, DEVICE
from tests.cli_run import hipmem as run_hipmem

REPO = Path(__file__).resolve().parents[3]
TRUTHS = REPO / "tests/data/record/truths-h200-2026-11-28"
CAPPED = TRUTHS / "oom_cap-cap0.099710-defaults.pickle.gz"
EXHAUSTED = TRUTHS / "oom_device-defaults.pickle.gz"
COMMITTED_OOM = REPO / "tests/data/snapshots/oom.pickle.gz"
TORCH = "2.11"


@pytest.fixture(autouse=True)
def _allocators(torch_allocators: dict[str, Any]) -> None:
    """Every test here needs a fetched allocator (the fixture fetches it once)."""


def _stats(name: str) -> dict[str, Any]:
    stats: dict[str, Any] = json.loads((TRUTHS / f"{name}.stats.json").read_text())
    return stats


def _true_cap_bytes() -> int:
    """The cap the GPU ran under: PyTorch's allowed_memory_maximum, fraction x total."""
    stats = _stats("oom_cap-cap0.099710-defaults")
    return int(float(stats["env"]["CAP_FRACTION"]) * stats["device_total_bytes"])


def _hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    unset = [k for k in os.environ if "ALLOC_CONF" in k]
    return run_hipmem(*args, cwd=REPO, unset=unset, COLUMNS="200")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_the_cap_inferred_from_the_gpt_oom_holds_the_cap_it_ran_under() -> None:
    found = explain(CAPPED, device="H200", torch_version=TORCH, jobs=2)
    conditions = found.conditions
    assert conditions is not None and conditions.kind == CAP
    assert conditions.lo_bytes <= _true_cap_bytes() < conditions.hi_bytes
    # The interval starts at what the GPU had reserved when it refused (its stats' peak).
    assert conditions.lo_bytes == _stats("oom_cap-cap0.099710-defaults")["reserved_bytes_peak"]
    # The refused request is the recorded one, reproduced, at the entry the bound came from.
    assert found.refused is not None and found.refused.recorded_failed
    assert found.refused.where == conditions.where
    assert found.cap_bytes == conditions.lo_bytes
    # The recording ended at its error: the grid is judged on it twice over.
    assert conditions.ended_there and conditions.passes == 2


def test_the_cap_is_inferred_from_the_gc_run_too() -> None:
    """Garbage collection at 0.6 under the same cap ran two steps further: its own snapshot's
    error bounds the same cap (the interval is wider: the threshold acts on the cap)."""
    snapshot = TRUTHS / "oom_cap-cap0.099710-garbage-collection-threshold-0.6.pickle.gz"
    found = explain(snapshot, device="H200", torch_version=TORCH, jobs=2)
    conditions = found.conditions
    assert conditions is not None and conditions.kind == CAP
    assert conditions.lo_bytes <= _true_cap_bytes() < conditions.hi_bytes
    assert found.refused is not None and found.refused.recorded_failed


def test_explain_with_no_cap_agrees_with_every_real_run_under_the_same_cap() -> None:
    done = _hipmem("explain", str(CAPPED), "--device", "H200", "--torch", TORCH, "--json")
    assert done.returncode == 0, done.stderr
    said = _one_line(done.stderr)
    assert "the recording ran out of memory at entry 4,337" in said
    assert "a per-process cap between 14,063,501,312 and" in said
    data = json.loads(done.stdout)
    inferred = data["inferred_conditions"]
    assert inferred["kind"] == "cap"
    assert inferred["lo_bytes"] <= _true_cap_bytes() < inferred["hi_bytes"]
    assert data["refused"]["recorded_failed"] and data["settings"] == ""
    assert data["recommended"] == "expandable_segments:True"
    fixes = {c["settings"] for c in data["avoided_by"]}
    judged = fixes | {c["settings"] for c in data["not_avoided_by"] + data["uncertain"]}
    # Each real run under the same cap: ran (ok) or ran out of memory (oom).
    runs = sorted(TRUTHS.glob("oom_cap-cap0.099710-*.stats.json"))
    assert len(runs) == 5
    for run in runs:
        stats = json.loads(run.read_text())
        setting = stats["alloc_conf"]
        assert setting in judged, setting
        assert (setting in fixes) == (stats["status"] == "ok"), (setting, stats["status"])
    assert "garbage_collection_threshold:0.6" not in fixes


def test_explain_text_says_the_defaults_fail_and_expandable_segments_avoid_it() -> None:
    done = _hipmem("explain", str(CAPPED), "--device", "H200", "--torch", TORCH)
    assert done.returncode == 0, done.stderr
    shown = _one_line(done.stdout)
    assert "settings: (PyTorch's defaults)" in shown
    assert "it ran out of memory when recorded too (recorded-failed)" in shown
    assert "under the inferred cap at both its ends" in shown
    assert "export PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'" in done.stdout


def test_recommend_from_the_snapshot_recommends_expandable_segments() -> None:
    done = _hipmem("recommend", "--from-snapshot", str(CAPPED), "--device", "H200",
                   "--torch", TORCH, "--for", "cuda", "--format", "shell")  # fmt: skip
    assert done.returncode == 0, done.stderr
    exported = "export PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'"
    assert done.stdout.splitlines()[-1] == exported
    assert "a per-process cap between 14,063,501,312 and" in _one_line(done.stderr)


@pytest.mark.parametrize("name", ["oom_device-defaults", "oom_device-expandable"])
def test_the_device_exhausted_kind_is_inferred_and_its_refusal_reproduced(name: str) -> None:
    snapshot = TRUTHS / f"{name}.pickle.gz"
    found = explain(snapshot, device="H200", torch_version=TORCH, jobs=2)
    conditions = found.conditions
    assert conditions is not None and conditions.kind == DEVICE
    oom = next(o for r in _recordings(snapshot) for o in r.ooms)
    assert conditions.device_free_bytes == oom.device_free_bytes < conditions.segment_bytes
    assert conditions.lo_bytes == conditions.held_bytes + conditions.device_free_bytes
    assert found.cap_bytes is None and found.device.memory_bytes == conditions.lo_bytes
    assert found.refused is not None and found.refused.recorded_failed
    assert found.refused.where == oom.where
    # A 137 GiB request on a 140 GiB device: nothing in the grid avoids it (on the GPU the
    # defaults and expandable segments both ran out of memory).
    assert found.recommended is None and _stats(name)["status"] == "oom"


def _recordings(path: Path) -> list[Any]:
    import hipmem

    return hipmem.load_log(path).recordings


def test_recommend_exits_1_in_one_line_when_the_recorded_oom_is_not_reproduced() -> None:
    done = _hipmem("recommend", "--from-snapshot", str(COMMITTED_OOM), "--device-memory", "100GiB")
    assert done.returncode == 1
    assert done.stdout == ""  # no setting string, empty or not
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "does not reproduce the recording" in lines[0] and "Traceback" not in done.stderr


def test_recommend_with_no_conditions_infers_the_committed_oom_snapshots_cap() -> None:
    done = _hipmem("recommend", "--from-snapshot", str(COMMITTED_OOM), "--device", "MI300X")
    said = _one_line(done.stderr)
    assert "the recording ran out of memory at entry 45" in said
    assert "a per-process cap between 1,476,395,008 and 1,543,503,871 bytes" in said
    # No setting avoids its 64 MiB request under that cap: said, exit 1, nothing exported.
    assert done.returncode == 1 and "export" not in done.stdout


def test_a_cap_in_the_form_hipmem_prints_is_accepted_and_said() -> None:
    done = _hipmem("explain", str(COMMITTED_OOM), "--device", "MI300X", "--cap", "1.4GiB",
                   "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--cap 1.4GiB is 1,503,238,553 bytes" in done.stderr
    assert done.stderr.count("1,503,238,553") == 1
    assert json.loads(done.stdout)["cap_bytes"] == 1_503_238_553
    whole = _hipmem("explain", str(COMMITTED_OOM), "--device", "MI300X", "--cap", "1503238553",
                    "--json")  # fmt: skip
    assert whole.returncode == 0 and "is 1,503,238,553 bytes" not in whole.stderr


@given(
    whole=st.integers(min_value=0, max_value=10**6),
    tenths=st.integers(min_value=0, max_value=9),
    unit=st.sampled_from([("KiB", 1 << 10), ("MiB", MiB), ("GiB", GiB)]),
)
def test_decimal_iec_sizes_round_down_to_whole_bytes(
    whole: int, tenths: int, unit: tuple[str, int]
) -> None:
    name, scale = unit
    found, rounded = parse_rounded_bytes(f"{whole}.{tenths}{name}", name="--cap")
    exact = Fraction(f"{whole}.{tenths}") * scale
    assert found == int(exact) and rounded == (exact.denominator != 1)


def test_rounded_sizes_refuse_what_parse_bytes_refuses() -> None:
    for bad in ("12GB", "1.4", "-1GiB", "1e9"):
        with pytest.raises(BadSize):
            parse_rounded_bytes(bad, name="--cap")


def test_check_from_the_snapshot_gates_each_setting_as_the_gpu_ran_it() -> None:
    for run in sorted(TRUTHS.glob("oom_cap-cap0.099710-*.stats.json")):
        stats = json.loads(run.read_text())
        done = _hipmem("check", "--from-snapshot", str(CAPPED), "--device", "H200",
                       "--torch", TORCH, "--alloc-conf", stats["alloc_conf"])  # fmt: skip
        assert done.returncode == (0 if stats["status"] == "ok" else 1), (run.name, done.stderr)
        assert "a per-process cap between 14,063,501,312 and" in _one_line(done.stderr)


def test_replay_with_no_cap_replays_the_gpus_reserved_bytes_exactly() -> None:
    for name in ("oom_cap-cap0.099710-defaults", "oom_device-defaults"):
        done = _hipmem("replay", str(TRUTHS / f"{name}.pickle.gz"), "-r", "torch:settings=recorded",
                       "--device", "H200", "--torch", TORCH, "--json")  # fmt: skip
        assert done.returncode == 1, done.stderr  # the recorded refusal, refused again
        resource = json.loads(done.stdout)["resources"][0]
        assert resource["peak_reserved_bytes"] == _stats(name)["reserved_bytes_peak"], name
        assert resource["failure_count"] == 1
        assert "the recording ran out of memory at entry" in _one_line(done.stderr)


def test_a_limit_in_the_form_hipmem_prints_is_accepted_said_and_is_the_cap() -> None:
    printed = _hipmem("replay", str(COMMITTED_OOM), "-r", "torch:limit=1.4GiB",
                      "--device", "MI300X", "--json")  # fmt: skip
    exact = _hipmem("replay", str(COMMITTED_OOM), "-r", "torch:limit=1503238553",
                    "--device", "MI300X", "--json")  # fmt: skip
    assert "limit=1.4GiB is 1,503,238,553 bytes" in printed.stderr
    assert "is 1,503,238,553 bytes" not in exact.stderr
    ran = [json.loads(done.stdout)["resources"][0] for done in (printed, exact)]
    for key in ("peak_reserved_bytes", "failure_count"):
        assert ran[0][key] == ran[1][key], key
    bad = _hipmem("replay", str(COMMITTED_OOM), "-r", "torch:limit=1.4", "--device", "MI300X")
    assert bad.returncode == 2 and "not a whole number of bytes" in bad.stderr


# Held out: the same two scripts recorded on an H100 after the inference was written
# (tests/data/record/truths-h100-2026-11-28: set_per_process_memory_fraction(0.176051) of the
# H100's 85,017,493,504 bytes, and a request past the H100's own memory). Nothing above was
# fitted to them.
H100_TRUTHS = REPO / "tests/data/record/truths-h100-2026-11-28"


def test_the_h100s_capped_run_is_answered_as_each_real_run_under_its_cap_went() -> None:
    capped = H100_TRUTHS / "oom_cap-cap0.176051-defaults.pickle.gz"
    done = _hipmem("explain", str(capped), "--device", "H100", "--torch", TORCH, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    inferred = data["inferred_conditions"]
    stats = json.loads((H100_TRUTHS / "oom_cap-cap0.176051-defaults.stats.json").read_text())
    true_cap = int(float(stats["env"]["CAP_FRACTION"]) * stats["device_total_bytes"])
    assert inferred["kind"] == "cap" and inferred["lo_bytes"] <= true_cap < inferred["hi_bytes"]
    assert data["refused"]["recorded_failed"]
    assert data["recommended"] == "expandable_segments:True"
    fixes = {c["settings"] for c in data["avoided_by"]}
    runs = sorted(H100_TRUTHS.glob("oom_cap-cap0.176051-*.stats.json"))
    assert len(runs) == 5
    for run in runs:
        real = json.loads(run.read_text())
        assert (real["alloc_conf"] in fixes) == (real["status"] == "ok"), run.name


def test_the_h100s_device_exhaustion_is_inferred_and_replayed_exactly() -> None:
    snapshot = H100_TRUTHS / "oom_device-defaults.pickle.gz"
    found = explain(snapshot, device="H100", torch_version=TORCH, jobs=2)
    assert found.conditions is not None and found.conditions.kind == DEVICE
    assert found.refused is not None and found.refused.recorded_failed
    done = _hipmem("replay", str(snapshot), "-r", "torch:settings=recorded", "--device", "H100",
                   "--torch", TORCH, "--json")  # fmt: skip
    assert done.returncode == 1, done.stderr  # the recorded refusal, refused again
    real = json.loads((H100_TRUTHS / "oom_device-defaults.stats.json").read_text())
    replayed = json.loads(done.stdout)["resources"][0]
    assert replayed["peak_reserved_bytes"] == real["reserved_bytes_peak"]
