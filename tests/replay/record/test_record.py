"""`hipmem record` with no GPU: the committed scripts (tests/data/record/scripts) run with
PyTorch 2.11's CUDA wheel on the stand-in libraries, on a virtual H200, and reserve what the
H200 reserved when they ran there (tests/data/record/truths-h200-2026-11-28, the same scripts
under PyTorch 2.11.0+cu130). Each test runs the real command line in a fresh process, with the
test's own Python, which has no PyTorch: `--torch 2.11.0` puts the cached wheel first."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hipmem.replay.snapshots.reader import read_snapshot

from .recording import HIPMEM, RECORD, answer_of, run_record

TRUTHS = RECORD / "truths-h200-2026-11-28"

pytestmark = pytest.mark.slow


def _requests(columns: dict[str, Any]) -> Counter[tuple[Any, int]]:
    return Counter(zip(columns["action"], (int(n) for n in columns["size_bytes"]), strict=True))


def truth(name: str) -> dict[str, Any]:
    path = TRUTHS / f"{name}.stats.json"
    if not path.is_file():
        path = TRUTHS / f"{name}-1.stats.json"
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("script", "settings"),
    [
        ("gpt_train", "defaults"),
        ("gpt_train", "expandable"),
        ("encoder_varlen", "defaults"),
        ("encoder_varlen", "expandable"),
        ("kv_generate", "defaults"),
        ("kv_generate", "expandable"),
    ],
)
def test_a_recording_reserves_what_the_gpu_reserved(
    record_torch: object, tmp_path: Path, script: str, settings: str
) -> None:
    conf = "expandable_segments:True" if settings == "expandable" else ""
    done = run_record(tmp_path, RECORD / "scripts" / f"{script}.py", "--json",
                      "--alloc-conf", conf)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = answer_of(done)
    on_gpu = truth(f"{script}-{settings}")
    assert answer["max_memory_reserved"] == on_gpu["max_memory_reserved"]
    assert answer["torch"] == "2.11.0+cu130"


def test_the_snapshot_is_pytorchs_and_replays_to_the_gpus_peak(
    record_torch: object, tmp_path: Path
) -> None:
    snapshot = tmp_path / "encoder.pickle.gz"
    done = run_record(tmp_path, RECORD / "scripts" / "encoder_varlen.py", "-o", str(snapshot))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"snapshot written to {snapshot}" in " ".join(done.stderr.split())
    parts = read_snapshot(snapshot)  # hipmem's own reader: PyTorch's format
    assert len(parts) == 1 and len(parts[0].columns["size_bytes"]) > 1000
    # every allocation and free the GPU made, no more (the order of frees with equal sizes
    # may differ): nothing hipmem runs in the script's process asks PyTorch for memory
    on_gpu = read_snapshot(TRUTHS / "encoder_varlen-defaults-1.pickle.gz")
    assert _requests(parts[0].columns) == _requests(on_gpu[0].columns)
    replayed = subprocess.run(
        [*HIPMEM, "replay", str(snapshot), "-r", "torch:expandable_segments=1", "--device",
         "H200", "--torch", "2.11.0", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    peak = json.loads(replayed.stdout)["resources"][0]["peak_reserved_bytes"]
    assert peak == truth("encoder_varlen-expandable")["max_memory_reserved"]


def test_out_of_memory_as_on_the_gpu(record_torch: object, tmp_path: Path) -> None:
    snapshot = tmp_path / "oom.pickle"
    done = run_record(tmp_path, RECORD / "scripts" / "oom_device.py", "-o", str(snapshot),
                      "--json")  # fmt: skip
    assert done.returncode == 1  # the script's own exit: its OutOfMemoryError
    assert "torch.OutOfMemoryError: CUDA out of memory" in done.stderr
    answer = answer_of(done)
    assert answer["out_of_memory"] is True
    assert answer["max_memory_reserved"] == truth("oom_device-defaults")["max_memory_reserved"]
    assert snapshot.is_file()


def test_a_failing_script_keeps_its_exit_code_and_snapshot(
    record_torch: object, tmp_path: Path
) -> None:
    script = tmp_path / "fails.py"
    script.write_text("import torch\nx = torch.ones(1024, device='cuda')\nraise SystemExit(3)\n")
    done = run_record(tmp_path, script, "-o", str(tmp_path / "s.pickle"))
    assert done.returncode == 3
    assert (tmp_path / "s.pickle").is_file()


def test_a_script_that_uses_no_gpu_recorded_nothing(record_torch: object, tmp_path: Path) -> None:
    script = tmp_path / "cpu.py"
    script.write_text("import torch\nprint(torch.ones(3).sum().item())\n")
    done = run_record(tmp_path, script, "-o", str(tmp_path / "s.pickle"))
    assert done.returncode == 1
    assert "recorded nothing" in done.stderr + done.stdout
    assert not (tmp_path / "s.pickle").exists()


def test_a_command_not_found_is_named(tmp_path: Path) -> None:
    done = subprocess.run([*HIPMEM, "record", "--", "no-such-command-here", "x.py"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "no-such-command-here" in done.stderr
    assert "Traceback" not in done.stderr


def test_vary_finds_the_largest_batch_that_fits_as_on_the_gpu(
    record_torch: object, tmp_path: Path
) -> None:
    """The GPT at batch sizes 125, 132 and 139 on the H200: 132 was the largest that ran, 139
    ran out of memory (truths: gpt_train-b*.stats.json)."""
    done = run_record(tmp_path, RECORD / "scripts" / "gpt_train.py", "--vary",
                      "BATCH=125,132,139", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = answer_of(done)
    assert answer["largest_fitting"] == "132"
    for run in answer["runs"]:
        on_gpu = truth(f"gpt_train-b{run['value']}")
        assert run["fits"] is not on_gpu["oom"]
        reserved = int(on_gpu["max_memory_reserved"])
        assert abs(run["max_memory_reserved"] - reserved) <= reserved // 100
    exact = {run["value"]: run["max_memory_reserved"] for run in answer["runs"]}
    # measured 2026-11-28: 125 and 139 exact; 132 is 10 MiB (0.015%) under the GPU's
    assert exact["125"] == truth("gpt_train-b125")["max_memory_reserved"]
    assert exact["139"] == truth("gpt_train-b139")["max_memory_reserved"]
    # Each run that ended, replayed on the fits table's devices: 132 on the H200 itself, "132
    # or more" where 139 might fit (it ran out on the smaller H200), none on an 80 GB H100.
    by_device = {entry["device"]: entry for entry in answer["by_device"]}
    assert (by_device["H200"]["largest"], by_device["H200"]["bounded"]) == ("132", False)
    assert (by_device["MI300X"]["largest"], by_device["MI300X"]["bounded"]) == ("132", True)
    assert by_device["H100"]["largest"] is None


def test_torch_distributed_is_refused_in_one_line(record_torch: object, tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "x = torch.ones(8, device='cuda')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1)\n"
    )
    done = run_record(tmp_path, script)
    assert done.returncode == 1
    assert "hipmem record: torch.distributed is not recorded yet" in done.stderr


def test_the_users_own_sitecustomize_still_runs(record_torch: object, tmp_path: Path) -> None:
    """The recording's boot is a sitecustomize first on PYTHONPATH; the user's own one, later
    on the path, runs after it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "from pathlib import Path\nPath('user-site-ran').write_text('yes')\n"
    )
    script = tmp_path / "one.py"
    script.write_text("import torch\ntorch.ones(4, device='cuda')\n")
    command = [*HIPMEM, "record", "--device", "H200", "--torch", "2.11.0", "--",
               sys.executable, str(script)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "user-site-ran").read_text() == "yes"
    assert "give -o SNAPSHOT to keep the snapshot" in " ".join(done.stdout.split())


def _workspaces(tmp_path: Path, device: str) -> tuple[list[str], set[int]]:
    """What a recording of blas_workspaces.py on `device` said it applied, and the sizes of
    its allocations over 4 MiB (the BLAS workspaces: the script's tensors are smaller)."""
    snapshot = tmp_path / f"{device}.pickle"
    script = RECORD / "scripts" / "blas_workspaces.py"
    command = [*HIPMEM, "record", "--device", device, "--torch", "2.11.0", "-o", str(snapshot),
               "--json", "--", sys.executable, str(script)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)
    applied = answer_of(done)["applied"]
    data = pickle.loads(snapshot.read_bytes())  # the test's own recording
    sizes = {e["size"] for trace in data["device_traces"] for e in trace
             if e["action"] == "alloc" and e["size"] > 4 << 20}  # fmt: skip
    return applied, sizes


def test_an_amd_device_gets_a_rocm_builds_blas_workspaces(
    record_torch: object, tmp_path: Path
) -> None:
    applied, sizes = _workspaces(tmp_path, "MI300X")
    assert sizes == {128 << 20, 76 << 20}  # rocBLAS on gfx942; hipBLASLt of PyTorch 2.11
    assert applied == [
        "the rocBLAS workspace: 128 MiB, a ROCm build's on gfx942 "
        "(CUBLAS_WORKSPACE_CONFIG=:131072:1)",
        "the hipBLASLt workspace: 76 MiB, a ROCm build's of PyTorch 2.11 "
        "(CUBLASLT_WORKSPACE_SIZE=77824)",
    ]
    applied, sizes = _workspaces(tmp_path, "H100")
    assert (applied, sizes) == ([], {32 << 20})  # the CUDA build's own: one cuBLAS workspace
