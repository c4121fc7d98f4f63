"""Fetch on first use: `hipmem size` (and recommend, check) fetches the ROCm release, the
device's arch's gemm data or the hipBLASLt build it needs when the cache lacks it, saying so
in one line on stderr first; `--offline` / `HIPMEM_OFFLINE=1` refuse, naming the fetch.

Each runs the real `hipmem` in a subprocess on a cache of its own: an empty one, or one whose
tree links to the real cache's files (`_mirror_cache`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hipmem.sizing.rocm import apt
from hipmem.sizing.rocm import fetch as rocm_fetch
from hipmem.sizing.rocm.releases import find_release
from tests.cli_run import hipmem_process
from tests.conftest import cli_env
from tests.sizing.rocm.test_rocm_fetch import _mirror_cache
from tests.terminal import stderr_on_terminal, unwrapped

GEMM = "gemm_ex:m=64,n=64,k=4096,a_type=f16_r"  # reads the arch's gemm data


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return hipmem_process(*args, timeout=900, **env)


def bars_on_terminal(*args: str, **env: str) -> tuple[int, str, str]:
    """`hipmem ARGS` with stderr on a pseudo-terminal (where bars are drawn) and stdout
    piped: (exit code, stdout, what the terminal showed without colours)."""
    seen = stderr_on_terminal([sys.executable, "-m", "hipmem.cli.main", *args], columns=100,
                              env=cli_env(COLUMNS="100", **env))  # fmt: skip
    return seen.returncode, seen.stdout, seen.stderr


def sizes(stdout: str) -> list[int]:
    return [call["bytes"] for call in json.loads(stdout)["calls"]]


# ---- offline: one line naming the fetch, nothing downloaded --------------------------------


@pytest.mark.parametrize(
    ("offline", "said"), [(["--offline"], "--offline"), ([], "HIPMEM_OFFLINE=1")]
)
def test_offline_names_the_fetch_to_run_and_downloads_nothing(
    tmp_path: Path, offline: list[str], said: str
) -> None:
    cache = tmp_path / "cache"
    env = {"HIPMEM_CACHE_DIR": str(cache)} | ({} if offline else {"HIPMEM_OFFLINE": "1"})
    for command in ("size", "recommend", "check"):
        done = hipmem(command, *offline, "--rocm", "7.2", "-d", "MI300X", "--json", GEMM, **env)
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        assert done.stderr.splitlines() == [
            f"Error: ROCm 7.2 is not in the cache; {said} forbids downloading it: run "
            "`hipmem rocm fetch --rocm 7.2 --arch gfx942 --no-hipblaslt`"
        ]
    assert not (cache / "rocm" / "7.2").exists()


def test_offline_without_a_release_named_asks_for_the_newest(tmp_path: Path) -> None:
    done = hipmem("size", "-d", "gfx1100", "dgetrf:m=8,n=8", "--offline",
                  HIPMEM_CACHE_DIR=str(tmp_path / "cache"), HIPMEM_ROCM_LIBDIR="")  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: rocBLAS not found; tried ")
    assert line.endswith(
        "offline cache (empty); --offline forbids downloading ROCm 7.2: run "
        "`hipmem rocm fetch --rocm 7.2 --arch gfx1100 --no-hipblaslt`"
    )


def test_an_arch_the_release_has_no_gemm_data_for_is_not_asked_for(tmp_path: Path) -> None:
    done = hipmem("size", "--offline", "--rocm", "6.4", "-d", "MI300X", "dgetrf:m=8,n=8",
                  HIPMEM_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    assert done.stderr.splitlines() == [
        "Error: ROCm 6.4 is not in the cache; --offline forbids downloading it: run "
        "`hipmem rocm fetch --rocm 6.4 --no-hipblaslt`"
    ]


def test_hipmem_offline_takes_1_or_0(rocm72: Path) -> None:
    done = hipmem("size", "-d", "MI210", "dgetrf:m=8,n=8", HIPMEM_OFFLINE="sometimes")
    assert (done.returncode, done.stderr.splitlines()) == (
        2, ["Error: HIPMEM_OFFLINE='sometimes': expected 1 (never download) or 0"]
    )  # fmt: skip
    answered = hipmem("size", "--rocm", "7.2", "-d", "MI210", "dgetrf:m=8,n=8", HIPMEM_OFFLINE="0")
    assert answered.returncode == 0, answered.stderr


def test_offline_a_missing_hipblaslt_build_names_the_fetch(rocm72: Path, tmp_path: Path) -> None:
    cache = _mirror_cache(tmp_path, "7.2")  # ROCm 7.2 and no hipBLASLt
    matmul = "hipblaslt_matmul:m=4096,n=16,k=14336,a_type=bf16_r"
    done = hipmem("size", "--offline", "--rocm", "7.2", "-d", "MI210", matmul,
                  HIPMEM_CACHE_DIR=str(cache))  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "Error: hipBLASLt 7.2.4 is not in the cache; --offline forbids downloading it: run "
        "`hipmem rocm fetch --rocm 7.2 --arch gfx90a`"
    ]
    assert not (cache / "hipblaslt").exists()


# ---- online: fetched on first use ------------------------------------------------------


def _damage_roctx(cache: Path) -> tuple[Path, bytes]:
    """Truncate one small library of the mirrored 7.2 (its package is a small download)."""
    damaged = cache / "rocm" / "7.2" / "root" / rocm_fetch.LIB_SUBDIR / "libroctx64.so.4.1.0"
    content = damaged.read_bytes()
    damaged.unlink()
    damaged.write_bytes(content[: len(content) // 2])
    return damaged, content


def test_a_damaged_release_is_repaired_on_first_use_in_one_line(
    rocm72: Path, tmp_path: Path
) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    damaged, content = _damage_roctx(cache)
    archs = len(rocm_fetch.cached_archs("7.2") or [])  # every arch 7.2 has: counted, not named
    args = ("size", "--rocm", "7.2", "-d", "MI210", "--json", "dgetrs:n=1024,nrhs=1")
    done = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    assert done.returncode == 0, done.stderr
    line = unwrapped(done.stderr)  # piped: the line (wrapped at the width) and no bar
    assert re.fullmatch(
        r"the cached ROCm 7\.2 is damaged \(usr/lib/x86_64-linux-gnu/libroctx64\.so\.4\.1\.0 "
        r"changed since it was fetched\): downloading [0-9.]+ (B|KiB|MiB) "
        rf"\(ROCm 7\.2: 1 Debian package; gemm data for {archs} archs\) into "
        + re.escape(str(cache / "rocm" / "7.2")),
        line,
    ), line
    assert damaged.read_bytes() == content
    assert sizes(done.stdout) == sizes(hipmem(*args).stdout)  # as the real cache answers
    again = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    assert (again.returncode, again.stderr) == (0, "")  # nothing left to fetch: nothing said


def test_on_a_terminal_the_fetch_draws_a_bar_and_json_stays_clean(
    rocm72: Path, tmp_path: Path
) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    _damage_roctx(cache)
    code, stdout, shown = bars_on_terminal(
        "size", "--rocm", "7.2", "-d", "MI210", "--json", "dgetrs:n=1024,nrhs=1",
        HIPMEM_CACHE_DIR=str(cache),
    )  # fmt: skip
    assert code == 0, shown
    assert "fetching ROCm 7.2" in shown  # the bar's title
    said = " ".join(shown.split())  # the line, however the terminal wrapped it
    assert "the cached ROCm 7.2 is damaged (usr/lib/x86_64-linux-gnu/libroctx64.so.4.1.0" in said
    assert json.loads(stdout)["library"]["rocm"] == "7.2"


@pytest.mark.slow
def test_an_empty_cache_gets_the_release_with_the_devices_gemm_data_only(
    rocm72: Path, tmp_path: Path
) -> None:
    """The README's first command, small: ROCm 7.2 for a virtual MI300X into an empty
    cache (about 1 GB of downloads), and offline, no other arch's gemm data fetched."""
    cache = tmp_path / "cache"
    env = {"HIPMEM_CACHE_DIR": str(cache), "HIPMEM_ROCM_LIBDIR": ""}
    mi300x = ("size", "--rocm", "7.2", "-d", "MI300X", "--json", GEMM, "dgetrf:m=1024,n=1024")
    first = hipmem(*mi300x, **env)
    assert first.returncode == 0, first.stderr
    packages = len(find_release("7.2").packages)
    line = unwrapped(first.stderr)  # the one message, wrapped at the width
    assert re.fullmatch(
        r"ROCm 7\.2 is not in the cache: downloading [0-9.]+ (MiB|GiB) "
        rf"\(ROCm 7\.2: {packages} Debian packages; gemm data for gfx942 only\) into "
        + re.escape(str(cache / "rocm" / "7.2")),
        line,
    ), line
    assert sizes(first.stdout) == sizes(hipmem(*mi300x).stdout)  # as the full cache answers
    lib = cache / "rocm" / "7.2" / "root" / rocm_fetch.LIB_SUBDIR
    library = next(lib.glob("rocblas/*/library"))
    kept = {path.name.rsplit("_", 1)[-1] for path in library.glob("*_gfx*.dat")}
    assert kept == {"gfx942.dat"}
    assert not (cache / "hipblaslt").exists()  # no hipBLASLt call: no hipBLASLt

    again = hipmem(*mi300x, **env)
    assert (again.returncode, again.stderr) == (0, "")

    gfx1100 = ("size", "--rocm", "7.2", "-d", "gfx1100", "--json", GEMM)
    offline = hipmem(*gfx1100, "--offline", **env)  # offline, missing arch data is not fetched
    assert offline.returncode == 1
    assert "`hipmem rocm fetch --rocm 7.2 --arch gfx1100` brings it" in offline.stdout
    # Another arch's gemm data fetched when a query needs it: test_cache_command.py
    # (test_an_arch_removed_is_fetched_again_by_the_next_query), one download of the rocBLAS
    # package fewer here.


def test_the_download_line_names_a_few_archs_and_counts_many(tmp_path: Path) -> None:
    from hipmem.sizing.rocm.on_demand import download_line

    deb = apt.PackageFile("librocblas5", "http://x/a.deb", "a.deb", 3 << 20, "00")
    few = rocm_fetch.FetchPlan("ROCm 7.2", [deb, deb], ["gfx90a", "gfx942"], tmp_path)
    assert download_line("ROCm 7.2 is not in the cache", few) == (
        "ROCm 7.2 is not in the cache: downloading 6.0 MiB (ROCm 7.2: 2 Debian packages; "
        f"gemm data for gfx90a, gfx942 only) into {tmp_path}"
    )
    every = find_release("7.2").gemm_archs
    many = rocm_fetch.FetchPlan("hipBLASLt 7.2.4", [deb], list(every), tmp_path)
    assert f"(hipBLASLt 7.2.4: 1 Debian package; solution data for {len(every)} archs)" in (
        download_line("why", many)
    )
    none = rocm_fetch.FetchPlan("ROCm 6.4", [deb], [], tmp_path)
    assert "; no gemm data)" in download_line("why", none)
