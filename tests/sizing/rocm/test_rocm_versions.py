"""Answers keyed by ROCm release, from the real libraries of each, and the rules that choose
which release answers (`--rocm`, `HIPMEM_ROCM`, the local install, the newest in the cache)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from hipmem.sizing.errors import SizingUsageError, UnknownRoutine
from hipmem.sizing.recommend import version_warnings
from hipmem.sizing.rocm.catalog import load_catalog
from hipmem.sizing.rocm.locator import MixedReleases, locate
from hipmem.sizing.session import SizingSession, size_calls
from tests.cli_run import hipmem as run_hipmem
from tests.conftest import rocm_release

GEMM_F16_HPA = (
    "rocblas_gemm_ex:m=256,n=256,k=65536,a_type=f16_r,b_type=f16_r,c_type=f16_r,"
    "d_type=f16_r,compute_type=f32_r"
)

# (release, device, call) -> bytes, as each release's real libraries answer.
KNOWN_ANSWERS = {
    ("6.4", "MI210", "rocsolver_dgetrs:n=1024,nrhs=1"): 64,
    ("7.2", "MI210", "rocsolver_dgetrs:n=1024,nrhs=1"): 1_312_000,
    ("6.4", "MI210", "rocsolver_dgeqrf:m=4096,n=4096"): 2_097_728,
    ("7.2", "MI210", "rocsolver_dgeqrf:m=4096,n=4096"): 6_291_520,
    ("6.4", "MI210", "rocsolver_dgetrf:m=1024,n=1024"): 4_732_160,
    ("7.2", "MI210", "rocsolver_dgetrf:m=1024,n=1024"): 4_732_160,
    ("7.2", "MI300X", GEMM_F16_HPA): 524_288,
}
# What a fresh rocBLAS-managed handle allocates, per release and arch.
HANDLE_DEFAULT_BYTES = {
    ("6.4", "MI210"): 32 << 20,
    ("7.2", "MI210"): 32 << 20,
    ("7.2", "MI300X"): 128 << 20,
}
LIBRARY_VERSIONS = {
    "6.4": {"rocblas": "4.4.1", "rocsolver": "3.28.2"},
    "7.2": {"rocblas": "5.2.0", "rocsolver": "3.32.0"},
}


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hipmem(*args, **env)


@pytest.mark.parametrize(("release", "device", "call"), list(KNOWN_ANSWERS))
def test_known_answers_per_release(
    rocm_roots: dict[str, Path], release: str, device: str, call: str
) -> None:
    rocm_release(rocm_roots, release)
    result = size_calls([call], device, rocm=release)
    assert result.library.rocm == release
    assert result.library.versions == LIBRARY_VERSIONS[release]
    assert result.calls[0].bytes == KNOWN_ANSWERS[(release, device, call)]


@pytest.mark.parametrize(("release", "device"), list(HANDLE_DEFAULT_BYTES))
def test_default_handle_per_release_and_arch(
    rocm_roots: dict[str, Path], release: str, device: str
) -> None:
    rocm_release(rocm_roots, release)
    with SizingSession(device, rocm=release) as session:
        info = session.library_info()
    assert info.handle_default_bytes == HANDLE_DEFAULT_BYTES[(release, device)]
    assert info.optional_symbols["rocblas_set_device_memory_size"] is True


def test_done_when_gfx942_f16_gemm_ex_answers_on_72(rocm72: Path) -> None:
    done = hipmem("size", "--rocm", "7.2", "--device", "MI300X", GEMM_F16_HPA)
    assert done.returncode == 0, done.stderr
    assert "524,288" in done.stdout
    assert "ROCm 7.2: rocblas 5.2.0, rocsolver 3.32.0 from offline cache" in done.stdout


def test_gfx942_f16_gemm_ex_aborts_on_64_and_the_other_calls_are_answered(rocm64: Path) -> None:
    # Debian's 6.4 build has no gfx942 gemm data: rocBLAS aborts the worker on this call.
    result = size_calls([GEMM_F16_HPA, "dgetrs:n=1024,nrhs=1"], "MI300X", rocm="6.4")
    gemm, getrs = result.calls
    assert gemm.status == "crashed" and gemm.bytes is None
    assert "aborted (SIGABRT)" in str(gemm.error) and "gfx942" in str(gemm.error)
    assert getrs.bytes == 64


def test_done_when_side_by_side(rocm64: Path, rocm72: Path) -> None:
    done = hipmem("size", "--rocm", "6.4,7.2", "--device", "MI210",
                  "rocsolver_dgetrs:n=1024,nrhs=1", COLUMNS="80")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # boxed when it fits, else the call on a line of its own under its row, whole
    at = next(i for i, line in enumerate(lines) if "rocsolver_dgetrs" in line)
    row = lines[at] if "1,312,000" in lines[at] else lines[at - 1]
    cells = [cell.strip() for cell in re.split(r"│|\s{2,}", row) if cell.strip()]
    assert "rocsolver_dgetrs:n=1024,nrhs=1" in lines[at].split()  # never folded, even on 80
    assert cells[:4] == ["64", "1,312,000", "+1,311,936 (+1.3 MiB)", "1"]
    assert all(len(line) <= 80 for line in lines)
    assert "ROCm 6.4: rocblas 4.4.1, rocsolver 3.28.2" in done.stdout
    assert "ROCm 7.2: rocblas 5.2.0, rocsolver 3.32.0" in done.stdout


def test_side_by_side_json_gives_every_release(rocm64: Path, rocm72: Path) -> None:
    calls = ["dgetrf:m=1024,n=1024", "dgetrs:n=1024,nrhs=1", "dgetrs:n=1024,nrhs=1"]
    done = hipmem("size", "--rocm", "6.4,7.2", "--device", "MI210", "--json", *calls)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["rocm"] == ["6.4", "7.2"]
    assert payload["session_bytes"] == {"6.4": 4_732_160, "7.2": 4_732_160}
    getrs = payload["calls"][1]
    assert getrs["bytes"] == {"6.4": 64, "7.2": 1_312_000}
    assert getrs["difference_bytes"] == 1_311_936 and getrs["count"] == 2
    assert [v["library"]["rocm"] for v in payload["versions"]] == ["6.4", "7.2"]
    assert payload["versions"][1]["library"]["versions"] == LIBRARY_VERSIONS["7.2"]


def test_the_release_is_named_in_json_and_chosen_by_hipmem_rocm(rocm64: Path) -> None:
    done = hipmem("size", "-d", "MI210", "--json", "dgetrs:n=1024,nrhs=1", HIPMEM_ROCM="6.4")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["library"]["rocm"] == "6.4" and payload["session_bytes"] == 64


def test_without_a_choice_the_newest_cached_release_answers(rocm64: Path, rocm72: Path) -> None:
    found = locate()
    assert found.rocm == "7.2" and found.why == "the newest release in the cache"
    assert found.other_cached == ("6.4",)


def test_an_unavailable_release_is_one_usage_line_naming_what_is_there(rocm: Path) -> None:
    done = hipmem("size", "--rocm", "7.1", "-d", "MI210", "dgetrf:m=8,n=8")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: --rocm '7.1': no ROCm 7.1 here (the cache holds ")
    assert line.endswith("hipmem can fetch ROCm 6.4, 7.2 (`hipmem rocm fetch --rocm X`)")
    env = hipmem("size", "-d", "MI210", "dgetrf:m=8,n=8", HIPMEM_ROCM="seven")
    assert env.returncode == 2
    assert env.stderr.strip() == "Error: HIPMEM_ROCM='seven': expected a ROCm release such as 7.2"
    unavailable = hipmem("size", "-d", "MI210", "dgetrf:m=8,n=8", HIPMEM_ROCM="7.1")
    assert unavailable.stderr.startswith("Error: HIPMEM_ROCM='7.1': no ROCm 7.1 here")
    with pytest.raises(SizingUsageError) as raised:  # the library names its parameter
        locate(None, "7.1")
    assert str(raised.value).startswith("rocm='7.1': no ROCm 7.1 here")


def test_recommend_takes_one_release_and_names_it(rocm64: Path, rocm72: Path) -> None:
    two = hipmem("recommend", "--rocm", "6.4,7.2", "-d", "MI210", "dgetrs:n=1024,nrhs=1")
    assert two.returncode == 2
    assert "recommend takes one release" in two.stderr
    done = hipmem("recommend", "--rocm", "7.2", "-d", "MI210", "dgetrs:n=1024,nrhs=1")
    assert done.returncode == 0, done.stderr
    # Where the libraries came from, as the cache recorded it (a tree fetched before hipmem
    # recorded how says just "offline cache").
    head, *rest = done.stdout.splitlines()
    assert re.fullmatch(
        r"# for ROCm 7\.2 \(rocblas 5\.2\.0, rocsolver 3\.32\.0\) from offline cache"
        r"( \((hipmem rocm fetch|fetched on first use)\))?, virtual MI210 \(gfx90a\)",
        head,
    ), head
    assert rest == ["export ROCBLAS_DEVICE_MEMORY_SIZE=1312000"]
    assert "none was chosen" not in done.stderr
    dotenv = hipmem("recommend", "--rocm", "6.4", "--format", "dotenv", "-d", "MI210",
                    "dgetrs:n=1024,nrhs=1")  # fmt: skip
    assert dotenv.stdout.splitlines()[0].startswith("# for ROCm 6.4 (rocblas 4.4.1")
    assert dotenv.stdout.splitlines()[1] == "ROCBLAS_DEVICE_MEMORY_SIZE=64"
    as_json = hipmem("recommend", "--rocm", "6.4", "--format", "json", "-d", "MI210",
                     "dgetrs:n=1024,nrhs=1")  # fmt: skip
    assert json.loads(as_json.stdout)["rocm"] == "6.4"


def test_recommend_and_check_warn_when_several_releases_are_cached_and_none_chosen(
    rocm64: Path, rocm72: Path
) -> None:
    for command in (["recommend"], ["check", "--value", "67108864"]):
        done = hipmem(*command, "-d", "MI210", "dgetrs:n=1024,nrhs=1")
        assert done.returncode == 0, done.stderr
        assert (
            "Warning: the cache holds ROCm 6.4, 7.2 and none was chosen: this answer is for "
            "ROCm 7.2; pin the release you deploy with --rocm or HIPMEM_ROCM"
        ) in done.stderr


def test_check_answers_with_the_release_asked_for(rocm64: Path, rocm72: Path) -> None:
    # 1 KiB covers dgetrs on 6.4 (64 bytes) but not on 7.2 (1,312,000): the upgrade breaks it.
    old = hipmem("check", "--rocm", "6.4", "--value", "1024", "-d", "MI210", "dgetrs:n=1024,nrhs=1")
    new = hipmem("check", "--rocm", "7.2", "--value", "1024", "-d", "MI210", "dgetrs:n=1024,nrhs=1")
    assert (old.returncode, new.returncode) == (0, 1)
    assert "sized with ROCm 6.4 (rocblas 4.4.1, rocsolver 3.28.2)" in old.stdout
    checked = hipmem(
        "check", "--rocm", "7.2", "--json", "--value", "1024", "-d", "MI210",
        "dgetrs:n=1024,nrhs=1",
    )  # fmt: skip
    payload = json.loads(checked.stdout)
    assert payload["library"]["rocm"] == "7.2"


def _mixed_dir(tmp_path: Path, rocblas_from: Path, rocsolver_from: Path) -> Path:
    lib = "usr/lib/x86_64-linux-gnu"
    mixed = tmp_path / "lib"
    mixed.mkdir()
    for root, stem in ((rocblas_from, "librocblas"), (rocsolver_from, "librocsolver")):
        for path in (root / lib).glob(f"{stem}.so*"):
            (mixed / path.name).symlink_to(path)
    return mixed


def test_a_directory_mixing_releases_is_refused_naming_both(
    rocm64: Path, rocm72: Path, tmp_path: Path
) -> None:
    mixed = _mixed_dir(tmp_path, rocm72, rocm64)
    with pytest.raises(MixedReleases) as raised:
        locate(mixed)
    assert str(raised.value) == (
        f"{mixed}: librocsolver.so.0 was built for librocblas.so.4 but the rocBLAS here is "
        "librocblas.so.5 (rocBLAS 5.2, ROCm 7.2); one release per directory"
    )
    done = hipmem("size", "--rocm-dir", str(mixed), "-d", "MI210", "dgetrf:m=8,n=8")
    assert done.returncode == 2 and "one release per directory" in done.stderr


def test_a_directory_with_two_rocblas_is_refused(
    rocm64: Path, rocm72: Path, tmp_path: Path
) -> None:
    mixed = _mixed_dir(tmp_path, rocm72, rocm72)
    (mixed / "librocblas.so.4").symlink_to(rocm64 / "usr/lib/x86_64-linux-gnu/librocblas.so.4")
    with pytest.raises(MixedReleases, match=r"holds librocblas.so.4 \(rocBLAS 4.4, ROCm 6.4\) "
                       r"and librocblas.so.5 \(rocBLAS 5.2, ROCm 7.2\)"):  # fmt: skip
        locate(mixed)


def test_a_rocm_dir_without_rocblas_is_an_error(rocm: Path, tmp_path: Path) -> None:
    done = hipmem("size", "--rocm-dir", str(tmp_path), "-d", "MI210", "dgetrf:m=8,n=8")
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: --rocm-dir '{tmp_path}': no librocblas there"
    env = hipmem("size", "-d", "MI210", "dgetrf:m=8,n=8", HIPMEM_ROCM_LIBDIR=str(tmp_path))
    assert env.stderr.strip() == f"Error: HIPMEM_ROCM_LIBDIR='{tmp_path}': no librocblas there"


def test_a_local_install_of_the_release_asked_for_answers_before_the_cache(
    rocm64: Path, rocm72: Path
) -> None:
    lib64 = rocm64 / "usr/lib/x86_64-linux-gnu"
    found = locate(lib64, "6.4")
    assert found.found_in == "--rocm-dir" and found.rocm == "6.4"
    # A local install of another release is passed over for the cache's copy.
    other = locate(lib64, "7.2")
    assert other.found_in.startswith("offline cache") and other.rocm == "7.2"
    assert locate(lib64).rocm == "6.4"  # no release asked for: the local install


@pytest.mark.parametrize(
    ("version", "environ", "expected"),
    [
        ("4.4.1", {"ROCBLAS_STREAM_ORDER_ALLOC": "1"}, ["ROCBLAS_STREAM_ORDER_ALLOC is set: "
                                                        "rocBLAS 4.4.1 (ROCm 6.4)"]),
        ("5.2.0", {"ROCBLAS_STREAM_ORDER_ALLOC": "1"}, ["ROCBLAS_STREAM_ORDER_ALLOC is set: "
                                                        "rocBLAS 5.2.0 (ROCm 7.2)"]),
        ("5.2.0", {}, []),
        ("4.4.1", {"ROCBLAS_STREAM_ORDER_ALLOC": "0"}, []),
        ("5.1.0", {}, ["rocBLAS 5.1.0 (ROCm 7.1) allocates the workspace stream-ordered",
                       "rocBLAS 5.1.0 (ROCm 7.1) ships rocblas_set_device_memory_size"]),
        ("4.3.0", {"ROCBLAS_STREAM_ORDER_ALLOC": "1"}, []),
    ],
)  # fmt: skip
def test_memory_warnings_fire_only_for_the_versions_they_hold_for(
    version: str, environ: dict[str, str], expected: list[str]
) -> None:
    found = version_warnings(
        {"rocblas": version}, {"rocblas_set_device_memory_size": True}, environ
    )
    assert len(found) == len(expected)
    for warning, start in zip(found, expected, strict=True):
        assert warning.startswith(start)
        assert "rocBLAS 4.4-5.2" in warning or "ROCm 7.1.0 only" in warning


def test_a_missing_memory_api_is_named_with_its_version() -> None:
    symbols = {"rocblas_set_device_memory_size": False}
    (warning,) = version_warnings({"rocblas": "6.0.0"}, symbols, {})
    assert warning.startswith("rocBLAS 6.0.0 (ROCm 8.0) has no rocblas_set_device_memory_size")
    assert "5.2 still exports it" in warning


def test_recommend_warns_of_stream_order_alloc_naming_the_release(rocm72: Path) -> None:
    done = hipmem("recommend", "--rocm", "7.2", "-d", "MI210", "dgetrs:n=1024,nrhs=1",
                  ROCBLAS_STREAM_ORDER_ALLOC="1")  # fmt: skip
    assert "Warning: ROCBLAS_STREAM_ORDER_ALLOC is set: rocBLAS 5.2.0 (ROCm 7.2)" in done.stderr


def test_each_release_has_its_own_catalog() -> None:
    assert load_catalog("6.4").versions == LIBRARY_VERSIONS["6.4"]
    assert load_catalog("7.2").versions == LIBRARY_VERSIONS["7.2"]
    # The headers differ: rocBLAS 5.2 no longer declares the f8_r/bf8_r data types of 4.4.1.
    old, new = (set(load_catalog(r).enums["rocblas_datatype"]) for r in ("6.4", "7.2"))
    assert old - new == {"f8_r", "bf8_r"} and new < old


def test_a_routine_one_release_lacks_names_the_releases_that_have_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hipmem.sizing.rocm import catalog as catalog_module

    # An older release without dgetrs: its catalog is 6.4's minus that routine.
    data = json.loads((catalog_module.DATA_DIR / "catalog-6.4.json").read_text())
    del data["routines"]["rocsolver_dgetrs"]
    (tmp_path / "catalog-6.3.json").write_text(json.dumps(data))
    for release in ("6.4", "7.2"):
        (tmp_path / f"catalog-{release}.json").symlink_to(
            catalog_module.DATA_DIR / f"catalog-{release}.json"
        )
    monkeypatch.setattr(catalog_module, "DATA_DIR", tmp_path)
    catalog_module.load_catalog.cache_clear()
    try:
        with pytest.raises(UnknownRoutine) as raised:
            catalog_module.load_catalog("6.3").lookup("rocsolver_dgetrs")
        assert str(raised.value) == (
            "'rocsolver_dgetrs' is not in ROCm 6.3; ROCm 6.4, 7.2 have it (--rocm 7.2)"
        )
    finally:
        catalog_module.load_catalog.cache_clear()


def test_devices_marks_gemm_data_per_release(rocm64: Path, rocm72: Path) -> None:
    done = hipmem("devices", "--json")
    gemm = json.loads(done.stdout)["gemm_data"]
    assert "gfx942" not in gemm["6.4"]["archs"] and "gfx942" in gemm["7.2"]["archs"]
    assert "gfx942" in gemm["7.2"]["fetched"]
    table = hipmem("devices").stdout
    row = next(line for line in table.splitlines() if "MI300X" in line)
    assert [cell.strip() for cell in row.split("│")[-3:-1]] == ["none", "fetched"]


def test_rocm_where_lists_every_release(rocm64: Path, rocm72: Path) -> None:
    done = hipmem("rocm", "where", "--json")
    releases = json.loads(done.stdout)["releases"]
    cached = [r for r in releases if r["found_in"].startswith("offline cache")]
    assert [r["rocm"] for r in cached] == ["6.4", "7.2"]
    assert [r["default"] for r in cached] == [False, True]
    assert cached[1]["hip_runtime"] == "libamdhip64.so.7"


def test_routines_lists_the_catalog_of_the_release_asked_for() -> None:
    done = hipmem("routines", "dgetrs", "--rocm", "6.4", "--json")
    assert done.returncode == 0, done.stderr
    assert {entry["rocm"] for entry in json.loads(done.stdout)} == {"6.4"}
    title = hipmem("routines", "dgetrs", "--rocm", "7.2").stdout.splitlines()[0]
    assert title.startswith("routines in ROCm 7.2 (rocblas 5.2.0, rocsolver 3.32.0)", 2)
    unknown = hipmem("routines", "--rocm", "7.1")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "Error: --rocm '7.1': hipmem has catalogs of ROCm 6.4, 7.2"
