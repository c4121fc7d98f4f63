"""What `hipmem record` is given, checked before anything runs: --vary's values, the command's
interpreter, the PyTorch it would run. Real files, no PyTorch needed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hipmem._core.devices import DEVICES
from hipmem.replay.errors import ReplayUsageError
from hipmem.replay.record.rocm_build import expandable_note, rocm_workspaces
from hipmem.replay.record.run import RecordRequest
from hipmem.replay.record.torch_site import RecordTorchError, checked, interpreter
from hipmem.replay.record.vary import _for_value, parse_variation


def test_a_variation_is_a_name_and_its_values() -> None:
    found = parse_variation("BATCH=8, 16,32")
    assert (found.name, found.values) == ("BATCH", ("8", "16", "32"))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("BATCH", "give NAME=V1,V2"),
        ("=8,16", "give NAME=V1,V2"),
        ("BATCH=8,,16", "a value is missing between commas"),
        ("BATCH=8,../x", "is not letters, digits"),
        ("BATCH=" + ",".join(map(str, range(65))), "65 values; at most 64 runs"),
    ],
)
def test_a_bad_variation_is_a_usage_error_naming_vary(text: str, why: str) -> None:
    with pytest.raises(ReplayUsageError) as raised:
        parse_variation(text)
    assert why in str(raised.value)
    assert raised.value.parameter == "vary"


def test_a_value_goes_into_the_words_that_name_it_else_into_the_environment(tmp_path: Path) -> None:
    request = RecordRequest(["python", "train.py", "--batch", "{BATCH}"], DEVICES["H100"],
                            output=tmp_path / "run.pickle.gz")  # fmt: skip
    named = _for_value(request, "BATCH", "16")
    assert named.command == ["python", "train.py", "--batch", "16"]
    assert "BATCH" not in named.environment
    assert named.output == tmp_path / "run-BATCH-16.pickle.gz"
    plain = _for_value(RecordRequest(["python", "train.py"], DEVICES["H100"]), "BATCH", "16")
    assert plain.environment == {"BATCH": "16"} and plain.output is None


def test_a_console_script_is_run_by_the_python_its_first_line_names(tmp_path: Path) -> None:
    launcher = tmp_path / "torchrun"
    launcher.write_text(f"#!{sys.executable}\nimport sys\n")
    assert interpreter(str(launcher)) == sys.executable
    assert interpreter(sys.executable) == sys.executable
    shell = tmp_path / "run.sh"
    shell.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(RecordTorchError, match="is not a Python interpreter"):
        interpreter(str(shell))


def test_a_pytorch_that_is_not_a_cuda_build_is_named(tmp_path: Path) -> None:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "version.py").write_text(
        "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n"
    )
    with pytest.raises(RecordTorchError) as raised:
        checked(package, None)
    assert "PyTorch 2.13.0+cpu" in str(raised.value)
    assert "is not a CUDA build" in str(raised.value) and "--torch" in str(raised.value)
    (package / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    assert checked(package, None).cuda_major == 13


def test_a_rocm_builds_workspaces_by_arch_and_release_and_the_users_own_kept() -> None:
    values, said = rocm_workspaces(DEVICES["MI210"], "2.13.0+cu130", {})
    assert values == {"CUBLAS_WORKSPACE_CONFIG": ":32768:1", "CUBLASLT_WORKSPACE_SIZE": "81920",
                      "TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"}  # fmt: skip
    assert said[1] == ("the hipBLASLt workspace: 80 MiB, a ROCm build's of PyTorch 2.13 "
                       "(CUBLASLT_WORKSPACE_SIZE=81920)")  # fmt: skip
    mine = {"ROCBLAS_WORKSPACE_CONFIG": ":1024:2", "HIPBLASLT_WORKSPACE_SIZE": "4096"}
    values, said = rocm_workspaces(DEVICES["MI355X"], "2.11.0", mine)
    assert values["CUBLAS_WORKSPACE_CONFIG"] == ":1024:2"  # the ROCm names a user set, kept
    assert values["CUBLASLT_WORKSPACE_SIZE"] == "4096"
    assert said == (
        "the rocBLAS workspace: ROCBLAS_WORKSPACE_CONFIG=:1024:2, as you set it",
        "the hipBLASLt workspace: HIPBLASLT_WORKSPACE_SIZE=4096, as you set it",
    )
    assert rocm_workspaces(DEVICES["H100"], "2.11.0", {}) == ({}, ())


def test_expandable_segments_a_rocm_build_ignores_is_said() -> None:
    said = expandable_note(DEVICES["MI300X"], "2.9.1", "expandable_segments:True")
    assert said is not None and said.startswith("expandable_segments does nothing in a ROCm build")
    assert expandable_note(DEVICES["MI300X"], "2.11.0", "expandable_segments:True") is None
    assert expandable_note(DEVICES["H100"], "2.9.1", "expandable_segments:True") is None
    assert expandable_note(DEVICES["MI300X"], "2.9.1", "max_split_size_mb:128") is None
