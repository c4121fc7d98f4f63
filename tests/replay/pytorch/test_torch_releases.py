"""Every PyTorch release from the oldest hipmem drives to the newest: resolved from the package
index, its CUDA header packages read from the wheel's own metadata, its driver compiled with
the C++ standard its headers need, and the committed snapshots replayed with its allocator.

The allocators are the `torch_allocators` fixture's (the oldest, 2.11 and the newest release,
fetched once per cache, the way users fetch them). Expected figures come from the recordings'
.stats.json (PyTorch's own memory_stats on the H200), from PyPI's metadata, or from ld."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import hipmem
from hipmem._core.native_build import first_error
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.resources import parse_spec
from hipmem.replay.pytorch import allocator as torch_allocator
from hipmem.replay.pytorch import fetch as torch_fetch
from hipmem.replay.pytorch import release as torch_release
from hipmem.replay.virtual import build as vcuda_build
from tests.cli_run import hipmem as run_hipmem
from tests.snapshot_reference import COMPLETE, NAMES, SNAPSHOTS

REPO = Path(__file__).resolve().parents[3]
RECORDED = parse_spec("torch:settings=recorded")


def _stats(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SNAPSHOTS / f"{name}.stats.json").read_text())
    return data


# ---- the committed snapshots under each release -------------------------------------------


@pytest.mark.parametrize("which", ["oldest", "2.11.0", "newest"])
@pytest.mark.parametrize("name", NAMES)
def test_every_snapshot_replays_under_each_release(
    name: str, which: str, torch_allocators: dict[str, torch_allocator.TorchAllocator]
) -> None:
    allocator = torch_allocators[which]
    stats = _stats(name)
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    spec = RECORDED
    if "memory_fraction" in stats:  # recorded under a cap: the same cap, on the same H200
        cap = int(stats["memory_fraction"] * stats["device_total_bytes"])
        spec = parse_spec(f"torch:settings=recorded,limit={cap}")
    options = ReplayOptions(backend="virtual", torch_version=allocator.version, device_name="H200")
    report = hipmem.replay_log(log, spec, options)
    assert report.engine == f"torch {allocator.version}"  # every answer names its release
    # The requests refused on the H200 (the trace's `oom`s) are refused again, no others.
    assert report.failure_count == stats["num_ooms"]
    if name in COMPLETE:  # the requests are the program's, whatever the release's policy
        assert report.peak_requested_bytes == stats["requested_bytes_peak"]
        if which == "2.11.0":  # the recordings' own release: byte for byte
            assert report.peak_reserved_bytes == stats["reserved_bytes_peak"]


def test_the_fixture_spans_releases_from_the_oldest_to_the_newest(
    torch_allocators: dict[str, torch_allocator.TorchAllocator],
) -> None:
    def public(which: str) -> torch_release.Version:
        return torch_release.Version(torch_allocators[which].version.split("+")[0])

    assert public("oldest").release[:2] == torch_release.OLDEST.release[:2]
    assert public("newest") >= torch_release.Version("2.14.1")  # what PyPI serves today
    assert torch_allocators["oldest"].soname == "libcudart.so.12"
    assert torch_allocators["newest"].soname == "libcudart.so.13"


# ---- the C++ standard and the failures of a build ----------------------------------------


def test_the_driver_is_compiled_as_cxx20_where_the_headers_need_it(
    torch_allocators: dict[str, torch_allocator.TorchAllocator],
) -> None:
    def standard(which: str) -> str:
        return vcuda_build.cxx_standard([f"-I{d}" for d in torch_allocators[which].include_dirs])

    assert standard("2.11.0") == "c++17"
    assert standard("oldest") == "c++17"
    assert standard("newest") == "c++20"  # 2.14's intrusive_ptr.h uses std::strong_ordering
    assert (vcuda_build.build(torch_allocators["newest"]) / vcuda_build.DRIVER).is_file()


def test_a_link_failure_names_the_undefined_symbol_and_the_release(
    tmp_path: Path,
    torch211: torch_allocator.TorchAllocator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sources = tmp_path / "vcuda"
    shutil.copytree(vcuda_build.SOURCES, sources)
    driver = sources / "vcuda_replay.cpp"
    text = driver.read_text()  # a call into the allocator library that it does not have
    text = text.replace(
        "    alloc::init(1);\n",
        "    alloc::init(1);\n    c10::cuda::CUDACachingAllocator::hipmemNoSuchCall(0);\n",
    )
    text = text.replace(
        "namespace {\n",
        "namespace c10::cuda::CUDACachingAllocator {\nC10_CUDA_API void hipmemNoSuchCall(int);\n}"
        "\nnamespace {\n",
        1,
    )
    driver.write_text(text)
    monkeypatch.setattr(vcuda_build, "SOURCES", sources)
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(vcuda_build.VirtualGpuBuildError) as caught:
        vcuda_build.build(torch211)
    said = str(caught.value)
    assert said.startswith("compiling the replay driver for PyTorch 2.11.0+cu130 (c++17) failed:")
    assert said.endswith(
        "undefined reference to c10::cuda::CUDACachingAllocator::hipmemNoSuchCall(int)"
    )
    assert "collect2" not in said


def test_a_compile_failure_shows_the_first_error_line() -> None:
    compiler = shutil.which("g++")
    assert compiler is not None
    done = subprocess.run(
        [compiler, "-x", "c++", "-", "-o", os.devnull],
        input="#include <hipmem_no_such_header.h>\nint main() {}\n",
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert first_error(done.stderr) == (
        "<stdin>:1:10: fatal error: hipmem_no_such_header.h: No such file or directory"
    )


# ---- resolving a release from the index and the wheel's own metadata ----------------------


def test_the_cuda_header_packages_come_from_the_wheels_requires_dist() -> None:
    # Real metadata, as PyPI serves it: 2.14 names cuda-toolkit, whose extras pin the headers;
    # 2.9 names the CUDA 12 runtime directly, whose crt/ comes with nvcc.
    newer = torch_release.resolve("torch==2.14.1", what="PyTorch 2.14.1")
    assert any(r.startswith("cuda-toolkit[") for r in newer.requires_dist)
    assert [h.requirement for h in torch_release.header_packages(newer.requires_dist)] == [
        "nvidia-cuda-runtime==13.0.96.*",
        "nvidia-cuda-crt==13.0.88.*",
    ]
    older = torch_release.resolve("torch==2.9.1", what="PyTorch 2.9.1")
    assert [
        (h.requirement, h.only) for h in torch_release.header_packages(older.requires_dist)
    ] == [("nvidia-cuda-runtime-cu12==12.8.90", ""), ("nvidia-cuda-nvcc-cu12==12.8.*", "crt/")]


def test_a_series_resolves_to_its_newest_cuda_release() -> None:
    found = torch_release.resolve_torch("2.12")
    assert found.name == "torch" and found.version == "2.12.1"  # not 2.12.0, no +cpu build


def test_the_fetched_releases_name_their_packages_and_runtime(
    torch_allocators: dict[str, torch_allocator.TorchAllocator],
) -> None:
    fetched = torch_fetch.load_fetched("2.11.0")
    assert fetched is not None and fetched.cuda_major == 13
    assert fetched.packages["nvidia-cuda-runtime"] == "13.0.96"
    assert fetched.packages["nvidia-cuda-crt"] == "13.0.88"
    lib = torch_allocators["oldest"].lib_dir / "libc10_cuda.so"
    assert torch_fetch.cudart_major(lib) == 12


# ---- the CLI ----------------------------------------------------------------------------


def _hipmem(*args: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO, COLUMNS="200")


def test_a_release_older_than_hipmem_drives_is_one_line_with_the_nearest() -> None:
    done = _hipmem("torch", "fetch", "--torch", "2.3")
    assert done.returncode == 2
    # Piped, the fetch says its first step on a line before the answer (hipmem_cli/output/).
    assert done.stderr.strip().splitlines()[-1:] == [
        "Error: --torch '2.3': hipmem drives PyTorch 2.4.0 and newer; the nearest release it "
        "drives is 2.4.0 (`hipmem torch fetch --torch 2.4`)"
    ]


def test_replay_shows_releases_side_by_side(
    torch_allocators: dict[str, torch_allocator.TorchAllocator],
) -> None:
    oldest, newest = torch_allocators["oldest"].version, torch_allocators["newest"].version
    asked = f"{oldest.split('+')[0]},{newest.split('+')[0]}"
    done = _hipmem("replay", str(SNAPSHOTS / "train-default.pickle.gz"), "-r",
                   "torch:settings=recorded", "--torch", asked, "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    resources = json.loads(done.stdout)["resources"]
    assert [r["resource"] for r in resources] == [
        f"torch:settings=recorded (PyTorch {oldest})",
        f"torch:settings=recorded (PyTorch {newest})",
    ]
    assert [r["engine"] for r in resources] == [f"torch {oldest}", f"torch {newest}"]
