"""hipBLASLt from a local ROCm install: `--rocm-dir` or `$ROCM_PATH` pointing at a tree laid
out as AMD's (`<rocm>/lib/libhipblaslt.so.1`, `<rocm>/lib/hipblaslt/library/`,
`<rocm>/include/hipblaslt/hipblaslt-version.h`). The tree is made here of the cache's real
files (ROCm 7.2 and hipBLASLt 7.2.4; the library file itself is copied, so that hipBLASLt finds
its solution data beside the copy), and the real library answers through it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hipmem.sizing.hipblaslt.locator import read_version
from hipmem.sizing.rocm.locator import CACHE_LABEL
from tests.cli_run import hipmem_process

LIB = "usr/lib/x86_64-linux-gnu"
GEMV = "hipblaslt_matmul:m=4096,n=1,k=14336,transA=T,a_type=bf16_r"
GEMV_MI210_BYTES = 7987200  # hipBLASLt 7.2.4 on gfx90a, 104 CUs (test_hipblaslt.KNOWN)
_LOCATIONS = ("HIPMEM_ROCM_LIBDIR", "ROCM_PATH", "ROCM_HOME", "HIPMEM_ROCM")
HEADER_VERSION = "1.2.2"  # what hipBLASLt 7.2.4's hipblaslt-version.h says (1.2.2)


@pytest.fixture(scope="session")
def roots(rocm72: Path, hipblaslt: dict[str, Path]) -> tuple[Path, Path]:
    """(the cached ROCm 7.2 root, the cached hipBLASLt 7.2.4 root)."""
    if "7.2.4" not in hipblaslt:
        pytest.skip("hipBLASLt 7.2.4 is not in the cache")
    return rocm72, hipblaslt["7.2.4"]


def amd_tree(
    where: Path,
    roots: tuple[Path, Path],
    *,
    archs: tuple[str, ...] = ("gfx90a",),
    hipblaslt: bool = True,
    header: bool = True,
    hipblaslt_from: Path | None = None,
) -> Path:
    """A ROCm install laid out as AMD's, of the cache's files; its root."""
    rocm, lt = roots
    lt = hipblaslt_from or lt
    (where / "lib").mkdir(parents=True)
    (where / "include").mkdir()
    for entry in (rocm / LIB).iterdir():
        (where / "lib" / entry.name).symlink_to(entry)
    for entry in (rocm / "usr/include").iterdir():
        (where / "include" / entry.name).symlink_to(entry)
    if not hipblaslt:
        return where
    real = Path(os.path.realpath(lt / LIB / "libhipblaslt.so.1"))
    shutil.copy(real, where / "lib" / real.name)
    if real.name != "libhipblaslt.so.1":
        (where / "lib" / "libhipblaslt.so.1").symlink_to(real.name)
    data = where / "lib/hipblaslt/library"
    data.mkdir(parents=True)
    for entry in (lt / LIB / "hipblaslt/library").iterdir():
        arch = entry.stem.rsplit("_", 1)[-1].removeprefix("Kernels.so-000-")
        if not arch.startswith("gfx") or arch in archs:
            (data / entry.name).symlink_to(entry)
    if header:
        (where / "include/hipblaslt").mkdir()
        for entry in (lt / "usr/include/hipblaslt").iterdir():
            (where / "include/hipblaslt" / entry.name).symlink_to(entry)
    return where


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI with no ROCm location from the developer's environment, plus `env`."""
    return hipmem_process(*args, unset=_LOCATIONS, timeout=300, **env)


def test_rocm_dir_install_answers_with_its_own_hipblaslt(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    tree = amd_tree(tmp_path / "rocm", roots)
    done = hipmem("size", "--rocm-dir", str(tree / "lib"), "--device", "MI210", "--json", GEMV)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)["hipblaslt"]
    assert payload["hipblaslt"] == HEADER_VERSION
    assert payload["hipblaslt_version_from"] == str(tree / "include/hipblaslt/hipblaslt-version.h")
    assert payload["hipblaslt_library"] == str(tree / "lib/libhipblaslt.so.1")
    assert payload["hipblaslt_found_in"] == "--rocm-dir"
    assert "hipblaslt_notice" not in payload
    (call,) = payload["calls"]
    assert call["bytes"] == GEMV_MI210_BYTES  # what the cached build answers for it
    text = hipmem("size", "--rocm-dir", str(tree / "lib"), "--device", "MI210", GEMV)
    assert text.returncode == 0, text.stderr
    assert f"{GEMV_MI210_BYTES:,}" in text.stdout
    assert (
        f"hipBLASLt {HEADER_VERSION} (version from {tree}/include/hipblaslt/hipblaslt-version.h) "
        f"from --rocm-dir ({tree}/lib)"
    ) in " ".join(text.stdout.split())  # prose wraps at 80 columns, piped too


def test_rocm_path_install_found_by_discovery(roots: tuple[Path, Path], tmp_path: Path) -> None:
    tree = amd_tree(tmp_path / "rocm", roots)
    done = hipmem("size", "--device", "MI210", "--json", GEMV, ROCM_PATH=str(tree))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)["hipblaslt"]
    assert payload["hipblaslt_found_in"] == "$ROCM_PATH/lib"
    assert payload["hipblaslt_library"] == str(tree / "lib/libhipblaslt.so.1")
    assert payload["calls"][0]["bytes"] == GEMV_MI210_BYTES


def test_the_library_reads_the_install_data_not_the_cache(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    """An install whose gfx90a data is only the index (the per-type files gone) is what the
    library reads: it fails there (the worker survives its crash and says so), while the
    cache's complete data would have answered. And a stray HIPBLASLT_TENSILE_LIBPATH pointing
    at that broken data does not leak into the worker (it would make the library read another
    build's data than the one hipmem checked and names)."""
    broken = amd_tree(tmp_path / "broken", roots)
    data = broken / "lib/hipblaslt/library"
    for entry in data.glob("TensileLibrary_*_gfx90a.dat"):
        if entry.name != "TensileLibrary_lazy_gfx90a.dat":
            entry.unlink()
    done = hipmem("size", "--rocm-dir", str(broken / "lib"), "--device", "MI210", "--json", GEMV)
    assert done.returncode == 1
    (call,) = json.loads(done.stdout)["hipblaslt"]["calls"]
    assert call["bytes"] is None and call["status"] in ("crashed", "no_algorithm")
    stray = hipmem(
        "size", "--rocm", "7.2", "--device", "MI210", "--json", GEMV,
        HIPBLASLT_TENSILE_LIBPATH=str(data),
    )  # fmt: skip
    assert stray.returncode == 0, stray.stderr
    assert json.loads(stray.stdout)["hipblaslt"]["calls"][0]["bytes"] == GEMV_MI210_BYTES


def test_an_arch_missing_from_the_install_names_it(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    tree = amd_tree(tmp_path / "rocm", roots, archs=("gfx90a",))
    done = hipmem(
        "size", "--rocm-dir", str(tree / "lib"), "--device", "gfx1100", GEMV,
        "rocsolver_dgetrf:m=1024,n=1024",
    )  # fmt: skip
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    missing = tree / "lib/hipblaslt/library/TensileLibrary_lazy_gfx1100.dat"
    assert (
        f"hipBLASLt {HEADER_VERSION} at --rocm-dir ({tree}/lib) has no solution data for "
        f"gfx1100 (missing {missing}); it is in Debian's hipBLASLt 7.1.1, 7.2.4"
    ) in errors[0]
    assert "dgetrf" in done.stdout  # the rocSOLVER call is still answered


def test_an_install_without_hipblaslt_falls_back_to_the_cache_saying_so(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    tree = amd_tree(tmp_path / "rocm", roots, hipblaslt=False)
    done = hipmem("size", "--rocm-dir", str(tree / "lib"), "--device", "MI210", "--json", GEMV)
    assert done.returncode == 0, done.stderr
    notice = (
        f"ROCm 7.2 at --rocm-dir ({tree}/lib) has no hipBLASLt (no libhipblaslt.so.* there): "
        "hipBLASLt calls are sized with Debian's hipBLASLt 7.2.4 from the cache"
    )
    assert [line for line in done.stderr.splitlines() if "hipBLASLt" in line] == [
        f"Warning: {notice}"
    ]
    payload = json.loads(done.stdout)["hipblaslt"]
    assert payload["hipblaslt"] == "7.2.4"
    assert payload["hipblaslt_found_in"].startswith(CACHE_LABEL)  # and how it came, if recorded
    assert payload["hipblaslt_notice"] == notice
    assert payload["calls"][0]["bytes"] == GEMV_MI210_BYTES
    empty = hipmem(
        "size", "--offline", "--rocm-dir", str(tree / "lib"), "--device", "MI210", GEMV,
        HIPMEM_CACHE_DIR=str(tmp_path / "empty-cache"),
    )  # fmt: skip
    assert empty.returncode == 1
    assert empty.stderr.strip() == (
        f"Error: ROCm 7.2 at --rocm-dir ({tree}/lib) has no hipBLASLt (no libhipblaslt.so.* "
        "there), and Debian's hipBLASLt 7.2.4 for it is not in the cache; --offline forbids "
        "downloading it: run `hipmem rocm fetch --rocm 7.2 --arch gfx90a`"
    ), empty.stderr


def test_version_unknown_is_said_not_guessed(roots: tuple[Path, Path], tmp_path: Path) -> None:
    """No header, no CMake file, a library named only `libhipblaslt.so.1`: it still answers,
    as `hipBLASLt (version unknown)`, and `--json` has null."""
    tree = amd_tree(tmp_path / "rocm", roots, header=False)
    real = os.path.realpath(tree / "lib/libhipblaslt.so.1")
    (tree / "lib/libhipblaslt.so.1").unlink()
    Path(real).rename(tree / "lib/libhipblaslt.so.1")
    done = hipmem("size", "--rocm-dir", str(tree / "lib"), "--device", "MI210", GEMV)
    assert done.returncode == 0, done.stderr
    assert "hipBLASLt (version unknown)" in done.stdout
    as_json = hipmem("size", "--rocm-dir", str(tree / "lib"), "-d", "MI210", "--json", GEMV)
    payload = json.loads(as_json.stdout)["hipblaslt"]
    assert payload["hipblaslt"] is None
    assert payload["calls"][0]["bytes"] == GEMV_MI210_BYTES


def test_version_read_from_cmake_then_file_name(tmp_path: Path) -> None:
    """AMD's installs carry the version in a CMake file and in the library's real name
    (`libhipblaslt.so.1.2.70200`); the header, when there, comes first."""
    lib = tmp_path / "rocm/lib"
    lib.mkdir(parents=True)
    (lib / "libhipblaslt.so.1.2.70200").write_bytes(b"")  # only its name is read
    (lib / "libhipblaslt.so.1").symlink_to("libhipblaslt.so.1.2.70200")
    library = lib / "libhipblaslt.so.1"
    assert read_version(library) == ("1.2.70200", f"the file name {lib}/libhipblaslt.so.1.2.70200")
    cmake = lib / "cmake/hipblaslt/hipblaslt-config-version.cmake"
    cmake.parent.mkdir(parents=True)
    cmake.write_text('set(PACKAGE_VERSION "1.2.0")\n')
    assert read_version(library) == ("1.2.0", str(cmake))
    header = tmp_path / "rocm/include/hipblaslt/hipblaslt-version.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        "#define HIPBLASLT_VERSION_MAJOR 1\n#define HIPBLASLT_VERSION_MINOR 2\n"
        "#define HIPBLASLT_VERSION_PATCH 1\n"
    )
    assert read_version(library) == ("1.2.1", str(header))


def test_hipblaslt_linking_another_hip_runtime_is_refused(
    roots: tuple[Path, Path], hipblaslt: dict[str, Path], tmp_path: Path
) -> None:
    """One worker loads rocBLAS and hipBLASLt: a 7.2 tree (HIP 7) holding hipBLASLt 7.1.1
    (HIP 6) is refused, naming both."""
    if "7.1.1" not in hipblaslt:
        pytest.skip("hipBLASLt 7.1.1 is not in the cache")
    tree = amd_tree(tmp_path / "rocm", roots, hipblaslt_from=hipblaslt["7.1.1"])
    done = hipmem("size", "--rocm-dir", str(tree / "lib"), "--device", "MI210", GEMV)
    assert done.returncode == 2
    assert (
        f"{tree}/lib: libhipblaslt.so.1 links libamdhip64.so.6 but the rocBLAS there links "
        "libamdhip64.so.7; one release per directory"
    ) in done.stderr


def test_from_python_with_a_rocm_dir(roots: tuple[Path, Path], tmp_path: Path) -> None:
    import hipmem

    tree = amd_tree(tmp_path / "rocm", roots)
    report = hipmem.size_matmul_specs([GEMV], "MI210", rocm_dir=str(tree / "lib"))
    assert (report.build.found_in, report.build.library) == (
        "--rocm-dir",
        tree / "lib/libhipblaslt.so.1",
    )
    assert (report.hipblaslt_version, report.results[0].bytes) == (HEADER_VERSION, GEMV_MI210_BYTES)


def test_rocm_where_lists_the_install_hipblaslt(roots: tuple[Path, Path], tmp_path: Path) -> None:
    with_it = amd_tree(tmp_path / "with", roots)
    without = amd_tree(tmp_path / "without", roots, hipblaslt=False)
    for tree, expected in ((with_it, str(with_it / "lib/libhipblaslt.so.1")), (without, None)):
        done = hipmem("rocm", "where", "--rocm-dir", str(tree / "lib"), "--json")
        assert done.returncode == 0, done.stderr
        first = json.loads(done.stdout)["releases"][0]
        assert (first["found_in"], first["hipblaslt"]) == ("--rocm-dir", expected)
    text = hipmem("rocm", "where", "--rocm-dir", str(with_it / "lib"))
    rows = [line.split() for line in text.stdout.splitlines()]
    # one row, or (a path too long for 80 columns) the path on the line under its name
    at = rows.index(next(row for row in rows if row[:1] == ["hipblaslt"]))
    assert [*rows[at], *rows[at + 1]][:2] == ["hipblaslt", f"{with_it}/lib/libhipblaslt.so.1"]
