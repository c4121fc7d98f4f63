"""hipmem's one table of devices (hipmem/_core/devices.py): every device of it works in every
command that takes `--device`. `size` answers for each AMD device with its arch and CUs, and
says in one line that an NVIDIA device is for replay; `replay -r torch` plays each device on
the virtual GPU with the table's memory (the real allocator, PyTorch 2.11's, fetched once by
the `torch_allocators` fixture; figures from the H200 recording's .stats.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hipmem
from hipmem._core.devices import AMD, DEVICES, find_device
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program, program_arrays
from hipmem.replay.pytorch import allocator as torch_allocator
from hipmem.replay.virtual.gpu import VirtualGpu
from hipmem.sizing.session import size_calls
from hipmem.sizing.worker.virtual_device import PRODUCTS, resolve
from tests.conftest import cli_env
from tests.snapshot_reference import SNAPSHOTS

TRAIN = SNAPSHOTS / "train-default.pickle.gz"
RECORDED_RESERVED_PEAK = json.loads(TRAIN.with_name("train-default.stats.json").read_text())[
    "reserved_bytes_peak"
]
AMD_DEVICES = [name for name, device in DEVICES.items() if device.vendor == AMD]
OTHER_DEVICES = [name for name, device in DEVICES.items() if device.vendor != AMD]
# rocSOLVER's memory-model example: the same on every device and arch (the arch changes only
# tuned gemm answers).
DGETRF = "rocsolver_dgetrf:m=1024,n=1024"
DGETRF_BYTES = 4_732_160


def _hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hipmem.cli.main", *args],
        capture_output=True, text=True, env=cli_env(COLUMNS="200"), timeout=300,
    )  # fmt: skip


def test_the_table_is_the_one_both_parts_read() -> None:
    assert list(PRODUCTS) == AMD_DEVICES and OTHER_DEVICES == ["H100", "H200", "A100-40GB",
                                                               "A100-80GB"]  # fmt: skip
    for name in DEVICES:
        assert ReplayOptions(backend="virtual", device_name=name).virtual_device() == DEVICES[name]
        assert find_device(name.lower().replace(" ", "-")) == DEVICES[name]
    for name in AMD_DEVICES:
        sized = resolve(name)
        assert (sized.arch.name, sized.compute_units, sized.memory_bytes) == (
            DEVICES[name].arch, DEVICES[name].compute_units, DEVICES[name].memory_bytes,
        )  # fmt: skip


def test_every_amd_device_of_the_table_sizes_a_call(rocm: Path) -> None:
    for name in AMD_DEVICES:
        result = size_calls([DGETRF], name).as_dict()
        device = result["device"]
        assert (device["name"], device["arch"], device["compute_units"]) == (
            name, DEVICES[name].arch, DEVICES[name].compute_units,
        )  # fmt: skip
        assert result["session_bytes"] == DGETRF_BYTES, name


@pytest.mark.parametrize("name", OTHER_DEVICES)
def test_size_says_in_one_line_that_an_nvidia_device_is_for_replay(rocm: Path, name: str) -> None:
    done = _hipmem("size", "--device", name, DGETRF)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == (
        f"Error: {name} is an NVIDIA GPU: sizing answers for AMD devices and archs only "
        "(rocBLAS and rocSOLVER on a virtual HIP GPU); replay runs on any device "
        "(`hipmem devices` lists them)"
    )


def test_every_device_of_the_table_is_played_by_the_virtual_gpu(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    program = build_program(hipmem.load_log(TRAIN))
    with VirtualGpu(program_arrays(program), program.slot_count, len(program.streams), "",
                    DEVICES["MI300X"], torch211) as gpu:  # fmt: skip
        for name, device in DEVICES.items():
            run = gpu.replay(device=device)
            assert run.device_bytes == device.memory_bytes, name
            # Every device holds this snapshot: PyTorch's allocator answers as on the H200.
            assert (run.replayed, run.peak_reserved_bytes) == (True, RECORDED_RESERVED_PEAK), name


def test_replay_on_an_mi210_from_the_command_line(torch_allocators: object) -> None:
    done = _hipmem("replay", str(TRAIN), "-r", "torch", "--device", "MI210", "--torch", "2.11",
                   "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)["resources"]
    assert report["device"] == (
        "PyTorch 2.11.0+cu130's allocator on a virtual MI210 (68,719,476,736 bytes)"
    )
    assert report["peak_reserved_bytes"] == RECORDED_RESERVED_PEAK
