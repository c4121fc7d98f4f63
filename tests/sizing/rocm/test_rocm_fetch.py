"""The offline ROCm fetch: releases side by side, pins, what is unpacked, a damaged cache
found and repaired, two fetches at once, permissions."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import typer

from hipmem.sizing.errors import FetchError, PinnedVersionGone
from hipmem.sizing.rocm import apt, tree_check, unpack
from hipmem.sizing.rocm import fetch as rocm_fetch
from hipmem.sizing.rocm.locator import locate
from hipmem.sizing.rocm.releases import RELEASES, Release, find_release
from tests.cli_run import hipmem_process
from tests.conftest import cli_env


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return hipmem_process(*args, timeout=600, **env)


def test_print_uris_lines_are_parsed() -> None:
    packages = find_release("7.2").packages
    listing = "\n".join(
        f"'http://deb.example/{name}_1.0-1_amd64.deb' {name}_1.0-1_amd64.deb {i + 10} "
        f"SHA256:{i:064x}"
        for i, name in enumerate(packages)
    )
    files = apt.parse_print_uris("Reading package lists...\n" + listing, packages)
    assert [file.name for file in files] == list(packages)
    assert files[0].size_bytes == 10 and files[0].version == "1.0-1"
    assert files[1].sha256 == f"{1:064x}"


def test_a_missing_package_is_named() -> None:
    with pytest.raises(FetchError, match="no package libamdhip64-dev, libc6"):
        apt.parse_print_uris(
            "'http://x/librocblas5_1_amd64.deb' librocblas5_1_amd64.deb 1 SHA256:00",
            find_release("7.2").packages,
        )


@pytest.mark.parametrize(
    ("name", "pattern", "expected"),
    [
        ("./usr/lib/x86_64-linux-gnu/librocblas.so.4.4", "./usr/lib/x86_64-linux-gnu/*.so*", True),
        ("./usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library/Kernels.so-000-gfx90a.hsaco",
         "./usr/lib/x86_64-linux-gnu/*.so*", False),
        ("./usr/include/hip/amd_detail/x.h", "./usr/include/**", True),
        ("./usr/lib/x86_64-linux-gnu/rocblas/5/library/TensileLibrary_lazy_gfx942.dat",
         "./usr/lib/x86_64-linux-gnu/rocblas/*/library/*_gfx942.dat", True),
    ],
)  # fmt: skip
def test_member_patterns_do_not_cross_directories(name: str, pattern: str, expected: bool) -> None:
    assert unpack.matches(name, pattern) is expected


def test_an_arch_a_release_has_no_gemm_data_for_is_refused_before_any_download() -> None:
    expected = r"ROCm 6\.4 as Debian builds it has no gemm data for gfx942"
    with pytest.raises(FetchError, match=expected):
        rocm_fetch.fetch("6.4", archs=["gfx942"])


def test_an_unknown_release_is_one_usage_line() -> None:
    done = hipmem("rocm", "fetch", "--rocm", "7.1")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: --rocm '7.1': hipmem knows ROCm 6.4, 7.2; did you mean 7.2? (fetch one with "
        "`hipmem rocm fetch --rocm 7.2`)"
    )


def test_a_pinned_version_gone_from_the_archive_is_one_line_naming_what_it_offers(
    rocm: Path,
) -> None:
    # The real archive index the fetch downloaded (no network): what it offers for a package,
    # against a pin it does not have.
    options = apt.apt_options(rocm_fetch.rocm_dir() / "apt")
    offered = apt.offered_versions(options, ["librocblas5"])
    assert any(entry.startswith("7.2.4-1~exp1 (experimental)") for entry in offered["librocblas5"])
    gone = replace(find_release("7.2"), pinned=(("librocblas5", "7.2.3-1~exp9"),))
    with pytest.raises(FetchError) as raised:
        apt.check_pins(gone, offered)
    assert str(raised.value) == (
        "ROCm 7.2: Debian's archive no longer offers librocblas5 7.2.3-1~exp9 (it offers "
        f"{', '.join(offered['librocblas5'])}); hipmem pins that version and fetches no other"
    )


def test_both_releases_sit_side_by_side_with_libraries_and_gemm_data_but_no_gpu_code(
    rocm64: Path, rocm72: Path
) -> None:
    for release, root in (("6.4", rocm64), ("7.2", rocm72)):
        found = locate(rocm=release)
        assert found.rocm == release and found.lib_dir.is_relative_to(root)
        assert found.loader is not None and found.loader.is_file()
        assert found.tensile_dir is not None and any(found.tensile_dir.glob("*_gfx90a.dat"))
        assert [p for p in root.rglob("*") if p.suffix in (".co", ".hsaco")] == []
        assert not (root.parent / "debs").exists()  # dropped after a verified unpack
    assert locate(rocm="6.4").hip_soname == "libamdhip64.so.6"
    assert locate(rocm="7.2").hip_soname == "libamdhip64.so.7"
    assert any(locate(rocm="7.2").tensile_dir.glob("*_gfx942.dat"))  # type: ignore[union-attr]


def test_the_manifest_records_every_file_with_size_and_hash(rocm72: Path) -> None:
    offline = rocm_fetch.load_offline("7.2")
    assert offline is not None
    library = "usr/lib/x86_64-linux-gnu/libroctx64.so.4.1.0"
    size, digest, package = offline.files[library]
    assert (package, size) == ("libroctx64-4", (rocm72 / library).stat().st_size)
    assert digest == apt.sha256(rocm72 / library)
    assert offline.packages["librocblas5"] == "7.2.4-1~exp1"


def test_the_gpu_code_takes_no_disk(rocm72: Path) -> None:
    rocsolver = next((rocm72 / "usr/lib/x86_64-linux-gnu").glob("librocsolver.so.0.*"))
    on_disk = rocsolver.stat().st_blocks * 512
    assert on_disk < rocsolver.stat().st_size / 10  # 97% of it is .hip_fatbin, punched out


def test_a_complete_fetch_needs_no_network(rocm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object) -> None:
        raise AssertionError("a complete fetch must not resolve packages again")

    monkeypatch.setattr(rocm_fetch, "resolve_packages", no_network)
    done = rocm_fetch.load_offline("7.2")
    assert done is not None
    again = rocm_fetch.fetch("7.2", archs=done.archs[:1])
    assert again.root == done.root


def _mirror_cache(tmp_path: Path, release: str) -> Path:
    """A cache of its own whose folders are its own and whose files link to the real one's, so
    a test can remove, replace or re-fetch a file (hipmem replaces, never writes into, a cached
    file) without touching the real cache. A linked folder would let a removal through."""
    real = rocm_fetch.offline_dir(release)
    mine = tmp_path / "cache" / "rocm" / release
    (mine / "root" / "usr").mkdir(parents=True)
    (mine / "root" / "usr" / "include").symlink_to(real / "root" / "usr" / "include")
    lib = real / "root" / rocm_fetch.LIB_SUBDIR
    for folder, _, files in os.walk(lib):
        ours = mine / "root" / rocm_fetch.LIB_SUBDIR / Path(folder).relative_to(lib)
        ours.mkdir(parents=True, exist_ok=True)
        for name in files:
            (ours / name).symlink_to(Path(folder, name))
    shutil.copy(real / rocm_fetch.MANIFEST_NAME, mine / rocm_fetch.MANIFEST_NAME)
    if (real / tree_check.VERIFIED_NAME).is_file():  # the files' stamps hold through the links
        shutil.copy(real / tree_check.VERIFIED_NAME, mine / tree_check.VERIFIED_NAME)
    if not (tmp_path / "cache" / "rocm" / "apt").exists():
        shutil.copytree(rocm_fetch.rocm_dir() / "apt", tmp_path / "cache" / "rocm" / "apt")
    return tmp_path / "cache"


def test_a_cut_short_manifest_is_one_line_saying_to_fetch(rocm72: Path, tmp_path: Path) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    manifest = cache / "rocm" / "7.2" / rocm_fetch.MANIFEST_NAME
    manifest.write_text(manifest.read_text()[:1000])
    # Offline: a size query would otherwise repair it (tests/sizing/rocm/test_fetch_on_demand.py).
    done = hipmem("size", "--offline", "--rocm", "7.2", "-d", "MI210", "dgetrf:m=8,n=8",
                  HIPMEM_CACHE_DIR=str(cache))  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: the cached ROCm 7.2 in {manifest.parent} is incomplete or damaged; "
        "run `hipmem rocm fetch --rocm 7.2` to repair it"
    ]


def test_by_default_a_release_being_fetched_is_passed_over(
    rocm64: Path, rocm72: Path, tmp_path: Path
) -> None:
    _mirror_cache(tmp_path, "6.4")
    cache = _mirror_cache(tmp_path, "7.2")
    manifest = cache / "rocm" / "7.2" / rocm_fetch.MANIFEST_NAME
    manifest.write_text(manifest.read_text()[:1000])  # as a fetch interrupted midway leaves it
    done = hipmem("size", "-d", "MI210", "--json", "dgetrs:n=1024,nrhs=1",
                  HIPMEM_CACHE_DIR=str(cache))  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert (payload["library"]["rocm"], payload["session_bytes"]) == ("6.4", 64)
    asked = hipmem("size", "--rocm", "7.2", "-d", "MI210", "dgetrs:n=1024,nrhs=1",
                   HIPMEM_CACHE_DIR=str(cache), HIPMEM_OFFLINE="1")  # fmt: skip
    assert asked.returncode == 1 and "run `hipmem rocm fetch --rocm 7.2`" in asked.stderr


def test_a_truncated_library_is_found_and_the_fetch_repairs_only_its_package(
    rocm72: Path, tmp_path: Path
) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    lib = cache / "rocm" / "7.2" / "root" / rocm_fetch.LIB_SUBDIR
    damaged = lib / "libroctx64.so.4.1.0"
    content = damaged.read_bytes()
    damaged.unlink()
    damaged.write_bytes(content[: len(content) // 2])
    done = hipmem("size", "--rocm", "7.2", "-d", "MI210", "dgetrf:m=8,n=8",
                  HIPMEM_CACHE_DIR=str(cache), HIPMEM_OFFLINE="1")  # fmt: skip
    assert done.returncode == 1
    assert "libroctx64.so.4.1.0 changed since it was fetched" in done.stderr
    assert "run `hipmem rocm fetch --rocm 7.2` to repair it" in done.stderr
    # ROCm's repair is the point; the mirror holds no hipBLASLt build, which would download
    fetched = hipmem(
        "rocm", "fetch", "--rocm", "7.2", "--no-hipblaslt", HIPMEM_CACHE_DIR=str(cache)
    )
    assert fetched.returncode == 0, fetched.stderr
    assert damaged.read_bytes() == content
    assert (lib / "librocblas.so.5.2").is_symlink()  # the other packages were left alone
    again = hipmem("size", "--rocm", "7.2", "-d", "MI210", "dgetrs:n=1024,nrhs=1", "--json",
                   HIPMEM_CACHE_DIR=str(cache))  # fmt: skip
    assert json.loads(again.stdout)["session_bytes"] == 1_312_000


def test_a_flipped_byte_is_found_by_the_fetch_and_repaired(rocm72: Path, tmp_path: Path) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    (cache / "rocm" / "debian-sid").mkdir()  # an earlier layout's tree
    damaged = cache / "rocm" / "7.2" / "root" / rocm_fetch.LIB_SUBDIR / "libroctx64.so.4.1.0"
    content = bytearray(damaged.read_bytes())
    damaged.unlink()
    content[len(content) // 2] ^= 0xFF  # same size: only the hash tells
    damaged.write_bytes(bytes(content))
    # ROCm's repair is the point; the mirror holds no hipBLASLt build, which would download
    fetched = hipmem(
        "rocm", "fetch", "--rocm", "7.2", "--no-hipblaslt", HIPMEM_CACHE_DIR=str(cache)
    )
    assert fetched.returncode == 0, fetched.stderr
    restored = damaged.read_bytes()
    assert restored != bytes(content) and len(restored) == len(content)
    assert apt.sha256(damaged) == apt.sha256(
        rocm_fetch.offline_dir("7.2") / "root" / rocm_fetch.LIB_SUBDIR / "libroctx64.so.4.1.0"
    )
    assert "debian-sid is hipmem's earlier cache layout, no longer read: delete it" in (
        fetched.stderr.replace("\n", "")
    )


def test_a_second_fetch_waits_for_the_first_with_a_message(rocm72: Path, tmp_path: Path) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    lock_path = cache / "rocm" / "fetch.lock"
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a first fetch holds the cache
        second = subprocess.Popen(
            [sys.executable, "-m", "hipmem.cli.main", "rocm", "fetch", "--rocm", "7.2",
             "--no-hipblaslt"],  # the lock is the point, not a hipBLASLt download
            stderr=subprocess.PIPE, text=True, env=cli_env(HIPMEM_CACHE_DIR=str(cache)),
        )  # fmt: skip
        assert second.stderr is not None
        first_line = second.stderr.readline()
        assert "another hipmem rocm fetch is using" in first_line and "waiting" in first_line
        time.sleep(0.5)
        assert second.poll() is None  # still waiting while the lock is held
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert second.wait(timeout=300) == 0, second.stderr.read()
    second.stderr.close()


def test_every_release_names_a_stand_in_for_its_hip_runtime() -> None:
    from hipmem.sizing.worker.shim_build import supported_sonames

    assert {release.hip_soname for release in RELEASES} <= set(supported_sonames())


def _gone_64(name: str, parameter: str = "rocm") -> Release:
    """ROCm 6.4 as if the archive had moved on: rocBLAS pinned to a version it never had."""
    real = find_release(name)
    if real.name != "6.4":
        return real
    return replace(real, pinned=(("librocblas4", "6.4.4-9"), *real.pinned[1:]))


def test_of_several_releases_one_the_archive_no_longer_offers_is_skipped(
    rocm64: Path, rocm72: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from hipmem.cli import cmd_rocm

    monkeypatch.setattr(rocm_fetch, "find_release", _gone_64)
    app = typer.Typer()
    cmd_rocm.register(app)
    both = CliRunner().invoke(app, ["rocm", "fetch", "--rocm", "6.4,7.2"])
    assert both.exit_code == 0, both.output
    assert "Debian's archive no longer offers librocblas4 6.4.4-9 (it offers 6.4.4-4 (sid))" in (
        both.output.replace("\n", " ")
    )
    assert "ROCm 7.2 ready in" in both.output or "ROCm 7.2 already in the cache, intact" in (
        both.output
    )
    alone = CliRunner().invoke(app, ["rocm", "fetch", "--rocm", "6.4"])
    assert isinstance(alone.exception, PinnedVersionGone)
    monkeypatch.undo()
    assert rocm_fetch.load_offline("6.4") is not None  # the cached 6.4 was left as it was
