"""Allocator settings recorded in a snapshot are input: held to PyTorch's grammar before the
allocator reads them, and a bad one is one line naming the file, never PyTorch's own refusal
(which names no file, and asserted on some values)."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipmem._core.alloc_conf import alloc_conf_problem
from tests.cli_run import hipmem

SNAPSHOT = Path(__file__).resolve().parents[2] / "data" / "snapshots" / "train-default.pickle.gz"


def _with_recorded_settings(folder: Path, conf: str) -> Path:
    data = pickle.loads(gzip.decompress(SNAPSHOT.read_bytes()))
    data["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] = conf
    path = folder / "hostile.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(data)))
    return path


@pytest.mark.parametrize(
    "conf",
    [
        "max_split_size_mb:7",  # PyTorch: "too small, must be >= 20"
        "roundup_power2_divisions:[1:2:3]",
        "garbage_collection_threshold:2",
        "expandable_segments:True\x1b[31m",
    ],
)
@pytest.mark.parametrize("command", [["replay", "-r", "torch:settings=recorded"], ["explain"]])
def test_hostile_recorded_settings_are_one_line_naming_the_file(
    conf: str, command: list[str], tmp_path: Path
) -> None:
    path = _with_recorded_settings(tmp_path, conf)
    done = hipmem(command[0], str(path), *command[1:], "--device", "H200")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"Error: {path}#dev0: the recorded allocator settings: "), line
    assert "\x1b" not in line and "must be >=" not in line and "stopped" not in line


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_the_recorded_settings_check_refuses_or_passes_in_one_line(conf: str) -> None:
    problem = alloc_conf_problem(conf)
    assert problem is None or "\n" not in problem
