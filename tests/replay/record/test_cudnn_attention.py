"""cuDNN attention in a recording: PyTorch's own cuDNN path runs on the stand-in cuDNN
(replay/record/csrc/libraries/libcudnn.c) and makes the requests it made on the GPU.

benchmarks/gpu_cudnn_attention.py ran 53 attentions on an H200 (PyTorch 2.11.0+cu130, cuDNN
9.19; tests/data/record/truths-h200-2026-11-29/cudnn_attention.json): here the same file runs
under `hipmem record` with no GPU, and every attention's allocations and frees, in order and to
the byte, and PyTorch's own choice of backend, must be the GPU's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hipmem.replay.record.build import cudnn_version

from .recording import REPO, run_record

TRUTH = REPO / "tests" / "data" / "record" / "truths-h200-2026-11-29" / "cudnn_attention.json"
SCRIPT = REPO / "benchmarks" / "gpu_cudnn_attention.py"


def _differences(on_gpu: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    differences = []
    for gpu_run, run in zip(on_gpu["runs"], recorded["runs"], strict=True):
        assert run["config"] == gpu_run["config"]
        if (run["choice"], run["trace"]) != (gpu_run["choice"], gpu_run["trace"]):
            differences.append(
                f"{run['config']}: chose {run['choice']} (GPU {gpu_run['choice']}), "
                f"{run['trace']} (GPU {gpu_run['trace']})"
            )
    return differences


@pytest.mark.slow
def test_cudnn_attention_asks_what_it_asked_on_the_gpu(
    record_torch: object, tmp_path: Path
) -> None:
    answer = tmp_path / "cudnn_attention.json"
    done = run_record(tmp_path, SCRIPT, script_args=(str(answer),))
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads(answer.read_text())
    on_gpu = json.loads(TRUTH.read_text())
    assert len(on_gpu["runs"]) == 53
    assert (recorded["torch"], recorded["cudnn"]) == (on_gpu["torch"], on_gpu["cudnn"])
    assert _differences(on_gpu, recorded) == []
    # what the GPU asked beyond PyTorch's tensors: a 256-byte workspace forward, and backward
    # cudnn-frontend's fp32 dQ and softmax sums plus the same 256 bytes
    first = on_gpu["runs"][0]
    b, h, s, d = (first["config"][key] for key in "bhsd")
    assert ["alloc", 256] in first["trace"]
    assert ["alloc", b * h * s * d * 4 + b * h * s * 4 + 256] in first["trace"]


def _wheel_metadata(site: Path, requirement: str) -> Path:
    package = site / "torch"
    package.mkdir(parents=True)
    info = site / "torch-2.11.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Name: torch\nVersion: 2.11.0\nRequires-Dist: {requirement}\n")
    return package


def test_the_stand_in_cudnn_is_the_release_the_wheel_requires(tmp_path: Path) -> None:
    linux_only = 'nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux"'
    cu121 = _wheel_metadata(tmp_path / "a", linux_only)
    cu130 = _wheel_metadata(tmp_path / "b", "nvidia-cudnn-cu13==9.19.0.56")
    assert cudnn_version(cu121) == (9, 1, 0)
    assert cudnn_version(cu130) == (9, 19, 0)


def test_a_build_from_source_gets_the_measured_cudnn(tmp_path: Path) -> None:
    package = tmp_path / "torch"
    package.mkdir()
    assert cudnn_version(package) == (9, 19, 0)
