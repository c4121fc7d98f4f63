"""RMM's own resources on the virtual GPU: RMM's real C++ code (librmm-cu12 25.4.0 and 24.12.1,
fetched once per session by the `rmm_releases` fixture and compiled once per cache) over the
stand-in runtime, with no GPU.

The figures asserted are the ones RMM's rules give (docs/rmm-virtual.md says which rule):
- pool with no maximum grows by max(request, pool size) (rmm pool_memory_resource's
  size_to_grow): 64 MiB requests reserve 64 + 64 + 128 + 256 MiB in 4 cudaMalloc calls;
- with a maximum it grows by max(request, remaining / 2), and refuses when the request is
  more than what remains;
- a refused cudaMalloc makes it try half as much, down to the request (try_to_expand);
- arena takes half the device's free memory at its making; fixed-size takes 128 blocks of
  1 MiB at a time and refuses what is larger than a block; cuda calls cudaMalloc per request;
- limiting_resource_adaptor refuses what would pass its limit, before the resource below.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hipmem
from hipmem.replay.engine.options import ReplayOptions
from hipmem.replay.engine.program import OP_ALLOCATE, build_program
from hipmem.replay.engine.report import ReplayReport
from hipmem.replay.logs.events import AllocationLog
from tests.cli_run import hipmem as run_hipmem
from tests.cli_run import hipmem_process

MiB = 1 << 20
REPO = Path(__file__).resolve().parents[3]
RELEASES = ("25.4", "24.12")
REAL_LOGS = [
    *sorted((REPO / "tests" / "data" / "real").glob("*.csv.gz")),
    REPO / "samples" / "serve-first-2000.csv.gz",
]


@pytest.fixture(scope="module")
def logs(rmm_releases: object) -> dict[str, AllocationLog]:
    return {path.name: hipmem.load_log(str(path)) for path in REAL_LOGS}


def _csv(tmp_path: Path, rows: list[tuple[str, int, int, int]], name: str = "t.csv") -> Path:
    lines = ["Thread,Time,Action,Pointer,Size,Stream"]
    for i, (action, pointer, size, stream) in enumerate(rows):
        lines.append(f"1,08:00:00.{i + 1:06d},{action},{pointer:#x},{size},{stream}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _allocations(count: int, size: int, base: int = 0x10000) -> list[tuple[str, int, int, int]]:
    return [("allocate", base + i * 0x1000, size, 0) for i in range(count)]


def _replay(log: AllocationLog, spec: str, **options: Any) -> ReplayReport:
    return hipmem.replay_log(
        log, hipmem.parse_spec(spec), ReplayOptions(backend="virtual", **options)
    )


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(
    ("count", "spec", "device_mib", "reserved_mib", "refused", "upstream_calls"),
    [
        (5, "pool", None, 64 + 64 + 128 + 256, 0, 4),  # grows by max(request, pool size)
        (8, "pool", None, 512, 0, 4),  # the 512 MiB hold 8 requests: no 5th call
        (9, "pool", 768, 768, 0, 5),  # asked 512 MiB more, refused, took half: 256
        # maximum 320: +160 (max(64, 320/2)), +80, +64, then 16 MiB remain for a 64 MiB request
        (5, "pool:maximum=320MiB", None, 160 + 80 + 64, 1, 3),
        (5, "pool:limit=256MiB", None, 256, 1, 3),  # the adaptor refuses the 5th request
        (5, "arena", 8192, 4096, 0, 1),  # half the free memory, at its making
        (5, "cuda", None, 5 * 64, 0, 5),
    ],
)  # fmt: skip
def test_growth_follows_rmm_rules(
    rmm_releases, tmp_path, release, count, spec, device_mib, reserved_mib, refused, upstream_calls
):
    log = hipmem.load_log(str(_csv(tmp_path, _allocations(count, 64 * MiB))))
    device = None if device_mib is None else device_mib * MiB
    report = _replay(log, spec, rmm_version=release, device_memory_bytes=device)
    assert report.peak_reserved_bytes == reserved_mib * MiB
    assert report.failure_count == refused
    assert report.pass_upstream_calls == (upstream_calls,)
    assert report.engine.startswith(f"RMM {release}.")
    assert report.device is not None and f"RMM {release}." in report.device


@pytest.mark.parametrize("release", RELEASES)
def test_fixed_takes_128_blocks_and_refuses_larger(rmm_releases, tmp_path, release):
    rows = _allocations(200, 512 * 1024) + _allocations(3, 2 * MiB, base=0x900000)
    log = hipmem.load_log(str(_csv(tmp_path, rows)))
    report = _replay(log, "fixed", rmm_version=release)
    assert report.peak_reserved_bytes == 2 * 128 * MiB  # 200 blocks: two takes of 128
    assert report.failure_count == 3  # 2 MiB is more than a 1 MiB block
    assert report.pass_upstream_calls == (2,)


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.name)
def test_every_committed_log_through_every_resource(logs, path):
    log = logs[path.name]
    program = build_program(log)
    sizes = program.size_bytes[program.op == OP_ALLOCATE]
    device = ReplayOptions().virtual_device()
    reports = {spec: _replay(log, spec) for spec in
               ("pool", "arena", "binning", "fixed", "cuda")}  # fmt: skip
    requested = program.peak_requested_bytes
    # cuda: one cudaMalloc per request, so what it took is what the log held
    assert reports["cuda"].peak_reserved_bytes == requested
    assert reports["cuda"].pass_upstream_calls == (int(np.count_nonzero(sizes)),)
    # arena: half the device's free memory, once; the log fits in it
    assert reports["arena"].peak_reserved_bytes == device.memory_bytes // 2
    assert reports["arena"].pass_upstream_calls == (1,)
    # fixed: every request larger than its 1 MiB block is refused, and only those
    assert reports["fixed"].failure_count == int(np.count_nonzero(sizes > MiB))
    assert (reports["fixed"].peak_reserved_bytes or 0) % (128 * MiB) == 0
    for spec in ("pool", "arena", "binning", "cuda"):
        assert reports[spec].failure_count == 0, spec
        assert (reports[spec].peak_reserved_bytes or 0) >= requested, spec
        assert reports[spec].stream_count == len(program.streams)
    # pool: each growth at least doubles it, so the last call took at least half of it
    assert (reports["pool"].peak_reserved_bytes or 0) < 2 * requested + max(sizes)


def test_releases_side_by_side_name_their_version(rmm_releases):
    done = _hipmem("replay", str(REAL_LOGS[-1]), "-r", "pool", "--rmm", "24.12,25.4", "--json")
    assert done.returncode == 0, done.stderr
    resources = json.loads(done.stdout)["resources"]
    assert [r["resource"] for r in resources] == ["pool (RMM 24.12.1)", "pool (RMM 25.4.0)"]
    assert all(r["backend"] == "virtual" for r in resources)


def test_find_capacity_on_the_virtual_gpu(rmm_releases, tmp_path):
    # 5 requests of 64 MiB: a pool of maximum M holds them when the growth steps
    # max(64, remaining / 2) leave no 64 MiB request unserved; the search finds M exactly.
    log = hipmem.load_log(str(_csv(tmp_path, _allocations(5, 64 * MiB))))
    found = hipmem.find_capacity(log, hipmem.parse_spec("pool"),
                                 ReplayOptions(backend="virtual"), confirm_runs=0)  # fmt: skip
    capacity = found.capacity_bytes
    assert _pool_holds(capacity, 5, 64 * MiB) and not _pool_holds(capacity - MiB, 5, 64 * MiB)


def _pool_holds(maximum: int, count: int, size: int) -> bool:
    """RMM's pool growth with a maximum (size_to_grow, 256-byte aligned), for equal requests
    that are never freed: each chunk serves whole requests only."""
    pool, free_chunks = 0, list[int]()
    for _ in range(count):
        fit = next((i for i, free in enumerate(free_chunks) if free >= size), None)
        if fit is not None:
            free_chunks[fit] -= size
            continue
        remaining = maximum - pool
        if size > remaining:
            return False
        grow = max(size, remaining // 2 // 256 * 256)
        pool += grow
        free_chunks.append(grow - size)
    return True


# ---- bad input: one line each, with the way out --------------------------------------------


def _hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, cwd=REPO, **{"COLUMNS": "200", **env})


def _one_line(done: subprocess.CompletedProcess[str], code: int, start: str) -> None:
    assert done.returncode == code, done.stderr
    assert done.stderr.startswith(start), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def _cache_with(tmp_path: Path, rmm_releases: dict[str, object], version: str) -> Path:
    """A cache of its own holding one fetched release (copied), and no build."""
    cache = tmp_path / "cache"
    shutil.copytree(rmm_releases[version].root, cache / "rmm" / version)  # type: ignore[attr-defined]
    return cache


SERVE = str(REAL_LOGS[-1])


def test_async_on_the_virtual_gpu_is_one_line():
    done = _hipmem("replay", SERVE, "-r", "async", "--backend", "virtual")
    _one_line(done, 2, "Error: --backend 'virtual': 'async': async is the CUDA driver's own pool")


def test_release_not_fetched_is_one_line(tmp_path):
    done = _hipmem("replay", SERVE, "-r", "pool", "--backend", "virtual", "--rmm", "24.12",
                   HIPMEM_CACHE_DIR=str(tmp_path))  # fmt: skip
    _one_line(done, 1, "Error: RMM 24.12 is not fetched (fetched: none); run `hipmem rmm fetch")


def test_release_past_25_4_is_refused_before_any_download(tmp_path):
    done = _hipmem("rmm", "fetch", "--rmm", "25.6", HIPMEM_CACHE_DIR=str(tmp_path))
    _one_line(done, 2, "Error: --rmm '25.6': from 25.6 on, librmm-cu12 compiles its helpers")
    assert not (tmp_path / "rmm").exists()


def test_damaged_fetch_is_one_line(tmp_path, rmm_releases):
    cache = _cache_with(tmp_path, rmm_releases, "25.4.0")
    tree = cache / "rmm" / "25.4.0" / "rmm-tree.zip"
    tree.write_bytes(tree.read_bytes()[:1000])
    done = _hipmem("replay", SERVE, "-r", "pool", "--backend", "virtual",
                   HIPMEM_CACHE_DIR=str(cache))  # fmt: skip
    _one_line(done, 1, "Error: the fetched RMM 25.4.0 in ")
    assert "damaged (rmm-tree.zip truncated); run `hipmem rmm fetch --rmm 25.4.0`" in done.stderr


def test_no_compiler_is_one_line(tmp_path, rmm_releases):
    cache = _cache_with(tmp_path, rmm_releases, "25.4.0")
    done = _hipmem("replay", SERVE, "-r", "pool", "--backend", "virtual",
                   HIPMEM_CACHE_DIR=str(cache), CXX=str(tmp_path / "no-g++"))  # fmt: skip
    # The first build is said before it starts; then the one error line.
    error = done.stderr[done.stderr.index("Error: ") :]
    assert done.returncode == 1 and error.count("\n") == 1, done.stderr
    assert error.startswith(
        "Error: RMM's resources are compiled on first use and need a C compiler"
    )
    assert f"$CXX ({tmp_path / 'no-g++'}) is not one; apt install g++" in done.stderr


def test_damaged_build_is_said_and_built_again(tmp_path, rmm_releases):
    cache = _cache_with(tmp_path, rmm_releases, "25.4.0")
    args = ("replay", SERVE, "-r", "cuda", "--backend", "virtual", "--json")
    # Processes of their own: a build is checked once per process.
    first = hipmem_process(*args, cwd=REPO, COLUMNS="200", HIPMEM_CACHE_DIR=str(cache))
    assert first.returncode == 0, first.stderr
    (driver,) = (cache / "rmm-build").glob("*/rmm_replay")
    driver.write_bytes(driver.read_bytes()[:4096])
    again = hipmem_process(*args, cwd=REPO, COLUMNS="200", HIPMEM_CACHE_DIR=str(cache))
    assert again.returncode == 0, again.stderr
    assert "is damaged (rmm_replay truncated); building it again" in again.stderr

    figures = [{k: r[k] for k in ("peak_reserved_bytes", "failure_count")}
               for r in (json.loads(first.stdout)["resources"][0],
                         json.loads(again.stdout)["resources"][0])]  # fmt: skip
    assert figures[0] == figures[1]


def test_device_too_small_for_the_first_allocation_is_one_line(rmm_releases):
    done = _hipmem("replay", SERVE, "-r", "pool", "--backend", "virtual", "--device-memory",
                   "4MiB")  # fmt: skip
    _one_line(done, 1, "Error: pool: a virtual ")
    assert "too small for the log's first allocation" in done.stderr
    assert "give a larger --device or --device-memory" in done.stderr


@pytest.mark.parametrize("spec", ["pool", "arena"])
def test_fits_are_each_devices_own_replay(logs, spec):
    from hipmem.replay.virtual.devices import custom_device, find_device

    log = logs[REAL_LOGS[-1].name]
    devices = [
        find_device("MI300X"),
        find_device("H100"),
        custom_device(600 * MiB),
        custom_device(4 * MiB),
    ]
    fits = hipmem.fits_table(log, hipmem.parse_spec(spec), ReplayOptions(backend="virtual"),
                       devices=devices)  # fmt: skip
    for fit, device in zip(fits[:3], devices, strict=False):
        alone = _replay(log, spec, device_memory_bytes=device.memory_bytes)
        assert (fit.peak_reserved_bytes, fit.refused_count) == (
            alone.peak_reserved_bytes,
            alone.failure_count,
        ), device.name
        assert fit.fits == (alone.failure_count == 0)
    assert not fits[2].fits  # 600 MiB: less than the log's 764 MiB peak
    assert not fits[3].fits  # 4 MiB: not even the first 16 MiB request


@pytest.mark.parametrize("release", RELEASES)
def test_arena_fits_by_the_rule_are_each_devices_own_replay(logs, release, monkeypatch):
    """The fits table answers an arena on a device from the largest device's replay where
    replay/capacity/arena_rule.py says it replays alike (its arena at least the reach + 1 MiB),
    and replays the others: on every committed log, at the rule's edge and on either side of
    it, each answer is the device's own replay's."""
    from hipmem.replay.capacity.rmm_probes import RmmProbes
    from hipmem.replay.virtual.devices import custom_device, find_device

    replayed: list[tuple[int, Any]] = []
    real_replay = RmmProbes.replay

    def replay(self: RmmProbes, gpu: Any, device: Any, **kw: Any) -> Any:
        run = real_replay(self, gpu, device, **kw)
        replayed.append((device.memory_bytes, run))
        return run

    monkeypatch.setattr(RmmProbes, "replay", replay)
    options = ReplayOptions(backend="virtual", rmm_version=release)
    largest = find_device("MI355X")
    for name, log in logs.items():
        replayed.clear()
        hipmem.fits_table(log, hipmem.parse_spec("arena"), options, devices=[largest])
        ((_, base),) = replayed
        reach = base.arena_extent_bytes
        assert base.peak_reserved_bytes == largest.memory_bytes // 2 and reach > 0, name
        # arenas (half the memory): at the edge, 256 bytes below, at the reach, half of it
        arenas = [reach + MiB, reach + MiB - 256, reach, reach // 2 // 256 * 256, 24 * 1024 * MiB]
        devices = [largest, *(custom_device(2 * a) for a in arenas), find_device("MI210")]
        replayed.clear()
        fits = hipmem.fits_table(log, hipmem.parse_spec("arena"), options, devices=devices)
        by_rule = {d.memory_bytes for d in devices} - {size for size, _ in replayed}
        mi210 = find_device("MI210").memory_bytes
        assert by_rule == {2 * (reach + MiB), 2 * 24 * 1024 * MiB, mi210}
        for fit, device in zip(fits, devices, strict=True):
            alone = _replay(log, "arena", device_memory_bytes=device.memory_bytes,
                            rmm_version=release)  # fmt: skip
            assert (fit.fits, fit.peak_reserved_bytes, fit.refused_count) == (
                alone.failure_count == 0,
                alone.peak_reserved_bytes,
                alone.failure_count,
            ), (name, device.name)


def test_arena_of_a_given_size_fits_alike_where_the_device_holds_it(logs):
    from hipmem.replay.virtual.devices import custom_device, find_device

    log = logs[REAL_LOGS[-1].name]
    devices = [find_device("MI355X"), custom_device(1536 * MiB), custom_device(512 * MiB)]
    fits = hipmem.fits_table(log, hipmem.parse_spec("arena:size=1GiB"),
                       ReplayOptions(backend="virtual"), devices=devices)  # fmt: skip
    for fit, device in zip(fits[:2], devices, strict=False):
        alone = _replay(log, "arena:size=1GiB", device_memory_bytes=device.memory_bytes)
        assert (fit.fits, fit.peak_reserved_bytes, fit.refused_count) == (
            True,
            1024 * MiB,
            alone.failure_count,
        ), device.name
    assert not fits[2].fits and fits[2].peak_reserved_bytes == 0  # no room for the arena


def test_fetch_repairs_a_damaged_release(tmp_path, rmm_releases):
    cache = _cache_with(tmp_path, rmm_releases, "25.4.0")
    tree = cache / "rmm" / "25.4.0" / "rmm-tree.zip"
    with zipfile.ZipFile(tree) as archive:
        members = {info.filename: info.CRC for info in archive.infolist()}
    tree.write_bytes(tree.read_bytes()[:1000])
    done = _hipmem("rmm", "fetch", "--rmm", "25.4.0", HIPMEM_CACHE_DIR=str(cache))
    assert done.returncode == 0, done.stderr
    assert "is damaged (rmm-tree.zip truncated)" in done.stderr
    with zipfile.ZipFile(tree) as archive:  # the same members of the wheels pip checked
        assert {info.filename: info.CRC for info in archive.infolist()} == members
    again = _hipmem("replay", SERVE, "-r", "pool", "--backend", "virtual",
                    HIPMEM_CACHE_DIR=str(cache))  # fmt: skip
    assert again.returncode == 0, again.stderr


def test_fleet_replays_rmm_on_the_virtual_gpu(rmm_releases):
    pytest.importorskip("distributed")
    done = _hipmem("fleet", SERVE, "-r", "pool", "--rmm", "24.12", "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)["records"]
    alone = _replay(hipmem.load_log(SERVE), "pool", rmm_version="24.12")
    assert record["peak_reserved_bytes"] == alone.peak_reserved_bytes
    assert record["settings"].endswith(",rmm=24.12")


# -- the H200's own figures ----------------------------------------------------------------------
H200_FIGURES = json.loads((REPO / "tests" / "data" / "rmm-h200.json").read_text())["rows"]


def test_every_committed_log_through_every_resource_gives_the_h200s_figures(
    rmm_releases: object,
) -> None:
    """Each committed RMM log and the sample, through each resource and both releases, on a
    virtual GPU given the free memory the H200 had: the peak reserved bytes and the refused
    allocations the H200 gave with the same RMM code (tests/data/rmm-h200.json)."""
    logs = {row["log"]: hipmem.load_log(str(REPO / row["log"])) for row in H200_FIGURES}
    differ = []
    for row in H200_FIGURES:
        rmm = ".".join(row["rmm"].split(".")[:2])
        report = _replay(logs[row["log"]], row["resource"], rmm_version=rmm,
                         device_memory_bytes=row["device_bytes"], time_calls=False)  # fmt: skip
        got = (report.peak_reserved_bytes, report.failure_count)
        if got != (row["peak_reserved_bytes"], row["refused"]):
            differ.append((row["log"], row["rmm"], row["resource"], got))
    assert len(H200_FIGURES) == 48 and not differ
