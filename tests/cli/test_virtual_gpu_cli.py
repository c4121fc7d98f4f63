"""The virtual GPU from the command line, as a user with no GPU runs it: `hipmem torch`, and
`hipmem replay` with --backend virtual, --device and --find-capacity (tests/cli_run.py), the
real allocator (fetched once by the `torch_allocators` fixture)."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from hipmem.replay.virtual.devices import FITS_DEVICES
from tests.cli_run import hipmem as run_hipmem
from tests.snapshot_reference import SNAPSHOTS

REPO = Path(__file__).resolve().parents[2]
TRAIN = SNAPSHOTS / "train-default.pickle.gz"
EXPANDABLE = SNAPSHOTS / "train-expandable.pickle.gz"


def _hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO, **{"COLUMNS": "200", **env})


@pytest.fixture(autouse=True)
def _allocators(torch_allocators: dict[str, Any]) -> None:
    """Every test here needs a fetched allocator (the fixture fetches it once)."""


def _stats(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        path.with_name(path.name.replace(".pickle.gz", ".stats.json")).read_text()
    )
    return data


def test_replay_json_has_the_recorded_peak_and_says_where_it_ran() -> None:
    done = _hipmem("replay", str(EXPANDABLE), "-r", "torch:settings=recorded", "--backend",
                   "virtual", "--device", "H200", "--torch", "2.11", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (resource,) = payload["resources"]
    assert resource["peak_reserved_bytes"] == _stats(EXPANDABLE)["reserved_bytes_peak"]
    assert resource["backend"] == "virtual" and resource["engine"] == "torch 2.11.0+cu130"
    assert resource["device"].startswith("PyTorch 2.11.0+cu130's allocator on a virtual H200 (")
    assert payload["recorded"]["peak_reserved_bytes"] == resource["peak_reserved_bytes"]


def test_replay_table_says_plainly_which_allocator_on_which_device() -> None:
    done = _hipmem("replay", str(TRAIN), "-r", "torch:settings=recorded", "--device", "MI300X",
                   "--torch", "2.11")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "virtual / torch 2.11.0+cu130" in done.stdout
    memory = f"{FITS_DEVICES['MI300X'].memory_bytes:,}"
    assert f"PyTorch 2.11.0+cu130's allocator on a virtual MI300X ({memory} bytes)" in done.stdout
    assert f"{_stats(TRAIN)['reserved_bytes_peak']:,}" in done.stdout


def test_find_capacity_gives_both_caps_and_a_fits_row_per_preset() -> None:
    done = _hipmem("replay", str(TRAIN), "-r", "torch:settings=recorded", "-r",
                   "torch:expandable_segments=1", "--device", "MI300X", "--torch", "2.11",
                   "--find-capacity", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)["virtual_gpu"]
    assert [e["resource"] for e in entries] == [
        "torch:settings=recorded",
        "torch:expandable_segments=1",
    ]
    requested = _stats(TRAIN)["requested_bytes_peak"]
    for entry in entries:
        device, fraction = entry["device_memory"], entry["memory_fraction"]
        assert device["sized_option"] == "device memory"
        assert fraction["sized_option"] == "memory fraction of MI300X"
        for found in (device, fraction):
            assert requested <= found["capacity_bytes"] and found["capacity_bytes"] % (2 << 20) == 0
        assert [fit["device"] for fit in entry["fits"]] == list(FITS_DEVICES)
        assert all(fit["fits"] for fit in entry["fits"])  # a 0.5 GB job fits everywhere
        for fit in entry["fits"]:
            assert fit["headroom_bytes"] == fit["memory_bytes"] - fit["peak_reserved_bytes"]


def test_find_capacity_table_names_each_cap() -> None:
    done = _hipmem("replay", str(TRAIN), "-r", "torch:settings=recorded", "--device", "H100",
                   "--torch", "2.11", "--find-capacity")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fraction of H100" in done.stdout and "device memory" in done.stdout
    assert "Neither counts the memory a real GPU keeps" in " ".join(done.stdout.split())
    assert "Fits: the log on each device" in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["-r", "managed", "--backend", "virtual"], 2,
         "Error: --backend 'virtual': 'managed': the virtual GPU replays RMM's pool, arena"),
        (["-r", "torch", "--device", "MI301X"], 2,
         "Error: --device 'MI301X': not a device hipmem knows; did you mean MI300X"),
        (["-r", "host", "--device", "H100"], 2,
         "Error: --device picks the virtual GPU, and no resource here replays on it"),
        (["-r", "torch", "--device", "H100", "--device-memory", "8GiB"], 2,
         "Error: --device-memory 8589934592: give a device or a memory size, not both"),
        (["-r", "torch:backend=cudaMallocAsync", "--backend", "virtual"], 2,
         "Error: the virtual GPU runs PyTorch's native caching allocator"),
        (["-r", "torch", "--torch", "1.13"], 2,
         "Error: --torch '1.13': hipmem drives PyTorch 2.4.0 and newer; the nearest release it "
         "drives is 2.4.0"),
    ],
)  # fmt: skip
def test_bad_requests_are_one_line_before_any_work(args: list[str], code: int, said: str) -> None:
    done = _hipmem("replay", str(TRAIN), *args)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), done.stderr


def test_a_snapshot_larger_than_the_device_is_refused_allocations_with_lines() -> None:
    done = _hipmem("replay", str(TRAIN), "-r", "torch:settings=recorded", "--device-memory",
                   "256MiB", "--torch", "2.11")  # fmt: skip
    assert done.returncode == 1
    assert "torch:settings=recorded first refused" in done.stdout
    assert "train-default.pickle.gz#dev0:" in done.stdout


def test_torch_where_and_devices(tmp_path: Path) -> None:
    where = _hipmem("torch", "where", "--torch", "2.9", "--json")
    assert where.returncode == 0, where.stderr
    allocator = json.loads(where.stdout)["allocator"]
    assert allocator["version"] == "2.9.1+cu128" and allocator["cuda_runtime"] == "libcudart.so.12"
    devices = json.loads(_hipmem("torch", "devices", "--json").stdout)
    assert [d["name"] for d in devices["devices"]] == list(FITS_DEVICES)
    empty = _hipmem("torch", "where", HIPMEM_CACHE_DIR=str(tmp_path))
    assert empty.returncode == 1
    assert empty.stderr.strip().endswith("none was fetched; run `hipmem torch fetch`")


def test_fetch_refuses_a_wheel_that_is_not_pytorch(tmp_path: Path) -> None:
    wheel = tmp_path / "torchvision-0.26.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torchvision/__init__.py", "")
    done = _hipmem("torch", "fetch", "--wheel", str(wheel), HIPMEM_CACHE_DIR=str(tmp_path / "c"))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: {wheel}: not a PyTorch wheel (it has no torch/version.py)"
    )
    assert not (tmp_path / "c" / "torch" / "2.11.0").exists()  # nothing half written


@pytest.mark.slow
def test_fetch_as_a_new_user_then_a_damaged_cache_is_named_and_repaired(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    fetched = _hipmem("torch", "fetch", "--torch", "2.11", HIPMEM_CACHE_DIR=cache)
    assert fetched.returncode == 0, fetched.stderr
    assert "PyTorch 2.11.0+cu130's allocator ready in" in fetched.stderr
    # Piped, each step of the wait is a line (on a terminal, the bar's description).
    steps = [line for line in fetched.stderr.splitlines() if line.startswith("fetching ")]
    assert steps == [
        "fetching PyTorch 2.11: finding PyTorch 2.11 on the package index",
        "fetching PyTorch 2.11: downloading PyTorch 2.11.0 (pip)",
        "fetching PyTorch 2.11: downloading the CUDA headers of PyTorch 2.11.0 (pip)",
        "fetching PyTorch 2.11: keeping libc10.so, libc10_cuda.so and the headers",
    ], fetched.stderr
    kept = tmp_path / "cache" / "torch" / "2.11.0"
    assert (kept / "lib" / "libc10_cuda.so").is_file() and not list(kept.rglob("*.whl"))
    assert sum(p.stat().st_size for p in kept.rglob("*") if p.is_file()) < 20 << 20
    header = kept / "cuda-include" / "cuda_runtime_api.h"
    header.write_text(header.read_text().replace("cudaMalloc", "cudaMallok"))
    header.touch()
    damaged = _hipmem("torch", "where", "--torch", "2.11", HIPMEM_CACHE_DIR=cache)
    assert damaged.returncode == 1
    assert "run `hipmem torch fetch --torch 2.11.0` to repair it" in damaged.stderr
    repaired = _hipmem("torch", "fetch", "--torch", "2.11", HIPMEM_CACHE_DIR=cache)
    assert repaired.returncode == 0, repaired.stderr
    assert "cudaMallok" not in header.read_text()
    assert _hipmem("torch", "where", "--torch", "2.11", HIPMEM_CACHE_DIR=cache).returncode == 0
