"""Caches that heal: what hipmem builds into its cache is checked on every use and rebuilt when
damaged, saying so in one line; a fetched tree with a link planted in it is repaired without
following the link out of the cache. Each test runs the real `hipmem` (or the real fetch) on a
cache of its own (HIPMEM_CACHE_DIR), damaging copies, never the user's cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hipmem._core import build_cache
from hipmem.sizing.rocm import fetch as rocm_fetch
from hipmem.sizing.worker.shim_build import build_shim
from tests.cli_run import hipmem_process
from tests.sizing.rocm.test_rocm_fetch import _mirror_cache

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "tests/data/snapshots/train-default.pickle.gz"


def hipmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return hipmem_process(*args, timeout=600, cwd=REPO, **env)


def _truncate(path: Path) -> None:
    with path.open("r+b") as stream:
        stream.truncate(path.stat().st_size // 2)


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_a_truncated_replay_core_is_rebuilt_in_one_line_not_a_sigbus(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    args = ("replay", "samples/serve-first-2000.csv.gz", "-r", "host", "--json")
    first = hipmem(*args, HIPMEM_CACHE_DIR=cache)
    assert first.returncode == 0, first.stderr
    (library,) = (tmp_path / "cache" / "replay-core").glob("*/replay_core.so")
    _truncate(library)
    again = hipmem(*args, HIPMEM_CACHE_DIR=cache)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)  # it answered
    warnings = [ln for ln in again.stderr.splitlines() if ln.startswith("Warning:")]
    assert len(warnings) == 1 and "replay core" in warnings[0]
    assert "replay_core.so truncated" in warnings[0] and "building it again" in warnings[0]
    assert build_cache.folder_damage(library.parent) is None


def test_a_damaged_hip_stand_in_is_rebuilt_and_a_planted_link_never_loaded(
    rocm72: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(tmp_path / "cache"))
    include = rocm72 / "usr" / "include"
    built = build_shim(include, "libamdhip64.so.7")
    library = built / "libamdhip64.so.7"
    whole = library.read_bytes()
    _truncate(library)
    assert build_shim(include, "libamdhip64.so.7") == built
    assert library.read_bytes() == whole
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [
        f"Warning: the virtual GPU (libamdhip64.so.7) in {built} is damaged "
        "(libamdhip64.so.7 truncated); building it again"
    ]
    # A link planted where the library was, even to the same bytes elsewhere, is rebuilt.
    outside = tmp_path / "elsewhere.so"
    outside.write_bytes(whole)
    library.unlink()
    library.symlink_to(outside)
    build_shim(include, "libamdhip64.so.7")
    assert not library.is_symlink() and library.read_bytes() == whole
    assert "replaced by a link" in capsys.readouterr().err


def test_a_truncated_virtual_gpu_is_rebuilt_and_the_gate_still_answers(
    torch211: object, tmp_path: Path
) -> None:
    from hipmem.replay.pytorch import fetch as torch_fetch

    cache = tmp_path / "cache"
    shutil.copytree(torch_fetch.torch_dir() / "2.11.0", cache / "torch" / "2.11.0")
    args = ("check", "--from-snapshot", str(SNAPSHOT), "--alloc-conf",
            "expandable_segments:True", "--device-memory", "560MiB", "--torch", "2.11")  # fmt: skip
    first = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    # The first build is said before it starts (a line wrapped as prose), then the verdict.
    assert first.returncode == 1 and first.stderr.startswith("building the virtual GPU")
    failed = first.stderr[first.stderr.index("\nFAIL ") :]
    (driver,) = (cache / "vcuda").glob("*/vcuda_replay")
    _truncate(driver)
    again = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    assert again.returncode == 1
    assert again.stderr.startswith("Warning: the virtual GPU of PyTorch 2.11.0")
    said = " ".join(again.stderr.split())
    assert "(vcuda_replay truncated); building it again" in said
    assert again.stderr[again.stderr.index("\nFAIL ") :] == failed  # the same FAIL, byte for byte


def test_a_link_planted_in_a_fetched_tree_is_not_followed_by_the_repair(
    rocm72: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    monkeypatch.setenv("HIPMEM_CACHE_DIR", str(cache))
    manifest = cache / "rocm" / "7.2" / rocm_fetch.MANIFEST_NAME
    recorded = json.loads(manifest.read_text())
    planted = tmp_path / "planted.txt"
    planted.write_text("not a library\n")
    library = cache / "rocm/7.2/root/usr/lib/x86_64-linux-gnu/libfmt.so.11.1.1"
    library.unlink()
    library.symlink_to(planted)
    with pytest.raises(rocm_fetch.LibraryNotFound, match=r"libfmt\.so\.11\.1\.1 changed"):
        rocm_fetch.load_offline("7.2")
    repaired = rocm_fetch.fetch("7.2", [], by=rocm_fetch.BY_COMMAND)
    assert repaired.changed
    assert planted.read_text() == "not a library\n"  # never written through
    assert not library.is_symlink()
    size, digest = recorded["files"]["usr/lib/x86_64-linux-gnu/libfmt.so.11.1.1"][:2]
    assert library.stat().st_size == size
    after = json.loads(manifest.read_text())
    assert after["packages"] == recorded["packages"] and after["archs"] == recorded["archs"]
    assert rocm_fetch.load_offline("7.2") is not None
    assert not rocm_fetch.fetch("7.2", []).changed  # intact now: nothing to do
    assert digest == after["files"]["usr/lib/x86_64-linux-gnu/libfmt.so.11.1.1"][1]


def test_a_build_without_a_record_is_built_quietly_and_a_cut_record_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "builds" / "key"
    calls: list[Path] = []

    def make(work: Path) -> None:
        calls.append(work)
        (work / "lib.so").write_bytes(b"x" * 100)
        (work / "lib-link.so").symlink_to("lib.so")

    build_cache.built_folder(out, make, what="a test build")
    assert len(calls) == 1 and build_cache.folder_damage(out) is None
    build_cache.built_folder(out, make, what="a test build")
    assert len(calls) == 1  # intact: used as it is
    manifest = out / build_cache.BUILD_MANIFEST
    manifest.write_text(manifest.read_text()[:20])
    build_cache.built_folder(out, make, what="a test build")
    assert len(calls) == 2 and build_cache.folder_damage(out) is None
    assert "build.json unreadable" in capsys.readouterr().err
    (out / "lib-link.so").unlink()
    (out / "lib-link.so").symlink_to("/etc/passwd")
    assert build_cache.folder_damage(out) == "lib-link.so changed"


LIB = Path("usr/lib/x86_64-linux-gnu")


def _own_copy(cache: Path, relative: Path) -> Path:
    """The mirror's link replaced by a copy of its own (holes kept), to damage."""
    path = cache / "rocm" / "7.2" / "root" / relative
    real = path.resolve()
    path.unlink()
    subprocess.run(["cp", "--sparse=always", str(real), str(path)], check=True)
    return path


def _flip_keeping_size_and_mtime(path: Path, offset: int) -> None:
    """Bytes inverted in place, the modification time set back: what `ls -l` shows is as before."""
    before = path.stat()
    with path.open("r+b") as stream:
        stream.seek(offset)
        chunk = stream.read(4)
        stream.seek(offset)
        stream.write(bytes(b ^ 0xFF for b in chunk))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_library_with_flipped_bytes_and_its_mtime_restored_is_caught_on_the_next_size(
    rocm72: Path, tmp_path: Path
) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    library = _own_copy(cache, LIB / "librocblas.so.5.2")
    env = {"HIPMEM_CACHE_DIR": str(cache), "HIPMEM_OFFLINE": "1"}
    args = ("size", "--rocm", "7.2", "-d", "MI300X", "rocsolver_dgetrf:m=4096,n=4096")
    for _ in range(3):  # builds the stand-in; answers and keeps; answers from what it kept
        done = hipmem(*args, **env)
        assert done.returncode == 0 and "17,351,936" in done.stdout, done.stderr
    assert len(list((cache / "answers").glob("*.json"))) == 1
    _flip_keeping_size_and_mtime(library, 10_000)
    said = (
        "Error: the cached ROCm 7.2 is damaged (usr/lib/x86_64-linux-gnu/librocblas.so.5.2 "
        "changed since it was fetched); run `hipmem rocm fetch --rocm 7.2` to repair it"
    )
    # The kept answer is not given (the library's stamp is part of its key): the query
    # checks the library, and says so in one line, for size and check alike.
    for command in (args, ("check", *args[1:], "--value", "32MiB")):
        damaged = hipmem(*command, **env)
        assert damaged.returncode == 1
        assert (damaged.stdout, damaged.stderr.splitlines()) == ("", [said])
    verify = hipmem("cache", "verify", HIPMEM_CACHE_DIR=str(cache))
    assert verify.returncode == 1
    assert "is damaged (file usr/lib/x86_64-linux-gnu/librocblas.so.5.2)" in verify.stderr


def test_a_damaged_library_is_fetched_again_by_the_query_saying_which(
    rocm72: Path, tmp_path: Path
) -> None:
    cache = _mirror_cache(tmp_path, "7.2")
    library = _own_copy(cache, LIB / "libroctx64.so.4.1.0")  # its package is 14 KB
    whole = library.read_bytes()
    _flip_keeping_size_and_mtime(library, 100)
    args = ("size", "--rocm", "7.2", "-d", "MI300X", "--json", "rocsolver_dgetrf:m=4096,n=4096")
    done = hipmem(*args, HIPMEM_CACHE_DIR=str(cache))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["session_bytes"] == 17_351_936
    first = " ".join(done.stderr.split())  # a status line wraps as prose at 80 columns
    assert first.startswith(
        "the cached ROCm 7.2 is damaged (usr/lib/x86_64-linux-gnu/libroctx64.so.4.1.0 changed "
        "since it was fetched): downloading "
    )
    assert "(ROCm 7.2: 1 Debian package;" in first
    assert library.read_bytes() == whole


def test_a_long_build_is_said_before_it_starts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first build of the virtual GPU of a PyTorch release takes minutes on a shared
    machine: it is said in one line first (through the front end's callback), and never
    again while the build is whole; a build not marked long is built quietly."""
    said: list[str] = []
    monkeypatch.setattr(build_cache, "_announcer", [said.append])

    def make(work: Path) -> None:
        (work / "lib.so").write_bytes(b"x")

    out = tmp_path / "builds" / "long"
    build_cache.built_folder(out, make, what="the virtual GPU of PyTorch 9.9", announced=True)
    build_cache.built_folder(out, make, what="the virtual GPU of PyTorch 9.9", announced=True)
    build_cache.built_folder(tmp_path / "builds" / "quick", make, what="a quick one")
    assert said == [f"building the virtual GPU of PyTorch 9.9, once: the cache keeps it ({out})"]
