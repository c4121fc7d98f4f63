"""PyTorch's own caching allocator on hipmem's virtual GPU, with no GPU: the stand-in runtime's
behaviour, the allocator's answers against what the H200 recorded, and capacity.

Every test runs the real allocator (libc10_cuda.so of a fetched PyTorch: the `torch_allocators`
fixture fetches it once, the way users do). Expected figures come from the recordings'
.stats.json (PyTorch's own memory_stats on the H200) or from fresh processes, never from a
run of this code."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import hipmem
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import build_program, program_arrays
from hipmem.replay.engine.resources import ResourceSpec, parse_spec
from hipmem.replay.pytorch import allocator as torch_allocator
from hipmem.replay.pytorch import fetch as torch_fetch
from hipmem.replay.settings import grid as allocator_grid
from hipmem.replay.virtual import build as vcuda_build
from hipmem.replay.virtual.devices import custom_device, find_device
from hipmem.replay.virtual.gpu import VirtualGpu
from tests.snapshot_reference import COMPLETE, SNAPSHOTS

REPO = Path(__file__).resolve().parents[3]
MiB, GiB = 1 << 20, 1 << 30
RECORDED = parse_spec("torch:settings=recorded")


def _stats(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SNAPSHOTS / f"{name}.stats.json").read_text())
    return data


def _virtual(torch_version: str = "2.11", **kwargs: object) -> ReplayOptions:
    return ReplayOptions(backend="virtual", torch_version=torch_version, **kwargs)  # type: ignore[arg-type]


# ---- the stand-in runtime, driven directly -------------------------------------------------


@pytest.fixture(scope="module")
def runtime(torch211: torch_allocator.TorchAllocator) -> ctypes.CDLL:
    """The stand-in libcudart.so.13, loaded into this process as a plain library."""
    library = ctypes.CDLL(str(vcuda_build.build(torch211) / "libcudart.so.13"))
    assert library.hipmem_vcuda_configure(ctypes.c_ulonglong(8 * GiB), ctypes.c_ulonglong(0)) == 0
    return library


def _malloc(runtime: ctypes.CDLL, size: int) -> tuple[int, int]:
    pointer = ctypes.c_void_p()
    status = runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size))
    return status, pointer.value or 0


def _free_bytes(runtime: ctypes.CDLL) -> int:
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert runtime.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == 0
    assert total.value == 8 * GiB
    return free.value


def test_addresses_decrease_and_a_freed_range_is_reused_highest_first(
    runtime: ctypes.CDLL,
) -> None:
    # Top down, as the CUDA driver places segments (the committed snapshots' addresses
    # decrease); PyTorch breaks ties between equal-size cached blocks by address.
    sizes = [2 * MiB, 6 * MiB, 2 * MiB, 4 * MiB]
    pointers = [_malloc(runtime, size)[1] for size in sizes]
    assert pointers == sorted(pointers, reverse=True) and all(p % (2 * MiB) == 0 for p in pointers)
    assert all(a - b >= size for a, b, size in zip(pointers, pointers[1:], sizes[1:], strict=False))
    assert runtime.cudaFree(ctypes.c_void_p(pointers[1])) == 0  # a 6 MiB hole
    assert runtime.cudaFree(ctypes.c_void_p(pointers[0])) == 0  # and the 2 MiB above it
    top = pointers[0] + 2 * MiB  # one 8 MiB hole now, at the top
    assert _malloc(runtime, 4 * MiB)[1] == top - 4 * MiB
    assert _malloc(runtime, 4 * MiB)[1] == top - 8 * MiB == pointers[1]
    beyond = _malloc(runtime, 2 * MiB)[1]
    assert beyond < pointers[-1]  # no hole is left above the last block
    for pointer in (top - 4 * MiB, pointers[1], pointers[2], pointers[3], beyond):
        assert runtime.cudaFree(ctypes.c_void_p(pointer)) == 0
    assert _free_bytes(runtime) == 8 * GiB


def test_placement_up_gives_the_lowest_free_range_first(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    # HIPMEM_VCUDA_PLACEMENT=up, the other order, kept to measure what placement changes.
    library = vcuda_build.build(torch211) / "libcudart.so.13"
    probe = (
        "import ctypes, sys\n"
        f"r = ctypes.CDLL({str(library)!r})\n"
        "p = [ctypes.c_void_p() for _ in range(3)]\n"
        "for q in p: assert r.cudaMalloc(ctypes.byref(q), ctypes.c_size_t(2 << 20)) == 0\n"
        "assert r.cudaFree(p[0]) == 0\n"
        "again = ctypes.c_void_p()\n"
        "assert r.cudaMalloc(ctypes.byref(again), ctypes.c_size_t(2 << 20)) == 0\n"
        "values = [q.value for q in p]\n"
        "print(values == sorted(values) and again.value == values[0])\n"
    )
    env = {**os.environ, "HIPMEM_VCUDA_PLACEMENT": "up"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_memory_past_the_device_is_refused_as_a_driver_does(runtime: ctypes.CDLL) -> None:
    status, first = _malloc(runtime, 6 * GiB)
    assert status == 0 and _free_bytes(runtime) == 2 * GiB
    status, _ = _malloc(runtime, 2 * GiB + 1)  # rounds to 2 GiB + 2 MiB: one page too many
    assert status == 2  # cudaErrorMemoryAllocation
    assert runtime.cudaGetLastError() == 2 and runtime.cudaGetLastError() == 0
    assert runtime.cudaFree(ctypes.c_void_p(first)) == 0
    assert runtime.cudaFree(ctypes.c_void_p(first)) != 0  # a double free is an error, not a crash


def test_driver_calls_of_expandable_segments_come_through_the_entry_point(
    runtime: ctypes.CDLL,
) -> None:
    def entry(name: str, *argtypes: Any) -> Any:
        function, status = ctypes.c_void_p(), ctypes.c_int(-1)
        runtime.cudaGetDriverEntryPointByVersion(
            name.encode(),
            ctypes.byref(function),
            12000,
            ctypes.c_ulonglong(0),
            ctypes.byref(status),
        )
        if not function.value:
            return status.value
        return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(function.value)

    granularity = ctypes.c_size_t()
    get_granularity = entry("cuMemGetAllocationGranularity", ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_int)  # fmt: skip
    assert get_granularity(ctypes.byref(granularity), None, 0) == 0
    assert granularity.value == 2 * MiB
    create = entry("cuMemCreate", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                   ctypes.c_ulonglong)  # fmt: skip
    release = entry("cuMemRelease", ctypes.c_ulonglong)
    handle = ctypes.c_ulonglong()
    assert create(ctypes.byref(handle), 6 * GiB, None, 0) == 0
    assert _free_bytes(runtime) == 2 * GiB
    assert create(ctypes.byref(ctypes.c_ulonglong()), 4 * GiB, None, 0) == 2
    assert create(ctypes.byref(ctypes.c_ulonglong()), MiB, None, 0) == 1  # not a whole page
    assert release(handle) == 0 and _free_bytes(runtime) == 8 * GiB
    reserve = entry("cuMemAddressReserve", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                    ctypes.c_ulonglong, ctypes.c_ulonglong)  # fmt: skip
    address = ctypes.c_ulonglong()
    # Address space is not memory: far more than the device can be reserved.
    assert reserve(ctypes.byref(address), 64 * GiB, 0, 0, 0) == 0
    assert address.value % (2 * MiB) == 0 and _free_bytes(runtime) == 8 * GiB
    assert entry("cuMemAddressFree", ctypes.c_ulonglong, ctypes.c_size_t)(address, 64 * GiB) == 0
    assert entry("cuNoSuchCall") == 1  # cudaDriverEntryPointSymbolNotFound


def test_calls_a_replay_never_makes_return_an_error(runtime: ctypes.CDLL) -> None:
    assert runtime.cudaMemcpy(None, None, 0, 0) == 801  # cudaErrorNotSupported
    assert runtime.cudaGetLastError() == 801
    assert runtime.cudaIpcOpenMemHandle(None, None, 0) == 801
    assert runtime.cudaSetDevice(1) == 101  # cudaErrorInvalidDevice: there is one GPU


# ---- PyTorch's allocator on it: exactness against the H200's recordings ---------------------


@pytest.mark.parametrize("name", COMPLETE)
def test_recorded_settings_give_the_recorded_peaks_byte_for_byte(
    name: str, torch211: torch_allocator.TorchAllocator
) -> None:
    stats = _stats(name)
    assert stats["torch"].startswith("2.11.0")  # the version the fixture fetched
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    spec = RECORDED
    if "memory_fraction" in stats:  # recorded under a cap: the same cap, on the same H200
        assert stats["device_total_bytes"] == find_device("H200").memory_bytes
        cap = int(stats["memory_fraction"] * stats["device_total_bytes"])
        spec = parse_spec(f"torch:settings=recorded,limit={cap}")
    report = hipmem.replay_log(log, spec, _virtual(device_name="H200"))
    assert report.peak_reserved_bytes == stats["reserved_bytes_peak"]
    assert report.peak_requested_bytes == stats["requested_bytes_peak"]
    # The requests that ran out of memory on the H200 are replayed and refused again, as many
    # as it counted (num_ooms; 0 for the snapshots recorded with no cap).
    assert report.failure_count == stats["num_ooms"] and report.backend == "virtual"
    assert all(failure.recorded_failed for failure in report.failures)
    assert report.device is not None
    assert report.device.startswith("PyTorch 2.11.0+cu130's allocator on a virtual H200")


def test_both_allocators_are_covered_default_and_expandable() -> None:
    confs = {_stats(name)["alloc_conf"] for name in COMPLETE}
    assert confs == {"", "expandable_segments:True"}


def test_pytorch_29_runs_side_by_side_and_names_itself(
    torch_allocators: dict[str, torch_allocator.TorchAllocator],
) -> None:
    log = hipmem.load_log(SNAPSHOTS / "train-expandable.pickle.gz")
    reports = {v: hipmem.replay_log(log, RECORDED, _virtual(v)) for v in ("2.9", "2.11")}
    assert reports["2.9"].engine == "torch 2.9.1+cu128"
    assert reports["2.11"].engine == "torch 2.11.0+cu130"
    assert "fetched" in (reports["2.9"].allocator_source or "")
    for report in reports.values():  # the same requests, whatever the version's policy
        assert report.peak_requested_bytes == _stats("train-expandable")["requested_bytes_peak"]


def test_a_device_smaller_than_the_snapshot_refuses_as_pytorch_does(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    log = hipmem.load_log(SNAPSHOTS / "train-default.pickle.gz")
    peak = _stats("train-default")["requested_bytes_peak"]
    report = hipmem.replay_log(log, RECORDED, _virtual(device_memory_bytes=peak // 2))
    assert report.failure_count > 0
    first = report.failures[0]
    assert first.where.source.endswith("train-default.pickle.gz#dev0") and first.where.line > 0
    assert first.live_bytes + first.size_bytes > peak // 2 - 64 * MiB  # it really was full


# ---- many replays: none depends on the ones before it -----------------------------------


def _answers(gpu: VirtualGpu, sizes: list[int]) -> dict[int, tuple]:
    answers = {}
    for size in sizes:
        run = gpu.replay(device_bytes=size)
        answers[size] = (run.peak_reserved_bytes, run.failure_count, list(run.failure_op),
                         run.num_ooms, run.device_peak_bytes, run.held_at_end_bytes)  # fmt: skip
    return answers


@pytest.mark.parametrize(
    ("name", "conf"),
    [("train-default", ""), ("train-expandable", "expandable_segments:True"),
     ("multistream", "expandable_segments:True")],
)  # fmt: skip
def test_a_replay_does_not_depend_on_the_replays_before_it(
    name: str, conf: str, torch211: torch_allocator.TorchAllocator
) -> None:
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    program = build_program(log)
    requested = _stats(name)["requested_bytes_peak"] // MiB * MiB
    # Sizes that refuse, at the edge and roomy: in one process, expandable segments answered
    # the third differently after the second (see replay/virtual/gpu.py).
    sizes = [2 * GiB, requested // 2, requested + 64 * MiB, 8 * GiB, requested + 2 * MiB]
    with VirtualGpu(program_arrays(program), program.slot_count, len(program.streams), conf,
                    find_device("H100"), torch211) as gpu:  # fmt: skip
        forward = _answers(gpu, sizes)
        backward = _answers(gpu, sizes[::-1])
    assert forward == backward
    assert forward[requested // 2][1] > 0 and forward[8 * GiB][1] == 0


# ---- capacity ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["train-default", "train-expandable"])
def test_the_smallest_device_is_bisected_to_2_mib_and_holds_in_fresh_processes(
    name: str, torch211: torch_allocator.TorchAllocator
) -> None:
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    found = hipmem.find_capacity(log, RECORDED, _virtual(), cap="device")
    assert found.sized_option == "device memory" and found.resolution_bytes == 2 * MiB
    assert found.capacity_bytes % (2 * MiB) == 0
    stats = _stats(name)
    assert stats["requested_bytes_peak"] <= found.capacity_bytes <= stats["reserved_bytes_peak"]
    at = hipmem.replay_log(log, RECORDED, _virtual(device_memory_bytes=found.capacity_bytes))
    below = hipmem.replay_log(
        log, RECORDED, _virtual(device_memory_bytes=found.capacity_bytes - 2 * MiB)
    )
    assert at.failure_count == 0 and below.failure_count > 0


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("train-expandable", "torch:settings=recorded"),
        # Under a fraction, expandable segments were refused at their own uncapped reserved
        # peak here: the search must look above it.
        ("oom", "torch:expandable_segments=1"),
    ],
)
def test_the_fraction_cap_is_its_own_figure(
    name: str, spec: str, torch211: torch_allocator.TorchAllocator
) -> None:
    log = hipmem.load_log(SNAPSHOTS / f"{name}.pickle.gz")
    options = _virtual(device_name="H100")
    found = hipmem.find_capacity(log, parse_spec(spec), options, cap="fraction")
    assert found.sized_option == "memory fraction of H100"
    capped = parse_spec(found.sized_spec)
    assert capped.limit_bytes == found.capacity_bytes
    assert hipmem.replay_log(log, capped, options).failure_count == 0
    below = parse_spec(f"{spec},limit={found.capacity_bytes - 2 * MiB}")
    assert hipmem.replay_log(log, below, options).failure_count > 0


def test_a_search_ends_on_a_device_whose_memory_is_no_multiple_of_2_mib() -> None:
    """The search's top is the device's memory; an H100's is no multiple of 2 MiB. A setting
    whose per_process_memory_fraction needs nearly all of it (the fraction is a share of the
    device) once made the bisection round down onto the same failing size forever. In a
    process with a deadline: a loop is a failure, not a hung suite."""
    log = hipmem.load_log(SNAPSHOTS / "oom.pickle.gz")
    h100 = find_device("H100").memory_bytes
    assert h100 % (2 * MiB)
    peak = hipmem.replay_log(log, parse_spec("torch"), _virtual(device_name="H100"))
    fraction = allocator_grid.fraction_text(peak.peak_reserved_bytes or 0, h100)
    settings = f"garbage_collection_threshold:0.6,per_process_memory_fraction:{fraction}"
    command = [
        *(sys.executable, "-m", "hipmem.cli.main", "replay", str(SNAPSHOTS / "oom.pickle.gz")),
        *("-r", f"torch:settings={settings}", "--device", "H100", "--find-capacity"),
        *("--confirm-runs", "1", "--torch", "2.11", "--json"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)["virtual_gpu"]
    smallest = entry["device_memory"]["capacity_bytes"]
    assert h100 - 4 * MiB < smallest <= h100  # the share is enough only near the whole device


def test_fits_says_which_presets_hold_the_log_and_the_headroom(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    log = hipmem.load_log(SNAPSHOTS / "train-default.pickle.gz")
    tiny = [find_device("H100"), custom_device(256 * MiB)]
    found = hipmem.fits_table(log, RECORDED, _virtual(), devices=tiny)
    assert [fit.device.name for fit in found] == ["H100", tiny[1].name]
    roomy, small = found
    assert (
        roomy.fits and roomy.peak_reserved_bytes == _stats("train-default")["reserved_bytes_peak"]
    )
    assert roomy.headroom_bytes == find_device("H100").memory_bytes - roomy.peak_reserved_bytes
    assert not small.fits and small.refused_count > 0


# ---- memory: address space only ------------------------------------------------------------


def test_a_288_gib_device_replays_in_a_few_mb_of_resident_memory(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    log = hipmem.load_log(SNAPSHOTS / "train-default.pickle.gz")
    program = build_program(log)
    with VirtualGpu(program_arrays(program), program.slot_count, len(program.streams), "",
                    find_device("MI355X"), torch211) as gpu:  # fmt: skip
        run = gpu.replay()
        rss = gpu.peak_rss
    assert run.peak_reserved_bytes > 800 * MiB  # it held ~1 GB of "device" memory
    assert rss is not None and rss < 300 * MiB


# ---- where the allocator comes from, and bad input ----------------------------------------


def _locate_in_subprocess(tmp_path: Path, torch_version: str, **env: str) -> str:
    code = (  # an installed PyTorch (a GPU machine's) is hidden unless the test brings one
        "import sys; from hipmem.replay.pytorch import allocator as t\n"
        "if 'PYTHONPATH' not in __import__('os').environ: t.installed_torch = lambda: None\n"
        f"try: print(t.locate({torch_version!r} or None).describe())\n"
        "except Exception as err: print('error:', err)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={**os.environ, "HIPMEM_CACHE_DIR": str(tmp_path / "cache"), **env}, cwd=tmp_path,
    )  # fmt: skip
    return done.stdout.strip() + done.stderr.strip()


def test_no_fetched_version_is_one_line_with_the_way_out(tmp_path: Path) -> None:
    said = _locate_in_subprocess(tmp_path, "2.9")
    assert said == (
        "error: no allocator of PyTorch 2.9: no PyTorch is installed; PyTorch 2.9 was not "
        "fetched; run `hipmem torch fetch --torch 2.9`"
    )
    assert "run `hipmem torch fetch`" in _locate_in_subprocess(tmp_path, "")


def test_a_cpu_pytorch_is_passed_over_and_said(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "version.py").write_text("__version__ = '2.11.0+cpu'\ncuda = None\nhip = None\n")
    said = _locate_in_subprocess(tmp_path, "", PYTHONPATH=str(tmp_path / "site"))
    assert said == (
        "error: no PyTorch allocator for the virtual GPU: the installed PyTorch 2.11.0+cpu is a "
        "CPU build, not a CUDA build and none was fetched; run `hipmem torch fetch`"
    )


def test_a_damaged_fetch_is_found_and_named(
    tmp_path: Path, torch211: torch_allocator.TorchAllocator, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(torch211.location, cache / "torch" / "2.11.0")
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(cache))
    library = cache / "torch" / "2.11.0" / "lib" / "libc10_cuda.so"
    library.write_bytes(library.read_bytes()[:1000])
    with pytest.raises(torch_fetch.TorchNotFetched) as caught:
        torch_allocator.locate("2.11")
    assert str(caught.value) == (
        "the fetched PyTorch 2.11.0 is damaged (lib/libc10_cuda.so changed since it was "
        "fetched); run `hipmem torch fetch --torch 2.11.0` to repair it"
    )


def test_a_wheel_that_is_not_pytorch_is_refused_before_any_download(tmp_path: Path) -> None:
    import zipfile

    wheel = tmp_path / "numpy-2.0.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("numpy/__init__.py", "")
    with pytest.raises(torch_fetch.TorchFetchError, match="not a PyTorch wheel"):
        torch_fetch.fetch("2.11", wheel=wheel)
    cpu = tmp_path / "torch-2.11.0-cp311-none-any.whl"
    with zipfile.ZipFile(cpu, "w") as archive:
        archive.writestr("torch/version.py", "__version__ = '2.11.0+cpu'\ncuda = None\n")
    with pytest.raises(torch_fetch.TorchFetchError, match=r"2.11.0\+cpu is not a CUDA build"):
        torch_fetch.fetch("2.11", wheel=cpu)


def test_the_drivers_own_pool_on_the_virtual_gpu_is_one_clear_line() -> None:
    # (RMM's own resources replay there: tests/replay/rmm/test_rmm_virtual.py)
    log = hipmem.load_log(SNAPSHOTS / "oom.pickle.gz")
    with pytest.raises(hipmem.UsageError, match="async is the CUDA driver's own pool"):
        hipmem.replay_log(log, parse_spec("async"), _virtual())


def test_settings_pytorch_refuses_are_its_own_words(
    torch211: torch_allocator.TorchAllocator,
) -> None:
    log = hipmem.load_log(SNAPSHOTS / "oom.pickle.gz")
    with pytest.raises(
        hipmem.HipmemError,
        match=r"with the settings 'roundup_power2_divisions:3' stopped: For roundups, the "
        "divisions has to be power of 2",
    ):
        hipmem.replay_log(log, _unchecked("roundup_power2_divisions", "3"), _virtual())


def _unchecked(key: str, value: str) -> ResourceSpec:
    """A torch spec whose value reaches PyTorch: parse_spec refuses what PyTorch would
    (hipmem/_core/alloc_conf.py), so the spec is made as the Python API may make one."""
    spec = parse_spec("torch")
    return replace(spec, options={**spec.options, key: value}, text=f"torch:{key}={value}")


def test_settings_refused_before_the_probe_is_read_are_still_its_own_words(
    torch211: torch_allocator.TorchAllocator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch may refuse its settings and end before it reads the probe line (a broken pipe
    for the line): what it said is still read, not "the process ended"."""
    started = VirtualGpu._start

    def start_and_let_it_end(self: VirtualGpu, *args: Any) -> subprocess.Popen[str]:
        process = started(self, *args)
        process.wait(timeout=60)  # the refusal, before any line is written to it
        return process

    monkeypatch.setattr(VirtualGpu, "_start", start_and_let_it_end)
    log = hipmem.load_log(SNAPSHOTS / "oom.pickle.gz")
    with pytest.raises(hipmem.HipmemError, match=r"stopped: For roundups, the divisions"):
        hipmem.replay_log(log, _unchecked("roundup_power2_divisions", "3"), _virtual())


def test_ctrl_c_ends_the_replay_and_leaves_nothing_behind(
    tmp_path: Path, torch211: torch_allocator.TorchAllocator
) -> None:
    import signal
    import time

    code = (  # Ctrl-C as at a terminal (a background job's shell may have it ignored)
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import hipmem\n"
        "log = hipmem.load_log('tests/data/snapshots/train-default.pickle.gz')\n"
        "options = hipmem.ReplayOptions(backend='virtual', torch_version='2.11', repeats=100_000)\n"
        "print('replaying', flush=True)\n"
        "hipmem.replay_log(log, hipmem.parse_spec('torch'), options)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "TMPDIR": str(tmp_path)}, start_new_session=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline() == "replaying\n"
    time.sleep(1.0)  # well into the 100,000 passes (about a minute)
    os.killpg(child.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    child.wait(timeout=30)
    assert child.returncode in (-signal.SIGINT, 1, 130)  # ended by the interrupt
    assert not list(tmp_path.glob("hipmem-vgpu-*"))  # the program's files are gone
    drivers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert drivers.stdout == ""  # and no driver process is left
